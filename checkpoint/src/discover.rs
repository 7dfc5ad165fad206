//! Finding the quantized linear layers of a checkpoint: every `*.weight` in F8_E4M3 with its
//! scales beside it, checked against the config (dtypes, ranks, scale shapes and values).

use std::cmp::Ordering;

use fp8_linear_core::quant::ScaleDtype;
use fp8_linear_core::{LayerConfig, QuantKey};
use safetensors::Dtype;

use crate::checkpoint::{Checkpoint, TensorRef};
use crate::error::CheckpointError;
use crate::layer::QuantLayer;
use crate::quant_config::{QuantConfig, ScaleFormat};
use crate::scales;

/// Names of the scale tensors that belong to a `<module>.weight` (`<module>.<name>`, or the
/// bare name in a single-layer file whose tensors are `weight`, `weight_scale_inv`, ...).
const SCALE_NAMES: [&str; 3] = ["weight_scale_inv", "weight_scale", "input_scale"];

/// The module a tensor name belongs to when it ends in `.<leaf>`, or `""` when the name is
/// `leaf` itself (a single-layer file: `weight`, `weight_scale_inv`).
pub(crate) fn module_of<'n>(name: &'n str, leaf: &str) -> Option<&'n str> {
    if name == leaf {
        return Some("");
    }
    name.strip_suffix(leaf)?.strip_suffix('.')
}

/// The tensor `<module>.<leaf>`, or `leaf` alone for the unnamed module of a single-layer
/// file.
pub(crate) fn tensor_name(module: &str, leaf: &str) -> String {
    if module.is_empty() {
        leaf.to_string()
    } else {
        format!("{module}.{leaf}")
    }
}

fn is_float(d: Dtype) -> bool {
    matches!(d, Dtype::F32 | Dtype::BF16 | Dtype::F16)
}

/// Every quantized layer of the checkpoint, in natural name order.
pub(crate) fn discover(ck: &Checkpoint) -> Result<Vec<QuantLayer>, CheckpointError> {
    let mut layers = Vec::new();
    for (name, t) in ck.tensors() {
        for leaf in SCALE_NAMES {
            if let Some(prefix) = module_of(name, leaf) {
                let weight = tensor_name(prefix, "weight");
                match ck.get(&weight) {
                    Some(w) if w.info.dtype == Dtype::F8_E4M3 => {}
                    Some(w) => {
                        return Err(CheckpointError::DType {
                            tensor: weight,
                            expected: format!("F8_E4M3 (it has a scale tensor `{name}`)"),
                            got: w.info.dtype.to_string(),
                        })
                    }
                    None => {
                        return Err(CheckpointError::OrphanScale {
                            tensor: name.clone(),
                            weight,
                        })
                    }
                }
            }
        }
        let Some(module) = module_of(name, "weight") else {
            continue;
        };
        match t.info.dtype {
            Dtype::F8_E4M3 => {}
            d @ (Dtype::F8_E5M2 | Dtype::F8_E4M3FNUZ | Dtype::F8_E5M2FNUZ) => {
                return Err(CheckpointError::DType {
                    tensor: name.clone(),
                    expected: "F8_E4M3 (e4m3fn) for FP8 weights".into(),
                    got: d.to_string(),
                })
            }
            _ => continue,
        }
        if let Some(entry) = ck.quant().ignored_entry(module) {
            return Err(CheckpointError::IgnoredButQuantized {
                tensor: name.clone(),
                entry: entry.to_string(),
            });
        }
        layers.push(layer(ck, module, name, t)?);
    }
    layers.sort_by(|a, b| natural_cmp(&a.name, &b.name));
    Ok(layers)
}

fn scale_shape_error(
    tensor: &str,
    got: &[usize],
    expected: String,
    n: usize,
    k: usize,
) -> CheckpointError {
    CheckpointError::ScaleShape {
        tensor: tensor.to_string(),
        got: got.to_vec(),
        expected,
        n,
        k,
    }
}

