//! The built-in kernel tables, one per (platform, family), and the registry that holds
//! them. Downstream crates build their own with `fp8_table!` (see the crate docs).

use fp8_linear_core::{fp8_table, Registry, Table};

use crate::cpu::{CpuFp8Gemm, CpuReference};

fp8_table! {
    /// Block-scaled W8A8 on the CPU.
    pub CPU_BLOCK: Cpu, BlockScaled = [CpuFp8Gemm, CpuReference];
    /// Per-tensor / per-token / per-channel W8A8 on the CPU.
    pub CPU_SCALED: Cpu, Scaled = [CpuFp8Gemm, CpuReference];
    /// Weight-only FP8 (W8A16) on the CPU.
    pub CPU_WEIGHT_ONLY: Cpu, WeightOnly = [CpuFp8Gemm, CpuReference];
}

/// Every built-in table.
pub static BUILTIN: &Registry = &[&CPU_BLOCK, &CPU_SCALED, &CPU_WEIGHT_ONLY];

/// Every built-in table, for listing.
pub fn all() -> &'static [&'static Table] {
    BUILTIN
}
