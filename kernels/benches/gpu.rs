//! GPU benchmarks with CUDA-event timing (L2 flushed before every timed launch): every CUDA
//! kernel of the block-scaled and scaled tables that can run on this GPU (forcible kernels
//! included) on M in {1, 16, 64, 128, 512, 4096} x (N, K) of DeepSeek-V3-style layers, in
//! TFLOP/s and as a ratio to cuBLASLt block-scaled in the same run (the activation
//! quantization has its own bench, `quant`); last, the GPU's `mma.sync`
//! ceilings (f16 and FP8: the bound of the portable kernel). Prints "skipped: no CUDA
//! device" and exits 0 without a GPU. A compact summary table is printed before the ceilings.
//!
//! `cargo bench -p fp8-linear --bench gpu` (`FP8_BENCH_QUICK=1` for a 3-shape subset;
//! `FP8_BENCH_CSV=path`: also append every point to that CSV, see `common/csv.rs`)

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput};
use fp8_linear::cuda::runtime::{DeviceBuffer, EventTimer, Gpu};
use fp8_linear::tables::{CUDA_BLOCK, CUDA_SCALED};
use fp8_linear::{DType, Fp8Kernel, KernelEntry, KernelOptions, LayerConfig, Target};
use half::bf16;
use rand::Rng;

mod common;
use common::csv::CsvSink;
use common::mma_peak::MmaPeak;
use common::{median, random_codes, random_scales, runs_on, weights_for};

const MS: [usize; 6] = [1, 16, 64, 128, 512, 4096];
const SHAPES: [(usize, usize); 6] = common::DEEPSEEK_SHAPES;
const FLUSH_BYTES: usize = 64 << 20;

/// Per (kernel, shape, M): median microseconds.
type Results = BTreeMap<(String, usize, usize, usize), f64>;

struct Bench {
    gpu: Arc<Gpu>,
    timer: EventTimer,
    flush: DeviceBuffer<u8>,
}

impl Bench {
    /// Times `f` once per iteration with events, flushing L2 before each; returns the total
    /// and pushes each sample (ms) into `samples`.
    fn time(&mut self, iters: u64, samples: &RefCell<Vec<f64>>, mut f: impl FnMut()) -> Duration {
        let stream = self.gpu.stream().clone();
        let mut total = 0f64;
        for _ in 0..iters {
            self.flush.fill_bytes(0).expect("flush");
            self.timer.start(&stream).expect("event");
            f();
            let ms = self.timer.stop(&stream).expect("event") as f64;
            samples.borrow_mut().push(ms);
            total += ms;
        }
        Duration::from_secs_f64(total / 1e3)
    }
}

