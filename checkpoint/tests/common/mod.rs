//! Helpers for the checkpoint tests: hand-made safetensors files and checkpoints, on disk
//! or in memory.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use safetensors::tensor::TensorView;
use safetensors::Dtype;

/// A tensor to write.
#[derive(Clone, Debug)]
pub struct T {
    pub name: String,
    pub dtype: Dtype,
    pub shape: Vec<usize>,
    pub data: Vec<u8>,
}

/// FP8 codes `[n, k]` (no NaN codes), varied.
pub fn fp8(name: &str, n: usize, k: usize) -> T {
    T {
        name: name.into(),
        dtype: Dtype::F8_E4M3,
        shape: vec![n, k],
        data: (0..n * k).map(|i| ((i * 37 + 11) % 126) as u8).collect(),
    }
}

/// f32 tensor of the given shape filled from `f(i)`.
pub fn f32s(name: &str, shape: &[usize], f: impl Fn(usize) -> f32) -> T {
    let n: usize = shape.iter().product();
    T {
        name: name.into(),
        dtype: Dtype::F32,
        shape: shape.to_vec(),
        data: (0..n).flat_map(|i| f(i).to_le_bytes()).collect(),
    }
}

/// A 128x128 block layer: weight `[n, k]` and `weight_scale_inv` `[ceil(n/128), ceil(k/128)]`.
pub fn block_layer(module: &str, n: usize, k: usize) -> Vec<T> {
    vec![
        fp8(&format!("{module}.weight"), n, k),
        f32s(
            &format!("{module}.weight_scale_inv"),
            &[n.div_ceil(128), k.div_ceil(128)],
            |i| 0.001 * (1.0 + i as f32 / 8.0),
        ),
    ]
}

/// A per-tensor static layer: weight, scalar `weight_scale` and `input_scale`.
pub fn tensor_layer(module: &str, n: usize, k: usize) -> Vec<T> {
    vec![
        fp8(&format!("{module}.weight"), n, k),
        f32s(&format!("{module}.weight_scale"), &[], |_| 0.002),
        f32s(&format!("{module}.input_scale"), &[1], |_| 0.003),
    ]
}

/// Serializes tensors with the safetensors crate.
pub fn st(tensors: &[T]) -> Vec<u8> {
    let views: Vec<(String, TensorView<'_>)> = tensors
        .iter()
        .map(|t| {
            (
                t.name.clone(),
                TensorView::new(t.dtype, t.shape.clone(), &t.data).expect("valid test tensor"),
            )
        })
        .collect();
    safetensors::serialize(views, None).expect("serialize")
}

/// A raw safetensors file from a header JSON text and data bytes.
pub fn raw(header: &str, data: &[u8]) -> Vec<u8> {
    let mut v = (header.len() as u64).to_le_bytes().to_vec();
    v.extend(header.as_bytes());
    v.extend(data);
    v
}

pub const BLOCK_CONFIG: &str = r#"{"torch_dtype":"bfloat16","quantization_config":{"quant_method":"fp8","weight_block_size":[128,128],"activation_scheme":"dynamic","modules_to_not_convert":["lm_head"]}}"#;
pub const TENSOR_CONFIG: &str = r#"{"torch_dtype":"bfloat16","quantization_config":{"quant_method":"fp8","activation_scheme":"static"}}"#;

/// A temporary directory removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> Self {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let p = std::env::temp_dir().join(format!(
            "fp8-ckpt-test-{tag}-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).expect("create temp dir");
        TempDir(p)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    /// Writes a file into the directory.
    pub fn write(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let p = self.0.join(name);
        std::fs::write(&p, bytes).expect("write test file");
        p
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
