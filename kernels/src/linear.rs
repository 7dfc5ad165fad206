//! A ready-to-use linear layer: select, construct, process weights, apply.

use fp8_linear_core::tuning::device_key;
use fp8_linear_core::{
    Fp8Kernel, KernelEntry, KernelError, KernelOptions, LayerConfig, LayerWeights, Options,
    Registry, SelectError, Tensor, TensorMut, TuningFile,
};

use crate::target::Target;

/// Why a [`Linear`] could not be built.
#[derive(Debug, thiserror::Error)]
pub enum LinearError {
    /// No kernel fits (the error lists every candidate's reason).
    #[error(transparent)]
    Select(#[from] SelectError),
    /// The chosen kernel failed to construct or to process the weights.
    #[error(transparent)]
    Kernel(#[from] KernelError),
}

/// One FP8 linear layer bound to the kernel selected for a target.
///
/// On a GPU, the layer's weights live on the target's context and every `forward` enqueues
/// on the target's stream (the one rule for streams: a layer runs on the stream it was built
/// for); inputs and outputs must be device memory of that GPU, ready on that stream.
pub struct Linear {
    entry: &'static KernelEntry,
    kernel: Box<dyn Fp8Kernel>,
    config: LayerConfig,
}

impl Linear {
    /// Selects a kernel from the built-in tables for the target's device, builds it there
    /// and processes the weights.
    pub fn new(
        target: &Target,
        config: &LayerConfig,
        weights: &LayerWeights<'_>,
        options: &Options,
    ) -> Result<Self, LinearError> {
        Self::with_registry(&crate::tables::BUILTIN, target, config, weights, options)
    }

    /// Like [`Linear::new`], with your own tables.
    pub fn with_registry(
        registry: &Registry,
        target: &Target,
        config: &LayerConfig,
        weights: &LayerWeights<'_>,
        options: &Options,
    ) -> Result<Self, LinearError> {
        let entry = registry
            .select(target.device(), config, &options.overrides)?
            .entry;
        Self::with_entry(entry, target, config, weights, &options.kernel)
    }

    /// Like [`Linear::new`], but a measured autotune winner for this device, layer and M
    /// bucket goes first (see [`TuningFile`]); without one, the static order.
    pub fn new_tuned(
        target: &Target,
        config: &LayerConfig,
        m: usize,
        tuning: &TuningFile,
        weights: &LayerWeights<'_>,
        options: &Options,
    ) -> Result<Self, LinearError> {
        let device = target.device();
        let key = device_key(device);
        let entry = crate::tables::BUILTIN
            .select_tuned(device, &key, config, m, tuning, &options.overrides)?
            .entry;
        Self::with_entry(entry, target, config, weights, &options.kernel)
    }

    /// Builds a specific kernel for the layer on the target (no selection; the kernel must
    /// still be able to run on the target's device).
    pub fn with_entry(
        entry: &'static KernelEntry,
        target: &Target,
        config: &LayerConfig,
        weights: &LayerWeights<'_>,
        options: &KernelOptions,
    ) -> Result<Self, LinearError> {
        let mut kernel = entry.build(&target.build_ctx(config, options))?;
        kernel.process_weights(weights)?;
        Ok(Linear {
            entry,
            kernel,
            config: *config,
        })
    }

    /// `output = input @ W^T (+ bias)`. The input `[M, K]` and output `[M, N]` are checked
    /// against the layer (shapes, dtypes, contiguity, buffer lengths) before the kernel sees
    /// them.
    pub fn forward(
        &mut self,
        input: &Tensor<'_>,
        output: &mut TensorMut<'_>,
    ) -> Result<(), KernelError> {
        fp8_linear_core::validate::check_io(&self.config, input, output)?;
        self.kernel.apply(input, output)
    }

    /// The kernel's entry.
    pub fn entry(&self) -> &'static KernelEntry {
        self.entry
    }

    /// The layer config.
    pub fn config(&self) -> &LayerConfig {
        &self.config
    }
}
