//! Selection behaviour: overrides, error messages, explain, the environment variables.

use fp8_linear::tables::CPU_BLOCK;
use fp8_linear::{DType, Device, LayerConfig, OverrideSource, Overrides, SelectError, Verdict};

fn block() -> LayerConfig {
    LayerConfig::block_128(7748, 3884, DType::Bf16, DType::Bf16)
}

#[test]
fn cpu_default_is_the_fast_kernel() {
    let s = fp8_linear::tables::BUILTIN
        .select(&Device::host_cpu(), &block(), &Overrides::none())
        .unwrap();
    assert_eq!(s.entry.name, "CpuFp8Gemm");
    assert!(s.force_rejected.is_none());
}

#[test]
fn force_picks_a_runnable_kernel() {
    let ov = Overrides::none().force("cpureference");
    let s = CPU_BLOCK.select(&Device::cpu(2), &block(), &ov).unwrap();
    assert_eq!(s.entry.name, "CpuReference");
}

#[test]
fn force_of_a_kernel_that_cannot_run_falls_back_and_says_why() {
    let bad = LayerConfig {
        output_dtype: DType::F8E4m3,
        ..block()
    };
    let ov = Overrides::none().force("CpuReference");
    // Nothing can run an f8 output: the forced kernel is rejected and so is the rest.
    let err = CPU_BLOCK.select(&Device::cpu(2), &bad, &ov).unwrap_err();
    assert!(
        err.to_string()
            .contains("output dtype must be f32, bf16 or f16"),
        "{err}"
    );
}

#[test]
fn disabling_falls_through_to_the_next_kernel() {
    let ov = Overrides::none().disable("CpuFp8Gemm");
    let s = CPU_BLOCK.select(&Device::cpu(2), &block(), &ov).unwrap();
    assert_eq!(s.entry.name, "CpuReference");
    let ex = CPU_BLOCK.explain(&Device::cpu(2), &block(), &ov);
    assert_eq!(
        ex.candidates[0].verdict,
        Verdict::Disabled(OverrideSource::Api)
    );
    assert_eq!(ex.candidates[1].verdict, Verdict::Chosen);
}

#[test]
fn all_rejected_error_lists_every_candidate_in_order() {
    let ov = Overrides::none()
        .disable("CpuFp8Gemm")
        .disable("CpuReference");
    let err = CPU_BLOCK
        .select(&Device::cpu(2), &block(), &ov)
        .unwrap_err();
    let text = err.to_string();
    assert!(text.starts_with("Failed to find a kernel"), "{text}");
    let lines: Vec<&str> = text.lines().skip(1).collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(
        lines[0].contains("CpuFp8Gemm is disabled by override"),
        "{text}"
    );
    assert!(
        lines[1].contains("CpuReference is disabled by override"),
        "{text}"
    );
}

#[test]
fn backend_filter() {
    let ov = Overrides::none().backend("cpu_reference");
    let s = CPU_BLOCK.select(&Device::cpu(2), &block(), &ov).unwrap();
    assert_eq!(s.entry.name, "CpuReference");
    let ov = Overrides::none().backend("cutlass");
    let err = CPU_BLOCK
        .select(&Device::cpu(2), &block(), &ov)
        .unwrap_err();
    assert!(matches!(err, SelectError::NoSuchBackend { .. }), "{err}");
    assert!(err.to_string().contains("cpu_reference"), "{err}");
}

#[test]
fn zero_sized_layers_are_rejected_with_a_reason() {
    let z = LayerConfig::block_128(0, 128, DType::Bf16, DType::Bf16);
    let err = CPU_BLOCK
        .select(&Device::cpu(2), &z, &Overrides::none())
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("N (output features) must be at least 1"),
        "{err}"
    );
}

#[test]
fn cpu_kernels_do_not_run_on_a_gpu_device() {
    let a100 = Device::profile("a100").unwrap();
    let err = CPU_BLOCK
        .select(&a100, &block(), &Overrides::none())
        .unwrap_err();
    // A platform mismatch is named as one (not as a compute-capability mismatch).
    assert!(
        err.to_string()
            .contains("is a cpu kernel; the device is a cuda device"),
        "{err}"
    );
    let ex = CPU_BLOCK.explain(&a100, &block(), &Overrides::none());
    assert!(ex.candidates.iter().all(|c| matches!(
        c.verdict,
        Verdict::PlatformMismatch {
            kernel: fp8_linear::Platform::Cpu,
            device: fp8_linear::Platform::Cuda
        }
    )));
}

#[test]
fn environment_overrides_are_read() {
    // The only test in this binary that touches the environment.
    // SAFETY: no other thread of this test binary reads or writes these variables.
    unsafe {
        std::env::set_var("FP8_LINEAR_DISABLE", " CpuFp8Gemm , other");
        std::env::set_var("FP8_LINEAR_FORCE", "CpuReference");
    }
    let ov = Overrides::from_env();
    unsafe {
        std::env::remove_var("FP8_LINEAR_DISABLE");
        std::env::remove_var("FP8_LINEAR_FORCE");
    }
    assert_eq!(ov.disabled.len(), 2);
    assert_eq!(
        ov.disabled[0],
        ("CpuFp8Gemm".to_string(), OverrideSource::Env)
    );
    let ex = CPU_BLOCK.explain(&Device::cpu(2), &block(), &Overrides { force: None, ..ov });
    assert_eq!(
        ex.candidates[0].verdict,
        Verdict::Disabled(OverrideSource::Env)
    );
    assert!(ex.candidates[0]
        .verdict
        .to_string()
        .contains("disabled by environment variable FP8_LINEAR_DISABLE"));
}
