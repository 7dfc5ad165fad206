//! The layer config: everything selection needs to know about one linear layer.

use std::fmt;

use crate::dtype::DType;
use crate::quant::{GroupShape, QuantKey, ScaleDtype};

/// The kernel family a layer is routed to. The activation key decides it: per-group
/// activations go to the block-scaled tables, other quantized activations to the scaled
/// (per-tensor / per-token / per-channel) tables, unquantized activations to weight-only.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Family {
    /// Block-scaled W8A8 (1 x G activation groups, Bn x Bk weight blocks).
    BlockScaled,
    /// Per-tensor / per-token activations with per-tensor / per-channel weights.
    Scaled,
    /// FP8 weights, 16- or 32-bit activations (W8A16).
    WeightOnly,
}

impl Family {
    /// Every family.
    pub const ALL: [Family; 3] = [Family::BlockScaled, Family::Scaled, Family::WeightOnly];

    /// Kebab-case name used by the CLI and JSON.
    pub const fn name(self) -> &'static str {
        match self {
            Family::BlockScaled => "block-scaled",
            Family::Scaled => "scaled",
            Family::WeightOnly => "weight-only",
        }
    }

    /// `self == other`, usable in `const fn`.
    pub const fn same(self, other: Family) -> bool {
        self as u8 == other as u8
    }
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One linear layer `out[M, N] = x[M, K] @ W[N, K]^T` as a kernel sees it at load time.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct LayerConfig {
    /// How the weight is quantized.
    pub weight: QuantKey,
    /// How the activations are quantized; None for weight-only (W8A16) layers.
    pub activation: Option<QuantKey>,
    /// Output features (rows of the weight).
    pub n: usize,
    /// Input features (columns of the weight).
    pub k: usize,
    /// Dtype of the activations handed to `apply`.
    pub input_dtype: DType,
    /// Dtype of the output.
    pub output_dtype: DType,
    /// Whether a bias is added.
    pub bias: bool,
}

impl LayerConfig {
    /// A 128 x 128 block-quantized layer (weight blocks 128 x 128, dynamic 1 x 128 activations).
    pub const fn block_128(n: usize, k: usize, input: DType, output: DType) -> Self {
        LayerConfig {
            weight: QuantKey::WEIGHT_BLOCK_128,
            activation: Some(QuantKey::ACT_GROUP_128),
            n,
            k,
            input_dtype: input,
            output_dtype: output,
            bias: false,
        }
    }

    /// A block-quantized layer of any checkpoint layout: `rows` x `cols` weight blocks
    /// (rows along N, columns along K) and dynamic 1 x `cols` activation groups, both with
    /// scales in `scale_dtype` (f32, or ue8m0: powers of two). `block(n, k, 128, 128,
    /// ScaleDtype::F32, ..)` is [`LayerConfig::block_128`].
    pub const fn block(
        n: usize,
        k: usize,
        (rows, cols): (u32, u32),
        scale_dtype: ScaleDtype,
        input: DType,
        output: DType,
    ) -> Self {
        LayerConfig {
            weight: QuantKey {
                group: GroupShape::Block { rows, cols },
                scale_dtype,
                dynamic: false,
            },
            activation: Some(QuantKey {
                group: GroupShape::Group { cols },
                scale_dtype,
                dynamic: true,
            }),
            ..LayerConfig::block_128(n, k, input, output)
        }
    }

    /// A per-tensor layer with a static input scale.
    pub const fn per_tensor_static(n: usize, k: usize, input: DType, output: DType) -> Self {
        LayerConfig {
            weight: QuantKey::WEIGHT_PER_TENSOR,
            activation: Some(QuantKey::ACT_PER_TENSOR_STATIC),
            n,
            k,
            input_dtype: input,
            output_dtype: output,
            bias: false,
        }
    }

    /// Per-channel weights with dynamic per-token activations.
    pub const fn per_token_per_channel(n: usize, k: usize, input: DType, output: DType) -> Self {
        LayerConfig {
            weight: QuantKey::WEIGHT_PER_CHANNEL,
            activation: Some(QuantKey::ACT_PER_TOKEN_DYNAMIC),
            n,
            k,
            input_dtype: input,
            output_dtype: output,
            bias: false,
        }
    }

    /// Weight-only FP8 (W8A16): the given weight key, activations left unquantized.
    pub const fn weight_only(weight: QuantKey, n: usize, k: usize, input: DType) -> Self {
        LayerConfig {
            weight,
            activation: None,
            n,
            k,
            input_dtype: input,
            output_dtype: input,
            bias: false,
        }
    }

    /// The family of tables this layer is routed to (decided by the activation key).
    pub const fn family(&self) -> Family {
        match self.activation {
            None => Family::WeightOnly,
            Some(QuantKey {
                group: GroupShape::Group { .. },
                ..
            }) => Family::BlockScaled,
            Some(_) => Family::Scaled,
        }
    }

    /// The weight scale tensor's shape `[rows, cols]` for this layer (ceil division for
    /// blocks).
    pub const fn weight_scale_shape(&self) -> [usize; 2] {
        match self.weight.group {
            GroupShape::PerTensor => [1, 1],
            GroupShape::PerToken | GroupShape::PerChannel => [self.n, 1],
            GroupShape::Group { cols } => [self.n, self.k.div_ceil(cols as usize)],
            GroupShape::Block { rows, cols } => [
                self.n.div_ceil(rows as usize),
                self.k.div_ceil(cols as usize),
            ],
        }
    }
}

impl fmt::Display for LayerConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "N={} K={} weight: {}, ", self.n, self.k, self.weight)?;
        match self.activation {
            Some(a) => write!(f, "activation: {a}, ")?,
            None => f.write_str("activation: unquantized, ")?,
        }
        write!(f, "{} -> {}", self.input_dtype, self.output_dtype)?;
        if self.bias {
            f.write_str(", bias")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routing_follows_activation_key() {
        let b = LayerConfig::block_128(7748, 3884, DType::Bf16, DType::Bf16);
        assert_eq!(b.family(), Family::BlockScaled);
        assert_eq!(b.weight_scale_shape(), [61, 31]);
        let t = LayerConfig::per_tensor_static(64, 64, DType::Bf16, DType::Bf16);
        assert_eq!(t.family(), Family::Scaled);
        assert_eq!(t.weight_scale_shape(), [1, 1]);
        let w = LayerConfig::weight_only(QuantKey::WEIGHT_BLOCK_128, 10, 300, DType::F16);
        assert_eq!(w.family(), Family::WeightOnly);
        assert_eq!(w.weight_scale_shape(), [1, 3]);
    }
}
