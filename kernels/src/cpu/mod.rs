//! CPU kernels: the f64 reference (the test oracle) and the fast default (dequantize to f32,
//! multithreaded SGEMM), plus activation quantization and the f64 reference GEMMs.

mod checks;
mod fast;
mod gemv;
mod host;
pub mod quantize;
pub mod reference;
mod reference_kernel;

pub use fast::{sgemm_abt, CpuFp8Gemm};
pub use reference_kernel::CpuReference;
