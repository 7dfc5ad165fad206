//! Command-line description of a layer and of selection overrides, shared by subcommands.

use clap::{Args, ValueEnum};
use fp8_linear::{tables::BUILTIN, DType, LayerConfig, Options, ScaleDtype};
use fp8_linear_checkpoint::generate::MAX_BLOCK;

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
    /// The weight block of `block` and `weight-only` layers, ROWSxCOLS (rows along N,
    /// columns along K): 128x128 (the default), 32x32, 64x64, 128x64, ...; block layers
    /// quantize activations in 1xCOLS groups.
    #[arg(long, value_parser = parse_block, value_name = "ROWSxCOLS")]
    pub block: Option<Block>,
    /// Power-of-two (ue8m0) scales, as checkpoints with `scale_fmt = ue8m0` hold them:
    /// the weight block scales and the dynamic activation scales.
    #[arg(long)]
    pub ue8m0: bool,
}

/// A weight block `ROWSxCOLS` as `--block` takes it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Block {
    /// Rows along N.
    pub rows: u32,
    /// Columns along K.
    pub cols: u32,
}

impl Block {
    /// The block as `[rows, cols]`.
    pub fn pair(self) -> [u32; 2] {
        [self.rows, self.cols]
    }
}

/// Parses `--block ROWSxCOLS`, each side an integer from 1 to [`MAX_BLOCK`].
pub fn parse_block(s: &str) -> Result<Block, String> {
    let t = s.trim();
    let Some((r, c)) = t.split_once(['x', 'X']) else {
        return Err(format!(
            "--block must be ROWSxCOLS (rows along N, columns along K), e.g. 128x128, 32x32 or \
             128x64; got `{s}`"
        ));
    };
    let side = |what: &str, v: &str| -> Result<u32, String> {
        match v.trim().parse::<u64>() {
            Ok(0) => Err(format!("--block {t}: {what} must be at least 1")),
            Ok(b) if b > u64::from(MAX_BLOCK) => Err(format!(
                "--block {t}: {what} must be at most {MAX_BLOCK} (what weight_block_size accepts)"
            )),
            Ok(b) => Ok(b as u32),
            Err(_) => Err(format!(
                "--block {t}: {what} `{}` is not a positive integer (ROWSxCOLS, e.g. 128x64)",
                v.trim()
            )),
        }
    };
    Ok(Block {
        rows: side("rows", r)?,
        cols: side("cols", c)?,
    })
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
    /// The layer config these arguments describe; `--block` / `--ue8m0` on a layer kind
    /// without block scales is bad input.
    pub fn config(&self) -> Result<LayerConfig, CliError> {
        let blocky = matches!(self.layer, LayerKind::Block | LayerKind::WeightOnly);
        if !blocky && (self.block.is_some() || self.ue8m0) {
            return Err(CliError::bad_input(
                "--block and --ue8m0 describe block scales: use them with --layer block or \
                 --layer weight-only",
            ));
        }
        let (n, k, i, o) = (self.n, self.k, self.input, self.output);
        let Block { rows, cols } = self.block.unwrap_or(Block {
            rows: 128,
            cols: 128,
        });
        let scale_dtype = if self.ue8m0 {
            ScaleDtype::Ue8m0
        } else {
            ScaleDtype::F32
        };
        let block = LayerConfig::block(n, k, (rows, cols), scale_dtype, i, o);
        Ok(match self.layer {
            LayerKind::Block => block,
            LayerKind::PerTensor => LayerConfig::per_tensor_static(n, k, i, o),
            LayerKind::PerToken => LayerConfig::per_token_per_channel(n, k, i, o),
            LayerKind::WeightOnly => LayerConfig {
                output_dtype: o,
                ..LayerConfig::weight_only(block.weight, n, k, i)
            },
        })
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
