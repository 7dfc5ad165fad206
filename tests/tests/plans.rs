//! Per-M plans: a kernel that declares the rows it serves (`#[fp8_kernel(rows = 1..=8)]`)
//! takes those M in a layer's plan and the next kernel of the table the rest; overrides, the
//! autotune file and errors act on every range; `Linear::forward` runs each call on the
//! kernel of its M. CPU kernels, so no GPU is needed; the built-in H200 plan is checked on
//! the profile.

use std::sync::atomic::{AtomicUsize, Ordering};

use fp8_linear::cpu::{CpuFp8Gemm, CpuReference};
use fp8_linear::tuning::device_key;
use fp8_linear::{
    bf16, fp8_kernel, fp8_table, BuildCtx, DType, Device, Fp8Kernel, KernelError, KernelOptions,
    LayerConfig, LayerWeights, Linear, Options, Overrides, Registered, SelectError, Target, Tensor,
    TensorMut, Tuned, TuningFile, Unsupported,
};

/// Calls that reached [`Small`].
static SMALL_CALLS: AtomicUsize = AtomicUsize::new(0);

/// A CPU kernel for M <= 8 (the f64 reference underneath), counting its calls.
#[fp8_kernel(platform = Cpu, priority = 1, backend = small, rows = 1..=8)]
pub struct Small {
    inner: CpuReference,
}

impl Small {
    pub fn new(ctx: &BuildCtx<'_>) -> Result<Self, KernelError> {
        Ok(Small {
            inner: CpuReference::for_layer(ctx.config()),
        })
    }
}

impl Fp8Kernel for Small {
    fn can_implement(c: &LayerConfig) -> Result<(), Unsupported> {
        CpuFp8Gemm::can_implement(c)
    }
    fn process_weights(&mut self, w: &LayerWeights<'_>) -> Result<(), KernelError> {
        self.inner.process_weights(w)
    }
    fn apply(&mut self, x: &Tensor<'_>, out: &mut TensorMut<'_>) -> Result<(), KernelError> {
        SMALL_CALLS.fetch_add(1, Ordering::SeqCst);
        self.inner.apply(x, out)
    }
}

fp8_table! {
    /// The built-in CPU block table with the small-M kernel first.
    pub SMALL_FIRST: Cpu, BlockScaled = fp8_linear::tables::CPU_BLOCK + [Small];
    /// The small-M kernel alone: M above 8 has no kernel.
    pub SMALL_ONLY: Cpu, BlockScaled = [Small];
}

fn layer() -> LayerConfig {
    LayerConfig::block_128(128, 256, DType::Bf16, DType::Bf16)
}

fn plan_text(ov: &Overrides) -> String {
    SMALL_FIRST
        .plan(&Device::host_cpu(), &layer(), ov)
        .map(|p| p.to_string())
        .unwrap_or_else(|e| format!("error: {e}"))
}

#[test]
fn a_kernel_takes_the_rows_it_declares_and_the_table_the_rest() {
    assert_eq!(Small::ENTRY.rows.to_string(), "1..=8");
    assert_eq!(
        plan_text(&Overrides::none()),
        "M = 1..=8: Small; M = 9..: CpuFp8Gemm"
    );
    // Disabled: on every range.
    assert_eq!(
        plan_text(&Overrides::none().disable("Small")),
        "M = 1..: CpuFp8Gemm"
    );
    // Forced: on every range it serves; the table takes the others.
    assert_eq!(
        plan_text(&Overrides::none().force("CpuReference")),
        "M = 1..: CpuReference (forced)"
    );
    assert_eq!(
        plan_text(&Overrides::none().force("Small")),
        "M = 1..=8: Small (forced); M = 9..: CpuFp8Gemm"
    );
    // The backend filter too: only `small` kernels leave M above 8 without one.
    let e = plan_text(&Overrides::none().backend("small"));
    assert!(e.starts_with("error: no kernel serves M = 9..:"), "{e}");
    // One M at a time, and the kernel of calls of many rows.
    let cpu = Device::host_cpu();
    let none = Overrides::none();
    let at = |m| {
        SMALL_FIRST
            .select_m(&cpu, &layer(), m, &none)
            .unwrap()
            .entry
            .name
    };
    assert_eq!((at(1), at(8), at(9)), ("Small", "Small", "CpuFp8Gemm"));
    let many = SMALL_FIRST.select(&cpu, &layer(), &none).unwrap();
    assert_eq!(many.entry.name, "CpuFp8Gemm");
}

