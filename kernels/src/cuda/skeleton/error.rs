//! The one conversion from the CUDA layer's typed errors to kernel errors, and the one check
//! of a `compile_for` target.

use fp8_linear_core::{Capability, KernelError, Unsupported};
use fp8_linear_cuda::CudaError;

/// Maps a CUDA-layer error to a kernel error naming the kernel ([`KernelError::Cuda`]: the
/// message is the kernel's name and the error's message with its context and driver / NVRTC /
/// cuBLASLt code; the [`CudaError`] itself is the error's source).
pub fn be(kernel: &'static str) -> impl Fn(CudaError) -> KernelError {
    move |e| KernelError::cuda(kernel, e)
}

/// Like [`be`], for the work of a call at `m` rows: work refused because the stream is being
/// captured ([`CudaError::Capturing`]) becomes [`KernelError::NotPrepared`].
pub fn be_at(kernel: &'static str, m: usize) -> impl Fn(CudaError) -> KernelError {
    move |e| match e {
        CudaError::Capturing { what } => KernelError::NotPrepared { kernel, m, what },
        e => KernelError::cuda(kernel, e),
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

#[cfg(test)]
mod tests {
    use std::error::Error;

    use super::*;

    #[test]
    fn the_cuda_error_is_the_source() {
        let cuda = CudaError::InvalidArgument("grid too large".into());
        let e = be("SomeKernel")(cuda.clone());
        assert_eq!(
            e.to_string(),
            "SomeKernel: invalid argument: grid too large"
        );
        let source = e.source().expect("the CUDA error as source");
        assert_eq!(source.downcast_ref::<CudaError>(), Some(&cuda));

        let e = be_at("SomeKernel", 4)(cuda.clone());
        assert_eq!(
            e.source().and_then(|s| s.downcast_ref::<CudaError>()),
            Some(&cuda)
        );
        let capturing = CudaError::Capturing {
            what: "allocate".into(),
        };
        assert!(matches!(
            be_at("SomeKernel", 4)(capturing),
            KernelError::NotPrepared { m: 4, .. }
        ));

        let e = KernelError::from(cuda.clone());
        assert_eq!(e.to_string(), "cuda: invalid argument: grid too large");
        assert_eq!(
            e.source().and_then(|s| s.downcast_ref::<CudaError>()),
            Some(&cuda)
        );
    }
}
