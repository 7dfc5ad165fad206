//! Decode (M = 1, 4, 8, 16) block-FP8 against the practical floor: `DecodeBlockFp8` (our
//! one-launch decode kernel, built alone and so run at every M here; in a layer's plan it
//! serves M = 1 where the Hopper kernel does not take the layer), cuBLASLt block-scaled and
//! our Hopper kernel (the plan's kernel at M = 1..=64), beside the
//! read-once kernel (reads the N x K FP8 weight once with 16-byte loads on every SM; the
//! best of its variants and grid shapes), all timed the same way in one run: CUDA events around one
//! `apply` (activation quantization included), a 256 MiB read evicting L2 before every
//! timed call, median of the samples. Each GEMM also runs as the replay of a CUDA graph
//! holding one `apply` (the `-g` columns; the flush stays outside the graph). The six
//! DeepSeek-V3 layers plus 4096 x 4096 and 14336 x 4096, bf16 in and out, 128 x 128 blocks.
//! Checks Hopper's and Decode's outputs against cuBLASLt's on every point (the larger
//! relative Frobenius difference).
//!
//! `FP8_DECODE_SWEEP=1` adds Decode with its K splits capped at 1, 2, 4, 8 and 16 (the
//! split planner's inputs); `FP8_DECODE_HOPPER_SWEEP=1` the Hopper kernel with its tile width
//! fixed at 32, 64, 128 and 144 columns and with K splits capped at 1. Prints "skipped" and
//! exits 0 without an sm_90 GPU.
//!
//! `cargo bench -p fp8-linear --bench decode` (`FP8_BENCH_QUICK=1`: 2 shapes;
//! `FP8_BENCH_CSV=path`: also append every point to that CSV, see `common/csv.rs`: kernel
//! `ReadOnce` at m = 0 for the floor, `<label>-g` for graph replays)

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use common::csv::CsvSink;
use common::{
    capture, flushed_median, hopper_or_skip, random_codes, random_scales, rel_diff, weights_for,
    Flush, ReadOnce,
};
use fp8_linear::cuda::runtime::{DeviceBuffer, EventTimer, Gpu};
use fp8_linear::cuda::{CublasLtBlockFp8, DecodeBlockFp8, HopperBlockFp8};
use fp8_linear::{DType, Fp8Kernel, KernelEntry, KernelOptions, LayerConfig, Registered, Target};
use half::bf16;
use rand::Rng;

const MS: [usize; 4] = [1, 4, 8, 16];
const SHAPES: [(usize, usize); 8] = [
    (4096, 4096),
    (7168, 2048),
    (2112, 7168),
    (4096, 7168),
    (24576, 1536),
    (14336, 4096),
    (7168, 16384),
    (18432, 7168),
];
const WARMUP: usize = 3;
const SAMPLES: usize = 31;
/// The HBM rate the "% of 4.3 TB/s" column is against, bytes per microsecond.
const HBM: f64 = 4.3e6;

/// (label, kernel, the build options' `max_splits` and `tile_cols`)
type Kernel = (&'static str, &'static KernelEntry, Option<u16>, Option<u16>);
const KERNELS: [Kernel; 3] = [
    ("Decode", &DecodeBlockFp8::ENTRY, None, None),
    ("LtBlk", &CublasLtBlockFp8::ENTRY, None, None),
    ("Hopper", &HopperBlockFp8::ENTRY, None, None),
];
const SWEEP: [Kernel; 5] = [
    ("Dec-s1", &DecodeBlockFp8::ENTRY, Some(1), None),
    ("Dec-s2", &DecodeBlockFp8::ENTRY, Some(2), None),
    ("Dec-s4", &DecodeBlockFp8::ENTRY, Some(4), None),
    ("Dec-s8", &DecodeBlockFp8::ENTRY, Some(8), None),
    ("Dec-s16", &DecodeBlockFp8::ENTRY, Some(16), None),
];
/// The Hopper kernel with its tile width fixed (the K splits still its cost model's), and
/// with K splits capped at 1 (its cost model's tiles, unsplit).
const HOPPER_SWEEP: [Kernel; 5] = [
    ("Hop-w32", &HopperBlockFp8::ENTRY, None, Some(32)),
    ("Hop-w64", &HopperBlockFp8::ENTRY, None, Some(64)),
    ("Hop-w128", &HopperBlockFp8::ENTRY, None, Some(128)),
    ("Hop-w144", &HopperBlockFp8::ENTRY, None, Some(144)),
    ("Hop-s1", &HopperBlockFp8::ENTRY, Some(1), None),
];

