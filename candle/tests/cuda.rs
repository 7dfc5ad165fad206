//! `Fp8Linear` on candle CUDA tensors (feature `cuda`; needs a GPU, skips without one with
//! the reason printed, fails instead under FP8_REQUIRE_CUDA=1): a generated checkpoint
//! loaded through a VarBuilder on the GPU, the kernel fp8-linear selects for it, outputs
//! that stay on the device and agree with candle's own bf16 Linear on the dequantized
//! weights and with the CPU layer; one GPU handle per candle stream; a layer shared by
//! threads on an explicit stream.

#![cfg(feature = "cuda")]

use std::path::PathBuf;
use std::sync::Arc;

use candle_core::{DType, Device, Module, Tensor};
use candle_nn::VarBuilder;
use fp8_linear::Numerics;
use fp8_linear_candle::{dequantized_linear, Fp8Linear, QuantConfig};
use fp8_linear_checkpoint::{generate, GenOptions, Preset};
use fp8_linear_tests::gpu::gpu_or_skip;

/// A generated tiny checkpoint, removed when dropped.
struct Checkpoint(PathBuf);

impl Checkpoint {
    fn new(tag: &str) -> Self {
        let dir =
            std::env::temp_dir().join(format!("fp8-candle-cuda-{tag}-{}", std::process::id()));
        generate(&dir, &GenOptions::new(Preset::Tiny)).unwrap_or_else(|e| panic!("{e}"));
        Checkpoint(dir)
    }

    fn quant(&self) -> QuantConfig {
        QuantConfig::read(&self.0).unwrap_or_else(|e| panic!("{e}"))
    }

    fn vb(&self, device: &Device) -> VarBuilder<'static> {
        let files = [self.0.join("model.safetensors")];
        // SAFETY: the file is not modified while mapped.
        unsafe { VarBuilder::from_mmaped_safetensors(&files, DType::BF16, device) }
            .unwrap_or_else(|e| panic!("{e}"))
    }
}

