//! Bad input gets a typed error that names the problem, never a panic.

use fp8_linear::cpu::{CpuFp8Gemm, CpuReference};
use fp8_linear::DeviceMemory;
use fp8_linear::{
    BuildCtx, DType, KernelEntry, KernelError, KernelOptions, LayerConfig, LayerWeights, Linear,
    Registered, Target, Tensor, TensorMut,
};
use fp8_linear_tests::layers::random_block_weight;

const ENTRIES: [&KernelEntry; 2] = [&CpuFp8Gemm::ENTRY, &CpuReference::ENTRY];
const N: usize = 200;
const K: usize = 300;

fn cfg() -> LayerConfig {
    LayerConfig::block_128(N, K, DType::F32, DType::F32)
}

fn build(
    entry: &'static KernelEntry,
    w: &[u8],
    s: &[f32],
    s_shape: [usize; 2],
) -> Result<Linear, String> {
    let weights = LayerWeights {
        weight: Tensor::fp8(w, [N, K]),
        weight_scale: Tensor::f32(s, s_shape),
        input_scale: None,
        input_scale_ub: None,
        bias: None,
    };
    Linear::with_entry(
        entry,
        &Target::cpu(),
        &cfg(),
        &weights,
        &KernelOptions::none(),
    )
    .map_err(|e| e.to_string())
}

#[test]
fn wrong_scale_shape_is_a_scale_layout_error() {
    let (w, s) = random_block_weight(N, K, 1);
    for e in ENTRIES {
        // transposed [3, 2] instead of [2, 3]
        let err = build(e, &w, &s, [3, 2]).err().unwrap();
        assert!(err.contains("scale layout of weight_scale"), "{err}");
        assert!(err.contains("[2, 3]"), "{err}");
    }
}

#[test]
fn nan_scales_are_rejected() {
    let (w, mut s) = random_block_weight(N, K, 1);
    s[4] = f32::NAN;
    for e in ENTRIES {
        let err = build(e, &w, &s, [2, 3]).err().unwrap();
        assert!(
            err.contains("weight_scale holds a non-finite value"),
            "{err}"
        );
        assert!(err.contains("index 4"), "{err}");
    }
}

#[test]
fn nan_weight_codes_are_rejected() {
    let (mut w, s) = random_block_weight(N, K, 1);
    w[N * K - 3] = 0xff;
    for e in ENTRIES {
        let err = build(e, &w, &s, [2, 3]).err().unwrap();
        assert!(err.contains("weight holds a non-finite value"), "{err}");
    }
}

#[test]
fn short_weight_buffer_is_rejected() {
    let (w, s) = random_block_weight(N, K, 1);
    for e in ENTRIES {
        let err = build(e, &w[..N * K - 1], &s, [2, 3]).err().unwrap();
        assert!(err.contains("buffer of weight too short"), "{err}");
    }
}

#[test]
fn wrong_weight_dtype_is_rejected() {
    let (_, s) = random_block_weight(N, K, 1);
    let wf = vec![0.5f32; N * K];
    let weights = LayerWeights {
        weight: Tensor::f32(&wf, [N, K]),
        weight_scale: Tensor::f32(&s, [2, 3]),
        input_scale: None,
        input_scale_ub: None,
        bias: None,
    };
    let err = Linear::with_entry(
        &CpuFp8Gemm::ENTRY,
        &Target::cpu(),
        &cfg(),
        &weights,
        &KernelOptions::none(),
    )
    .err()
    .unwrap();
    assert!(
        err.to_string()
            .contains("dtype mismatch for weight: expected f8e4m3, got f32"),
        "{err}"
    );
}

