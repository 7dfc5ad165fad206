//! `run DIR --devices LIST`: every quantized layer of a checkpoint split into one shard per
//! listed device the way engines split it (column-parallel q/k/v/gate/up over N,
//! row-parallel o/down over K; see `fp8_linear::tensor_parallel`), each shard's weights cut
//! from the layer's, built with the kernel selected for its own device and run there on
//! random activations; the outputs are put together on the host (columns, or a sum) and
//! checked, for a sample of layers, against the gathered f64 references of the shards. The
//! report gives every shard's kernel and time and, per rank, the time of the whole model's
//! shards on its device. Shards run one after the other (each timed alone, as the median of
//! its calls): the per-rank totals show the balance between devices, not a concurrent run.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use fp8_linear::cpu::reference::rel_frobenius;
use fp8_linear::tensor_parallel::{shard, Shard, Split};
use fp8_linear::{Linear, Options, Registry, Target};
use fp8_linear_checkpoint::{Checkpoint, LayerTensors, QuantLayer};
use serde_json::{json, Value};

use crate::check::{count_nan, tolerance, Reference};
use crate::error::{CliError, Kind};
use crate::executor::Executor;
use crate::layer_reference::reference_rows;
use crate::model_run::{check_set, RunSpec};
use crate::place::{choose, Place};
use crate::run_layer::{gather_rows, random_activations, sample_rows};
use crate::sizes::try_filled;

/// One device of `--devices`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum DeviceSpec {
    /// The host CPU (`cpu`).
    Cpu,
    /// CUDA GPU N.
    Gpu(u32),
}

/// The devices of `--devices`, rank by rank.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Devices(pub Vec<DeviceSpec>);

/// Parses `--devices`: a comma-separated list of GPU ordinals or `cpu`, at least two
/// (`0,1`; `0,0` puts both shards on GPU 0; `cpu,cpu` runs the shards on the host).
pub fn parse_devices(s: &str) -> Result<Devices, String> {
    let v: Result<Vec<DeviceSpec>, String> = s
        .split(',')
        .map(|d| {
            let d = d.trim();
            if d.eq_ignore_ascii_case("cpu") {
                return Ok(DeviceSpec::Cpu);
            }
            d.parse::<u32>().map(DeviceSpec::Gpu).map_err(|_| {
                format!("--devices: `{d}` is neither a GPU ordinal (0, 1, ...) nor `cpu`")
            })
        })
        .collect();
    let v = v?;
    if v.len() < 2 {
        return Err(format!(
            "--devices needs at least two entries, one per shard (got `{s}`); use --gpu N or \
             --cpu for a single device"
        ));
    }
    if v.len() > 64 {
        return Err(format!(
            "--devices lists {} entries; at most 64 shards",
            v.len()
        ));
    }
    Ok(Devices(v))
}

/// The place of every rank: one target per distinct device, shared by the ranks on it.
pub fn open_places(Devices(specs): &Devices) -> Result<Vec<Place>, CliError> {
    let mut opened: Vec<(DeviceSpec, Target)> = Vec::new();
    let mut places = Vec::with_capacity(specs.len());
    for &d in specs.iter() {
        let target = match opened.iter().find(|(s, _)| *s == d) {
            Some((_, t)) => t.clone(),
            None => {
                let t = match d {
                    DeviceSpec::Cpu => Target::cpu(),
                    DeviceSpec::Gpu(n) => gpu_target(n)?,
                };
                opened.push((d, t.clone()));
                t
            }
        };
        let cpu_reason = (d == DeviceSpec::Cpu).then(|| "--devices lists cpu".to_string());
        places.push(Place { target, cpu_reason });
    }
    Ok(places)
}

#[cfg(feature = "cuda")]
fn gpu_target(n: u32) -> Result<Target, CliError> {
    Target::cuda(n).map_err(|e| CliError::runtime(format!("--devices: GPU {n}: {e}")))
}

#[cfg(not(feature = "cuda"))]
fn gpu_target(n: u32) -> Result<Target, CliError> {
    Err(CliError::runtime(format!(
        "--devices: GPU {n}: this build has no CUDA support (feature `cuda` off)"
    )))
}

/// One shard's outcome.
struct ShardResult {
    rank: usize,
    n: usize,
    k: usize,
    notes: Vec<String>,
    kernel: Result<&'static str, String>,
    /// Median seconds per call.
    seconds: f64,
    failure: Option<String>,
    nan_outputs: usize,
}

