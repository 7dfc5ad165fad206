//! A table that lists a kernel for some rows (`Kernel { rows = A..=B } => p`) and again,
//! lower, for every row: the plan gives the window's rows to it, the other rows to the
//! kernels in between; forcing the kernel, a measured winner outside the window and
//! `explain` see its widest listing; a layer built from the plan runs each M on the kernel
//! its range names, and the windowed kernel's output is its own (bit-identical to the kernel
//! built alone).

use fp8_linear::cpu::{CpuFp8Gemm, CpuReference};
use fp8_linear::fp8::f32_to_e4m3;
use fp8_linear::tuning::device_key;
use fp8_linear::{
    bf16, fp8_table, Choice, DType, Device, Fp8Kernel, KernelOptions, LayerConfig, LayerWeights,
    Linear, Options, Overrides, Registry, RowRange, Target, Tensor, TensorMut, TuningFile, Verdict,
};

fp8_table! {
    /// The f64 reference first for M = 2..=4, the fast CPU GEMM for the other rows, and the
    /// reference again for every row (reached when the fast GEMM is disabled or forced away).
    pub WINDOWED: Cpu, BlockScaled = [
        CpuReference { rows = 2..=4 } => 1,
        CpuFp8Gemm => 2,
        CpuReference => 3,
    ];
}

static REGISTRY: Registry = Registry::new(&[&WINDOWED]);

fn layer() -> LayerConfig {
    LayerConfig::block_128(256, 384, DType::Bf16, DType::Bf16)
}

#[test]
fn the_window_takes_its_rows_and_the_rest_go_on_in_table_order() {
    assert_eq!(WINDOWED.entries.len(), 3);
    assert_eq!(WINDOWED.entries[0].rows, RowRange::new(2, 4));
    assert_eq!(WINDOWED.entries[2].rows, RowRange::ALL);
    let cpu = Device::cpu(2);
    let plan = WINDOWED.plan(&cpu, &layer(), &Overrides::none()).unwrap();
    assert_eq!(
        plan.to_string(),
        "M = 1: CpuFp8Gemm; M = 2..=4: CpuReference; M = 5..: CpuFp8Gemm"
    );
    // One kernel per name: the two ranges of CpuFp8Gemm share one instance.
    let names: Vec<&str> = plan.kernels().iter().map(|e| e.name).collect();
    assert_eq!(names, ["CpuFp8Gemm", "CpuReference"]);

    // The fast GEMM disabled: the reference's wide listing takes every row.
    let off = Overrides::none().disable("CpuFp8Gemm");
    let plan = WINDOWED.plan(&cpu, &layer(), &off).unwrap();
    assert_eq!(plan.to_string(), "M = 1..: CpuReference");
}

#[test]
fn forcing_and_measurements_use_the_widest_listing() {
    let cpu = Device::cpu(2);
    assert_eq!(WINDOWED.entry("CpuReference").unwrap().rows, RowRange::ALL);
    let forced = Overrides::none().force("CpuReference");
    let plan = WINDOWED.plan(&cpu, &layer(), &forced).unwrap();
    assert_eq!(plan.to_string(), "M = 1..: CpuReference (forced)");

    // A measured winner outside the window (bucket 16: M = 9..=16) is the wide listing.
    let mut t = TuningFile::new();
    t.record(&cpu, &layer(), 16, "CpuReference", 1e-3);
    let key = device_key(&cpu);
    let s = WINDOWED
        .select_tuned(&cpu, &key, &layer(), 12, &t, &Overrides::none())
        .unwrap();
    assert_eq!(
        (s.entry.name, s.entry.rows),
        ("CpuReference", RowRange::ALL)
    );
    let tuned = fp8_linear::Tuned {
        device_key: &key,
        file: &t,
    };
    let plan = WINDOWED
        .plan_tuned(&cpu, &layer(), tuned, &Overrides::none())
        .unwrap();
    let r = plan.range_for(12).unwrap();
    assert_eq!((r.entry.name, r.choice), ("CpuReference", Choice::Tuned));
    assert_eq!(plan.entry_for(20).unwrap().name, "CpuFp8Gemm");
}

#[test]
fn explain_lists_each_listing_with_its_rows() {
    let cpu = Device::cpu(2);
    let e = WINDOWED.explain(&cpu, &layer(), &Overrides::none());
    let rows: Vec<(&str, String, bool)> = e
        .candidates
        .iter()
        .map(|c| {
            let chosen = matches!(c.verdict, Verdict::Chosen);
            (c.entry.name, c.entry.rows.to_string(), chosen)
        })
        .collect();
    assert_eq!(
        rows,
        [
            ("CpuReference", "2..=4".to_string(), true),
            ("CpuFp8Gemm", "1..".to_string(), true),
            ("CpuReference", "1..".to_string(), false),
        ]
    );
}

/// `m` rows through `kernel`, as f32.
fn run(kernel: &mut dyn Fp8Kernel, x: &[bf16], m: usize, (n, k): (usize, usize)) -> Vec<f32> {
    let mut out = vec![bf16::ZERO; m * n];
    kernel
        .apply(
            &Tensor::bf16(&x[..m * k], [m, k]),
            &mut TensorMut::bf16(&mut out, [m, n]),
        )
        .unwrap();
    out.iter().map(|v| v.to_f32()).collect()
}

#[test]
fn a_layer_runs_each_m_on_its_ranges_kernel() {
    let c = layer();
    let (n, k) = (c.n, c.k);
    let codes: Vec<u8> = (0..n * k)
        .map(|i| f32_to_e4m3(((i * 7 % 17) as f32 - 8.0) / 4.0))
        .collect();
    let scales: Vec<f32> = (0..2 * 3).map(|i| 0.25 + 0.125 * i as f32).collect();
    let weights = LayerWeights::new(Tensor::fp8(&codes, [n, k]), Tensor::f32(&scales, [2, 3]));
    let x: Vec<bf16> = (0..8 * k)
        .map(|i| bf16::from_f32(((i * 5 % 13) as f32 - 6.0) / 8.0))
        .collect();
    let target = Target::cpu();
    let mut linear = Linear::with_registry(&REGISTRY, &target, &c, &weights, &Options::none())
        .expect("a layer from the windowed table");
    assert_eq!(
        linear.plan().to_string(),
        "M = 1: CpuFp8Gemm; M = 2..=4: CpuReference; M = 5..: CpuFp8Gemm"
    );
    let options = KernelOptions::none();
    let alone = |entry: &'static fp8_linear::KernelEntry| {
        let mut kr = entry.build(&target.build_ctx(&c, &options)).unwrap();
        kr.process_weights(&weights).unwrap();
        kr
    };
    let mut reference = alone(WINDOWED.entry("CpuReference").unwrap());
    let mut fast = alone(WINDOWED.entry("CpuFp8Gemm").unwrap());
    for m in [1, 2, 4, 5, 8] {
        let mut out = vec![bf16::ZERO; m * n];
        linear
            .forward(
                &Tensor::bf16(&x[..m * k], [m, k]),
                &mut TensorMut::bf16(&mut out, [m, n]),
            )
            .unwrap();
        let got: Vec<f32> = out.iter().map(|v| v.to_f32()).collect();
        let want = if (2..=4).contains(&m) {
            run(reference.as_mut(), &x, m, (n, k))
        } else {
            run(fast.as_mut(), &x, m, (n, k))
        };
        assert_eq!(got, want, "M = {m}: not the output of its range's kernel");
        assert!(
            got.iter().any(|v| v.abs() > 1.0),
            "M = {m}: a degenerate layer"
        );
    }
}
