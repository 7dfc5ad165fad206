//! The one conversion from the CUDA layer's typed errors to kernel errors.

use fp8_linear_core::KernelError;
use fp8_linear_cuda::CudaError;

/// Maps a CUDA-layer error to a kernel error naming the kernel ([`KernelError::Backend`],
/// whose detail is the error's message with its context and driver / NVRTC / cuBLASLt code).
pub fn be(kernel: &'static str) -> impl Fn(CudaError) -> KernelError {
    move |e| KernelError::backend(kernel, e)
}

/// Like [`be`], for the work of a call at `m` rows: work refused because the stream is being
/// captured ([`CudaError::Capturing`]) becomes [`KernelError::NotPrepared`].
pub fn be_at(kernel: &'static str, m: usize) -> impl Fn(CudaError) -> KernelError {
    move |e| match e {
        CudaError::Capturing { what } => KernelError::NotPrepared { kernel, m, what },
        e => KernelError::backend(kernel, e),
    }
}