fn is_scalar(shape: &[usize]) -> bool {
    matches!(shape, [] | [1] | [1, 1])
}

/// One layer: weight `[N, K]`, its weight scale, static input scale and bias.
fn layer(
    ck: &Checkpoint,
    module: &str,
    wname: &str,
    w: &TensorRef,
) -> Result<QuantLayer, CheckpointError> {
    let q = ck.quant();
    let (n, k) = match w.info.shape[..] {
        [n, k] if n > 0 && k > 0 => (n, k),
        _ => {
            return Err(CheckpointError::Rank {
                tensor: wname.to_string(),
                shape: w.info.shape.clone(),
                expected: "a 2-D [N, K] weight with N, K >= 1",
            })
        }
    };
    let inv = tensor_name(module, "weight_scale_inv");
    let plain = tensor_name(module, "weight_scale");
    let order = if q.block.is_some() {
        [inv, plain]
    } else {
        [plain, inv]
    };
    let Some((sname, s)) = order
        .iter()
        .find_map(|nm| ck.get(nm).map(|t| (nm.clone(), t)))
    else {
        let detail = match q.block {
            Some([r, c]) => format!(
                "weight_block_size is [{r}, {c}]: each FP8 weight needs one scale per {r}x{c} block"
            ),
            None => "each FP8 weight needs its dequantization scale".to_string(),
        };
        return Err(CheckpointError::MissingScale {
            layer: module.to_string(),
            expected: order[0].clone(),
            detail,
        });
    };
    if !is_float(s.info.dtype) && s.info.dtype != Dtype::F8_E8M0 {
        return Err(CheckpointError::DType {
            tensor: sname,
            expected: scales::FLOAT_DTYPES.into(),
            got: s.info.dtype.to_string(),
        });
    }
    let (scale_shape, per_channel) = match q.block {
        Some([br, bc]) => {
            let want = [n.div_ceil(br as usize), k.div_ceil(bc as usize)];
            if s.info.shape != want {
                return Err(scale_shape_error(
                    &sname,
                    &s.info.shape,
                    format!("[ceil(N/{br}), ceil(K/{bc})] = {want:?}"),
                    n,
                    k,
                ));
            }
            (want, false)
        }
        None => match s.info.shape[..] {
            _ if is_scalar(&s.info.shape) => ([1, 1], false),
            [x] | [x, 1] if x == n => ([n, 1], true),
            _ => {
                return Err(scale_shape_error(
                    &sname,
                    &s.info.shape,
                    format!("[] or [1] (per-tensor), or [N] / [N, 1] = [{n}, 1] (per-channel)"),
                    n,
                    k,
                ))
            }
        },
    };
    let values = ck.floats(&sname, true)?;
    scales::check(&sname, &values, q.scale_format)?;

    let input_scale = if q.static_activations {
        let iname = tensor_name(module, "input_scale");
        let Some(t) = ck.get(&iname) else {
            return Err(CheckpointError::MissingScale {
                layer: module.to_string(),
                expected: iname,
                detail: "activation_scheme is static: each layer needs its activation scale".into(),
            });
        };
        if !is_float(t.info.dtype) {
            return Err(CheckpointError::DType {
                tensor: iname,
                expected: "F32, BF16 or F16".into(),
                got: t.info.dtype.to_string(),
            });
        }
        if !is_scalar(&t.info.shape) {
            return Err(scale_shape_error(
                &iname,
                &t.info.shape,
                "[] or [1] (one static activation scale)".into(),
                n,
                k,
            ));
        }
        let v = ck.floats(&iname, false)?;
        scales::check(&iname, &v, ScaleFormat::F32)?;
        if v[0] == 0.0 {
            return Err(CheckpointError::BadScale {
                tensor: iname,
                index: 0,
                value: 0.0,
            });
        }
        Some(iname)
    } else {
        None
    };

    let bname = tensor_name(module, "bias");
    let bias = match ck.get(&bname) {
        None => None,
        Some(t) => {
            if !is_float(t.info.dtype) {
                return Err(CheckpointError::DType {
                    tensor: bname,
                    expected: "F32, BF16 or F16".into(),
                    got: t.info.dtype.to_string(),
                });
            }
            if t.info.shape != [n] {
                return Err(scale_shape_error(
                    &bname,
                    &t.info.shape,
                    format!("[N] = [{n}]"),
                    n,
                    k,
                ));
            }
            Some(bname)
        }
    };

    let mut config = layer_config(q, n, k, per_channel, bias.is_some());
    if s.info.dtype == Dtype::F8_E8M0 {
        config.weight.scale_dtype = ScaleDtype::Ue8m0;
    }
    Ok(QuantLayer {
        name: module.to_string(),
        config,
        weight: wname.to_string(),
        weight_scale: sname,
        scale_shape,
        input_scale,
        bias,
    })
}

