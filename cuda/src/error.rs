//! Errors of the CUDA layer: values with context (which kernel, which arch, the NVRTC log),
//! never panics.

use std::path::PathBuf;

/// An error from the CUDA layer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CudaError {
    /// The CUDA driver library (libcuda) could not be loaded.
    #[error("no CUDA driver: {detail}")]
    NoDriver {
        /// What was looked for.
        detail: String,
    },
    /// The driver loaded but there is no (such) device.
    #[error("no CUDA device: {detail}")]
    NoDevice {
        /// Why (zero devices, ordinal out of range, init failure).
        detail: String,
    },
    /// A device ordinal this machine does not have.
    #[error("no CUDA device {ordinal}: this machine has {count}")]
    NoSuchDevice {
        /// The ordinal asked for.
        ordinal: u32,
        /// Devices present.
        count: u32,
    },
    /// A CUDA library besides the driver (NVRTC, cuBLASLt) could not be loaded.
    #[error("CUDA library {lib} not found (searched for {searched}); install the CUDA runtime libraries or add them to LD_LIBRARY_PATH")]
    MissingLibrary {
        /// The library ("nvrtc", "cublasLt").
        lib: &'static str,
        /// The file names searched for.
        searched: String,
    },
    /// A driver call failed.
    #[error("CUDA driver error in {context}: {error}")]
    Driver {
        /// What was being done.
        context: String,
        /// The driver's error code.
        error: String,
    },
    /// NVRTC failed to compile a kernel.
    #[error("NVRTC failed to compile {module} for {arch}: {error}\n{log}")]
    Nvrtc {
        /// The module's name.
        module: String,
        /// The target (`sm_90a`).
        arch: String,
        /// NVRTC's status.
        error: String,
        /// The compiler log.
        log: String,
    },
    /// A cuBLASLt call failed.
    #[error("cuBLASLt error in {context}: {status}")]
    Cublas {
        /// What was being done.
        context: String,
        /// The status code.
        status: String,
    },
    /// The module cache directory could not be used.
    #[error("kernel cache at {}: {detail}", path.display())]
    Cache {
        /// The path involved.
        path: PathBuf,
        /// What went wrong.
        detail: String,
    },
    /// An argument is out of range for the operation.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
}

impl CudaError {
    /// A driver error with context.
    pub fn driver(context: impl Into<String>, e: cudarc::driver::DriverError) -> Self {
        CudaError::Driver {
            context: context.into(),
            error: format!("{e:?}"),
        }
    }

    /// A cuBLASLt error with context.
    pub fn cublas(context: impl Into<String>, e: cudarc::cublaslt::result::CublasError) -> Self {
        CudaError::Cublas {
            context: context.into(),
            status: format!("{:?}", e.0),
        }
    }

    /// Whether the error means "no usable GPU here" (no driver, no device, missing library)
    /// rather than a failure on a GPU that exists.
    pub fn is_unavailable(&self) -> bool {
        matches!(
            self,
            CudaError::NoDriver { .. }
                | CudaError::NoDevice { .. }
                | CudaError::NoSuchDevice { .. }
                | CudaError::MissingLibrary { .. }
        )
    }
}

impl From<CudaError> for fp8_linear_core::KernelError {
    fn from(e: CudaError) -> Self {
        match e {
            CudaError::NoSuchDevice { ordinal, count } => {
                fp8_linear_core::KernelError::NoSuchDevice { ordinal, count }
            }
            e => fp8_linear_core::KernelError::backend("cuda", e),
        }
    }
}
