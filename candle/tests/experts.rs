//! `Fp8Experts` on the CPU: the experts of a generated Qwen3-MoE-style checkpoint
//! (`--preset tiny-moe`) loaded from a VarBuilder as one grouped layer, run as a candle
//! `Module` with a routing input, row for row what each expert's own `Fp8Linear` computes;
//! a bad routing is a candle error naming it.

use std::path::PathBuf;

use candle_core::{DType, Device, Module, Tensor};
use candle_nn::VarBuilder;
use fp8_linear_candle::{Fp8Experts, Fp8Linear, QuantConfig};
use fp8_linear_checkpoint::{generate, GenOptions, Preset};

/// A fresh directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        std::fs::remove_dir_all(&self.0).ok();
    }
}

#[test]
fn experts_run_as_a_routed_module_like_their_dense_layers() {
    let dir = TempDir(std::env::temp_dir().join(format!("fp8-candle-moe-{}", std::process::id())));
    generate(&dir.0, &GenOptions::new(Preset::TinyMoe)).unwrap_or_else(|e| panic!("{e}"));
    let q = QuantConfig::read(&dir.0).unwrap();
    let files = [dir.0.join("model.safetensors")];
    // SAFETY: the file is ours and not modified while mapped.
    let vb =
        unsafe { VarBuilder::from_mmaped_safetensors(&files, DType::BF16, &Device::Cpu) }.unwrap();
    let s = Preset::TinyMoe.shape();
    let moe = s.moe.unwrap();
    let (h, i) = (s.hidden, moe.intermediate);
    let at = vb.pp("model.layers.0.mlp.experts");
    let experts = Fp8Experts::load(h, i, moe.experts, "gate_proj", at.clone(), &q).unwrap();
    assert_eq!(experts.kernel_name(), "CpuGroupedFp8Gemm");
    assert_eq!(experts.experts(), 4);

    let ids = [0i64, 0, 2, -1, 3, 1];
    let m = ids.len();
    let x = Tensor::randn(0f32, 1.0, (m, h), &Device::Cpu)
        .unwrap()
        .to_dtype(DType::BF16)
        .unwrap();
    let id_t = Tensor::new(&ids, &Device::Cpu).unwrap();
    let y = experts.routed(&id_t, None).forward(&x).unwrap();
    assert_eq!(y.dims(), [m, i]);
    let w = [0.5f32, 1.0, 0.25, 0.0, 2.0, 1.0];
    let w_t = Tensor::new(&w, &Device::Cpu).unwrap();
    let yw = experts
        .forward_routed(&x.to_dtype(DType::F32).unwrap(), &id_t, Some(&w_t))
        .unwrap();
    assert_eq!(yw.dtype(), DType::F32);
    for (row, &id) in ids.iter().enumerate() {
        let got = y
            .get(row)
            .unwrap()
            .to_dtype(DType::F32)
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        if id < 0 {
            assert!(got.iter().all(|v| *v == 0.0), "a padding row is zero");
            continue;
        }
        let dense = Fp8Linear::load(h, i, at.pp(id as usize).pp("gate_proj"), &q).unwrap();
        let want = dense
            .forward(&x.get(row).unwrap().unsqueeze(0).unwrap())
            .unwrap()
            .to_dtype(DType::F32)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        assert_eq!(got, want, "row {row} is expert {id}'s own layer");
        let weighted = yw.get(row).unwrap().to_vec1::<f32>().unwrap();
        let err: f32 = weighted
            .iter()
            .zip(&want)
            .map(|(g, v)| (g - v * w[row]).abs())
            .fold(0.0, f32::max);
        let scale = want.iter().map(|v| v.abs()).fold(0.0, f32::max) * w[row];
        assert!(
            err <= 1e-2 * scale.max(1e-6),
            "row {row}: weighted off by {err}"
        );
    }

    let bad = Tensor::new(&[0i64, 4, 0, 0, 0, 0], &Device::Cpu).unwrap();
    let e = experts
        .forward_routed(&x, &bad, None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("expert id 4 of row 1 is out of range"), "{e}");
    let short = Tensor::new(&[0i64, 1], &Device::Cpu).unwrap();
    let e = experts
        .forward_routed(&x, &short, None)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("expert ids: expected one per row (6), got 2"),
        "{e}"
    );
    let e = Fp8Experts::load(h, i, moe.experts + 1, "gate_proj", at, &q).unwrap_err();
    assert!(e.to_string().contains("4.gate_proj"), "{e}");
}
