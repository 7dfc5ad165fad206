//! The grouped CUDA kernels (`HopperGroupedFp8`, `PortableGroupedFp8`, `MarlinGroupedFp8`) on
//! the GPU, each where it runs (Marlin, an Ampere kernel, forced by its `force_arch` on newer
//! GPUs): every call form (offsets with an empty expert and padding rows, runs of expert ids
//! that visit an expert twice, masked slabs with empty and one-row experts), with and without
//! routing weights, bias, ragged K, two weight-block shapes and output dtypes, one kernel
//! object over calls of different rows, against the grouped f64 reference
//! (`CpuGroupedReference`, of the kernel's numerics: W8A16 for Marlin) on the activations as
//! the device holds them; rows no expert owns
//! stay as they were. Masked calls with their counts in device memory, direct and as a CUDA
//! graph replayed with other counts (clamped to the slab). The built-in grouped tables plan
//! one of them on the GPU. The grouped Hopper GEMM launched overlapped with its activation
//! quantization writes the bits of the serial launch. Skips without a GPU unless
//! FP8_REQUIRE_CUDA=1, and visibly for a kernel the GPU cannot run (a failure under
//! FP8_REQUIRE_CUDA=1 unless FP8_ALLOW_ARCH_SKIPS allows it).

use std::sync::Arc;

use fp8_linear::cpu::CpuGroupedReference;
use fp8_linear::cuda::interop::cudarc::driver::sys;
use fp8_linear::cuda::runtime::{DeviceBuffer, Gpu};
use fp8_linear::cuda::{HopperGroupedFp8, MarlinGroupedFp8, PortableGroupedFp8};
use fp8_linear::{
    bf16, DType, DeviceMasked, GroupedLinear, KernelEntry, KernelOptions, LayerConfig, Options,
    Registered, Routing, ScaleDtype, Target, Tensor, TensorMut,
};
use fp8_linear_tests::check::{compare_rows, Tolerance};
use fp8_linear_tests::gpu::{gpu_for_entry_or_skip, gpu_or_skip, pick_rows, upload_as, AnyBuffer};
use fp8_linear_tests::layers::{block_config, random_activations, Experts};

/// The grouped CUDA kernels.
const KERNELS: [&KernelEntry; 3] = [
    &HopperGroupedFp8::ENTRY,
    &PortableGroupedFp8::ENTRY,
    &MarlinGroupedFp8::ENTRY,
];

/// The GPU when it runs `entry` (forced where its `force_arch` allows), else None after
/// reporting the skip of `test` for it.
fn gpu_for(test: &str, entry: &'static KernelEntry) -> Option<Arc<Gpu>> {
    gpu_for_entry_or_skip(&format!("{test} ({})", entry.name), entry, true)
}

