//! Decode (M = 1 and 16) as plain calls and as CUDA-graph replay, per kernel: how much of a
//! forward's cost at decode is launch overhead (host work and the gaps between launches)
//! that a CUDA graph removes.
//!
//! Every CUDA kernel of the built-in tables that runs on this GPU (natively, or forced
//! through its `force_arch`, as the `gpu_graph` test builds them), on each layer kind it
//! accepts of: 128x128 blocks, per-tensor static, per-token x per-channel (bf16 in and out);
//! on two DeepSeek-V3 shapes (N x K = 4096 x 7168 and 7168 x 2048, the first two of the
//! `gpu` bench), at M = 1 and 16. Each layer is built `R` times (the copies, below), each
//! copy prepared with `Linear::prepare(16)`, on a stream of its own (`Gpu::fork_stream`).
//! Three ways of running [`CALLS`] forwards back to back on that stream, each timed with a
//! pair of CUDA events around the whole batch (median of [`SAMPLES`] batches, after one
//! untimed batch; the stream is idle when each timed batch starts):
//!
//! - `plain`: `Linear::forward`, called [`CALLS`] times;
//! - `graph1`: one CUDA graph per copy, each holding one captured forward, launched
//!   (`cuGraphLaunch`) [`CALLS`] times in turn: a layer's forward replayed as a graph;
//! - `graph64`: one graph holding [`STEP`] forwards (the copies in turn), launched
//!   `CALLS / STEP` times: a decode step's worth of layers in one graph, as engines capture
//!   a whole step; its per-forward time is close to the device time alone.
//!
//! Reported: microseconds per forward, and `plain / graph` (above 1: the graph is faster).
//!
//! L2: cold weights by default, as in the `gpu` bench (which flushes L2 before each single
//! timed call). Here nothing is flushed inside the timed batch (that would put the flush
//! between the launches being measured); instead the calls cycle through `R` copies of the
//! layer whose weights together are at least twice the GPU's L2 size, so each forward
//! reads its weights from device memory, as each layer of a decode step does.
//! `FP8_GRAPH_L2=hot` builds one copy instead: its weights stay in L2 from call to call,
//! which makes the device time shorter and the launch overhead a larger share.
//!
//! Without a usable CUDA device it prints a `SKIPPED` line and exits 0 (exit 1 instead when
//! `FP8_REQUIRE_CUDA=1`). A forward, capture or launch that fails is printed with the kernel,
//! layer, shape and M, and makes the exit status 1 once the table is printed; no timing is
//! asserted. About 20-30 s on an H200.
//!
//! Kernel knobs come from the environment (`KernelOptions::from_env`, e.g.
//! `FP8_LINEAR_OVERLAP=0` for the Hopper GEMM launched after its quantization instead of
//! overlapped with it), so two runs compare them.
//!
//! `cargo bench -p fp8-linear --bench graph` (`FP8_BENCH_QUICK=1`: the first shape only)

use std::sync::Arc;
use std::time::Instant;

use fp8_linear::cuda::interop::cudarc::driver::sys;

use fp8_linear::cuda::runtime::{self, DeviceBuffer, EventTimer, Gpu};
use fp8_linear::{DType, KernelEntry, KernelOptions, LayerConfig, Linear, Platform, Target};
use half::bf16;
use rand::Rng;

mod common;
use common::{capture, median, random_codes, random_scales, runs_on, weights_for};

/// The decode row counts.
const MS: [usize; 2] = [1, 16];
/// (N, K): DeepSeek-V3 layers, the first two shapes of the `gpu` bench.
const SHAPES: [(usize, usize); 2] = [(4096, 7168), (7168, 2048)];
/// Forwards per timed batch.
const CALLS: usize = 256;
/// Timed batches per point (the median is reported), after one untimed batch.
const SAMPLES: usize = 9;
/// Forwards captured into the one graph of the `graph64` column; divides [`CALLS`].
const STEP: usize = 64;
/// The most copies of a layer built for the cold-L2 rotation.
const MAX_COPIES: usize = 16;
/// The L2 size assumed when the device does not report one (an H100 / H200's).
const DEFAULT_L2_BYTES: usize = 50 << 20;
/// The static input scale of the per-tensor static layers (activations are in [-1, 1)).
const INPUT_SCALE: [f32; 1] = [0.01];

