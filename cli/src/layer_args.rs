//! Command-line description of a layer and of selection overrides, shared by subcommands.

use clap::{Args, ValueEnum};
use fp8_linear::{DType, LayerConfig, Options, QuantKey};

/// Layer kinds the CLI can describe.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum LayerKind {
    /// 128x128 weight blocks, dynamic 1x128 activation groups (DeepSeek-V3 style).
    Block,
    /// Per-tensor weight scale, static per-tensor input scale.
    PerTensor,
    /// Per-channel weight scales, dynamic per-token activation scales.
    PerToken,
    /// FP8 weights with 128x128 block scales, unquantized 16-bit activations (W8A16).
    WeightOnly,
}

/// A layer: its kind, shape and dtypes.
#[derive(Args, Debug, Clone)]
pub struct LayerArgs {
    /// Layer kind.
    #[arg(long, value_enum, default_value = "block")]
    pub layer: LayerKind,
    /// Output features (rows of the weight).
    #[arg(long, short = 'n', default_value_t = 4096)]
    pub n: usize,
    /// Input features (columns of the weight).
    #[arg(long, short = 'k', default_value_t = 7168)]
    pub k: usize,
    /// Activation dtype: f32, bf16 or f16.
    #[arg(long, default_value = "bf16", value_parser = parse_dtype)]
    pub input: DType,
    /// Output dtype: f32, bf16 or f16.
    #[arg(long, default_value = "bf16", value_parser = parse_dtype)]
    pub output: DType,
}

fn parse_dtype(s: &str) -> Result<DType, String> {
    DType::parse(s).ok_or_else(|| format!("unknown dtype `{s}` (expected f32, bf16 or f16)"))
}

impl LayerArgs {
    /// The layer config these arguments describe.
    pub fn config(&self) -> LayerConfig {
        let (n, k, i, o) = (self.n, self.k, self.input, self.output);
        match self.layer {
            LayerKind::Block => LayerConfig::block_128(n, k, i, o),
            LayerKind::PerTensor => LayerConfig::per_tensor_static(n, k, i, o),
            LayerKind::PerToken => LayerConfig::per_token_per_channel(n, k, i, o),
            LayerKind::WeightOnly => LayerConfig {
                output_dtype: o,
                ..LayerConfig::weight_only(QuantKey::WEIGHT_BLOCK_128, n, k, i)
            },
        }
    }
}

/// Selection overrides, on top of the FP8_LINEAR_FORCE / FP8_LINEAR_DISABLE /
/// FP8_LINEAR_BACKEND environment variables (read once, through `Options::from_env`).
#[derive(Args, Debug, Clone, Default)]
pub struct OverrideArgs {
    /// Try this kernel first (falls back to the normal order if it cannot run).
    #[arg(long)]
    pub force: Option<String>,
    /// Never pick these kernels (comma separated).
    #[arg(long, value_delimiter = ',')]
    pub disable: Vec<String>,
    /// Only consider kernels of this backend family (cpu, cublaslt, portable, marlin...).
    #[arg(long)]
    pub backend: Option<String>,
}

impl OverrideArgs {
    /// The environment's options with these overrides on top.
    pub fn options(&self, env: &Options) -> Options {
        let mut o = env.overrides.clone();
        if let Some(f) = &self.force {
            o = o.force(f.clone());
        }
        for d in &self.disable {
            o = o.disable(d.clone());
        }
        if let Some(b) = &self.backend {
            o = o.backend(b.clone());
        }
        env.clone().with_overrides(o)
    }
}
