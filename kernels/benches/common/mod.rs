//! Helpers shared by the GPU benches (each includes this file with `mod common;`; cargo does
//! not build `benches/common/` as a bench of its own): random FP8 weights and scales, the
//! [`LayerWeights`] of a layer config, whether a CUDA kernel runs on a GPU, the median of
//! samples, the read-only L2 flush, the read-once kernel (the practical floor of a GEMM
//! that streams its weight once), CUDA-graph capture, and ([`mma_peak`]) the `mma.sync`
//! ceilings.
#![allow(dead_code)] // each bench uses a part

pub mod csv;
pub mod mma_peak;

use std::sync::Arc;

use fp8_linear::cuda::interop::cudarc::driver::{
    sys, CudaFunction, CudaGraph, CudaStream, LaunchConfig, PushKernelArg,
};
use fp8_linear::cuda::runtime::{self, DeviceBuffer, EventTimer, Gpu, ModuleSpec};
use fp8_linear::{
    Capability, Fp8Kernel, KernelEntry, KernelError, LayerConfig, LayerWeights, Tensor,
};
use half::bf16;
use rand::{Rng, RngCore};

/// The (N, K) of the six DeepSeek-V3 layers the prefill benches run (gpu, hopper, portable).
pub const DEEPSEEK_SHAPES: [(usize, usize); 6] = [
    (4096, 7168),
    (7168, 2048),
    (2112, 7168),
    (24576, 1536),
    (7168, 16384),
    (18432, 7168),
];

/// The relative Frobenius difference ||a - b|| / ||b|| of two bf16 outputs; NaN when `a`
/// holds a value that is not finite.
pub fn rel_diff(a: &[bf16], b: &[bf16]) -> f64 {
    if a.iter().any(|v| !v.is_finite()) {
        return f64::NAN;
    }
    let (mut num, mut den) = (0f64, 0f64);
    for (x, y) in a.iter().zip(b) {
        let (x, y) = (x.to_f64(), y.to_f64());
        num += (x - y) * (x - y);
        den += y * y;
    }
    (num / den.max(1e-300)).sqrt()
}

/// A built kernel with `weights` processed: the kernel ready to time, or the first error.
pub fn loaded(
    built: Result<Box<dyn Fp8Kernel>, KernelError>,
    weights: &LayerWeights<'_>,
) -> Result<Box<dyn Fp8Kernel>, KernelError> {
    let mut kernel = built?;
    kernel.process_weights(weights)?;
    Ok(kernel)
}

/// Bytes the L2 flush reads: five times the H200's 50 MiB L2.
pub const FLUSH_BYTES: usize = 256 << 20;

const FLUSH_SRC: &str = r#"
extern "C" __global__ void l2_flush_read(const uint4* p, unsigned long long n, unsigned* sink) {
    unsigned acc = 0;
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        uint4 v = p[i];
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x9e3779b9u) sink[0] = acc;  // keeps the loads; never true for a zero buffer
}
"#;

/// Evicts the weights from L2 before a timed launch by reading a 256 MiB buffer (a read,
/// not a memset: a write flush leaves L2 full of dirty lines whose write-back would be
/// charged to the next kernel). It also keeps the GPU busy while the timed launch is
/// enqueued, so the events time device work alone.
pub struct Flush {
    buf: DeviceBuffer<u8>,
    sink: DeviceBuffer<u8>,
    func: CudaFunction,
    blocks: u32,
}

impl Flush {
    /// Loads the flush kernel and allocates its buffer on `gpu`.
    pub fn new(gpu: &Arc<Gpu>) -> Self {
        let (module, _) = gpu
            .module(&ModuleSpec::new("l2_flush", FLUSH_SRC))
            .expect("flush module");
        Flush {
            buf: DeviceBuffer::zeros(gpu, FLUSH_BYTES).expect("flush buffer"),
            sink: DeviceBuffer::zeros(gpu, 4).expect("sink"),
            func: module.load_function("l2_flush_read").expect("flush kernel"),
            blocks: gpu.device().sm_count * 8,
        }
    }

