//! CUDA kernels: GPU activation quantization, cuBLASLt FP8 GEMMs (block-scaled on Hopper,
//! per-tensor and row-wise), our own portable block-FP8 kernel (FP8 `mma.sync`, sm_89+) and
//! our Hopper block-FP8 kernel (wgmma + TMA, sm_90a).
//!
//! Kernels are CUDA C compiled at run time by NVRTC for the device's exact arch and cached
//! on disk (see `fp8_linear_cuda`). Kernel inputs and outputs are device tensors
//! ([`Storage::Device`](fp8_linear_core::Storage::Device)); `process_weights` takes host weights
//! (uploaded to device 0, or `FP8_LINEAR_CUDA_DEVICE`) or device weights (used on their
//! device).

mod common;
pub mod cublaslt_block;
pub mod cublaslt_scaled;
pub mod hopper;
pub mod marlin;
pub mod portable;
pub mod quant;
pub mod sources;
mod tma;
mod weights;

pub use cublaslt_block::CublasLtBlockFp8;
pub use cublaslt_scaled::{CublasLtFp8PerTensor, CublasLtFp8Rowwise};
pub use hopper::HopperBlockFp8;
pub use marlin::MarlinFp8;
pub use portable::PortableBlockFp8;
pub use quant::{ActQuant, ScaleOrder};

/// The CUDA runtime layer (devices, buffers, modules, timing), re-exported.
pub use fp8_linear_cuda as runtime;

/// The one place cudarc is reached from this crate's API: the handles an engine that
/// already owns a CUDA context passes in ([`Target::from_cudarc`](crate::Target::from_cudarc)),
/// and the [`Gpu`](interop::Gpu) handle layers are built on.
pub mod interop {
    pub use fp8_linear_cuda::cudarc;
    pub use fp8_linear_cuda::cudarc::driver::{CudaContext, CudaStream};
    pub use fp8_linear_cuda::Gpu;
}
