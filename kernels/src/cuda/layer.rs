//! [`GpuLayer`]: what every CUDA kernel holds — its layer, the GPU handle it was built with
//! (whose stream every launch goes to) and the state `process_weights` leaves for `apply`.

use std::sync::Arc;

use fp8_linear_core::kernel::processed;
use fp8_linear_core::{BuildCtx, KernelError, LayerConfig, SharedWeights};
use fp8_linear_cuda::Gpu;

use super::device_io::gpu_of;

/// A CUDA kernel's layer, GPU and processed state `S`.
pub struct GpuLayer<S> {
    /// The layer.
    pub config: LayerConfig,
    /// The GPU handle from the build context.
    pub gpu: Arc<Gpu>,
    /// The layer's store of weight copies its kernels share (from the build context; None
    /// for a kernel built alone).
    pub shared: Option<Arc<SharedWeights>>,
    state: Option<S>,
}

impl<S> GpuLayer<S> {
    /// The layer and GPU of a build context, nothing processed yet (nothing touches the GPU).
    pub fn new(kernel: &'static str, ctx: &BuildCtx<'_>) -> Result<Self, KernelError> {
        Ok(GpuLayer {
            config: *ctx.config(),
            gpu: gpu_of(kernel, ctx)?,
            shared: ctx.shared().cloned(),
            state: None,
        })
    }

    /// Drops the processed state (frees its device memory before new weights are loaded).
    pub fn clear(&mut self) {
        self.state = None;
    }

    /// Stores the state `process_weights` built.
    pub fn set(&mut self, state: S) {
        self.state = Some(state);
    }

    /// The layer, the GPU and the processed state, or
    /// [`KernelError::WeightsNotProcessed`] before `process_weights`.
    pub fn processed(
        &mut self,
        kernel: &'static str,
    ) -> Result<(&LayerConfig, &Arc<Gpu>, &mut S), KernelError> {
        let state = processed(&mut self.state, kernel)?;
        Ok((&self.config, &self.gpu, state))
    }
}
