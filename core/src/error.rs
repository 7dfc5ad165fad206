//! Errors kernels return: each names the problem (shape, dtype, scale layout, alignment,
//! device) and the tensor it concerns.

use std::error::Error;
use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use crate::dtype::DType;
use crate::grouped::RoutingError;
use crate::kind::LayerKind;

/// An error from constructing a kernel, processing weights or applying a layer.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum KernelError {
    /// A tensor has the wrong shape.
    #[error("shape mismatch for {what}: expected {expected}, got {got}")]
    Shape {
        /// Which tensor ("input", "weight_scale", ...).
        what: &'static str,
        /// The shape that was expected.
        expected: String,
        /// The shape that was given.
        got: String,
    },
    /// A tensor has the wrong element type.
    #[error("dtype mismatch for {what}: expected {expected}, got {got}")]
    DType {
        /// Which tensor.
        what: &'static str,
        /// The accepted dtype(s).
        expected: String,
        /// The dtype that was given.
        got: DType,
    },
    /// A scale tensor has the wrong layout or granularity.
    #[error("scale layout of {what}: {detail}")]
    ScaleLayout {
        /// Which scale tensor.
        what: &'static str,
        /// What is wrong.
        detail: String,
    },
    /// A tensor value is NaN or infinite where it must be finite (scales).
    #[error("{what} holds a non-finite value ({value}) at index {index}")]
    NotFinite {
        /// Which tensor.
        what: &'static str,
        /// Flat index of the first bad value.
        index: usize,
        /// The bad value.
        value: f32,
    },
    /// A tensor is not contiguous row-major where the kernel needs it to be.
    #[error("{what} must be contiguous row-major (strides [{cols}, 1]), got strides {strides:?}")]
    NonContiguous {
        /// Which tensor.
        what: &'static str,
        /// Number of columns of the tensor.
        cols: usize,
        /// The strides given.
        strides: [usize; 2],
    },
    /// A buffer is shorter than its shape and strides need.
    #[error(
        "buffer of {what} too short: shape and strides need {needed} elements, buffer holds {len}"
    )]
    BufferTooSmall {
        /// Which tensor.
        what: &'static str,
        /// Elements needed.
        needed: usize,
        /// Elements held.
        len: usize,
    },
    /// A size whose element or byte count overflows, or that cannot be allocated.
    #[error("{what} is too large: {detail}")]
    TooLarge {
        /// Which tensor or buffer.
        what: &'static str,
        /// The sizes and the bytes needed.
        detail: String,
    },
    /// A pointer or size does not meet the kernel's alignment.
    #[error("alignment of {what}: {detail}")]
    Alignment {
        /// Which tensor.
        what: &'static str,
        /// What is misaligned.
        detail: String,
    },
    /// Memory lives on the wrong device for this kernel (device memory handed to a CPU
    /// kernel, host memory to a GPU kernel, another GPU's memory).
    #[error("device mismatch for {what}: {detail}")]
    Device {
        /// Which tensor.
        what: &'static str,
        /// Where it is and where it had to be.
        detail: String,
    },
    /// The layer config is one this kernel cannot run.
    #[error("kernel {kernel} cannot implement this layer: {reason}")]
    Unsupported {
        /// The kernel.
        kernel: &'static str,
        /// Why not.
        reason: Unsupported,
    },
    /// A layer parameter the kernel needs was not supplied.
    #[error("layer parameter `{name}` is required by {kernel} but was not supplied")]
    MissingParam {
        /// The kernel.
        kernel: &'static str,
        /// The missing parameter's name.
        name: &'static str,
    },
    /// A kernel was to be built for a device profile (a description such as `a100`, with no
    /// hardware behind it): profiles serve plans and explanations, never layers.
    #[error("{kernel}: cannot build a layer for {device}: it is a device profile, not a device of this machine")]
    ProfileDevice {
        /// The kernel.
        kernel: &'static str,
        /// The profile.
        device: String,
    },
    /// A GPU kernel was built without the device's runtime handle (its context and stream)
    /// in the build context.
    #[error("{kernel}: no runtime handle for {device} in the build context (build layers through fp8_linear::Target)")]
    NoRuntime {
        /// The kernel.
        kernel: &'static str,
        /// The device.
        device: String,
    },
    /// A kernel was to be built for a device of another platform or outside its arch.
    #[error("{kernel} cannot run on {device}: it runs on {arch}")]
    WrongDevice {
        /// The kernel.
        kernel: &'static str,
        /// The device.
        device: String,
        /// The kernel's arch.
        arch: String,
    },
    /// A device ordinal that this machine does not have.
    #[error("no CUDA device {ordinal}: this machine has {count}")]
    NoSuchDevice {
        /// The ordinal asked for.
        ordinal: u32,
        /// Devices present.
        count: u32,
    },
    /// `apply` was called before `process_weights`.
    #[error("{kernel}: apply called before process_weights")]
    WeightsNotProcessed {
        /// The kernel.
        kernel: &'static str,
    },
    /// A GPU kernel's `apply` would have had to allocate scratch memory, make a GEMM plan or
    /// synchronize (work a CUDA graph cannot record) while the layer's stream is being
    /// captured into a graph: the layer has not run, nor been prepared, at this M outside the
    /// capture. Nothing was enqueued; end the capture, run the layer once at this M or call
    /// `Linear::prepare(max_m)`, and capture again.
    #[error("{kernel}: cannot run M = {m} while the layer's stream is being captured into a CUDA graph: it would {what}; run the layer once at this M, or prepare it for M up to the largest captured (`Linear::prepare`), before the capture")]
    NotPrepared {
        /// The kernel.
        kernel: &'static str,
        /// The rows of the call.
        m: usize,
        /// What the call would have done.
        what: String,
    },
    /// A call on pre-quantized activations (`apply_quantized`, `Linear::forward_quantized`,
    /// an activation quantizer) that the kernel or layer cannot take: a weight-only (W8A16)
    /// kernel or layer reads unquantized activations, and a kernel that quantizes inside its
    /// own GEMM may have no path for given codes.
    #[error("{kernel} cannot run on pre-quantized activations: {reason}")]
    PreQuantized {
        /// The kernel (or "layer").
        kernel: &'static str,
        /// Why not.
        reason: String,
    },
    /// The routing of a grouped (mixture-of-experts) call is wrong: offsets out of order or
    /// past the rows, a count above the rows per expert, an expert id out of range, a list
    /// of another length than the experts or rows (the [`RoutingError`] names which).
    #[error(transparent)]
    Routing(#[from] RoutingError),
    /// A kernel was to be built for a layer of the other kind (a grouped kernel for a linear
    /// layer, or a linear kernel for a grouped one).
    #[error("{kernel} is a {kind} kernel; it cannot be built for a {wanted} layer")]
    WrongKind {
        /// The kernel.
        kernel: &'static str,
        /// The kernel's kind.
        kind: LayerKind,
        /// The kind of layer it was to be built for.
        wanted: LayerKind,
    },
    /// A backend failure described by a message (a size the kernel cannot handle, a device
    /// that lacks a resource, ...).
    #[error("{kernel}: {detail}")]
    Backend {
        /// The kernel or component.
        kernel: &'static str,
        /// What failed, with context.
        detail: String,
    },
    /// An error of the CUDA layer (driver, NVRTC with its log, cuBLASLt, the module cache),
    /// kept typed: it is this error's [`source`](std::error::Error::source), and
    /// `fp8_linear_cuda::CudaError` is what it downcasts to. The message is the kernel's name
    /// and the CUDA error's message.
    #[error("{kernel}: {source}")]
    Cuda {
        /// The kernel or component.
        kernel: &'static str,
        /// The CUDA layer's error.
        #[source]
        source: BackendSource,
    },
}

