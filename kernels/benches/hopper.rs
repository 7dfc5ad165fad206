//! The Hopper wgmma block-FP8 kernel against cuBLASLt block-scaled, side by side in one run:
//! M in {1, 16, 64, 128, 256, 512, 4096} x (N, K) of
//! DeepSeek-V3-style layers, bf16 in and out, CUDA-event timing of `apply` (activation
//! quantization included), median of the samples. Before every timed call a kernel reads a
//! 256 MiB buffer: it evicts L2 without leaving dirty lines, and keeps the GPU busy while
//! `apply` is enqueued, so the events time device work alone. "Hopper-s1" is the same kernel
//! with K splitting off (`KernelOptions::max_splits(1)`); "Hopper-128", "-192" and "-256"
//! fix its tile height (`KernelOptions::tile_rows`; run from M = 128); "Hopper-c2" pairs
//! CTAs along M in clusters of two that share the weight tile (`KernelOptions::cluster(2)`).
//! "LtBlk-q" and "Hopper-q" time the GEMM alone: `apply_quantized` on activations the
//! layer's `ActivationQuantizer` made before the timing (the figure to set beside GEMM-only
//! peers such as DeepGEMM). "Plan" is what a user gets: `Linear::new`'s layer (the built-in
//! tables' plan: Hopper at M = 1..=64, cuBLASLt above on an H200)
//! timed through `forward`, with the kernel its plan ran at each M. Also checks the Hopper output against cuBLASLt's on every point
//! (relative Frobenius difference). Prints "skipped" and exits 0 without an sm_90 GPU; a
//! compact summary table comes last.
//!
//! `cargo bench -p fp8-linear --bench hopper` (`FP8_BENCH_QUICK=1`: 2 shapes;
//! `HOPPER_BENCH_M=4096,64`: only these M, e.g. to profile one point with Nsight Compute;
//! `HOPPER_BENCH_SWEEP=1`: also time the GEMM alone with every tile (rows x columns) fixed,
//! with and without K splits, printed as `sweep` lines; `HOPPER_BENCH_REVERSE=1`: build and
//! time the kernels in the reverse order, to tell a kernel's figure from its place in the run;
//! `HOPPER_BENCH_SHARED_OUT=1`: one output buffer for every layer of a shape instead of one
//! each, to tell a layer's figure from where its output lies;
//! `FP8_BENCH_CSV=path`: also append every point to that CSV, see `common/csv.rs`)

mod common;

use std::collections::BTreeMap;

use common::csv::CsvSink;
use common::{apply_median, hopper_or_skip, random_codes, rel_diff, Flush, SAMPLES};
use fp8_linear::cuda::runtime::{DeviceBuffer, EventTimer};
use fp8_linear::cuda::{CublasLtBlockFp8, HopperBlockFp8};
use fp8_linear::{
    ActivationQuantizer, DType, Fp8Kernel, KernelEntry, KernelOptions, LayerConfig, LayerWeights,
    Linear, Options, Registered, Target, Tensor, TensorMut,
};
use half::bf16;
use rand::Rng;

