//! Which arithmetic a kernel implements, so each kernel is checked against the matching
//! reference.

use std::fmt;

use crate::config::LayerConfig;

/// The numerics a kernel implements, declared with `numerics = ...` in `#[fp8_kernel]`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Numerics {
    /// What the layer's quant keys say: activations quantized per the activation key (W8A8),
    /// or kept as they are for a weight-only layer. The default.
    Layer,
    /// Weight-only (W8A16, Marlin's numerics): activations stay in 16 bits whatever the
    /// layer's activation key says; only the weight is FP8.
    W8A16,
}

impl Numerics {
    /// Kebab-case name for the CLI and JSON.
    pub const fn name(self) -> &'static str {
        match self {
            Numerics::Layer => "layer",
            Numerics::W8A16 => "w8a16",
        }
    }

    /// The config whose reference computes what a kernel of these numerics computes for
    /// `config`: the config itself, or its weight-only form (activation key dropped).
    pub const fn reference_config(self, config: &LayerConfig) -> LayerConfig {
        match self {
            Numerics::Layer => *config,
            Numerics::W8A16 => LayerConfig {
                activation: None,
                ..*config
            },
        }
    }
}

impl fmt::Display for Numerics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Family;
    use crate::dtype::DType;

    #[test]
    fn w8a16_reference_drops_the_activation_key() {
        let block = LayerConfig::block_128(7748, 3884, DType::Bf16, DType::Bf16);
        assert_eq!(Numerics::Layer.reference_config(&block), block);
        let r = Numerics::W8A16.reference_config(&block);
        assert_eq!(r.activation, None);
        assert_eq!(r.family(), Family::WeightOnly);
        assert_eq!((r.weight, r.n, r.k), (block.weight, block.n, block.k));
    }
}
