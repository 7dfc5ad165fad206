//! `run <dir>`: build every layer of a checkpoint on a device, process its weights, run it on
//! random activations, check a sample of layers against the f64 reference, and report the
//! time per kernel and the whole model's linear time per token.
//!
//! Layers are built, timed and dropped one at a time, so host memory stays bounded by the
//! largest layer whatever the model size. Everything goes through `fp8_linear::Linear` on the
//! run's [`Target`](fp8_linear::Target), so a GPU runs the same code as the CPU. Each checked
//! layer is compared with the f64 reference of the numerics its kernel implements (Marlin,
//! weight-only, against the W8A16 reference).

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::time::Instant;

use clap::Args;
use fp8_linear::{Linear, Options, Registry};
use fp8_linear_checkpoint::{Checkpoint, QuantLayer};
use serde_json::{json, Value};

use crate::check::{count_nan, tolerance, Reference};
use crate::error::{CliError, Kind};
use crate::executor::Executor;
use crate::layer_reference::reference_rows;
use crate::place::{choose, Place};
use crate::plan::bytes;
use crate::run_layer::{gather_rows, random_activations, sample_rows};
use crate::sizes::try_filled;

/// Checkpoint options of `run`.
#[derive(Args, Debug, Clone)]
pub struct CheckpointRunArgs {
    /// Checkpoint directory: run every quantized layer of it instead of one random layer
    /// (the layers' shapes and kinds come from the checkpoint, so `-n`, `-k`, `--layer`,
    /// `--input` and `--output` are refused with it; `--only` picks layers).
    #[arg(conflicts_with_all = ["layer", "n", "k", "input", "output"])]
    pub dir: Option<std::path::PathBuf>,
    /// Layers to check against the f64 reference (one of each distinct config first,
    /// then spread over the model).
    #[arg(long, default_value_t = 4)]
    pub check: usize,
    /// With DIR: run only the layers whose name contains this text (`mlp.down_proj`,
    /// `layers.0.`).
    #[arg(long, value_name = "TEXT", requires = "dir")]
    pub only: Option<String>,
    /// With DIR: tensor parallelism, one shard of every layer per listed device (GPU
    /// ordinals or `cpu`, at least two: `0,1`; `0,0` puts both shards on GPU 0), split as
    /// engines split them (q/k/v/gate/up over N, o/down over K); reports every shard's
    /// kernel and time and the time per rank.
    #[arg(long, value_name = "LIST", requires = "dir", conflicts_with_all = ["gpu", "cpu"], value_parser = crate::tp_run::parse_devices)]
    pub devices: Option<crate::tp_run::Devices>,
}

/// What a checkpoint run does: rows, timed calls, layers to check, a layer-name filter.
#[derive(Copy, Clone, Debug)]
pub struct RunSpec<'a> {
    /// Rows of the activations.
    pub m: usize,
    /// Timed calls per layer.
    pub iters: usize,
    /// Layers to check against the f64 reference.
    pub check: usize,
    /// Only the layers whose name contains this.
    pub only: Option<&'a str>,
}

/// The outcome of one layer.
struct LayerResult {
    name: String,
    n: usize,
    k: usize,
    kernel: Result<&'static str, String>,
    /// Median seconds per call.
    seconds: f64,
    /// Seconds to construct the kernel and process the weights.
    load_seconds: f64,
    /// Relative error and its tolerance, for checked layers.
    check: Option<(f64, f64)>,
    /// The reference a checked layer was compared with (`w8a8` or `w8a16`).
    reference: Option<&'static str>,
    /// A forced kernel that could not run for this layer, and what ran instead.
    force_note: Option<String>,
    /// Why the kernel failed to build or run.
    failure: Option<String>,
    /// NaN elements in the output (outputs are poisoned with NaN before every call, so a
    /// NaN is an element the kernel did not write).
    nan_outputs: usize,
}

impl LayerResult {
    fn ok(&self) -> bool {
        self.ran() && self.nan_outputs == 0 && self.check.is_none_or(|(e, tol)| e < tol)
    }

    /// Whether a kernel was built and ran.
    fn ran(&self) -> bool {
        self.kernel.is_ok() && self.failure.is_none()
    }
}

