//! Bad input to the CUDA kernels gives typed errors, never a panic or an out-of-bounds
//! access: host memory where device memory is needed, wrong shapes and dtypes, short
//! buffers, bad scales, apply before process_weights, a GPU ordinal the machine does not
//! have, a kernel built for a GPU its arch does not cover. After the bad calls the kernel
//! must still compute the right output (checked against the f64 reference). Config
//! rejections are checked without a GPU; the rest skip without one unless
//! FP8_REQUIRE_CUDA=1 (the portable kernel's part below sm_89, visibly).

use fp8_linear::cuda::runtime::DeviceBuffer;
use fp8_linear::cuda::{
    CublasLtBlockFp8, CublasLtFp8PerTensor, CublasLtFp8Rowwise, PortableBlockFp8,
};
use fp8_linear::{
    DType, DeviceMemory, Fp8Kernel, KernelError, KernelOptions, LayerConfig, LayerWeights,
    QuantKey, Registered, Storage, Target, Tensor, TensorMut,
};
use fp8_linear_tests::check::{compare, Tolerance};
use fp8_linear_tests::gpu::{
    block_reference_rows, gpu_for_entry_or_skip, gpu_or_skip, upload_as, AnyBuffer,
};
use fp8_linear_tests::layers::{quantize_groups, random_activations, random_block_weight};
use half::bf16;

#[test]
fn configs_they_cannot_run_are_rejected_with_reasons() {
    let ragged = LayerConfig::block_128(7748, 3884, DType::Bf16, DType::Bf16);
    assert!(PortableBlockFp8::can_implement(&ragged).is_ok());
    let e = CublasLtBlockFp8::can_implement(&ragged).unwrap_err();
    assert!(e.to_string().contains("multiple of 16"), "{e}");
    let f16_out = LayerConfig::block_128(4096, 7168, DType::Bf16, DType::F16);
    assert!(CublasLtBlockFp8::can_implement(&f16_out).is_err());
    let static_act = LayerConfig {
        activation: Some(QuantKey {
            dynamic: false,
            ..QuantKey::ACT_GROUP_128
        }),
        ..f16_out
    };
    let e = PortableBlockFp8::can_implement(&static_act).unwrap_err();
    assert!(e.to_string().contains("dynamic"), "{e}");
    let per_tensor = LayerConfig::per_tensor_static(4096, 7168, DType::Bf16, DType::Bf16);
    assert!(PortableBlockFp8::can_implement(&per_tensor).is_err());
    assert!(CublasLtFp8PerTensor::can_implement(&per_tensor).is_ok());
    let per_token = LayerConfig::per_token_per_channel(4096, 7168, DType::Bf16, DType::Bf16);
    assert!(CublasLtFp8PerTensor::can_implement(&per_token).is_err());
    assert!(CublasLtFp8Rowwise::can_implement(&per_token).is_ok());
    let w8a16 = LayerConfig::weight_only(QuantKey::WEIGHT_BLOCK_128, 4096, 7168, DType::Bf16);
    assert!(PortableBlockFp8::can_implement(&w8a16).is_err());
    let zero = LayerConfig::block_128(0, 7168, DType::Bf16, DType::Bf16);
    assert!(PortableBlockFp8::can_implement(&zero).is_err());
}

