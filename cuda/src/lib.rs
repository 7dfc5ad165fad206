//! # fp8-linear-cuda
//!
//! Everything of fp8-linear that touches the CUDA driver: probing for the libraries (so a
//! machine without CUDA gets an error value, never a panic), device discovery into core's
//! [`Device`](fp8_linear_core::Device), NVRTC compilation for the device's exact arch with an
//! on-disk cache of cubins, typed device buffers, streams, event timing, and one cuBLASLt
//! handle with its workspace per device.
//!
//! Built on cudarc with dynamic loading: nothing of CUDA is needed to build this crate.

#![warn(missing_docs)]

pub mod buffer;
pub mod cache;
pub mod context;
pub mod cublaslt;
pub mod device;
pub mod error;
pub mod module;
pub mod nvrtc;
pub mod probe;
pub mod timer;

pub use buffer::DeviceBuffer;
pub use context::Gpu;
pub use device::{device_count, discover};
pub use error::CudaError;
pub use module::{LoadSource, LoadStats, ModuleSpec};
pub use timer::EventTimer;

/// The cudarc crate, re-exported so kernels use the same version.
pub use cudarc;
