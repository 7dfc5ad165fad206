//! The kernel trait (process weights once, apply many times) and what constructors receive.

use std::fmt;

use crate::config::LayerConfig;
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
/// - `fn new(config: &LayerConfig) -> Result<Self, KernelError>` when `params` is not
///   declared, or
/// - `fn new(config: &LayerConfig, params: LayerParams<N>) -> Result<Self, KernelError>`
///   when `params = [..]` declares N names.
///
/// The attribute checks that signature at compile time.
pub trait Fp8Kernel: Send + 'static {
    /// Whether this kernel can run a layer with this config. Called by `select` for every
    /// candidate, so it must be cheap and must not allocate.
    fn can_implement(config: &LayerConfig) -> Result<(), Unsupported>
    where
        Self: Sized;

    /// Converts the layer's weights once (repack, rescale, upload). Called once per layer
    /// before `apply`; calling it again replaces the weights.
    fn process_weights(&mut self, weights: &LayerWeights<'_>) -> Result<(), KernelError>;

    /// Computes `output[M, N] = input[M, K] @ W^T` (plus bias) for the processed weights.
    /// The hot path: reuses the kernel's scratch buffers.
    fn apply(&mut self, input: &Tensor<'_>, output: &mut TensorMut<'_>) -> Result<(), KernelError>;

    /// The registered name of the kernel.
    fn name(&self) -> &'static str;
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

/// The layer parameter names a kernel declared with `params = [...]`, handed to its
/// constructor. `N` is the number of names, so a constructor that takes `LayerParams<4>`
/// cannot be registered with three names, and one that takes none cannot be registered with
/// any: the arity is checked by the compiler.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct LayerParams<const N: usize> {
    names: [&'static str; N],
}

impl<const N: usize> LayerParams<N> {
    /// Wraps the declared names (the attribute generates this call).
    pub const fn new(names: [&'static str; N]) -> Self {
        LayerParams { names }
    }

    /// The declared names, in declaration order.
    pub const fn names(&self) -> &[&'static str; N] {
        &self.names
    }

    /// The tensor for the `index`-th declared name, or a [`KernelError::MissingParam`].
    pub fn tensor<'w>(
        &self,
        kernel: &'static str,
        weights: &LayerWeights<'w>,
        index: usize,
    ) -> Result<Tensor<'w>, KernelError> {
        let name = self.names[index];
        weights
            .get(name)
            .ok_or(KernelError::MissingParam { kernel, name })
    }

    /// The tensor for the `index`-th declared name when it is optional (e.g. `input_scale`).
    pub fn optional<'w>(&self, weights: &LayerWeights<'w>, index: usize) -> Option<Tensor<'w>> {
        weights.get(self.names[index])
    }
}
