//! The built-in kernel tables, one per (platform, family), and the registry that holds
//! them. Downstream crates build their own with `fp8_table!` (see the crate docs).

use fp8_linear_core::{fp8_table, Registry, Table};

use crate::cpu::{CpuFp8Gemm, CpuReference};
#[cfg(feature = "cuda")]
use crate::cuda::{
    CublasLtBlockFp8, CublasLtFp8PerTensor, CublasLtFp8Rowwise, HopperBlockFp8, MarlinFp8,
    PortableBlockFp8,
};

fp8_table! {
    /// Block-scaled W8A8 on the CPU.
    pub CPU_BLOCK: Cpu, BlockScaled = [CpuFp8Gemm, CpuReference];
    /// Per-tensor / per-token / per-channel W8A8 on the CPU.
    pub CPU_SCALED: Cpu, Scaled = [CpuFp8Gemm, CpuReference];
    /// Weight-only FP8 (W8A16) on the CPU.
    pub CPU_WEIGHT_ONLY: Cpu, WeightOnly = [CpuFp8Gemm, CpuReference];
}

// CUDA tables, fastest first. Priorities leave gaps for kernels that slot in between:
// the Hopper wgmma block kernel (1), Marlin W8A16 (4 in the block table, 1 in the scaled one).
#[cfg(feature = "cuda")]
fp8_table! {
    /// Block-scaled W8A8 on CUDA GPUs: our Hopper wgmma + TMA kernel (sm_90a), cuBLASLt
    /// block-scaled (sm_90), then Marlin W8A16 (sm_80..sm_89: the A100 / RTX 30xx path,
    /// weight-only with 16-bit activations), then the portable mma.sync kernel (sm_89+).
    pub CUDA_BLOCK: Cuda, BlockScaled = [
        HopperBlockFp8, CublasLtBlockFp8, MarlinFp8, PortableBlockFp8
    ];
    /// Per-tensor / per-token / per-channel W8A8 on CUDA GPUs: Marlin W8A16 (sm_80..sm_89,
    /// weight-only), cuBLASLt per-tensor (sm_89+), then cuBLASLt outer-vector (sm_90+).
    pub CUDA_SCALED: Cuda, Scaled = [MarlinFp8 => 1, CublasLtFp8PerTensor, CublasLtFp8Rowwise];
    /// Weight-only FP8 (W8A16) on CUDA GPUs: Marlin.
    pub CUDA_WEIGHT_ONLY: Cuda, WeightOnly = [MarlinFp8];
}

/// Every built-in table.
#[cfg(feature = "cuda")]
pub static BUILTIN: &Registry = &[
    &CUDA_BLOCK,
    &CUDA_SCALED,
    &CUDA_WEIGHT_ONLY,
    &CPU_BLOCK,
    &CPU_SCALED,
    &CPU_WEIGHT_ONLY,
];

/// Every built-in table.
#[cfg(not(feature = "cuda"))]
pub static BUILTIN: &Registry = &[&CPU_BLOCK, &CPU_SCALED, &CPU_WEIGHT_ONLY];

/// Every built-in table, for listing.
pub fn all() -> &'static [&'static Table] {
    BUILTIN
}
