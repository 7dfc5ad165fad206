//! Synthetic FP8 checkpoints in the real Hugging Face format: `config.json` with a
//! `quantization_config`, safetensors shards written by the `safetensors` crate, and the
//! shard index. Weights are random FP8 codes, scales random; everything is derived from a
//! seed and the tensor's name, so the same options give the same bytes.
//!
//! Block checkpoints may use any weight block the reader accepts
//! ([`GenOptions::block`], `[rows along N, cols along K]`, each 1 to
//! [`MAX_BLOCK`]): each `weight_scale_inv` is `[ceil(N / rows), ceil(K / cols)]` (the
//! last block row and column ragged when the block does not divide N or K) and
//! `config.json` says `weight_block_size: [rows, cols]`; with [`GenOptions::ue8m0`] the
//! block scales are powers of two and `scale_fmt` is `ue8m0` (so activation scales are
//! rounded up to powers of two as well).

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use rand::rngs::StdRng;
use rand::{Rng, RngCore, SeedableRng};
use safetensors::tensor::View;
use safetensors::Dtype;
use serde_json::json;

use crate::error::CheckpointError;
use crate::index::INDEX_FILE;
use crate::presets::{ModelShape, MoeNaming, Preset};

/// Key in a generated `config.json` that marks the directory as ours (so a rerun may
/// replace the previous shards).
pub const SYNTHETIC_MARKER: &str = "fp8_linear_synthetic";

/// The largest block side the checkpoint reader accepts in `weight_block_size` (and so the
/// largest the generator writes).
pub const MAX_BLOCK: u32 = 65536;

/// The weight block of block checkpoints when none is given: 128 x 128 (DeepSeek-V3 style).
pub const DEFAULT_BLOCK: [u32; 2] = [128, 128];

/// What to generate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GenOptions {
    /// Model shape.
    pub preset: Preset,
    /// Per-tensor scales with static input scales instead of block scales (`block` and
    /// `ue8m0` are then not used).
    pub per_tensor: bool,
    /// The weight block `[rows along N, cols along K]` of block scales, each side 1 to
    /// [`MAX_BLOCK`] ([`DEFAULT_BLOCK`], 128 x 128, by default). Sizes need not be multiples
    /// of it: the last block row / column of a layer is then ragged.
    pub block: [u32; 2],
    /// Power-of-two (`ue8m0`) block scales, and `scale_fmt: "ue8m0"` in `config.json`.
    pub ue8m0: bool,
    /// Number of safetensors files (1: a single `model.safetensors`, no index).
    pub shards: usize,
    /// Decoder layers (the preset's count when None).
    pub layers: Option<usize>,
    /// Seed of every random value.
    pub seed: u64,
}

impl GenOptions {
    /// The defaults for a preset: 128x128 blocks with f32 scales, one file, seed 0.
    pub fn new(preset: Preset) -> Self {
        GenOptions {
            preset,
            per_tensor: false,
            block: DEFAULT_BLOCK,
            ue8m0: false,
            shards: 1,
            layers: None,
            seed: 0,
        }
    }

    /// These options with the weight block `[rows, cols]`.
    pub fn with_block(self, rows: u32, cols: u32) -> Self {
        GenOptions {
            block: [rows, cols],
            ..self
        }
    }

    /// The scale tensor shape of an `[n, k]` weight: `[ceil(n / rows), ceil(k / cols)]` for
    /// block scales, `[]` (one scalar) for per-tensor ones.
    pub fn scale_shape(&self, n: usize, k: usize) -> Vec<usize> {
        if self.per_tensor {
            Vec::new()
        } else {
            let [r, c] = self.block;
            vec![n.div_ceil(r as usize), k.div_ceil(c as usize)]
        }
    }

    fn shape(&self) -> ModelShape {
        let mut s = self.preset.shape();
        if let Some(l) = self.layers {
            s.layers = l;
        }
        s
    }
}

/// What was written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GenSummary {
    /// The files written (config, shards, index).
    pub files: Vec<PathBuf>,
    /// Tensors written.
    pub tensors: usize,
    /// Quantized linear layers.
    pub layers: usize,
    /// Bytes of FP8 weights.
    pub fp8_bytes: usize,
    /// Bytes of tensor data in all shards.
    pub tensor_bytes: usize,
}

