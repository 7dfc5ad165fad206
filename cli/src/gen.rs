//! `gen-checkpoint`: write a small synthetic FP8 checkpoint in the Hugging Face format.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::Args;
use fp8_linear::{tables::BUILTIN, DType, Device, SelectError};
use fp8_linear_checkpoint::{
    generate, layer_config, CheckpointError, GenOptions, Preset, QuantConfig, ScaleFormat,
};
use serde_json::json;

use crate::error::CliError;
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
    /// Per-tensor weight scales with static input scales instead of 128x128 blocks.
    #[arg(long)]
    pub per_tensor: bool,
    /// Power-of-two (ue8m0) block scales, `scale_fmt = ue8m0`. Refused while no kernel on
    /// the CPU or an H200 serves ue8m0 activation scales (none does today), since
    /// `plan` and `run` would then refuse the checkpoint.
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

/// Refuses `--ue8m0` while no kernel on the host CPU or an H200 can serve the layers of a
/// ue8m0 checkpoint: `scale_fmt = ue8m0` makes the activation scales ue8m0 too.
fn check_ue8m0(preset: Preset) -> Result<(), CliError> {
    let q = QuantConfig {
        block: Some([128, 128]),
        static_activations: false,
        scale_format: ScaleFormat::Ue8m0,
        ignored: Vec::new(),
        dtype: DType::Bf16,
    };
    let hidden = preset.shape().hidden;
    let config = layer_config(&q, hidden, hidden, false, false);
    let mut why = Vec::new();
    for name in ["cpu", "h200"] {
        let device = Device::profile(name).map_err(|e| CliError::runtime(e.to_string()))?;
        match BUILTIN.select(&device, &config, &fp8_linear::Overrides::none()) {
            Ok(_) => return Ok(()),
            Err(e) => why.push(format!("{name}: {}", reasons(&e))),
        }
    }
    Err(CliError::bad_input(format!(
        "--ue8m0 refused: ue8m0 activation scales are not supported by any kernel on the CPU \
         or an H200, so `plan` and `run` would refuse the checkpoint ({})",
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
    if args.ue8m0 {
        check_ue8m0(args.preset)?;
    }
    let opts = GenOptions {
        preset: args.preset,
        per_tensor: args.per_tensor,
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
