//! Marlin FP8 W8A16 on the GPU against a bf16 cuBLASLt GEMM on the dequantized weights and
//! the FP8 block-scaled kernels (cuBLASLt block-scaled, portable mma.sync), in one run, with
//! the weight-bandwidth floor (N*K bytes over the measured device copy bandwidth) and the
//! read-once kernel (the N*K FP8 weight read once with 16-byte loads on every SM, timed and
//! flushed the same way: the practical floor) beside.
//! CUDA-event timing of each launch with the L2 cache flushed before it (a 256 MiB read),
//! medians; a compact summary table at the end.
//!
//! `cargo bench -p fp8-linear --bench marlin` (on a GPU host: see scripts/gpu-bundle.sh;
//! `FP8_BENCH_CSV=path`: also append every point's median to that CSV, see `common/csv.rs`).
//! Prints "skipped: no CUDA device" and exits 0 without a GPU.

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::csv::CsvSink;
use common::{random_codes, Flush, ReadOnce};
use criterion::{BenchmarkId, Criterion, Throughput};
use fp8_linear::cuda::interop::cudarc;
use fp8_linear::cuda::marlin::plan::MarlinPipeline;
use fp8_linear::cuda::runtime::{DeviceBuffer, EventTimer, Gpu};
use fp8_linear::cuda::{CublasLtBlockFp8, MarlinFp8, PortableBlockFp8};
use fp8_linear::fp8::e4m3_to_f32;
use fp8_linear::{
    DType, Fp8Kernel, KernelEntry, KernelOptions, LayerConfig, LayerWeights, Registered, Target,
    Tensor,
};
use half::bf16;
use rand::Rng;

use cudarc::cublaslt::{CudaBlasLT, Matmul, MatmulConfig};
use cudarc::driver::CudaSlice;

const MS: [usize; 7] = [1, 4, 16, 32, 64, 128, 256];
const SHAPES: [(usize, usize); 4] = [(4096, 4096), (4096, 7168), (7168, 16384), (18432, 7168)];

