//! `autotune`: time every kernel that can run a layer on this device for a few M, and
//! persist the winner per M bucket in the autotune file that selection consults.

use std::path::Path;

use fp8_linear::autotune::{autotune_layer, Measurement};
use fp8_linear::{Device, LayerConfig, LayerWeights, Linear, Overrides, Tensor, Tuning};
use rand::Rng;
use serde_json::{json, Value};

use crate::run_layer::{random_weights, Executor};

/// Runs the pass and saves the file; returns the measurements.
#[allow(clippy::too_many_arguments)]
pub fn run(
    device: &Device,
    config: &LayerConfig,
    ms: &[usize],
    iters: usize,
    overrides: &Overrides,
    exec: &mut dyn Executor,
    path: &Path,
) -> Result<Vec<Measurement>, String> {
    let mut tuning = Tuning::load(path).map_err(|e| e.to_string())?;
    let (codes, scales) = random_weights(config);
    let [sr, sc] = config.weight_scale_shape();
    let input_scale = [0.02f32];
    let weights = LayerWeights {
        weight: Tensor::fp8(&codes, [config.n, config.k]),
        weight_scale: Tensor::f32(&scales, [sr, sc]),
        input_scale: Some(Tensor::f32(&input_scale, [1, 1])),
        input_scale_ub: None,
        bias: None,
    };
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
    tuning.save(path).map_err(|e| e.to_string())?;
    Ok(measurements)
}

/// Human-readable table of the measurements.
pub fn text(config: &LayerConfig, ms: &[Measurement], path: &Path) -> String {
    let mut s =
        format!("layer: {config}\n\n      M  kernel                     time/call    GFLOP/s\n");
    for x in ms {
        let flops = 2.0 * (x.m * config.n * config.k) as f64;
        let (t, r) = match &x.seconds {
            Ok(sec) => (
                format!("{:>9.3} ms", sec * 1e3),
                format!("{:>9.1}", flops / sec / 1e9),
            ),
            Err(e) => ("failed".into(), e.clone()),
        };
        s += &format!(
            "{} {:>5}  {:<24} {t}  {r}\n",
            if x.winner { "->" } else { "  " },
            x.m,
            x.kernel
        );
    }
    s += &format!("\nwinners saved to {}\n", path.display());
    s
}

/// JSON of the measurements.
pub fn json(ms: &[Measurement], path: &Path) -> Value {
    json!({
        "file": path.display().to_string(),
        "measurements": ms.iter().map(|x| json!({
            "m": x.m, "kernel": x.kernel, "winner": x.winner,
            "seconds": x.seconds.as_ref().ok(), "error": x.seconds.as_ref().err(),
        })).collect::<Vec<_>>(),
    })
}