/// The experts `x` of `cfg` in a grouped layer of `entry` on `gpu`.
fn on_gpu(
    entry: &'static KernelEntry,
    gpu: &Arc<Gpu>,
    cfg: &LayerConfig,
    x: &Experts,
) -> GroupedLinear {
    let target = Target::from_gpu(gpu.clone());
    GroupedLinear::with_entry(entry, &target, cfg, &x.weights(), &KernelOptions::none())
        .unwrap_or_else(|e| panic!("{} on {cfg}: {e}", entry.name))
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

/// The reference layer (f32 in and out, `entry`'s numerics) of the experts `x` of `cfg`.
fn reference_of(entry: &KernelEntry, cfg: &LayerConfig, x: &Experts) -> GroupedLinear {
    let cpu_cfg = LayerConfig {
        input_dtype: DType::F32,
        output_dtype: DType::F32,
        ..entry.reference_config(cfg)
    };
    let entry = &CpuGroupedReference::ENTRY;
    let options = KernelOptions::none();
    GroupedLinear::with_entry(entry, &Target::cpu(), &cpu_cfg, &x.weights(), &options).unwrap()
}

/// Checks `got` (`entry`'s output of a call on the activations `exact`, as the device held
/// them) against the reference's on the rows the routing gives an expert, and that every
/// other row of `got` is still NaN (the poisoned output untouched).
fn expect_reference(
    (entry, reference): (&'static KernelEntry, &mut GroupedLinear),
    cfg: &LayerConfig,
    (exact, got): (&[f32], &[f32]),
    (routing, w): (&Routing<'_>, Option<&[f32]>),
    what: &str,
) {
    let (n, k) = (cfg.n, cfg.k);
    let m = exact.len() / k;
    let mut want = vec![f32::NAN; m * n];
    reference
        .forward(
            &Tensor::f32(exact, [m, k]),
            routing,
            w,
            &mut TensorMut::f32(&mut want, [m, n]),
        )
        .unwrap();
    let rows = routed_rows(routing, reference.experts(), m);
    let want64: Vec<f64> = pick_rows(&want, n, &rows)
        .iter()
        .map(|&v| f64::from(v))
        .collect();
    let tol = Tolerance::for_kernel(entry, cfg);
    let c = compare_rows(&pick_rows(got, n, &rows), &want64, n, &rows, tol);
    eprintln!("{what}: {}", c.summary());
    c.assert_ok(what);
    for r in (0..m).filter(|r| rows.binary_search(r).is_err()) {
        assert!(
            got[r * n..(r + 1) * n].iter().all(|v| v.is_nan()),
            "{what}: row {r}, which no expert owns, was written"
        );
    }
}

#[test]
fn every_call_form_matches_the_grouped_reference() {
    for entry in KERNELS {
        if let Some(gpu) = gpu_for("every_call_form_matches_the_grouped_reference", entry) {
            every_call_form(entry, &gpu);
        }
    }
}

fn every_call_form(entry: &'static KernelEntry, gpu: &Arc<Gpu>) {
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
        // (for Marlin, whose output is in the activation dtype)
        block_config(
            (64, 64),
            (ScaleDtype::F32, ScaleDtype::F32),
            (192, 330),
            (DType::F16, DType::F16),
        ),
    ];
    let mut ran = 0;
    for cfg in configs.iter().filter(|c| (entry.can_implement)(c).is_ok()) {
        ran += 1;
        let (n, k) = (cfg.n, cfg.k);
        let x = Experts::random(cfg, experts);
        let mut layer = on_gpu(entry, gpu, cfg, &x);
        // The reference on f32 activations (the values the device holds) and f32 output.
        let mut reference = reference_of(entry, cfg, &x);
        for case in &CASES {
            let m = case.rows;
            let what = format!(
                "{} on {cfg}: {} of {m} rows",
                entry.name,
                case.routing.name()
            );
            let w: Vec<f32> = (0..m).map(|r| 0.25 + (r % 7) as f32 * 0.25).collect();
            let w = case.weighted.then_some(&w[..]);
            let (xin, exact) = upload_as(gpu, &random_activations(m, k), cfg.input_dtype);
            let mut out = AnyBuffer::poisoned(gpu, m * n, cfg.output_dtype);
            layer
                .forward(
                    &xin.tensor([m, k]),
                    &case.routing,
                    w,
                    &mut out.tensor_mut([m, n]),
                )
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            let got = out.to_f32();
            let call = (&case.routing, w);
            expect_reference((entry, &mut reference), cfg, (&exact, &got), call, &what);
        }
    }
    assert!(ran >= 2, "{} ran on {ran} of the layers", entry.name);
}

#[test]
fn the_built_in_tables_plan_a_grouped_cuda_kernel() {
    let Some(gpu) = gpu_or_skip("the_built_in_tables_plan_a_grouped_cuda_kernel") else {
        return;
    };
    let cfg = LayerConfig::block_128(256, 448, DType::Bf16, DType::Bf16);
    let x = Experts::random(&cfg, 4);
    let target = Target::from_gpu(gpu.clone());
    let mut layer = GroupedLinear::new(&target, &cfg, &x.weights(), &Options::none())
        .unwrap_or_else(|e| panic!("the built-in grouped tables on this GPU: {e}"));
    let m = CASES[0].rows;
    let entry = layer
        .plan()
        .entry_for(m)
        .expect("a kernel for every row count");
    assert!(
        KERNELS.iter().any(|k| k.name == entry.name),
        "{} planned, not a grouped CUDA kernel",
        entry.name
    );
    eprintln!("planned: {}", entry.name);
    let mut reference = reference_of(entry, &cfg, &x);
    let (xin, exact) = upload_as(&gpu, &random_activations(m, cfg.k), cfg.input_dtype);
    let mut out = AnyBuffer::poisoned(&gpu, m * cfg.n, cfg.output_dtype);
    let routing = &CASES[0].routing;
    layer
        .forward(
            &xin.tensor([m, cfg.k]),
            routing,
            None,
            &mut out.tensor_mut([m, cfg.n]),
        )
        .unwrap();
    let what = format!("{} planned from tables::GROUPED", entry.name);
    let call = (routing, None);
    expect_reference(
        (entry, &mut reference),
        &cfg,
        (&exact, &out.to_f32()),
        call,
        &what,
    );
}

#[test]
fn a_call_routing_no_row_writes_nothing() {
    for entry in KERNELS {
        if let Some(gpu) = gpu_for("a_call_routing_no_row_writes_nothing", entry) {
            no_row_routed(entry, &gpu);
        }
    }
}

fn no_row_routed(entry: &'static KernelEntry, gpu: &Arc<Gpu>) {
    let cfg = LayerConfig::block_128(128, 256, DType::Bf16, DType::Bf16);
    let x = Experts::random(&cfg, 2);
    let mut layer = on_gpu(entry, gpu, &cfg, &x);
    let m = 8;
    let (xin, _) = upload_as(gpu, &random_activations(m, 256), cfg.input_dtype);
    let mut out = AnyBuffer::poisoned(gpu, m * 128, cfg.output_dtype);
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

/// Writes `counts` as i32 into the device buffer `buf` (on its stream).
fn write_counts(buf: &mut DeviceBuffer<u8>, counts: &[i32]) {
    let bytes: Vec<u8> = counts.iter().flat_map(|c| c.to_ne_bytes()).collect();
    buf.upload(&bytes).unwrap();
}

#[test]
fn masked_counts_on_the_device_capture_into_a_graph() {
    let test = "masked_counts_on_the_device_capture_into_a_graph";
    for entry in KERNELS {
        if let Some(base) = gpu_for(test, entry) {
            // A stream of our own: the legacy default stream cannot be captured.
            device_counts_in_a_graph(entry, &base.fork_stream().unwrap());
        }
    }
}

fn device_counts_in_a_graph(entry: &'static KernelEntry, gpu: &Arc<Gpu>) {
    let cfg = LayerConfig {
        bias: true,
        ..LayerConfig::block_128(256, 448, DType::Bf16, DType::Bf16)
    };
    let (n, k, experts, m_max) = (cfg.n, cfg.k, 8, 16);
    let m = experts * m_max;
    let x = Experts::random(&cfg, experts);
    let mut layer = on_gpu(entry, gpu, &cfg, &x);
    let mut reference = reference_of(entry, &cfg, &x);
    let (xin, exact) = upload_as(gpu, &random_activations(m, k), cfg.input_dtype);
    let w: Vec<f32> = (0..m).map(|r| 0.5 + (r % 3) as f32 * 0.25).collect();
    let rw = DeviceBuffer::from_host(gpu, &w).unwrap();
    let mut counts = DeviceBuffer::<u8>::zeros(gpu, 4 * experts).unwrap();
    let routing = DeviceMasked {
        counts: counts.memory(),
        route_weights: Some(rw.memory()),
        expected_rows: 4,
    };
    // The output the graph captures: poisoned in place before every call.
    let mut out = DeviceBuffer::<bf16>::zeros(gpu, m * n).unwrap();
    let host = |out: &DeviceBuffer<bf16>| -> Vec<f32> {
        out.to_host().unwrap().iter().map(|v| v.to_f32()).collect()
    };
    // (the counts given, and as the kernel clamps them to 0..=M_max)
    let runs: [([i32; 8], [usize; 8]); 2] = [
        ([16, 0, 3, 1, 16, -2, 40, 7], [16, 0, 3, 1, 16, 0, 16, 7]),
        ([1, 2, 3, 4, 5, 6, 7, 8], [1, 2, 3, 4, 5, 6, 7, 8]),
    ];
    // Outside a capture first (the activation scratch is allocated there).
    write_counts(&mut counts, &runs[0].0);
    out.fill_bytes(0xff).unwrap();
    layer
        .forward_masked_on_device(&xin.tensor([m, k]), &routing, &mut out.tensor_mut([m, n]))
        .unwrap();
    let call = (&Routing::Masked(&runs[0].1), Some(&w[..]));
    let what = format!("{}: device counts, direct", entry.name);
    let checked = (entry, &mut reference);
    expect_reference(checked, &cfg, (&exact, &host(&out)), call, &what);

    // Captured, then replayed with each run's counts written into the same buffer.
    let stream = gpu.stream().clone();
    out.fill_bytes(0xff).unwrap();
    stream
        .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        .unwrap();
    let r =
        layer.forward_masked_on_device(&xin.tensor([m, k]), &routing, &mut out.tensor_mut([m, n]));
    let graph = stream.end_capture(sys::CUgraphInstantiate_flags(0));
    r.unwrap();
    let graph = graph.unwrap().expect("a captured graph");
    for (given, clamped) in &runs {
        write_counts(&mut counts, given);
        out.fill_bytes(0xff).unwrap();
        graph.launch().unwrap();
        gpu.synchronize().unwrap();
        let call = (&Routing::Masked(clamped), Some(&w[..]));
        let what = format!("{}: device counts {given:?}, graph replay", entry.name);
        let checked = (entry, &mut reference);
        expect_reference(checked, &cfg, (&exact, &host(&out)), call, &what);
    }
}

/// The grouped Hopper GEMM launched overlapped with the activation quantization (the
/// default) writes the same bits as the serial launch (`KernelOptions::overlap(false)`),
/// for every call form, the counts in host and in device memory.
#[test]
fn the_overlapped_grouped_launch_matches_the_serial_one_bit_for_bit() {
    let entry = &HopperGroupedFp8::ENTRY;
    let test = "the_overlapped_grouped_launch_matches_the_serial_one_bit_for_bit";
    let Some(gpu) = gpu_for(test, entry) else {
        return;
    };
    let cfg = LayerConfig {
        bias: true,
        ..LayerConfig::block_128(256, 448, DType::Bf16, DType::Bf16)
    };
    let (n, k, experts) = (cfg.n, cfg.k, 4);
    let x = Experts::random(&cfg, experts);
    let target = Target::from_gpu(gpu.clone());
    let make = |overlap: bool| {
        let options = KernelOptions::none().overlap(overlap);
        GroupedLinear::with_entry(entry, &target, &cfg, &x.weights(), &options)
            .unwrap_or_else(|e| panic!("overlap {overlap}: {e}"))
    };
    let (mut overlapped, mut serial) = (make(true), make(false));
    let bits = |out: &AnyBuffer| -> Vec<u32> { out.to_f32().iter().map(|v| v.to_bits()).collect() };
    for case in &CASES {
        let m = case.rows;
        let w: Vec<f32> = (0..m).map(|r| 0.25 + (r % 7) as f32 * 0.25).collect();
        let w = case.weighted.then_some(&w[..]);
        let (xin, _) = upload_as(&gpu, &random_activations(m, k), cfg.input_dtype);
        let run = |layer: &mut GroupedLinear| {
            let mut out = AnyBuffer::poisoned(&gpu, m * n, cfg.output_dtype);
            let mut y = out.tensor_mut([m, n]);
            layer
                .forward(&xin.tensor([m, k]), &case.routing, w, &mut y)
                .unwrap();
            bits(&out)
        };
        let what = case.routing.name();
        assert!(
            run(&mut overlapped) == run(&mut serial),
            "{what}: the launches differ"
        );
    }
    // Masked with the counts in device memory.
    let m_max = 16;
    let m = experts * m_max;
    let mut counts = DeviceBuffer::<u8>::zeros(&gpu, 4 * experts).unwrap();
    write_counts(&mut counts, &[16, 0, 5, 1]);
    let routing = DeviceMasked {
        counts: counts.memory(),
        route_weights: None,
        expected_rows: 4,
    };
    let (xin, _) = upload_as(&gpu, &random_activations(m, k), cfg.input_dtype);
    let run = |layer: &mut GroupedLinear| {
        let mut out = AnyBuffer::poisoned(&gpu, m * n, cfg.output_dtype);
        let mut y = out.tensor_mut([m, n]);
        layer
            .forward_masked_on_device(&xin.tensor([m, k]), &routing, &mut y)
            .unwrap();
        bits(&out)
    };
    let same = run(&mut overlapped) == run(&mut serial);
    assert!(same, "device counts: the launches differ");
}