/// One measured point, in microseconds per forward.
struct Row {
    kernel: &'static str,
    kind: &'static str,
    n: usize,
    k: usize,
    m: usize,
    plain: f64,
    graph1: f64,
    step: f64,
}

/// The layer kinds of the issue, bf16 in and out (names as in the `gpu_graph` test).
fn layer_kinds(n: usize, k: usize) -> [(&'static str, LayerConfig); 3] {
    let d = DType::Bf16;
    [
        ("block 128x128", LayerConfig::block_128(n, k, d, d)),
        (
            "per-tensor static",
            LayerConfig::per_tensor_static(n, k, d, d),
        ),
        (
            "per-token x per-channel",
            LayerConfig::per_token_per_channel(n, k, d, d),
        ),
    ]
}

/// Every CUDA entry of the built-in tables that runs on `gpu` (natively or forced), each
/// kernel once, in table order (the same list as the `gpu_graph` test's).
fn runnable_entries(gpu: &Gpu) -> Vec<&'static KernelEntry> {
    let cap = gpu.capability();
    let mut v: Vec<&'static KernelEntry> = Vec::new();
    for t in fp8_linear::tables::BUILTIN.tables() {
        if t.platform != Platform::Cuda {
            continue;
        }
        for e in t.kernels() {
            if runs_on(e, cap) && !v.iter().any(|x| x.name == e.name) {
                v.push(e);
            }
        }
    }
    v
}

/// The GPU's L2 size in bytes (the default when the device does not say).
fn l2_bytes(gpu: &Gpu) -> usize {
    match gpu
        .context()
        .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)
    {
        Ok(b) if b > 0 => b as usize,
        _ => DEFAULT_L2_BYTES,
    }
}

/// How many copies of an `n x k` layer to cycle through: enough for twice the L2 in FP8
/// weights (at most [`MAX_COPIES`]) with cold L2, one with hot L2.
fn copies_for(n: usize, k: usize, l2: usize, hot: bool) -> usize {
    if hot {
        1
    } else {
        (2 * l2).div_ceil(n * k).clamp(1, MAX_COPIES)
    }
}

/// Runs `batch` (which enqueues `forwards` forwards on `gpu`'s stream) once untimed, then
/// [`SAMPLES`] times between a pair of CUDA events; returns the median microseconds per
/// forward. The stream is idle when each timed batch starts, so a batch whose launches take
/// the host longer than the device takes to run them is timed at the host's pace.
fn per_forward_us(
    gpu: &Gpu,
    timer: &EventTimer,
    forwards: usize,
    mut batch: impl FnMut() -> Result<(), String>,
) -> Result<f64, String> {
    let stream = gpu.stream();
    batch()?;
    gpu.synchronize().map_err(|e| e.to_string())?;
    let mut us = Vec::with_capacity(SAMPLES);
    for _ in 0..SAMPLES {
        timer.start(stream).map_err(|e| e.to_string())?;
        batch()?;
        let ms = timer.stop(stream).map_err(|e| e.to_string())?;
        us.push(f64::from(ms) * 1e3 / forwards as f64);
    }
    Ok(median(&mut us))
}

/// The three timings of `layers` (the copies of one layer, prepared) at `m` rows, reading
/// `x` (at least `[m, K]` bf16) and writing `y` (at least `[m, N]` bf16).
fn measure(
    gpu: &Gpu,
    timer: &EventTimer,
    layers: &mut [Linear],
    x: &DeviceBuffer<bf16>,
    y: &mut DeviceBuffer<bf16>,
    m: usize,
) -> Result<(f64, f64, f64), String> {
    let cfg = *layers[0].config();
    let (n, k, r) = (cfg.n, cfg.k, layers.len());
    let xt = x.tensor([m, k]);
    let plain = per_forward_us(gpu, timer, CALLS, || {
        for i in 0..CALLS {
            layers[i % r]
                .forward(&xt, &mut y.tensor_mut([m, n]))
                .map_err(|e| format!("plain forward: {e}"))?;
        }
        Ok(())
    })?;
    let mut singles = Vec::with_capacity(r);
    for layer in layers.iter_mut() {
        singles.push(
            capture(gpu.stream(), || {
                layer
                    .forward(&xt, &mut y.tensor_mut([m, n]))
                    .map_err(|e| format!("forward while capturing: {e}"))
            })
            .map_err(|e| format!("graph of one forward: {e}"))?,
        );
    }
    let graph1 = per_forward_us(gpu, timer, CALLS, || {
        for i in 0..CALLS {
            singles[i % r]
                .launch()
                .map_err(|e| format!("launching a graph of one forward: {e:?}"))?;
        }
        Ok(())
    })?;
    let step = capture(gpu.stream(), || {
        for i in 0..STEP {
            layers[i % r]
                .forward(&xt, &mut y.tensor_mut([m, n]))
                .map_err(|e| format!("forward {i} while capturing: {e}"))?;
        }
        Ok(())
    })
    .map_err(|e| format!("graph of {STEP} forwards: {e}"))?;
    let step_us = per_forward_us(gpu, timer, CALLS, || {
        for _ in 0..CALLS / STEP {
            step.launch()
                .map_err(|e| format!("launching the graph of {STEP} forwards: {e:?}"))?;
        }
        Ok(())
    })?;
    gpu.synchronize().map_err(|e| e.to_string())?;
    Ok((plain, graph1, step_us))
}