#[test]
fn per_call_input_errors() {
    let (w, s) = random_block_weight(N, K, 1);
    for e in ENTRIES {
        let mut lin = build(e, &w, &s, [2, 3]).unwrap();
        let x = vec![0.25f32; 4 * K];
        let mut out = vec![0f32; 4 * N];

        // K mismatch
        let bad = Tensor::f32(&x[..4 * (K - 1)], [4, K - 1]);
        let err = lin
            .forward(&bad, &mut TensorMut::f32(&mut out, [4, N]))
            .unwrap_err();
        assert!(
            matches!(err, KernelError::Shape { what: "input", .. }),
            "{err}"
        );

        // zero rows
        let err = lin
            .forward(
                &Tensor::f32(&[], [0, K]),
                &mut TensorMut::f32(&mut [], [0, N]),
            )
            .unwrap_err();
        assert!(err.to_string().contains("M >= 1"), "{err}");

        // output shape
        let err = lin
            .forward(
                &Tensor::f32(&x, [4, K]),
                &mut TensorMut::f32(&mut out, [2, 2 * N]),
            )
            .unwrap_err();
        assert!(
            matches!(err, KernelError::Shape { what: "output", .. }),
            "{err}"
        );

        // non-contiguous input
        let strided = Tensor {
            strides: [1, 4],
            ..Tensor::f32(&x, [4, K])
        };
        let err = lin
            .forward(&strided, &mut TensorMut::f32(&mut out, [4, N]))
            .unwrap_err();
        assert!(
            matches!(err, KernelError::NonContiguous { what: "input", .. }),
            "{err}"
        );

        // short input buffer
        let err = lin
            .forward(
                &Tensor::f32(&x[..10], [4, K]),
                &mut TensorMut::f32(&mut out, [4, N]),
            )
            .unwrap_err();
        assert!(
            matches!(err, KernelError::BufferTooSmall { what: "input", .. }),
            "{err}"
        );

        // wrong input dtype
        let xb = vec![half::bf16::ONE; 4 * K];
        let err = lin
            .forward(
                &Tensor::bf16(&xb, [4, K]),
                &mut TensorMut::f32(&mut out, [4, N]),
            )
            .unwrap_err();
        assert!(
            matches!(err, KernelError::DType { what: "input", .. }),
            "{err}"
        );

        // device memory handed to a CPU kernel
        let mem = DeviceMemory {
            ptr: 0x1000,
            bytes: 4 * K * 4,
            ordinal: 0,
        };
        let err = lin
            .forward(
                &Tensor::device(mem, DType::F32, [4, K]),
                &mut TensorMut::f32(&mut out, [4, N]),
            )
            .unwrap_err();
        assert!(
            matches!(err, KernelError::Device { what: "input", .. }),
            "{err}"
        );
    }
}

#[test]
fn apply_before_process_weights_is_an_error() {
    let target = Target::cpu();
    let opts = KernelOptions::none();
    let mut k = CpuFp8Gemm::ENTRY
        .build(&target.build_ctx(&cfg(), &opts))
        .unwrap();
    let x = vec![0f32; K];
    let mut o = vec![0f32; N];
    let err = k
        .apply(
            &Tensor::f32(&x, [1, K]),
            &mut TensorMut::f32(&mut o, [1, N]),
        )
        .unwrap_err();
    assert!(
        matches!(err, KernelError::WeightsNotProcessed { .. }),
        "{err}"
    );
}

#[test]
fn static_layer_without_input_scale_is_rejected() {
    let cfg = LayerConfig::per_tensor_static(N, K, DType::F32, DType::F32);
    let (w, _) = random_block_weight(N, K, 1);
    let one = [1.0f32];
    let weights = LayerWeights {
        weight: Tensor::fp8(&w, [N, K]),
        weight_scale: Tensor::f32(&one, [1, 1]),
        input_scale: None,
        input_scale_ub: None,
        bias: None,
    };
    let err = Linear::with_entry(
        &CpuFp8Gemm::ENTRY,
        &Target::cpu(),
        &cfg,
        &weights,
        &KernelOptions::none(),
    )
    .err()
    .unwrap();
    assert!(err.to_string().contains("input_scale"), "{err}");
}

#[test]
fn building_a_rejected_config_is_a_typed_error() {
    let z = LayerConfig::block_128(N, 0, DType::F32, DType::F32);
    let target = Target::cpu();
    let opts = KernelOptions::none();
    let err = CpuFp8Gemm::ENTRY
        .build(&target.build_ctx(&z, &opts))
        .err()
        .unwrap();
    assert!(
        matches!(
            err,
            KernelError::Unsupported {
                kernel: "CpuFp8Gemm",
                ..
            }
        ),
        "{err}"
    );
}

