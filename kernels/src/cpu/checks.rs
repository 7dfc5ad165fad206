//! The config check shared by the CPU kernels.

use fp8_linear_core::quant::GroupShape;
use fp8_linear_core::validate::check_config_basics;
use fp8_linear_core::{DType, LayerConfig, Unsupported};

const fn float_io(d: DType) -> bool {
    matches!(d, DType::F32 | DType::Bf16 | DType::F16)
}

/// What the CPU kernels accept: any N, K >= 1; f32/bf16/f16 input and output; any weight
/// scale granularity; dynamic per-group, dynamic per-token, or per-tensor (static or
/// dynamic) activations, or none (weight-only). Activation scales may be f32 or ue8m0: ue8m0
/// dynamic scales are rounded up to powers of two (see [`super::reference`]); a static
/// per-tensor input scale is used as given.
pub const fn cpu_can_implement(config: &LayerConfig) -> Result<(), Unsupported> {
    if let Err(e) = check_config_basics(config) {
        return Err(e);
    }
    if !float_io(config.input_dtype) {
        return Err(Unsupported::new("input dtype must be f32, bf16 or f16"));
    }
    if !float_io(config.output_dtype) {
        return Err(Unsupported::new("output dtype must be f32, bf16 or f16"));
    }
    if let Some(a) = config.activation {
        match a.group {
            GroupShape::Group { .. } | GroupShape::PerToken if !a.dynamic => {
                return Err(Unsupported::new(
                    "only dynamic per-token(-group) activation quantization is supported",
                ))
            }
            GroupShape::Block { .. } | GroupShape::PerChannel => {
                return Err(Unsupported::new(
                    "activations are quantized per tensor, per token or per 1xG group, not per block/channel",
                ))
            }
            _ => {}
        }
    }
    Ok(())
}
