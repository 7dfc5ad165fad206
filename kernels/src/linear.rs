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
/// for); inputs and outputs must be device memory of that GPU, ready on that stream. On the
/// CPU target they are host slices.
///
/// ```
/// use fp8_linear::{bf16, DType, LayerConfig, LayerWeights, Linear, Options, Target, Tensor, TensorMut};
///
/// let (n, k) = (128, 256);
/// let cfg = LayerConfig { bias: true, ..LayerConfig::block_128(n, k, DType::Bf16, DType::Bf16) };
/// let codes = vec![0x38u8; n * k]; // e4m3 1.0
/// let scales = [0.5f32, 0.25]; // one multiplier per 128x128 block: [1, 2]
/// let bias = vec![1.0f32; n];
/// let weights = LayerWeights::new(Tensor::fp8(&codes, [n, k]), Tensor::f32(&scales, [1, 2]))
///     .with_bias(Tensor::f32(&bias, [1, n]));
/// let mut layer = Linear::new(&Target::cpu(), &cfg, &weights, &Options::none()).unwrap();
///
/// let x = vec![bf16::ONE; k];
/// let mut y = vec![bf16::ZERO; n];
/// layer.forward(&Tensor::bf16(&x, [1, k]), &mut TensorMut::bf16(&mut y, [1, n])).unwrap();
/// assert_eq!(y[0].to_f32(), 128.0 * 0.5 + 128.0 * 0.25 + 1.0);
///
/// // A wrong output shape is refused before the kernel runs.
/// let mut short = vec![bf16::ZERO; n - 1];
/// let e = layer.forward(&Tensor::bf16(&x, [1, k]), &mut TensorMut::bf16(&mut short, [1, n - 1]));
/// assert!(matches!(e, Err(fp8_linear::KernelError::Shape { what: "output", .. })));
/// ```
pub struct Linear {
    entry: &'static KernelEntry,
    kernel: Box<dyn Fp8Kernel>,
    config: LayerConfig,
}

impl std::fmt::Debug for Linear {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Linear")
            .field("kernel", &self.entry.name)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
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

    /// `output = input @ W^T (+ bias)` for `M` rows: `input` is `[M, K]` in the layer's
    /// input dtype, unquantized (a W8A8 kernel quantizes it itself, per the layer's
    /// activation key); `output` is `[M, N]` in the layer's output dtype.
    ///
    /// Both are checked against the layer before the kernel sees them, so a kernel never
    /// reads or writes past a buffer because of a caller's mistake. The typed errors:
    /// - [`KernelError::Shape`]: `M` is 0, the input is not `[M, K]`, or the output is not
    ///   `[M, N]` for the input's `M`;
    /// - [`KernelError::DType`]: the input or output dtype is not the layer's;
    /// - [`KernelError::NonContiguous`]: a view is not contiguous row-major;
    /// - [`KernelError::BufferTooSmall`]: a buffer (host slice, or device allocation by its
    ///   byte size) holds fewer elements than the view reaches.
    ///
    /// The kernel itself then reports what only it can know (host memory handed to a GPU
    /// kernel, a device pointer of another GPU, a CUDA launch failure) as [`KernelError::Device`],
    /// [`KernelError::Cuda`] or [`KernelError::Backend`]. On a GPU target the call
    /// enqueues on the target's stream and returns without waiting; the output is ready
    /// once that stream reaches this point.
    pub fn forward(
        &mut self,
        input: &Tensor<'_>,
        output: &mut TensorMut<'_>,
    ) -> Result<(), KernelError> {
        fp8_linear_core::validate::check_io(&self.config, input, output)?;
        self.kernel.apply(input, output)
    }

    /// Makes `forward` ready for every M from 1 to `max_m`, so that such a call allocates
    /// nothing, makes no plan and never synchronizes, and can be captured into a CUDA graph
    /// (see [`Fp8Kernel::prepare`]). A GPU layer that was neither prepared nor run at an M
    /// returns [`KernelError::NotPrepared`] for a call at that M while its stream is being
    /// captured; CPU layers have nothing to prepare. Cost: the scratch for the largest of
    /// those calls, and for the cuBLASLt kernels a plan per M (host work: descriptors and
    /// one heuristic query each).
    pub fn prepare(&mut self, max_m: usize) -> Result<(), KernelError> {
        self.kernel.prepare(max_m)
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
