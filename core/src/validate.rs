//! Input checks shared by every kernel, so each backend rejects bad input with the same
//! typed errors: layer configs, weights and scales at load, inputs and outputs per call.

use crate::config::LayerConfig;
use crate::dtype::DType;
use crate::error::KernelError;
use crate::error::Unsupported;
use crate::quant::GroupShape;
use crate::tensor::{LayerWeights, Storage, Tensor, TensorMut};

/// Rejects layer configs no kernel can run: zero-sized N or K, a non-FP8-representable
/// group size of 0.
pub const fn check_config_basics(config: &LayerConfig) -> Result<(), Unsupported> {
    if config.n == 0 {
        return Err(Unsupported::new("N (output features) must be at least 1"));
    }
    if config.k == 0 {
        return Err(Unsupported::new("K (input features) must be at least 1"));
    }
    match config.weight.group {
        GroupShape::Block { rows: 0, .. }
        | GroupShape::Block { cols: 0, .. }
        | GroupShape::Group { cols: 0 } => {
            return Err(Unsupported::new("scale groups must not be empty"))
        }
        _ => {}
    }
    if let Some(a) = config.activation {
        if let GroupShape::Group { cols: 0 } = a.group {
            return Err(Unsupported::new("activation groups must not be empty"));
        }
    }
    Ok(())
}

/// Checks that every value of a host f32 scale tensor is finite and positive.
pub fn check_scales_finite(what: &'static str, t: &Tensor<'_>) -> Result<(), KernelError> {
    if let Storage::F32(s) = t.data {
        if let Some((index, &value)) = s
            .iter()
            .enumerate()
            .find(|(_, v)| !v.is_finite() || **v < 0.0)
        {
            return Err(KernelError::NotFinite { what, index, value });
        }
    }
    Ok(())
}

/// Checks a layer's weights against its config: the weight is FP8 `[N, K]`, the weight scale
/// is f32 and shaped per the weight key (ceil division for blocks), static activation keys
/// come with an `input_scale` of `[1, 1]`, a bias is `[1, N]`. Host scales must be finite.
pub fn check_layer_weights(config: &LayerConfig, w: &LayerWeights<'_>) -> Result<(), KernelError> {
    let (n, k) = (config.n, config.k);
    if w.weight.dtype() != DType::F8E4m3 {
        return Err(KernelError::DType {
            what: "weight",
            expected: "f8e4m3".into(),
            got: w.weight.dtype(),
        });
    }
    w.weight.check_shape("weight", [n, k])?;
    w.weight.check_contiguous("weight")?;

    let s = &w.weight_scale;
    if s.dtype() != DType::F32 {
        return Err(KernelError::DType {
            what: "weight_scale",
            expected: "f32".into(),
            got: s.dtype(),
        });
    }
    let want = config.weight_scale_shape();
    if s.shape != want {
        // A per-tensor scale may come as [1] / [1, 1]; a per-channel scale as [N, 1] or [1, N].
        let detail = match config.weight.group {
            GroupShape::Block { rows, cols } => format!(
                "{rows}x{cols} block scales for N={n}, K={k} must be [ceil(N/{rows}), ceil(K/{cols})] = {want:?}, got {:?}",
                s.shape
            ),
            g => format!("{g} scales must be {want:?}, got {:?}", s.shape),
        };
        return Err(KernelError::ScaleLayout {
            what: "weight_scale",
            detail,
        });
    }
    s.check_contiguous("weight_scale")?;
    check_scales_finite("weight_scale", s)?;

    if let Some(a) = config.activation {
        if !a.dynamic {
            let Some(is) = &w.input_scale else {
                return Err(KernelError::ScaleLayout {
                    what: "input_scale",
                    detail: "static activation quantization needs an input_scale of shape [1, 1]"
                        .into(),
                });
            };
            is.check_shape("input_scale", [1, 1])?;
            is.check_contiguous("input_scale")?;
            if is.dtype() != DType::F32 {
                return Err(KernelError::DType {
                    what: "input_scale",
                    expected: "f32".into(),
                    got: is.dtype(),
                });
            }
            check_scales_finite("input_scale", is)?;
        }
    }
    if let Some(ub) = &w.input_scale_ub {
        ub.check_shape("input_scale_ub", [1, 1])?;
        check_scales_finite("input_scale_ub", ub)?;
    }
    if config.bias {
        let Some(b) = &w.bias else {
            return Err(KernelError::MissingParam {
                kernel: "layer",
                name: "bias",
            });
        };
        b.check_shape("bias", [1, n])?;
        b.check_contiguous("bias")?;
    }
    Ok(())
}

/// Checks the input `[M, K]` and output `[M, N]` of one call and returns M. M must be >= 1;
/// dtypes must be the config's; both must be contiguous and fully backed by their buffers.
pub fn check_io(
    config: &LayerConfig,
    input: &Tensor<'_>,
    output: &TensorMut<'_>,
) -> Result<usize, KernelError> {
    let m = input.shape[0];
    if m == 0 {
        return Err(KernelError::shape(
            "input",
            "[M >= 1, K]",
            format!("{:?}", input.shape),
        ));
    }
    if input.shape[1] != config.k {
        return Err(KernelError::shape(
            "input",
            format!("[M, K = {}]", config.k),
            format!("{:?}", input.shape),
        ));
    }
    if input.dtype() != config.input_dtype {
        return Err(KernelError::DType {
            what: "input",
            expected: config.input_dtype.to_string(),
            got: input.dtype(),
        });
    }
    output.check_shape("output", [m, config.n])?;
    if output.dtype() != config.output_dtype {
        return Err(KernelError::DType {
            what: "output",
            expected: config.output_dtype.to_string(),
            got: output.dtype(),
        });
    }
    input.check_contiguous("input")?;
    output.check_contiguous("output")?;
    Ok(m)
}
