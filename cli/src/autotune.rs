//! `autotune`: time every kernel that can run a layer on this device for a few M, and
//! persist the winner per M bucket in the autotune file that selection consults. Every
//! measured kernel's output is checked against the f64 reference of the numerics it
//! implements; a kernel with a wrong output is not timed and cannot win.

use std::collections::HashMap;
use std::path::Path;

use fp8_linear::autotune::{autotune_layer, Measurement};
use fp8_linear::cpu::reference::rel_frobenius;

use fp8_linear::{Device, LayerConfig, Linear, Options, Registry, TuningFile};
use indicatif::ProgressBar;
use rand::Rng;
use serde_json::{json, Value};

use crate::check::{count_nan, tolerance, Reference};
use crate::error::{as_kind, CliError, Kind};
use crate::executor::Executor;
use crate::floor::{floor_percent, FLOOR_MAX_M};
use crate::place::Place;
use crate::run_layer::{gather_rows, reference_rows, sample_rows, to_dtype_bits, RandomWeights};
use crate::sizes::{try_collect, try_filled};

/// The reference check of one measured kernel at one M.
#[derive(Clone, Debug)]
pub struct Check {
    /// Rows of the activations.
    pub m: usize,
    /// The kernel.
    pub kernel: &'static str,
    /// The reference it was compared with (`w8a8` or `w8a16`).
    pub reference: &'static str,
    /// Relative Frobenius error on the sampled rows.
    pub rel_error: f64,
    /// Its tolerance.
    pub tolerance: f64,
    /// NaN elements in the whole output (the output is poisoned with NaN before every
    /// call, so a NaN is an element the kernel did not write).
    pub nan_outputs: usize,
}

impl Check {
    /// Whether the output is within tolerance and fully written.
    pub fn ok(&self) -> bool {
        self.nan_outputs == 0 && self.rel_error < self.tolerance
    }
}

/// What a pass measured: the timings and the reference check of every kernel.
pub struct Sweep {
    /// Timings (a kernel whose output failed its check has an error instead).
    pub measurements: Vec<Measurement>,
    /// Reference checks, one per kernel that ran, per M.
    pub checks: Vec<Check>,
    /// Measurements that failed for another reason than their check (the kernel failed to
    /// build or run): `(m, kernel)`.
    pub runtime_failures: Vec<(usize, &'static str)>,
    /// A runnable kernel that was not timed (the f64 reference kernel, unless asked for).
    pub skipped: Option<&'static str>,
    /// The kernel the others are compared with (`bench`).
    pub baseline: Option<&'static str>,
    /// Timed calls per kernel and M.
    pub iters: usize,
    /// The weight-read rate (TB/s) of the floor% column, when known.
    pub read_tbs: Option<f64>,
}

/// Random activations of `m` rows and the reference outputs of their sampled rows, per
/// reference config, made once per M and shared by every kernel.
struct Inputs<'w> {
    config: LayerConfig,
    weights: &'w RandomWeights,
    x: HashMap<usize, Vec<f32>>,
    want: HashMap<(usize, LayerConfig), Vec<f64>>,
}

impl Inputs<'_> {
    fn x(&mut self, m: usize) -> Result<&[f32], CliError> {
        let (k, dtype) = (self.config.k, self.config.input_dtype);
        if let std::collections::hash_map::Entry::Vacant(slot) = self.x.entry(m) {
            let mut rng = rand::rng();
            let len = m.checked_mul(k).ok_or_else(|| {
                CliError::bad_input(format!("M={m} x K={k} activations overflow usize"))
            })?;
            let x = try_collect(
                "activations",
                len,
                (0..len).map(|_| rng.random_range(-1.0f32..1.0)),
            )?;
            slot.insert(to_dtype_bits(x, dtype));
        }
        Ok(&self.x[&m])
    }

    fn want(&mut self, m: usize, refr: &Reference) -> Result<&[f64], CliError> {
        self.x(m)?;
        let (x, w) = (&self.x[&m], self.weights);
        Ok(self.want.entry((m, refr.config)).or_insert_with(|| {
            reference_rows(
                &refr.config,
                x,
                &sample_rows(m),
                &w.codes,
                &w.scales,
                w.input_scale[0],
            )
        }))
    }
}

