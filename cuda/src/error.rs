//! Errors of the CUDA layer: values with context (which kernel, which arch, the NVRTC log),
//! never panics. Failed driver, NVRTC and cuBLASLt calls keep cudarc's typed error (the
//! status code) beside the context string, so callers can match on the code.

use std::fmt;
use std::path::PathBuf;

use cudarc::cublaslt::result::CublasError;
use cudarc::driver::DriverError;
use cudarc::nvrtc::result::NvrtcError;
use fp8_linear_core::Capability;

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
        /// Why (zero devices, ordinal out of range).
        detail: String,
    },
    /// The driver loaded but `cuInit` failed (no device, or a driver the libraries do not
    /// match).
    #[error("no CUDA device: cuInit failed: {error}")]
    Init {
        /// The driver's error code.
        error: DriverError,
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
        error: DriverError,
    },
    /// NVRTC failed to compile a module.
    #[error(
        "NVRTC failed to compile {module} for {arch}: {call}: {}\n{log}",
        nvrtc_status(error)
    )]
    Nvrtc {
        /// The module's name.
        module: String,
        /// The target (`sm_90a`, `compute_80`).
        arch: String,
        /// The NVRTC call that failed (`nvrtcCompileProgram`).
        call: &'static str,
        /// NVRTC's status.
        error: NvrtcError,
        /// The compiler log.
        log: String,
    },
    /// NVRTC's version query failed (a broken NVRTC library).
    #[error("NVRTC version query failed: {}", nvrtc_status(error))]
    NvrtcVersion {
        /// NVRTC's status.
        error: NvrtcError,
    },
    /// A cuBLASLt call failed.
    #[error("cuBLASLt error in {context}: {}", cublas_status(error))]
    Cublas {
        /// What was being done.
        context: String,
        /// The status code.
        error: CublasError,
    },
    /// Code for a compute capability the device cannot run (newer than the device's).
    #[error("cannot run code for compute capability {target} on a device of {device}")]
    IncompatibleTarget {
        /// The capability the code was to be compiled for.
        target: Capability,
        /// The device's capability.
        device: Capability,
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
    /// Work that a CUDA graph cannot record (an allocation, a host synchronization, a new
    /// cuBLASLt plan) was refused because the stream is being captured; nothing was enqueued.
    #[error("would {what} while the stream is being captured into a CUDA graph")]
    Capturing {
        /// What would have been done.
        what: String,
    },
}

/// NVRTC's status as its name (`NVRTC_ERROR_COMPILATION`).
fn nvrtc_status(e: &NvrtcError) -> impl fmt::Display {
    format!("{:?}", e.0)
}

/// cuBLASLt's status as its name (`CUBLAS_STATUS_NOT_SUPPORTED`).
fn cublas_status(e: &CublasError) -> impl fmt::Display {
    format!("{:?}", e.0)
}

impl CudaError {
    /// A driver error with context.
    pub fn driver(context: impl Into<String>, error: DriverError) -> Self {
        CudaError::Driver {
            context: context.into(),
            error,
        }
    }

    /// A cuBLASLt error with context.
    pub fn cublas(context: impl Into<String>, error: CublasError) -> Self {
        CudaError::Cublas {
            context: context.into(),
            error,
        }
    }

    /// The same error with `outer` (what the caller was doing) put before the context of a
    /// driver or cuBLASLt error; other errors name their context already and are returned
    /// as they are.
    pub fn within(self, outer: impl fmt::Display) -> Self {
        match self {
            CudaError::Driver { context, error } => CudaError::Driver {
                context: format!("{outer}: {context}"),
                error,
            },
            CudaError::Cublas { context, error } => CudaError::Cublas {
                context: format!("{outer}: {context}"),
                error,
            },
            other => other,
        }
    }

    /// The driver's error code, for a failed driver call.
    pub fn driver_error(&self) -> Option<DriverError> {
        match self {
            CudaError::Driver { error, .. } | CudaError::Init { error } => Some(*error),
            _ => None,
        }
    }

    /// Whether the error means "no usable GPU here" (no driver, no device, missing library)
    /// rather than a failure on a GPU that exists.
    pub fn is_unavailable(&self) -> bool {
        matches!(
            self,
            CudaError::NoDriver { .. }
                | CudaError::NoDevice { .. }
                | CudaError::Init { .. }
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
            e => fp8_linear_core::KernelError::cuda("cuda", e),
        }
    }
}
