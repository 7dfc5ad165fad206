//! The `mma.sync` ceilings of a GPU: kernels that do nothing but issue independent tensor-core
//! MMAs from registers (f16 m16n8k16 with f32 accumulation, and FP8 e4m3 m16n8k32 from sm_89
//! on), timed with CUDA events. On sm_90 the FP8 `mma.sync` is not native (it compiles to
//! f16 HMMA after unpacking): these two figures bound what an `mma.sync` kernel (the
//! portable and decode kernels) can reach on the card, which wgmma kernels are not bound by.

use std::sync::Arc;

use fp8_linear::cuda::interop::cudarc::driver::{CudaFunction, LaunchConfig, PushKernelArg};
use fp8_linear::cuda::runtime::{DeviceBuffer, EventTimer, Gpu, ModuleSpec};

const SRC: &str = r#"
typedef unsigned int u32;
// CHAINS independent accumulator sets per warp, ITERS rounds: CHAINS * ITERS MMAs per warp.
#define CHAINS 8
extern "C" __global__ void mma_f16_peak(float* sink, int iters) {
    u32 a[4], b[CHAINS][2];
    for (int i = 0; i < 4; ++i) a[i] = 0x3c003c00u ^ (threadIdx.x * (i + 1));
    for (int j = 0; j < CHAINS; ++j)
        for (int i = 0; i < 2; ++i) b[j][i] = 0x3c003c00u ^ (threadIdx.x * (i + 7) + j);
    float c[CHAINS][4];
    // Distinct B operands and starting values: no two chains compute the same thing (on
    // sm_90 ptxas computes an emulated FP8 product once per distinct operand pair).
    for (int j = 0; j < CHAINS; ++j)
        for (int i = 0; i < 4; ++i) c[j][i] = (float)(j * 4 + i + threadIdx.x);
    for (int it = 0; it < iters; ++it) {
#pragma unroll
        for (int j = 0; j < CHAINS; ++j)
            asm volatile(
                "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, "
                "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                : "+f"(c[j][0]), "+f"(c[j][1]), "+f"(c[j][2]), "+f"(c[j][3])
                : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[j][0]), "r"(b[j][1]));
    }
    float s = 0.0f;
    for (int j = 0; j < CHAINS; ++j) s += c[j][0] + c[j][1] + c[j][2] + c[j][3];
    if (s == 1234.5f) sink[0] = s;  // keeps the MMAs
}
#if __CUDA_ARCH__ >= 890
extern "C" __global__ void mma_e4m3_peak(float* sink, int iters) {
    u32 a[4], b[CHAINS][2];
    for (int i = 0; i < 4; ++i) a[i] = 0x38383838u ^ (threadIdx.x * (i + 1) & 0x07070707u);
    for (int j = 0; j < CHAINS; ++j)
        for (int i = 0; i < 2; ++i)
            b[j][i] = 0x38383838u ^ ((threadIdx.x * (i + 7) + j * 0x01010101u) & 0x07070707u);
    float c[CHAINS][4];
    // Distinct B operands and starting values: no two chains compute the same thing (on
    // sm_90 ptxas computes an emulated FP8 product once per distinct operand pair).
    for (int j = 0; j < CHAINS; ++j)
        for (int i = 0; i < 4; ++i) c[j][i] = (float)(j * 4 + i + threadIdx.x);
    for (int it = 0; it < iters; ++it) {
        // New B operands every round, as in a GEMM (on sm_90 each round then unpacks them:
        // 4 unpacks per MMA here, 3 in the portable kernel).
#pragma unroll
        for (int j = 0; j < CHAINS; ++j) {
            b[j][0] += 0x01010101u;
            b[j][1] ^= 0x01010101u;
        }
#pragma unroll
        for (int j = 0; j < CHAINS; ++j)
            asm volatile(
                "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, "
                "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                : "+f"(c[j][0]), "+f"(c[j][1]), "+f"(c[j][2]), "+f"(c[j][3])
                : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[j][0]), "r"(b[j][1]));
    }
    float s = 0.0f;
    for (int j = 0; j < CHAINS; ++j) s += c[j][0] + c[j][1] + c[j][2] + c[j][3];
    if (s == 1234.5f) sink[0] = s;  // keeps the MMAs
}
#endif
"#;

/// MMAs in flight per warp (the kernels' `CHAINS`).
const CHAINS: u64 = 8;
/// Rounds per launch.
const ITERS: i32 = 4096;
/// Threads per block, and blocks per SM.
const THREADS: u32 = 256;
const BLOCKS_PER_SM: u32 = 4;

/// The `mma.sync` ceiling kernels of one GPU.
pub struct MmaPeak {
    f16: CudaFunction,
    e4m3: Option<CudaFunction>,
    sink: DeviceBuffer<f32>,
    sms: u32,
}

impl MmaPeak {
    /// Loads the kernels on `gpu` (the FP8 one from sm_89 on).
    pub fn new(gpu: &Arc<Gpu>) -> Result<Self, String> {
        let (module, _) = gpu
            .module(&ModuleSpec::new("mma_peak", SRC))
            .map_err(|e| e.to_string())?;
        let f16 = module
            .load_function("mma_f16_peak")
            .map_err(|e| format!("{e:?}"))?;
        let cap = gpu.capability();
        let e4m3 = if (cap.major, cap.minor) >= (8, 9) {
            Some(
                module
                    .load_function("mma_e4m3_peak")
                    .map_err(|e| format!("{e:?}"))?,
            )
        } else {
            None
        };
        Ok(MmaPeak {
            f16,
            e4m3,
            sink: DeviceBuffer::zeros(gpu, 1).map_err(|e| e.to_string())?,
            sms: gpu.device().sm_count,
        })
    }

    /// TFLOP/s of (f16 m16n8k16, e4m3 m16n8k32 when the GPU has it): the best of 5 launches
    /// after one warm-up, each `sms * 4` blocks of 256 threads.
    pub fn tflops(&self, gpu: &Gpu) -> Result<(f64, Option<f64>), String> {
        let timer = EventTimer::new(gpu).map_err(|e| e.to_string())?;
        let run = |f: &CudaFunction, flops_per_mma: u64| -> Result<f64, String> {
            let cfg = LaunchConfig {
                grid_dim: (self.sms * BLOCKS_PER_SM, 1, 1),
                block_dim: (THREADS, 1, 1),
                shared_mem_bytes: 0,
            };
            let mut best = f64::INFINITY;
            for i in 0..6 {
                timer.start(gpu.stream()).map_err(|e| e.to_string())?;
                let mut b = gpu.stream().launch_builder(f);
                let sink = self.sink.ptr();
                b.arg(&sink).arg(&ITERS);
                // SAFETY: the kernel writes at most sink[0], a float of this GPU.
                unsafe { b.launch(cfg) }.map_err(|e| format!("{e:?}"))?;
                let ms = f64::from(timer.stop(gpu.stream()).map_err(|e| e.to_string())?);
                if i > 0 {
                    best = best.min(ms);
                }
            }
            let warps = u64::from(self.sms * BLOCKS_PER_SM * THREADS / 32);
            let mmas = warps * CHAINS * ITERS as u64;
            Ok((mmas * flops_per_mma) as f64 / (best * 1e-3) / 1e12)
        };
        let f16 = run(&self.f16, 2 * 16 * 8 * 16)?;
        let e4m3 = match &self.e4m3 {
            Some(f) => Some(run(f, 2 * 16 * 8 * 32)?),
            None => None,
        };
        Ok((f16, e4m3))
    }
}
