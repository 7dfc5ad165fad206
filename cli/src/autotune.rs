//! `autotune`: time every kernel that can run a layer on this device for a few M, and
//! persist the winner per M bucket in the autotune file that selection consults. Every
//! measured kernel's output is checked against the f64 reference of the numerics it
//! implements; a kernel with a wrong output is not timed and cannot win.

use std::collections::HashMap;
use std::path::Path;

use fp8_linear::autotune::{autotune_layer, Measurement};
use fp8_linear::cpu::reference::rel_frobenius;
use fp8_linear::{LayerConfig, Linear, Options, Registry, TuningFile};
use rand::Rng;
use serde_json::{json, Value};

use crate::check::{tolerance, Reference};
use crate::place::Place;
use crate::run_layer::{
    gather_rows, reference_rows, sample_rows, to_dtype_bits, Executor, RandomWeights,
};

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
}

impl Check {
    /// Whether the output is within tolerance.
    pub fn ok(&self) -> bool {
        self.rel_error < self.tolerance
    }
}

/// What a pass measured: the timings and the reference check of every kernel.
pub struct Sweep {
    /// Timings (a kernel whose output failed its check has an error instead).
    pub measurements: Vec<Measurement>,
    /// Reference checks, one per kernel that ran, per M.
    pub checks: Vec<Check>,
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
    fn x(&mut self, m: usize) -> &[f32] {
        let (k, dtype) = (self.config.k, self.config.input_dtype);
        self.x.entry(m).or_insert_with(|| {
            let mut rng = rand::rng();
            let x: Vec<f32> = (0..m * k).map(|_| rng.random_range(-1.0f32..1.0)).collect();
            to_dtype_bits(&x, dtype)
        })
    }

    fn want(&mut self, m: usize, refr: &Reference) -> &[f64] {
        self.x(m);
        let (x, w) = (&self.x[&m], self.weights);
        self.want.entry((m, refr.config)).or_insert_with(|| {
            reference_rows(
                &refr.config,
                x,
                &sample_rows(m),
                &w.codes,
                &w.scales,
                w.input_scale[0],
            )
        })
    }
}

/// Runs the pass on the place's target and, when `path` is given, merges the winners into
/// that file; returns the measurements and checks (`bench` runs it without a file).
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
) -> Result<Sweep, String> {
    let mut tuning = match path {
        Some(p) => TuningFile::load(p).map_err(|e| e.to_string())?,
        None => TuningFile::new(),
    };
    let rw = RandomWeights::new(config);
    let weights = rw.weights();
    let mut inputs = Inputs {
        config: *config,
        weights: &rw,
        x: HashMap::new(),
        want: HashMap::new(),
    };
    let mut checks = Vec::new();
    let measurements = autotune_layer(
        registry,
        place.device(),
        config,
        ms,
        &options.overrides,
        &mut tuning,
        |entry, m| {
            let mut lin =
                Linear::with_entry(entry, &place.target, config, &weights, &options.kernel)
                    .map_err(|e| e.to_string())?;
            let x = inputs.x(m).to_vec();
            let mut out = vec![0f32; m * config.n];
            exec.forward(&mut lin, config, &x, m, &mut out)?; // warm-up, and the checked call
            let refr = Reference::for_kernel(entry, config);
            let got = gather_rows(&out, config.n, &sample_rows(m));
            let check = Check {
                m,
                kernel: entry.name,
                reference: refr.label,
                rel_error: rel_frobenius(&got, inputs.want(m, &refr)),
                tolerance: tolerance(config.output_dtype),
            };
            let ok = check.ok();
            let (e, tol) = (check.rel_error, check.tolerance);
            checks.push(check);
            if !ok {
                return Err(format!(
                    "wrong output: rel err {e:.2e} (tolerance {tol:.0e}) against the {} reference",
                    refr.label
                ));
            }
            let mut t: Vec<f64> = (0..iters.max(1))
                .map(|_| exec.forward(&mut lin, config, &x, m, &mut out))
                .collect::<Result<_, _>>()?;
            t.sort_by(f64::total_cmp);
            Ok(t[t.len() / 2])
        },
    )
    .map_err(|e| e.to_string())?;
    if let Some(p) = path {
        tuning.save(p).map_err(|e| e.to_string())?;
    }
    Ok(Sweep {
        measurements,
        checks,
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

    /// Human-readable table of the measurements: time, GFLOP/s, the speed relative to the
    /// `baseline` kernel at the same M (when it was measured), and the reference check.
    pub fn text(
        &self,
        config: &LayerConfig,
        baseline: Option<&str>,
        path: Option<&Path>,
    ) -> String {
        let ms = &self.measurements;
        let mut s = format!(
            "layer: {config}\n\n      M  kernel                     time/call    GFLOP/s  vs {:<8} check\n",
            baseline.unwrap_or("-")
        );
        for x in ms {
            let flops = 2.0 * (x.m * config.n * config.k) as f64;
            let base = ms
                .iter()
                .find(|b| b.m == x.m && Some(b.kernel) == baseline)
                .and_then(|b| b.seconds.as_ref().ok());
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
            let (t, r, ratio) = match &x.seconds {
                Ok(sec) => (
                    format!("{:>9.3} ms", sec * 1e3),
                    format!("{:>9.1}", flops / sec / 1e9),
                    base.map(|b| format!("{:>6.2}x", b / sec))
                        .unwrap_or_default(),
                ),
                Err(e) => ("failed".into(), e.clone(), String::new()),
            };
            s += &format!(
                "{} {:>5}  {:<24} {t}  {r}  {ratio:<11} {check}\n",
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

    /// JSON of the measurements.
    pub fn json(&self, path: Option<&Path>) -> Value {
        json!({
            "file": path.map(|p| p.display().to_string()),
            "measurements": self.measurements.iter().map(|x| {
                let c = self.check(x.m, x.kernel);
                json!({
                    "m": x.m, "kernel": x.kernel, "winner": x.winner,
                    "seconds": x.seconds.as_ref().ok(), "error": x.seconds.as_ref().err(),
                    "reference": c.map(|c| c.reference),
                    "rel_error": c.map(|c| c.rel_error),
                    "ok": c.map(Check::ok),
                })
            }).collect::<Vec<_>>(),
            "all_checked_ok": self.all_checked_ok(),
        })
    }
}