const MS: [usize; 7] = [1, 16, 64, 128, 256, 512, 4096];
const SHAPES: [(usize, usize); 6] = common::DEEPSEEK_SHAPES;
/// (label, kernel, the build options' `max_splits`, `tile_rows` and `cluster`)
type Bench = (
    &'static str,
    &'static KernelEntry,
    Option<u16>,
    Option<u16>,
    Option<u16>,
);
const KERNELS: [Bench; 7] = [
    ("LtBlk", &CublasLtBlockFp8::ENTRY, None, None, None),
    ("Hopper", &HopperBlockFp8::ENTRY, None, None, None),
    ("Hopper-s1", &HopperBlockFp8::ENTRY, Some(1), None, None),
    ("Hopper-c2", &HopperBlockFp8::ENTRY, None, None, Some(2)),
    ("Hopper-128", &HopperBlockFp8::ENTRY, None, Some(128), None),
    ("Hopper-192", &HopperBlockFp8::ENTRY, None, Some(192), None),
    ("Hopper-256", &HopperBlockFp8::ENTRY, None, Some(256), None),
];
fn main() {
    let Some(gpu) = hopper_or_skip("the Hopper bench") else {
        return;
    };
    let quick = std::env::var("FP8_BENCH_QUICK").is_ok_and(|v| v == "1");
    let shapes = if quick { &SHAPES[..2] } else { &SHAPES[..] };
    let timer = EventTimer::new(&gpu).expect("events");
    let flush = Flush::new(&gpu);
    let target = Target::from_gpu(gpu.clone());
    // (kernel, n, k, m) -> us; (n, k, m) -> Hopper vs cuBLASLt difference.
    let mut us: BTreeMap<(&str, usize, usize, usize), f64> = BTreeMap::new();
    let mut diff: BTreeMap<(usize, usize, usize), f64> = BTreeMap::new();
    // (n, k, m) -> the kernel the plan ran.
    let mut planned: BTreeMap<(usize, usize, usize), &'static str> = BTreeMap::new();
    let ms: Vec<usize> = match std::env::var("HOPPER_BENCH_M") {
        Ok(v) => v
            .split(',')
            .map(|m| {
                m.trim()
                    .parse()
                    .expect("HOPPER_BENCH_M: comma-separated row counts")
            })
            .collect(),
        Err(_) => MS.to_vec(),
    };
    let max_m = *ms.iter().max().expect("at least one M");
    let mut rng = rand::rng();
    for &(n, k) in shapes {
        let codes = random_codes(n * k);
        let scales: Vec<f32> = (0..n.div_ceil(128) * k.div_ceil(128))
            .map(|_| rng.random_range(0.5f32..2.0) / 448.0)
            .collect();
        let xh: Vec<bf16> = (0..max_m * k)
            .map(|_| bf16::from_f32(rng.random_range(-1.0..1.0)))
            .collect();
        let x = DeviceBuffer::from_host(&gpu, &xh).expect("upload x");
        let mut outs: BTreeMap<(&str, usize), Vec<bf16>> = BTreeMap::new();
        let cfg = LayerConfig::block_128(n, k, DType::Bf16, DType::Bf16);
        let weights = LayerWeights {
            weight: Tensor::fp8(&codes, [n, k]),
            weight_scale: Tensor::f32(&scales, [n.div_ceil(128), k.div_ceil(128)]),
            input_scale: None,
            input_scale_ub: None,
            bias: None,
        };
        // The activations of every M quantized once, before any timing.
        let mut quantizer = ActivationQuantizer::new(&target, &cfg, &weights).expect("quantizer");
        let quantized: BTreeMap<usize, Quantized> = ms
            .iter()
            .map(|&m| (m, Quantized::new(&gpu, &mut quantizer, &x, (m, k))))
            .collect();
        let mut kernels = KERNELS.to_vec();
        if std::env::var("HOPPER_BENCH_REVERSE").is_ok_and(|v| v == "1") {
            kernels.reverse();
        }
        let shared_out = std::env::var("HOPPER_BENCH_SHARED_OUT").is_ok_and(|v| v == "1");
        let alloc_out = || DeviceBuffer::<bf16>::zeros(&gpu, max_m * n).expect("alloc out");
        let mut shape_out = shared_out.then(alloc_out);
        for (label, entry, max_splits, tile_rows, cluster) in kernels {
            let options = KernelOptions {
                max_splits,
                tile_rows,
                cluster,
                ..KernelOptions::none()
            };
            let built = entry.build(&target.build_ctx(&cfg, &options));
            let mut kernel = match common::loaded(built, &weights) {
                Ok(kr) => kr,
                Err(e) => {
                    println!("{label} N={n} K={k}: not run: {e}");
                    continue;
                }
            };
            let mut own_out = (!shared_out).then(alloc_out);
            let out = match (own_out.as_mut(), shape_out.as_mut()) {
                (Some(o), _) | (None, Some(o)) => o,
                (None, None) => unreachable!("one of the two is allocated"),
            };
            for &m in &ms {
                if tile_rows.is_some() && m < 128 {
                    continue;
                }
                let r = apply_median(
                    &gpu,
                    &timer,
                    &flush,
                    kernel.as_mut(),
                    &x,
                    &mut *out,
                    (m, n, k),
                );
                match r {
                    Ok(t) => {
                        us.insert((label, n, k, m), t);
                        if label == "Hopper" || label == "LtBlk" {
                            let host = out.to_host().expect("download");
                            outs.insert((label, m), host[..m * n].to_vec());
                        }
                    }
                    Err(e) => println!("{label} M={m} N={n} K={k}: failed: {e}"),
                }
                if label == "Hopper" || label == "LtBlk" {
                    let q = &quantized[&m];
                    match gemm_median(
                        &gpu,
                        &timer,
                        &flush,
                        kernel.as_mut(),
                        q,
                        &mut *out,
                        (m, n, k),
                    ) {
                        Ok(t) => {
                            let ql = if label == "Hopper" {
                                "Hopper-q"
                            } else {
                                "LtBlk-q"
                            };
                            us.insert((ql, n, k, m), t);
                        }
                        Err(e) => println!("{label}-q M={m} N={n} K={k}: failed: {e}"),
                    }
                }
            }
        }
        // The layer a user builds: the built-in plan, each M on its kernel.
        match Linear::new(&target, &cfg, &weights, &Options::none()) {
            Ok(mut linear) => {
                let mut out = DeviceBuffer::<bf16>::zeros(&gpu, max_m * n).expect("alloc out");
                for &m in &ms {
                    let r = common::flushed_median(
                        &gpu,
                        &timer,
                        &flush,
                        (common::WARMUP, SAMPLES),
                        || {
                            linear
                                .forward(&x.tensor([m, k]), &mut out.tensor_mut([m, n]))
                                .map_err(|e| e.to_string())
                        },
                    );
                    match r {
                        Ok(t) => {
                            us.insert(("Plan", n, k, m), t);
                            if let Some(e) = linear.entry_for(m) {
                                planned.insert((n, k, m), e.name);
                            }
                        }
                        Err(e) => println!("Plan M={m} N={n} K={k}: failed: {e}"),
                    }
                }
            }
            Err(e) => println!("Plan N={n} K={k}: not built: {e}"),
        }
        for &m in &ms {
            if let (Some(h), Some(l)) = (outs.get(&("Hopper", m)), outs.get(&("LtBlk", m))) {
                diff.insert((n, k, m), rel_diff(h, l));
            }
        }
        if std::env::var("HOPPER_BENCH_SWEEP").is_ok_and(|v| v == "1") {
            sweep(
                &gpu,
                &timer,
                &flush,
                &target,
                (&cfg, &weights),
                &quantized,
                (n, k),
            );
        }
        println!("done N={n} K={k}");
    }

    let mut csv = CsvSink::from_env("hopper", &gpu.device().name);
    for (&(label, n, k, m), &t) in &us {
        csv.row(label, (n, k, m), t);
    }
    println!("\n== summary: {} ==", gpu.device());
    println!(
        "TFLOP/s of apply (quantization included; median of {SAMPLES}, CUDA events, L2 \
         evicted by a read); x = ratio to cuBLASLt block in this run; floor% = the weight \
         read at 4.3 TB/s over Hopper's time; diff = ||hopper - lt|| / ||lt||; -q = the GEMM \
         alone (apply_quantized), us; Plan = Linear::new's layer through forward, with the \
         kernel its plan ran"
    );
    println!(
        "{:>5} {:>11} | {:>7} | {:>7} {:>6} | {:>9} {:>6} | {:>9} {:>6} | {:>10} {:>6} | {:>10} {:>6} | {:>10} {:>6} | {:>6} | {:>7} | {:>8} {:>8} {:>6} | {:>7} {:>6} kernel",
        "M", "NxK", "LtBlk", "Hopper", "x", "Hopper-s1", "x", "Hopper-c2", "x", "Hopper-128",
        "x", "Hopper-192", "x", "Hopper-256", "x", "floor%", "diff", "LtBlk-q", "Hopper-q", "x",
        "Plan", "x"
    );
    for &(n, k) in shapes {
        for &m in &ms {
            let tf = |label: &str| {
                us.get(&(label, n, k, m))
                    .map(|t| 2.0 * (m * n * k) as f64 / t / 1e6)
            };
            let lt = tf("LtBlk");
            let cell = |label: &str, w: usize| match (tf(label), lt) {
                (Some(v), Some(b)) => format!("{v:>w$.1} {:>5.2}x", v / b),
                (Some(v), None) => format!("{v:>w$.1} {:>6}", "-"),
                _ => format!("{:>w$} {:>6}", "-", "-"),
            };
            // Weight-bandwidth floor: N*K bytes at 4.3 TB/s (PERFORMANCE.md's copy rate).
            let floor_us = (n * k) as f64 / 4.3e6;
            let floor = us
                .get(&("Hopper", n, k, m))
                .map(|t| format!("{:>5.0}%", 100.0 * floor_us / t))
                .unwrap_or_else(|| format!("{:>6}", "-"));
            let q = |label: &str| us.get(&(label, n, k, m)).copied();
            let gemm = match (q("LtBlk-q"), q("Hopper-q")) {
                (Some(l), Some(h)) => format!("{l:>8.1} {h:>8.1} {:>5.2}x", l / h),
                _ => format!("{:>8} {:>8} {:>6}", "-", "-", "-"),
            };
            let kernel = planned.get(&(n, k, m)).copied().unwrap_or("-");
            println!(
                "{m:>5} {:>11} | {:>7} | {} | {} | {} | {} | {} | {} | {floor} | {:>7} | {gemm} | {} {kernel}",
                format!("{n}x{k}"),
                lt.map(|v| format!("{v:.1}")).unwrap_or_else(|| "-".into()),
                cell("Hopper", 7),
                cell("Hopper-s1", 9),
                cell("Hopper-c2", 9),
                cell("Hopper-128", 10),
                cell("Hopper-192", 10),
                cell("Hopper-256", 10),
                diff.get(&(n, k, m))
                    .map(|d| format!("{d:.1e}"))
                    .unwrap_or_else(|| "-".into()),
                cell("Plan", 7),
            );
        }
    }
}