/// A backend's typed error behind a [`KernelError`] (the CUDA layer's `CudaError`), shared so
/// the kernel error stays `Clone`. It dereferences to the error (and is what
/// [`source`](std::error::Error::source) returns, unwrapped), so `downcast_ref` reaches the
/// backend's type; two are equal when they are the same error or print the same (`Debug`).
#[derive(Clone)]
pub struct BackendSource(Arc<dyn Error + Send + Sync + 'static>);

impl BackendSource {
    /// Wraps a backend's error.
    pub fn new(error: impl Error + Send + Sync + 'static) -> Self {
        BackendSource(Arc::new(error))
    }
}

impl Deref for BackendSource {
    type Target = dyn Error + Send + Sync + 'static;

    fn deref(&self) -> &Self::Target {
        &*self.0
    }
}

impl fmt::Debug for BackendSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for BackendSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&*self.0, f)
    }
}

impl PartialEq for BackendSource {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || format!("{:?}", self.0) == format!("{:?}", other.0)
    }
}

impl KernelError {
    /// Shorthand for a [`KernelError::Shape`] error.
    pub fn shape(what: &'static str, expected: impl ToString, got: impl ToString) -> Self {
        KernelError::Shape {
            what,
            expected: expected.to_string(),
            got: got.to_string(),
        }
    }

    /// Shorthand for a [`KernelError::Backend`] error.
    pub fn backend(kernel: &'static str, detail: impl ToString) -> Self {
        KernelError::Backend {
            kernel,
            detail: detail.to_string(),
        }
    }

    /// Shorthand for a [`KernelError::Cuda`] error: the CUDA layer's `error`, kept as the
    /// source.
    pub fn cuda(kernel: &'static str, error: impl Error + Send + Sync + 'static) -> Self {
        KernelError::Cuda {
            kernel,
            source: BackendSource::new(error),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("driver call failed: code {0}")]
    struct Typed(i32);

    #[test]
    fn cuda_error_is_the_typed_source() {
        let e = KernelError::cuda("k", Typed(7));
        assert_eq!(e.to_string(), "k: driver call failed: code 7");
        let source = e.source().expect("a source");
        assert_eq!(source.downcast_ref::<Typed>().map(|t| t.0), Some(7));
        assert_eq!(e.clone(), e);
        assert_ne!(e, KernelError::cuda("k", Typed(8)));
    }
}

/// Why a kernel cannot implement a layer config. Small and `Copy` so that selection never
/// allocates, even when it walks past kernels that reject the layer.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Unsupported {
    /// The reason, as a fixed sentence fragment ("N must be a multiple of 64").
    pub reason: &'static str,
    /// An optional offending value, printed as `(name = value)`.
    pub value: Option<(&'static str, u64)>,
}

impl Unsupported {
    /// A reason with no value.
    pub const fn new(reason: &'static str) -> Self {
        Unsupported {
            reason,
            value: None,
        }
    }

    /// Attaches the offending value.
    pub const fn with(self, name: &'static str, value: u64) -> Self {
        Unsupported {
            reason: self.reason,
            value: Some((name, value)),
        }
    }
}

impl fmt::Display for Unsupported {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.reason)?;
        if let Some((name, v)) = self.value {
            write!(f, " (got {name} = {v})")?;
        }
        Ok(())
    }
}
