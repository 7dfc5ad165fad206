//! The A100 case (CPU-only, always runs): a 128x128 block-FP8 layer with bf16 activations on
//! an A100 or an RTX 3090 profile selects the Marlin W8A16 kernel, and `explain` says why
//! every kernel before it was rejected; Hopper profiles pick the fast kernels; Marlin can be
//! forced by name on an H200 (its `force_arch`), not on a Turing GPU. Also the typed
//! constructor with the four layer parameter names, and Marlin's config checks.

use fp8_linear::cuda::MarlinFp8;
use fp8_linear::{
    ArchSpec, Capability, DType, Device, Family, Fp8Kernel, KernelError, LayerConfig,
    OverrideSource, Overrides, QuantKey, Registered, SelectError, Tensor, TensorMut, Verdict,
};
use fp8_linear::{GroupShape, ScaleDtype};

const MARLIN: &str = "MarlinFp8";

fn block_layer() -> LayerConfig {
    // Qwen3.5-27B-FP8-like shape after a tensor-parallel split: ragged N and K.
    LayerConfig::block_128(7748, 3884, DType::Bf16, DType::Bf16)
}

#[test]
fn a100_and_rtx3090_pick_marlin_and_explain_every_faster_rejection() {
    for profile in ["a100", "rtx3090", "a10"] {
        let device = Device::profile(profile).unwrap();
        let cap = device.capability.unwrap();
        let chosen = fp8_linear::tables::BUILTIN
            .select(&device, &block_layer(), &Overrides::none())
            .unwrap();
        assert_eq!(chosen.entry.name, MARLIN, "{profile}");
        assert!(chosen.force_rejected.is_none());

        let ex = fp8_linear::tables::BUILTIN
            .explain(&device, &block_layer(), &Overrides::none())
            .unwrap();
        assert_eq!(ex.table.family, Family::BlockScaled);
        let chosen_at = ex
            .candidates
            .iter()
            .position(|c| c.verdict == Verdict::Chosen)
            .expect("a kernel is chosen");
        assert_eq!(ex.candidates[chosen_at].entry.name, MARLIN);
        assert_eq!(ex.plan.unwrap().kernels().len(), 1, "{profile}");
        assert!(chosen_at >= 1, "at least one faster kernel precedes Marlin");
        for c in &ex.candidates[..chosen_at] {
            // Every faster kernel needs FP8 tensor cores (sm_89+) or Hopper exactly.
            match c.verdict {
                Verdict::ArchMismatch { device: d, .. } => assert_eq!(d, Some(cap)),
                ref v => panic!(
                    "{profile}: {} should be rejected for its arch, got {v}",
                    c.entry.name
                ),
            }
            let line = c.verdict.to_string();
            assert!(
                line.contains("requires compute capability")
                    && line.contains(&format!("sm_{}{}", cap.major, cap.minor)),
                "{profile}: {} -> {line}",
                c.entry.name
            );
        }
        // The portable FP8 kernel (the upstream Triton kernel's role) is after Marlin and is
        // honest about needing sm_89: it never claims an A100.
        let portable = ex
            .candidates
            .iter()
            .find(|c| c.entry.name == "PortableBlockFp8")
            .expect("the portable kernel is in the block table");
        assert!(
            matches!(portable.verdict, Verdict::ArchMismatch { .. }),
            "{}",
            portable.verdict
        );
    }
}

#[test]
fn marlin_sits_after_the_hopper_kernels_and_before_the_portable_one() {
    let t = fp8_linear::tables::CUDA_BLOCK;
    let names: Vec<&str> = t.entries.iter().map(|e| e.name).collect();
    let m = names
        .iter()
        .position(|n| *n == MARLIN)
        .expect("Marlin in the block table");
    let p = names.iter().position(|n| *n == "PortableBlockFp8").unwrap();
    let lt = names.iter().position(|n| *n == "CublasLtBlockFp8").unwrap();
    assert!(lt < m && m < p, "{names:?}");
    // Every kernel before Marlin is a Hopper-or-newer kernel (arch excludes sm_80..sm_89).
    for e in &t.entries[..m] {
        assert!(!e.arch.matches(Some(Capability::new(8, 0))), "{}", e.name);
        assert!(!e.arch.matches(Some(Capability::new(8, 9))), "{}", e.name);
    }
    assert_eq!(t.entries[m].priority, 5);
    let s = fp8_linear::tables::CUDA_SCALED;
    assert_eq!(
        s.entries[0].name, MARLIN,
        "Marlin is first in the per-tensor/per-channel table"
    );
    assert_eq!(s.entries[0].priority, 1);
    let w = fp8_linear::tables::CUDA_WEIGHT_ONLY;
    assert_eq!(w.family, Family::WeightOnly);
    assert!(w.entries.iter().any(|e| e.name == MARLIN));
}