impl ShardResult {
    fn ran(&self) -> bool {
        self.kernel.is_ok() && self.failure.is_none()
    }
}

/// One layer's outcome.
struct LayerResult {
    name: String,
    split: Split,
    n: usize,
    k: usize,
    /// Why the layer could not be split.
    error: Option<String>,
    shards: Vec<ShardResult>,
    /// Relative error of the gathered output against the gathered shard references, and
    /// its tolerance, for checked layers.
    check: Option<(f64, f64)>,
    reference: Option<&'static str>,
}

impl LayerResult {
    fn ok(&self) -> bool {
        self.error.is_none()
            && self.shards.iter().all(|s| s.ran() && s.nan_outputs == 0)
            && self.check.is_none_or(|(e, tol)| e < tol)
    }

    fn outcome(&self) -> Option<Kind> {
        if self.shards.iter().any(|s| s.failure.is_some()) {
            Some(Kind::Runtime)
        } else if self.error.is_some() || self.shards.iter().any(|s| s.kernel.is_err()) {
            Some(Kind::NoKernel)
        } else if !self.ok() {
            Some(Kind::CheckFailed)
        } else {
            None
        }
    }
}

/// The report of a tensor-parallel checkpoint run.
pub struct TpReport {
    dir: String,
    devices: Vec<String>,
    m: usize,
    iters: usize,
    layers: Vec<LayerResult>,
    wall_seconds: f64,
}

impl TpReport {
    /// The exit code: 4 when a shard failed to build or run, 3 when a layer cannot be split
    /// or a shard has no kernel, 1 when a checked layer is off its reference or an output
    /// holds NaN (the highest wins), else 0.
    pub fn outcome(&self) -> Option<Kind> {
        crate::error::worst(self.layers.iter().filter_map(LayerResult::outcome))
    }

    /// Per rank: (summed median seconds of its shards, shards run, per kernel count).
    fn per_rank(&self) -> Vec<(f64, usize, BTreeMap<&'static str, usize>)> {
        let mut v = vec![(0.0, 0, BTreeMap::new()); self.devices.len()];
        for l in &self.layers {
            for s in l.shards.iter().filter(|s| s.ran()) {
                let r = &mut v[s.rank];
                r.0 += s.seconds;
                r.1 += 1;
                if let Ok(k) = s.kernel {
                    *r.2.entry(k).or_default() += 1;
                }
            }
        }
        v
    }

