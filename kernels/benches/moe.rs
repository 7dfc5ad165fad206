//! Mixture-of-experts projections on the grouped Hopper kernel (`HopperGroupedFp8`) and the
//! grouped Marlin kernel (`MarlinGroupedFp8`, W8A16, its sm_80 code: what an A100 runs),
//! against what their targets are measured by, all in one run: contiguous calls (E experts x
//! R rows, prefill) against the dense Hopper kernel (`HopperBlockFp8`, one expert's layer) on
//! the same total rows, with cuBLASLt block-scaled on those rows as the yardstick, and masked
//! calls (E experts x R rows, decode: M_max = R, every count R), Hopper's and Marlin's, each
//! with the counts in host memory (`forward`) and in device memory
//! (`forward_masked_on_device`, expected rows R), against the read-once floor of the E
//! experts' weights (a kernel that only reads those E x N x K bytes once, see
//! `common::ReadOnce`). Each layer holds 64 experts; a call routes rows to the first E and
//! none to the others. CUDA events around one call (activation quantization and the routing's
//! upload included), a 256 MiB read evicting L2 before every timed call, median of the
//! samples. Shapes: DeepSeek-V3's experts (gate and up fused,
//! 4096 x 7168; down, 7168 x 2048) and Qwen3-30B-A3B's (1536 x 2048; 2048 x 768), bf16 in
//! and out, 128 x 128 blocks. Checks each contiguous call's first expert's rows against the
//! dense kernel's (relative Frobenius difference). Prints "skipped" and exits 0 without an
//! sm_90 GPU.
//!
//! `cargo bench -p fp8-linear --bench moe` (`FP8_BENCH_QUICK=1`: the Qwen3 shapes only;
//! `FP8_BENCH_MASKED=1`: the masked points only)

mod common;

use std::sync::Arc;

use common::{
    flushed_median, hopper_or_skip, random_codes, random_scales, rel_diff, Flush, ReadOnce,
};
use fp8_linear::cuda::runtime::{DeviceBuffer, EventTimer, Gpu};
use fp8_linear::cuda::{CublasLtBlockFp8, HopperBlockFp8, HopperGroupedFp8, MarlinGroupedFp8};
use fp8_linear::{
    Capability, DType, DeviceMasked, GroupedLinear, GroupedWeights, KernelOptions, LayerConfig,
    LayerWeights, Linear, Registered, Routing, Target, Tensor,
};
use half::bf16;
use rand::Rng;

/// (name, N, K) of one expert's projection.
const SHAPES: [(&str, usize, usize); 4] = [
    ("DeepSeek-V3 gate+up", 4096, 7168),
    ("DeepSeek-V3 down", 7168, 2048),
    ("Qwen3-30B-A3B gate+up", 1536, 2048),
    ("Qwen3-30B-A3B down", 2048, 768),
];
/// Experts per layer.
const EXPERTS: usize = 64;
/// Contiguous calls: (experts with rows, rows each).
const CONTIGUOUS: [(usize, usize); 4] = [(4, 2048), (8, 512), (8, 1024), (8, 4096)];
/// Masked calls: (experts with rows, rows each).
const MASKED: [(usize, usize); 5] = [(8, 16), (16, 8), (32, 4), (64, 1), (64, 16)];
const WARMUP: usize = 3;
const SAMPLES: usize = 21;
/// The HBM rate the masked "% of 4.3 TB/s" column is against, bytes per microsecond.
const HBM: f64 = 4.3e6;

/// One contiguous (prefill) point.
struct Contiguous {
    shape: &'static str,
    experts: usize,
    rows: usize,
    us: f64,
    /// The dense Hopper kernel on the same total rows.
    dense: f64,
    /// cuBLASLt block-scaled on the same total rows (the same-run yardstick).
    cublas: f64,
    /// The first expert's rows against the dense kernel's.
    diff: f64,
    /// The call's multiply-adds times two.
    flops: f64,
}

/// One masked (decode) point of one kernel.
struct Masked {
    shape: &'static str,
    kernel: &'static str,
    experts: usize,
    rows: usize,
    /// `forward` with the counts in host memory (uploaded by the call).
    host: f64,
    /// `forward_masked_on_device`: the counts already in device memory (what a captured
    /// decode step runs).
    device: f64,
    /// Reading the E experts' weights once.
    read_once: f64,
    /// The experts' weight bytes.
    bytes: f64,
}

/// The points of one run.
#[derive(Default)]
struct Points {
    contiguous: Vec<Contiguous>,
    masked: Vec<Masked>,
}

/// A grouped call's routing: in host memory (`forward`) or masked counts in device memory
/// (`forward_masked_on_device`).
#[derive(Clone, Copy)]
enum Call<'a> {
    Host(&'a Routing<'a>),
    Device(&'a DeviceMasked),
}