/// Which layers to check: the first layer of each distinct config, then layers spread
/// evenly, up to `count`.
pub fn check_set(layers: &[QuantLayer], count: usize) -> HashSet<usize> {
    let mut set = HashSet::new();
    let mut seen = HashSet::new();
    for (i, l) in layers.iter().enumerate() {
        if set.len() < count && seen.insert(l.config) {
            set.insert(i);
        }
    }
    let n = layers.len();
    let want = count.min(n);
    if want > 1 {
        for j in 0..want {
            if set.len() >= want {
                break;
            }
            set.insert(j * (n - 1) / (want - 1));
        }
    }
    let mut i = 0;
    while set.len() < want {
        set.insert(i);
        i += 1;
    }
    set
}

#[allow(clippy::too_many_arguments)]
fn run_layer(
    ck: &Checkpoint,
    l: &QuantLayer,
    registry: &Registry,
    place: &Place,
    exec: &mut dyn Executor,
    m: usize,
    iters: usize,
    check: bool,
    options: &Options,
) -> Result<LayerResult, CliError> {
    let c = l.config;
    let mut res = LayerResult {
        name: l.name.clone(),
        n: c.n,
        k: c.k,
        kernel: Err(String::new()),
        seconds: 0.0,
        load_seconds: 0.0,
        check: None,
        reference: None,
        force_note: None,
        failure: None,
        nan_outputs: 0,
    };
    let tensors = ck
        .layer_tensors(l)
        .map_err(crate::error::checkpoint_error)?;
    let t = Instant::now();
    let choice = match choose(registry, place, &c, m, None, &options.overrides) {
        Ok(choice) => choice,
        Err(e) => {
            res.kernel = Err(e.message);
            return Ok(res);
        }
    };
    res.force_note = choice.force_note;
    let built = Linear::with_plan(
        choice.plan,
        &place.target,
        &c,
        &tensors.view(),
        &options.kernel,
    );
    res.kernel = Ok(choice.entry.name);
    let mut linear = match built {
        Ok(lin) => lin,
        Err(e) => {
            res.failure = Some(format!("building {}: {e}", choice.entry.name));
            return Ok(res);
        }
    };
    res.load_seconds = t.elapsed().as_secs_f64();
    res.kernel = Ok(linear.entry_for(m).expect("the plan serves every M").name);
    // The sizes were checked against memory before the first layer ran.
    let x = random_activations(&c, m)?;
    let mut out = try_filled("output", m.saturating_mul(c.n), f32::NAN)?;
    // One untimed call (first touch, module load), then the timed ones.
    let mut times = Vec::with_capacity(iters);
    for i in 0..=iters {
        let secs = match exec.forward(&mut linear, &c, &x, m, &mut out) {
            Ok(secs) => secs,
            Err(e) => {
                res.failure = Some(e.message);
                return Ok(res);
            }
        };
        if i > 0 {
            times.push(secs);
        }
    }
    let refr = Reference::for_kernel(linear.entry_for(m).expect("the plan serves every M"), &c);
    drop(linear);
    times.sort_by(f64::total_cmp);
    res.seconds = times[times.len() / 2];
    res.nan_outputs = count_nan(&out);
    if check {
        let rows = sample_rows(m);
        let want = reference_rows(&refr.config, &tensors, &x, &rows)
            .map_err(|e| CliError::runtime(format!("layer {}: {e}", l.name)))?;
        let got = gather_rows(&out, c.n, &rows);
        res.reference = Some(refr.label);
        res.check = Some((
            fp8_linear::cpu::reference::rel_frobenius(&got, &want),
            tolerance(c.output_dtype),
        ));
    }
    Ok(res)
}

/// The report of a checkpoint run.
pub struct ModelReport {
    dir: String,
    device: String,
    m: usize,
    iters: usize,
    layers: Vec<LayerResult>,
    /// The mixture-of-experts layers (expert groups).
    moe: Vec<crate::moe_run::MoeResult>,
    fp8_bytes: usize,
    wall_seconds: f64,
}

impl ModelReport {
    /// Whether every layer got a kernel and every checked layer is within tolerance.
    pub fn ok(&self) -> bool {
        self.layers.iter().all(LayerResult::ok) && self.moe.iter().all(|r| r.ok())
    }