/// Runs the pass on the place's target and, when `path` is given, merges the winners into
/// that file; returns the measurements and checks (`bench` runs it without a file). The
/// caller has checked that the sizes fit in memory; `bar` advances once per measurement.
#[allow(clippy::too_many_arguments)]
pub fn run(
    registry: &Registry,
    place: &Place,
    config: &LayerConfig,
    ms: &[usize],
    iters: usize,
    options: &Options,
    exec: &mut dyn Executor,
    path: Option<&Path>,
    bar: &ProgressBar,
) -> Result<Sweep, CliError> {
    let mut tuning = match path {
        Some(p) => TuningFile::load(p).map_err(as_kind(Kind::BadInput))?,
        None => TuningFile::new(),
    };
    bar.set_message("generating the random layer");
    let rw = RandomWeights::new(config)?;
    let weights = rw.weights();
    let mut inputs = Inputs {
        config: *config,
        weights: &rw,
        x: HashMap::new(),
        want: HashMap::new(),
    };
    let mut checks = Vec::new();
    let mut runtime_failures = Vec::new();
    let measurements = autotune_layer(
        registry,
        place.device(),
        config,
        ms,
        &options.overrides,
        &mut tuning,
        |entry, m| {
            bar.set_message(format!("M={m} {}", entry.name));
            let mut measure = || -> Result<Result<f64, String>, CliError> {
                let mut lin =
                    Linear::with_entry(entry, &place.target, config, &weights, &options.kernel)
                        .map_err(as_kind(Kind::Runtime))?;
                let x = inputs.x(m)?.to_vec();
                let mut out = try_filled("output", m * config.n, f32::NAN)?;
                // Warm-up, and the checked call.
                exec.forward(&mut lin, config, &x, m, &mut out)?;
                let refr = Reference::for_kernel(entry, config);
                let got = gather_rows(&out, config.n, &sample_rows(m));
                let check = Check {
                    m,
                    kernel: entry.name,
                    reference: refr.label,
                    rel_error: rel_frobenius(&got, inputs.want(m, &refr)?),
                    tolerance: tolerance(config.output_dtype),
                    nan_outputs: count_nan(&out),
                };
                let ok = check.ok();
                let (e, tol, nan) = (check.rel_error, check.tolerance, check.nan_outputs);
                checks.push(check);
                if !ok {
                    return Ok(Err(format!(
                        "wrong output: rel err {e:.2e} (tolerance {tol:.0e}) against the {} reference, {nan} NaN outputs",
                        refr.label
                    )));
                }
                let mut t = Vec::new();
                for _ in 0..iters.max(1) {
                    t.push(exec.forward(&mut lin, config, &x, m, &mut out)?);
                }
                t.sort_by(f64::total_cmp);
                Ok(Ok(t[t.len() / 2]))
            };
            let r = match measure() {
                Ok(r) => r,
                Err(e) => {
                    runtime_failures.push((m, entry.name));
                    Err(e.message)
                }
            };
            bar.inc(1);
            r
        },
    )
    .map_err(crate::error::select_error)?;
    if let Some(p) = path {
        tuning.save(p).map_err(as_kind(Kind::Runtime))?;
    }
    Ok(Sweep {
        measurements,
        checks,
        runtime_failures,
        skipped: None,
        baseline: None,
        iters,
        read_tbs: None,
    })
}

impl Sweep {
    fn check(&self, m: usize, kernel: &str) -> Option<&Check> {
        self.checks.iter().find(|c| c.m == m && c.kernel == kernel)
    }

    /// Whether every kernel that ran matched its reference.
    pub fn all_checked_ok(&self) -> bool {
        self.checks.iter().all(Check::ok)
    }

    /// The exit code: 1 when a check failed, 4 when a kernel failed to build or run (the
    /// highest wins), else 0.
    pub fn outcome(&self) -> Option<Kind> {
        let check = (!self.all_checked_ok()).then_some(Kind::CheckFailed);
        let runtime = (!self.runtime_failures.is_empty()).then_some(Kind::Runtime);
        crate::error::worst(check.into_iter().chain(runtime))
    }

    /// Seconds of the baseline at `m`, when it was measured there.
    fn baseline_seconds(&self, m: usize) -> Option<f64> {
        let b = self.baseline?;
        self.measurements
            .iter()
            .find(|x| x.m == m && x.kernel == b)
            .and_then(|x| x.seconds.as_ref().ok().copied())
    }

    /// Speed relative to the baseline at the same M (baseline time / this time): above 1
    /// is faster than the baseline.
    fn ratio(&self, x: &Measurement) -> Option<f64> {
        let sec = *x.seconds.as_ref().ok()?;
        Some(self.baseline_seconds(x.m)? / sec)
    }

    fn gflops(config: &LayerConfig, x: &Measurement) -> Option<f64> {
        let sec = *x.seconds.as_ref().ok()?;
        Some(2.0 * x.m as f64 * config.n as f64 * config.k as f64 / sec / 1e9)
    }