/// The kernels to time for a shape: (label, entry, config), cuBLASLt block first.
fn candidates(gpu: &Gpu, n: usize, k: usize) -> Vec<(&'static KernelEntry, LayerConfig)> {
    let cap = gpu.capability();
    let runs = |e: &KernelEntry| runs_on(e, cap);
    let mut out: Vec<(&'static KernelEntry, LayerConfig)> = Vec::new();
    let block = LayerConfig::block_128(n, k, DType::Bf16, DType::Bf16);
    for e in CUDA_BLOCK.entries {
        if runs(e) && (e.can_implement)(&block).is_ok() {
            out.push((e, block));
        }
    }
    let scaled = [
        LayerConfig::per_tensor_static(n, k, DType::Bf16, DType::Bf16),
        LayerConfig::per_token_per_channel(n, k, DType::Bf16, DType::Bf16),
    ];
    for e in CUDA_SCALED.entries {
        if !runs(e) || out.iter().any(|(o, _)| o.name == e.name) {
            continue;
        }
        if let Some(cfg) = scaled.iter().find(|c| (e.can_implement)(c).is_ok()) {
            out.push((e, *cfg));
        }
    }
    out
}

fn bench_gemms(
    c: &mut Criterion,
    bench: &mut Bench,
    shapes: &[(usize, usize)],
    results: &mut Results,
) {
    let gpu = bench.gpu.clone();
    let target = Target::from_gpu(gpu.clone());
    let options = KernelOptions::none();
    let max_m = *MS.iter().max().unwrap();
    let mut rng = rand::rng();
    for &(n, k) in shapes {
        let codes = random_codes(n * k);
        let scales = random_scales(n.max(n.div_ceil(128) * k.div_ceil(128)));
        let one = [0.01f32];
        let xh: Vec<bf16> = (0..max_m * k)
            .map(|_| bf16::from_f32(rng.random_range(-1.0..1.0)))
            .collect();
        let x = DeviceBuffer::from_host(&gpu, &xh).expect("upload x");
        let mut out = DeviceBuffer::<bf16>::zeros(&gpu, max_m * n).expect("alloc out");
        let mut g = c.benchmark_group(format!("gemm-N{n}-K{k}"));
        g.sample_size(10)
            .warm_up_time(Duration::from_millis(20))
            .measurement_time(Duration::from_millis(100));
        for (entry, cfg) in candidates(&gpu, n, k) {
            let ctx = target.build_ctx(&cfg, &options);
            let mut kernel: Box<dyn Fp8Kernel> = match entry.build(&ctx).and_then(|mut kr| {
                kr.process_weights(&weights_for(&cfg, &codes, &scales, &one))?;
                Ok(kr)
            }) {
                Ok(kr) => kr,
                Err(e) => {
                    println!("{} N={n} K={k}: not run: {e}", entry.name);
                    continue;
                }
            };
            for m in MS {
                let flops = 2 * m * n * k;
                g.throughput(Throughput::Elements(flops as u64));
                let xt = x.tensor([m, k]);
                let samples = RefCell::new(Vec::new());
                let mut failed = None;
                g.bench_function(BenchmarkId::new(entry.name, format!("M{m}")), |b| {
                    b.iter_custom(|iters| {
                        bench.time(iters, &samples, || {
                            if let Err(e) = kernel.apply(&xt, &mut out.tensor_mut([m, n])) {
                                failed = Some(e);
                            }
                        })
                    })
                });
                if let Some(e) = failed {
                    println!("{} M={m} N={n} K={k}: failed: {e}", entry.name);
                    continue;
                }
                let med = median(&mut samples.borrow_mut());
                results.insert((entry.name.to_string(), n, k, m), med * 1e3);
            }
        }
        g.finish();
    }
}

fn print_summary(gpu: &Gpu, results: &Results, shapes: &[(usize, usize)]) {
    let names: Vec<String> = {
        let mut v: Vec<String> = results.keys().map(|k| k.0.clone()).collect();
        v.sort();
        v.dedup();
        // cuBLASLt block first (the yardstick)
        v.sort_by_key(|n| if n == "CublasLtBlockFp8" { 0 } else { 1 });
        v
    };
    println!("\n== summary: {} ==", gpu.device());
    println!(
        "TFLOP/s (median, CUDA events, L2 flushed); x = ratio to CublasLtBlockFp8 in this run"
    );
    let short = |n: &str| {
        n.replace("CublasLt", "Lt")
            .replace("BlockFp8", "Blk")
            .replace("Fp8", "")
    };
    let mut header = format!("{:>5} {:>11}", "M", "NxK");
    for n in &names {
        header += &format!(" | {:>15}", short(n));
    }
    println!("{header}");
    for &(n, k) in shapes {
        for m in MS {
            let base = results
                .get(&("CublasLtBlockFp8".to_string(), n, k, m))
                .copied();
            let mut line = format!("{m:>5} {:>11}", format!("{n}x{k}"));
            for name in &names {
                match results.get(&(name.clone(), n, k, m)) {
                    Some(&us) => {
                        let tf = 2.0 * (m * n * k) as f64 / us / 1e6;
                        let ratio = base.map(|b| format!("{:.2}x", b / us)).unwrap_or_default();
                        line += &format!(" | {tf:>7.1} {ratio:>7}");
                    }
                    None => line += &format!(" | {:>15}", "-"),
                }
            }
            println!("{line}");
        }
    }
}

fn main() {
    let Some(gpu) = common::gpu_or_skip() else {
        return;
    };
    let mut c = Criterion::default().configure_from_args();
    let mut bench = Bench {
        timer: EventTimer::new(&gpu).expect("events"),
        flush: DeviceBuffer::zeros(&gpu, FLUSH_BYTES).expect("flush buffer"),
        gpu: gpu.clone(),
    };
    let quick = std::env::var("FP8_BENCH_QUICK").is_ok_and(|v| v == "1");
    let shapes: Vec<(usize, usize)> = if quick {
        SHAPES[..3].to_vec()
    } else {
        SHAPES.to_vec()
    };
    let mut results = Results::new();
    bench_gemms(&mut c, &mut bench, &shapes, &mut results);
    c.final_summary();
    let mut csv = CsvSink::from_env("gpu", &gpu.device().name);
    for ((name, n, k, m), &us) in &results {
        csv.row(name, (*n, *k, *m), us);
    }
    print_summary(&gpu, &results, &shapes);
    // The mma.sync ceilings: what the portable (and decode) kernels can reach on this GPU.
    match MmaPeak::new(&gpu).and_then(|p| p.tflops(&gpu)) {
        Ok((f16, e4m3)) => println!(
            "\nmma.sync ceilings on this GPU: f16 m16n8k16 {f16:.0} TFLOP/s; e4m3 m16n8k32 {}",
            e4m3.map_or("- (needs sm_89)".to_string(), |t| format!("{t:.0} TFLOP/s"))
        ),
        Err(e) => println!("\nmma.sync ceilings: FAILED: {e}"),
    }
}
