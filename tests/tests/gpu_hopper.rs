//! The Hopper wgmma + TMA block-FP8 kernel against the f64 reference on fresh random data:
//! ragged M, N, K as real models have them (N != K, tails in every dimension), non-uniform
//! scales, split-K and persistent paths, every output dtype, bias, host and device weights,
//! and selection on the real device. Skips without a GPU unless FP8_REQUIRE_CUDA=1; on a
//! GPU that is not sm_90 it checks that selection never picks the kernel.

use fp8_linear::cuda::runtime::DeviceBuffer;
use fp8_linear::cuda::HopperBlockFp8;
use fp8_linear::{DType, LayerConfig, LayerWeights, Registered, Tensor};
use fp8_linear_tests::gpu::{
    block_reference_rows, build, check_block_kernel, check_rows, gpu_or_skip, pick_rows, rel_err,
    run,
};
use fp8_linear_tests::layers::{quantize_groups, random_activations, random_block_weight};

/// The GPU when it is a Hopper (sm_90); None after saying why the test skips.
fn hopper(test: &str) -> Option<std::sync::Arc<fp8_linear::cuda::runtime::Gpu>> {
    let gpu = gpu_or_skip(test)?;
    let cap = gpu.capability();
    if (cap.major, cap.minor) != (9, 0) {
        let cfg = LayerConfig::block_128(4096, 7168, DType::Bf16, DType::Bf16);
        let chosen = fp8_linear::tables::BUILTIN.select(gpu.device(), &cfg, &Default::default());
        assert!(chosen
            .map(|s| s.entry.name != "HopperBlockFp8")
            .unwrap_or(true));
        eprintln!("{test}: HopperBlockFp8 is sm_90a only; this GPU is {cap}");
        return None;
    }
    Some(gpu)
}

/// One layer built, run and checked against the f64 reference; returns the error.
fn check(m: usize, n: usize, k: usize, input: DType, out: DType, device_weights: bool) -> f64 {
    check_block_kernel(&HopperBlockFp8::ENTRY, m, n, k, input, out, device_weights)
}

#[test]
fn model_shapes_bf16() {
    if hopper("model_shapes_bf16").is_none() {
        return;
    }
    // N != K everywhere; 7748 x 3884 has tails in N and K; M covers one row, a ragged
    // split-K tile, exactly one BM=64 tile, a ragged BM=128 tile and many tiles.
    for (n, k) in [(7748, 3884), (2112, 7168), (576, 1536)] {
        for m in [1, 7, 64, 130, 1000] {
            let err = check(m, n, k, DType::Bf16, DType::Bf16, false);
            assert!(err < 1e-2, "M={m} N={n} K={k}: rel err {err}");
        }
    }
}

#[test]
fn tiny_and_odd_shapes() {
    if hopper("tiny_and_odd_shapes").is_none() {
        return;
    }
    // Boxes larger than the whole tensor, odd N (scalar stores), K below one block.
    for (n, k) in [(1, 1), (16, 16), (129, 130), (300, 200), (7, 2048)] {
        for m in [1, 3, 65, 200] {
            let err = check(m, n, k, DType::Bf16, DType::Bf16, false);
            assert!(err < 1e-2, "M={m} N={n} K={k}: rel err {err}");
        }
    }
}

#[test]
fn dtypes_and_device_weights() {
    if hopper("dtypes_and_device_weights").is_none() {
        return;
    }
    for (input, out) in [
        (DType::F32, DType::F32),
        (DType::F16, DType::F16),
        (DType::Bf16, DType::F32),
        (DType::F32, DType::Bf16),
    ] {
        for (m, n, k) in [(5, 520, 1000), (300, 257, 259), (4096, 256, 512)] {
            let err = check(m, n, k, input, out, true);
            let tol = if out == DType::Bf16 { 1e-2 } else { 2e-3 };
            assert!(err < tol, "M={m} N={n} K={k} {input}->{out}: {err}");
        }
    }
}