#[test]
fn hopper_and_ada_pick_the_fast_kernels() {
    let pos = |name: &str| {
        fp8_linear::tables::CUDA_BLOCK
            .entries
            .iter()
            .position(|e| e.name == name)
            .unwrap()
    };
    for profile in ["h100", "h200", "l40s"] {
        let device = Device::profile(profile).unwrap();
        // An aligned layer (every fast kernel takes it) and the ragged one.
        let aligned = LayerConfig::block_128(4096, 7168, DType::Bf16, DType::Bf16);
        for cfg in [aligned, block_layer()] {
            let chosen = fp8_linear::tables::BUILTIN
                .select(&device, &cfg, &Overrides::none())
                .unwrap();
            assert_ne!(chosen.entry.name, MARLIN, "{profile} {cfg}");
            if profile != "l40s" {
                // Hopper: a kernel before Marlin in the table (a faster one) for the
                // aligned layer.
                if cfg == aligned {
                    assert!(
                        pos(chosen.entry.name) < pos(MARLIN),
                        "{profile}: {}",
                        chosen.entry.name
                    );
                }
            } else {
                assert_eq!(chosen.entry.name, "PortableBlockFp8", "{profile}");
            }
            let ex = fp8_linear::tables::BUILTIN
                .explain(&device, &cfg, &Overrides::none())
                .unwrap();
            let marlin = ex
                .candidates
                .iter()
                .find(|c| c.entry.name == MARLIN)
                .unwrap();
            // Marlin is not run on sm_89+ unless forced.
            assert!(
                matches!(marlin.verdict, Verdict::ArchMismatch { .. }),
                "{profile}: {}",
                marlin.verdict
            );
        }
    }
}

#[test]
fn forcing_marlin_by_name_works_on_h200_through_force_arch() {
    let h200 = Device::profile("h200").unwrap();
    for src in [OverrideSource::Api, OverrideSource::Env] {
        let ov = Overrides {
            force: Some(("marlinfp8".into(), src)),
            ..Overrides::none()
        };
        let s = fp8_linear::tables::BUILTIN
            .select(&h200, &block_layer(), &ov)
            .unwrap();
        assert_eq!(s.entry.name, MARLIN);
        assert!(s.force_rejected.is_none());
        let ex = fp8_linear::tables::BUILTIN
            .explain(&h200, &block_layer(), &ov)
            .unwrap();
        assert_eq!(ex.chosen_for(1).unwrap().name, MARLIN);
        assert_eq!(ex.chosen_for(4096).unwrap().name, MARLIN);
    }
    // The weight-only table too.
    let wo = LayerConfig::weight_only(QuantKey::WEIGHT_BLOCK_128, 4096, 7168, DType::Bf16);
    let s = fp8_linear::tables::BUILTIN
        .select(&h200, &wo, &Overrides::none().force(MARLIN))
        .unwrap();
    assert_eq!(s.entry.name, MARLIN);
    assert_eq!(
        MarlinFp8::ENTRY.force_arch,
        Some(ArchSpec::AtLeast(Capability::new(8, 0)))
    );
}

#[test]
fn forcing_marlin_on_turing_is_refused_with_the_reason() {
    let t4 = Device::profile("t4").unwrap();
    let ov = Overrides::none().force(MARLIN);
    match fp8_linear::tables::BUILTIN.select(&t4, &block_layer(), &ov) {
        Err(SelectError::NoKernel { reasons, .. }) => {
            let (_, why) = reasons.iter().find(|(n, _)| *n == MARLIN).unwrap();
            assert!(why.contains("requires compute capability"), "{why}");
        }
        other => panic!("expected no kernel on a T4, got {other:?}"),
    }
}

#[test]
fn weight_only_layers_on_ampere_use_marlin() {
    for key in [
        QuantKey::WEIGHT_BLOCK_128,
        QuantKey::WEIGHT_PER_CHANNEL,
        QuantKey::WEIGHT_PER_TENSOR,
    ] {
        for dt in [DType::Bf16, DType::F16] {
            let c = LayerConfig::weight_only(key, 1000, 3000, dt);
            let s = fp8_linear::tables::BUILTIN
                .select(&Device::profile("a100").unwrap(), &c, &Overrides::none())
                .unwrap();
            assert_eq!(s.entry.name, MARLIN, "{key} {dt}");
        }
    }
}

