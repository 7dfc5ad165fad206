//! A Llama-style decoder's FP8 linear layers in candle: the MLP (`down(silu(gate(x)) *
//! up(x))`) and the attention projections (q, k, v of the hidden states; o of the q heads,
//! standing in for the attention output), every decoder layer, loaded from a Hugging Face
//! FP8 checkpoint through `VarBuilder::from_mmaped_safetensors`, each output compared with
//! candle's own `candle_nn::Linear` on the dequantized weights (bf16).
//!
//! ```sh
//! cargo run --release -p fp8-linear-candle --example llama_mlp              # a tiny generated checkpoint
//! cargo run --release -p fp8-linear-candle --example llama_mlp -- DIR [TOKENS]
//! cargo run --release -p fp8-linear-candle --example llama_mlp -- --preset small-4096 [TOKENS]
//! ```
//!
//! `DIR` is a checkpoint made by `fp8-linear gen-checkpoint DIR` (or a real one with the
//! same tensor names); without it, `fp8_linear_checkpoint::generate` writes a preset with
//! 128x128 block scales (`tiny`, or the one `--preset NAME` names) into a temporary
//! directory, removed at the end. Runs on the CPU, and also on GPU 0 when the crate is
//! built with its `cuda` feature and a GPU is present; with `FP8_REQUIRE_CUDA=1`, a build
//! or a machine without a usable GPU is an error instead. `FP8_LINEAR_FORCE` and the other
//! `FP8_LINEAR_*` variables apply (`Options::from_env()`).

use std::path::{Path, PathBuf};
use std::time::Instant;

use candle_core::safetensors::MmapedSafetensors;
use candle_core::{DType, Device, Module, Tensor};
use candle_nn::VarBuilder;
use fp8_linear::Options;
use fp8_linear_candle::{dequantized_linear, Fp8Linear, QuantConfig};
use fp8_linear_checkpoint::{generate, GenOptions, Preset};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// `||a - b|| / ||b||` over all elements, in f32.
fn rel_err(a: &Tensor, b: &Tensor) -> candle_core::Result<f32> {
    let (a, b) = (a.to_dtype(DType::F32)?, b.to_dtype(DType::F32)?);
    let num = (&a - &b)?.sqr()?.sum_all()?.to_scalar::<f32>()?;
    let den = b.sqr()?.sum_all()?.to_scalar::<f32>()?;
    Ok((num / den.max(f32::MIN_POSITIVE)).sqrt())
}

/// The model's shape, read from the checkpoint's tensor shapes (`[N, K]` weights).
struct Shape {
    layers: usize,
    hidden: usize,
    intermediate: usize,
    q: usize,
    kv: usize,
}

fn shape(files: &[PathBuf]) -> Result<Shape> {
    // SAFETY: the files are not modified while mapped.
    let st = unsafe { MmapedSafetensors::multi(files)? };
    let dims = |name: &str| -> Result<Vec<usize>> { Ok(st.get(name)?.shape().to_vec()) };
    let gate = dims("model.layers.0.mlp.gate_proj.weight")?;
    let q = dims("model.layers.0.self_attn.q_proj.weight")?;
    let kv = dims("model.layers.0.self_attn.k_proj.weight")?;
    let layers = (0..)
        .take_while(|l| {
            st.get(&format!("model.layers.{l}.mlp.down_proj.weight"))
                .is_ok()
        })
        .count();
    Ok(Shape {
        layers,
        hidden: gate[1],
        intermediate: gate[0],
        q: q[0],
        kv: kv[0],
    })
}

/// One FP8 layer and candle's Linear on its dequantized weights.
struct Pair {
    name: &'static str,
    fp8: Fp8Linear,
    plain: candle_nn::Linear,
}

impl Pair {
    fn load(
        vb: &VarBuilder,
        name: &'static str,
        (k, n): (usize, usize),
        q: &QuantConfig,
        options: &Options,
    ) -> Result<Self> {
        Ok(Pair {
            name,
            fp8: Fp8Linear::load_with(k, n, vb.pp(name), q, options)?,
            plain: dequantized_linear(k, n, vb.pp(name), q)?,
        })
    }

    /// Both layers on `x`; prints the comparison; returns the FP8 output.
    fn run(&self, layer: usize, x: &Tensor) -> Result<Tensor> {
        let t0 = Instant::now();
        let y = self.fp8.forward(x)?;
        let _ = y.to_dtype(DType::F32)?.sum_all()?.to_scalar::<f32>()?; // waits for the device
        let ms = t0.elapsed().as_secs_f64() * 1e3;
        let want = self.plain.forward(x)?;
        let c = self.fp8.config();
        println!(
            "  layer {layer} {:<18} {:>5} x {:<5} {:<16} rel err vs candle bf16 Linear {:.2e}  ({ms:.2} ms)",
            self.name,
            c.n,
            c.k,
            self.fp8.kernel_name(),
            rel_err(&y, &want)?
        );
        Ok(y)
    }
}

