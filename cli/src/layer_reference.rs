//! The f64 reference output of a checkpoint layer for some rows of the input: the oracle
//! kernel itself ([`CpuReference`], which quantizes the activations per the config's key,
//! ue8m0 scales included, by the spec as `fp8_linear::cpu::reference` states it) run on the
//! layer's own FP8 weights and scales. The caller passes the config of the numerics to
//! check (the kernel's reference config: a weight-only kernel on a W8A8 layer gets the
//! layer without its activation key).

use fp8_linear::cpu::{reference, CpuReference};
use fp8_linear::{DType, Fp8Kernel, GroupShape, LayerConfig, QuantKey, Tensor, TensorMut};
use fp8_linear_checkpoint::LayerTensors;

/// Reference output `[rows.len(), N]` for the given rows of `x` (`[m, K]`, already rounded
/// to the layer's input dtype), bias included. A dynamic per-tensor activation scale is
/// taken over the whole input (every row of `x`, as the kernel saw it), then applied to the
/// sampled rows as a static scale. Errors (a config the reference refuses, tensors that do
/// not fit it) are messages.
pub fn reference_rows(
    config: &LayerConfig,
    t: &LayerTensors<'_>,
    x: &[f32],
    rows: &[usize],
) -> Result<Vec<f64>, String> {
    let (n, k) = (config.n, config.k);
    let r = rows.len();
    let xs: Vec<f32> = rows
        .iter()
        .flat_map(|&i| x[i * k..(i + 1) * k].iter().copied())
        .collect();
    // `x` holds the input's values as f32 (already rounded to its dtype): feed them as f32,
    // and take the result in f32 (one rounding of the f64 sum, far below any tolerance).
    let mut cfg = LayerConfig {
        input_dtype: DType::F32,
        output_dtype: DType::F32,
        ..*config
    };
    let mut input_scale = t.input_scale;
    if let Some(a) = cfg.activation {
        if a.dynamic && a.group == GroupShape::PerTensor {
            input_scale = Some([reference::dynamic_scale_fmt(x, None, a.scale_dtype)]);
            cfg.activation = Some(QuantKey {
                dynamic: false,
                ..a
            });
        }
    }
    let mut weights = t.view();
    weights.input_scale = input_scale.as_ref().map(|s| Tensor::f32(s, [1, 1]));
    let mut oracle = CpuReference::for_layer(&cfg);
    oracle
        .process_weights(&weights)
        .map_err(|e| format!("f64 reference: {e}"))?;
    let mut out = vec![0f32; r * n];
    oracle
        .apply(
            &Tensor::f32(&xs, [r, k]),
            &mut TensorMut::f32(&mut out, [r, n]),
        )
        .map_err(|e| format!("f64 reference: {e}"))?;
    Ok(out.into_iter().map(f64::from).collect())
}