#[test]
fn typed_constructor_takes_the_four_parameter_names() {
    use fp8_linear::{KernelOptions, LayerParam, Target};
    let c = block_layer();
    assert_eq!(
        MarlinFp8::LAYER_PARAMS.params(),
        &[
            LayerParam::Weight,
            LayerParam::WeightScale,
            LayerParam::InputScale,
            LayerParam::InputScaleUb
        ]
    );
    assert_eq!(MarlinFp8::ENTRY.params, MarlinFp8::LAYER_PARAMS.params());
    assert_eq!(MarlinFp8::ENTRY.numerics, fp8_linear::Numerics::W8A16);
    let opts = KernelOptions::none();
    // The uniform constructor in the entry calls the same typed `new`, which takes its GPU
    // from the build context: for a profile that is a typed error naming the kernel.
    let a100 = Target::profile("a100").unwrap();
    match MarlinFp8::ENTRY.build(&a100.build_ctx(&c, &opts)) {
        Err(KernelError::ProfileDevice { kernel, device }) => {
            assert_eq!(kernel, MARLIN);
            assert!(device.contains("a100"), "{device}");
        }
        Err(e) => panic!("expected ProfileDevice, got {e}"),
        Ok(_) => panic!("built for a profile"),
    }
    // The GPU part: Marlin runs on sm_80 and newer (forced beyond sm_89).
    let Some(gpu) = fp8_linear_tests::gpu::gpu_for_entry_or_skip(
        "typed_constructor (GPU part)",
        &MarlinFp8::ENTRY,
        true,
    ) else {
        return;
    };
    let target = Target::from_gpu(gpu);
    let ctx = target.build_ctx(&c, &opts);
    let k = MarlinFp8::new(&ctx, MarlinFp8::LAYER_PARAMS).unwrap();
    assert_eq!(k.params().params()[1], LayerParam::WeightScale);
    let boxed = MarlinFp8::ENTRY.build(&ctx).unwrap();
    assert_eq!(boxed.name(), MARLIN);
    // Bad input before weights: typed errors.
    let mut k = MarlinFp8::new(&ctx, MarlinFp8::LAYER_PARAMS).unwrap();
    let x = vec![half::bf16::ZERO; 3884];
    let mut y = vec![half::bf16::ZERO; 7748];
    let r = k.apply(
        &Tensor::bf16(&x, [1, 3884]),
        &mut TensorMut::bf16(&mut y, [1, 7748]),
    );
    assert!(
        matches!(r, Err(KernelError::WeightsNotProcessed { kernel: MARLIN })),
        "{r:?}"
    );
    assert!(k.compile_for(Capability::new(7, 5)).is_err());
    assert!(k.compile_for(Capability::new(8, 0)).is_ok());
}

#[test]
fn config_checks_give_reasons() {
    let reason = |c: &LayerConfig| MarlinFp8::can_implement(c).unwrap_err().to_string();
    let mut f32_in = block_layer();
    f32_in.input_dtype = DType::F32;
    f32_in.output_dtype = DType::F32;
    assert!(reason(&f32_in).contains("f16 or bf16"));
    let mut mixed = block_layer();
    mixed.output_dtype = DType::F16;
    assert!(reason(&mixed).contains("activation dtype"));
    let mut odd = block_layer();
    odd.weight = QuantKey {
        group: GroupShape::Block {
            rows: 128,
            cols: 100,
        },
        scale_dtype: ScaleDtype::F32,
        dynamic: false,
    };
    assert!(reason(&odd).contains("multiple of 32"));
    let mut empty = block_layer();
    empty.n = 0;
    assert!(MarlinFp8::can_implement(&empty).is_err());
    // The typed constructor checks the config before it looks for its GPU.
    let target = fp8_linear::Target::profile("a100").unwrap();
    let opts = fp8_linear::KernelOptions::none();
    assert!(matches!(
        MarlinFp8::new(&target.build_ctx(&f32_in, &opts), MarlinFp8::LAYER_PARAMS),
        Err(KernelError::Unsupported { .. })
    ));
    // Accepted: every granularity the kernel handles, odd sizes, bias, f16.
    let mut ok = LayerConfig::weight_only(QuantKey::WEIGHT_PER_CHANNEL, 7, 5, DType::F16);
    ok.bias = true;
    assert!(MarlinFp8::can_implement(&ok).is_ok());
    assert!(MarlinFp8::can_implement(&LayerConfig::per_tensor_static(
        100,
        100,
        DType::Bf16,
        DType::Bf16
    ))
    .is_ok());
}

#[test]
fn bad_weights_are_rejected_before_anything_is_uploaded() {
    // Without a GPU (CI) a Marlin layer cannot be built at all: opening the GPU is an error
    // value, never a panic. On a GPU host, bad weights are rejected before any upload.
    if let Err(e) = fp8_linear::Target::cuda(0) {
        assert!(!e.to_string().is_empty());
    }
    let Some(gpu) = fp8_linear_tests::gpu::gpu_for_entry_or_skip(
        "bad_weights_are_rejected_before_anything_is_uploaded",
        &MarlinFp8::ENTRY,
        true,
    ) else {
        return;
    };
    let target = fp8_linear::Target::from_gpu(gpu);
    let (n, k) = (64, 128);
    let c = LayerConfig::block_128(n, k, DType::Bf16, DType::Bf16);
    let codes = vec![0x38u8; n * k];
    let scales = vec![1.0f32; 1];
    let opts = fp8_linear::KernelOptions::none();
    let mut kernel = MarlinFp8::new(&target.build_ctx(&c, &opts), MarlinFp8::LAYER_PARAMS).unwrap();
    let short = fp8_linear::LayerWeights::new(
        Tensor::fp8(&codes[..100], [n, k]),
        Tensor::f32(&scales, [1, 1]),
    );
    let r = kernel.process_weights(&short);
    assert!(
        matches!(r, Err(KernelError::BufferTooSmall { .. })),
        "{r:?}"
    );
}
