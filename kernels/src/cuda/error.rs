//! The one conversion from the CUDA layer's typed errors to kernel errors, and the one check
//! of a `compile_for` target.

use fp8_linear_core::{Capability, KernelError, Unsupported};
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

/// A `compile_for` target `cap` for `kernel`, which needs at least `min` (`needs` says
/// what, e.g. "the Marlin kernel needs compute capability 8.0 or newer"):
/// [`KernelError::Unsupported`] naming the capability when it is older.
pub fn compile_target(
    kernel: &'static str,
    cap: Capability,
    min: Capability,
    needs: &'static str,
) -> Result<Capability, KernelError> {
    if cap.at_least(min) {
        Ok(cap)
    } else {
        Err(KernelError::Unsupported {
            kernel,
            reason: Unsupported::new(needs).with("capability", cap.as_number() as u64),
        })
    }
}