/// Per-launch device times in microseconds, by (shape, M, kernel).
type Times = BTreeMap<((usize, usize), usize, &'static str), Vec<f64>>;
static TIMES: Mutex<Times> = Mutex::new(BTreeMap::new());
/// Read-once microseconds by shape.
static READ_ONCE: Mutex<BTreeMap<(usize, usize), f64>> = Mutex::new(BTreeMap::new());

/// Times `iters` launches, each after an L2 flush, with CUDA events around the launch alone.
fn timed(
    gpu: &Arc<Gpu>,
    flush: &Flush,
    key: ((usize, usize), usize, &'static str),
    iters: u64,
    mut launch: impl FnMut(),
) -> Duration {
    let timer = EventTimer::new(gpu).expect("events");
    let mut total = 0f64;
    let mut times = Vec::with_capacity(iters as usize);
    for _ in 0..iters {
        flush.run(gpu).expect("L2 flush");
        timer.start(gpu.stream()).unwrap();
        launch();
        let ms = timer.stop(gpu.stream()).unwrap() as f64;
        total += ms;
        times.push(ms * 1e3);
    }
    TIMES.lock().unwrap().entry(key).or_default().extend(times);
    Duration::from_secs_f64(total / 1e3)
}

/// Device-to-device copy bandwidth (bytes read + written per second), median of 5.
fn copy_bandwidth(gpu: &Arc<Gpu>) -> f64 {
    let bytes = 1usize << 30;
    let src = DeviceBuffer::<u8>::zeros(gpu, bytes).unwrap();
    let dst = DeviceBuffer::<u8>::zeros(gpu, bytes).unwrap();
    let timer = EventTimer::new(gpu).unwrap();
    let mut v = Vec::new();
    for _ in 0..6 {
        timer.start(gpu.stream()).unwrap();
        // SAFETY: both buffers hold `bytes` bytes on this GPU; ordered on its stream.
        unsafe {
            cudarc::driver::result::memcpy_dtod_async(
                dst.ptr(),
                src.ptr(),
                bytes,
                gpu.stream().cu_stream(),
            )
        }
        .unwrap();
        v.push(timer.stop(gpu.stream()).unwrap() as f64 * 1e-3);
    }
    v.remove(0);
    v.sort_by(f64::total_cmp);
    2.0 * bytes as f64 / v[v.len() / 2]
}

fn bench(c: &mut Criterion, gpu: &Arc<Gpu>) {
    let (target, options) = (Target::from_gpu(gpu.clone()), KernelOptions::none());
    let mut rng = rand::rng();
    let flush = Flush::new(gpu);
    let blas = CudaBlasLT::new(gpu.stream().clone()).expect("cuBLASLt");
    let read_once = ReadOnce::new(gpu);
    let timer = EventTimer::new(gpu).expect("events");
    let mut g = c.benchmark_group("marlin-w8a16");
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(30))
        .measurement_time(Duration::from_millis(150));
    for (n, k) in SHAPES {
        let cfg = LayerConfig::block_128(n, k, DType::Bf16, DType::Bf16);
        let ctx = target.build_ctx(&cfg, &options);
        let codes = random_codes(n * k);
        let wbuf = DeviceBuffer::from_host(gpu, &codes).expect("upload weight bytes");
        match read_once.floor_us(gpu, &timer, &flush, &wbuf, (2, 15)) {
            Ok((t, how)) => {
                println!("read-once {n}x{k}: {t:.1} us (kernel, blocks/SM, threads: {how:?})");
                READ_ONCE.lock().unwrap().insert((n, k), t);
            }
            Err(e) => println!("read-once {n}x{k}: FAILED: {e}"),
        }
        drop(wbuf);
        let (nb, kb) = (n.div_ceil(128), k.div_ceil(128));
        let scales: Vec<f32> = (0..nb * kb)
            .map(|_| 2f32.powi(rng.random_range(-4..=4)) * rng.random_range(0.5f32..1.0) / 448.0)
            .collect();
        let weights = LayerWeights {
            weight: Tensor::fp8(&codes, [n, k]),
            weight_scale: Tensor::f32(&scales, [nb, kb]),
            input_scale: None,
            input_scale_ub: None,
            bias: None,
        };
        let mut marlin = MarlinFp8::new(&ctx, MarlinFp8::LAYER_PARAMS).unwrap();
        marlin.process_weights(&weights).unwrap();
        // The FP8 W8A8 kernels this GPU can run for this layer.
        let mut fp8: Vec<(&'static str, Box<dyn Fp8Kernel>)> = Vec::new();
        for e in [&CublasLtBlockFp8::ENTRY, &PortableBlockFp8::ENTRY] as [&'static KernelEntry; 2] {
            if e.arch.matches(Some(gpu.capability())) && (e.can_implement)(&cfg).is_ok() {
                match common::loaded(e.build(&ctx), &weights) {
                    Ok(kern) => fp8.push((e.name, kern)),
                    Err(err) => println!("{} skipped for N={n} K={k}: {err}", e.name),
                }
            }
        }
        // bf16 weights for cuBLASLt: the same dequantized values.
        let wdq: Vec<bf16> = codes
            .iter()
            .enumerate()
            .map(|(i, &b)| {
                bf16::from_f32(e4m3_to_f32(b) * scales[(i / k / 128) * kb + (i % k) / 128])
            })
            .collect();
        let w16: CudaSlice<bf16> = gpu.stream().clone_htod(&wdq).unwrap();
        drop(wdq);
        for m in MS {
            g.throughput(Throughput::Elements((2 * m * n * k) as u64));
            let id = format!("M{m}xN{n}xK{k}");
            let x: Vec<bf16> = (0..m * k)
                .map(|_| bf16::from_f32(rng.random_range(-1.0f32..1.0)))
                .collect();
            let xd = DeviceBuffer::from_host(gpu, &x).unwrap();
            let mut out = DeviceBuffer::<bf16>::zeros(gpu, m * n).unwrap();
            let x16: CudaSlice<bf16> = gpu.stream().clone_htod(&x).unwrap();
            let mut o16: CudaSlice<bf16> = gpu.stream().alloc_zeros(m * n).unwrap();
            let key = |name| ((n, k), m, name);

            g.bench_function(BenchmarkId::new("MarlinFp8", &id), |b| {
                b.iter_custom(|iters| {
                    timed(gpu, &flush, key("MarlinFp8"), iters, || {
                        marlin
                            .apply(&xd.tensor([m, k]), &mut out.tensor_mut([m, n]))
                            .unwrap()
                    })
                })
            });
            g.bench_function(BenchmarkId::new("cublaslt-bf16", &id), |b| {
                b.iter_custom(|iters| {
                    timed(gpu, &flush, key("cublaslt-bf16"), iters, || {
                        let cfg = MatmulConfig {
                            transa: true,
                            transb: false,
                            transc: false,
                            m: n as u64,
                            n: m as u64,
                            k: k as u64,
                            alpha: 1.0,
                            lda: k as i64,
                            ldb: k as i64,
                            beta: 0.0,
                            ldc: n as i64,
                            stride_a: None,
                            stride_b: None,
                            stride_c: None,
                            stride_bias: None,
                            batch_size: None,
                        };
                        // SAFETY: w16 is [n, k], x16 [m, k], o16 [m, n] (row-major), as the
                        // column-major TN product D[n, m] = W^T' X reads and writes them.
                        unsafe { blas.matmul(cfg, &w16, &x16, &mut o16, None, None) }.unwrap();
                    })
                })
            });
            for (name, kern) in fp8.iter_mut() {
                let name: &'static str = name;
                if let Err(err) = kern.apply(&xd.tensor([m, k]), &mut out.tensor_mut([m, n])) {
                    println!("{name} skipped for M={m} N={n} K={k}: {err}");
                    continue;
                }
                g.bench_function(BenchmarkId::new(name, &id), |b| {
                    b.iter_custom(|iters| {
                        timed(gpu, &flush, key(name), iters, || {
                            kern.apply(&xd.tensor([m, k]), &mut out.tensor_mut([m, n]))
                                .unwrap()
                        })
                    })
                });
            }
        }
    }
    g.finish();
}

/// The non-negative integer in environment variable `name`, if set (a panic naming the
/// variable when it is not one).
fn env_index(name: &str) -> Option<usize> {
    let v = std::env::var(name).ok()?;
    Some(
        v.parse()
            .unwrap_or_else(|_| panic!("{name}={v}: not a non-negative integer")),
    )
}

/// `MARLIN_PROFILE="m,n,k;m,n,k"`: Marlin launches per shape and nothing else, each after an
/// L2 flush and followed by a synchronization, for a profiler (`ncu -k regex:marlin_w8a16
/// ...`) or kernel sources with stamps; `MARLIN_PROFILE_REPS=n`: n launches per shape (2
/// unless given; many keep the clocks up for the later ones); `MARLIN_PROFILE_TUNING=i`:
/// under `MarlinPipeline::SWEEP[i]` instead of the default tuning.
fn profile_launches(gpu: &Arc<Gpu>, spec: &str) {
    let (target, options) = (Target::from_gpu(gpu.clone()), KernelOptions::none());
    let flush = Flush::new(gpu);
    let reps = env_index("MARLIN_PROFILE_REPS").unwrap_or(2);
    for part in spec.split(';').filter(|p| !p.trim().is_empty()) {
        let v: Vec<usize> = part
            .split(',')
            .map(|x| x.trim().parse().expect("m,n,k"))
            .collect();
        let (m, n, k) = (v[0], v[1], v[2]);
        let cfg = LayerConfig::block_128(n, k, DType::Bf16, DType::Bf16);
        let ctx = target.build_ctx(&cfg, &options);
        let codes = random_codes(n * k);
        let scales = vec![1.0f32 / 448.0; n.div_ceil(128) * k.div_ceil(128)];
        let weights = LayerWeights {
            weight: Tensor::fp8(&codes, [n, k]),
            weight_scale: Tensor::f32(&scales, [n.div_ceil(128), k.div_ceil(128)]),
            input_scale: None,
            input_scale_ub: None,
            bias: None,
        };
        let mut marlin = MarlinFp8::new(&ctx, MarlinFp8::LAYER_PARAMS).unwrap();
        if let Some(i) = env_index("MARLIN_PROFILE_TUNING") {
            let tuning = MarlinPipeline::SWEEP.get(i).unwrap_or_else(|| {
                panic!(
                    "MARLIN_PROFILE_TUNING={i}: the sweep has tunings 0..{}",
                    MarlinPipeline::SWEEP.len()
                )
            });
            marlin.set_tuning(*tuning).unwrap();
        }
        marlin.process_weights(&weights).unwrap();
        let x: Vec<bf16> = (0..m * k)
            .map(|i| bf16::from_f32((i % 7) as f32 - 3.0))
            .collect();
        let xd = DeviceBuffer::from_host(gpu, &x).unwrap();
        let mut out = DeviceBuffer::<bf16>::zeros(gpu, m * n).unwrap();
        for _ in 0..reps {
            flush.run(gpu).expect("L2 flush");
            marlin
                .apply(&xd.tensor([m, k]), &mut out.tensor_mut([m, n]))
                .unwrap();
            gpu.synchronize().unwrap();
        }
        println!("profiled M={m} N={n} K={k} ({reps} launches)");
    }
}

/// `MARLIN_SWEEP=1`: Marlin under several tunings (ring depth, blocks per SM), median
/// of 20 flushed launches each, one table.
fn sweep(gpu: &Arc<Gpu>) {
    let (target, options) = (Target::from_gpu(gpu.clone()), KernelOptions::none());
    let tunings = MarlinPipeline::SWEEP;
    let flush = Flush::new(gpu);
    let timer = EventTimer::new(gpu).unwrap();
    println!("sweep: median us per call; tunings {tunings:?}");
    for (n, k) in [(4096, 4096), (4096, 7168), (7168, 16384), (18432, 7168)] {
        let cfg = LayerConfig::block_128(n, k, DType::Bf16, DType::Bf16);
        let ctx = target.build_ctx(&cfg, &options);
        let codes = random_codes(n * k);
        let scales = vec![1.0f32 / 448.0; n.div_ceil(128) * k.div_ceil(128)];
        let weights = LayerWeights {
            weight: Tensor::fp8(&codes, [n, k]),
            weight_scale: Tensor::f32(&scales, [n.div_ceil(128), k.div_ceil(128)]),
            input_scale: None,
            input_scale_ub: None,
            bias: None,
        };
        let mut rows: BTreeMap<usize, Vec<f64>> = BTreeMap::new();
        for t in &tunings {
            let mut marlin = MarlinFp8::new(&ctx, MarlinFp8::LAYER_PARAMS).unwrap();
            marlin.set_tuning(*t).unwrap();
            marlin.process_weights(&weights).unwrap();
            for m in [1, 16, 32, 64, 128] {
                let x: Vec<bf16> = (0..m * k)
                    .map(|i| bf16::from_f32((i % 7) as f32 - 3.0))
                    .collect();
                let xd = DeviceBuffer::from_host(gpu, &x).unwrap();
                let mut out = DeviceBuffer::<bf16>::zeros(gpu, m * n).unwrap();
                let mut v = Vec::new();
                for i in 0..25 {
                    flush.run(gpu).expect("L2 flush");
                    timer.start(gpu.stream()).unwrap();
                    marlin
                        .apply(&xd.tensor([m, k]), &mut out.tensor_mut([m, n]))
                        .unwrap();
                    let us = timer.stop(gpu.stream()).unwrap() as f64 * 1e3;
                    if i >= 5 {
                        v.push(us);
                    }
                }
                rows.entry(m).or_default().push(median(&v));
            }
        }
        for (m, v) in rows {
            let cells: Vec<String> = v.iter().map(|x| format!("{x:7.1}")).collect();
            println!("{n:>5}x{k:<5} M={m:<3} {}", cells.join(" "));
        }
    }
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s[s.len() / 2]
}

fn summary(bw: f64, gpu: &Gpu) {
    let t = TIMES.lock().unwrap();
    let ro = READ_ONCE.lock().unwrap();
    let mut csv = CsvSink::from_env("marlin", &gpu.device().name);
    for (&(n, k), &us) in ro.iter() {
        csv.row("ReadOnce", (n, k, 0), us);
    }
    for (&((n, k), m, name), v) in t.iter() {
        if !v.is_empty() {
            csv.row(name, (n, k, m), median(v));
        }
    }
    println!();
    println!(
        "Marlin FP8 W8A16 on {} (sm_{}{}), bf16 in/out, 128x128 block scales; copy bandwidth {:.2} TB/s; \
         median device time per call, L2 flushed before each",
        gpu.device().name,
        gpu.capability().major,
        gpu.capability().minor,
        bw / 1e12
    );
    println!(
        "{:>4} {:>12} | {:>8} {:>8} {:>8} {:>7} {:>7} | {:>9} {:>7} | {:>9} {:>9} | {:>8} {:>8}",
        "M",
        "N x K",
        "floor us",
        "read-1x",
        "marlin",
        "%floor",
        "/ read",
        "bf16 Lt",
        "x bf16",
        "Lt block",
        "portable",
        "TF/s mrl",
        "TF/s bf16"
    );
    for (n, k) in SHAPES {
        let floor = (n * k) as f64 / bw * 1e6;
        for m in MS {
            let get = |name| t.get(&((n, k), m, name)).map(|v| median(v));
            let mar = get("MarlinFp8");
            let b16 = get("cublaslt-bf16");
            let fmt = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}"));
            let tf = |v: Option<f64>| {
                v.map_or("-".to_string(), |v| {
                    format!("{:.1}", 2.0 * (m * n * k) as f64 / v * 1e-6)
                })
            };
            println!(
                "{:>4} {:>12} | {:>8.1} {:>8} {:>8} {:>7} {:>7} | {:>9} {:>7} | {:>9} {:>9} | {:>8} {:>8}",
                m,
                format!("{n}x{k}"),
                floor,
                fmt(ro.get(&(n, k)).copied()),
                fmt(mar),
                mar.map_or("-".into(), |v| format!("{:.0}%", floor / v * 100.0)),
                match (mar, ro.get(&(n, k))) {
                    (Some(a), Some(r)) => format!("{:.2}x", a / r),
                    _ => "-".into(),
                },
                fmt(b16),
                match (mar, b16) {
                    (Some(a), Some(b)) => format!("{:.2}x", b / a),
                    _ => "-".into(),
                },
                fmt(get("CublasLtBlockFp8")),
                fmt(get("PortableBlockFp8")),
                tf(mar),
                tf(b16),
            );
        }
    }
    a100_prediction(&t, gpu);
}

/// An A100 (80 GB)'s practical weight-read rate, assumed 88 % of its 2.04 TB/s peak (about
/// 1.8 TB/s, what device copies are commonly reported to reach on it). An assumption, not a
/// measurement here; this card's read-once kernel reaches 3.9 of its 4.8 TB/s (81 %).
const A100_READ: f64 = 0.88 * 2.04e12;
/// SMs of an A100.
const A100_SMS: f64 = 108.0;

/// The predicted A100 time of Marlin at M = 1 per shape: this run's M = 1 times fitted as
/// `fixed + bytes / rate` (least squares over the shapes), then on an A100 the same fixed
/// cost plus the weight at the slower of this GPU's per-SM rate times 108 SMs and
/// [`A100_READ`].
fn a100_prediction(t: &Times, gpu: &Gpu) {
    let pts: Vec<(f64, f64)> = SHAPES
        .iter()
        .filter_map(|&(n, k)| {
            t.get(&((n, k), 1, "MarlinFp8"))
                .map(|v| ((n * k) as f64, median(v)))
        })
        .collect();
    if pts.len() < 2 {
        return;
    }
    let c = pts.len() as f64;
    let (mx, my) = (
        pts.iter().map(|p| p.0).sum::<f64>() / c,
        pts.iter().map(|p| p.1).sum::<f64>() / c,
    );
    let slope = pts.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum::<f64>()
        / pts.iter().map(|p| (p.0 - mx).powi(2)).sum::<f64>();
    let fixed = my - slope * mx;
    let per_sm = 1e6 / slope / f64::from(gpu.device().sm_count);
    let a100_rate = (per_sm * A100_SMS).min(A100_READ);
    println!(
        "\nA100 prediction (M = 1): fit here fixed {fixed:.1} us + bytes at {:.2} TB/s \
         ({:.1} GB/s per SM); A100: {:.2} TB/s (min of 108 SMs at that rate and {:.2} TB/s)",
        1e-6 / slope,
        per_sm * 1e-9,
        a100_rate * 1e-12,
        A100_READ * 1e-12
    );
    for (bytes, us) in pts {
        println!(
            "  {:>6.1} MB: here {us:.1} us; A100 predicted {:.1} us (read floor at 2.04 TB/s {:.1} us)",
            bytes / 1e6,
            fixed + bytes / a100_rate * 1e6,
            bytes / 2.04e12 * 1e6
        );
    }
}

fn main() {
    let gpu = match fp8_linear::cuda::runtime::probe::nvrtc().and_then(|_| Gpu::open(0)) {
        Ok(g) => g,
        Err(e) => {
            println!("skipped: no CUDA device ({e})");
            return;
        }
    };
    if std::env::var("MARLIN_SWEEP").is_ok() {
        sweep(&gpu);
        return;
    }
    if let Ok(spec) = std::env::var("MARLIN_PROFILE") {
        profile_launches(&gpu, &spec);
        return;
    }
    let bw = copy_bandwidth(&gpu);
    let mut c = Criterion::default().configure_from_args();
    bench(&mut c, &gpu);
    c.final_summary();
    summary(bw, &gpu);
}
