//! CUDA kernels: GPU activation quantization, cuBLASLt FP8 GEMMs (block-scaled on Hopper,
//! per-tensor and row-wise), our own portable block-FP8 kernel (FP8 `mma.sync`, sm_89+) and
//! our Hopper block-FP8 kernel (wgmma + TMA, sm_90a).
//!
//! Kernels are CUDA C (every source in `cu/`, registered in [`sources`]) compiled at run
//! time by NVRTC for the device's exact arch and cached on disk (see `fp8_linear_cuda`).
//! Kernel inputs and outputs are device tensors
//! ([`Storage::Device`](fp8_linear_core::Storage::Device)); `process_weights` takes host
//! weights (uploaded to the GPU of the layer's build context) or device weights (used on
//! their device).
//!
//! One skeleton, the parts plugged in: every kernel holds a `GpuLayer` (its layer, GPU handle
//! and processed state); the block-scaled kernels put a `BlockLayer` (weights in the kernel's
//! scale layout, activation quantization in its scale order) in front of their GEMM, so their
//! files hold only the GEMM: tile variants, split-K and the launch. The shared pieces:
//!
//! - `layer`: `GpuLayer`; `block`: the 128 x 128 config checks and `BlockLayer`;
//!   `weights`: weights on the device.
//! - `device_io`: tensors as device memory on the layer's GPU, row-count checks, downloads.
//! - `launch`: a module's functions per output dtype, grid shapes, launches with named errors.
//! - `lt_gemm`: the cuBLASLt kernels' layer checks and their GEMM with its plans by M.
//! - `scratch`, `dtype`, `error` (the one CUDA-error-to-kernel-error conversion).
//!
//! CUDA graphs: every `apply` first reserves everything the call needs (scratch through
//! `Scratch::get`, cuBLASLt plans and workspace through `LtGemm::plan`), then enqueues; once
//! the layer has run or been prepared (`Fp8Kernel::prepare`) at an M, a call at that M
//! allocates nothing, makes no plan, never synchronizes and loads no module, so it can be
//! captured. A reservation that would allocate or plan while the stream is being captured
//! is refused (`CudaError::Capturing`, surfaced as `KernelError::NotPrepared`) before
//! anything is enqueued. Device addresses are read once when buffers are made, so a call
//! touches no cudarc event either.

mod block;
pub mod cublaslt_block;
pub mod cublaslt_scaled;
pub mod decode;
mod device_io;
mod dtype;
mod error;
pub mod hopper;
mod launch;
mod layer;
mod lt_gemm;
pub mod marlin;
pub mod portable;
pub mod quant;
mod scratch;
pub mod sources;
mod weights;

pub use cublaslt_block::CublasLtBlockFp8;
pub use cublaslt_scaled::{CublasLtFp8PerTensor, CublasLtFp8Rowwise};
pub use decode::DecodeBlockFp8;
pub use hopper::HopperBlockFp8;
pub use marlin::MarlinFp8;
pub use portable::PortableBlockFp8;
pub use quant::{ActQuant, Grouping, ScaleOrder};

/// The CUDA runtime layer (`fp8_linear_cuda`: devices, buffers, modules, timing),
/// re-exported item by item, all but its `cudarc`: cudarc is reached through [`interop`].
pub mod runtime {
    pub use fp8_linear_cuda::{
        buffer, cache, context, cublaslt, device, error, function, module, nvrtc, probe, timer, tma,
    };
    pub use fp8_linear_cuda::{
        device_count, discover, function_with_shared_memory, CudaError, DeviceBuffer, EventTimer,
        Gpu, LoadSource, LoadStats, ModuleSpec,
    };
}

/// The one place cudarc is reached from this crate's API: the handles an engine that
/// already owns a CUDA context passes in ([`Target::from_cudarc`](crate::Target::from_cudarc)),
/// and the [`Gpu`](interop::Gpu) handle layers are built on.
pub mod interop {
    pub use fp8_linear_cuda::cudarc;
    pub use fp8_linear_cuda::cudarc::driver::{CudaContext, CudaStream};
    pub use fp8_linear_cuda::Gpu;
}
