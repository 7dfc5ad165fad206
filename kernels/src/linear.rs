//! A ready-to-use linear layer: select, construct, process weights, apply.

use fp8_linear_core::{
    select_in, Device, Fp8Kernel, KernelEntry, KernelError, LayerConfig, LayerWeights, Overrides,
    Registry, SelectError, Tensor, TensorMut,
};

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

/// One FP8 linear layer bound to the kernel selected for a device.
pub struct Linear {
    entry: &'static KernelEntry,
    kernel: Box<dyn Fp8Kernel>,
    config: LayerConfig,
}

impl Linear {
    /// Selects a kernel from the built-in tables for `device`, builds it and processes the
    /// weights.
    pub fn new(
        device: &Device,
        config: &LayerConfig,
        weights: &LayerWeights<'_>,
        overrides: &Overrides,
    ) -> Result<Self, LinearError> {
        Self::with_registry(crate::tables::BUILTIN, device, config, weights, overrides)
    }

    /// Like [`Linear::new`], with your own tables.
    pub fn with_registry(
        registry: &Registry,
        device: &Device,
        config: &LayerConfig,
        weights: &LayerWeights<'_>,
        overrides: &Overrides,
    ) -> Result<Self, LinearError> {
        let entry = select_in(registry, device, config, overrides)?.entry;
        Self::with_entry(entry, config, weights)
    }

    /// Builds a specific kernel for the layer (no selection).
    pub fn with_entry(
        entry: &'static KernelEntry,
        config: &LayerConfig,
        weights: &LayerWeights<'_>,
    ) -> Result<Self, LinearError> {
        let mut kernel = entry.build(config)?;
        kernel.process_weights(weights)?;
        Ok(Linear {
            entry,
            kernel,
            config: *config,
        })
    }

    /// `output = input @ W^T (+ bias)`.
    pub fn forward(
        &mut self,
        input: &Tensor<'_>,
        output: &mut TensorMut<'_>,
    ) -> Result<(), KernelError> {
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