    /// Human-readable report.
    pub fn text(&self) -> String {
        let mut s = format!(
            "checkpoint: {}\ndevices:    {} (tensor-parallel over {} ranks)\ninput:      M = {} tokens of random activations; median of {} timed calls per shard\n\n",
            self.dir,
            self.devices
                .iter()
                .enumerate()
                .map(|(r, d)| format!("rank {r} = {d}"))
                .collect::<Vec<_>>()
                .join(", "),
            self.devices.len(),
            self.m,
            self.iters
        );
        for l in &self.layers {
            s += &format!("{} ({}-parallel, N={} K={})", l.name, l.split, l.n, l.k);
            if let Some(e) = &l.error {
                s += &format!(": CANNOT SPLIT: {e}\n");
                continue;
            }
            match l.check {
                Some((e, tol)) => {
                    s += &format!(
                    ": checked against the gathered {} references, {e:.3e} (< {tol:.0e}) -> {}\n",
                    l.reference.unwrap_or("-"),
                    if l.ok() { "ok" } else { "FAILED" }
                )
                }
                None => s += "\n",
            }
            for sh in &l.shards {
                let what = match (&sh.kernel, &sh.failure) {
                    (_, Some(f)) => format!("FAILED: {f}"),
                    (Err(e), _) => format!("NO KERNEL: {e}"),
                    (Ok(k), None) => format!("{k:<18} {:>9.3} ms", sh.seconds * 1e3),
                };
                s += &format!("  rank {}: N={} K={}  {what}\n", sh.rank, sh.n, sh.k);
                for n in &sh.notes {
                    s += &format!("    note: {n}\n");
                }
            }
        }
        s += "\nper rank (the model's shards on each device, one forward of M tokens):\n";
        for (r, (secs, count, kernels)) in self.per_rank().iter().enumerate() {
            s += &format!(
                "  rank {r} ({}): {:.3} ms over {count} shards [{}]\n",
                self.devices[r],
                secs * 1e3,
                kernels
                    .iter()
                    .map(|(k, n)| format!("{k} x{n}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        s += &format!(
            "wall time {:.2} s\nresult: {}\n",
            self.wall_seconds,
            if self.outcome().is_none() {
                "ok"
            } else {
                "FAILED"
            }
        );
        s
    }

    /// Machine-readable report.
    pub fn json(&self) -> Value {
        json!({
            "checkpoint": self.dir,
            "devices": self.devices,
            "tp": self.devices.len(),
            "m": self.m,
            "iters": self.iters,
            "layers": self.layers.iter().map(|l| json!({
                "name": l.name, "split": l.split.name(), "n": l.n, "k": l.k,
                "error": l.error,
                "reference": l.reference,
                "rel_error": l.check.map(|c| c.0),
                "tolerance": l.check.map(|c| c.1),
                "ok": l.ok(),
                "shards": l.shards.iter().map(|s| json!({
                    "rank": s.rank, "n": s.n, "k": s.k,
                    "kernel": s.kernel.as_ref().ok(),
                    "error": s.kernel.as_ref().err().or(s.failure.as_ref()),
                    "seconds": s.seconds,
                    "nan_outputs": s.nan_outputs,
                    "notes": s.notes,
                })).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
            "ranks": self.per_rank().iter().enumerate().map(|(r, (secs, count, kernels))| json!({
                "rank": r,
                "device": self.devices[r],
                "shards": count,
                "seconds_per_forward": secs,
                "kernels": kernels,
            })).collect::<Vec<_>>(),
            "wall_seconds": self.wall_seconds,
            "ok": self.outcome().is_none(),
        })
    }
}

/// A shard's weights as the checkpoint reader hands a layer's: codes, scales, the static
/// input scale (the whole layer's), bias.
fn shard_tensors<'a>(
    s: &Shard,
    w: &'a fp8_linear::tensor_parallel::ShardWeights,
    whole: &LayerTensors<'_>,
) -> LayerTensors<'a> {
    LayerTensors {
        weight: &w.codes,
        shape: [s.config.n, s.config.k],
        scales: w.scales.clone(),
        scale_shape: s.config.weight_scale_shape(),
        input_scale: whole.input_scale,
        bias: w.bias.clone(),
    }
}

/// What one layer's run needs from the caller.
struct LayerRun<'r> {
    registry: &'r Registry,
    places: &'r [Place],
    execs: &'r mut [Box<dyn Executor>],
    m: usize,
    iters: usize,
    options: &'r Options,
}

fn run_layer(
    ck: &Checkpoint,
    l: &QuantLayer,
    run: &mut LayerRun<'_>,
    check: bool,
) -> Result<LayerResult, CliError> {
    let c = l.config;
    let split = Split::of_layer(&l.name);
    let tp = run.places.len();
    let mut res = LayerResult {
        name: l.name.clone(),
        split,
        n: c.n,
        k: c.k,
        error: None,
        shards: Vec::with_capacity(tp),
        check: None,
        reference: None,
    };
    let shards = match shard(&c, split, tp) {
        Ok(s) => s,
        Err(e) => {
            res.error = Some(e.to_string());
            return Ok(res);
        }
    };
    let tensors = ck
        .layer_tensors(l)
        .map_err(crate::error::checkpoint_error)?;
    let m = run.m;
    let x = random_activations(&c, m)?;
    let rows = sample_rows(m);
    let mut out = try_filled("output", m.saturating_mul(c.n), 0f32)?;
    let mut want = vec![0f64; rows.len() * c.n];
    let mut labels: Vec<&'static str> = Vec::new();
    let bad = |e: fp8_linear::tensor_parallel::ShardError| {
        CliError::runtime(format!("layer {}: {e}", l.name))
    };
    for s in &shards {
        let place = &run.places[s.rank];
        let mut r = ShardResult {
            rank: s.rank,
            n: s.config.n,
            k: s.config.k,
            notes: s.notes.iter().map(|n| n.to_string()).collect(),
            kernel: Err(String::new()),
            seconds: 0.0,
            failure: None,
            nan_outputs: 0,
        };
        let w = s
            .weights(&c, tensors.weight, &tensors.scales, tensors.bias.as_deref())
            .map_err(bad)?;
        let st = shard_tensors(s, &w, &tensors);
        let choice = match choose(
            run.registry,
            place,
            &s.config,
            m,
            None,
            &run.options.overrides,
        ) {
            Ok(choice) => choice,
            Err(e) => {
                r.kernel = Err(e.message);
                res.shards.push(r);
                continue;
            }
        };
        r.kernel = Ok(choice.entry.name);
        let built = Linear::with_plan(
            choice.plan,
            &place.target,
            &s.config,
            &st.view(),
            &run.options.kernel,
        );
        let mut linear = match built {
            Ok(lin) => lin,
            Err(e) => {
                r.failure = Some(format!("building {}: {e}", choice.entry.name));
                res.shards.push(r);
                continue;
            }
        };
        let xs = s.input(&x, m, c.k).map_err(bad)?;
        let mut part = try_filled("shard output", m.saturating_mul(s.config.n), f32::NAN)?;
        let exec = &mut run.execs[s.rank];
        let mut times = Vec::with_capacity(run.iters);
        for i in 0..=run.iters {
            match exec.forward(&mut linear, &s.config, &xs, m, &mut part) {
                Ok(secs) if i > 0 => times.push(secs),
                Ok(_) => {}
                Err(e) => {
                    r.failure = Some(e.message);
                    break;
                }
            }
        }
        if r.failure.is_some() {
            res.shards.push(r);
            continue;
        }
        times.sort_by(f64::total_cmp);
        r.seconds = times[times.len() / 2];
        r.nan_outputs = count_nan(&part);
        s.gather(&part, m, &mut out, c.n).map_err(bad)?;
        if check {
            let refr = Reference::for_kernel(
                linear.entry_for(m).expect("the plan serves every M"),
                &s.config,
            );
            let part_want = reference_rows(&refr.config, &st, &xs, &rows)
                .map_err(|e| CliError::runtime(format!("layer {}: {e}", l.name)))?;
            s.gather(&part_want, rows.len(), &mut want, c.n)
                .map_err(bad)?;
            if !labels.contains(&refr.label) {
                labels.push(refr.label);
            }
        }
        res.shards.push(r);
    }
    if check && res.shards.iter().all(ShardResult::ran) {
        let got = gather_rows(&out, c.n, &rows);
        res.check = Some((rel_frobenius(&got, &want), tolerance(c.output_dtype)));
        res.reference = match labels.as_slice() {
            [one] => Some(one),
            _ => Some("mixed"),
        };
    }
    Ok(res)
}

/// Runs every layer (or the `--only` ones) of the checkpoint at `dir` split over `places`
/// (rank r on `places[r]`), with the kernels `registry` selects for each device.
pub fn run(
    dir: &Path,
    registry: &Registry,
    places: &[Place],
    spec: &RunSpec<'_>,
    options: &Options,
    quiet: bool,
) -> Result<TpReport, CliError> {
    let wall = Instant::now();
    let ck = Checkpoint::open(dir).map_err(crate::error::checkpoint_error)?;
    let layers = crate::model_run::pick_layers(&ck, dir, spec.only)?;
    for l in &layers {
        crate::sizes::check_layer(&format!("run: layer {}", l.name), &l.config, &[spec.m])?;
    }
    let to_check = check_set(&layers, spec.check);
    let mut execs: Vec<Box<dyn Executor>> = places.iter().map(Place::executor).collect();
    let mut run = LayerRun {
        registry,
        places,
        execs: &mut execs,
        m: spec.m,
        iters: spec.iters.max(1),
        options,
    };
    let bar = crate::progress::bar(layers.len() as u64, "layers", quiet);
    let mut results = Vec::with_capacity(layers.len());
    for (i, l) in layers.iter().enumerate() {
        bar.set_message(l.name.clone());
        results.push(run_layer(&ck, l, &mut run, to_check.contains(&i))?);
        bar.inc(1);
    }
    bar.finish_and_clear();
    Ok(TpReport {
        dir: dir.display().to_string(),
        devices: places.iter().map(|p| p.device().to_string()).collect(),
        m: spec.m,
        iters: spec.iters.max(1),
        layers: results,
        wall_seconds: wall.elapsed().as_secs_f64(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_parse_or_name_the_problem() {
        assert_eq!(
            parse_devices("0,1").unwrap().0,
            vec![DeviceSpec::Gpu(0), DeviceSpec::Gpu(1)]
        );
        assert_eq!(
            parse_devices("cpu, CPU").unwrap().0,
            vec![DeviceSpec::Cpu, DeviceSpec::Cpu]
        );
        assert!(parse_devices("0").unwrap_err().contains("at least two"));
        assert!(parse_devices("0,x").unwrap_err().contains("`x`"));
        assert!(parse_devices("0,-1").unwrap_err().contains("`-1`"));
    }
}
