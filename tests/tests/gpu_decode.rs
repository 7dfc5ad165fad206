//! The decode kernel (`DecodeBlockFp8`, M <= 16 in one launch) against the f64 reference
//! on fresh random data, for M from 1 to 16 (every M on the small layers): ragged N and K, every input and output
//! dtype, bias, ue8m0 scales, 8-row weight blocks, with and without split K (the in-kernel
//! reduction); each call repeated and required bit-identical (the split counters reset
//! themselves). In a layer's plan it serves M = 1 where the Hopper kernel does not take the
//! layer (or is disabled) and the next kernel of the table the rest, both on one device
//! copy of the weights, checked against the reference too; and the plan picks it at M = 1
//! on Hopper GPUs for such layers only. Skips without a GPU unless
//! FP8_REQUIRE_CUDA=1; off sm_90 it checks that selection never picks the kernel, then
//! skips visibly.

use std::sync::Arc;

use fp8_linear::cuda::decode::DECODE_MAX_M;
use fp8_linear::cuda::runtime::Gpu;
use fp8_linear::cuda::{CublasLtBlockFp8, DecodeBlockFp8, HopperBlockFp8, PortableBlockFp8};
use fp8_linear::{
    DType, Fp8Kernel, KernelOptions, LayerConfig, Linear, Options, Overrides, Registered,
    ScaleDtype, Target,
};
use fp8_linear_tests::check::{compare, Tolerance};
use fp8_linear_tests::gpu::{gpu_for_entry_or_skip, gpu_or_skip, run, run_linear};
use fp8_linear_tests::layers::{random_activations, reference_rows, HostLayer, WeightGen};

/// The layers checked: (what, config).
fn layers() -> Vec<(&'static str, LayerConfig)> {
    let mut biased = LayerConfig::block_128(300, 1000, DType::F16, DType::F32);
    biased.bias = true;
    vec![
        (
            "ragged 7748x3884 bf16",
            LayerConfig::block_128(7748, 3884, DType::Bf16, DType::Bf16),
        ),
        (
            "2112x7168 bf16 (many splits)",
            LayerConfig::block_128(2112, 7168, DType::Bf16, DType::Bf16),
        ),
        ("300x1000 f16 -> f32 + bias", biased),
        (
            "1x130 f32 -> f16",
            LayerConfig::block_128(1, 130, DType::F32, DType::F16),
        ),
        (
            "520x2000 8x128 blocks ue8m0",
            LayerConfig::block(
                520,
                2000,
                (8, 128),
                ScaleDtype::Ue8m0,
                DType::Bf16,
                DType::Bf16,
            ),
        ),
    ]
}

fn build(
    gpu: &Arc<Gpu>,
    cfg: &LayerConfig,
    layer: &HostLayer,
    max_splits: Option<u16>,
) -> Box<dyn Fp8Kernel> {
    let target = Target::from_gpu(gpu.clone());
    let options = KernelOptions {
        max_splits,
        ..KernelOptions::none()
    };
    let mut k: Box<dyn Fp8Kernel> = Box::new(
        DecodeBlockFp8::new(&target.build_ctx(cfg, &options))
            .unwrap_or_else(|e| panic!("build: {e}")),
    );
    k.process_weights(&layer.weights())
        .unwrap_or_else(|e| panic!("process_weights: {e}"));
    k
}