#[derive(Copy, Clone, Debug)]
enum Fill {
    /// FP8 e4m3 codes, any value but NaN.
    Fp8,
    /// f32 weight scales around 2^-9 (powers of two when `pow2`).
    WeightScale { pow2: bool },
    /// f32 static activation scales for inputs of magnitude about 1.
    InputScale,
    /// bf16 uniform in `[lo, hi)`.
    Bf16(f32, f32),
}

/// One tensor to write; its bytes are generated when the writer asks for them, so at most
/// one tensor is in memory at a time.
struct Synth {
    name: String,
    dtype: Dtype,
    shape: Vec<usize>,
    fill: Fill,
    seed: u64,
}

fn fnv1a(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

impl Synth {
    fn new(name: String, dtype: Dtype, shape: Vec<usize>, fill: Fill, seed: u64) -> Self {
        let seed = seed ^ fnv1a(&name);
        Synth {
            name,
            dtype,
            shape,
            fill,
            seed,
        }
    }

    fn elements(&self) -> usize {
        self.shape.iter().product()
    }

    fn generate(&self) -> Vec<u8> {
        let mut rng = StdRng::seed_from_u64(self.seed);
        let n = self.elements();
        match self.fill {
            Fill::Fp8 => {
                let mut v = vec![0u8; n];
                rng.fill_bytes(&mut v);
                for b in &mut v {
                    // 0x7f / 0xff are NaN in e4m3fn: use the largest finite codes instead.
                    if *b & 0x7f == 0x7f {
                        *b -= 1;
                    }
                }
                v
            }
            Fill::WeightScale { pow2 } => (0..n)
                .flat_map(|_| {
                    let e = rng.random_range(-11..=-7);
                    let m = if pow2 {
                        1.0
                    } else {
                        rng.random_range(1.0f32..2.0)
                    };
                    (m * 2f32.powi(e)).to_le_bytes()
                })
                .collect(),
            Fill::InputScale => (0..n)
                .flat_map(|_| rng.random_range(0.002f32..0.004).to_le_bytes())
                .collect(),
            Fill::Bf16(lo, hi) => (0..n)
                .flat_map(|_| half::bf16::from_f32(rng.random_range(lo..hi)).to_le_bytes())
                .collect(),
        }
    }
}

impl View for &Synth {
    fn dtype(&self) -> Dtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Owned(self.generate())
    }
    fn data_len(&self) -> usize {
        self.elements() * self.dtype.bitsize() / 8
    }
}

/// The tensors of the model, in model order.
fn model_tensors(opts: &GenOptions) -> Vec<Synth> {
    let s = opts.shape();
    let seed = opts.seed;
    let bf = |name: String, shape: Vec<usize>, lo: f32, hi: f32| {
        Synth::new(name, Dtype::BF16, shape, Fill::Bf16(lo, hi), seed)
    };
    let mut v = vec![bf(
        "model.embed_tokens.weight".into(),
        vec![s.vocab, s.hidden],
        -0.05,
        0.05,
    )];
    for l in 0..s.layers {
        let p = format!("model.layers.{l}");
        v.push(bf(
            format!("{p}.input_layernorm.weight"),
            vec![s.hidden],
            0.9,
            1.1,
        ));
        for (suffix, n, k) in s.layer_linears() {
            let m = format!("{p}.{suffix}");
            v.push(Synth::new(
                format!("{m}.weight"),
                Dtype::F8_E4M3,
                vec![n, k],
                Fill::Fp8,
                seed,
            ));
            if opts.per_tensor {
                v.push(Synth::new(
                    format!("{m}.weight_scale"),
                    Dtype::F32,
                    vec![],
                    Fill::WeightScale { pow2: false },
                    seed,
                ));
                v.push(Synth::new(
                    format!("{m}.input_scale"),
                    Dtype::F32,
                    vec![],
                    Fill::InputScale,
                    seed,
                ));
            } else {
                v.push(Synth::new(
                    format!("{m}.weight_scale_inv"),
                    Dtype::F32,
                    opts.scale_shape(n, k),
                    Fill::WeightScale { pow2: opts.ue8m0 },
                    seed,
                ));
            }
        }
        if let Some(moe) = s.moe {
            // The router stays bf16 (unquantized in every FP8 MoE checkpoint).
            v.push(bf(
                format!("{p}.mlp.gate.weight"),
                vec![moe.experts, s.hidden],
                -0.05,
                0.05,
            ));
        }
        v.push(bf(
            format!("{p}.post_attention_layernorm.weight"),
            vec![s.hidden],
            0.9,
            1.1,
        ));
    }
    v.push(bf("model.norm.weight".into(), vec![s.hidden], 0.9, 1.1));
    v.push(bf(
        "lm_head.weight".into(),
        vec![s.vocab, s.hidden],
        -0.05,
        0.05,
    ));
    v
}

