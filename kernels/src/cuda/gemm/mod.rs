//! The GEMM recipes: each file holds what makes one kernel different (its config checks,
//! weight layout, launch plan and launch), plugged into the skeleton of `super::skeleton`.
//! - `cublaslt_block`: cuBLASLt block-scaled FP8 (Hopper);
//! - `cublaslt_scaled`: cuBLASLt per-tensor and row-wise FP8;
//! - `decode`: our decode kernel (M <= 16, quantization and split-K inside one launch);
//! - `hopper`: our wgmma + TMA kernel (sm_90a);
//! - `portable`: our FP8 `mma.sync` kernel (sm_89+);
//! - `marlin`: the W8A16 kernel for Ampere.

pub mod cublaslt_block;
pub mod cublaslt_scaled;
pub mod decode;
pub mod hopper;
pub mod marlin;
pub mod portable;
