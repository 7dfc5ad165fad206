//! `gen-checkpoint`: write a small synthetic FP8 checkpoint in the Hugging Face format.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::Args;
use fp8_linear_checkpoint::{generate, GenOptions, Preset};
use serde_json::json;

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
    /// Per-tensor weight scales with static input scales instead of 128x128 blocks.
    #[arg(long)]
    pub per_tensor: bool,
    /// Power-of-two (ue8m0) block scales.
    #[arg(long, conflicts_with = "per_tensor")]
    pub ue8m0: bool,
    /// Number of safetensors files (more than 1 adds model.safetensors.index.json).
    #[arg(long, default_value_t = 1)]
    pub shards: usize,
    /// Decoder layers (default: the preset's).
    #[arg(long)]
    pub layers: Option<usize>,
    /// Seed of the random weights and scales.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

fn parse_preset(s: &str) -> Result<Preset, String> {
    s.parse::<Preset>().map_err(|e| e.to_string())
}

/// Runs `gen-checkpoint`.
pub fn run(args: &GenArgs, json: bool) -> Result<ExitCode, String> {
    let opts = GenOptions {
        preset: args.preset,
        per_tensor: args.per_tensor,
        ue8m0: args.ue8m0,
        shards: args.shards,
        layers: args.layers,
        seed: args.seed,
    };
    let t = Instant::now();
    let s = generate(&args.dir, &opts).map_err(|e| e.to_string())?;
    let secs = t.elapsed().as_secs_f64();
    if json {
        let v = json!({
            "dir": args.dir.display().to_string(),
            "preset": args.preset.name(),
            "per_tensor": args.per_tensor,
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
                "per-tensor static scales"
            } else if args.ue8m0 {
                "128x128 ue8m0 block scales"
            } else {
                "128x128 block scales"
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
