//! How a kernel's output is checked: against the f64 reference of the numerics the kernel
//! implements (its entry's [`reference_config`](fp8_linear::KernelEntry::reference_config)),
//! so a weight-only kernel such as Marlin on a W8A8 layer is compared with the W8A16
//! reference, never with the W8A8 one.

use fp8_linear::{DType, KernelEntry, LayerConfig};

/// The reference one kernel is checked against for one layer.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Reference {
    /// The config whose f64 reference computes what the kernel computes.
    pub config: LayerConfig,
    /// `w8a8` (activations quantized per the layer's activation key) or `w8a16`
    /// (activations kept in 16 bits).
    pub label: &'static str,
}

impl Reference {
    /// The reference `entry` is checked against on a layer of `config`.
    pub fn for_kernel(entry: &KernelEntry, config: &LayerConfig) -> Reference {
        let config = entry.reference_config(config);
        Reference {
            config,
            label: if config.activation.is_some() {
                "w8a8"
            } else {
                "w8a16"
            },
        }
    }
}

/// Tolerance on the relative Frobenius error against the f64 reference, by output dtype.
pub fn tolerance(d: DType) -> f64 {
    match d {
        DType::F32 => 1e-4,
        _ => 1e-2,
    }
}

/// NaN elements of an output. The CLI poisons every output buffer with NaN (f32) or the
/// 0xffff bit pattern (a NaN in bf16 and f16) before handing it to a kernel, so a NaN left
/// over is an element the kernel did not write, and fails the check.
pub fn count_nan(out: &[f32]) -> usize {
    out.iter().filter(|v| v.is_nan()).count()
}
