//! The portable mma.sync block-FP8 kernel (`PortableBlockFp8`, the sm_89 path) against
//! cuBLASLt block-scaled in one run: M in {1, 4, 16, 64, 128, 512, 4096} x (N, K) of
//! DeepSeek-V3-style layers, bf16 in and out, 128x128 weight blocks, CUDA-event timing of
//! `apply` (activation quantization included), median of the samples, L2 evicted by a
//! 256 MiB read before every timed call. "Portable" is the kernel's own choice; "P-b1" and
//! "P-b2" force one / two resident blocks per SM (`force_blocks_per_sm`). Each point's
//! output is checked against cuBLASLt's (relative Frobenius difference). The `mma.sync`
//! ceilings of the GPU come last (the portable kernel's bound).
//!
//! `PORTABLE_SWEEP=1` adds, on the first two shapes, every forced tile height (32, 64, 128
//! rows) x split-K factor (1, 2, 4, 8, 16) at M in {4, 16, 64, 128, 512}.
//!
//! `cargo bench -p fp8-linear --bench portable` (`FP8_BENCH_QUICK=1`: 2 shapes). Prints
//! "skipped" and exits 0 without an sm_89+ GPU.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use common::mma_peak::MmaPeak;
use common::{
    apply_median, gpu_or_skip, random_codes, random_scales, rel_diff, weights_for, Flush, SAMPLES,
};
use fp8_linear::cuda::runtime::{DeviceBuffer, EventTimer, Gpu};
use fp8_linear::cuda::{CublasLtBlockFp8, PortableBlockFp8};
use fp8_linear::{
    BuildCtx, DType, Fp8Kernel, KernelOptions, LayerConfig, LayerWeights, Registered, Target,
};
use half::bf16;
use rand::Rng;

const MS: [usize; 7] = [1, 4, 16, 64, 128, 512, 4096];
const SHAPES: [(usize, usize); 6] = common::DEEPSEEK_SHAPES;
const SWEEP_MS: [usize; 5] = [4, 16, 64, 128, 512];

/// The kernels of the run: (label, forced blocks per SM); `None` is cuBLASLt.
const KERNELS: [(&str, Option<Option<u32>>); 4] = [
    ("LtBlk", None),
    ("Portable", Some(None)),
    ("P-b1", Some(Some(1))),
    ("P-b2", Some(Some(2))),
];

/// The first `len` elements of `out` on the host.
fn head(out: &DeviceBuffer<bf16>, len: usize) -> Result<Vec<bf16>, String> {
    let host = out.to_host().map_err(|e| e.to_string())?;
    Ok(host[..len].to_vec())
}