    /// The exit code: 4 when a layer failed to build or run, 3 when one has no kernel, 1
    /// when one failed its check or left NaNs (the highest wins), else 0.
    pub fn outcome(&self) -> Option<Kind> {
        let dense = self
            .layers
            .iter()
            .map(|r| (r.failure.is_some(), r.kernel.is_err(), r.ok()));
        let moe = self.moe.iter().map(|r| (r.failed(), r.unserved(), r.ok()));
        crate::error::worst(dense.chain(moe).filter_map(|(failed, unserved, ok)| {
            if failed {
                Some(Kind::Runtime)
            } else if unserved {
                Some(Kind::NoKernel)
            } else if !ok {
                Some(Kind::CheckFailed)
            } else {
                None
            }
        }))
    }

    /// Per kernel: (layers, summed median seconds, FLOPs per call).
    fn per_kernel(&self) -> BTreeMap<&'static str, (usize, f64, f64)> {
        let mut map: BTreeMap<&'static str, (usize, f64, f64)> = BTreeMap::new();
        let dense = self.layers.iter().filter(|r| r.ran()).filter_map(|r| {
            Some((
                *r.kernel.as_ref().ok()?,
                r.seconds,
                2.0 * (self.m * r.n * r.k) as f64,
            ))
        });
        for (k, secs, flops) in dense.chain(self.moe.iter().filter_map(|r| r.timed())) {
            let e = map.entry(k).or_default();
            e.0 += 1;
            e.1 += secs;
            e.2 += flops;
        }
        map
    }

    /// The references the checked layers were compared with, each once.
    fn references(&self) -> Vec<&'static str> {
        let mut v: Vec<&'static str> = Vec::new();
        for r in self.layers.iter().filter_map(|r| r.reference) {
            if !v.contains(&r) {
                v.push(r);
            }
        }
        v
    }

    /// The forced-kernel notes of the layers, each once.
    fn notes(&self) -> Vec<&str> {
        let mut v: Vec<&str> = Vec::new();
        for n in self.layers.iter().filter_map(|r| r.force_note.as_deref()) {
            if !v.contains(&n) {
                v.push(n);
            }
        }
        v
    }

    /// Seconds of a forward of every layer, the mixture-of-experts layers included.
    fn model_seconds(&self) -> f64 {
        let moe: f64 = self.moe.iter().filter_map(|r| r.timed()).map(|t| t.1).sum();
        self.layers.iter().map(|r| r.seconds).sum::<f64>() + moe
    }

    /// Human-readable report.
    pub fn text(&self) -> String {
        let mut s = format!(
            "checkpoint: {}\ndevice:     {}\ninput:      M = {} tokens of random activations; median of {} timed calls per layer\n\n",
            self.dir, self.device, self.m, self.iters
        );
        for note in self.notes() {
            s += &format!("note: {note}\n");
        }
        if !self.notes().is_empty() {
            s.push('\n');
        }
        let w = self.layers.iter().map(|r| r.name.len()).max().unwrap_or(5);
        for r in &self.layers {
            let shape = format!("N={} K={}", r.n, r.k);
            match &r.kernel {
                Ok(k) if r.failure.is_some() => {
                    s += &format!("  {:<w$}  {shape:<15}  {k:<14} FAILED TO RUN:\n", r.name);
                    for line in r.failure.iter().flat_map(|f| f.lines()) {
                        s += &format!("      {line}\n");
                    }
                }
                Ok(k) => {
                    s += &format!(
                        "  {:<w$}  {shape:<15}  {k:<14} {:>9.3} ms",
                        r.name,
                        r.seconds * 1e3
                    );
                    if let Some((e, tol)) = r.check {
                        s += &format!(
                            "   checked against the {} reference: rel err {e:.2e} (< {tol:.0e}) {}",
                            r.reference.unwrap_or("?"),
                            if e < tol { "ok" } else { "FAILED" }
                        );
                    }
                    if r.nan_outputs > 0 {
                        s += &format!("   FAILED: {} NaN outputs (unwritten)", r.nan_outputs);
                    }
                    s.push('\n');
                }
                Err(e) => {
                    s += &format!("  {:<w$}  {shape:<15}  NO KERNEL:\n", r.name);
                    for line in e.lines() {
                        s += &format!("      {line}\n");
                    }
                }
            }
        }
        let on_gpu = !self.device.contains("cpu");
        s += &crate::moe_run::text(&self.moe, self.m, on_gpu);
        s += "\nper kernel:\n";
        let per_kernel = self.per_kernel();
        let kw = per_kernel
            .keys()
            .map(|k| k.len())
            .max()
            .unwrap_or(0)
            .max(14);
        for (k, (n, secs, flops)) in per_kernel {
            s += &format!(
                "  {k:<kw$} {n:>4} layers  {:>9.3} ms per forward  {:>8.2} GFLOP/s\n",
                secs * 1e3,
                flops / secs / 1e9
            );
        }
        let total = self.model_seconds();
        let served = self.layers.iter().filter(|r| r.ran()).count()
            + self.moe.iter().filter(|r| r.timed().is_some()).count();
        s += &format!(
            "\nmodel linear time: {:.3} ms per forward of M = {} -> {:.3} ms per token ({} of {} layers, {} FP8 weights)\n",
            total * 1e3,
            self.m,
            total * 1e3 / self.m as f64,
            served,
            self.layers.len() + self.moe.len(),
            bytes(self.fp8_bytes)
        );
        let load: f64 = self.layers.iter().map(|r| r.load_seconds).sum();
        s += &format!(
            "weight processing: {load:.2} s in all; wall time {:.2} s\n",
            self.wall_seconds
        );
        let checked: Vec<(f64, f64)> = self.layers.iter().filter_map(|r| r.check).collect();
        if checked.is_empty() {
            s += "reference check: no layer checked\n";
        } else {
            let worst = checked.iter().map(|c| c.0).fold(0f64, f64::max);
            let failed = checked
                .iter()
                .filter(|(e, tol)| e.is_nan() || e >= tol)
                .count();
            s += &format!(
                "reference check: {} layers, checked against the {} reference, worst relative error {worst:.2e} -> {}\n",
                checked.len(),
                self.references().join(" and "),
                if failed == 0 {
                    "ok".to_string()
                } else {
                    format!("{failed} FAILED")
                }
            );
        }
        let unserved = self.layers.iter().filter(|r| r.kernel.is_err()).count();
        if unserved > 0 {
            s += &format!(
                "NOT SERVED: {unserved} of {} layers have no kernel on this device (reasons above)\n",
                self.layers.len()
            );
        }
        let failed = self.layers.iter().filter(|r| r.failure.is_some()).count();
        if failed > 0 {
            s += &format!(
                "FAILED TO RUN: {failed} of {} layers (errors above)\n",
                self.layers.len()
            );
        }
        s += &format!("result: {}\n", if self.ok() { "ok" } else { "FAILED" });
        s
    }

    /// Machine-readable report.
    pub fn json(&self) -> Value {
        let total = self.model_seconds();
        json!({
            "checkpoint": self.dir,
            "device": self.device,
            "m": self.m,
            "iters": self.iters,
            "layers": self.layers.iter().map(|r| json!({
                "name": r.name, "n": r.n, "k": r.k,
                "kernel": r.kernel.as_ref().ok(),
                "error": r.kernel.as_ref().err().or(r.failure.as_ref()),
                "seconds": r.seconds,
                "load_seconds": r.load_seconds,
                "reference": r.reference,
                "rel_error": r.check.map(|c| c.0),
                "tolerance": r.check.map(|c| c.1),
                "nan_outputs": r.nan_outputs,
                "ok": r.ok(),
            })).collect::<Vec<_>>(),
            "kernels": self.per_kernel().into_iter().map(|(k, (n, secs, flops))| (k.to_string(), json!({
                "layers": n, "seconds": secs, "gflops": flops / secs / 1e9,
            }))).collect::<serde_json::Map<String, Value>>(),
            "model_seconds_per_forward": total,
            "model_seconds_per_token": total / self.m as f64,
            "references": self.references(),
            "notes": self.notes(),
            "moe_layers": crate::moe_run::json(&self.moe),
            "fp8_bytes": self.fp8_bytes,
            "wall_seconds": self.wall_seconds,
            "ok": self.ok(),
        })
    }
}

