//! The grouped Hopper kernel (`HopperGroupedFp8`) on the GPU: every call form (offsets with
//! an empty expert and padding rows, runs of expert ids that visit an expert twice, masked
//! slabs with empty and one-row experts), with and without routing weights, bias, ragged K,
//! two weight-block shapes and output dtypes, one kernel object over calls of different
//! rows, against the grouped f64 reference (`CpuGroupedReference`) on the activations as the
//! device holds them; rows no expert owns stay as they were. Skips without a GPU unless
//! FP8_REQUIRE_CUDA=1, and visibly on a GPU that is not sm_90 (a failure under
//! FP8_REQUIRE_CUDA=1 unless FP8_ALLOW_ARCH_SKIPS allows it).

use std::sync::Arc;

use fp8_linear::cpu::CpuGroupedReference;
use fp8_linear::cuda::runtime::Gpu;
use fp8_linear::cuda::HopperGroupedFp8;
use fp8_linear::{
    DType, GroupedLinear, KernelOptions, LayerConfig, Registered, Routing, ScaleDtype, Target,
    Tensor, TensorMut,
};
use fp8_linear_tests::check::{compare_rows, Tolerance};
use fp8_linear_tests::gpu::{entry_runs_on, gpu_or_skip, pick_rows, upload_as, AnyBuffer};
use fp8_linear_tests::layers::{block_config, random_activations, Experts};
use fp8_linear_tests::skip::arch_skip;

/// The GPU when it runs the kernel (sm_90a), else None after reporting the skip.
fn hopper(test: &str) -> Option<Arc<Gpu>> {
    let gpu = gpu_or_skip(test)?;
    let cap = gpu.capability();
    if !entry_runs_on(&HopperGroupedFp8::ENTRY, cap, false) {
        arch_skip(
            test,
            &format!(
                "HopperGroupedFp8 is {} only; this GPU is {cap}",
                HopperGroupedFp8::ENTRY.arch
            ),
        );
        return None;
    }
    Some(gpu)
}

/// The experts `x` of `cfg` in a grouped layer of the kernel on `gpu`.
fn on_gpu(gpu: &Arc<Gpu>, cfg: &LayerConfig, x: &Experts) -> GroupedLinear {
    let target = Target::from_gpu(gpu.clone());
    let entry = &HopperGroupedFp8::ENTRY;
    GroupedLinear::with_entry(entry, &target, cfg, &x.weights(), &KernelOptions::none())
        .unwrap_or_else(|e| panic!("{cfg}: {e}"))
}

/// One call: its rows, routing and whether it has routing weights.
struct Case {
    rows: usize,
    routing: Routing<'static>,
    weighted: bool,
}

const CASES: [Case; 3] = [
    // Expert 1 empty; rows 290..300 padding; expert 2's rows start inside a tile.
    Case {
        rows: 300,
        routing: Routing::Offsets(&[0, 100, 100, 250, 290]),
        weighted: true,
    },
    // Runs of ids: expert 2, expert 0, three padding rows, expert 2 again, expert 3.
    Case {
        rows: 109,
        routing: Routing::ExpertIds(&IDS),
        weighted: false,
    },
    // Masked, M_max = 64: a full slab, an empty one, 17 rows, one row.
    Case {
        rows: 256,
        routing: Routing::Masked(&[64, 0, 17, 1]),
        weighted: true,
    },
];

/// The expert ids of the second case.
const IDS: [i32; 109] = {
    let mut ids = [0i32; 109];
    let mut i = 0;
    while i < 109 {
        ids[i] = match i {
            0..5 => 2,
            5..65 => 0,
            65..68 => -1,
            68..108 => 2,
            _ => 3,
        };
        i += 1;
    }
    ids
};

/// The rows `routing` gives an expert, in order.
fn routed_rows(routing: &Routing<'_>, experts: usize, rows: usize) -> Vec<usize> {
    let mut r: Vec<usize> = routing
        .segments(experts, rows)
        .flat_map(|(_, range)| range)
        .collect();
    r.sort_unstable();
    r
}