/// Plain and graph-replay median microseconds of `kernel.apply` at every M of [`MS`], and
/// the outputs of the plain calls.
#[allow(clippy::type_complexity)]
fn time_kernel(
    gpu: &Arc<Gpu>,
    timer: &EventTimer,
    flush: &Flush,
    kernel: &mut dyn Fp8Kernel,
    x: &DeviceBuffer<bf16>,
    out: &mut DeviceBuffer<bf16>,
    (n, k): (usize, usize),
) -> Result<Vec<(usize, f64, f64, Vec<bf16>)>, String> {
    kernel.prepare(16).map_err(|e| format!("prepare: {e}"))?;
    let mut rows = Vec::new();
    for m in MS {
        let plain = flushed_median(gpu, timer, flush, (WARMUP, SAMPLES), || {
            kernel
                .apply(&x.tensor([m, k]), &mut out.tensor_mut([m, n]))
                .map_err(|e| e.to_string())
        })?;
        gpu.synchronize().map_err(|e| e.to_string())?;
        let host = out.to_host().map_err(|e| e.to_string())?[..m * n].to_vec();
        let graph = capture(gpu.stream(), || {
            kernel
                .apply(&x.tensor([m, k]), &mut out.tensor_mut([m, n]))
                .map_err(|e| format!("apply while capturing: {e}"))
        })?;
        let replay = flushed_median(gpu, timer, flush, (WARMUP, SAMPLES), || {
            graph.launch().map_err(|e| format!("graph launch: {e:?}"))
        })?;
        gpu.synchronize().map_err(|e| e.to_string())?;
        rows.push((m, plain, replay, host));
    }
    Ok(rows)
}