#[test]
fn rows_without_a_kernel_are_an_error_naming_them() {
    let err = SMALL_ONLY
        .plan(&Device::host_cpu(), &layer(), &Overrides::none())
        .unwrap_err();
    match &err {
        SelectError::NoKernelForRows { rows, reasons } => {
            assert_eq!(rows.to_string(), "9..");
            match reasons.as_ref() {
                SelectError::NoKernel { reasons, .. } => {
                    assert_eq!(reasons, &[("Small", "serves only M = 1..=8".to_string())])
                }
                e => panic!("{e}"),
            }
        }
        e => panic!("{e}"),
    }
    let text = err.to_string();
    assert!(
        text.starts_with("no kernel serves M = 9..:")
            && text.contains("Small serves only M = 1..=8"),
        "{text}"
    );
}

#[test]
fn autotune_winners_take_their_buckets() {
    let cpu = Device::host_cpu();
    let mut file = TuningFile::new();
    // Bucket 16 holds M = 9..=16; bucket 4 (M = 3..=4) names a kernel that is not in the
    // table's plan there (Small wins anyway: the table order).
    file.record(&cpu, &layer(), 16, "CpuReference", 1e-4);
    file.record(&cpu, &layer(), 4, "Nope", 1e-4);
    let key = device_key(&cpu);
    let tuned = Tuned {
        device_key: &key,
        file: &file,
    };
    let plan = SMALL_FIRST
        .plan_tuned(&cpu, &layer(), tuned, &Overrides::none())
        .unwrap();
    assert_eq!(
        plan.to_string(),
        "M = 1..=8: Small; M = 9..=16: CpuReference (measured); M = 17..: CpuFp8Gemm"
    );
    // A forced kernel goes before a measurement.
    let forced = SMALL_FIRST
        .plan_tuned(
            &cpu,
            &layer(),
            tuned,
            &Overrides::none().force("CpuFp8Gemm"),
        )
        .unwrap();
    assert_eq!(forced.to_string(), "M = 1..: CpuFp8Gemm (forced)");
}

fn weights(n: usize, k: usize) -> (Vec<u8>, Vec<f32>) {
    let codes: Vec<u8> = (0..n * k)
        .map(|i| fp8_linear::fp8::f32_to_e4m3(((i * 7 % 17) as f32 - 8.0) / 4.0))
        .collect();
    (codes, vec![0.5, 0.25])
}

fn forward(layer: &mut Linear, m: usize) -> Result<Vec<f32>, KernelError> {
    let (n, k) = (layer.config().n, layer.config().k);
    let x: Vec<bf16> = (0..m * k)
        .map(|i| bf16::from_f32(((i * 5 % 13) as f32 - 6.0) / 8.0))
        .collect();
    let mut out = vec![bf16::ZERO; m * n];
    layer.forward(
        &Tensor::bf16(&x, [m, k]),
        &mut TensorMut::bf16(&mut out, [m, n]),
    )?;
    Ok(out.iter().map(|v| v.to_f32()).collect())
}

