//! The Hopper GEMM launched overlapped with the activation quantization before it
//! (programmatic dependent launch: its launch, prologue and first round of weight loads run
//! while the quantization does) against the same kernel launched after it, in one run: M in
//! {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 4096} x the six DeepSeek-V3 layers, bf16 in and
//! out, CUDA-event timing of `apply` (median, L2 evicted by a read before every call, as in
//! the `hopper` bench). "Overlap" is `KernelOptions::overlap(true)` (the default), "Serial"
//! `overlap(false)`: their difference is what the overlap saves per call; "LtBlk" cuBLASLt
//! block-scaled after the same quantization kernel (the yardstick). Checks that Overlap and
//! Serial agree bit for bit on every point. Prints "skipped" and exits 0 without an sm_90
//! GPU; the summary table comes last.
//!
//! `cargo bench -p fp8-linear --bench overlap` (`FP8_BENCH_QUICK=1`: 2 shapes;
//! `OVERLAP_BENCH_M=16,64`: only these M)

mod common;

use std::collections::BTreeMap;

use common::{apply_median, hopper_or_skip, random_codes, Flush};
use fp8_linear::cuda::runtime::{DeviceBuffer, EventTimer};
use fp8_linear::cuda::{CublasLtBlockFp8, HopperBlockFp8};
use fp8_linear::{
    DType, KernelEntry, KernelOptions, LayerConfig, LayerWeights, Registered, Target, Tensor,
};
use half::bf16;
use rand::Rng;

const MS: [usize; 11] = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 4096];
const SHAPES: [(usize, usize); 6] = common::DEEPSEEK_SHAPES;
const LABELS: [&str; 3] = ["LtBlk", "Serial", "Overlap"];

fn options(label: &str) -> KernelOptions {
    KernelOptions::none().overlap(label == "Overlap")
}

fn entry(label: &str) -> &'static KernelEntry {
    match label {
        "LtBlk" => &CublasLtBlockFp8::ENTRY,
        _ => &HopperBlockFp8::ENTRY,
    }
}

fn main() {
    let Some(gpu) = hopper_or_skip("the overlapped-launch bench") else {
        return;
    };
    let quick = std::env::var("FP8_BENCH_QUICK").is_ok_and(|v| v == "1");
    let shapes = if quick { &SHAPES[..2] } else { &SHAPES[..] };
    let ms: Vec<usize> = match std::env::var("OVERLAP_BENCH_M") {
        Ok(v) => v
            .split(',')
            .map(|m| {
                m.trim()
                    .parse()
                    .expect("OVERLAP_BENCH_M: comma-separated row counts")
            })
            .collect(),
        Err(_) => MS.to_vec(),
    };
    let max_m = *ms.iter().max().expect("at least one M");
    let timer = EventTimer::new(&gpu).expect("events");
    let flush = Flush::new(&gpu);
    let target = Target::from_gpu(gpu.clone());
    let mut us: BTreeMap<(&str, usize, usize, usize), f64> = BTreeMap::new();
    let mut differ: BTreeMap<(usize, usize, usize), usize> = BTreeMap::new();
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
        let cfg = LayerConfig::block_128(n, k, DType::Bf16, DType::Bf16);
        let weights = LayerWeights {
            weight: Tensor::fp8(&codes, [n, k]),
            weight_scale: Tensor::f32(&scales, [n.div_ceil(128), k.div_ceil(128)]),
            input_scale: None,
            input_scale_ub: None,
            bias: None,
        };
        let mut outs: BTreeMap<(&str, usize), Vec<u16>> = BTreeMap::new();
        for label in LABELS {
            let built = entry(label).build(&target.build_ctx(&cfg, &options(label)));
            let mut kernel = match common::loaded(built, &weights) {
                Ok(kr) => kr,
                Err(e) => {
                    println!("{label} N={n} K={k}: not run: {e}");
                    continue;
                }
            };
            let mut out = DeviceBuffer::<bf16>::zeros(&gpu, max_m * n).expect("alloc out");
            for &m in &ms {
                let r = apply_median(
                    &gpu,
                    &timer,
                    &flush,
                    kernel.as_mut(),
                    &x,
                    &mut out,
                    (m, n, k),
                );
                match r {
                    Ok(t) => {
                        us.insert((label, n, k, m), t);
                        if label != "LtBlk" {
                            let host = out.to_host().expect("download");
                            outs.insert(
                                (label, m),
                                host[..m * n].iter().map(|v| v.to_bits()).collect(),
                            );
                        }
                    }
                    Err(e) => println!("{label} M={m} N={n} K={k}: failed: {e}"),
                }
            }
        }
        for &m in &ms {
            if let (Some(a), Some(b)) = (outs.get(&("Overlap", m)), outs.get(&("Serial", m))) {
                differ.insert((n, k, m), a.iter().zip(b).filter(|(x, y)| x != y).count());
            }
        }
        println!("done N={n} K={k}");
    }

    println!("\n== summary: {} ==", gpu.device());
    println!(
        "microseconds of apply (median, CUDA events, L2 evicted by a read); saved = Serial - \
         Overlap; x = Overlap against each (> 1: Overlap faster); differ = elements of \
         Overlap and Serial that differ (0 expected)"
    );
    println!(
        "{:>4} {:>11} | {:>7} {:>7} {:>7} | {:>6} | {:>6} {:>6} | {:>6}",
        "M", "NxK", "LtBlk", "Serial", "Overlap", "saved", "xLt", "xSer", "differ"
    );
    for &(n, k) in shapes {
        for &m in &ms {
            let t = |label: &str| us.get(&(label, n, k, m)).copied();
            let cell =
                |v: Option<f64>| v.map_or_else(|| format!("{:>7}", "-"), |v| format!("{v:>7.2}"));
            let ratio = |label: &str| match (t(label), t("Overlap")) {
                (Some(b), Some(f)) => format!("{:>5.2}x", b / f),
                _ => format!("{:>6}", "-"),
            };
            let saved = match (t("Serial"), t("Overlap")) {
                (Some(b), Some(f)) => format!("{:>6.2}", b - f),
                _ => format!("{:>6}", "-"),
            };
            println!(
                "{m:>4} {:>11} | {} {} {} | {saved} | {} {} | {:>6}",
                format!("{n}x{k}"),
                cell(t("LtBlk")),
                cell(t("Serial")),
                cell(t("Overlap")),
                ratio("LtBlk"),
                ratio("Serial"),
                differ
                    .get(&(n, k, m))
                    .map_or_else(|| "-".into(), |d| d.to_string()),
            );
        }
    }
}