#[test]
fn with_bias_split_and_unsplit() {
    let Some(gpu) = hopper("with_bias_split_and_unsplit") else {
        return;
    };
    // M = 37 splits K (few tiles); M = 900 over N = 4096 does not.
    for (m, n, k) in [(37, 392, 700), (900, 4096, 512)] {
        let cfg = LayerConfig {
            bias: true,
            ..LayerConfig::block_128(n, k, DType::Bf16, DType::F32)
        };
        let (w, ws) = random_block_weight(n, k, 3);
        let bias: Vec<f32> = random_activations(1, n).iter().map(|v| v * 5.0).collect();
        let weights = LayerWeights {
            weight: Tensor::fp8(&w, [n, k]),
            weight_scale: Tensor::f32(&ws, [n.div_ceil(128), k.div_ceil(128)]),
            input_scale: None,
            input_scale_ub: None,
            bias: Some(Tensor::f32(&bias, [1, n])),
        };
        let mut kernel = build(&HopperBlockFp8::ENTRY, &cfg, &weights).unwrap();
        let x = random_activations(m, k);
        let (got, exact) = run(&gpu, kernel.as_mut(), &cfg, &x, m).unwrap();
        let (aq, as_) = quantize_groups(&exact, m, k);
        let rows = check_rows(m, n, k);
        let mut want = block_reference_rows(&aq, &as_, &w, &ws, n, k, &rows);
        for (i, v) in want.iter_mut().enumerate() {
            *v += bias[i % n] as f64;
        }
        let err = rel_err(&pick_rows(&got, n, &rows), &want, "bias");
        eprintln!("HopperBlockFp8 with bias M={m} N={n} K={k}: rel err {err:.2e}");
        assert!(err < 2e-3, "M={m}: {err}");
    }
}

#[test]
fn repeated_calls_reuse_and_rebuild_tensor_maps() {
    let Some(gpu) = hopper("repeated_calls_reuse_and_rebuild_tensor_maps") else {
        return;
    };
    // One kernel object, M changing between calls (new activation tensor map, scratch
    // growth) and repeating (cached map): each result must match the reference.
    let (n, k) = (640, 1280);
    let cfg = LayerConfig::block_128(n, k, DType::Bf16, DType::Bf16);
    let (w, ws) = random_block_weight(n, k, 4);
    let weights = LayerWeights {
        weight: Tensor::fp8(&w, [n, k]),
        weight_scale: Tensor::f32(&ws, [n.div_ceil(128), k.div_ceil(128)]),
        input_scale: None,
        input_scale_ub: None,
        bias: None,
    };
    let mut kernel = build(&HopperBlockFp8::ENTRY, &cfg, &weights).unwrap();
    for m in [3, 3, 500, 64, 500, 2] {
        let x = random_activations(m, k);
        let (got, exact) = run(&gpu, kernel.as_mut(), &cfg, &x, m).unwrap();
        let (aq, as_) = quantize_groups(&exact, m, k);
        let rows: Vec<usize> = (0..m).collect();
        let want = block_reference_rows(&aq, &as_, &w, &ws, n, k, &rows);
        let err = rel_err(&got, &want, "repeat");
        assert!(err < 1e-2, "M={m}: {err}");
    }
}

#[test]
fn selected_first_on_hopper() {
    let Some(gpu) = hopper("selected_first_on_hopper") else {
        return;
    };
    let cfg = LayerConfig::block_128(7748, 3884, DType::Bf16, DType::Bf16);
    let s = fp8_linear::tables::BUILTIN.select(gpu.device(), &cfg, &Default::default()).unwrap();
    assert_eq!(s.entry.name, "HopperBlockFp8");
}

