//! The Marlin W8A16 kernel on the GPU against the f64 reference, on fresh random data:
//! compiled for sm_80 (the code an A100 runs; on a newer GPU as compute_80 PTX that the
//! driver compiles for the device) and for the device's own arch; block scales with a wide
//! dynamic range, M in {1, 7, 16, 33, 64, 200, 1024}, ragged N and K, f16 and bf16, bias,
//! device weights, per-channel and per-tensor scales, selection by force on the real
//! device, bit-identical reruns (the split-K reduction is ordered). Skips without a GPU
//! unless FP8_REQUIRE_CUDA=1.

use std::sync::Arc;

use fp8_linear::cpu::reference::weight_only_f64;
use fp8_linear::cuda::marlin::{emulate::emulate, repack, SOURCE};
use fp8_linear::cuda::runtime::{DeviceBuffer, Gpu};
use fp8_linear::cuda::MarlinFp8;
use fp8_linear::fp8::e4m3_to_f32;
use fp8_linear::{GroupShape, ScaleDtype};
use fp8_linear::{
    Capability, DType, Fp8Kernel, LayerConfig, LayerWeights, Linear, Overrides, QuantKey, Tensor,
};
use fp8_linear_tests::gpu::{check_rows, gpu_or_skip, pick_rows, rel_err, upload_as, AnyBuffer};
use fp8_linear_tests::layers::{random_activations, random_block_weight};
use rand::Rng;

const MS: [usize; 7] = [1, 7, 16, 33, 64, 200, 1024];
const SM80: Capability = Capability::new(8, 0);

/// f64 reference rows for a layer: `x[rows] @ (w * scale)^T + bias`.
fn reference(
    x: &[f32],
    rows: &[usize],
    codes: &[u8],
    n: usize,
    k: usize,
    scale: impl Fn(usize, usize) -> f32,
    bias: Option<&[f32]>,
) -> Vec<f64> {
    let xr = pick_rows(x, k, rows);
    let mut want = weight_only_f64(&xr, codes, rows.len(), n, k, scale);
    if let Some(b) = bias {
        for (i, v) in want.iter_mut().enumerate() {
            *v += b[i % n] as f64;
        }
    }
    want
}

/// Runs a processed kernel for M rows of fresh activations; returns (output, activations
/// as the device held them).
fn run(
    gpu: &Arc<Gpu>,
    kernel: &mut MarlinFp8,
    cfg: &LayerConfig,
    m: usize,
) -> (Vec<f32>, Vec<f32>) {
    let x = random_activations(m, cfg.k);
    let (xin, exact) = upload_as(gpu, &x, cfg.input_dtype);
    let mut out = AnyBuffer::poisoned(gpu, m * cfg.n, cfg.output_dtype);
    kernel
        .apply(&xin.tensor([m, cfg.k]), &mut out.tensor_mut([m, cfg.n]))
        .unwrap_or_else(|e| panic!("apply: {e}"));
    (out.to_f32(), exact)
}

fn block_scale(ws: &[f32], k: usize) -> impl Fn(usize, usize) -> f32 + '_ {
    let kb = k.div_ceil(128);
    move |j, kk| ws[(j / 128) * kb + kk / 128]
}

/// A block-scaled layer on the GPU for every M; returns the worst error.
fn block_layer_all_m(
    gpu: &Arc<Gpu>,
    n: usize,
    k: usize,
    dt: DType,
    target: Option<Capability>,
    spread: i32,
) -> f64 {
    let cfg = LayerConfig::block_128(n, k, dt, dt);
    let (w, ws) = random_block_weight(n, k, spread);
    let weights = LayerWeights {
        weight: Tensor::fp8(&w, [n, k]),
        weight_scale: Tensor::f32(&ws, [n.div_ceil(128), k.div_ceil(128)]),
        input_scale: None,
        input_scale_ub: None,
        bias: None,
    };
    let mut kernel = MarlinFp8::new(&cfg, MarlinFp8::LAYER_PARAMS).unwrap();
    if let Some(t) = target {
        kernel.compile_for(t).unwrap();
    }
    kernel
        .process_weights(&weights)
        .unwrap_or_else(|e| panic!("process_weights: {e}"));
    let mut worst = 0f64;
    for m in MS {
        let (got, x) = run(gpu, &mut kernel, &cfg, m);
        let rows = check_rows(m, n, k);
        let want = reference(&x, &rows, &w, n, k, block_scale(&ws, k), None);
        let err = rel_err(&pick_rows(&got, n, &rows), &want, "MarlinFp8");
        eprintln!(
            "MarlinFp8 {} M={m:<4} N={n:<5} K={k:<5} {dt}: rel err {err:.2e}",
            target.map_or("native".to_string(), |c| format!(
                "sm_{}{}",
                c.major, c.minor
            ))
        );
        assert!(err < 1e-2, "M={m} N={n} K={k} {dt}: rel err {err}");
        worst = worst.max(err);
    }
    worst
}