fn config_json(opts: &GenOptions) -> serde_json::Value {
    let s = opts.shape();
    let mut q = json!({
        "quant_method": "fp8",
        "activation_scheme": if opts.per_tensor { "static" } else { "dynamic" },
        "modules_to_not_convert": ["lm_head"],
    });
    if !opts.per_tensor {
        q["weight_block_size"] = json!(opts.block);
        q["fmt"] = json!("e4m3");
        if opts.ue8m0 {
            q["scale_fmt"] = json!("ue8m0");
        }
    }
    let (arch, model_type) = match s.moe.map(|m| m.naming) {
        None => ("LlamaForCausalLM", "llama"),
        Some(MoeNaming::Qwen3Moe) => ("Qwen3MoeForCausalLM", "qwen3_moe"),
        Some(MoeNaming::DeepseekV3) => ("DeepseekV3ForCausalLM", "deepseek_v3"),
    };
    let mut config = json!({
        "architectures": [arch],
        "model_type": model_type,
        "hidden_size": s.hidden,
        "intermediate_size": s.intermediate,
        "num_attention_heads": s.heads,
        "num_key_value_heads": s.kv_heads,
        "head_dim": s.head_dim,
        "num_hidden_layers": s.layers,
        "vocab_size": s.vocab,
        "torch_dtype": "bfloat16",
        "quantization_config": q,
        SYNTHETIC_MARKER: {"preset": opts.preset.name(), "seed": opts.seed},
    });
    if let Some(m) = s.moe {
        config["moe_intermediate_size"] = json!(m.intermediate);
        config["num_experts_per_tok"] = json!(m.top_k);
        match m.naming {
            MoeNaming::Qwen3Moe => config["num_experts"] = json!(m.experts),
            MoeNaming::DeepseekV3 => {
                config["n_routed_experts"] = json!(m.experts);
                config["n_shared_experts"] = json!(m.shared);
                config["first_k_dense_replace"] = json!(0);
            }
        }
    }
    config
}

/// Assigns tensors (in model order) to `shards` files of roughly equal size, each
/// non-empty. A weight and its scale may land in different files, as in real checkpoints.
fn assign_shards(tensors: &[Synth], shards: usize) -> Vec<usize> {
    let sizes: Vec<usize> = tensors.iter().map(|t| (&t).data_len()).collect();
    let total: usize = sizes.iter().sum();
    let target = total.div_ceil(shards);
    let mut out = Vec::with_capacity(tensors.len());
    let (mut shard, mut cur) = (0usize, 0usize);
    for (i, sz) in sizes.iter().enumerate() {
        let tensors_left = tensors.len() - i;
        let must_split = tensors_left < shards - shard;
        if cur > 0 && shard + 1 < shards && (must_split || cur + sz > target) {
            shard += 1;
            cur = 0;
        }
        cur += sz;
        out.push(shard);
    }
    out
}

fn shard_name(i: usize, shards: usize) -> String {
    if shards == 1 {
        "model.safetensors".into()
    } else {
        format!("model-{:05}-of-{:05}.safetensors", i + 1, shards)
    }
}

/// Refuses to write over a checkpoint we did not generate; removes the shards and index of
/// a previous synthetic one.
fn prepare_dir(dir: &Path) -> Result<(), CheckpointError> {
    std::fs::create_dir_all(dir).map_err(|e| CheckpointError::io("create", dir, e))?;
    let config = dir.join("config.json");
    if config.exists() {
        let ours = std::fs::read(&config)
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .is_some_and(|v| v.get(SYNTHETIC_MARKER).is_some());
        if !ours {
            return Err(CheckpointError::Generate(format!(
                "{} already holds a config.json that this generator did not write; choose an empty directory",
                dir.display()
            )));
        }
    }
    let rd = std::fs::read_dir(dir).map_err(|e| CheckpointError::io("list", dir, e))?;
    for entry in rd.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let stale =
            name == INDEX_FILE || (name.starts_with("model") && name.ends_with(".safetensors"));
        if stale {
            std::fs::remove_file(entry.path())
                .map_err(|e| CheckpointError::io("remove", entry.path(), e))?;
        }
    }
    Ok(())
}

