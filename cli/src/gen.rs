//! `gen-checkpoint`: write a small synthetic FP8 checkpoint in the Hugging Face format.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::Args;
use fp8_linear::{tables::BUILTIN, DType, Device, SelectError};
use fp8_linear_checkpoint::generate::DEFAULT_BLOCK;
use fp8_linear_checkpoint::{
    generate, layer_config, CheckpointError, GenOptions, Preset, QuantConfig, ScaleFormat,
};
use serde_json::json;

use crate::error::CliError;
use crate::layer_args::{parse_block, Block};
use crate::sizes::MAX_GEN_LAYERS;

/// Arguments of `gen-checkpoint`.
#[derive(Args, Debug, Clone)]
pub struct GenArgs {
    /// Directory to write (created if missing; a previous synthetic checkpoint there is
    /// replaced, any other checkpoint is refused).
    pub dir: PathBuf,
    /// Model shape: `tiny` (hidden 256, 2 layers) or `small-4096` (Llama-3-8B shapes,
    /// 1 decoder layer, 218 MB of FP8 weights).
    #[arg(long, default_value = "tiny", value_parser = parse_preset)]
    pub preset: Preset,
    /// Per-tensor weight scales with static input scales instead of block scales.
    #[arg(long)]
    pub per_tensor: bool,
    /// The weight block of the block scales, ROWSxCOLS (rows along N, columns along K, each
    /// 1 to 65536): 128x128 (the default), 32x32, 64x64, 128x64, ... Layers whose N or K is
    /// not a multiple of it get a ragged last block row or column.
    #[arg(long, value_parser = parse_block, conflicts_with = "per_tensor", value_name = "ROWSxCOLS")]
    pub block: Option<Block>,
    /// Power-of-two (ue8m0) block scales, `scale_fmt = ue8m0` (activation scales are then
    /// rounded up to powers of two too). Refused when no kernel on the CPU or an H200
    /// serves the layout, since `plan` and `run` would then refuse the checkpoint.
    #[arg(long, conflicts_with = "per_tensor")]
    pub ue8m0: bool,
    /// Number of safetensors files (more than 1 adds model.safetensors.index.json), at
    /// least 1 and at most the model's tensor count.
    #[arg(long, default_value_t = 1, value_parser = parse_shards)]
    pub shards: usize,
    /// Decoder layers, 1 to 1024 (default: the preset's).
    #[arg(long, value_parser = parse_layers)]
    pub layers: Option<usize>,
    /// Seed of the random weights and scales.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

fn parse_preset(s: &str) -> Result<Preset, String> {
    s.parse::<Preset>().map_err(|e| e.to_string())
}

fn parse_shards(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(0) => Err("--shards must be at least 1".into()),
        Ok(v) => Ok(v),
        Err(e) => Err(format!("--shards must be a positive integer: {e}")),
    }
}

fn parse_layers(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(0) => Err(
            "--layers 0 writes a checkpoint with no quantized linear layer, which `plan` and \
             `run` refuse; give at least 1"
                .into(),
        ),
        Ok(v) if v > MAX_GEN_LAYERS => Err(format!(
            "--layers {v}: at most {MAX_GEN_LAYERS} decoder layers (a synthetic test checkpoint; \
             the deepest published models have fewer than 200)"
        )),
        Ok(v) => Ok(v),
        Err(e) => Err(format!(
            "--layers must be an integer from 1 to {MAX_GEN_LAYERS}: {e}"
        )),
    }
}

/// The reasons of a selection error, one line per kernel.
fn reasons(e: &SelectError) -> String {
    match e {
        SelectError::NoKernel { reasons, .. } => reasons
            .iter()
            .map(|(k, r)| format!("{k} {r}"))
            .collect::<Vec<_>>()
            .join("; "),
        e => e.to_string(),
    }
}