/// Small-M layers checked element by element: the Hopper kernel twice (bit-identical
/// results required), the portable kernel on the same data, the GPU quantization (column-major
/// scales) against the CPU's, and the worst elements, printed; then the usual assertion.
#[test]
fn diagnose_small_m() {
    use fp8_linear::cuda::{ActQuant, PortableBlockFp8, ScaleOrder};
    use fp8_linear_tests::gpu::upload_as;
    let Some(gpu) = hopper("diagnose_small_m") else {
        return;
    };
    let mut worst = 0f64;
    for (m, n, k) in [
        (3, 16, 16),
        (3, 128, 128),
        (37, 384, 768),
        (37, 392, 700),
        (7, 7748, 3884),
        (64, 7748, 3884),
    ] {
        let cfg = LayerConfig::block_128(n, k, DType::Bf16, DType::F32);
        let (w, ws) = random_block_weight(n, k, 3);
        let weights = LayerWeights {
            weight: Tensor::fp8(&w, [n, k]),
            weight_scale: Tensor::f32(&ws, [n.div_ceil(128), k.div_ceil(128)]),
            input_scale: None,
            input_scale_ub: None,
            bias: None,
        };
        let x = random_activations(m, k);
        let mut hop = build(&HopperBlockFp8::ENTRY, &cfg, &weights).unwrap();
        let mut port = build(&PortableBlockFp8::ENTRY, &cfg, &weights).unwrap();
        let (h1, exact) = run(&gpu, hop.as_mut(), &cfg, &x, m).unwrap();
        let (h2, _) = run(&gpu, hop.as_mut(), &cfg, &x, m).unwrap();
        let (p1, _) = run(&gpu, port.as_mut(), &cfg, &x, m).unwrap();
        let (aq, as_) = quantize_groups(&exact, m, k);
        // GPU quantization with column-major scales against the CPU's.
        let (xd, _) = upload_as(&gpu, &exact, DType::Bf16);
        let kb = k.div_ceil(128);
        let ldk = k.div_ceil(16) * 16;
        let qd = DeviceBuffer::<u8>::zeros(&gpu, m * ldk).unwrap();
        let sd = DeviceBuffer::<f32>::zeros(&gpu, m * kb).unwrap();
        let quant = ActQuant::new(&gpu).unwrap();
        let xt = xd.tensor([m, k]);
        let xptr = match xt.data {
            fp8_linear::Storage::Device(mem, _) => mem.ptr,
            _ => unreachable!(),
        };
        // SAFETY: sizes as allocated above; default stream.
        unsafe {
            quant
                .group128(
                    xptr,
                    DType::Bf16,
                    m,
                    k,
                    qd.ptr(),
                    ldk,
                    sd.ptr(),
                    ScaleOrder::ColMajor,
                    0,
                )
                .unwrap()
        };
        let (qh, sh) = (qd.to_host().unwrap(), sd.to_host().unwrap());
        let code_mismatch = (0..m * k)
            .filter(|&i| qh[(i / k) * ldk + i % k] != aq[i])
            .count();
        let scale_mismatch = (0..m * kb)
            .filter(|&i| sh[(i % kb) * m + i / kb] != as_[i])
            .count();
        let rows: Vec<usize> = (0..m).collect();
        let want = block_reference_rows(&aq, &as_, &w, &ws, n, k, &rows);
        let nan = h1.iter().filter(|v| v.is_nan()).count();
        let e = |g: &[f32]| fp8_linear::cpu::reference::rel_frobenius(g, &want);
        let rerun = h1
            .iter()
            .zip(&h2)
            .filter(|(a, b)| a.to_bits() != b.to_bits())
            .count();
        eprintln!(
            "diag M={m} N={n} K={k}: hopper {:.2e} (rerun {:.2e}, {rerun} elements differ, \
             {nan} NaN), portable {:.2e}; GPU quant vs CPU: {code_mismatch} codes, \
             {scale_mismatch} scales differ",
            e(&h1),
            e(&h2),
            e(&p1)
        );
        let mut row_err = Vec::new();
        for r in 0..m.min(16) {
            let g = &h1[r * n..(r + 1) * n];
            let wv = &want[r * n..(r + 1) * n];
            row_err.push(format!(
                "{:.0e}",
                fp8_linear::cpu::reference::rel_frobenius(g, wv)
            ));
        }
        eprintln!("  per-row error (first 16 rows): {}", row_err.join(" "));
        let mut idx: Vec<usize> = (0..m * n).collect();
        idx.sort_by(|&a, &b| {
            let da = (h1[a] as f64 - want[a]).abs();
            let db = (h1[b] as f64 - want[b]).abs();
            db.total_cmp(&da)
        });
        for &i in idx.iter().take(6) {
            eprintln!(
                "  worst: row {} col {}: hopper {} portable {} want {:.6}",
                i / n,
                i % n,
                h1[i],
                p1[i],
                want[i]
            );
        }
        worst = worst.max(if nan > 0 { f64::INFINITY } else { e(&h1) });
        // Split partials are stored, not accumulated with atomics, and summed in order:
        // the same input gives the same bits.
        assert_eq!(
            rerun, 0,
            "M={m} N={n} K={k}: two runs differ in {rerun} elements"
        );
    }
    assert!(worst < 2e-3, "worst rel err {worst}");
}