/// Writes a synthetic checkpoint into `dir` (created if needed). A directory holding a
/// checkpoint this generator did not write is refused; a previous synthetic one is replaced.
pub fn generate(dir: &Path, opts: &GenOptions) -> Result<GenSummary, CheckpointError> {
    if opts.shards == 0 {
        return Err(CheckpointError::Generate(
            "--shards must be at least 1".into(),
        ));
    }
    if !opts.per_tensor {
        let [r, c] = opts.block;
        if !(1..=MAX_BLOCK).contains(&r) || !(1..=MAX_BLOCK).contains(&c) {
            return Err(CheckpointError::Generate(format!(
                "weight block {r}x{c}: rows and cols must each be 1 to {MAX_BLOCK} (what \
                 weight_block_size accepts)"
            )));
        }
    }
    let tensors = model_tensors(opts);
    if opts.shards > tensors.len() {
        return Err(CheckpointError::Generate(format!(
            "{} shards requested but the model has only {} tensors",
            opts.shards,
            tensors.len()
        )));
    }
    prepare_dir(dir)?;
    let assignment = assign_shards(&tensors, opts.shards);
    let mut files = Vec::new();
    let mut weight_map = BTreeMap::new();
    for shard in 0..opts.shards {
        let name = shard_name(shard, opts.shards);
        let members: Vec<(String, &Synth)> = tensors
            .iter()
            .zip(&assignment)
            .filter(|(_, s)| **s == shard)
            .map(|(t, _)| (t.name.clone(), t))
            .collect();
        for (t, _) in &members {
            weight_map.insert(t.clone(), name.clone());
        }
        let path = dir.join(&name);
        let meta = HashMap::from([("format".to_string(), "pt".to_string())]);
        safetensors::serialize_to_file(members, Some(meta), &path).map_err(|e| match e {
            safetensors::SafeTensorError::IoError(io) => CheckpointError::io("write", &path, io),
            other => CheckpointError::Generate(format!("{}: {other}", path.display())),
        })?;
        files.push(path);
    }
    let tensor_bytes: usize = tensors.iter().map(|t| (&t).data_len()).sum();
    if opts.shards > 1 {
        let index = json!({
            "metadata": {"total_size": tensor_bytes},
            "weight_map": weight_map,
        });
        let path = dir.join(INDEX_FILE);
        write_json(&path, &index)?;
        files.push(path);
    }
    let config = dir.join("config.json");
    write_json(&config, &config_json(opts))?;
    files.insert(0, config);
    Ok(GenSummary {
        files,
        tensors: tensors.len(),
        layers: tensors.iter().filter(|t| t.dtype == Dtype::F8_E4M3).count(),
        fp8_bytes: opts.shape().fp8_bytes(),
        tensor_bytes,
    })
}

