//! A ready-to-use linear layer: select, construct, process weights, apply.

use fp8_linear_core::tuning::device_key;
use fp8_linear_core::{
    find_table, select_in, select_tuned, Device, Fp8Kernel, KernelEntry, KernelError, LayerConfig,
    LayerWeights, Overrides, Registry, SelectError, Tensor, TensorMut, Tuning,
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

    /// Like [`Linear::new`], but a measured autotune winner for this device, layer and M
    /// bucket goes first (see [`Tuning`]); without one, the static order.
    pub fn new_tuned(
        device: &Device,
        config: &LayerConfig,
        m: usize,
        tuning: &Tuning,
        weights: &LayerWeights<'_>,
        overrides: &Overrides,
    ) -> Result<Self, LinearError> {
        let family = config.family();
        let table =
            find_table(crate::tables::BUILTIN, device.platform, family).ok_or_else(|| {
                SelectError::NoTable {
                    platform: device.platform.to_string(),
                    family: family.to_string(),
                    device: device.to_string(),
                    config: config.to_string(),
                }
            })?;
        let key = device_key(device);
        let entry = select_tuned(table, device, &key, config, m, tuning, overrides)?.entry;
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
