//! The FP8 weight bytes and f32 scales `Checkpoint` hands out are the ones written to the
//! files, derived independently of the crate's reader: each shard's safetensors header is
//! parsed here with serde_json, each tensor's bytes read from its byte range in the file
//! (the shard named by the index, for sharded checkpoints), and the scales decoded from those
//! bytes. The checkpoint path checks each layer against a reference built from the tensors
//! the loader returns, so this is what ties both to the file.
//!
//! Checkpoints: the generator's, sharded (block and per-tensor scales), and one written here
//! with the safetensors crate: ragged layers (N = 7748, K = 3884), every scale different,
//! weights and their scales in different shards.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use common::*;
use fp8_linear_checkpoint::{generate, Checkpoint, GenOptions, Preset};
use safetensors::tensor::TensorView;
use safetensors::Dtype;
use serde_json::{json, Value};

/// A tensor as the file describes it, read without the crate.
#[derive(Debug)]
struct FileTensor {
    /// The file that holds it.
    file: String,
    dtype: String,
    shape: Vec<usize>,
    bytes: Vec<u8>,
}

/// Every tensor of one safetensors file: the 8-byte little-endian header length, the header
/// JSON, and each tensor's `data_offsets` (relative to the end of the header).
fn read_file(path: &Path) -> BTreeMap<String, FileTensor> {
    let file = std::fs::read(path).unwrap();
    let n = u64::from_le_bytes(file[..8].try_into().unwrap()) as usize;
    let header: Value = serde_json::from_slice(&file[8..8 + n]).unwrap();
    let data = &file[8 + n..];
    let mut out = BTreeMap::new();
    for (name, t) in header.as_object().unwrap() {
        if name == "__metadata__" {
            continue;
        }
        let offsets: Vec<usize> = t["data_offsets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as usize)
            .collect();
        out.insert(
            name.clone(),
            FileTensor {
                file: path.file_name().unwrap().to_string_lossy().into_owned(),
                dtype: t["dtype"].as_str().unwrap().to_string(),
                shape: t["shape"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v.as_u64().unwrap() as usize)
                    .collect(),
                bytes: data[offsets[0]..offsets[1]].to_vec(),
            },
        );
    }
    out
}

/// Every tensor of a checkpoint directory, from the shard the index names (every shard's
/// tensors must be in the index), or from the one `model.safetensors`.
fn read_checkpoint(dir: &Path) -> BTreeMap<String, FileTensor> {
    let index = dir.join("model.safetensors.index.json");
    if !index.is_file() {
        return read_file(&dir.join("model.safetensors"));
    }
    let index: Value = serde_json::from_slice(&std::fs::read(index).unwrap()).unwrap();
    let map = index["weight_map"].as_object().unwrap();
    let mut files: Vec<&str> = map.values().map(|v| v.as_str().unwrap()).collect();
    files.sort();
    files.dedup();
    assert!(files.len() > 1, "a sharded checkpoint with {files:?}");
    let mut out = BTreeMap::new();
    for f in files {
        for (name, t) in read_file(&dir.join(f)) {
            assert_eq!(
                map[&name], f,
                "`{name}` is in {f}, the index says {}",
                map[&name]
            );
            out.insert(name, t);
        }
    }
    assert_eq!(
        out.len(),
        map.len(),
        "the index names tensors no shard holds"
    );
    out
}

fn f32s_of(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// Checks every FP8 layer the files hold against what the checkpoint hands out: the weight
/// bytes, the scales (bit for bit), the shapes, the static input scale; and that the
/// checkpoint finds no layer the files do not hold. Returns the layers' module names.
fn check_against_files(dir: &Path) -> Vec<String> {
    let files = read_checkpoint(dir);
    let ck = Checkpoint::open(dir).unwrap();
    let mut modules = Vec::new();
    for (name, w) in &files {
        let Some(module) = name.strip_suffix(".weight") else {
            continue;
        };
        if w.dtype != "F8_E4M3" {
            continue;
        }
        modules.push(module.to_string());
        let layer = ck
            .layer(module)
            .unwrap_or_else(|| panic!("the file holds FP8 `{name}`, the checkpoint no layer"));
        let t = ck.layer_tensors(layer).unwrap();
        let (n, k) = (w.shape[0], w.shape[1]);
        assert_eq!((layer.config.n, layer.config.k), (n, k), "{module}");
        assert_eq!(t.shape, [n, k], "{module}");
        assert!(
            t.weight == w.bytes.as_slice(),
            "{module}: the weight bytes differ from {}",
            w.file
        );

        let scale_name = [".weight_scale_inv", ".weight_scale"]
            .iter()
            .map(|s| format!("{module}{s}"))
            .find(|s| files.contains_key(s))
            .unwrap_or_else(|| panic!("{module}: no scale in the files"));
        let s = &files[&scale_name];
        assert_eq!(s.dtype, "F32", "{scale_name}");
        let want = f32s_of(&s.bytes);
        assert_eq!(t.scales.len(), want.len(), "{scale_name}");
        let differ = t
            .scales
            .iter()
            .zip(&want)
            .position(|(a, b)| a.to_bits() != b.to_bits());
        assert_eq!(differ, None, "{scale_name}: scale differs from {}", s.file);
        let elements = t.scale_shape[0] * t.scale_shape[1];
        assert_eq!(elements, want.len(), "{scale_name}: {:?}", t.scale_shape);
        if s.shape.len() == 2 {
            assert_eq!(t.scale_shape.as_slice(), s.shape.as_slice(), "{scale_name}");
        }

        let input = files.get(&format!("{module}.input_scale"));
        match (t.input_scale, input) {
            (None, None) => {}
            (Some([got]), Some(i)) => {
                assert_eq!(got.to_bits(), f32s_of(&i.bytes)[0].to_bits(), "{module}")
            }
            (got, file) => panic!("{module}: input scale {got:?}, the file {file:?}"),
        }
    }
    let mut loaded: Vec<&str> = ck.layers().iter().map(|l| l.name.as_str()).collect();
    loaded.sort();
    let mut from_files: Vec<&str> = modules.iter().map(String::as_str).collect();
    from_files.sort();
    assert_eq!(
        loaded, from_files,
        "the checkpoint's layers are not the files'"
    );
    modules
}

#[test]
fn generated_sharded_block_checkpoint_hands_out_the_file_bytes() {
    let dir = TempDir::new("file-bytes-block");
    let mut opts = GenOptions::new(Preset::Tiny);
    opts.shards = 3;
    generate(dir.path(), &opts).unwrap();
    let modules = check_against_files(dir.path());
    assert_eq!(modules.len(), 7 * Preset::Tiny.shape().layers);
    // The generator's block scales vary within a layer (so a mixed-up block would show).
    let files = read_checkpoint(dir.path());
    let s = f32s_of(&files["model.layers.0.mlp.down_proj.weight_scale_inv"].bytes);
    assert!(s.iter().any(|v| *v != s[0]), "{s:?}");
}

#[test]
fn generated_sharded_per_tensor_checkpoint_hands_out_the_file_bytes() {
    let dir = TempDir::new("file-bytes-tensor");
    let mut opts = GenOptions::new(Preset::Tiny);
    opts.shards = 2;
    opts.per_tensor = true;
    opts.seed = 5;
    generate(dir.path(), &opts).unwrap();
    let modules = check_against_files(dir.path());
    assert_eq!(modules.len(), 7 * Preset::Tiny.shape().layers);
}

/// FP8 e4m3 codes `[n, k]` from a seed: every code but the NaNs (0x7f, 0xff), in no order.
fn codes(n: usize, k: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n * k)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let b = (x >> 32) as u8;
            if b & 0x7f == 0x7f {
                b - 1
            } else {
                b
            }
        })
        .collect()
}