fn write_json(path: &Path, v: &serde_json::Value) -> Result<(), CheckpointError> {
    let mut text =
        serde_json::to_string_pretty(v).map_err(|e| CheckpointError::Generate(e.to_string()))?;
    text.push('\n');
    std::fs::write(path, text).map_err(|e| CheckpointError::io("write", path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_are_balanced_and_non_empty() {
        let opts = GenOptions::new(Preset::Tiny);
        let t = model_tensors(&opts);
        for shards in 1..=6 {
            let a = assign_shards(&t, shards);
            for s in 0..shards {
                assert!(a.contains(&s), "shard {s} of {shards} empty: {a:?}");
            }
            assert!(a.windows(2).all(|w| w[0] <= w[1]));
        }
    }

    #[test]
    fn generation_is_deterministic_and_nan_free() {
        let t = Synth::new(
            "a.weight".into(),
            Dtype::F8_E4M3,
            vec![64, 64],
            Fill::Fp8,
            7,
        );
        let (x, y) = (t.generate(), t.generate());
        assert_eq!(x, y);
        assert!(x.iter().all(|b| b & 0x7f != 0x7f));
        let other = Synth::new(
            "b.weight".into(),
            Dtype::F8_E4M3,
            vec![64, 64],
            Fill::Fp8,
            7,
        );
        assert_ne!(x, other.generate());
    }

    #[test]
    fn block_shapes_size_the_scale_tensors_and_the_config() {
        for (r, c) in [(32, 32), (64, 64), (128, 64), (64, 128), (1, 7), (128, 128)] {
            let opts = GenOptions::new(Preset::Tiny).with_block(r, c);
            let s = opts.shape();
            let t = model_tensors(&opts);
            for (suffix, n, k) in s.linears() {
                let name = format!("model.layers.0.{suffix}.weight_scale_inv");
                let scale = t.iter().find(|t| t.name == name).unwrap();
                let want = vec![n.div_ceil(r as usize), k.div_ceil(c as usize)];
                assert_eq!(scale.shape, want, "{name} for {r}x{c}");
            }
            let q = &config_json(&opts)["quantization_config"];
            assert_eq!(q["weight_block_size"], json!([r, c]));
        }
        // The tiny preset is ragged against a 32x32 block: intermediate 688 = 21.5 * 32.
        assert_eq!(
            GenOptions::new(Preset::Tiny)
                .with_block(32, 32)
                .scale_shape(688, 256),
            vec![22, 8]
        );
        let pt = GenOptions {
            per_tensor: true,
            ..GenOptions::new(Preset::Tiny)
        };
        assert!(pt.scale_shape(64, 64).is_empty());
        assert!(config_json(&pt)["quantization_config"]
            .get("weight_block_size")
            .is_none());
    }

    #[test]
    fn ue8m0_scales_are_powers_of_two_and_bad_blocks_are_refused() {
        let opts = GenOptions {
            ue8m0: true,
            ..GenOptions::new(Preset::Tiny).with_block(32, 32)
        };
        let q = &config_json(&opts)["quantization_config"];
        assert_eq!(q["scale_fmt"], json!("ue8m0"));
        let t = model_tensors(&opts);
        let scale = t
            .iter()
            .find(|t| t.name.ends_with("weight_scale_inv"))
            .unwrap();
        let bytes = scale.generate();
        assert_eq!(bytes.len(), scale.elements() * 4);
        for c in bytes.chunks_exact(4) {
            let v = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            assert!(v > 0.0 && v.to_bits() & 0x7f_ffff == 0, "{v}");
        }
        let dir = std::env::temp_dir().join(format!("fp8-gen-badblock-{}", std::process::id()));
        for block in [[0, 32], [32, 0], [MAX_BLOCK + 1, 1]] {
            let bad = GenOptions {
                block,
                ..GenOptions::new(Preset::Tiny)
            };
            let e = generate(&dir, &bad).unwrap_err();
            assert!(e.to_string().contains("rows and cols"), "{e}");
        }
        assert!(!dir.exists(), "a refused checkpoint writes nothing");
    }

    #[test]
    fn every_layout_reads_back_with_its_block_and_scale_format() {
        use fp8_linear_core::quant::{GroupShape, ScaleDtype};
        for (r, c) in [(32, 32), (64, 64), (128, 64)] {
            for ue8m0 in [false, true] {
                let opts = GenOptions {
                    ue8m0,
                    layers: Some(1),
                    ..GenOptions::new(Preset::Tiny).with_block(r, c)
                };
                let dir = std::env::temp_dir().join(format!(
                    "fp8-gen-layout-{r}x{c}-{ue8m0}-{}",
                    std::process::id()
                ));
                generate(&dir, &opts).unwrap();
                let ck = crate::Checkpoint::open(&dir).unwrap();
                assert_eq!(ck.quant().block, Some([r, c]));
                assert_eq!(ck.layers().len(), 7);
                let mut ragged = 0;
                for l in ck.layers() {
                    let (n, k) = (l.config.n, l.config.k);
                    assert_eq!(
                        l.config.weight.group,
                        GroupShape::Block { rows: r, cols: c }
                    );
                    let a = l.config.activation.unwrap();
                    assert_eq!(a.group, GroupShape::Group { cols: c });
                    let fmt = if ue8m0 {
                        ScaleDtype::Ue8m0
                    } else {
                        ScaleDtype::F32
                    };
                    assert_eq!(a.scale_dtype, fmt, "{}", l.name);
                    let want = [n.div_ceil(r as usize), k.div_ceil(c as usize)];
                    assert_eq!(l.scale_shape, want, "{}", l.name);
                    ragged += usize::from(n % r as usize != 0 || k % c as usize != 0);
                    let t = ck.layer_tensors(l).unwrap();
                    assert_eq!(t.scales.len(), want[0] * want[1]);
                }
                assert!(ragged >= 3, "{r}x{c}: the MLP layers are ragged");
                std::fs::remove_dir_all(&dir).ok();
            }
        }
    }
}