fn run_on(device: &Device, files: &[PathBuf], q: &QuantConfig, tokens: usize) -> Result<f32> {
    let s = shape(files)?;
    let options = Options::from_env()?;
    // SAFETY: the files are not modified while mapped.
    let vb = unsafe { VarBuilder::from_mmaped_safetensors(files, DType::BF16, device)? };
    println!(
        "{device:?}: {} decoder layers, hidden {}, intermediate {}, q {} / kv {}, {tokens} tokens",
        s.layers, s.hidden, s.intermediate, s.q, s.kv
    );
    let x = Tensor::randn(0f32, 1f32, (1, tokens, s.hidden), device)?.to_dtype(DType::BF16)?;
    let mut worst = 0f32;
    for l in 0..s.layers {
        let lv = vb.pp(format!("model.layers.{l}"));
        let (h, i) = (s.hidden, s.intermediate);
        let mlp = lv.pp("mlp");
        let gate = Pair::load(&mlp, "gate_proj", (h, i), q, &options)?;
        let up = Pair::load(&mlp, "up_proj", (h, i), q, &options)?;
        let down = Pair::load(&mlp, "down_proj", (i, h), q, &options)?;
        let attn = lv.pp("self_attn");
        let qp = Pair::load(&attn, "q_proj", (h, s.q), q, &options)?;
        let kp = Pair::load(&attn, "k_proj", (h, s.kv), q, &options)?;
        let vp = Pair::load(&attn, "v_proj", (h, s.kv), q, &options)?;
        let op = Pair::load(&attn, "o_proj", (s.q, h), q, &options)?;
        if l == 0 {
            println!("{}", down.fp8.explain());
        }

        // The MLP: each layer against candle on the same input, then the whole block.
        let g = gate.run(l, &x)?;
        let u = up.run(l, &x)?;
        let act = (candle_nn::ops::silu(&g)? * u)?;
        let y = down.run(l, &act)?;
        let want = {
            let g = gate.plain.forward(&x)?;
            let u = up.plain.forward(&x)?;
            down.plain.forward(&(candle_nn::ops::silu(&g)? * u)?)?
        };
        let mlp_err = rel_err(&y, &want)?;
        println!("  layer {l} MLP block: rel err vs candle bf16 Linear {mlp_err:.2e}");
        worst = worst.max(mlp_err);

        // The attention projections.
        let qh = qp.run(l, &x)?;
        kp.run(l, &x)?;
        vp.run(l, &x)?;
        let o = op.run(l, &qh)?;
        worst = worst.max(rel_err(&o, &op.plain.forward(&qh)?)?);
    }
    Ok(worst)
}

/// The safetensors files of a checkpoint directory.
fn safetensors_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(format!("no .safetensors files in {}", dir.display()).into());
    }
    Ok(files)
}

/// Whether `FP8_REQUIRE_CUDA=1`: no usable GPU is then an error, not a CPU-only run.
fn cuda_required() -> bool {
    std::env::var("FP8_REQUIRE_CUDA").is_ok_and(|v| v.trim() == "1")
}

/// GPU 0 when the crate is built with `cuda` and the machine has one.
#[cfg(feature = "cuda")]
fn gpu() -> Result<Option<Device>> {
    match Device::new_cuda(0) {
        Ok(d) => Ok(Some(d)),
        Err(e) if cuda_required() => {
            Err(format!("FP8_REQUIRE_CUDA=1 but there is no usable CUDA device: {e}").into())
        }
        Err(e) => {
            println!("no usable CUDA device, CPU only: {e}");
            Ok(None)
        }
    }
}

#[cfg(not(feature = "cuda"))]
fn gpu() -> Result<Option<Device>> {
    if cuda_required() {
        return Err(
            "FP8_REQUIRE_CUDA=1 but the example is built without the `cuda` feature".into(),
        );
    }
    println!("built without the `cuda` feature: CPU only");
    Ok(None)
}

/// The command line, `[DIR | --preset NAME] [TOKENS]`: the checkpoint directory, whether it
/// was generated here (to remove at the end), and the token count.
fn checkpoint_from_args() -> Result<(PathBuf, bool, usize)> {
    let (mut preset, mut positional) = (None, Vec::new());
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--preset" => {
                let name = args
                    .next()
                    .ok_or("--preset needs a name (tiny, small-4096)")?;
                preset = Some(name.parse::<Preset>()?);
            }
            _ if a.starts_with("--") => return Err(format!("unknown option {a}").into()),
            _ => positional.push(a),
        }
    }
    // Without DIR (no positional argument, or a preset asked for), a checkpoint is generated
    // and the only positional argument is TOKENS.
    let generating = preset.is_some() || positional.is_empty();
    let tokens_at = if generating { 0 } else { 1 };
    if positional.len() > tokens_at + 1 {
        return Err(format!("unexpected argument {}", positional[tokens_at + 1]).into());
    }
    let tokens = match positional.get(tokens_at) {
        Some(t) => t.parse().map_err(|e| format!("TOKENS `{t}`: {e}"))?,
        None => 4,
    };
    if !generating {
        return Ok((PathBuf::from(&positional[0]), false, tokens));
    }
    let preset = preset.unwrap_or(Preset::Tiny);
    let dir = std::env::temp_dir().join(format!("fp8-llama-mlp-{}", std::process::id()));
    if let Err(e) = generate(&dir, &GenOptions::new(preset)) {
        let _ = std::fs::remove_dir_all(&dir);
        return Err(e.into());
    }
    println!("generated the {preset} preset in {}", dir.display());
    Ok((dir, true, tokens))
}

fn main() -> Result<()> {
    let (dir, generated, tokens) = checkpoint_from_args()?;
    let result = (|| -> Result<()> {
        let q = QuantConfig::read(&dir)?;
        println!("quantization: {}", q.describe());
        let files = safetensors_files(&dir)?;
        let devices: Vec<Device> = std::iter::once(Device::Cpu).chain(gpu()?).collect();
        for d in &devices {
            let worst = run_on(d, &files, &q, tokens)?;
            println!("{d:?}: worst relative error vs candle bf16 Linear: {worst:.2e}\n");
            // W8A8 quantizes activations to e4m3: a few percent of relative error.
            if worst > 0.1 {
                return Err(format!("relative error {worst:.2e} on {d:?} is too large").into());
            }
        }
        Ok(())
    })();
    if generated {
        let _ = std::fs::remove_dir_all(&dir);
    }
    result
}