/// A layer built for a device profile (an A100 on a machine without one) is refused with a
/// typed error naming the profile, for every CUDA kernel of the built-in tables; one for a
/// device that is not the context's (an absent ordinal, no runtime handle) likewise.
#[test]
fn building_for_a_profile_or_an_absent_device_is_a_typed_error() {
    let (w, s) = random_block_weight(N, K, 1);
    let weights = LayerWeights::new(Tensor::fp8(&w, [N, K]), Tensor::f32(&s, [2, 3]));
    let opts = KernelOptions::none();
    for profile in ["a100", "h200", "l40s"] {
        let target = Target::profile(profile).unwrap();
        let cfg = LayerConfig::block_128(N, K, DType::Bf16, DType::Bf16);
        let err = Linear::new(&target, &cfg, &weights, &fp8_linear::Options::none())
            .err()
            .unwrap_or_else(|| panic!("{profile}: a layer was built for a profile"));
        match err {
            fp8_linear::LinearError::Kernel(KernelError::ProfileDevice { kernel, device }) => {
                assert!(device.contains(profile), "{profile}: {device}");
                assert!(!kernel.is_empty());
            }
            other => panic!("{profile}: expected ProfileDevice, got {other}"),
        }
        // Every CUDA entry built directly: the same typed error, never a panic.
        #[cfg(feature = "cuda")]
        for table in fp8_linear::tables::BUILTIN.tables() {
            for e in table.entries {
                if e.platform != fp8_linear::Platform::Cuda || (e.can_implement)(&cfg).is_err() {
                    continue;
                }
                let ctx = target.build_ctx(&cfg, &opts);
                if let Err(err) = e.build(&ctx) {
                    assert!(
                        matches!(
                            err,
                            KernelError::ProfileDevice { .. } | KernelError::WrongDevice { .. }
                        ),
                        "{profile} {}: {err}",
                        e.name
                    );
                } else {
                    panic!("{profile}: {} was built for a profile", e.name);
                }
            }
        }
    }
    // A real-looking CUDA device (ordinal 7) without a runtime handle.
    let mut dev = fp8_linear::Device::profile("h200").unwrap();
    dev.ordinal = Some(7);
    let cfg = LayerConfig::block_128(N, K, DType::Bf16, DType::Bf16);
    let ctx = BuildCtx::new(&cfg, &dev, &opts);
    #[cfg(feature = "cuda")]
    {
        let err = fp8_linear::cuda::PortableBlockFp8::ENTRY
            .build(&ctx)
            .err()
            .unwrap();
        assert!(matches!(err, KernelError::NoRuntime { .. }), "{err}");
    }
    let _ = ctx;
    // Opening an absent ordinal: NoSuchDevice where there is a driver, a "no GPU here" error
    // where there is none; never a panic.
    #[cfg(feature = "cuda")]
    match Target::cuda(4096) {
        Ok(_) => panic!("CUDA device 4096 opened"),
        Err(KernelError::NoSuchDevice { ordinal, count }) => {
            assert_eq!(ordinal, 4096);
            assert!(count < 4096);
        }
        Err(e) => assert!(e.to_string().to_lowercase().contains("cuda"), "{e}"),
    }
}

/// Sizes whose products overflow are typed errors from `Linear::new`, never an integer
/// overflow panic (debug builds check arithmetic) or an abort.
#[test]
fn huge_layer_sizes_are_typed_errors() {
    let w = [0x38u8; 16];
    let s = [1.0f32; 4];
    let opts = fp8_linear::Options::none();
    for (n, k) in [
        (usize::MAX / 2, 2),
        (2, usize::MAX / 2),
        (usize::MAX, usize::MAX),
        (1 << 40, 1 << 40),
    ] {
        let cfg = LayerConfig::block_128(n, k, DType::F32, DType::F32);
        let scale_shape = cfg.weight_scale_shape();
        let weights = LayerWeights::new(
            Tensor {
                data: fp8_linear::Storage::F8E4m3(&w),
                shape: [n, k],
                strides: [k, 1],
            },
            Tensor {
                data: fp8_linear::Storage::F32(&s),
                shape: scale_shape,
                strides: [scale_shape[1], 1],
            },
        );
        let r = std::panic::catch_unwind(|| {
            Linear::new(&Target::cpu(), &cfg, &weights, &opts).map(|_| ())
        });
        let err = r
            .unwrap_or_else(|_| panic!("N={n} K={k}: Linear::new panicked"))
            .expect_err("a layer this large cannot be built");
        let msg = err.to_string();
        assert!(
            matches!(
                err,
                fp8_linear::LinearError::Kernel(
                    KernelError::TooLarge { .. } | KernelError::BufferTooSmall { .. }
                )
            ),
            "N={n} K={k}: {msg}"
        );
    }
}