fn main() {
    let Some(base) = hopper_or_skip("the decode bench") else {
        return;
    };
    // A stream of our own: the legacy default stream cannot be captured.
    let gpu = base.fork_stream().expect("stream");
    let quick = std::env::var("FP8_BENCH_QUICK").is_ok_and(|v| v == "1");
    let sweep = std::env::var("FP8_DECODE_SWEEP").is_ok_and(|v| v == "1");
    let hopper_sweep = std::env::var("FP8_DECODE_HOPPER_SWEEP").is_ok_and(|v| v == "1");
    let shapes = if quick { &SHAPES[..2] } else { &SHAPES[..] };
    let timer = EventTimer::new(&gpu).expect("events");
    let flush = Flush::new(&gpu);
    let read_once = ReadOnce::new(&gpu);
    let target = Target::from_gpu(gpu.clone());
    let mut kernels: Vec<Kernel> = KERNELS.to_vec();
    if sweep {
        kernels.extend(SWEEP);
    }
    if hopper_sweep {
        kernels.extend(HOPPER_SWEEP);
    }
    // (label, n, k, m) -> (plain us, graph us); (n, k) -> floor us; (n, k, m) -> diff.
    let mut us: BTreeMap<(&str, usize, usize, usize), (f64, f64)> = BTreeMap::new();
    let mut floor: BTreeMap<(usize, usize), f64> = BTreeMap::new();
    let mut diff: BTreeMap<(usize, usize, usize), f64> = BTreeMap::new();
    let mut failures = 0;
    let mut rng = rand::rng();
    for &(n, k) in shapes {
        let codes = random_codes(n * k);
        let scales = random_scales(n.div_ceil(128) * k.div_ceil(128));
        let xh: Vec<bf16> = (0..16 * k)
            .map(|_| bf16::from_f32(rng.random_range(-1.0..1.0)))
            .collect();
        let x = DeviceBuffer::from_host(&gpu, &xh).expect("upload x");
        let wbuf = DeviceBuffer::from_host(&gpu, &codes).expect("upload weight bytes");
        match read_once.floor_us(&gpu, &timer, &flush, &wbuf, (2, 15)) {
            Ok((t, (u, per_sm, threads))) => {
                let how = if u == 108 {
                    "8 loads in flight, a contiguous chunk per block".to_string()
                } else {
                    format!("{u} loads in flight, grid-stride")
                };
                println!("read-once {n}x{k}: {t:.1} us ({how}, {per_sm} blocks/SM x {threads})");
                floor.insert((n, k), t);
            }
            Err(e) => {
                println!("read-once {n}x{k}: FAILED: {e}");
                failures += 1;
            }
        }
        drop(wbuf);
        let cfg = LayerConfig::block_128(n, k, DType::Bf16, DType::Bf16);
        let weights = weights_for(&cfg, &codes, &scales, &[]);
        let mut outs: BTreeMap<(&str, usize), Vec<bf16>> = BTreeMap::new();
        for &(label, entry, max_splits, tile_cols) in &kernels {
            let options = KernelOptions {
                max_splits,
                tile_cols,
                ..KernelOptions::none()
            };
            let ctx = target.build_ctx(&cfg, &options);
            // Built alone, the decode kernel runs every M up to 16.
            let mut kernel = match common::loaded(entry.build(&ctx), &weights) {
                Ok(kr) => kr,
                Err(e) => {
                    println!("{label} {n}x{k}: not run: {e}");
                    continue;
                }
            };
            let mut out = DeviceBuffer::<bf16>::zeros(&gpu, 16 * n).expect("alloc out");
            match time_kernel(&gpu, &timer, &flush, kernel.as_mut(), &x, &mut out, (n, k)) {
                Ok(rows) => {
                    for (m, plain, graph, host) in rows {
                        println!("{label} {n}x{k} M={m}: {plain:.1} us, graph {graph:.1} us");
                        us.insert((label, n, k, m), (plain, graph));
                        outs.insert((label, m), host);
                    }
                }
                Err(e) => {
                    println!("{label} {n}x{k}: FAILED: {e}");
                    failures += 1;
                }
            }
        }
        // The larger of Hopper's and Decode's differences from cuBLASLt's output.
        for m in MS {
            let Some(lt) = outs.get(&("LtBlk", m)) else {
                continue;
            };
            for label in ["Hopper", "Decode"] {
                if let Some(a) = outs.get(&(label, m)) {
                    let d = diff.entry((n, k, m)).or_insert(0.0);
                    *d = d.max(rel_diff(a, lt));
                }
            }
        }
    }

    let mut csv = CsvSink::from_env("decode", &gpu.device().name);
    for (&(n, k), &t) in &floor {
        csv.row("ReadOnce", (n, k, 0), t);
    }
    for (&(label, n, k, m), &(plain, graph)) in &us {
        csv.row(label, (n, k, m), plain);
        csv.row(&format!("{label}-g"), (n, k, m), graph);
    }
    println!();
    println!(
        "== summary (us per call; -g: CUDA graph replay of one apply; Hopper: the plan's kernel)"
    );
    println!(
        "| N x K | M | read-once us | Hopper us | / read-once | % of 4.3 TB/s | LtBlk us | \
         LtBlk / Hopper | Decode us | Hopper-g us | / read-once | LtBlk-g / Hopper-g | \
         diff vs LtBlk |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    let get = |l: &str, n, k, m| us.get(&(l, n, k, m)).copied();
    for &(n, k) in shapes {
        let fl = floor.get(&(n, k)).copied().unwrap_or(f64::NAN);
        let ideal = (n * k) as f64 / HBM;
        for m in MS {
            let nan = (f64::NAN, f64::NAN);
            let d = get("Decode", n, k, m).unwrap_or(nan);
            let lt = get("LtBlk", n, k, m).unwrap_or(nan);
            let hp = get("Hopper", n, k, m).unwrap_or(nan);
            let df = diff.get(&(n, k, m)).copied().unwrap_or(f64::NAN);
            println!(
                "| {n}x{k} | {m} | {fl:.1} | {:.1} | {:.2} | {:.0} % | {:.1} | {:.2} | {:.1} | \
                 {:.1} | {:.2} | {:.2} | {df:.1e} |",
                hp.0,
                hp.0 / fl,
                100.0 * ideal / hp.0,
                lt.0,
                lt.0 / hp.0,
                d.0,
                hp.1,
                hp.1 / fl,
                lt.1 / hp.1,
            );
        }
    }
    // A sweep's variants beside the kernel they vary, one table.
    let sweep_table = |variants: &[Kernel], base: &str| {
        println!();
        let labels: Vec<&str> = variants.iter().map(|v| v.0).collect();
        println!("| N x K | M | {} | {base} |", labels.join(" | "));
        println!("|---|---|{}---|", "---|".repeat(labels.len()));
        for &(n, k) in shapes {
            for m in MS {
                let cells: Vec<String> = labels
                    .iter()
                    .chain([&base])
                    .map(|l| get(l, n, k, m).map_or("-".into(), |v| format!("{:.1}", v.0)))
                    .collect();
                println!("| {n}x{k} | {m} | {} |", cells.join(" | "));
            }
        }
    };
    if hopper_sweep {
        sweep_table(&HOPPER_SWEEP, "Hopper");
    }
    if sweep {
        sweep_table(&SWEEP, "Decode");
    }
    if failures > 0 {
        eprintln!("{failures} failures");
        std::process::exit(1);
    }
}