fn main() {
    let Some(gpu) = gpu_or_skip() else {
        return;
    };
    let cap = gpu.capability();
    if (cap.major, cap.minor) < (8, 9) {
        println!("skipped: the portable bench needs sm_89+, this GPU is {cap}");
        return;
    }
    let quick = std::env::var("FP8_BENCH_QUICK").is_ok_and(|v| v == "1");
    let sweep = std::env::var("PORTABLE_SWEEP").is_ok_and(|v| v == "1");
    let shapes = if quick { &SHAPES[..2] } else { &SHAPES[..] };
    let timer = EventTimer::new(&gpu).expect("events");
    let flush = Flush::new(&gpu);
    let target = Target::from_gpu(gpu.clone());
    let mut us: BTreeMap<(String, usize, usize, usize), f64> = BTreeMap::new();
    let mut diff: BTreeMap<(usize, usize, usize), f64> = BTreeMap::new();
    let mut sweeps: Vec<String> = Vec::new();
    let max_m = *MS.iter().max().unwrap();
    let mut rng = rand::rng();
    for (si, &(n, k)) in shapes.iter().enumerate() {
        let codes = random_codes(n * k);
        let scales = random_scales(n.div_ceil(128) * k.div_ceil(128));
        let xh: Vec<bf16> = (0..max_m * k)
            .map(|_| bf16::from_f32(rng.random_range(-1.0..1.0)))
            .collect();
        let x = DeviceBuffer::from_host(&gpu, &xh).expect("upload x");
        let mut out = DeviceBuffer::<bf16>::zeros(&gpu, max_m * n).expect("alloc out");
        let cfg = LayerConfig::block_128(n, k, DType::Bf16, DType::Bf16);
        let weights = weights_for(&cfg, &codes, &scales, &[]);
        let options = KernelOptions::none();
        let ctx = target.build_ctx(&cfg, &options);
        let mut lt_out: BTreeMap<usize, Vec<bf16>> = BTreeMap::new();
        for (label, forced) in KERNELS {
            let built: Result<Box<dyn Fp8Kernel>, _> = match forced {
                None => CublasLtBlockFp8::ENTRY.build(&ctx),
                Some(b) => PortableBlockFp8::new(&ctx).map(|mut p| {
                    p.force_blocks_per_sm(b);
                    Box::new(p) as Box<dyn Fp8Kernel>
                }),
            };
            let mut kernel = match common::loaded(built, &weights) {
                Ok(kr) => kr,
                Err(e) => {
                    println!("{label} N={n} K={k}: not run: {e}");
                    continue;
                }
            };
            for m in MS {
                let timed = apply_median(
                    &gpu,
                    &timer,
                    &flush,
                    kernel.as_mut(),
                    &x,
                    &mut out,
                    (m, n, k),
                );
                match timed.and_then(|t| Ok((t, head(&out, m * n)?))) {
                    Ok((t, host)) => {
                        us.insert((label.to_string(), n, k, m), t);
                        if label == "LtBlk" {
                            lt_out.insert(m, host);
                        } else if label == "Portable" {
                            if let Some(l) = lt_out.get(&m) {
                                diff.insert((n, k, m), rel_diff(&host, l));
                            }
                        }
                    }
                    Err(e) => println!("{label} M={m} N={n} K={k}: failed: {e}"),
                }
            }
        }
        if sweep && si < 2 {
            sweeps.extend(sweep_shape(
                &gpu,
                &timer,
                &flush,
                &ctx,
                &weights,
                &x,
                &mut out,
                (n, k),
            ));
        }
        println!("done N={n} K={k}");
    }

    println!("\n== summary: {} ==", gpu.device());
    println!(
        "TFLOP/s of apply (quantization included; median of {SAMPLES}, CUDA events, L2 \
         evicted by a read); x = ratio to cuBLASLt block in this run; diff = ||portable - \
         lt|| / ||lt||"
    );
    let labels: Vec<&str> = KERNELS.iter().map(|k| k.0).collect();
    let mut header = format!("{:>5} {:>11}", "M", "NxK");
    for l in &labels {
        header += &format!(" | {l:>15}");
    }
    println!("{header} | {:>7}", "diff");
    for &(n, k) in shapes {
        for m in MS {
            let tf = |label: &str| {
                us.get(&(label.to_string(), n, k, m))
                    .map(|t| 2.0 * (m * n * k) as f64 / t / 1e6)
            };
            let lt = tf("LtBlk");
            let mut line = format!("{m:>5} {:>11}", format!("{n}x{k}"));
            for l in &labels {
                line += &match (tf(l), lt) {
                    (Some(v), Some(b)) => format!(" | {v:>8.1} {:>5.2}x", v / b),
                    (Some(v), None) => format!(" | {v:>8.1} {:>6}", "-"),
                    _ => format!(" | {:>15}", "-"),
                };
            }
            let d = diff
                .get(&(n, k, m))
                .map(|d| format!("{d:.1e}"))
                .unwrap_or_else(|| "-".into());
            println!("{line} | {d:>7}");
        }
    }
    if !sweeps.is_empty() {
        println!("\nsweep (us of apply; rows: tile rows x splits):");
        for s in &sweeps {
            println!("{s}");
        }
    }
    match MmaPeak::new(&gpu).and_then(|p| p.tflops(&gpu)) {
        Ok((f16, e4m3)) => println!(
            "\nmma.sync ceilings on this GPU: f16 m16n8k16 {f16:.0} TFLOP/s; e4m3 m16n8k32 {}",
            e4m3.map_or("- (needs sm_89)".to_string(), |t| format!("{t:.0} TFLOP/s"))
        ),
        Err(e) => println!("\nmma.sync ceilings: FAILED: {e}"),
    }
}

/// Every forced (tile rows, splits) at [`SWEEP_MS`] on one shape: one line per M.
#[allow(clippy::too_many_arguments)]
fn sweep_shape(
    gpu: &Arc<Gpu>,
    timer: &EventTimer,
    flush: &Flush,
    ctx: &BuildCtx<'_>,
    weights: &LayerWeights<'_>,
    x: &DeviceBuffer<bf16>,
    out: &mut DeviceBuffer<bf16>,
    (n, k): (usize, usize),
) -> Vec<String> {
    let mut p = match PortableBlockFp8::new(ctx).and_then(|mut p| {
        p.process_weights(weights)?;
        Ok(p)
    }) {
        Ok(p) => p,
        Err(e) => return vec![format!("sweep N={n} K={k}: not run: {e}")],
    };
    let mut lines = vec![format!(
        "{:>5} {:>11} | {}",
        "M",
        "NxK",
        [1u32, 2, 4]
            .iter()
            .flat_map(|mt| [1, 2, 4, 8, 16].map(|s| format!("{:>3}s{s:<2}", 32 * mt)))
            .collect::<Vec<_>>()
            .join(" ")
    )];
    for m in SWEEP_MS {
        let mut line = format!("{m:>5} {:>11} |", format!("{n}x{k}"));
        for mt in [1u32, 2, 4] {
            for s in [1usize, 2, 4, 8, 16] {
                p.force_launch(Some(mt), Some(s));
                line += &match apply_median(gpu, timer, flush, &mut p, x, out, (m, n, k)) {
                    Ok(t) => format!(" {t:>7.1}"),
                    Err(_) => format!(" {:>7}", "err"),
                };
            }
        }
        lines.push(line);
    }
    lines
}
