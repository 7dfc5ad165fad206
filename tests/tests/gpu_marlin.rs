//! Kernel-specific checks of the Marlin W8A16 kernel that the matrix (gpu_matrix.rs: its
//! numerics on every layer it takes, compiled for the device and for sm_80, block /
//! per-channel / per-tensor / group scales, bias, device weights) does not make: the real
//! sm_80 / sm_86 machine code assembles, the GPU matches the CPU model of the kernel and
//! reruns are bit-identical (the split-K reduction is ordered), every pipeline tuning the
//! bench sweeps gives the same numerics, every activation copy width (ragged K, misaligned
//! activations) matches the reference, and selection by force on the real device runs it
//! (host tensors refused with a typed error). Skips without a GPU unless
//! FP8_REQUIRE_CUDA=1, and visibly (a failure under it unless FP8_ALLOW_ARCH_SKIPS allows
//! it) on a GPU below sm_80, where the kernel cannot run even forced.

use std::sync::Arc;

use fp8_linear::cpu::reference::weight_only_f64;
use fp8_linear::cuda::marlin::plan::MarlinPipeline;
use fp8_linear::cuda::marlin::SOURCE;
use fp8_linear::cuda::runtime::Gpu;
use fp8_linear::cuda::testing::marlin::{emulate, repack};
use fp8_linear::cuda::MarlinFp8;
use fp8_linear::{
    DType, DeviceMemory, Fp8Kernel, KernelOptions, LayerConfig, LayerWeights, Linear, Options,
    Overrides, Registered, Target, Tensor,
};
use fp8_linear_tests::check::{compare, compare_rows, Tolerance};
use fp8_linear_tests::gpu::{
    check_rows, gpu_for_entry_or_skip, gpu_or_skip, pick_rows, upload_as, AnyBuffer,
};
use fp8_linear_tests::layers::{random_activations, random_block_weight};

/// f64 reference rows of a block-scaled layer run as W8A16: `x[rows] @ (w * scale)^T`.
fn reference(x: &[f32], rows: &[usize], codes: &[u8], ws: &[f32], n: usize, k: usize) -> Vec<f64> {
    let kb = k.div_ceil(128);
    let xr = pick_rows(x, k, rows);
    weight_only_f64(&xr, codes, rows.len(), n, k, |j, kk| {
        ws[(j / 128) * kb + kk / 128]
    })
}

