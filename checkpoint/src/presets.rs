//! Model shapes for synthetic checkpoints: a Llama-style decoder (q/k/v/o attention,
//! gate/up/down MLP) at a tiny size and at the 4096-hidden size of 7-8B models, and
//! mixture-of-experts decoders (the MLP a set of experts, named as Qwen3-MoE and
//! DeepSeek-V3 name them) at a tiny size and at DeepSeek-V3's expert shapes.

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
    /// [`Preset::Tiny`]'s attention with a Qwen3-MoE MLP: 4 experts of intermediate 320
    /// (ragged against 128x128 blocks), no shared expert, 2 decoder layers.
    TinyMoe,
    /// DeepSeek-V3's expert shapes (hidden 7168, expert intermediate 2048, one shared expert)
    /// with 4 routed experts, a small attention (4 heads of 128, 1 KV head) and 1 decoder
    /// layer: 225 MB of FP8 linear weights.
    DeepseekV3Moe,
}

/// How a checkpoint names its experts (both: `mlp.experts.E.{gate,up,down}_proj`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum MoeNaming {
    /// Qwen3-MoE: `Qwen3MoeForCausalLM`, no shared expert.
    Qwen3Moe,
    /// DeepSeek-V3: `DeepseekV3ForCausalLM`, shared experts as
    /// `mlp.shared_experts.{gate,up,down}_proj` (dense layers).
    DeepseekV3,
}

/// The mixture-of-experts MLP of a decoder.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct MoeShape {
    /// Routed experts per layer.
    pub experts: usize,
    /// Experts each token is routed to.
    pub top_k: usize,
    /// Intermediate size of one expert.
    pub intermediate: usize,
    /// Shared experts (one dense MLP of `shared * intermediate`), 0 for none.
    pub shared: usize,
    /// How the checkpoint names them.
    pub naming: MoeNaming,
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
    /// The mixture-of-experts MLP (None: a dense gate/up/down MLP).
    pub moe: Option<MoeShape>,
}

impl Preset {
    /// Every preset.
    pub const ALL: [Preset; 4] = [
        Preset::Tiny,
        Preset::Small4096,
        Preset::TinyMoe,
        Preset::DeepseekV3Moe,
    ];

    /// The name used on the command line.
    pub const fn name(self) -> &'static str {
        match self {
            Preset::Tiny => "tiny",
            Preset::Small4096 => "small-4096",
            Preset::TinyMoe => "tiny-moe",
            Preset::DeepseekV3Moe => "deepseek-v3-moe",
        }
    }

    /// The model shape.
    pub const fn shape(self) -> ModelShape {
        const TINY: ModelShape = ModelShape {
            hidden: 256,
            intermediate: 688,
            heads: 4,
            kv_heads: 1,
            head_dim: 64,
            layers: 2,
            vocab: 512,
            moe: None,
        };
        match self {
            Preset::Tiny => TINY,
            Preset::Small4096 => ModelShape {
                hidden: 4096,
                intermediate: 14336,
                heads: 32,
                kv_heads: 8,
                head_dim: 128,
                layers: 1,
                vocab: 1024,
                moe: None,
            },
            Preset::TinyMoe => ModelShape {
                moe: Some(MoeShape {
                    experts: 4,
                    top_k: 2,
                    intermediate: 320,
                    shared: 0,
                    naming: MoeNaming::Qwen3Moe,
                }),
                ..TINY
            },
            Preset::DeepseekV3Moe => ModelShape {
                hidden: 7168,
                intermediate: 18432,
                heads: 4,
                kv_heads: 1,
                head_dim: 128,
                layers: 1,
                vocab: 1024,
                moe: Some(MoeShape {
                    experts: 4,
                    top_k: 2,
                    intermediate: 2048,
                    shared: 1,
                    naming: MoeNaming::DeepseekV3,
                }),
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
#[error("unknown preset `{0}`; known presets: tiny, small-4096, tiny-moe, deepseek-v3-moe")]
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

    /// The FP8 linear layers of one decoder layer as `(module suffix, N, K)`: the
    /// attention and a dense MLP ([`ModelShape::linears`]), or, for a mixture-of-experts
    /// model, the attention, the shared experts (one dense MLP) and every expert's
    /// `mlp.experts.E.{gate,up,down}_proj`.
    pub fn layer_linears(&self) -> Vec<(String, usize, usize)> {
        let all = self.linears();
        let Some(moe) = self.moe else {
            return all.iter().map(|&(s, n, k)| (s.to_string(), n, k)).collect();
        };
        let mut v: Vec<(String, usize, usize)> = all[..4]
            .iter()
            .map(|&(s, n, k)| (s.to_string(), n, k))
            .collect();
        let (h, i) = (self.hidden, moe.intermediate);
        let mlp = |prefix: &str, i: usize| {
            [("gate_proj", i, h), ("up_proj", i, h), ("down_proj", h, i)]
                .map(|(p, n, k)| (format!("{prefix}.{p}"), n, k))
        };
        if moe.shared > 0 {
            v.extend(mlp("mlp.shared_experts", moe.shared * i));
        }
        for e in 0..moe.experts {
            v.extend(mlp(&format!("mlp.experts.{e}"), i));
        }
        v
    }

    /// Bytes of FP8 linear weights in the whole model.
    pub fn fp8_bytes(&self) -> usize {
        self.layers
            * self
                .layer_linears()
                .iter()
                .map(|(_, n, k)| n * k)
                .sum::<usize>()
    }
}
