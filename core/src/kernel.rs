//! The kernel trait (process weights once, apply many times) and what constructors receive.

use std::fmt;

use crate::config::LayerConfig;
use crate::entry::KernelName;
use crate::error::KernelError;
use crate::tensor::{LayerWeights, Tensor, TensorMut};

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

/// An FP8 linear-layer kernel. Register one with `#[fp8_kernel(...)]` on the struct and give
/// the struct an inherent constructor:
/// - `fn new(ctx: &BuildCtx<'_>) -> Result<Self, KernelError>` when `params` is not
///   declared, or
/// - `fn new(ctx: &BuildCtx<'_>, params: LayerParams<N>) -> Result<Self, KernelError>`
///   when `params = [..]` declares N names.
///
/// The attribute checks that signature at compile time and generates the kernel's
/// [`KernelName`] from the type's name.
///
/// [`BuildCtx`]: crate::BuildCtx
/// [`LayerParams`]: crate::LayerParams
pub trait Fp8Kernel: KernelName + Send + 'static {
    /// Whether this kernel can run a layer with this config. Called by `select` for every
    /// candidate, so it must be cheap and must not allocate.
    fn can_implement(config: &LayerConfig) -> Result<(), Unsupported>
    where
        Self: Sized;

    /// Converts the layer's weights once (repack, rescale, upload). Called once per layer
    /// before `apply`; calling it again replaces the weights.
    fn process_weights(&mut self, weights: &LayerWeights<'_>) -> Result<(), KernelError>;

    /// Computes `output[M, N] = input[M, K] @ W^T` (plus bias) for the processed weights.
    /// `input` holds the unquantized activations in the layer's input dtype: a W8A8 kernel
    /// quantizes them itself, per the layer's activation key. The hot path: reuses the
    /// kernel's scratch buffers. GPU kernels enqueue on the stream of the device handle they
    /// were built with (the layer's stream) and return without waiting for the GPU.
    fn apply(&mut self, input: &Tensor<'_>, output: &mut TensorMut<'_>) -> Result<(), KernelError>;

    /// Makes `apply` ready for every M from 1 to `max_m` (call after `process_weights`):
    /// the scratch buffers and per-M plans those calls need are made now, so that such a
    /// call allocates nothing, plans nothing and never synchronizes, and so can be captured
    /// into a CUDA graph. A call at an M that was neither prepared nor run before, while the
    /// layer's stream is being captured, returns [`KernelError::NotPrepared`] instead of
    /// doing that work. The default (CPU kernels, which capture nothing) does nothing.
    fn prepare(&mut self, max_m: usize) -> Result<(), KernelError> {
        let _ = max_m;
        Ok(())
    }
}

/// The state `process_weights` left in `slot`, or [`KernelError::WeightsNotProcessed`] when
/// `apply` comes first: the opening line of every kernel's `apply`.
pub fn processed<'s, T>(
    slot: &'s mut Option<T>,
    kernel: &'static str,
) -> Result<&'s mut T, KernelError> {
    slot.as_mut()
        .ok_or(KernelError::WeightsNotProcessed { kernel })
}
