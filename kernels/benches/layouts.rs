//! Checkpoint layouts on the GPU: the time of one layer (4096 x 7168, bf16 in and out) at
//! M = 1, 16 and 4096 for every weight-block layout the block kernels take (128x128 f32 and
//! ue8m0, 32x32 f32 and ue8m0, 64x64, 128x64, 64x128, 16x128) and every block kernel that
//! accepts it: cuBLASLt block-scaled (128x128 only), the Hopper wgmma kernel, the portable
//! mma.sync kernel, and Marlin (W8A16) compiled for sm_80 (the code an A100 runs). Each
//! point is the median of CUDA-event timed `forward` calls (activation quantization
//! included), each after a read that evicts L2; the table gives microseconds and the ratio
//! to the same kernel on 128x128 f32 blocks, so the cost of a layout is read per kernel.
//! Without a GPU it prints "skipped" and exits 0.
//!
//! `cargo bench -p fp8-linear --bench layouts`

mod common;

use std::collections::BTreeMap;

use common::{flushed_median, gpu_or_skip, random_codes, random_scales, weights_for, Flush};
use fp8_linear::cuda::runtime::{DeviceBuffer, EventTimer, Gpu};
use fp8_linear::cuda::{CublasLtBlockFp8, HopperBlockFp8, MarlinFp8, PortableBlockFp8};
use fp8_linear::fp8::round_scale_ue8m0;
use fp8_linear::{
    Capability, DType, KernelEntry, KernelOptions, LayerConfig, Linear, Registered, ScaleDtype,
    Target,
};
use half::bf16;

const N: usize = 4096;
const K: usize = 7168;
const MS: [usize; 3] = [1, 16, 4096];
/// (rows along N, cols along K, ue8m0 scales)
const LAYOUTS: [(u32, u32, bool); 8] = [
    (128, 128, false),
    (128, 128, true),
    (32, 32, true),
    (32, 32, false),
    (64, 64, false),
    (128, 64, false),
    (64, 128, false),
    (16, 128, false),
];
/// (label, kernel, compile for sm_80)
const KERNELS: [(&str, &KernelEntry, bool); 4] = [
    ("LtBlk", &CublasLtBlockFp8::ENTRY, false),
    ("Hopper", &HopperBlockFp8::ENTRY, false),
    ("Portable", &PortableBlockFp8::ENTRY, false),
    ("Marlin-sm80", &MarlinFp8::ENTRY, true),
];
const WARMUP: usize = 3;
const SAMPLES: usize = 15;

/// The layer config of a layout: R x C weight blocks, dynamic 1 x C activation groups.
fn layout_config((rows, cols, ue8m0): (u32, u32, bool)) -> LayerConfig {
    let scale_dtype = if ue8m0 {
        ScaleDtype::Ue8m0
    } else {
        ScaleDtype::F32
    };
    LayerConfig::block(N, K, (rows, cols), scale_dtype, DType::Bf16, DType::Bf16)
}

fn label((rows, cols, ue8m0): (u32, u32, bool)) -> String {
    format!("{rows}x{cols}{}", if ue8m0 { " ue8m0" } else { "" })
}

/// Median microseconds of `layer.forward` on the first `m` rows of `x`.
fn time_forward(
    gpu: &Gpu,
    timer: &EventTimer,
    flush: &Flush,
    layer: &mut Linear,
    x: &DeviceBuffer<bf16>,
    out: &mut DeviceBuffer<bf16>,
    m: usize,
) -> Result<f64, String> {
    flushed_median(gpu, timer, flush, (WARMUP, SAMPLES), || {
        layer
            .forward(&x.tensor([m, K]), &mut out.tensor_mut([m, N]))
            .map_err(|e| e.to_string())
    })
}

fn main() {
    let Some(gpu) = gpu_or_skip() else {
        return;
    };
    let target = Target::from_gpu(gpu.clone());
    let timer = EventTimer::new(&gpu).expect("events");
    let flush = Flush::new(&gpu);
    let max_m = MS[MS.len() - 1];
    let xs: Vec<bf16> = random_scales(max_m * K)
        .iter()
        .map(|v| bf16::from_f32(v * 448.0 - 1.25))
        .collect();
    let x = DeviceBuffer::from_host(&gpu, &xs).expect("upload x");
    let mut out = DeviceBuffer::<bf16>::zeros(&gpu, max_m * N).expect("alloc out");
    let codes = random_codes(N * K);
    let one = [1.0f32];
    let sm80 = KernelOptions::none().compile_for(Capability::new(8, 0));
    // (layout, kernel, M) -> us
    let mut us: BTreeMap<(usize, &str, usize), f64> = BTreeMap::new();
    for (li, layout) in LAYOUTS.iter().enumerate() {
        let cfg = layout_config(*layout);
        let [sr, sc] = cfg.weight_scale_shape();
        let mut scales = random_scales(sr * sc);
        if layout.2 {
            scales.iter_mut().for_each(|s| *s = round_scale_ue8m0(*s));
        }
        let weights = weights_for(&cfg, &codes, &scales, &one);
        for (name, entry, old) in KERNELS {
            let opts = if old { sm80 } else { KernelOptions::none() };
            let mut layer = match Linear::with_entry(entry, &target, &cfg, &weights, &opts) {
                Ok(l) => l,
                Err(e) => {
                    println!("{name} {}: not run: {e}", label(*layout));
                    continue;
                }
            };
            for m in MS {
                match time_forward(&gpu, &timer, &flush, &mut layer, &x, &mut out, m) {
                    Ok(t) => {
                        us.insert((li, name, m), t);
                    }
                    Err(e) => println!("{name} {} M={m}: failed: {e}", label(*layout)),
                }
            }
            println!("done {name} {}", label(*layout));
        }
    }

    println!("\n== summary: {} ==", gpu.device());
    println!(
        "{N}x{K} (N x K), bf16 in and out: us per forward (median of {SAMPLES}, CUDA events, \
         L2 evicted by a read, activation quantization included); x = this kernel on \
         128x128 f32 blocks over this layout (above 1: the layout is faster)"
    );
    print!("{:>13} {:>5}", "layout", "M");
    for (name, _, _) in KERNELS {
        print!(" | {name:>11} {:>5}", "x");
    }
    println!();
    for (li, layout) in LAYOUTS.iter().enumerate() {
        for m in MS {
            print!("{:>13} {m:>5}", label(*layout));
            for (name, _, _) in KERNELS {
                match (us.get(&(li, name, m)), us.get(&(0, name, m))) {
                    (Some(t), Some(base)) => print!(" | {t:>11.1} {:>4.2}x", base / t),
                    (Some(t), None) => print!(" | {t:>11.1} {:>5}", "-"),
                    _ => print!(" | {:>11} {:>5}", "-", "-"),
                }
            }
            println!();
        }
    }
}
