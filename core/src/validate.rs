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
    let m = check_activations(config, "input", input, (config.k, "K"))?;
    check_output(config, m, output)?;
    Ok(m)
}

/// Checks unquantized activations `[M >= 1, cols]` in the layer's input dtype, contiguous and
/// backed (`cols` with its name in errors: `(K, "K")`, `(2K, "2K")`); returns M.
fn check_activations(
    config: &LayerConfig,
    what: &'static str,
    input: &Tensor<'_>,
    (cols, name): (usize, &str),
) -> Result<usize, KernelError> {
    let m = input.shape[0];
    if m == 0 {
        return Err(KernelError::shape(
            what,
            format!("[M >= 1, {name}]"),
            format!("{:?}", input.shape),
        ));
    }
    if input.shape[1] != cols {
        return Err(KernelError::shape(
            what,
            format!("[M, {name} = {cols}]"),
            format!("{:?}", input.shape),
        ));
    }
    if input.dtype() != config.input_dtype {
        return Err(KernelError::DType {
            what,
            expected: config.input_dtype.to_string(),
            got: input.dtype(),
        });
    }
    input.check_contiguous(what)?;
    Ok(m)
}

/// The checks of an activation quantizer's call and returns M: the input `[M >= 1, K]` in
/// the layer's input dtype (`[M, 2K]`, gate then up, when `gated`: the fused SiLU-and-multiply
/// whose result is the layer's `[M, K]` input), the output `codes` `[M, K]` e4m3 and `scales`
/// f32 of [`activation_scale_shape`], all contiguous and backed by their buffers. A layer
/// without activation quantization is [`KernelError::PreQuantized`].
pub fn check_quantizer_io(
    config: &LayerConfig,
    input: &Tensor<'_>,
    gated: bool,
    codes: &TensorMut<'_>,
    scales: &TensorMut<'_>,
) -> Result<usize, KernelError> {
    let (what, cols) = if gated {
        ("gate_up", (2 * config.k, "2K"))
    } else {
        ("input", (config.k, "K"))
    };
    let m = check_activations(config, what, input, cols)?;
    check_codes_scales(config, m, codes, scales)?;
    Ok(m)
}

/// [`activation_scale_shape`], or the typed error for a layer whose activations are not
/// quantized.
fn scale_shape_or_refuse(config: &LayerConfig, m: usize) -> Result<[usize; 2], KernelError> {
    activation_scale_shape(config, m).ok_or_else(|| KernelError::PreQuantized {
        kernel: "layer",
        reason: match config.activation {
            None => "the layer is weight-only (W8A16): it reads unquantized activations".into(),
            Some(a) => format!("activations are not quantized per {}", a.group),
        },
    })
}

/// What the checks of pre-quantized codes and scales read of a view, read-only or writable.
trait View {
    fn dtype(&self) -> DType;
    fn check_shape(&self, what: &'static str, expected: [usize; 2]) -> Result<(), KernelError>;
    fn check_contiguous(&self, what: &'static str) -> Result<(), KernelError>;
}

macro_rules! view {
    ($t:ident) => {
        impl View for $t<'_> {
            fn dtype(&self) -> DType {
                $t::dtype(self)
            }
            fn check_shape(&self, what: &'static str, e: [usize; 2]) -> Result<(), KernelError> {
                $t::check_shape(self, what, e)
            }
            fn check_contiguous(&self, what: &'static str) -> Result<(), KernelError> {
                $t::check_contiguous(self, what)
            }
        }
    };
}
view!(Tensor);
view!(TensorMut);

/// The [`KernelError::DType`] of a view `what` whose dtype is not `dtype`.
fn expect_dtype(what: &'static str, v: &impl View, dtype: DType) -> Result<(), KernelError> {
    if v.dtype() != dtype {
        return Err(KernelError::DType {
            what,
            expected: dtype.to_string(),
            got: v.dtype(),
        });
    }
    Ok(())
}

/// `codes` `[m, K]` e4m3 and `scales` f32 of [`activation_scale_shape`] (the layer's
/// activation key must quantize), both contiguous and backed by their buffers.
fn check_codes_scales(
    config: &LayerConfig,
    m: usize,
    codes: &impl View,
    scales: &impl View,
) -> Result<(), KernelError> {
    let want = scale_shape_or_refuse(config, m)?;
    codes.check_shape("codes", [m, config.k])?;
    expect_dtype("codes", codes, DType::F8E4m3)?;
    scales.check_shape("scales", want)?;
    expect_dtype("scales", scales, DType::F32)?;
    codes.check_contiguous("codes")?;
    scales.check_contiguous("scales")
}

/// The shape of the f32 activation scales of `m` rows in the public pre-quantized layout,
/// per the layer's activation key: `[m, ceil(K / G)]` (row-major) for 1 x G groups,
/// `[m, 1]` per token, `[1, 1]` per tensor (static or dynamic); None for a weight-only
/// layer (no activation key) and for keys no kernel quantizes activations with (per
/// channel, blocks).
pub const fn activation_scale_shape(config: &LayerConfig, m: usize) -> Option<[usize; 2]> {
    match config.activation {
        Some(a) => match a.group {
            GroupShape::Group { cols } => Some([m, config.k.div_ceil(cols as usize)]),
            GroupShape::PerToken => Some([m, 1]),
            GroupShape::PerTensor => Some([1, 1]),
            GroupShape::PerChannel | GroupShape::Block { .. } => None,
        },
        None => None,
    }
}

/// Checks pre-quantized activations against the layer and returns M: `codes` `[M >= 1, K]`
/// e4m3 and `scales` f32 of [`activation_scale_shape`], both contiguous and backed by their
/// buffers. A layer without activation quantization (weight-only) is
/// [`KernelError::PreQuantized`]; the rest are the typed errors of [`check_io`].
pub fn check_quantized_input(
    config: &LayerConfig,
    codes: &Tensor<'_>,
    scales: &Tensor<'_>,
) -> Result<usize, KernelError> {
    let m = codes.shape[0];
    if m == 0 || codes.shape[1] != config.k {
        return Err(KernelError::shape(
            "codes",
            format!("[M >= 1, K = {}]", config.k),
            format!("{:?}", codes.shape),
        ));
    }
    check_codes_scales(config, m, codes, scales)?;
    Ok(m)
}

/// [`check_quantized_input`] and the output `[M, N]` in the layer's output dtype,
/// contiguous and backed (the checks of [`check_io`] on a pre-quantized call); returns M.
pub fn check_quantized_io(
    config: &LayerConfig,
    codes: &Tensor<'_>,
    scales: &Tensor<'_>,
    output: &TensorMut<'_>,
) -> Result<usize, KernelError> {
    let m = check_quantized_input(config, codes, scales)?;
    check_output(config, m, output)?;
    Ok(m)
}

/// The output checks of one call of `m` rows: `[m, N]`, the layer's output dtype,
/// contiguous and backed by its buffer.
fn check_output(config: &LayerConfig, m: usize, output: &TensorMut<'_>) -> Result<(), KernelError> {
    output.check_shape("output", [m, config.n])?;
    if output.dtype() != config.output_dtype {
        return Err(KernelError::DType {
            what: "output",
            expected: config.output_dtype.to_string(),
            got: output.dtype(),
        });
    }
    output.check_contiguous("output")
}