/// Runs a processed kernel for M rows of fresh activations; returns (output, activations
/// as the device held them).
fn run(
    gpu: &Arc<Gpu>,
    kernel: &mut dyn Fp8Kernel,
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

/// A Marlin kernel for `cfg` built on `gpu` with its typed constructor.
fn marlin(gpu: &Arc<Gpu>, cfg: &LayerConfig) -> MarlinFp8 {
    let target = Target::from_gpu(gpu.clone());
    MarlinFp8::new(
        &target.build_ctx(cfg, &KernelOptions::none()),
        MarlinFp8::LAYER_PARAMS,
    )
    .unwrap_or_else(|e| panic!("{e}"))
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
fn gpu_matches_the_cpu_model_of_the_kernel_and_reruns_are_bit_identical() {
    let Some(gpu) = gpu_for_entry_or_skip(
        "gpu_matches_the_cpu_model_of_the_kernel",
        &MarlinFp8::ENTRY,
        true,
    ) else {
        return;
    };
    let (m, n, k) = (5, 4096, 2048); // a K split with several splits
    let cfg = LayerConfig::block_128(n, k, DType::Bf16, DType::Bf16);
    let (w, ws) = random_block_weight(n, k, 6);
    let weights = LayerWeights::new(
        Tensor::fp8(&w, [n, k]),
        Tensor::f32(&ws, [n.div_ceil(128), k.div_ceil(128)]),
    );
    let mut kernel = marlin(&gpu, &cfg);
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
    // Element bound: the bf16 rounding of each output (2^-8 of it) plus 1e-4 of its row
    // for the f32 accumulation and split-K reduction (both ~1e-6 of a row).
    let mw = repack::prepare(&cfg, &w, &ws).unwrap();
    let model = emulate(&mw, &exact, m);
    let tol = Tolerance::cpu(DType::Bf16).with(4e-3, 1e-4);
    let c = compare(&outs[0], &model, n, tol);
    eprintln!("MarlinFp8 vs CPU model of the kernel: {}", c.summary());
    c.assert_ok("MarlinFp8 vs its CPU model");
}

/// The pipeline tunings the Marlin bench sweeps (depth and blocks per SM of each variant),
/// each on layers that use all three variants (M tiles of 1, 2 and 4) and split K.
#[test]
fn every_pipeline_tuning_matches_the_reference() {
    let Some(gpu) = gpu_for_entry_or_skip(
        "every_pipeline_tuning_matches_the_reference",
        &MarlinFp8::ENTRY,
        true,
    ) else {
        return;
    };
    let tunings = MarlinPipeline::SWEEP;
    for dt in [DType::Bf16, DType::F16] {
        let (n, k) = (2112, 1536);
        let cfg = LayerConfig::block_128(n, k, dt, dt);
        let (w, ws) = random_block_weight(n, k, 5);
        let weights = LayerWeights::new(
            Tensor::fp8(&w, [n, k]),
            Tensor::f32(&ws, [n.div_ceil(128), k.div_ceil(128)]),
        );
        for t in tunings {
            let mut kernel = marlin(&gpu, &cfg);
            kernel.set_tuning(t).unwrap_or_else(|e| panic!("{e}"));
            kernel
                .process_weights(&weights)
                .unwrap_or_else(|e| panic!("{t:?}: {e}"));
            for m in [1, 7, 16, 33, 200] {
                let (got, x) = run(&gpu, &mut kernel, &cfg, m);
                let rows = check_rows(m, n, k);
                let want = reference(&x, &rows, &w, &ws, n, k);
                let c = compare_rows(
                    &pick_rows(&got, n, &rows),
                    &want,
                    n,
                    &rows,
                    Tolerance::for_kernel(&MarlinFp8::ENTRY, &cfg),
                );
                eprintln!("MarlinFp8 {t:?} M={m:<4} N={n} K={k} {dt}: {}", c.summary());
                c.assert_ok(&format!("{t:?} M={m} {dt}"));
            }
        }
    }
}

#[test]
fn forced_selection_on_the_real_device_runs_marlin() {
    let Some(gpu) = gpu_for_entry_or_skip(
        "forced_selection_on_the_real_device_runs_marlin",
        &MarlinFp8::ENTRY,
        true,
    ) else {
        return;
    };
    let (m, n, k) = (3, 640, 896);
    let cfg = LayerConfig::block_128(n, k, DType::Bf16, DType::Bf16);
    let (w, ws) = random_block_weight(n, k, 4);
    let weights = LayerWeights::new(
        Tensor::fp8(&w, [n, k]),
        Tensor::f32(&ws, [n.div_ceil(128), k.div_ceil(128)]),
    );
    let target = Target::from_gpu(gpu.clone());
    let mut layer = Linear::new(
        &target,
        &cfg,
        &weights,
        &Options::from(Overrides::none().force(MarlinFp8::NAME)),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        layer.plan().to_string(),
        format!("M = 1..: {} (forced)", MarlinFp8::NAME)
    );
    let x = random_activations(m, k);
    let (xin, exact) = upload_as(&gpu, &x, DType::Bf16);
    let mut out = AnyBuffer::poisoned(&gpu, m * n, DType::Bf16);
    layer
        .forward(&xin.tensor([m, k]), &mut out.tensor_mut([m, n]))
        .unwrap();
    let rows: Vec<usize> = (0..m).collect();
    let want = reference(&exact, &rows, &w, &ws, n, k);
    let c = compare(
        &out.to_f32(),
        &want,
        n,
        Tolerance::for_kernel(&MarlinFp8::ENTRY, &cfg),
    );
    eprintln!("forced Marlin: {}", c.summary());
    c.assert_ok("forced Marlin");
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

/// A view of `buf` that starts `elems` 16-bit elements in (a misaligned activation pointer).
fn offset_view(buf: &AnyBuffer, elems: usize, shape: [usize; 2]) -> Tensor<'_> {
    let t = buf.tensor([1, 1]);
    let fp8_linear::Storage::Device(mem, dt) = t.data else {
        panic!("a device buffer")
    };
    let mem = DeviceMemory {
        ptr: mem.ptr + 2 * elems as u64,
        bytes: mem.bytes - 2 * elems,
        ..mem
    };
    Tensor::device(mem, dt, shape)
}

/// The activation copies of every width: K = 3884 (rows of 8-byte multiples) and K = 389
/// (odd: element copies), activations at 0, 1, 2 and 4 elements into their buffer (16-, 2-,
/// 4- and 8-byte aligned), ragged N, every M tile; against the f64 reference.
#[test]
fn ragged_k_and_unaligned_activations_match_the_reference() {
    let Some(gpu) = gpu_for_entry_or_skip(
        "ragged_k_and_unaligned_activations_match_the_reference",
        &MarlinFp8::ENTRY,
        true,
    ) else {
        return;
    };
    for (n, k, dt) in [
        (200, 3884, DType::Bf16),
        (200, 3884, DType::F16),
        (1100, 389, DType::Bf16),
    ] {
        let cfg = LayerConfig::block_128(n, k, dt, dt);
        let (w, ws) = random_block_weight(n, k, 9);
        let weights = LayerWeights::new(
            Tensor::fp8(&w, [n, k]),
            Tensor::f32(&ws, [n.div_ceil(128), k.div_ceil(128)]),
        );
        let mut kernel = marlin(&gpu, &cfg);
        kernel.process_weights(&weights).unwrap();
        for off in [0, 1, 2, 4] {
            for m in [1, 9, 40, 70] {
                let mut x = vec![0.0f32; off];
                x.extend(random_activations(m, k));
                let (xin, exact) = upload_as(&gpu, &x, dt);
                let mut out = AnyBuffer::poisoned(&gpu, m * n, dt);
                kernel
                    .apply(&offset_view(&xin, off, [m, k]), &mut out.tensor_mut([m, n]))
                    .unwrap_or_else(|e| panic!("apply: {e}"));
                let rows = check_rows(m, n, k);
                let want = reference(&exact[off..], &rows, &w, &ws, n, k);
                let c = compare_rows(
                    &pick_rows(&out.to_f32(), n, &rows),
                    &want,
                    n,
                    &rows,
                    Tolerance::for_kernel(&MarlinFp8::ENTRY, &cfg),
                );
                eprintln!(
                    "MarlinFp8 offset {off} M={m:<3} N={n} K={k} {dt}: {}",
                    c.summary()
                );
                c.assert_ok(&format!("offset {off} M={m} N={n} K={k} {dt}"));
            }
        }
    }
}
