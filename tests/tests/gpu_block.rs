//! Block-scaled FP8 GEMMs on the GPU (portable mma.sync kernel, cuBLASLt block-scaled)
//! against the f64 reference on fresh random data: ragged M, N, K, non-uniform scales,
//! every output dtype, bias, host and device weights. Skips without a GPU unless
//! FP8_REQUIRE_CUDA=1.

use fp8_linear::cuda::{CublasLtBlockFp8, PortableBlockFp8};
use fp8_linear::{DType, KernelEntry, LayerConfig, LayerWeights, Registered, Tensor};
use fp8_linear_tests::gpu::{
    block_reference_rows, build, check_block_kernel, gpu_or_skip, rel_err, run,
};
use fp8_linear_tests::layers::{quantize_groups, random_activations, random_block_weight};

const MS: [usize; 4] = [1, 7, 83, 200];

/// One layer run and checked; returns the error.
fn check(
    entry: &'static KernelEntry,
    m: usize,
    n: usize,
    k: usize,
    input: DType,
    out: DType,
    device_weights: bool,
) -> f64 {
    check_block_kernel(entry, m, n, k, input, out, device_weights)
}

#[test]
fn portable_ragged_sizes_bf16() {
    if gpu_or_skip("portable_ragged_sizes_bf16").is_none() {
        return;
    }
    let shapes = [
        (7748, 3884),
        (300, 200),
        (129, 130),
        (16, 16),
        (1, 1),
        (1536, 7168),
    ];
    for (n, k) in shapes {
        for m in MS {
            let err = check(
                &PortableBlockFp8::ENTRY,
                m,
                n,
                k,
                DType::Bf16,
                DType::Bf16,
                false,
            );
            assert!(
                err < 1e-2,
                "PortableBlockFp8 M={m} N={n} K={k}: rel err {err}"
            );
        }
    }
}

#[test]
fn portable_dtypes_and_device_weights() {
    if gpu_or_skip("portable_dtypes_and_device_weights").is_none() {
        return;
    }
    for (input, out) in [
        (DType::F32, DType::F32),
        (DType::F16, DType::F16),
        (DType::Bf16, DType::F32),
        (DType::F32, DType::Bf16),
    ] {
        for (m, n, k) in [(5, 520, 1000), (300, 257, 259), (4096, 256, 512)] {
            let err = check(&PortableBlockFp8::ENTRY, m, n, k, input, out, true);
            let tol = if out == DType::Bf16 { 1e-2 } else { 2e-3 };
            assert!(err < tol, "M={m} N={n} K={k} {input}->{out}: {err}");
        }
    }
}

#[test]
fn portable_with_bias() {
    let Some(gpu) = gpu_or_skip("portable_with_bias") else {
        return;
    };
    let (m, n, k) = (37, 392, 700);
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
    let mut kernel = build(&PortableBlockFp8::ENTRY, &cfg, &weights).unwrap();
    let x = random_activations(m, k);
    let (got, exact) = run(&gpu, kernel.as_mut(), &cfg, &x, m).unwrap();
    let (aq, as_) = quantize_groups(&exact, m, k);
    let rows: Vec<usize> = (0..m).collect();
    let mut want = block_reference_rows(&aq, &as_, &w, &ws, n, k, &rows);
    for (i, v) in want.iter_mut().enumerate() {
        *v += bias[i % n] as f64;
    }
    let err = rel_err(&got, &want, "bias");
    eprintln!("PortableBlockFp8 with bias: rel err {err:.2e}");
    assert!(err < 2e-3, "{err}");
}