/// Times one call of `call`'s form on the grouped layer: `[rows_in, k]` of `x` into `out`.
fn time_grouped(
    (gpu, timer, flush): (&Gpu, &EventTimer, &Flush),
    layer: &mut GroupedLinear,
    (x, out): (&DeviceBuffer<bf16>, &mut DeviceBuffer<bf16>),
    call: Call<'_>,
    (rows_in, n, k): (usize, usize, usize),
) -> Result<f64, String> {
    flushed_median(gpu, timer, flush, (WARMUP, SAMPLES), || {
        let (x, mut y) = (x.tensor([rows_in, k]), out.tensor_mut([rows_in, n]));
        match call {
            Call::Host(routing) => layer.forward(&x, routing, None, &mut y),
            Call::Device(routing) => layer.forward_masked_on_device(&x, routing, &mut y),
        }
        .map_err(|e| e.to_string())
    })
}

/// The points of one shape; failures are printed and counted.
fn shape_points(
    (gpu, timer, flush, read_once): (&Arc<Gpu>, &EventTimer, &Flush, &ReadOnce),
    (name, n, k): (&'static str, usize, usize),
    points: &mut Points,
) -> Result<(), String> {
    let target = Target::from_gpu(gpu.clone());
    let cfg = LayerConfig::block_128(n, k, DType::Bf16, DType::Bf16);
    let codes = random_codes(EXPERTS * n * k);
    let per = n.div_ceil(128) * k.div_ceil(128);
    let scales = random_scales(EXPERTS * per);
    let stacked = LayerWeights::new(
        Tensor::fp8(&codes, [EXPERTS * n, k]),
        Tensor::f32(&scales, [EXPERTS * n.div_ceil(128), k.div_ceil(128)]),
    );
    let weights = GroupedWeights::new(EXPERTS, stacked);
    let entry = &HopperGroupedFp8::ENTRY;
    let options = KernelOptions::none();
    let mut grouped = GroupedLinear::with_entry(entry, &target, &cfg, &weights, &options)
        .map_err(|e| format!("grouped layer: {e}"))?;
    let expert0 = weights.expert(0).map_err(|e| e.to_string())?;
    let dense_entry = &HopperBlockFp8::ENTRY;
    let mut dense = Linear::with_entry(dense_entry, &target, &cfg, &expert0, &options)
        .map_err(|e| format!("dense layer: {e}"))?;
    let mut cublas =
        Linear::with_entry(&CublasLtBlockFp8::ENTRY, &target, &cfg, &expert0, &options)
            .map_err(|e| format!("cuBLASLt layer: {e}"))?;
    // Marlin's sm_80 code (what an A100 runs), forced on this GPU.
    let sm80 = KernelOptions::none().compile_for(Capability::new(8, 0));
    let marlin_entry = &MarlinGroupedFp8::ENTRY;
    let mut marlin = GroupedLinear::with_entry(marlin_entry, &target, &cfg, &weights, &sm80)
        .map_err(|e| format!("Marlin grouped layer: {e}"))?;
    drop(codes);

    // Input rows: E x R contiguous, EXPERTS x R masked (every expert's slab).
    let contiguous = CONTIGUOUS.iter().map(|&(e, r)| e * r);
    let masked = MASKED.iter().map(|&(_, r)| EXPERTS * r);
    let max_rows = contiguous.chain(masked).max().unwrap_or(1);
    let mut rng = rand::rng();
    let xh: Vec<bf16> = (0..max_rows * k)
        .map(|_| bf16::from_f32(rng.random_range(-1.0..1.0)))
        .collect();
    let x = DeviceBuffer::from_host(gpu, &xh).map_err(|e| e.to_string())?;
    let mut out = DeviceBuffer::<bf16>::zeros(gpu, max_rows * n).map_err(|e| e.to_string())?;
    let mut dense_out =
        DeviceBuffer::<bf16>::zeros(gpu, max_rows * n).map_err(|e| e.to_string())?;
    let io = (gpu.as_ref(), timer, flush);

    let masked_only = std::env::var("FP8_BENCH_MASKED").is_ok_and(|v| v == "1");
    let prefill = if masked_only {
        &[][..]
    } else {
        &CONTIGUOUS[..]
    };
    for &(e, r) in prefill {
        let m = e * r;
        let mut offsets = vec![m; EXPERTS + 1];
        for (i, o) in offsets.iter_mut().enumerate().take(e + 1) {
            *o = i * r;
        }
        let routing = Routing::Offsets(&offsets);
        let us = time_grouped(
            io,
            &mut grouped,
            (&x, &mut out),
            Call::Host(&routing),
            (m, n, k),
        )?;
        let mut dense_us = |layer: &mut Linear| {
            flushed_median(gpu, timer, flush, (WARMUP, SAMPLES), || {
                layer
                    .forward(&x.tensor([m, k]), &mut dense_out.tensor_mut([m, n]))
                    .map_err(|e| e.to_string())
            })
        };
        let lt = dense_us(&mut cublas)?;
        // The dense kernel last, so `dense_out` holds its rows for the check.
        let base = dense_us(&mut dense)?;
        gpu.synchronize().map_err(|e| e.to_string())?;
        let g = out.to_host().map_err(|e| e.to_string())?;
        let d = dense_out.to_host().map_err(|e| e.to_string())?;
        let diff = rel_diff(&g[..r * n], &d[..r * n]);
        println!(
            "{name} contiguous {e} x {r}: {us:.1} us, dense {base:.1} us, cuBLASLt {lt:.1} us, \
             diff {diff:.1e}"
        );
        points.contiguous.push(Contiguous {
            shape: name,
            experts: e,
            rows: r,
            us,
            dense: base,
            cublas: lt,
            diff,
            flops: 2.0 * (m * n * k) as f64,
        });
    }
    let mut counts_dev = DeviceBuffer::<u8>::zeros(gpu, 4 * EXPERTS).map_err(|e| e.to_string())?;
    for (e, r) in MASKED {
        let mut counts = vec![0; EXPERTS];
        counts[..e].iter_mut().for_each(|c| *c = r);
        let routing = Routing::Masked(&counts);
        let as_i32: Vec<u8> = counts
            .iter()
            .flat_map(|&c| (c as i32).to_ne_bytes())
            .collect();
        counts_dev.upload(&as_i32).map_err(|e| e.to_string())?;
        let on_device = DeviceMasked {
            counts: counts_dev.memory(),
            route_weights: None,
            expected_rows: r,
        };
        let rows_in = EXPERTS * r;
        let touched = DeviceBuffer::<u8>::zeros(gpu, e * n * k).map_err(|e| e.to_string())?;
        let (read_once, _) = read_once.floor_us(gpu, timer, flush, &touched, (2, 9))?;
        drop(touched);
        for (kernel, layer) in [("Hopper", &mut grouped), ("Marlin", &mut marlin)] {
            let shape = (rows_in, n, k);
            let host = time_grouped(io, layer, (&x, &mut out), Call::Host(&routing), shape)?;
            let device = time_grouped(io, layer, (&x, &mut out), Call::Device(&on_device), shape)?;
            println!(
                "{name} masked {e} x {r}, {kernel}: {host:.1} us (host counts), {device:.1} us \
                 (device counts), read-once of {e} experts {read_once:.1} us"
            );
            points.masked.push(Masked {
                shape: name,
                kernel,
                experts: e,
                rows: r,
                host,
                device,
                read_once,
                bytes: (e * n * k) as f64,
            });
        }
    }
    Ok(())
}

fn main() {
    let Some(base) = hopper_or_skip("the MoE bench") else {
        return;
    };
    let gpu = base.fork_stream().expect("stream");
    let quick = std::env::var("FP8_BENCH_QUICK").is_ok_and(|v| v == "1");
    let shapes = if quick { &SHAPES[2..] } else { &SHAPES[..] };
    let timer = EventTimer::new(&gpu).expect("events");
    let flush = Flush::new(&gpu);
    let read_once = ReadOnce::new(&gpu);
    let mut points = Points::default();
    let mut failures = 0;
    for &shape in shapes {
        if let Err(e) = shape_points((&gpu, &timer, &flush, &read_once), shape, &mut points) {
            println!("{} {}x{}: FAILED: {e}", shape.0, shape.1, shape.2);
            failures += 1;
        }
    }
    println!();
    println!("== summary");
    summary(&points);
    if failures > 0 {
        eprintln!("{failures} failures");
        std::process::exit(1);
    }
}

/// Prints the points as Markdown tables.
fn summary(points: &Points) {
    println!(
        "contiguous (prefill): grouped against the dense Hopper kernel and cuBLASLt \
         block-scaled on the same rows"
    );
    println!(
        "| shape | experts x rows | grouped us | TFLOP/s | dense us | grouped / dense | \
         cuBLASLt us | grouped / cuBLASLt | diff |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for p in &points.contiguous {
        println!(
            "| {} | {} x {} | {:.1} | {:.0} | {:.1} | {:.2} | {:.1} | {:.2} | {:.1e} |",
            p.shape,
            p.experts,
            p.rows,
            p.us,
            p.flops / p.us / 1e6,
            p.dense,
            p.us / p.dense,
            p.cublas,
            p.us / p.cublas,
            p.diff
        );
    }
    for (kernel, title) in [
        ("Hopper", "Hopper grouped"),
        ("Marlin", "Marlin grouped (W8A16, sm_80 code)"),
    ] {
        println!();
        println!(
            "masked (decode), {title}: counts in host memory (uploaded by the call) and in \
             device memory, against reading the experts' weights once"
        );
        println!(
            "| shape | experts x rows | host counts us | device counts us | read-once us | \
             host / read-once | device / read-once | device % of 4.3 TB/s |"
        );
        println!("|---|---|---|---|---|---|---|---|");
        for p in points.masked.iter().filter(|p| p.kernel == kernel) {
            println!(
                "| {} | {} x {} | {:.1} | {:.1} | {:.1} | {:.2} | {:.2} | {:.0} % |",
                p.shape,
                p.experts,
                p.rows,
                p.host,
                p.device,
                p.read_once,
                p.host / p.read_once,
                p.device / p.read_once,
                100.0 * p.bytes / HBM / p.device
            );
        }
    }
}