/// One M's activations as the layer's quantizer makes them: e4m3 codes `[m, k]` and f32
/// group scales `[m, ceil(k / 128)]`.
struct Quantized {
    codes: DeviceBuffer<u8>,
    scales: DeviceBuffer<f32>,
}

impl Quantized {
    fn new(
        gpu: &std::sync::Arc<fp8_linear::cuda::runtime::Gpu>,
        q: &mut ActivationQuantizer,
        x: &DeviceBuffer<bf16>,
        (m, k): (usize, usize),
    ) -> Self {
        let codes = DeviceBuffer::<u8>::zeros(gpu, m * k).expect("alloc codes");
        let mut scales = DeviceBuffer::<f32>::zeros(gpu, m * k.div_ceil(128)).expect("alloc");
        let mem = codes.memory();
        q.quantize(
            &x.tensor([m, k]),
            &mut TensorMut::device(mem, DType::F8E4m3, [m, k]),
            &mut scales.tensor_mut([m, k.div_ceil(128)]),
        )
        .expect("quantize");
        Quantized { codes, scales }
    }
}

/// The median microseconds of `kernel.apply_quantized` on `q` (the GEMM alone).
fn gemm_median(
    gpu: &fp8_linear::cuda::runtime::Gpu,
    timer: &EventTimer,
    flush: &Flush,
    kernel: &mut dyn Fp8Kernel,
    q: &Quantized,
    out: &mut DeviceBuffer<bf16>,
    (m, n, k): (usize, usize, usize),
) -> Result<f64, String> {
    common::flushed_median(gpu, timer, flush, (common::WARMUP, SAMPLES), || {
        kernel
            .apply_quantized(
                &Tensor::device(q.codes.memory(), DType::F8E4m3, [m, k]),
                &q.scales.tensor([m, k.div_ceil(128)]),
                &mut out.tensor_mut([m, n]),
            )
            .map_err(|e| e.to_string())
    })
}