    /// Percent of the weight-read floor (M <= 64, when the rate is known).
    fn floor_percent(&self, config: &LayerConfig, x: &Measurement) -> Option<f64> {
        let sec = *x.seconds.as_ref().ok()?;
        floor_percent(config, x.m, sec, self.read_tbs)
    }

    /// Human-readable table of the measurements: time, GFLOP/s, the speed relative to the
    /// baseline kernel at the same M (when there is one), and the reference check.
    pub fn text(&self, place: &Place, config: &LayerConfig, path: Option<&Path>) -> String {
        let ms = &self.measurements;
        let mut s = format!("device: {}\n", place.device());
        s += &format!(
            "layer:  {config}\ntimed:  median of {} calls per kernel and M\n",
            self.iters
        );
        if let Some(k) = self.skipped {
            s += &format!(
                "note:   {k} (the f64 reference kernel, slow) not timed; --with-reference times it\n"
            );
        }
        s += &match self.read_tbs {
            Some(tbs) => format!(
                "floor%: the N x K weight bytes read once at {tbs} TB/s over the time, at M <= \
                 {FLOOR_MAX_M} (--read-tbs sets the rate)\n"
            ),
            None => format!(
                "floor%: not shown (no weight-read rate known for this device; --read-tbs TB/s \
                 sets it, for M <= {FLOOR_MAX_M})\n"
            ),
        };
        s += &format!(
            "\n      M  kernel                     time/call     TFLOP/s  vs {:<8}     floor%  check\n",
            self.baseline.unwrap_or("-")
        );
        for x in ms {
            let check = self
                .check(x.m, x.kernel)
                .map(|c| {
                    format!(
                        "checked against the {} reference: {}",
                        c.reference,
                        if c.ok() { "ok" } else { "FAILED" }
                    )
                })
                .unwrap_or_default();
            let (t, r, ratio, floor) = match &x.seconds {
                Ok(sec) => (
                    format!("{:>9.1} us", sec * 1e6),
                    format!(
                        "{:>10}",
                        three_digits(Self::gflops(config, x).unwrap_or(f64::NAN) / 1e3)
                    ),
                    self.ratio(x)
                        .map(|r| format!("{r:>6.2}x"))
                        .unwrap_or_default(),
                    self.floor_percent(config, x)
                        .map_or_else(|| "-".to_string(), |p| format!("{} %", three_digits(p))),
                ),
                Err(e) => ("failed".into(), e.clone(), String::new(), String::new()),
            };
            s += &format!(
                "{} {:>5}  {:<24} {t}  {r}  {ratio:<12} {floor:>9}  {check}\n",
                if x.winner { "->" } else { "  " },
                x.m,
                x.kernel
            );
        }
        if let Some(p) = path {
            s += &format!("\nwinners saved to {}\n", p.display());
        }
        s
    }

    /// JSON of the measurements: the device, the layer, the baseline, and per measurement
    /// its time, GFLOP/s, ratio to the baseline at the same M, and reference check.
    pub fn json(&self, device: &Device, config: &LayerConfig, path: Option<&Path>) -> Value {
        json!({
            "device": device.to_string(),
            "platform": device.platform.name(),
            "layer": config.to_string(),
            "n": config.n,
            "k": config.k,
            "iters": self.iters,
            "baseline": self.baseline,
            "read_tbs": self.read_tbs,
            "skipped": self.skipped,
            "file": path.map(|p| p.display().to_string()),
            "measurements": self.measurements.iter().map(|x| {
                let c = self.check(x.m, x.kernel);
                json!({
                    "m": x.m, "kernel": x.kernel, "winner": x.winner,
                    "seconds": x.seconds.as_ref().ok(), "error": x.seconds.as_ref().err(),
                    "gflops": Self::gflops(config, x),
                    "tflops": Self::gflops(config, x).map(|g| g / 1e3),
                    "ratio_to_baseline": self.ratio(x),
                    "floor_percent": self.floor_percent(config, x),
                    "is_baseline": self.baseline == Some(x.kernel),
                    "reference": c.map(|c| c.reference),
                    "rel_error": c.map(|c| c.rel_error),
                    "nan_outputs": c.map(|c| c.nan_outputs),
                    "ok": c.map(Check::ok),
                })
            }).collect::<Vec<_>>(),
            "all_checked_ok": self.all_checked_ok(),
            "runtime_failures": self.runtime_failures.len(),
        })
    }
}

/// `v` with about three significant digits (at least one decimal): 1143.5, 45.21, 0.00123.
fn three_digits(v: f64) -> String {
    if !v.is_finite() || v <= 0.0 {
        return format!("{v}");
    }
    let decimals = (2 - v.log10().floor() as i32).clamp(1, 8) as usize;
    format!("{v:.decimals$}")
}