    /// Enqueues the flush on `gpu`'s stream.
    pub fn run(&self, gpu: &Gpu) -> Result<(), String> {
        let (p, n, sink) = (self.buf.ptr(), (FLUSH_BYTES / 16) as u64, self.sink.ptr());
        let mut b = gpu.stream().launch_builder(&self.func);
        b.arg(&p).arg(&n).arg(&sink);
        let cfg = LaunchConfig {
            grid_dim: (self.blocks, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: p holds n 16-byte words and sink 4 bytes, both on this GPU.
        unsafe { b.launch(cfg) }
            .map(|_| ())
            .map_err(|e| format!("{e:?}"))
    }
}

/// Random FP8 e4m3 codes (the NaN patterns replaced), fast enough for 132 MB weights.
pub fn random_codes(len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    rand::rng().fill_bytes(&mut v);
    for b in &mut v {
        if *b & 0x7f == 0x7f {
            *b &= 0xfe;
        }
    }
    v
}

/// `len` random weight scales in [0.5, 2) / 448 (dequantized weights of order 1).
pub fn random_scales(len: usize) -> Vec<f32> {
    let mut rng = rand::rng();
    (0..len)
        .map(|_| rng.random_range(0.5f32..2.0) / 448.0)
        .collect()
}

/// The weights of a layer of config `cfg`: `codes` holds `N x K` FP8 codes, `scales` at
/// least as many scales as the config's weight-scale shape counts (`max(N, blocks)` covers
/// every kind), `one` the single static input scale, used when the activations are
/// statically quantized.
pub fn weights_for<'a>(
    cfg: &LayerConfig,
    codes: &'a [u8],
    scales: &'a [f32],
    one: &'a [f32],
) -> LayerWeights<'a> {
    let shape = cfg.weight_scale_shape();
    let count = shape[0] * shape[1];
    let act_static = cfg.activation.is_some_and(|a| !a.dynamic);
    LayerWeights {
        weight: Tensor::fp8(codes, [cfg.n, cfg.k]),
        weight_scale: Tensor::f32(&scales[..count], shape),
        input_scale: act_static.then(|| Tensor::f32(one, [1, 1])),
        input_scale_ub: None,
        bias: None,
    }
}

/// Whether `entry` runs on a GPU of capability `cap`: natively (its `arch`) or forced by
/// name (its `force_arch`), as the GPU tests and benches build it with
/// `Linear::with_entry` / `KernelEntry::build`.
pub fn runs_on(entry: &KernelEntry, cap: Capability) -> bool {
    entry.arch.matches(Some(cap)) || entry.force_arch.is_some_and(|a| a.matches(Some(cap)))
}

/// The median of `v` (sorted in place); NaN when empty.
pub fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        f64::NAN
    } else {
        v[v.len() / 2]
    }
}

/// GPU 0 with NVRTC, or None after printing why the bench is skipped ("skipped: ...").
pub fn gpu_or_skip() -> Option<Arc<Gpu>> {
    match runtime::probe::nvrtc().and_then(|_| Gpu::open(0)) {
        Ok(g) => Some(g),
        Err(e) => {
            println!("skipped: no CUDA device ({e})");
            None
        }
    }
}

/// GPU 0 when it is a Hopper (sm_90), or None after printing why `bench` is skipped.
pub fn hopper_or_skip(bench: &str) -> Option<Arc<Gpu>> {
    let gpu = gpu_or_skip()?;
    let cap = gpu.capability();
    if (cap.major, cap.minor) != (9, 0) {
        println!("skipped: {bench} needs sm_90, this GPU is {cap}");
        return None;
    }
    Some(gpu)
}

/// The median microseconds of `call` over `samples` calls after `warmup` untimed ones, each
/// after an L2 flush, timed with CUDA events around the call alone on `gpu`'s stream.
pub fn flushed_median(
    gpu: &Gpu,
    timer: &EventTimer,
    flush: &Flush,
    (warmup, samples): (usize, usize),
    mut call: impl FnMut() -> Result<(), String>,
) -> Result<f64, String> {
    let stream = gpu.stream().clone();
    let mut us = Vec::with_capacity(samples);
    for i in 0..warmup + samples {
        flush.run(gpu)?;
        timer.start(&stream).map_err(|e| e.to_string())?;
        call()?;
        let ms = timer.stop(&stream).map_err(|e| e.to_string())?;
        if i >= warmup {
            us.push(f64::from(ms) * 1e3);
        }
    }
    Ok(median(&mut us))
}