impl Drop for Checkpoint {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn rel(a: &Tensor, b: &Tensor) -> f32 {
    let a = a
        .to_dtype(DType::F32)
        .unwrap()
        .to_device(&Device::Cpu)
        .unwrap();
    let b = b
        .to_dtype(DType::F32)
        .unwrap()
        .to_device(&Device::Cpu)
        .unwrap();
    let num = (&a - &b).unwrap().sqr().unwrap().sum_all().unwrap();
    let den = b.sqr().unwrap().sum_all().unwrap();
    (num.to_scalar::<f32>().unwrap() / den.to_scalar::<f32>().unwrap()).sqrt()
}

#[test]
fn layers_run_on_the_candle_device_and_agree_with_candle() {
    if gpu_or_skip("layers_run_on_the_candle_device_and_agree_with_candle").is_none() {
        return;
    }
    let ck = Checkpoint::new("agree");
    let q = ck.quant();
    let s = Preset::Tiny.shape();
    let gpu = Device::new_cuda(0).unwrap_or_else(|e| panic!("{e}"));
    let (vg, vc) = (ck.vb(&gpu), ck.vb(&Device::Cpu));
    let name = "model.layers.0.mlp.down_proj";
    let (k, n) = (s.intermediate, s.hidden);
    let layer = Fp8Linear::load(k, n, vg.pp(name), &q).unwrap_or_else(|e| panic!("{e}"));
    eprintln!("{}", layer.explain());
    assert!(layer.target().gpu().is_some(), "a CUDA target");
    assert_ne!(layer.kernel_name(), "CpuFp8Gemm");
    let gate = Fp8Linear::load(
        s.hidden,
        s.intermediate,
        vg.pp("model.layers.0.mlp.gate_proj"),
        &q,
    )
    .unwrap();
    assert!(
        Arc::ptr_eq(layer.target().gpu().unwrap(), gate.target().gpu().unwrap()),
        "layers on one candle device share one GPU handle"
    );
    // The CPU layer quantizes activations (W8A8): a kernel that keeps them in 16 bits
    // (W8A16, Marlin on pre-Hopper GPUs) differs from it by that quantization.
    let ex = layer.explanation();
    let chosen = ex.candidates[ex.chosen.expect("chosen")].entry;
    let cpu_tolerance = if chosen.numerics == Numerics::W8A16 {
        6e-2
    } else {
        2e-2
    };
    let plain = dequantized_linear(k, n, vg.pp(name), &q).unwrap();
    let cpu = Fp8Linear::load(k, n, vc.pp(name), &q).unwrap();

    for dims in [vec![1, k], vec![2, 3, k], vec![2, 40, k]] {
        let x = Tensor::randn(0f32, 1f32, dims.as_slice(), &gpu)
            .unwrap()
            .to_dtype(DType::BF16)
            .unwrap();
        let y = layer.forward(&x).unwrap_or_else(|e| panic!("{e}"));
        assert!(
            y.device().same_device(&gpu),
            "the output stays on the device"
        );
        let mut want = dims.clone();
        *want.last_mut().unwrap() = n;
        assert_eq!(y.dims(), want.as_slice());
        let flat = x.reshape(((), k)).unwrap();
        let vs_candle = rel(&y.reshape(((), n)).unwrap(), &plain.forward(&flat).unwrap());
        let vs_cpu = rel(
            &y,
            &cpu.forward(&x.to_device(&Device::Cpu).unwrap()).unwrap(),
        );
        eprintln!(
            "{} x{dims:?}: rel err {vs_candle:.2e} vs candle's bf16 Linear on the GPU, \
             {vs_cpu:.2e} vs the CPU layer",
            layer.kernel_name()
        );
        assert!(vs_candle < 6e-2, "vs candle {vs_candle}");
        assert!(vs_cpu < cpu_tolerance, "vs the CPU layer {vs_cpu}");
    }
    // Another float dtype in, the same dtype out.
    let x = Tensor::randn(0f32, 1f32, (3, k), &gpu).unwrap();
    let y = layer.forward(&x).unwrap();
    assert_eq!(y.dtype(), DType::F32);
    // The layer refuses a CPU input.
    let e = layer
        .forward(&x.to_device(&Device::Cpu).unwrap())
        .unwrap_err();
    assert!(e.to_string().contains("the input is on"), "{e}");
    layer.prepare(16).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn one_layer_serves_threads_on_an_explicit_stream() {
    if gpu_or_skip("one_layer_serves_threads_on_an_explicit_stream").is_none() {
        return;
    }
    let ck = Checkpoint::new("threads");
    let q = ck.quant();
    let s = Preset::Tiny.shape();
    let gpu = Device::new_cuda_with_stream(0).unwrap_or_else(|e| panic!("{e}"));
    let layer = Arc::new(
        Fp8Linear::load(
            s.hidden,
            s.intermediate,
            ck.vb(&gpu).pp("model.layers.0.mlp.up_proj"),
            &q,
        )
        .unwrap(),
    );
    let inputs: Vec<Tensor> = (0..4)
        .map(|i| {
            Tensor::randn(0f32, 1f32, (1 + 7 * i, s.hidden), &gpu)
                .unwrap()
                .to_dtype(DType::BF16)
                .unwrap()
        })
        .collect();
    let alone: Vec<Vec<f32>> = inputs
        .iter()
        .map(|x| {
            let y = layer.forward(x).unwrap().to_dtype(DType::F32).unwrap();
            y.flatten_all().unwrap().to_vec1::<f32>().unwrap()
        })
        .collect();
    std::thread::scope(|sc| {
        for (x, want) in inputs.iter().zip(&alone) {
            let layer = layer.clone();
            sc.spawn(move || {
                for _ in 0..5 {
                    let y = layer.forward(x).unwrap().to_dtype(DType::F32).unwrap();
                    assert_eq!(&y.flatten_all().unwrap().to_vec1::<f32>().unwrap(), want);
                }
            });
        }
    });
}
