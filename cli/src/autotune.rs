//! `autotune`: time every kernel that can run a layer on this device for a few M, and
//! persist the winner per M bucket in the autotune file that selection consults.

use std::path::Path;

use fp8_linear::autotune::{autotune_layer, Measurement};
use fp8_linear::{Device, LayerConfig, Linear, Overrides, TuningFile};
use rand::Rng;
use serde_json::{json, Value};

use crate::run_layer::{Executor, RandomWeights};

/// Runs the pass and, when `path` is given, merges the winners into that file; returns the
/// measurements (`bench` runs it without a file).
#[allow(clippy::too_many_arguments)]
pub fn run(
    device: &Device,
    config: &LayerConfig,
    ms: &[usize],
    iters: usize,
    overrides: &Overrides,
    exec: &mut dyn Executor,
    path: Option<&Path>,
) -> Result<Vec<Measurement>, String> {
    let mut tuning = match path {
        Some(p) => TuningFile::load(p).map_err(|e| e.to_string())?,
        None => TuningFile::new(),
    };
    let rw = RandomWeights::new(config);
    let weights = rw.weights();
    let mut rng = rand::rng();
    let measurements = autotune_layer(
        fp8_linear::tables::BUILTIN,
        device,
        config,
        ms,
        overrides,
        &mut tuning,
        |entry, m| {
            let mut lin = Linear::with_entry(entry, config, &weights).map_err(|e| e.to_string())?;
            let x: Vec<f32> = (0..m * config.k)
                .map(|_| rng.random_range(-1.0f32..1.0))
                .collect();
            let mut out = vec![0f32; m * config.n];
            exec.forward(&mut lin, config, &x, m, &mut out)?; // warm-up
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
    Ok(measurements)
}

/// Human-readable table of the measurements: time, GFLOP/s and the speed relative to the
/// `baseline` kernel at the same M, when it was measured.
pub fn text(
    config: &LayerConfig,
    ms: &[Measurement],
    baseline: Option<&str>,
    path: Option<&Path>,
) -> String {
    let mut s = format!(
        "layer: {config}\n\n      M  kernel                     time/call    GFLOP/s  vs {}\n",
        baseline.unwrap_or("-")
    );
    for x in ms {
        let flops = 2.0 * (x.m * config.n * config.k) as f64;
        let base = ms
            .iter()
            .find(|b| b.m == x.m && Some(b.kernel) == baseline)
            .and_then(|b| b.seconds.as_ref().ok());
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
            "{} {:>5}  {:<24} {t}  {r}  {ratio}\n",
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
pub fn json(ms: &[Measurement], path: Option<&Path>) -> Value {
    json!({
        "file": path.map(|p| p.display().to_string()),
        "measurements": ms.iter().map(|x| json!({
            "m": x.m, "kernel": x.kernel, "winner": x.winner,
            "seconds": x.seconds.as_ref().ok(), "error": x.seconds.as_ref().err(),
        })).collect::<Vec<_>>(),
    })
}
