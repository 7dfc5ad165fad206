//! The grouped kernel trait: E experts' weights processed once, each call's rows applied to
//! the experts its routing names.

use crate::config::LayerConfig;
use crate::error::{KernelError, Unsupported};
use crate::grouped::{DeviceMasked, GroupedWeights, Routing};
use crate::kernel::KernelName;
use crate::tensor::{Tensor, TensorMut};

/// A grouped FP8 kernel: E experts of one shape (a mixture-of-experts projection). Register
/// one with `#[fp8_kernel(kind = Grouped, ...)]` and give it the same inherent constructor
/// as a linear kernel (`new(&BuildCtx)`, or `new(&BuildCtx, LayerParams<N>)` with
/// `params`); the build context's config is one expert's layer.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is declared `kind = Grouped` but does not implement `Fp8GroupedKernel`",
    label = "a grouped kernel",
    note = "implement `Fp8GroupedKernel` for it, or drop `kind = Grouped` to declare a linear kernel (`Fp8Kernel`)"
)]
pub trait Fp8GroupedKernel: KernelName + Send + 'static {
    /// Whether this kernel can run experts of this config (one expert's layer). Called by
    /// selection for every candidate, so it must be cheap and must not allocate.
    fn can_implement(config: &LayerConfig) -> Result<(), Unsupported>
    where
        Self: Sized;

    /// Converts the experts' weights once. Called once per layer before `apply`.
    fn process_weights(&mut self, weights: &GroupedWeights<'_>) -> Result<(), KernelError>;

    /// Computes, for each row the routing gives expert `e`, `output[row] = input[row] @
    /// W_e^T (+ bias_e)`, times `route_weights[row]` when given (the per-row routing weight,
    /// multiplied in the epilogue). `input` and `output` are 2-D (see [`Routing`]); rows no
    /// expert owns are left as they were. The facade has checked the shapes, dtypes and
    /// routing ([`check_grouped_io`](crate::grouped::check_grouped_io)) before.
    fn apply(
        &mut self,
        input: &Tensor<'_>,
        routing: &Routing<'_>,
        route_weights: Option<&[f32]>,
        output: &mut TensorMut<'_>,
    ) -> Result<(), KernelError>;

    /// A masked call whose counts (and routing weights) the kernel reads from device memory
    /// ([`DeviceMasked`], checked by the facade), so that a CUDA graph can capture it:
    /// `input` `[E * M_max, K]` and `output` `[E * M_max, N]` as for
    /// [`Routing::Masked`]. Only kernels that read the counts on the device take it; the
    /// default refuses ([`KernelError::Backend`]).
    fn apply_masked_on_device(
        &mut self,
        input: &Tensor<'_>,
        routing: &DeviceMasked,
        output: &mut TensorMut<'_>,
    ) -> Result<(), KernelError> {
        let _ = (input, routing, output);
        Err(KernelError::backend(
            self.name(),
            "masked counts in device memory need a GPU kernel that reads them on the device \
             (HopperGroupedFp8, PortableGroupedFp8, MarlinGroupedFp8); pass the counts \
             from the host (Routing::Masked) instead",
        ))
    }
}
