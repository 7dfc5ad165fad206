//! Model shapes for synthetic checkpoints: a Llama-style decoder (q/k/v/o attention,
//! gate/up/down MLP) at a tiny size and at the 4096-hidden size of 7-8B models.

use std::fmt;
use std::str::FromStr;

/// A named model shape.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Preset {
    /// hidden 256, intermediate 688 (= 16 * 43: not a multiple of any block side from 32
    /// to 128, so the MLP layers are ragged along N or K against 32x32, 64x64, 128x64 and
    /// 128x128 blocks), 4 heads of 64, 1 KV head (k/v_proj N = 64 < 128), 2 decoder layers:
    /// fast enough for unit tests.
    Tiny,
    /// Llama-3-8B shapes (hidden 4096, intermediate 14336, 32 heads of 128, 8 KV heads) with
    /// 1 decoder layer and a 1024-token vocabulary: 218 MB of FP8 linear weights.
    Small4096,
}

/// The shape of a Llama-style decoder.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ModelShape {
    /// Hidden size.
    pub hidden: usize,
    /// MLP intermediate size.
    pub intermediate: usize,
    /// Attention heads.
    pub heads: usize,
    /// Key/value heads (grouped-query attention).
    pub kv_heads: usize,
    /// Size of one head.
    pub head_dim: usize,
    /// Decoder layers.
    pub layers: usize,
    /// Vocabulary size (embedding and lm_head rows).
    pub vocab: usize,
}

impl Preset {
    /// Every preset.
    pub const ALL: [Preset; 2] = [Preset::Tiny, Preset::Small4096];

    /// The name used on the command line.
    pub const fn name(self) -> &'static str {
        match self {
            Preset::Tiny => "tiny",
            Preset::Small4096 => "small-4096",
        }
    }

    /// The model shape.
    pub const fn shape(self) -> ModelShape {
        match self {
            Preset::Tiny => ModelShape {
                hidden: 256,
                intermediate: 688,
                heads: 4,
                kv_heads: 1,
                head_dim: 64,
                layers: 2,
                vocab: 512,
            },
            Preset::Small4096 => ModelShape {
                hidden: 4096,
                intermediate: 14336,
                heads: 32,
                kv_heads: 8,
                head_dim: 128,
                layers: 1,
                vocab: 1024,
            },
        }
    }
}

impl fmt::Display for Preset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Error for an unknown preset name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown preset `{0}`; known presets: tiny, small-4096")]
pub struct UnknownPreset(pub String);

impl FromStr for Preset {
    type Err = UnknownPreset;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Preset::ALL
            .into_iter()
            .find(|p| p.name().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| UnknownPreset(s.to_string()))
    }
}

impl ModelShape {
    /// The linear layers of one decoder layer as `(module suffix, N, K)`.
    pub fn linears(&self) -> [(&'static str, usize, usize); 7] {
        let (h, i) = (self.hidden, self.intermediate);
        let q = self.heads * self.head_dim;
        let kv = self.kv_heads * self.head_dim;
        [
            ("self_attn.q_proj", q, h),
            ("self_attn.k_proj", kv, h),
            ("self_attn.v_proj", kv, h),
            ("self_attn.o_proj", h, q),
            ("mlp.gate_proj", i, h),
            ("mlp.up_proj", i, h),
            ("mlp.down_proj", h, i),
        ]
    }

    /// Bytes of FP8 linear weights in the whole model.
    pub fn fp8_bytes(&self) -> usize {
        self.layers * self.linears().iter().map(|(_, n, k)| n * k).sum::<usize>()
    }
}