/// Every tile (rows x columns) of the Hopper kernel fixed by the build options, K splits
/// capped at 1 and at 16: the GEMM alone at every M, one `sweep` line per point
/// (`sweep N K M BM BN max_splits us`).
fn sweep(
    gpu: &std::sync::Arc<fp8_linear::cuda::runtime::Gpu>,
    timer: &EventTimer,
    flush: &Flush,
    target: &Target,
    (cfg, weights): (&LayerConfig, &LayerWeights<'_>),
    quantized: &BTreeMap<usize, Quantized>,
    (n, k): (usize, usize),
) {
    const TILES: [(u16, u16); 14] = [
        (64, 16),
        (64, 32),
        (64, 64),
        (64, 96),
        (64, 112),
        (64, 128),
        (64, 144),
        (128, 64),
        (128, 96),
        (128, 112),
        (128, 128),
        (128, 144),
        (192, 128),
        (256, 128),
    ];
    let max_m = quantized.keys().copied().max().unwrap_or(1);
    let mut out = DeviceBuffer::<bf16>::zeros(gpu, max_m * n).expect("alloc out");
    for (rows, cols) in TILES {
        for cap in [1u16, 16] {
            if cap > 1 && rows > 128 {
                continue;
            }
            let options = KernelOptions::none()
                .tile_rows(rows)
                .tile_cols(cols)
                .max_splits(cap);
            let built = HopperBlockFp8::ENTRY.build(&target.build_ctx(cfg, &options));
            let mut kernel = match common::loaded(built, weights) {
                Ok(kr) => kr,
                Err(e) => {
                    println!("sweep {n} {k} - {rows} {cols} {cap} not run: {e}");
                    continue;
                }
            };
            for (&m, q) in quantized {
                if m <= 64 && rows > 64 {
                    continue;
                }
                match gemm_median(gpu, timer, flush, kernel.as_mut(), q, &mut out, (m, n, k)) {
                    Ok(t) => println!("sweep {n} {k} {m} {rows} {cols} {cap} {t:.2}"),
                    Err(e) => println!("sweep {n} {k} {m} {rows} {cols} {cap} failed: {e}"),
                }
            }
        }
    }
}