/// Untimed calls before the samples of [`apply_median`].
pub const WARMUP: usize = 3;
/// Timed calls of [`apply_median`].
pub const SAMPLES: usize = 25;

/// The median microseconds of `kernel.apply` on `[m, k]` bf16 rows of `x` into `[m, n]` of
/// `out` ([`flushed_median`] of [`SAMPLES`] calls after [`WARMUP`]).
pub fn apply_median(
    gpu: &Gpu,
    timer: &EventTimer,
    flush: &Flush,
    kernel: &mut dyn Fp8Kernel,
    x: &DeviceBuffer<bf16>,
    out: &mut DeviceBuffer<bf16>,
    (m, n, k): (usize, usize, usize),
) -> Result<f64, String> {
    flushed_median(gpu, timer, flush, (WARMUP, SAMPLES), || {
        kernel
            .apply(&x.tensor([m, k]), &mut out.tensor_mut([m, n]))
            .map_err(|e| e.to_string())
    })
}

const READ_ONCE_SRC: &str = r#"
// Reads n 16-byte words once, grid-stride, U independent loads in flight per thread.
template <int U>
__device__ void read_once(const uint4* __restrict__ p, unsigned long long n, unsigned* sink) {
    unsigned acc = 0;
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + (U - 1) * stride < n; i += U * stride) {
        uint4 v[U];
#pragma unroll
        for (int j = 0; j < U; ++j)
            asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                         : "=r"(v[j].x), "=r"(v[j].y), "=r"(v[j].z), "=r"(v[j].w)
                         : "l"(p + i + j * stride));
#pragma unroll
        for (int j = 0; j < U; ++j) acc ^= v[j].x ^ v[j].y ^ v[j].z ^ v[j].w;
    }
    for (; i < n; i += stride) {
        const uint4 v = p[i];
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x9e3779b9u) sink[0] = acc;  // keeps the loads
}
extern "C" __global__ void read_once4(const uint4* p, unsigned long long n, unsigned* sink) {
    read_once<4>(p, n, sink);
}
extern "C" __global__ void read_once8(const uint4* p, unsigned long long n, unsigned* sink) {
    read_once<8>(p, n, sink);
}
extern "C" __global__ void read_once16(const uint4* p, unsigned long long n, unsigned* sink) {
    read_once<16>(p, n, sink);
}
// Each block reads one contiguous chunk of the buffer (its share, rounded up to whole
// 16-byte words), 8 loads in flight per thread, block-stride inside the chunk.
extern "C" __global__ void read_chunk8(const uint4* __restrict__ p, unsigned long long n,
                                       unsigned* sink) {
    const unsigned long long per = (n + gridDim.x - 1) / gridDim.x;
    const unsigned long long lo = blockIdx.x * per, hi = min(n, lo + per);
    unsigned acc = 0;
    unsigned long long i = lo + threadIdx.x;
    for (; i + 7ull * blockDim.x < hi; i += 8ull * blockDim.x) {
        uint4 v[8];
#pragma unroll
        for (int j = 0; j < 8; ++j)
            asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                         : "=r"(v[j].x), "=r"(v[j].y), "=r"(v[j].z), "=r"(v[j].w)
                         : "l"(p + i + j * blockDim.x));
#pragma unroll
        for (int j = 0; j < 8; ++j) acc ^= v[j].x ^ v[j].y ^ v[j].z ^ v[j].w;
    }
    for (; i < hi; i += blockDim.x) {
        const uint4 v = p[i];
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x9e3779b9u) sink[0] = acc;  // keeps the loads
}
"#;