/// The layer config a checkpoint's quantization implies for one `[N, K]` layer.
pub fn layer_config(
    q: &QuantConfig,
    n: usize,
    k: usize,
    per_channel: bool,
    bias: bool,
) -> LayerConfig {
    let dt = q.dtype;
    let mut c = match (q.block, per_channel, q.static_activations) {
        (Some([rows, cols]), _, _) => {
            LayerConfig::block(n, k, (rows, cols), ScaleDtype::F32, dt, dt)
        }
        (None, true, true) => LayerConfig {
            weight: QuantKey::WEIGHT_PER_CHANNEL,
            ..LayerConfig::per_tensor_static(n, k, dt, dt)
        },
        (None, true, false) => LayerConfig::per_token_per_channel(n, k, dt, dt),
        (None, false, true) => LayerConfig::per_tensor_static(n, k, dt, dt),
        (None, false, false) => LayerConfig {
            activation: Some(QuantKey::ACT_PER_TENSOR_DYNAMIC),
            ..LayerConfig::per_tensor_static(n, k, dt, dt)
        },
    };
    // scale_fmt = ue8m0 means dynamic activation scales are rounded up to powers of two.
    // The weight scales are whatever the file stores (f32 holding powers of two, usually);
    // the caller marks the weight key ue8m0 when they are stored as F8_E8M0.
    if q.scale_format == ScaleFormat::Ue8m0 {
        if let Some(a) = c.activation.as_mut().filter(|a| a.dynamic) {
            a.scale_dtype = ScaleDtype::Ue8m0;
        }
    }
    c.bias = bias;
    c
}

/// Compares names with runs of digits compared as numbers (`layers.2` < `layers.10`).
pub fn natural_cmp(a: &str, b: &str) -> Ordering {
    let (mut a, mut b) = (a.as_bytes(), b.as_bytes());
    loop {
        match (a.first(), b.first()) {
            (None, None) => return Ordering::Equal,
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some(x), Some(y)) if x.is_ascii_digit() && y.is_ascii_digit() => {
                let da = a.iter().take_while(|c| c.is_ascii_digit()).count();
                let db = b.iter().take_while(|c| c.is_ascii_digit()).count();
                let (na, nb) = (&a[..da], &b[..db]);
                let trim = |s: &[u8]| {
                    let z = s.iter().take_while(|c| **c == b'0').count();
                    s.len() - z
                };
                let ord = trim(na)
                    .cmp(&trim(nb))
                    .then_with(|| na[da - trim(na)..].cmp(&nb[db - trim(nb)..]))
                    .then_with(|| da.cmp(&db));
                if ord != Ordering::Equal {
                    return ord;
                }
                a = &a[da..];
                b = &b[db..];
            }
            (Some(x), Some(y)) => {
                if x != y {
                    return x.cmp(y);
                }
                a = &a[1..];
                b = &b[1..];
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn natural_order() {
        let mut v = vec!["l.10.q", "l.2.q", "l.1.q", "l.02.k", "a"];
        v.sort_by(|a, b| natural_cmp(a, b));
        assert_eq!(v, ["a", "l.1.q", "l.2.q", "l.02.k", "l.10.q"]);
    }
}
