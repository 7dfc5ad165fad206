//! GPU activation quantization (bf16 -> e4m3 codes + f32 scales, 1x128 groups, the pass
//! every block-FP8 call runs before its GEMM) at K = 2048, 7168 and 16384 and M = 1..16384,
//! beside a device-to-device copy of the same number of bytes (read + write) in the same
//! run: microseconds, GB/s (bf16 read + codes and scales written), percent of the copy, and
//! the kernel cut chosen. Median of 25 CUDA-event-timed launches after 3 untimed ones, L2
//! evicted before each by a 256 MiB read. Prints "skipped: no CUDA device" without a GPU.
//!
//! `cargo bench -p fp8-linear --bench quant` (run `quant_peer.py`, the Triton yardstick,
//! beside it on the same GPU to compare; `FP8_BENCH_CSV=path`: also append every point to
//! that CSV, see `common/csv.rs`: kernels `ActQuant` and `Copy`, n = 0).

use fp8_linear::cuda::interop::cudarc;
use fp8_linear::cuda::runtime::{DeviceBuffer, EventTimer};
use fp8_linear::cuda::testing::quant::group_cut;
use fp8_linear::cuda::{ActQuant, Grouping, ScaleOrder};
use fp8_linear::DType;
use half::bf16;
use rand::Rng;

mod common;
use common::csv::CsvSink;
use common::{flushed_median, Flush, SAMPLES, WARMUP};

const KS: [usize; 3] = [2048, 7168, 16384];
const MS: [usize; 6] = [1, 16, 128, 512, 4096, 16384];

fn main() {
    let Some(gpu) = common::gpu_or_skip() else {
        return;
    };
    let q = ActQuant::new(&gpu).expect("quant module");
    let timer = EventTimer::new(&gpu).expect("events");
    let flush = Flush::new(&gpu);
    let mut csv = CsvSink::from_env("quant", &gpu.device().name);
    println!("== summary: activation quantization on {} ==", gpu.device());
    println!("bf16 -> e4m3 + f32 scales, 1x128 groups; median of {SAMPLES}, L2 evicted");
    println!(
        "{:>6} {:>6} {:>9} {:>8} {:>9} {:>8} {:>7}  cut",
        "K", "M", "quant us", "GB/s", "copy us", "copy GB/s", "% copy"
    );
    let mut rng = rand::rng();
    for k in KS {
        for m in MS {
            let xh: Vec<bf16> = (0..m * k)
                .map(|_| bf16::from_f32(rng.random_range(-3.0..3.0)))
                .collect();
            let x = DeviceBuffer::from_host(&gpu, &xh).expect("input");
            let codes = DeviceBuffer::<u8>::zeros(&gpu, m * k).expect("codes");
            let scales = DeviceBuffer::<f32>::zeros(&gpu, m * k.div_ceil(128)).expect("scales");
            let bytes = m * k * 2 + m * k + m * k.div_ceil(128) * 4;
            let quant = flushed_median(&gpu, &timer, &flush, (WARMUP, SAMPLES), || {
                // SAFETY: buffers sized for [m, k] with K-wide code rows, on gpu's stream.
                unsafe {
                    q.groups(
                        x.ptr(),
                        DType::Bf16,
                        (m, k),
                        Grouping::G128,
                        codes.ptr(),
                        k,
                        scales.ptr(),
                        ScaleOrder::RowMajor,
                        None,
                    )
                }
                .map_err(|e| e.to_string())
            })
            .expect("quantization");
            // A plain device copy moving the same bytes (half read, half written).
            let src = DeviceBuffer::<u8>::zeros(&gpu, bytes / 2).expect("copy source");
            let dst = DeviceBuffer::<u8>::zeros(&gpu, bytes / 2).expect("copy target");
            let stream = gpu.stream().cu_stream();
            let copy = flushed_median(&gpu, &timer, &flush, (WARMUP, SAMPLES), || {
                // SAFETY: both buffers hold bytes / 2 bytes, on gpu's stream.
                unsafe {
                    cudarc::driver::result::memcpy_dtod_async(
                        dst.ptr(),
                        src.ptr(),
                        bytes / 2,
                        stream,
                    )
                }
                .map_err(|e| format!("{e:?}"))
            })
            .expect("copy");
            csv.row("ActQuant", (0, k, m), quant);
            csv.row("Copy", (0, k, m), copy);
            let gbs = |us: f64| bytes as f64 / us / 1e3;
            println!(
                "{k:>6} {m:>6} {quant:>9.2} {:>8.0} {copy:>9.2} {:>8.0} {:>6.0}%  {:?}",
                gbs(quant),
                gbs(copy),
                100.0 * copy / quant,
                group_cut(m, k, DType::Bf16)
            );
        }
    }
}
