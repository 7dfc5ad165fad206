//! # fp8-linear-cuda
//!
//! Everything of fp8-linear that touches the CUDA driver: probing for the libraries (so a
//! machine without CUDA gets an error value, never a panic), device discovery into core's
//! [`Device`](fp8_linear_core::Device), NVRTC compilation for the device's exact arch with an
//! on-disk cache of cubins (or PTX for an older target), typed device buffers, raw fills and
//! copies, kernel functions, TMA tensor maps, streams, event timing, and one cuBLASLt handle
//! with its workspace per device. Failed driver, NVRTC and cuBLASLt calls are
//! [`CudaError`] values carrying cudarc's typed error codes.
//!
//! Built on cudarc with dynamic loading: nothing of CUDA is needed to build this crate.

#![warn(missing_docs)]

pub mod buffer;
pub mod cache;
pub mod context;
pub mod cublaslt;
pub mod device;
pub mod error;
pub mod function;
mod memory;
pub mod module;
pub mod nvrtc;
pub mod probe;
pub mod timer;
pub mod tma;

pub use buffer::DeviceBuffer;
pub use context::Gpu;
pub use device::{device_count, discover};
pub use error::CudaError;
pub use function::{function, function_with_shared_memory};
pub use module::{LoadSource, LoadStats, ModuleSpec};
pub use timer::EventTimer;

/// The cudarc crate, re-exported so kernels use the same version.
pub use cudarc;