/// The checkpoint's quantized layers, or those whose name contains `only` (none is bad
/// input, naming a few layers).
pub fn pick_layers(
    ck: &Checkpoint,
    dir: &Path,
    only: Option<&str>,
) -> Result<Vec<QuantLayer>, CliError> {
    let Some(text) = only else {
        return Ok(ck.layers().to_vec());
    };
    let picked: Vec<QuantLayer> = ck
        .layers()
        .iter()
        .filter(|l| l.name.contains(text))
        .cloned()
        .collect();
    let experts = ck.expert_groups().iter().any(|g| g.name.contains(text));
    if picked.is_empty() && !experts {
        let some: Vec<&str> = ck
            .layers()
            .iter()
            .take(4)
            .map(|l| l.name.as_str())
            .collect();
        return Err(CliError::bad_input(format!(
            "--only {text}: no layer of {} has it in its name (layers: {}, ...)",
            dir.display(),
            some.join(", ")
        )));
    }
    Ok(picked)
}

/// Runs every layer (or the `--only` ones) of the checkpoint at `dir` on the place's target
/// through `exec`, with the kernels `registry` selects. The memory of the largest layer at
/// M is checked before anything runs.
pub fn run(
    dir: &Path,
    registry: &Registry,
    place: &Place,
    exec: &mut dyn Executor,
    spec: &RunSpec<'_>,
    options: &Options,
    quiet: bool,
) -> Result<ModelReport, CliError> {
    let RunSpec {
        m,
        iters,
        check,
        only,
    } = *spec;
    let wall = Instant::now();
    let ck = Checkpoint::open(dir).map_err(crate::error::checkpoint_error)?;
    let layers = pick_layers(&ck, dir, only)?;
    // Sizes first: the largest layer at M must fit before any layer runs.
    let mut biggest: Option<(u64, &QuantLayer)> = None;
    for l in &layers {
        let f = crate::sizes::layer_footprint(&format!("run: layer {}", l.name), &l.config, &[m])?;
        if biggest.is_none_or(|(b, _)| f.total() > b) {
            biggest = Some((f.total(), l));
        }
    }
    if let Some((_, l)) = biggest {
        crate::sizes::check_layer(&format!("run: layer {}", l.name), &l.config, &[m])?;
    }
    let to_check = check_set(&layers, check);
    let bar = crate::progress::bar(layers.len() as u64, "layers", quiet);
    let mut results = Vec::with_capacity(layers.len());
    for (i, l) in layers.iter().enumerate() {
        bar.set_message(l.name.clone());
        results.push(run_layer(
            &ck,
            l,
            registry,
            place,
            exec,
            m,
            iters.max(1),
            to_check.contains(&i),
            options,
        )?);
        bar.inc(1);
    }
    bar.finish_and_clear();
    let moe = crate::moe_run::run_groups(&ck, m, iters, only, options)?;
    let expert_bytes: usize = ck
        .expert_groups()
        .iter()
        .filter(|g| only.is_none_or(|t| g.name.contains(t)))
        .flat_map(|g| &g.experts)
        .map(QuantLayer::weight_bytes)
        .sum();
    Ok(ModelReport {
        dir: dir.display().to_string(),
        device: place.device().to_string(),
        m,
        iters: iters.max(1),
        fp8_bytes: layers.iter().map(QuantLayer::weight_bytes).sum::<usize>() + expert_bytes,
        layers: results,
        moe,
        wall_seconds: wall.elapsed().as_secs_f64(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use fp8_linear::cpu::CpuReference;
    use fp8_linear::{
        BuildCtx, Constructor, Family, Fp8Kernel, KernelEntry, KernelError, LayerKind, Numerics,
        Platform, Registered, Table, Target,
    };
    use fp8_linear_checkpoint::{generate, GenOptions, Preset};

    fn cpu() -> Place {
        Place {
            target: Target::cpu(),
            cpu_reason: Some("test".into()),
        }
    }

    #[test]
    fn check_set_covers_configs_and_stays_bounded() {
        let dir = std::env::temp_dir().join(format!("fp8-cli-check-{}", std::process::id()));
        generate(&dir, &GenOptions::new(Preset::Tiny)).unwrap();
        let ck = Checkpoint::open(&dir).unwrap();
        for count in [0, 1, 4, 100] {
            let s = check_set(ck.layers(), count);
            assert_eq!(s.len(), count.min(ck.layers().len()));
            assert!(s.iter().all(|&i| i < ck.layers().len()));
        }
        // Checking as many layers as there are distinct configs covers each once.
        let distinct: HashSet<_> = ck.layers().iter().map(|l| l.config).collect();
        let s = check_set(ck.layers(), distinct.len());
        let configs: HashSet<_> = s.iter().map(|&i| ck.layers()[i].config).collect();
        assert_eq!(configs.len(), distinct.len());

        // A whole run on the CPU: every layer served, the checked ones within tolerance.
        let mut exec = crate::executor::HostExecutor;
        let builtin = &fp8_linear::tables::BUILTIN;
        let r = run(
            &dir,
            builtin,
            &cpu(),
            &mut exec,
            &RunSpec {
                m: 3,
                iters: 1,
                check: 5,
                only: None,
            },
            &Options::none(),
            true,
        )
        .unwrap();
        assert!(r.ok(), "{}", r.text());
        assert_eq!(r.outcome(), None);
        assert_eq!(r.layers.iter().filter(|l| l.check.is_some()).count(), 5);
        assert!(r.text().contains("model linear time"));
        assert!(r.text().contains("checked against the w8a8 reference"));
        assert_eq!(
            r.json()["layers"].as_array().unwrap().len(),
            ck.layers().len()
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A CPU stand-in for Marlin: it runs a block W8A8 layer with weight-only arithmetic
    /// (activations kept in 16 bits), as Marlin does on an A100.
    fn w8a16_construct(ctx: &BuildCtx<'_>) -> Result<Box<dyn Fp8Kernel>, KernelError> {
        let weight_only = Numerics::W8A16.reference_config(ctx.config());
        Ok(Box::new(CpuReference::for_layer(&weight_only)))
    }

    /// The stand-in, declaring the numerics it implements.
    const W8A16_ENTRY: KernelEntry = KernelEntry {
        name: "CpuW8A16StandIn",
        priority: 1,
        numerics: Numerics::W8A16,
        construct: Constructor::Linear(w8a16_construct),
        ..<CpuReference as Registered>::ENTRY
    };

    /// The same kernel claiming the layer's numerics (what every kernel was checked
    /// against before kernels declared their numerics).
    const MISLABELED_ENTRY: KernelEntry = KernelEntry {
        name: "CpuW8A16Mislabeled",
        numerics: Numerics::Layer,
        ..W8A16_ENTRY
    };

    static W8A16_BLOCK: Table = Table {
        name: "TEST_W8A16_BLOCK",
        platform: Platform::Cpu,
        family: Family::BlockScaled,
        kind: LayerKind::Linear,
        entries: &[W8A16_ENTRY],
    };
    static W8A16: Registry = Registry::new(&[&W8A16_BLOCK]);

    static MISLABELED_BLOCK: Table = Table {
        name: "TEST_MISLABELED_BLOCK",
        platform: Platform::Cpu,
        family: Family::BlockScaled,
        kind: LayerKind::Linear,
        entries: &[MISLABELED_ENTRY],
    };
    static MISLABELED: Registry = Registry::new(&[&MISLABELED_BLOCK]);

    #[test]
    fn a_weight_only_kernel_on_block_layers_is_checked_against_the_w8a16_reference() {
        let dir = std::env::temp_dir().join(format!("fp8-cli-w8a16-{}", std::process::id()));
        generate(
            &dir,
            &GenOptions {
                layers: Some(1),
                ..GenOptions::new(Preset::Tiny)
            },
        )
        .unwrap();
        let ck = Checkpoint::open(&dir).unwrap();
        assert!(
            ck.layers()
                .iter()
                .all(|l| l.config.family() == Family::BlockScaled && l.config.activation.is_some()),
            "the tiny checkpoint has block W8A8 layers"
        );
        let mut exec = crate::executor::HostExecutor;
        let spec = RunSpec {
            m: 4,
            iters: 1,
            check: ck.layers().len(),
            only: None,
        };
        let mut run_with = |registry| {
            run(
                &dir,
                registry,
                &cpu(),
                &mut exec,
                &spec,
                &Options::none(),
                true,
            )
            .unwrap()
        };
        let r = run_with(&W8A16);
        let text = r.text();
        assert!(r.ok(), "{text}");
        assert!(r.layers.iter().all(|l| l.kernel == Ok("CpuW8A16StandIn")));
        assert!(
            r.layers.iter().all(|l| l.reference == Some("w8a16")),
            "{text}"
        );
        assert!(
            text.contains("checked against the w8a16 reference"),
            "{text}"
        );
        assert!(!text.contains("w8a8"), "{text}");
        assert_eq!(r.json()["references"], serde_json::json!(["w8a16"]));

        // Compared with the layer's own (W8A8) reference, the same output fails: the check
        // must follow the kernel's numerics.
        let r = run_with(&MISLABELED);
        assert!(!r.ok(), "{}", r.text());
        assert_eq!(r.outcome(), Some(Kind::CheckFailed), "{}", r.text());
        assert!(r.text().contains("checked against the w8a8 reference"));
        assert!(r.text().contains("FAILED"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
