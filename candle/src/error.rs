//! What goes wrong loading or running an [`Fp8Linear`](crate::Fp8Linear), as one error type
//! that names the layer and the problem; it reaches candle code as a
//! [`candle_core::Error`] (wrapped), whose message is this one's.

use std::fmt;

use candle_core::DType;
use fp8_linear::{KernelError, LinearError};

/// An error of one layer: its module name (the VarBuilder prefix) and what is wrong.
#[derive(Debug)]
pub struct Fp8LinearError {
    /// The module (`model.layers.0.mlp.down_proj`).
    pub layer: String,
    /// What is wrong.
    pub problem: Problem,
}

/// What is wrong with a layer or a call.
#[derive(Debug)]
#[non_exhaustive]
pub enum Problem {
    /// The quantization config lists the module as not quantized (`modules_to_not_convert`
    /// / `ignored_layers`): it is a plain linear layer.
    NotQuantized {
        /// The config entry that covers it.
        entry: String,
    },
    /// `in_dim` or `out_dim` is zero.
    Empty {
        /// Output features.
        n: usize,
        /// Input features.
        k: usize,
    },
    /// The VarBuilder's dtype (the activations') is not one the kernels take.
    ActivationDType {
        /// The VarBuilder's dtype.
        got: DType,
    },
    /// A tensor the layer needs is not in the checkpoint.
    Missing {
        /// Its name under the layer's prefix.
        tensor: &'static str,
        /// Why the layer needs it.
        why: String,
    },
    /// A scale tensor has a shape the quantization config does not allow.
    ScaleShape {
        /// Its name under the layer's prefix.
        tensor: &'static str,
        /// Its shape.
        got: Vec<usize>,
        /// The shapes allowed.
        expected: String,
    },
    /// A scale is negative, NaN or infinite (or a static input scale is zero).
    BadScale {
        /// Its name under the layer's prefix.
        tensor: &'static str,
        /// Flat index of the first bad value.
        index: usize,
        /// The value.
        value: f32,
    },
    /// No kernel could be built for the layer on the device (every candidate's reason), or
    /// the chosen one refused the weights.
    Build(LinearError),
    /// No grouped kernel could be built for a set of experts (every candidate's reason), or
    /// the chosen one refused the weights.
    Grouped(fp8_linear::GroupedLinearError),
    /// The input's dtype is not bf16, f16 or f32.
    InputDType {
        /// The input's dtype.
        got: DType,
    },
    /// The input's last dimension is not the layer's input features.
    InputShape {
        /// The input's shape.
        got: Vec<usize>,
        /// The layer's input features.
        k: usize,
    },
    /// The input is on another device than the layer.
    InputDevice {
        /// The layer's device.
        layer: String,
        /// The input's device.
        input: String,
    },
    /// The kernel failed (or refused the call).
    Kernel {
        /// The kernel.
        kernel: &'static str,
        /// Its error.
        error: KernelError,
    },
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::NotQuantized { entry } => write!(
                f,
                "the quantization config lists it as not quantized (`{entry}`): load it as a \
                 plain linear layer (`fp8_linear_candle::linear` does)"
            ),
            Problem::Empty { n, k } => write!(f, "a [{n}, {k}] layer has no weights"),
            Problem::ActivationDType { got } => write!(
                f,
                "the VarBuilder's dtype {got:?} is the layer's activation dtype, and must be \
                 bf16, f16 or f32"
            ),
            Problem::Missing { tensor, why } => {
                write!(f, "tensor `{tensor}` is missing from the checkpoint: {why}")
            }
            Problem::ScaleShape {
                tensor,
                got,
                expected,
            } => write!(f, "`{tensor}` has shape {got:?}; expected {expected}"),
            Problem::BadScale {
                tensor,
                index,
                value,
            } => write!(
                f,
                "`{tensor}` holds {value} at index {index}; scales must be finite and \
                 non-negative (a static input scale positive)"
            ),
            Problem::Build(e) => write!(f, "no kernel for this layer: {e}"),
            Problem::Grouped(e) => write!(f, "no grouped kernel for these experts: {e}"),
            Problem::InputDType { got } => {
                write!(f, "input dtype {got:?}; expected bf16, f16 or f32")
            }
            Problem::InputShape { got, k } => write!(
                f,
                "input shape {got:?}; expected [..., {k}] (any leading dimensions, then the \
                 {k} input features)"
            ),
            Problem::InputDevice { layer, input } => {
                write!(f, "the input is on {input}, the layer's weights on {layer}")
            }
            Problem::Kernel { kernel, error } => write!(f, "{kernel}: {error}"),
        }
    }
}

impl fmt::Display for Fp8LinearError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Fp8Linear `{}`: {}", self.layer, self.problem)
    }
}

impl std::error::Error for Fp8LinearError {}
