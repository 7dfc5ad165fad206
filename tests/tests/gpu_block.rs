//! Kernel-specific checks of the block-scaled FP8 GEMMs that the matrix (gpu_matrix.rs,
//! which checks every CUDA kernel's numerics on every layer it takes) does not make: every
//! tile height and split-K factor of the portable kernel pinned down with `force_launch`,
//! at one and two blocks per SM and compiled from sm_89 PTX
//! (f32 output, held to 1e-5 relative Frobenius and 1e-5 of each row's largest output per
//! element), and selection picking the sm_90 cuBLASLt block kernel on sm_90 and never on
//! another GPU. Skips without a GPU unless FP8_REQUIRE_CUDA=1; the portable kernel's test
//! skips visibly below sm_89 (its arch), which FP8_REQUIRE_CUDA=1 makes a failure unless
//! FP8_ALLOW_ARCH_SKIPS allows it.

use fp8_linear::cuda::{CublasLtBlockFp8, PortableBlockFp8};
use fp8_linear::{
    Capability, DType, Fp8Kernel, KernelOptions, LayerConfig, LayerWeights, Overrides, Registered,
    Target, Tensor,
};

/// The Ada GPUs' capability (L4, L40S, RTX 4090).
const SM89: Capability = Capability::new(8, 9);
use fp8_linear_tests::check::{compare, Tolerance};
use fp8_linear_tests::gpu::{block_reference_rows, gpu_for_entry_or_skip, gpu_or_skip, run};
use fp8_linear_tests::layers::{quantize_groups, random_activations, random_block_weight};

#[test]
fn cublaslt_block_is_selected_exactly_on_sm90() {
    let Some(gpu) = gpu_or_skip("cublaslt_block_is_selected_exactly_on_sm90") else {
        return;
    };
    let cap = gpu.capability();
    // The kernel declares sm_90 exactly: in the block table there after the Hopper kernel's
    // listing for M = 1..=64 (for a layer it takes: N and K multiples of 16, bf16 output),
    // never selected elsewhere. The Hopper kernel serves M = 1..=64, cuBLASLt the rest.
    let cfg = LayerConfig::block_128(256, 384, DType::Bf16, DType::Bf16);
    assert!(CublasLtBlockFp8::can_implement(&cfg).is_ok());
    let chosen = fp8_linear::tables::BUILTIN
        .select(gpu.device(), &cfg, &Overrides::none())
        .map(|s| s.entry.name);
    let at = |m: usize| {
        fp8_linear::tables::BUILTIN
            .select_m(gpu.device(), &cfg, m, &Overrides::none())
            .ok()
            .map(|s| s.entry.name)
    };
    let prefill = at(65);
    if (cap.major, cap.minor) == (9, 0) {
        assert_eq!(at(1), Some("HopperBlockFp8"), "M = 1 on {cap}");
        assert_eq!(at(64), Some("HopperBlockFp8"), "M = 64 on {cap}");
    }
    assert_eq!(
        prefill == Some(CublasLtBlockFp8::NAME),
        (cap.major, cap.minor) == (9, 0),
        "prefill {prefill:?} on {cap}"
    );
    if (cap.major, cap.minor) == (9, 0) {
        assert_eq!(
            chosen.as_ref().ok().copied(),
            Some(CublasLtBlockFp8::NAME),
            "on sm_90: {chosen:?}"
        );
        eprintln!("sm_90: CublasLtBlockFp8 selected first");
    } else {
        assert!(
            chosen
                .as_ref()
                .map_or(true, |n| *n != CublasLtBlockFp8::NAME),
            "CublasLtBlockFp8 selected on {cap}"
        );
        eprintln!("CublasLtBlockFp8 is sm_90 only; this GPU is {cap}: not selected");
    }
}

/// Every tile height, split-K choice and resident-blocks-per-SM build of the portable kernel
/// on ragged layers, and the kernel compiled from sm_89 PTX (the automatic choice picks one
/// per M; this pins each down). Prints the worst element.
#[test]
fn portable_every_tile_and_split() {
    let Some(gpu) = gpu_for_entry_or_skip(
        "portable_every_tile_and_split",
        &PortableBlockFp8::ENTRY,
        false,
    ) else {
        return;
    };
    let target = Target::from_gpu(gpu.clone());
    let mut bad = Vec::new();
    for (m, n, k, input) in [
        (1, 7748, 3884, DType::Bf16),
        (5, 520, 1000, DType::F32),
        (40, 300, 700, DType::F16),
        (130, 264, 1000, DType::Bf16),
    ] {
        let cfg = LayerConfig::block_128(n, k, input, DType::F32);
        let tol = Tolerance::for_kernel(&PortableBlockFp8::ENTRY, &cfg);
        let (w, ws) = random_block_weight(n, k, 5);
        let weights = LayerWeights::new(
            Tensor::fp8(&w, [n, k]),
            Tensor::f32(&ws, [n.div_ceil(128), k.div_ceil(128)]),
        );
        let x = random_activations(m, k);
        // One and two resident blocks per SM for the device, and the automatic choice
        // compiled from sm_89 PTX (the code an L4 / L40S runs, JIT-compiled here).
        for (bps, code) in [(Some(1), None), (Some(2), None), (None, Some(SM89))] {
            let options = code.map_or(KernelOptions::none(), |c| {
                KernelOptions::none().compile_for(c)
            });
            let mut kernel = PortableBlockFp8::new(&target.build_ctx(&cfg, &options))
                .unwrap_or_else(|e| panic!("{e}"));
            kernel.force_blocks_per_sm(bps);
            kernel.process_weights(&weights).unwrap();
            for mt in [1, 2, 4] {
                for splits in [Some(1), Some(3), None] {
                    kernel.force_launch(Some(mt), splits);
                    let (got, exact) = run(&gpu, &mut kernel, &cfg, &x, m).unwrap();
                    let (aq, as_) = quantize_groups(&exact, m, k);
                    let rows: Vec<usize> = (0..m).collect();
                    let want = block_reference_rows(&aq, &as_, &w, &ws, n, k, &rows);
                    let c = compare(&got, &want, n, tol);
                    let what = format!(
                        "M={m} N={n} K={k} {input} BM={} splits={splits:?} blocks/SM={bps:?} \
                         code={}",
                        32 * mt,
                        code.map_or("device".to_string(), |c| c.to_string())
                    );
                    eprintln!("  portable {what}: {}", c.summary());
                    if !c.ok() {
                        bad.push(format!("{what}: {}", c.summary()));
                    }
                }
            }
        }
    }
    assert!(
        bad.is_empty(),
        "f32-output errors over the bounds:\n{}",
        bad.join("\n")
    );
}
