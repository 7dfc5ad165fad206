//! CPU kernels: the f64 reference (the test oracle) and the fast default (dequantize to f32,
//! multithreaded SGEMM), their grouped (mixture-of-experts) forms, one per expert, plus activation quantization, the f64 reference GEMMs, and the
//! host helpers ([`host`]) a CPU kernel of your own can use: reading inputs of any float
//! dtype as f32, writing f32 results into outputs of any float dtype, loading the weights.

mod checks;
mod experts;
mod fast;
mod gemv;
mod grouped;
pub mod host;
pub mod quantize;
pub mod reference;
mod reference_kernel;
pub mod silu;

pub use fast::{sgemm_abt, CpuFp8Gemm};
pub use grouped::{CpuGroupedFp8Gemm, CpuGroupedReference};
pub use reference_kernel::CpuReference;