#[test]
fn every_call_form_matches_the_grouped_reference() {
    let Some(gpu) = hopper("every_call_form_matches_the_grouped_reference") else {
        return;
    };
    let experts = 4;
    let configs = [
        LayerConfig {
            bias: true,
            ..LayerConfig::block_128(256, 448, DType::Bf16, DType::Bf16)
        },
        block_config(
            (64, 64),
            (ScaleDtype::F32, ScaleDtype::F32),
            (192, 330),
            (DType::F16, DType::F32),
        ),
    ];
    for cfg in configs {
        let (n, k) = (cfg.n, cfg.k);
        let x = Experts::random(&cfg, experts);
        let mut layer = on_gpu(&gpu, &cfg, &x);
        // The reference on f32 activations (the values the device holds) and f32 output.
        let cpu_cfg = LayerConfig {
            input_dtype: DType::F32,
            output_dtype: DType::F32,
            ..cfg
        };
        let mut reference = GroupedLinear::with_entry(
            &CpuGroupedReference::ENTRY,
            &Target::cpu(),
            &cpu_cfg,
            &x.weights(),
            &KernelOptions::none(),
        )
        .unwrap();
        for case in &CASES {
            let m = case.rows;
            let what = format!("{cfg}: {} of {m} rows", case.routing.name());
            let w: Vec<f32> = (0..m).map(|r| 0.25 + (r % 7) as f32 * 0.25).collect();
            let w = case.weighted.then_some(&w[..]);
            let (xin, exact) = upload_as(&gpu, &random_activations(m, k), cfg.input_dtype);
            let mut out = AnyBuffer::poisoned(&gpu, m * n, cfg.output_dtype);
            layer
                .forward(
                    &xin.tensor([m, k]),
                    &case.routing,
                    w,
                    &mut out.tensor_mut([m, n]),
                )
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            let got = out.to_f32();
            let mut want = vec![f32::NAN; m * n];
            reference
                .forward(
                    &Tensor::f32(&exact, [m, k]),
                    &case.routing,
                    w,
                    &mut TensorMut::f32(&mut want, [m, n]),
                )
                .unwrap();
            let rows = routed_rows(&case.routing, experts, m);
            let want64: Vec<f64> = pick_rows(&want, n, &rows)
                .iter()
                .map(|&v| f64::from(v))
                .collect();
            let tol = Tolerance::for_kernel(&HopperGroupedFp8::ENTRY, &cfg);
            let c = compare_rows(&pick_rows(&got, n, &rows), &want64, n, &rows, tol);
            eprintln!("{what}: {}", c.summary());
            c.assert_ok(&what);
            for r in (0..m).filter(|r| rows.binary_search(r).is_err()) {
                assert!(
                    got[r * n..(r + 1) * n].iter().all(|v| v.is_nan()),
                    "{what}: row {r}, which no expert owns, was written"
                );
            }
        }
    }
}

#[test]
fn a_call_routing_no_row_writes_nothing() {
    let Some(gpu) = hopper("a_call_routing_no_row_writes_nothing") else {
        return;
    };
    let cfg = LayerConfig::block_128(128, 256, DType::Bf16, DType::Bf16);
    let x = Experts::random(&cfg, 2);
    let mut layer = on_gpu(&gpu, &cfg, &x);
    let m = 8;
    let (xin, _) = upload_as(&gpu, &random_activations(m, 256), cfg.input_dtype);
    let mut out = AnyBuffer::poisoned(&gpu, m * 128, cfg.output_dtype);
    let masked = Routing::Masked(&[0, 0]);
    layer
        .forward(
            &xin.tensor([m, 256]),
            &masked,
            None,
            &mut out.tensor_mut([m, 128]),
        )
        .unwrap();
    assert!(out.to_f32().iter().all(|v| v.is_nan()));
    // Bad routing is the facade's typed error, before anything runs.
    let e = layer
        .forward(
            &xin.tensor([m, 256]),
            &Routing::Masked(&[5, 0]),
            None,
            &mut out.tensor_mut([m, 128]),
        )
        .unwrap_err();
    assert!(e.to_string().contains("above M_max"), "{e}");
}
