//! Quantization keys: what dtype, what scale granularity, static or dynamic.

use std::fmt;

/// The block size used by 128 x 128 block-quantized checkpoints (DeepSeek-V3 style).
pub const BLOCK: u32 = 128;

/// The shape of the groups that share one scale.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum GroupShape {
    /// One scale for the whole tensor.
    PerTensor,
    /// One scale per row of the activations (1 x K).
    PerToken,
    /// One scale per output channel of the weight (one row of the N x K weight).
    PerChannel,
    /// One scale per row and per `cols` contiguous columns (activations, 1 x G).
    Group {
        /// Columns per group (128 for block checkpoints).
        cols: u32,
    },
    /// One scale per `rows` x `cols` block of the weight (128 x 128).
    Block {
        /// Rows (along N) per block.
        rows: u32,
        /// Columns (along K) per block.
        cols: u32,
    },
}

impl fmt::Display for GroupShape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GroupShape::PerTensor => f.write_str("per-tensor"),
            GroupShape::PerToken => f.write_str("per-token"),
            GroupShape::PerChannel => f.write_str("per-channel"),
            GroupShape::Group { cols } => write!(f, "1x{cols} groups"),
            GroupShape::Block { rows, cols } => write!(f, "{rows}x{cols} blocks"),
        }
    }
}

/// The dtype the scales are stored in.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum ScaleDtype {
    /// Plain f32 scales.
    F32,
    /// Powers of two (unsigned 8-bit exponent, "ue8m0"), held as f32 here.
    Ue8m0,
}

/// How a tensor is quantized: FP8 e4m3 with scales of a given shape, static or dynamic.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct QuantKey {
    /// Granularity of the scales.
    pub group: GroupShape,
    /// Dtype of the scales.
    pub scale_dtype: ScaleDtype,
    /// Static scales come with the checkpoint; dynamic ones are computed per call.
    pub dynamic: bool,
}

impl QuantKey {
    /// Weights of a 128 x 128 block checkpoint: static f32 scales per 128 x 128 block.
    pub const WEIGHT_BLOCK_128: QuantKey = QuantKey {
        group: GroupShape::Block {
            rows: BLOCK,
            cols: BLOCK,
        },
        scale_dtype: ScaleDtype::F32,
        dynamic: false,
    };
    /// Activations of a 128 x 128 block checkpoint: dynamic per-token 1 x 128 groups.
    pub const ACT_GROUP_128: QuantKey = QuantKey {
        group: GroupShape::Group { cols: BLOCK },
        scale_dtype: ScaleDtype::F32,
        dynamic: true,
    };
    /// Weights of a per-tensor checkpoint: one static scale.
    pub const WEIGHT_PER_TENSOR: QuantKey = QuantKey {
        group: GroupShape::PerTensor,
        scale_dtype: ScaleDtype::F32,
        dynamic: false,
    };
    /// Activations of a per-tensor static checkpoint: one static input scale.
    pub const ACT_PER_TENSOR_STATIC: QuantKey = QuantKey {
        group: GroupShape::PerTensor,
        scale_dtype: ScaleDtype::F32,
        dynamic: false,
    };
    /// Activations quantized dynamically with one scale per tensor.
    pub const ACT_PER_TENSOR_DYNAMIC: QuantKey = QuantKey {
        group: GroupShape::PerTensor,
        scale_dtype: ScaleDtype::F32,
        dynamic: true,
    };
    /// Activations quantized dynamically with one scale per token (row).
    pub const ACT_PER_TOKEN_DYNAMIC: QuantKey = QuantKey {
        group: GroupShape::PerToken,
        scale_dtype: ScaleDtype::F32,
        dynamic: true,
    };
    /// Weights with one static scale per output channel.
    pub const WEIGHT_PER_CHANNEL: QuantKey = QuantKey {
        group: GroupShape::PerChannel,
        scale_dtype: ScaleDtype::F32,
        dynamic: false,
    };
}

impl fmt::Display for QuantKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "fp8 {} {}{}",
            self.group,
            if self.dynamic { "dynamic" } else { "static" },
            if self.scale_dtype == ScaleDtype::Ue8m0 {
                " ue8m0"
            } else {
                ""
            }
        )
    }
}