/// Block scales `[ceil(n/128), ceil(k/128)]`, every one different.
fn block_scales(n: usize, k: usize, base: f32) -> (Vec<usize>, Vec<f32>) {
    let shape = vec![n.div_ceil(128), k.div_ceil(128)];
    let count = shape[0] * shape[1];
    let v = (0..count)
        .map(|i| base * (1.0 + i as f32 / count as f32) * if i % 3 == 0 { 0.5 } else { 1.0 })
        .collect();
    (shape, v)
}

#[test]
fn ragged_sharded_checkpoint_with_non_uniform_scales_hands_out_the_file_bytes() {
    // (module, N, K): a ragged 7748 x 3884 layer (neither a multiple of 128), a small ragged
    // one and an aligned one.
    let layers = [
        ("model.layers.0.mlp.down_proj", 7748, 3884),
        ("model.layers.0.self_attn.o_proj", 130, 200),
        ("model.layers.1.self_attn.q_proj", 256, 384),
    ];
    let mut written: Vec<(T, &str)> = Vec::new();
    for (i, (module, n, k)) in layers.iter().enumerate() {
        let (n, k) = (*n, *k);
        let (sshape, scales) = block_scales(n, k, 2f32.powi(-9 - i as i32));
        assert!(scales.windows(2).all(|w| w[0] != w[1]));
        let weight = T {
            name: format!("{module}.weight"),
            dtype: Dtype::F8_E4M3,
            shape: vec![n, k],
            data: codes(n, k, i as u64 + 1),
        };
        let scale = T {
            name: format!("{module}.weight_scale_inv"),
            dtype: Dtype::F32,
            shape: sshape,
            data: scales.iter().flat_map(|s| s.to_le_bytes()).collect(),
        };
        // Each weight in one shard, its scale in the next.
        let (ws, ss) = [
            (
                "model-00001-of-00003.safetensors",
                "model-00002-of-00003.safetensors",
            ),
            (
                "model-00002-of-00003.safetensors",
                "model-00003-of-00003.safetensors",
            ),
            (
                "model-00003-of-00003.safetensors",
                "model-00001-of-00003.safetensors",
            ),
        ][i];
        written.push((weight, ws));
        written.push((scale, ss));
    }
    written.push((
        T {
            name: "model.norm.weight".into(),
            dtype: Dtype::BF16,
            shape: vec![256],
            data: vec![0x3f; 512],
        },
        "model-00002-of-00003.safetensors",
    ));

    let dir = TempDir::new("file-bytes-ragged");
    dir.write("config.json", BLOCK_CONFIG.as_bytes());
    let mut weight_map = BTreeMap::new();
    let mut shards: BTreeMap<&str, Vec<&T>> = BTreeMap::new();
    for (t, file) in &written {
        weight_map.insert(t.name.clone(), file.to_string());
        shards.entry(file).or_default().push(t);
    }
    for (file, tensors) in &shards {
        let views: Vec<(String, TensorView<'_>)> = tensors
            .iter()
            .map(|t| {
                let view = TensorView::new(t.dtype, t.shape.clone(), &t.data).unwrap();
                (t.name.clone(), view)
            })
            .collect();
        safetensors::serialize_to_file(views, None, &dir.path().join(file)).unwrap();
    }
    let index = json!({"metadata": {}, "weight_map": weight_map});
    dir.write(
        "model.safetensors.index.json",
        serde_json::to_string(&index).unwrap().as_bytes(),
    );

    // What the checkpoint hands out is what the files hold...
    let modules = check_against_files(dir.path());
    assert_eq!(modules.len(), layers.len());
    // ...and what the files hold is what was written.
    let files = read_checkpoint(dir.path());
    for (t, file) in &written {
        let f = &files[&t.name];
        assert_eq!(&f.file, file, "{}", t.name);
        assert_eq!(f.shape, t.shape, "{}", t.name);
        assert!(
            f.bytes == t.data,
            "{}: the file's bytes are not the written ones",
            t.name
        );
    }
    // The big layer's config and scale layout, spelled out.
    let ck = Checkpoint::open(dir.path()).unwrap();
    let down = ck.layer("model.layers.0.mlp.down_proj").unwrap();
    assert_eq!((down.config.n, down.config.k), (7748, 3884));
    assert_eq!(down.scale_shape, [61, 31]);
    let t = ck.layer_tensors(down).unwrap();
    assert_eq!(t.weight.len(), 7748 * 3884);
    let (_, want) = block_scales(7748, 3884, 2f32.powi(-9));
    assert_eq!(t.scales, want);
}