#[test]
fn bad_inputs_give_typed_errors() {
    // The portable kernel needs FP8 tensor cores (its arch, sm_89 and newer).
    let Some(gpu) = gpu_for_entry_or_skip(
        "bad_inputs_give_typed_errors",
        &PortableBlockFp8::ENTRY,
        false,
    ) else {
        return;
    };
    let (m, n, k) = (4, 256, 300);
    let cfg = LayerConfig::block_128(n, k, DType::Bf16, DType::Bf16);
    let (w, ws) = random_block_weight(n, k, 2);
    let good = LayerWeights::new(Tensor::fp8(&w, [n, k]), Tensor::f32(&ws, [2, 3]));
    let target = Target::from_gpu(gpu.clone());
    let mut kernel = PortableBlockFp8::new(&target.build_ctx(&cfg, &KernelOptions::none()))
        .unwrap_or_else(|e| panic!("{e}"));
    let xb = AnyBuffer::poisoned(&gpu, m * k, DType::Bf16);
    let mut out = AnyBuffer::poisoned(&gpu, m * n, DType::Bf16);

    // apply before process_weights
    let r = kernel.apply(&xb.tensor([m, k]), &mut out.tensor_mut([m, n]));
    assert!(
        matches!(r, Err(KernelError::WeightsNotProcessed { .. })),
        "{r:?}"
    );

    // transposed weight scales (the layout trap)
    let bad = LayerWeights {
        weight_scale: Tensor::f32(&ws, [3, 2]),
        ..good
    };
    let r = kernel.process_weights(&bad);
    assert!(matches!(r, Err(KernelError::ScaleLayout { .. })), "{r:?}");
    // NaN scale
    let mut nan = ws.clone();
    nan[4] = f32::NAN;
    let r = kernel.process_weights(&LayerWeights {
        weight_scale: Tensor::f32(&nan, [2, 3]),
        ..good
    });
    assert!(
        matches!(r, Err(KernelError::NotFinite { index: 4, .. })),
        "{r:?}"
    );
    // weight of the wrong dtype
    let wf: Vec<f32> = vec![0.5; n * k];
    let r = kernel.process_weights(&LayerWeights {
        weight: Tensor::f32(&wf, [n, k]),
        ..good
    });
    assert!(matches!(r, Err(KernelError::DType { .. })), "{r:?}");
    // a device weight buffer too short for [n, k]
    let short = DeviceBuffer::<u8>::zeros(&gpu, n * k - 1).unwrap();
    let r = kernel.process_weights(&LayerWeights {
        weight: Tensor {
            data: Storage::Device(short.memory(), DType::F8E4m3),
            shape: [n, k],
            strides: [k, 1],
        },
        ..good
    });
    assert!(
        matches!(r, Err(KernelError::BufferTooSmall { .. })),
        "{r:?}"
    );

    kernel.process_weights(&good).unwrap();
    // host input
    let host_x = vec![bf16::from_f32(1.0); m * k];
    let r = kernel.apply(&Tensor::bf16(&host_x, [m, k]), &mut out.tensor_mut([m, n]));
    assert!(matches!(r, Err(KernelError::Device { .. })), "{r:?}");
    // host output
    let mut host_out = vec![bf16::ZERO; m * n];
    let r = kernel.apply(
        &xb.tensor([m, k]),
        &mut TensorMut::bf16(&mut host_out, [m, n]),
    );
    assert!(matches!(r, Err(KernelError::Device { .. })), "{r:?}");
    // wrong K
    let r = kernel.apply(&xb.tensor([m * k / 100, 100]), &mut out.tensor_mut([m, n]));
    assert!(matches!(r, Err(KernelError::Shape { .. })), "{r:?}");
    // wrong output shape
    let r = kernel.apply(&xb.tensor([m, k]), &mut out.tensor_mut([m, n - 1]));
    assert!(matches!(r, Err(KernelError::Shape { .. })), "{r:?}");
    // wrong input dtype (f32 view of the bf16 buffer's memory)
    let mem = match xb.tensor([m, k]).data {
        Storage::Device(mem, _) => mem,
        _ => unreachable!(),
    };
    let r = kernel.apply(
        &Tensor::device(mem, DType::F32, [m / 2, k]),
        &mut out.tensor_mut([m / 2, n]),
    );
    assert!(matches!(r, Err(KernelError::DType { .. })), "{r:?}");
    // an input buffer shorter than its shape claims
    let short_mem = DeviceMemory {
        bytes: (m * k - 1) * 2,
        ..mem
    };
    let r = kernel.apply(
        &Tensor::device(short_mem, DType::Bf16, [m, k]),
        &mut out.tensor_mut([m, n]),
    );
    assert!(
        matches!(r, Err(KernelError::BufferTooSmall { .. })),
        "{r:?}"
    );
    // memory claiming another device
    let other = DeviceMemory { ordinal: 7, ..mem };
    let r = kernel.apply(
        &Tensor::device(other, DType::Bf16, [m, k]),
        &mut out.tensor_mut([m, n]),
    );
    assert!(matches!(r, Err(KernelError::Device { .. })), "{r:?}");
    // M = 0
    let r = kernel.apply(&xb.tensor([0, k]), &mut out.tensor_mut([0, n]));
    assert!(matches!(r, Err(KernelError::Shape { .. })), "{r:?}");
    // and the kernel still computes the right output afterwards (into a freshly poisoned
    // buffer, from real activations: the poisoned input above is NaN)
    let x = random_activations(m, k);
    let (xd, exact) = upload_as(&gpu, &x, DType::Bf16);
    let mut y = AnyBuffer::poisoned(&gpu, m * n, DType::Bf16);
    kernel
        .apply(&xd.tensor([m, k]), &mut y.tensor_mut([m, n]))
        .unwrap();
    let (aq, as_) = quantize_groups(&exact, m, k);
    let rows: Vec<usize> = (0..m).collect();
    let want = block_reference_rows(&aq, &as_, &w, &ws, n, k, &rows);
    let c = compare(
        &y.to_f32(),
        &want,
        n,
        Tolerance::for_kernel(&PortableBlockFp8::ENTRY, &cfg),
    );
    eprintln!("after the bad calls: {}", c.summary());
    c.assert_ok("PortableBlockFp8 after the bad calls");
    eprintln!("bad inputs: every case gave its typed error");
}

