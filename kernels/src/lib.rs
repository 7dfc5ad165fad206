//! # fp8-linear
//!
//! FP8 linear-layer kernels (CPU and CUDA) and a dispatcher that picks, per layer and per
//! device, the kernel to run. Kernels are declared with `#[fp8_kernel(...)]`; tables are
//! constant and validated at compile time; selection walks them against the device.
//!
//! ```
//! use fp8_linear::{Device, DType, LayerConfig, Overrides};
//!
//! let layer = LayerConfig::block_128(4096, 7168, DType::Bf16, DType::Bf16);
//! let chosen = fp8_linear::select_builtin(&Device::host_cpu(), &layer, &Overrides::none()).unwrap();
//! assert_eq!(chosen.entry.name, "CpuFp8Gemm");
//! ```

#![warn(missing_docs)]

extern crate self as fp8_linear;

pub mod autotune;
pub mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;
mod linear;
pub mod tables;

pub use fp8_linear_core::*;
pub use linear::{Linear, LinearError};

/// The README's Rust examples, compiled as doctests so the README stays true.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;

/// Selects a kernel from the built-in tables.
pub fn select_builtin(
    device: &Device,
    config: &LayerConfig,
    overrides: &Overrides,
) -> Result<Selected<'static>, SelectError> {
    select_in(tables::BUILTIN, device, config, overrides)
}

/// Explains the decision of [`select_builtin`]: every candidate with its verdict.
pub fn explain_builtin(
    device: &Device,
    config: &LayerConfig,
    overrides: &Overrides,
) -> Result<Explanation, SelectError> {
    explain_in(tables::BUILTIN, device, config, overrides)
}