/// Refuses a block layout (a block other than 128x128 with f32 scales, or ue8m0 scales) when
/// no kernel on the host CPU or an H200 can serve the layers it writes: `plan` and `run`
/// would refuse the checkpoint. `scale_fmt = ue8m0` makes the activation scales ue8m0 too.
/// Both a layer whose N and K are multiples of the block and a ragged one are tried.
fn check_layout(preset: Preset, block: [u32; 2], ue8m0: bool) -> Result<(), CliError> {
    let q = QuantConfig {
        block: Some(block),
        static_activations: false,
        scale_format: if ue8m0 {
            ScaleFormat::Ue8m0
        } else {
            ScaleFormat::F32
        },
        ignored: Vec::new(),
        dtype: DType::Bf16,
    };
    let s = preset.shape();
    let mut why = Vec::new();
    for name in ["cpu", "h200"] {
        let device = Device::profile(name).map_err(|e| CliError::runtime(e.to_string()))?;
        let served = s.linears().iter().try_for_each(|&(_, n, k)| {
            let config = layer_config(&q, n, k, false, false);
            BUILTIN
                .select(&device, &config, &fp8_linear::Overrides::none())
                .map(|_| ())
        });
        match served {
            Ok(()) => return Ok(()),
            Err(e) => why.push(format!("{name}: {}", reasons(&e))),
        }
    }
    Err(CliError::bad_input(format!(
        "{} refused: no kernel on the CPU or an H200 serves {}x{} blocks{}, so `plan` and \
         `run` would refuse the checkpoint ({})",
        if ue8m0 { "--ue8m0" } else { "--block" },
        block[0],
        block[1],
        if ue8m0 { " with ue8m0 scales" } else { "" },
        why.join(" | ")
    )))
}

/// The kind of a generator error: bad input (a directory holding another checkpoint, too
/// many shards), or a runtime error when writing fails.
fn gen_error(e: CheckpointError) -> CliError {
    match e {
        CheckpointError::Io { .. } => CliError::runtime(e.to_string()),
        e => CliError::bad_input(e.to_string()),
    }
}

/// Runs `gen-checkpoint`.
pub fn run(args: &GenArgs, json: bool) -> Result<ExitCode, CliError> {
    let block = args.block.map_or(DEFAULT_BLOCK, Block::pair);
    if !args.per_tensor && (args.ue8m0 || block != DEFAULT_BLOCK) {
        check_layout(args.preset, block, args.ue8m0)?;
    }
    let opts = GenOptions {
        preset: args.preset,
        per_tensor: args.per_tensor,
        block,
        ue8m0: args.ue8m0,
        shards: args.shards,
        layers: args.layers,
        seed: args.seed,
    };
    let t = Instant::now();
    let s = generate(&args.dir, &opts).map_err(gen_error)?;
    let secs = t.elapsed().as_secs_f64();
    if json {
        let v = json!({
            "dir": args.dir.display().to_string(),
            "preset": args.preset.name(),
            "per_tensor": args.per_tensor,
            "block": if args.per_tensor { None } else { Some(block) },
            "ue8m0": args.ue8m0,
            "shards": args.shards,
            "seed": args.seed,
            "files": s.files.iter().map(|f| f.display().to_string()).collect::<Vec<_>>(),
            "tensors": s.tensors,
            "quantized_layers": s.layers,
            "fp8_bytes": s.fp8_bytes,
            "tensor_bytes": s.tensor_bytes,
            "seconds": secs,
        });
        println!("{v:#}");
    } else {
        println!(
            "wrote {} ({} preset, {}, seed {}): {} files, {} tensors, {} quantized layers, {} of FP8 weights, {} in all, in {:.2} s",
            args.dir.display(),
            args.preset,
            if args.per_tensor {
                "per-tensor static scales".to_string()
            } else {
                format!(
                    "{}x{}{} block scales",
                    block[0],
                    block[1],
                    if args.ue8m0 { " ue8m0" } else { "" }
                )
            },
            args.seed,
            s.files.len(),
            s.tensors,
            s.layers,
            crate::plan::bytes(s.fp8_bytes),
            crate::plan::bytes(s.tensor_bytes),
            secs
        );
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_values_parse_and_bad_ones_name_the_problem() {
        for (s, r, c) in [("32x32", 32, 32), ("128X64", 128, 64), (" 1x7 ", 1, 7)] {
            assert_eq!(parse_block(s), Ok(Block { rows: r, cols: c }), "{s}");
        }
        for (s, needle) in [
            ("128", "must be ROWSxCOLS"),
            ("0x32", "rows must be at least 1"),
            ("32x0", "cols must be at least 1"),
            ("65537x1", "rows must be at most 65536"),
            ("ax32", "rows `a` is not a positive integer"),
            ("32x-1", "cols `-1` is not a positive integer"),
            ("32x", "cols `` is not a positive integer"),
        ] {
            let e = parse_block(s).unwrap_err();
            assert!(e.contains(needle), "{s}: {e}");
        }
    }
}