#[test]
fn forward_runs_each_call_on_the_kernel_of_its_m() {
    let cfg = layer();
    let (codes, scales) = weights(cfg.n, cfg.k);
    let w = LayerWeights::new(
        Tensor::fp8(&codes, [cfg.n, cfg.k]),
        Tensor::f32(&scales, [1, 2]),
    );
    static REGISTRY: fp8_linear::Registry = fp8_linear::Registry::new(&[&SMALL_FIRST]);
    let target = Target::cpu();
    let mut layer = Linear::with_registry(&REGISTRY, &target, &cfg, &w, &Options::none()).unwrap();
    assert_eq!(layer.plan().kernels().len(), 2);
    assert_eq!(layer.entry_for(8).unwrap().name, "Small");
    assert_eq!(layer.entry_for(9).unwrap().name, "CpuFp8Gemm");
    assert!(layer.entry_for(0).is_none());
    layer.prepare(64).unwrap();
    let before = SMALL_CALLS.load(Ordering::SeqCst);
    let small = forward(&mut layer, 4).unwrap();
    assert_eq!(SMALL_CALLS.load(Ordering::SeqCst), before + 1);
    let large = forward(&mut layer, 20).unwrap();
    assert_eq!(
        SMALL_CALLS.load(Ordering::SeqCst),
        before + 1,
        "M = 20 is not Small's"
    );
    // Both kernels compute the same layer: the first rows agree to bf16 rounding.
    let scale = large.iter().fold(0f32, |a, v| a.max(v.abs()));
    assert!(scale > 1.0);
    for (i, (a, b)) in small.iter().zip(&large).enumerate() {
        assert!((a - b).abs() <= 0.02 * scale, "output {i}: {a} vs {b}");
    }
    // CPU kernels keep their own weights: nothing in the layer's shared store.
    assert_eq!(layer.shared_weights().copies(), 0);

    // Built by name, the layer serves the kernel's rows only, and says so.
    let options = KernelOptions::none();
    let mut alone = Linear::with_entry(&Small::ENTRY, &target, &cfg, &w, &options).unwrap();
    assert!(forward(&mut alone, 8).is_ok());
    let e = forward(&mut alone, 9).unwrap_err();
    assert!(
        matches!(e, KernelError::Shape { what: "input", .. }) && e.to_string().contains("1..=8"),
        "{e}"
    );
}

/// The built-in plan on the H200 profile: our Hopper kernel at M = 1..=64, cuBLASLt
/// block-scaled above; with cuBLASLt disabled no M runs it (the Hopper kernel's wide listing
/// takes its range); with the Hopper kernel disabled the decode kernel takes M = 1; forced,
/// the Hopper kernel takes every M.
#[cfg(feature = "cuda")]
#[test]
fn the_h200_plan_is_hopper_then_cublaslt() {
    let h200 = Device::profile("h200").unwrap();
    let cfg = LayerConfig::block_128(4096, 7168, DType::Bf16, DType::Bf16);
    let plan = |ov: &Overrides| {
        fp8_linear::tables::BUILTIN
            .plan(&h200, &cfg, ov)
            .unwrap()
            .to_string()
    };
    assert_eq!(
        plan(&Overrides::none()),
        "M = 1..=64: HopperBlockFp8; M = 65..: CublasLtBlockFp8"
    );
    assert_eq!(
        plan(&Overrides::none().disable("CublasLtBlockFp8")),
        "M = 1..: HopperBlockFp8"
    );
    assert_eq!(
        plan(&Overrides::none().disable("HopperBlockFp8")),
        "M = 1: DecodeBlockFp8; M = 2..: CublasLtBlockFp8"
    );
    assert_eq!(
        plan(&Overrides::none().force("HopperBlockFp8")),
        "M = 1..: HopperBlockFp8 (forced)"
    );
    let decode_only = fp8_linear::tables::BUILTIN
        .plan(&h200, &cfg, &Overrides::none().backend("decode"))
        .unwrap_err();
    assert!(
        matches!(&decode_only, SelectError::NoKernelForRows { rows, .. } if rows.to_string() == "2.."),
        "{decode_only}"
    );
}
