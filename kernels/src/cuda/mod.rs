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
//! One skeleton, the parts plugged in (folder `skeleton/`): every kernel holds a `GpuLayer`
//! (its layer, GPU handle, the layer's shared weights and the processed state), whose
//! `apply` and `prepare` run the same steps for every kernel (check -> plan -> reserve ->
//! quantize and enqueue); the processed state of each kernel implements `Recipe`, the steps
//! that differ. The block-scaled kernels put a `BlockLayer` (the layer's weights in the
//! kernel's layout, shared with the layer's other kernels of that layout, and the activation
//! quantization in its scale order) in front of their GEMM, so their files (folder `gemm/`:
//! the recipes [`cublaslt_block`], [`cublaslt_scaled`], [`decode`], [`hopper`], [`marlin`],
//! [`portable`]) hold only the GEMM: tile variants, split-K and the launch. The CUDA side
//! mirrors it: every module is put together from `cu/ptx.cuh` (the PTX wrappers),
//! `cu/quant.cuh` and `cu/epilogue.cuh` (bias + store, the split-K last-arriver protocol)
//! before its own body.
//!
//! CUDA graphs: every `apply` first reserves everything the call needs (scratch through
//! `Scratch::get`, cuBLASLt plans and workspace through `LtGemm::plan`), then enqueues; once
//! the layer has run or been prepared (`Fp8Kernel::prepare`) at an M, a call at that M
//! allocates nothing, makes no plan, never synchronizes and loads no module, so it can be
//! captured. A reservation that would allocate or plan while the stream is being captured
//! is refused (`CudaError::Capturing`, surfaced as `KernelError::NotPrepared`) before
//! anything is enqueued. Device addresses are read once when buffers are made, so a call
//! touches no cudarc event either.

mod gemm;
pub(crate) mod prequant;
pub mod quant;
mod skeleton;
pub mod sources;

pub use gemm::{cublaslt_block, cublaslt_scaled, decode, hopper, marlin, portable};

/// Hooks for the tests crate (host models, numerics checks): the Marlin repack and its CPU
/// model of the kernel's arithmetic. Not part of the API.
#[doc(hidden)]
pub mod testing {
    /// How the group quantization kernel is cut and launched.
    pub mod quant {
        pub use crate::cuda::quant::{group_cut, group_launch, GroupCut, GroupLaunch};
    }
    /// The Marlin kernel's CPU model and weight repack.
    pub mod marlin {
        pub use crate::cuda::gemm::marlin::emulate::emulate;
        /// The weight repack, scale conversion and padding.
        pub mod repack {
            pub use crate::cuda::gemm::marlin::repack::*;
        }
    }
}

pub use cublaslt_block::CublasLtBlockFp8;
pub use cublaslt_scaled::{CublasLtFp8PerTensor, CublasLtFp8Rowwise};
pub use decode::DecodeBlockFp8;
pub use hopper::{HopperBlockFp8, HopperGroupedFp8};
pub use marlin::{MarlinFp8, MarlinGroupedFp8};
pub use portable::{PortableBlockFp8, PortableGroupedFp8};
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