#[test]
fn sm80_code_on_this_gpu_block_scales_ragged_sizes() {
    let Some(gpu) = gpu_or_skip("sm80_code_on_this_gpu_block_scales_ragged_sizes") else {
        return;
    };
    for dt in [DType::Bf16, DType::F16] {
        for (n, k) in [
            (7748, 3884),
            (300, 200),
            (129, 130),
            (64, 32),
            (1, 1),
            (4096, 7168),
        ] {
            // f16: spread 6 binades keeps every 128x128 block scale representable after the
            // per-channel rebase; bf16 takes 12.
            let spread = if dt == DType::F16 { 6 } else { 12 };
            block_layer_all_m(&gpu, n, k, dt, Some(SM80), spread);
        }
    }
}

#[test]
fn native_arch_block_scales() {
    let Some(gpu) = gpu_or_skip("native_arch_block_scales") else {
        return;
    };
    for dt in [DType::Bf16, DType::F16] {
        block_layer_all_m(&gpu, 2112, 1536, dt, None, 8);
    }
}

#[test]
fn sm80_cubin_assembles() {
    // The real sm_80 machine code (what an A100 loads from the disk cache), not only PTX.
    if gpu_or_skip("sm80_cubin_assembles").is_none() {
        return;
    }
    let opts = vec!["--std=c++17".to_string(), "-default-device".to_string()];
    for arch in ["sm_80", "sm_86"] {
        let cubin = fp8_linear::cuda::runtime::nvrtc::compile_cubin(
            "marlin_w8a16",
            SOURCE,
            arch,
            &opts,
            &[],
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(cubin.len() > 10_000, "{arch}");
    }
}

#[test]
fn per_channel_per_tensor_bias_and_device_weights() {
    let Some(gpu) = gpu_or_skip("per_channel_per_tensor_bias_and_device_weights") else {
        return;
    };
    let mut rng = rand::rng();
    let (n, k) = (1000, 1000);
    for (group, dt) in [
        (GroupShape::PerChannel, DType::Bf16),
        (GroupShape::PerTensor, DType::F16),
        (GroupShape::Group { cols: 128 }, DType::F16),
    ] {
        let key = QuantKey {
            group,
            scale_dtype: ScaleDtype::F32,
            dynamic: false,
        };
        let cfg = LayerConfig {
            bias: true,
            ..LayerConfig::weight_only(key, n, k, dt)
        };
        let shape = cfg.weight_scale_shape();
        // f16 scales far above 65504 / 256: the f32 channel scale carries them.
        let ws: Vec<f32> = (0..shape[0] * shape[1])
            .map(|_| rng.random_range(100.0f32..900.0))
            .collect();
        // Small codes (subnormals included) so that f16 outputs stay finite with these scales.
        let w: Vec<u8> = (0..n * k)
            .map(|_| fp8_linear::fp8::f32_to_e4m3(rng.random_range(-0.06f32..0.06)))
            .collect();
        let bias: Vec<f32> = random_activations(1, n)
            .iter()
            .map(|v| v * 1000.0)
            .collect();
        let dw = DeviceBuffer::from_host(&gpu, &w).unwrap();
        let dws = DeviceBuffer::from_host(&gpu, &ws).unwrap();
        let db = DeviceBuffer::from_host(&gpu, &bias).unwrap();
        let weights = LayerWeights {
            weight: dw.tensor([n, k]),
            weight_scale: dws.tensor(shape),
            input_scale: None,
            input_scale_ub: None,
            bias: Some(db.tensor([1, n])),
        };
        let mut kernel = MarlinFp8::new(&cfg, MarlinFp8::LAYER_PARAMS).unwrap();
        kernel.compile_for(SM80).unwrap();
        kernel
            .process_weights(&weights)
            .unwrap_or_else(|e| panic!("{e}"));
        let cols = shape[1];
        let scale = |j: usize, kk: usize| match group {
            GroupShape::PerTensor => ws[0],
            GroupShape::PerChannel => ws[j],
            _ => ws[j * cols + kk / 128],
        };
        for m in [1, 16, 100] {
            let (got, x) = run(&gpu, &mut kernel, &cfg, m);
            let rows: Vec<usize> = (0..m).collect();
            let want = reference(&x, &rows, &w, n, k, scale, Some(&bias));
            let err = rel_err(&got, &want, "MarlinFp8");
            eprintln!("MarlinFp8 {group} {dt} bias, device weights, M={m}: rel err {err:.2e}");
            assert!(err < 1e-2, "{group} {dt} M={m}: {err}");
        }
    }
}

#[test]
fn gpu_matches_the_cpu_model_of_the_kernel_and_reruns_are_bit_identical() {
    let Some(gpu) = gpu_or_skip("gpu_matches_the_cpu_model_of_the_kernel") else {
        return;
    };
    let (m, n, k) = (5, 4096, 2048); // a K split with several splits
    let cfg = LayerConfig::block_128(n, k, DType::Bf16, DType::Bf16);
    let (w, ws) = random_block_weight(n, k, 6);
    let weights = LayerWeights {
        weight: Tensor::fp8(&w, [n, k]),
        weight_scale: Tensor::f32(&ws, [n.div_ceil(128), k.div_ceil(128)]),
        input_scale: None,
        input_scale_ub: None,
        bias: None,
    };
    let mut kernel = MarlinFp8::new(&cfg, MarlinFp8::LAYER_PARAMS).unwrap();
    kernel.process_weights(&weights).unwrap();
    let x = random_activations(m, k);
    let (xin, exact) = upload_as(&gpu, &x, DType::Bf16);
    let mut outs = Vec::new();
    for _ in 0..3 {
        let mut out = AnyBuffer::poisoned(&gpu, m * n, DType::Bf16);
        kernel
            .apply(&xin.tensor([m, k]), &mut out.tensor_mut([m, n]))
            .unwrap();
        outs.push(out.to_f32());
    }
    let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
    assert_eq!(
        bits(&outs[0]),
        bits(&outs[1]),
        "reruns differ: a race in the K-split reduction"
    );
    assert_eq!(bits(&outs[0]), bits(&outs[2]));
    // The CPU model (same repack, same 16-bit rounding, f64 accumulation) differs from the
    // GPU only by the tensor cores' f32 accumulation and the bf16 output rounding.
    let mw = repack::prepare(&cfg, &w, &ws).unwrap();
    let model = emulate(&mw, &exact, m);
    let err = rel_err(&outs[0], &model, "model");
    eprintln!("MarlinFp8 vs CPU model of the kernel: rel err {err:.2e}");
    assert!(err < 4e-3, "{err}");
    assert!(e4m3_to_f32(w[0]).is_finite());
}

#[test]
fn forced_selection_on_the_real_device_runs_marlin() {
    let Some(gpu) = gpu_or_skip("forced_selection_on_the_real_device_runs_marlin") else {
        return;
    };
    let (m, n, k) = (3, 640, 896);
    let cfg = LayerConfig::block_128(n, k, DType::Bf16, DType::Bf16);
    let (w, ws) = random_block_weight(n, k, 4);
    let weights = LayerWeights {
        weight: Tensor::fp8(&w, [n, k]),
        weight_scale: Tensor::f32(&ws, [n.div_ceil(128), k.div_ceil(128)]),
        input_scale: None,
        input_scale_ub: None,
        bias: None,
    };
    let mut layer = Linear::new(
        gpu.device(),
        &cfg,
        &weights,
        &Overrides::none().force("MarlinFp8"),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(layer.entry().name, "MarlinFp8");
    let x = random_activations(m, k);
    let (xin, exact) = upload_as(&gpu, &x, DType::Bf16);
    let mut out = AnyBuffer::poisoned(&gpu, m * n, DType::Bf16);
    layer
        .forward(&xin.tensor([m, k]), &mut out.tensor_mut([m, n]))
        .unwrap();
    let rows: Vec<usize> = (0..m).collect();
    let want = reference(&exact, &rows, &w, n, k, block_scale(&ws, k), None);
    let err = rel_err(&out.to_f32(), &want, "forced Marlin");
    assert!(err < 1e-2, "{err}");
    // Host tensors are refused with a typed error, not read as device pointers.
    let xs = vec![half::bf16::ZERO; m * k];
    let mut ys = vec![half::bf16::ZERO; m * n];
    let r = layer.forward(
        &Tensor::bf16(&xs, [m, k]),
        &mut fp8_linear::TensorMut::bf16(&mut ys, [m, n]),
    );
    assert!(
        matches!(r, Err(fp8_linear::KernelError::Device { .. })),
        "{r:?}"
    );
}