/// The practical floor of a GEMM that streams an `N x K` FP8 weight once: a kernel that
/// only reads those bytes once with 16-byte loads on every SM, timed like the GEMMs (CUDA
/// events, L2 evicted by a read before each call), the best of [`ReadOnce::SHAPES`] grid
/// shapes (blocks per SM x threads per block) for each of four kernels: grid-stride with 4,
/// 8 or 16 loads in flight per thread, and one contiguous chunk per block with 8.
pub struct ReadOnce {
    funcs: [CudaFunction; 4],
    sink: DeviceBuffer<u8>,
    sms: u32,
}

impl ReadOnce {
    /// Grid shapes tried: (blocks per SM, threads per block).
    pub const SHAPES: [(u32, u32); 8] = [
        (1, 512),
        (1, 1024),
        (2, 512),
        (2, 1024),
        (4, 256),
        (4, 512),
        (8, 256),
        (16, 128),
    ];

    /// Loads the read-once kernels on `gpu`.
    pub fn new(gpu: &Arc<Gpu>) -> Self {
        let (module, _) = gpu
            .module(&ModuleSpec::new("read_once", READ_ONCE_SRC))
            .expect("read-once module");
        let f = |name: &str| module.load_function(name).expect("read-once kernel");
        ReadOnce {
            funcs: [
                f("read_once4"),
                f("read_once8"),
                f("read_once16"),
                f("read_chunk8"),
            ],
            sink: DeviceBuffer::zeros(gpu, 4).expect("sink"),
            sms: gpu.device().sm_count,
        }
    }

    /// The best median microseconds of reading `buf` once (its length a multiple of 16
    /// bytes is read; the rest is ignored), `samples` per grid shape after `warmup`; also the
    /// winning (kernel: 4, 8, 16 loads in flight grid-stride, or 108 for 8 per contiguous
    /// chunk; blocks per SM, threads).
    pub fn floor_us(
        &self,
        gpu: &Gpu,
        timer: &EventTimer,
        flush: &Flush,
        buf: &DeviceBuffer<u8>,
        (warmup, samples): (usize, usize),
    ) -> Result<(f64, (u32, u32, u32)), String> {
        let (p, n, sink) = (buf.ptr(), (buf.len() / 16) as u64, self.sink.ptr());
        let mut best = (f64::INFINITY, (0, 0, 0));
        for (fi, func) in self.funcs.iter().enumerate() {
            for (per_sm, threads) in Self::SHAPES {
                let cfg = LaunchConfig {
                    grid_dim: (self.sms * per_sm, 1, 1),
                    block_dim: (threads, 1, 1),
                    shared_mem_bytes: 0,
                };
                let t = flushed_median(gpu, timer, flush, (warmup, samples), || {
                    let mut b = gpu.stream().launch_builder(func);
                    b.arg(&p).arg(&n).arg(&sink);
                    // SAFETY: p holds n 16-byte words and sink 4 bytes, both on this GPU.
                    unsafe { b.launch(cfg) }
                        .map(|_| ())
                        .map_err(|e| format!("{e:?}"))
                })?;
                if t < best.0 {
                    best = (t, ([4, 8, 16, 108][fi], per_sm, threads));
                }
            }
        }
        Ok(best)
    }
}

/// Captures what `record` enqueues on `stream` into a graph (thread-local capture mode: a
/// call from this thread that a graph cannot record fails the capture), instantiates it and
/// uploads it to the device. The capture is ended whatever `record` returned.
pub fn capture(
    stream: &Arc<CudaStream>,
    record: impl FnOnce() -> Result<(), String>,
) -> Result<CudaGraph, String> {
    stream
        .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        .map_err(|e| format!("begin_capture: {e:?}"))?;
    let recorded = record();
    let ended = stream.end_capture(sys::CUgraphInstantiate_flags(0));
    recorded?;
    let graph = ended
        .map_err(|e| format!("end_capture (the capture was invalidated?): {e:?}"))?
        .ok_or("the capture recorded nothing")?;
    graph
        .upload()
        .map_err(|e| format!("uploading the graph: {e:?}"))?;
    Ok(graph)
}