#[test]
fn cublaslt_block_ragged_k_and_m() {
    let Some(gpu) = gpu_or_skip("cublaslt_block_ragged_k_and_m") else {
        return;
    };
    let cap = gpu.capability();
    if (cap.major, cap.minor) != (9, 0) {
        // The kernel declares sm_90 exactly; selection never picks it elsewhere.
        let cfg = LayerConfig::block_128(256, 384, DType::Bf16, DType::Bf16);
        assert!(
            fp8_linear::tables::BUILTIN.select(gpu.device(), &cfg, &Default::default())
                .map(|s| s.entry.name != "CublasLtBlockFp8")
                .unwrap_or(true)
        );
        eprintln!("CublasLtBlockFp8 is sm_90 only; this GPU is {cap}");
        return;
    }
    // N != K everywhere and non-uniform scales: a transposed scale layout fails here.
    for (n, k) in [(256, 384), (4096, 3884), (1536, 7168), (7744, 2048)] {
        for m in MS {
            let err = check(
                &CublasLtBlockFp8::ENTRY,
                m,
                n,
                k,
                DType::Bf16,
                DType::Bf16,
                m == 7,
            );
            assert!(
                err < 1e-2,
                "CublasLtBlockFp8 M={m} N={n} K={k}: rel err {err}"
            );
        }
    }
}

#[test]
fn large_m_matches_between_kernels() {
    let Some(gpu) = gpu_or_skip("large_m_matches_between_kernels") else {
        return;
    };
    let (m, n, k) = (1000, 2112, 1536);
    let err = check(
        &PortableBlockFp8::ENTRY,
        m,
        n,
        k,
        DType::Bf16,
        DType::Bf16,
        false,
    );
    assert!(err < 1e-2, "{err}");
    if gpu.capability().major == 9 && gpu.capability().minor == 0 {
        let err = check(
            &CublasLtBlockFp8::ENTRY,
            m,
            n,
            k,
            DType::Bf16,
            DType::Bf16,
            false,
        );
        assert!(err < 1e-2, "{err}");
    }
}

/// Every tile height and split-K choice of the portable kernel on ragged layers (the
/// automatic choice picks one per M; this pins each down). Prints the worst element.
#[test]
fn portable_every_tile_and_split() {
    let Some(gpu) = gpu_or_skip("portable_every_tile_and_split") else {
        return;
    };
    let mut bad = Vec::new();
    for (m, n, k, input) in [
        (1, 7748, 3884, DType::Bf16),
        (5, 520, 1000, DType::F32),
        (40, 300, 700, DType::F16),
    ] {
        let cfg = LayerConfig::block_128(n, k, input, DType::F32);
        let (w, ws) = random_block_weight(n, k, 5);
        let weights = LayerWeights {
            weight: Tensor::fp8(&w, [n, k]),
            weight_scale: Tensor::f32(&ws, [n.div_ceil(128), k.div_ceil(128)]),
            input_scale: None,
            input_scale_ub: None,
            bias: None,
        };
        let mut kernel = PortableBlockFp8::new(&cfg).unwrap();
        fp8_linear::Fp8Kernel::process_weights(&mut kernel, &weights).unwrap();
        let x = random_activations(m, k);
        for mt in [1, 2, 4] {
            for splits in [Some(1), Some(3), None] {
                kernel.force_launch(Some(mt), splits);
                let (got, exact) = run(&gpu, &mut kernel, &cfg, &x, m).unwrap();
                let (aq, as_) = quantize_groups(&exact, m, k);
                let rows: Vec<usize> = (0..m).collect();
                let want = block_reference_rows(&aq, &as_, &w, &ws, n, k, &rows);
                let (worst, d) = got
                    .iter()
                    .zip(&want)
                    .map(|(g, w)| (*g as f64 - w).abs())
                    .enumerate()
                    .fold((0, 0f64), |a, (i, d)| if d > a.1 { (i, d) } else { a });
                let err = rel_err(&got, &want, "tile/split");
                eprintln!(
                    "  portable M={m:<3} N={n:<5} K={k:<5} {input} BM={:<3} splits={splits:?}: rel err {err:.2e}, worst ({}, {}) |d| {d:.3e} got {} want {:.4e}",
                    32 * mt,
                    worst / n,
                    worst % n,
                    got[worst],
                    want[worst]
                );
                if err.is_nan() || err >= 1e-5 {
                    bad.push(format!(
                        "M={m} N={n} K={k} BM={} splits={splits:?}: {err:.2e}",
                        32 * mt
                    ));
                }
            }
        }
    }
    assert!(
        bad.is_empty(),
        "f32-output errors above 1e-5:\n{}",
        bad.join("\n")
    );
}