#[test]
fn a_missing_gpu_ordinal_is_a_typed_error() {
    if gpu_or_skip("a_missing_gpu_ordinal_is_a_typed_error").is_none() {
        return;
    }
    match Target::cuda(4096) {
        Err(e @ KernelError::NoSuchDevice { ordinal: 4096, .. }) => {
            let msg = e.to_string();
            assert!(msg.contains("4096"), "the message names the ordinal: {msg}");
            eprintln!("Target::cuda(4096): {msg}");
        }
        other => panic!("Target::cuda(4096) must be NoSuchDevice {{ ordinal: 4096 }}: {other:?}"),
    }
    match fp8_linear::cuda::runtime::Gpu::open(4096) {
        Err(fp8_linear::cuda::runtime::CudaError::NoSuchDevice { ordinal: 4096, .. }) => {}
        other => panic!("Gpu::open(4096) must be NoSuchDevice: {other:?}"),
    }
}

#[test]
fn a_kernel_outside_its_arch_is_refused_with_a_typed_error() {
    let Some(gpu) = gpu_or_skip("a_kernel_outside_its_arch_is_refused_with_a_typed_error") else {
        return;
    };
    let cap = gpu.capability();
    let target = Target::from_gpu(gpu.clone());
    let cfg = LayerConfig::block_128(256, 384, DType::Bf16, DType::Bf16);
    let mut checked = 0;
    for t in fp8_linear::tables::BUILTIN.tables() {
        for e in t.entries {
            let runs = e.platform == gpu.device().platform
                && (e.arch.matches(Some(cap))
                    || e.force_arch.is_some_and(|a| a.matches(Some(cap))));
            if runs || (e.can_implement)(&cfg).is_err() {
                continue;
            }
            // A CPU kernel on a GPU target, or a CUDA kernel of another arch.
            let r = e.build(&target.build_ctx(&cfg, &KernelOptions::none()));
            assert!(
                matches!(r, Err(KernelError::WrongDevice { .. })),
                "{} on {cap}: {:?}",
                e.name,
                r.err()
            );
            checked += 1;
        }
    }
    eprintln!("{checked} kernels refused on this GPU with WrongDevice");
    // The CPU kernels are in the tables and never run on a GPU target: the loop above
    // checked at least those.
    assert!(checked >= 2, "only {checked} kernels checked");
}