#[test]
fn every_m_up_to_16_matches_the_reference() {
    let test = "every_m_up_to_16_matches_the_reference";
    let Some(gpu) = gpu_for_entry_or_skip(test, &DecodeBlockFp8::ENTRY, false) else {
        return;
    };
    let mut failures = Vec::new();
    for (what, cfg) in layers() {
        let layer = HostLayer::random(&cfg, WeightGen::Spread(3));
        let ref_cfg = DecodeBlockFp8::ENTRY.reference_config(&cfg);
        // f32 accumulation of exact FP8 products, as the portable mma.sync kernel.
        let tol = Tolerance::cpu(cfg.output_dtype);
        for splits in [None, Some(1)] {
            let mut kernel = build(&gpu, &cfg, &layer, splits);
            // Every M on the small layers; on the large ones (the f64 reference dominates
            // the test's time) each column-tile count and both sides of M = 8.
            let ms: Vec<usize> = if cfg.n * cfg.k > 1 << 22 {
                vec![1, 2, 3, 7, 8, 9, 13, 16]
            } else {
                (1..=16).collect()
            };
            for m in ms {
                let x = random_activations(m, cfg.k);
                let (got, exact) = run(&gpu, kernel.as_mut(), &cfg, &x, m).unwrap();
                let (again, _) = run(&gpu, kernel.as_mut(), &cfg, &x, m).unwrap();
                let rows: Vec<usize> = (0..m).collect();
                let want = reference_rows(&ref_cfg, &layer, &exact, m, &rows).unwrap();
                let c = compare(&got, &want, cfg.n, tol);
                let differ = got
                    .iter()
                    .zip(&again)
                    .filter(|(a, b)| a.to_bits() != b.to_bits())
                    .count();
                let label = format!("{what}, max_splits {splits:?}, M={m}");
                eprintln!("{label}: {} (rerun: {differ} elements differ)", c.summary());
                if !c.ok() {
                    failures.push(format!("{label}: {}", c.summary()));
                }
                if differ > 0 {
                    failures.push(format!("{label}: a rerun differs in {differ} elements"));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A 640 x 1280 bf16 layer in 8 x 128 weight blocks: a block layout the Hopper kernel does
/// not take, so the plan keeps the decode kernel at M = 1 there.
fn eight_row_blocks() -> LayerConfig {
    LayerConfig::block(
        640,
        1280,
        (8, 128),
        ScaleDtype::F32,
        DType::Bf16,
        DType::Bf16,
    )
}

#[test]
fn larger_m_run_on_the_next_kernel_of_the_plan_on_one_weight_copy() {
    let test = "larger_m_run_on_the_next_kernel_of_the_plan_on_one_weight_copy";
    let Some(gpu) = gpu_for_entry_or_skip(test, &DecodeBlockFp8::ENTRY, false) else {
        return;
    };
    let target = Target::from_gpu(gpu.clone());
    let mut biased = LayerConfig::block_128(640, 1280, DType::Bf16, DType::Bf16);
    biased.bias = true;
    // The Hopper kernel, which takes M = 1..=64 of the layers it can run, disabled: the
    // decode kernel serves M = 1 and the next kernel of the table the rest.
    let options = Options {
        overrides: Overrides::none().disable(HopperBlockFp8::NAME),
        kernel: KernelOptions::none(),
    };
    // (layer, the plan's kernel after the decode kernel)
    for (cfg, prefill) in [
        // cuBLASLt block-scaled, whose device copy the decode kernel reads.
        (
            LayerConfig::block_128(4096, 7168, DType::Bf16, DType::Bf16),
            CublasLtBlockFp8::NAME,
        ),
        // cuBLASLt writes bf16 only and takes no bias: the portable kernel.
        (
            LayerConfig::block_128(640, 1280, DType::Bf16, DType::F32),
            PortableBlockFp8::NAME,
        ),
        (biased, PortableBlockFp8::NAME),
        // 8-row blocks (the Hopper kernel does not take them): only the portable kernel.
        (eight_row_blocks(), PortableBlockFp8::NAME),
    ] {
        let layer = HostLayer::random(&cfg, WeightGen::Spread(3));
        let host = layer.weights();
        let taken = |build: &dyn Fn() -> Linear| {
            gpu.synchronize().unwrap();
            let before = gpu.memory_info().expect("cuMemGetInfo").0;
            let l = build();
            gpu.synchronize().unwrap();
            let used = before.saturating_sub(gpu.memory_info().expect("cuMemGetInfo").0);
            (l, used)
        };
        // The largest M's kernel alone, then the plan: the plan takes no second copy.
        let next = fp8_linear::tables::CUDA_BLOCK.entry(prefill).unwrap();
        let (alone, used_alone) = taken(&|| {
            Linear::with_entry(next, &target, &cfg, &host, &KernelOptions::none()).unwrap()
        });
        drop(alone);
        let (mut linear, used) = taken(&|| {
            Linear::new(&target, &cfg, &host, &options).unwrap_or_else(|e| panic!("{cfg:?}: {e}"))
        });
        let names: Vec<&str> = linear.plan().kernels().iter().map(|e| e.name).collect();
        assert_eq!(names, [DecodeBlockFp8::NAME, prefill], "{cfg:?}");
        // One device copy of the weights for all its kernels: the layer's accounting, and the
        // device memory the layer took against the next kernel alone (two copies would add
        // the codes again).
        let shared = linear.shared_weights();
        let codes = cfg.n * cfg.k;
        eprintln!(
            "{prefill}: {} weight copy ({:?}), {} B; device memory {used} B for the plan, \
             {used_alone} B for {prefill} alone, {codes} B of codes",
            shared.copies(),
            shared.layouts(),
            shared.bytes()
        );
        assert_eq!(shared.copies(), 1, "{cfg:?}: {:?}", shared.layouts());
        assert!(shared.bytes() >= codes && shared.bytes() < codes + codes / 4);
        if codes >= 16 << 20 {
            assert!(
                used < used_alone + codes / 2,
                "{cfg:?}: {used} B for the plan, {used_alone} B for {prefill} alone"
            );
        }
        let ref_cfg = DecodeBlockFp8::ENTRY.reference_config(&cfg);
        // M above the decode range (64 / 65: where the Hopper kernel's range would end),
        // then back to decode on the same layer.
        for m in [2, 17, 64, 65, 200, 1] {
            let x = random_activations(m, cfg.k);
            let (got, exact) = run_linear(&gpu, &mut linear, &x, m).unwrap();
            let rows: Vec<usize> = (0..m).collect();
            let want = reference_rows(&ref_cfg, &layer, &exact, m, &rows).unwrap();
            let entry = linear.entry_for(m).unwrap();
            assert_eq!(entry.name == DecodeBlockFp8::NAME, m == 1, "M={m}");
            let tol = if m == 1 {
                Tolerance::cpu(cfg.output_dtype)
            } else {
                Tolerance::for_kernel(entry, &cfg)
            };
            let c = compare(&got, &want, cfg.n, tol);
            eprintln!("{} M={m}: {}", entry.name, c.summary());
            c.assert_ok(&format!("{cfg:?} at M={m} ({})", entry.name));
        }
    }
}

/// Built alone (no plan), the decode kernel refuses more rows than it has, by name.
#[test]
fn more_than_16_rows_are_refused_alone() {
    let test = "more_than_16_rows_are_refused_alone";
    let Some(gpu) = gpu_for_entry_or_skip(test, &DecodeBlockFp8::ENTRY, false) else {
        return;
    };
    let cfg = LayerConfig::block_128(256, 256, DType::Bf16, DType::Bf16);
    let layer = HostLayer::random(&cfg, WeightGen::Spread(3));
    let mut kernel = build(&gpu, &cfg, &layer, None);
    let m = DECODE_MAX_M + 1;
    let x = random_activations(m, cfg.k);
    let e = run(&gpu, kernel.as_mut(), &cfg, &x, m)
        .unwrap_err()
        .to_string();
    assert!(e.contains("M <= 16"), "{e}");
}

/// At M = 1 the plan picks the decode kernel on Hopper GPUs only, and there only for block
/// layers the Hopper kernel does not take (8-row blocks); 128x128 blocks go to the Hopper
/// kernel.
#[test]
fn selected_at_m1_on_hopper_where_the_hopper_kernel_is_not() {
    let Some(gpu) = gpu_or_skip("selected_at_m1_on_hopper_where_the_hopper_kernel_is_not") else {
        return;
    };
    let hopper = DecodeBlockFp8::ENTRY.arch.matches(Some(gpu.capability()));
    for (cfg, decode) in [
        (
            LayerConfig::block_128(4096, 7168, DType::Bf16, DType::Bf16),
            false,
        ),
        (eight_row_blocks(), hopper),
    ] {
        let chosen = fp8_linear::tables::BUILTIN
            .select_m(gpu.device(), &cfg, 1, &Overrides::none())
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            chosen.entry.name == DecodeBlockFp8::NAME,
            decode,
            "{} chosen on {} for {cfg}",
            chosen.entry.name,
            gpu.capability()
        );
    }
}
