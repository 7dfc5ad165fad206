//! cuBLASLt per-tensor and row-wise FP8 GEMMs against the f64 reference on fresh random
//! data: static and dynamic per-tensor activations, dynamic per-token activations with
//! per-channel or per-tensor weights, ragged K. Skips without a GPU unless
//! FP8_REQUIRE_CUDA=1.

use fp8_linear::cpu::{quantize, reference};
use fp8_linear::cuda::{CublasLtFp8PerTensor, CublasLtFp8Rowwise};
use fp8_linear::fp8::f32_to_e4m3;
use fp8_linear::{DType, KernelEntry, LayerConfig, LayerWeights, QuantKey, Registered, Tensor};
use fp8_linear_tests::gpu::{build, gpu_or_skip, rel_err, run};
use fp8_linear_tests::layers::random_activations;
use rand::Rng;

fn random_weight(n: usize, k: usize, per_channel: bool) -> (Vec<u8>, Vec<f32>) {
    let mut rng = rand::rng();
    let codes = (0..n * k)
        .map(|_| f32_to_e4m3(rng.random_range(-448.0f32..448.0)))
        .collect();
    let count = if per_channel { n } else { 1 };
    let scales = (0..count)
        .map(|_| 2f32.powi(rng.random_range(-4..=4)) * rng.random_range(0.5..1.0) / 448.0)
        .collect();
    (codes, scales)
}

fn check(entry: &'static KernelEntry, cfg: LayerConfig, m: usize) -> f64 {
    let gpu = gpu_or_skip("check").expect("caller checked");
    let (n, k) = (cfg.n, cfg.k);
    let per_channel = matches!(cfg.weight.group, fp8_linear::GroupShape::PerChannel);
    let (w, ws) = random_weight(n, k, per_channel);
    let act = cfg.activation.unwrap();
    let static_scale = [0.02f32];
    let weights = LayerWeights {
        weight: Tensor::fp8(&w, [n, k]),
        weight_scale: Tensor::f32(&ws, if per_channel { [n, 1] } else { [1, 1] }),
        input_scale: (!act.dynamic).then(|| Tensor::f32(&static_scale, [1, 1])),
        input_scale_ub: None,
        bias: None,
    };
    let mut kernel = build(entry, &cfg, &weights).unwrap_or_else(|e| panic!("{}: {e}", entry.name));
    let x = random_activations(m, k);
    let (got, exact) =
        run(&gpu, kernel.as_mut(), &cfg, &x, m).unwrap_or_else(|e| panic!("{}: {e}", entry.name));
    let mut aq = vec![0u8; m * k];
    let a_s: Vec<f32> = match act.group {
        fp8_linear::GroupShape::PerToken => {
            let mut s = vec![0f32; m];
            quantize::per_token_into(&exact, k, None, &mut aq, &mut s);
            s
        }
        _ => {
            let fixed = (!act.dynamic).then_some(static_scale[0]);
            vec![quantize::per_tensor_into(&exact, fixed, &mut aq)]
        }
    };
    let want = reference::scaled_gemm_f64(&aq, &a_s, &w, &ws, m, n, k);
    let err = rel_err(&got, &want, entry.name);
    eprintln!(
        "{:>20} M={m:<4} N={n:<5} K={k:<5} {}: rel err {err:.2e}",
        entry.name, cfg
    );
    err
}

#[test]
fn per_tensor_static_and_dynamic() {
    if gpu_or_skip("per_tensor_static_and_dynamic").is_none() {
        return;
    }
    for act in [
        QuantKey::ACT_PER_TENSOR_STATIC,
        QuantKey::ACT_PER_TENSOR_DYNAMIC,
    ] {
        for (m, n, k, out) in [
            (1, 256, 384, DType::Bf16),
            (83, 1024, 3884, DType::Bf16),
            (200, 4096, 1000, DType::F16),
            (7, 512, 512, DType::F32),
        ] {
            let cfg = LayerConfig {
                activation: Some(act),
                ..LayerConfig::per_tensor_static(n, k, DType::Bf16, out)
            };
            let err = check(&CublasLtFp8PerTensor::ENTRY, cfg, m);
            assert!(err < 1e-2, "M={m} N={n} K={k} {out}: {err}");
        }
    }
}

#[test]
fn rowwise_per_token_per_channel() {
    let Some(gpu) = gpu_or_skip("rowwise_per_token_per_channel") else {
        return;
    };
    if gpu.capability().major < 9 {
        eprintln!(
            "CublasLtFp8Rowwise needs sm_90+; this GPU is {}",
            gpu.capability()
        );
        return;
    }
    for weight in [QuantKey::WEIGHT_PER_CHANNEL, QuantKey::WEIGHT_PER_TENSOR] {
        for (m, n, k) in [
            (1, 256, 384),
            (7, 2048, 3884),
            (83, 2048, 7168),
            (200, 1536, 130),
        ] {
            let cfg = LayerConfig {
                weight,
                ..LayerConfig::per_token_per_channel(n, k, DType::Bf16, DType::Bf16)
            };
            let err = check(&CublasLtFp8Rowwise::ENTRY, cfg, m);
            assert!(err < 1e-2, "M={m} N={n} K={k}: {err}");
        }
    }
}
