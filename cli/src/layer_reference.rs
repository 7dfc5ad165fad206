//! The f64 reference output of a checkpoint layer for some rows of the input, computed from
//! the layer's own FP8 weights and scales with the oracle GEMMs of `fp8_linear::cpu`. The
//! caller passes the config of the numerics to check (the kernel's reference config: a
//! weight-only kernel on a W8A8 layer gets the layer without its activation key).

use fp8_linear::cpu::{quantize, reference};
use fp8_linear::fp8::{f32_to_e4m3, group_scale, round_scale_ue8m0};
use fp8_linear::{GroupShape, LayerConfig, ScaleDtype};
use fp8_linear_checkpoint::LayerTensors;

/// Dynamic per-token-group quantization of `r` rows, with scales rounded up to powers of
/// two when `ue8m0` (the activation key's scale format).
fn quantize_groups(xs: &[f32], r: usize, k: usize, g: usize, ue8m0: bool) -> (Vec<u8>, Vec<f32>) {
    if !ue8m0 {
        return quantize::per_token_group(xs, r, k, g);
    }
    let groups = k.div_ceil(g);
    let mut q = vec![0u8; r * k];
    let mut s = vec![0f32; r * groups];
    for i in 0..r {
        for gi in 0..groups {
            let (lo, hi) = (i * k + gi * g, i * k + ((gi + 1) * g).min(k));
            let scale = round_scale_ue8m0(group_scale(&xs[lo..hi]));
            s[i * groups + gi] = scale;
            for idx in lo..hi {
                q[idx] = f32_to_e4m3(xs[idx] / scale);
            }
        }
    }
    (q, s)
}

/// Reference output `[rows.len(), N]` for the given rows of `x` (`[m, K]`, already rounded
/// to the layer's input dtype), bias included.
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
    let w = t.weight;
    let [_, sc] = t.scale_shape;
    let wscale = |j: usize, kk: usize| match config.weight.group {
        GroupShape::Block { rows, cols } => t.scales[(j / rows as usize) * sc + kk / cols as usize],
        GroupShape::Group { cols } => t.scales[j * sc + kk / cols as usize],
        GroupShape::PerTensor => t.scales[0],
        GroupShape::PerChannel | GroupShape::PerToken => t.scales[j],
    };
    let mut out = match (config.activation, config.weight.group) {
        (Some(a), GroupShape::Block { rows: bn, cols: bk }) => {
            let GroupShape::Group { cols } = a.group else {
                return Err(format!(
                    "no reference for block weights with {} activations",
                    a.group
                ));
            };
            if cols != bk {
                return Err(format!(
                    "no reference for activation groups of {cols} with weight blocks of {bk} along K"
                ));
            }
            let (q, s) =
                quantize_groups(&xs, r, k, cols as usize, a.scale_dtype == ScaleDtype::Ue8m0);
            reference::block_gemm_f64(&q, &s, w, &t.scales, r, n, k, (bn as usize, bk as usize))
        }
        (Some(a), GroupShape::PerTensor | GroupShape::PerChannel) => {
            let mut q = vec![0u8; r * k];
            let a_scales = match a.group {
                GroupShape::PerTensor => {
                    // A dynamic per-tensor scale covers the whole input, not only these rows.
                    let scale = if a.dynamic {
                        group_scale(x)
                    } else {
                        t.input_scale.ok_or("static layer without input_scale")?[0]
                    };
                    quantize::per_tensor_into(&xs, Some(scale), &mut q);
                    vec![scale]
                }
                GroupShape::PerToken => {
                    let mut s = vec![0f32; r];
                    quantize::per_token_into(&xs, k, None, &mut q, &mut s);
                    s
                }
                g => {
                    return Err(format!(
                        "no reference for {g} activations with per-tensor/channel weights"
                    ))
                }
            };
            reference::scaled_gemm_f64(&q, &a_scales, w, &t.scales, r, n, k)
        }
        (None, _) => reference::weight_only_f64(&xs, w, r, n, k, wscale),
        (Some(a), g) => {
            return Err(format!(
                "no reference for {g} weights with {} activations",
                a.group
            ))
        }
    };
    if let Some(b) = &t.bias {
        for row in out.chunks_mut(n) {
            row.iter_mut().zip(b).for_each(|(o, b)| *o += *b as f64);
        }
    }
    Ok(out)
}