/// The outcome of a run: its rows, layers no kernel build accepted, and failures.
#[derive(Default)]
struct Outcome {
    rows: Vec<Row>,
    not_run: Vec<String>,
    failures: Vec<String>,
}

/// Builds `copies` copies of each (kernel, layer kind) that fits an `n x k` layer, prepared
/// for the largest M, and measures them at every M of [`MS`].
fn bench_shape(
    gpu: &Arc<Gpu>,
    timer: &EventTimer,
    entries: &[&'static KernelEntry],
    (n, k): (usize, usize),
    copies: usize,
    out: &mut Outcome,
) {
    let target = Target::from_gpu(gpu.clone());
    let knobs = KernelOptions::from_env().expect("kernel knobs in the environment");
    let max_m = *MS.iter().max().expect("MS is not empty");
    let codes = random_codes(n * k);
    let scales = random_scales(n.max(n.div_ceil(128) * k.div_ceil(128)));
    let mut rng = rand::rng();
    let xh: Vec<bf16> = (0..max_m * k)
        .map(|_| bf16::from_f32(rng.random_range(-1.0..1.0)))
        .collect();
    let (x, mut y) = match DeviceBuffer::from_host(gpu, &xh)
        .and_then(|x| Ok((x, DeviceBuffer::<bf16>::zeros(gpu, max_m * n)?)))
    {
        Ok(b) => b,
        Err(e) => {
            out.failures
                .push(format!("{n}x{k}: allocating the activations: {e}"));
            return;
        }
    };
    for &entry in entries {
        for (kind, cfg) in layer_kinds(n, k) {
            if (entry.can_implement)(&cfg).is_err() {
                continue;
            }
            let what = format!("{} ({kind}) N={n} K={k}", entry.name);
            let t0 = Instant::now();
            let weights = weights_for(&cfg, &codes, &scales, &INPUT_SCALE);
            let built: Result<Vec<Linear>, _> = (0..copies)
                .map(|_| Linear::with_entry(entry, &target, &cfg, &weights, &knobs))
                .collect();
            let mut layers = match built {
                Ok(l) => l,
                Err(e) => {
                    println!("{what}: not run: build: {e}");
                    out.not_run.push(format!("{what}: {e}"));
                    continue;
                }
            };
            if let Err(e) = layers.iter_mut().try_for_each(|l| l.prepare(max_m)) {
                println!("{what}: FAILED: prepare({max_m}): {e}");
                out.failures.push(format!("{what}: prepare({max_m}): {e}"));
                continue;
            }
            eprintln!(
                "{what}: {copies} cop{} built and prepared in {:.2} s",
                if copies == 1 { "y" } else { "ies" },
                t0.elapsed().as_secs_f64()
            );
            for m in MS {
                match measure(gpu, timer, &mut layers, &x, &mut y, m) {
                    Ok((plain, graph1, step)) => out.rows.push(Row {
                        kernel: entry.name,
                        kind,
                        n,
                        k,
                        m,
                        plain,
                        graph1,
                        step,
                    }),
                    Err(e) => {
                        println!("{what} M={m}: FAILED: {e}");
                        out.failures.push(format!("{what} M={m}: {e}"));
                        // Leave no capture open and no work queued for the next point.
                        let _ = gpu.synchronize();
                    }
                }
            }
            // The layers' buffers are freed on the stream: let their work finish first.
            let _ = gpu.synchronize();
        }
    }
}

/// The summary table, after the header that says how it was measured.
fn print_summary(gpu: &Gpu, hot: bool, l2: usize, shapes: &[(usize, usize)], out: &Outcome) {
    println!("\n== summary: {} ==", gpu.device());
    println!(
        "us per forward: median of {SAMPLES} batches of {CALLS} back-to-back forwards on the \
         layer's stream (a forked stream), CUDA events around each batch; bf16 in and out"
    );
    println!(
        "plain: Linear::forward x{CALLS}; graph1: a graph of ONE forward per layer copy, \
         cuGraphLaunch x{CALLS} back to back; graph{STEP}: one graph of {STEP} forwards, \
         launched x{}",
        CALLS / STEP
    );
    if hot {
        println!("L2: HOT (FP8_GRAPH_L2=hot): one copy per layer, its weights stay in L2");
    } else {
        let copies: Vec<String> = shapes
            .iter()
            .map(|&(n, k)| {
                let r = copies_for(n, k, l2, hot);
                format!("{r} for {n}x{k} ({} MiB)", (r * n * k) >> 20)
            })
            .collect();
        println!(
            "L2: COLD weights, no flush in the timed loop: calls cycle through copies of the \
             layer holding >= 2x the {} MiB L2 ({})",
            l2 >> 20,
            copies.join(", ")
        );
    }
    println!("plain/graph > 1: the graph is faster");
    let g_step = format!("graph{STEP}");
    println!(
        "{:<20} {:<23} {:>9} {:>3} {:>8} {:>8} {:>8} {:>13} {:>13}",
        "kernel",
        "layer",
        "NxK",
        "M",
        "plain",
        "graph1",
        g_step,
        "plain/graph1",
        format!("plain/{g_step}")
    );
    for r in &out.rows {
        println!(
            "{:<20} {:<23} {:>9} {:>3} {:>8.2} {:>8.2} {:>8.2} {:>12.2}x {:>12.2}x",
            r.kernel,
            r.kind,
            format!("{}x{}", r.n, r.k),
            r.m,
            r.plain,
            r.graph1,
            r.step,
            r.plain / r.graph1,
            r.plain / r.step
        );
    }
    for s in &out.not_run {
        println!("not run: {s}");
    }
    for f in &out.failures {
        println!("FAILED: {f}");
    }
}

fn main() {
    let started = Instant::now();
    let hot = match std::env::var("FP8_GRAPH_L2").as_deref() {
        Err(_) | Ok("") | Ok("cold") => false,
        Ok("hot") => true,
        Ok(other) => {
            eprintln!("FP8_GRAPH_L2 must be `hot` or `cold` (the default), not `{other}`");
            std::process::exit(2);
        }
    };
    let base = match runtime::probe::nvrtc().and_then(|_| Gpu::open(0)) {
        Ok(g) => g,
        Err(e) => {
            println!("SKIPPED graph bench: no usable CUDA device ({e})");
            if std::env::var("FP8_REQUIRE_CUDA").is_ok_and(|v| v.trim() == "1") {
                eprintln!("FP8_REQUIRE_CUDA=1: a CUDA device is required");
                std::process::exit(1);
            }
            return;
        }
    };
    // A stream of our own: the legacy default stream cannot be captured.
    let gpu = match base.fork_stream() {
        Ok(g) => g,
        Err(e) => {
            eprintln!("graph bench: cannot create a stream: {e}");
            std::process::exit(1);
        }
    };
    let timer = match EventTimer::new(&gpu) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("graph bench: cannot create the timing events: {e}");
            std::process::exit(1);
        }
    };
    let entries = runnable_entries(&gpu);
    if entries.is_empty() {
        println!(
            "SKIPPED graph bench: no CUDA kernel of the tables runs on {}",
            gpu.device()
        );
        return;
    }
    let quick = std::env::var("FP8_BENCH_QUICK").is_ok_and(|v| v == "1");
    let shapes = if quick { &SHAPES[..1] } else { &SHAPES[..] };
    let l2 = l2_bytes(&gpu);
    let mut out = Outcome::default();
    for &(n, k) in shapes {
        let copies = copies_for(n, k, l2, hot);
        bench_shape(&gpu, &timer, &entries, (n, k), copies, &mut out);
    }
    print_summary(&gpu, hot, l2, shapes, &out);
    println!("total {:.1} s", started.elapsed().as_secs_f64());
    if !out.failures.is_empty() {
        std::process::exit(1);
    }
}
