//! Command-line description of a layer and of selection overrides, shared by subcommands.

use clap::{Args, ValueEnum};
use fp8_linear::{tables::BUILTIN, DType, LayerConfig, Options, QuantKey};

use crate::error::CliError;
use crate::sizes::MAX_ITERS;

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
    /// Output features (rows of the weight), at least 1.
    #[arg(long, short = 'n', default_value_t = 4096, value_parser = parse_n)]
    pub n: usize,
    /// Input features (columns of the weight), at least 1.
    #[arg(long, short = 'k', default_value_t = 7168, value_parser = parse_k)]
    pub k: usize,
    /// Activation dtype: f32, bf16 or f16.
    #[arg(long, default_value = "bf16", value_parser = parse_dtype)]
    pub input: DType,
    /// Output dtype: f32, bf16 or f16.
    #[arg(long, default_value = "bf16", value_parser = parse_dtype)]
    pub output: DType,
}

fn at_least_one(s: &str, what: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(0) => Err(format!("{what} must be at least 1")),
        Ok(v) => Ok(v),
        Err(e) => Err(format!(
            "{what} must be an integer from 1 to {}: {e}",
            usize::MAX
        )),
    }
}

/// `-m`: rows of the activations, at least 1.
pub fn parse_m(s: &str) -> Result<usize, String> {
    at_least_one(s, "M")
}

fn parse_n(s: &str) -> Result<usize, String> {
    at_least_one(s, "N")
}

fn parse_k(s: &str) -> Result<usize, String> {
    at_least_one(s, "K")
}

/// `--iters`: timed calls, from 1 to [`MAX_ITERS`].
pub fn parse_iters(s: &str) -> Result<usize, String> {
    let v = at_least_one(s, "--iters")?;
    if v > MAX_ITERS {
        return Err(format!("--iters must be at most {MAX_ITERS}"));
    }
    Ok(v)
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
    /// The environment's options with these overrides on top; every kernel and backend
    /// name in them (flags and environment) must exist, or it is an error naming the
    /// closest names.
    pub fn options(&self, env: &Options) -> Result<Options, CliError> {
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
        crate::names::check_overrides(&BUILTIN, &o)?;
        Ok(env.clone().with_overrides(o))
    }
}
