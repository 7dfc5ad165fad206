//! A ready-to-use linear layer: plan (a kernel per range of M), construct, process the
//! weights once into a store the kernels share, apply each call on the kernel for its M.

use std::sync::Arc;

use fp8_linear_core::tuning::device_key;
use fp8_linear_core::{
    Fp8Kernel, KernelEntry, KernelError, KernelOptions, LayerConfig, LayerWeights, Options, Plan,
    Registry, RowRange, SelectError, SharedWeights, Tensor, TensorMut, Tuned, TuningFile,
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

/// One FP8 linear layer bound to the kernels planned for a target: a kernel per range of M
/// (on an H200 our Hopper kernel at M = 1..=64, cuBLASLt block-scaled above), sharing one
/// device copy of the weights where they read the same layout.
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
    plan: Plan,
    /// Per plan range, the index of its kernel in `kernels`.
    route: Vec<(RowRange, usize)>,
    /// The plan's distinct kernels.
    kernels: Vec<(&'static KernelEntry, Box<dyn Fp8Kernel>)>,
    shared: Arc<SharedWeights>,
    config: LayerConfig,
}

impl std::fmt::Debug for Linear {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Linear")
            .field("plan", &self.plan.to_string())
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Linear {
    /// Plans the layer from the built-in tables for the target's device (a kernel per range
    /// of M, see [`Registry::plan`]), builds the plan's kernels there and processes the
    /// weights (once on the device where the kernels read the same layout).
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
        let plan = registry.plan(target.device(), config, &options.overrides)?;
        Self::with_plan(plan, target, config, weights, &options.kernel)
    }

    /// Like [`Linear::new`], but the autotune file's measured winner goes first in each M
    /// bucket it has for this device and layer (see [`TuningFile`]); elsewhere the static
    /// order.
    pub fn new_tuned(
        target: &Target,
        config: &LayerConfig,
        tuning: &TuningFile,
        weights: &LayerWeights<'_>,
        options: &Options,
    ) -> Result<Self, LinearError> {
        let device = target.device();
        let key = device_key(device);
        let tuned = Tuned {
            device_key: &key,
            file: tuning,
        };
        let plan = crate::tables::BUILTIN.plan_tuned(device, config, tuned, &options.overrides)?;
        Self::with_plan(plan, target, config, weights, &options.kernel)
    }

    /// Builds a specific kernel for the layer on the target (no selection; the kernel must
    /// still be able to run on the target's device). The layer serves the rows the kernel
    /// declares (`#[fp8_kernel(rows = ..)]`, every M by default).
    pub fn with_entry(
        entry: &'static KernelEntry,
        target: &Target,
        config: &LayerConfig,
        weights: &LayerWeights<'_>,
        options: &KernelOptions,
    ) -> Result<Self, LinearError> {
        Self::with_plan(Plan::single(entry), target, config, weights, options)
    }

    /// Builds every kernel of `plan` for the layer on the target and processes the
    /// weights into one store the kernels share ([`Linear::shared_weights`]). The kernels
    /// are processed from the last range to the first, so that a kernel that reads any
    /// layout (the decode kernel) finds the copy a kernel of larger M made.
    pub fn with_plan(
        plan: Plan,
        target: &Target,
        config: &LayerConfig,
        weights: &LayerWeights<'_>,
        options: &KernelOptions,
    ) -> Result<Self, LinearError> {
        let shared = SharedWeights::new();
        let entries = plan.kernels();
        let mut kernels = Vec::with_capacity(entries.len());
        for &entry in &entries {
            let ctx = target.build_ctx(config, options).with_shared(&shared);
            kernels.push((entry, entry.build(&ctx)?));
        }
        for (_, kernel) in kernels.iter_mut().rev() {
            kernel.process_weights(weights)?;
        }
        let route = plan
            .ranges
            .iter()
            .map(|r| {
                let i = entries.iter().position(|e| e.name == r.entry.name);
                (r.rows, i.unwrap_or(0))
            })
            .collect();
        Ok(Linear {
            plan,
            route,
            kernels,
            shared,
            config: *config,
        })
    }

    /// `output = input @ W^T (+ bias)` for `M` rows, on the kernel the layer's plan gives
    /// calls of `M` rows: `input` is `[M, K]` in the layer's
    /// input dtype, unquantized (a W8A8 kernel quantizes it itself, per the layer's
    /// activation key); `output` is `[M, N]` in the layer's output dtype.
    ///
    /// Both are checked against the layer before the kernel sees them, so a kernel never
    /// reads or writes past a buffer because of a caller's mistake. The typed errors:
    /// - [`KernelError::Shape`]: `M` is 0, the input is not `[M, K]`, the output is not
    ///   `[M, N]` for the input's `M`, or no kernel of the plan serves `M` rows (a layer
    ///   built with [`Linear::with_entry`] for a kernel of bounded rows);
    /// - [`KernelError::DType`]: the input or output dtype is not the layer's;
    /// - [`KernelError::NonContiguous`]: a view is not contiguous row-major;
    /// - [`KernelError::BufferTooSmall`]: a buffer (host slice, or device allocation by its
    ///   byte size) holds fewer elements than the view reaches.
    ///
    /// The kernel itself then reports what only it can know (host memory handed to a GPU
    /// kernel, a device pointer of another GPU, a CUDA launch failure) as [`KernelError::Device`],
    /// [`KernelError::Cuda`] or [`KernelError::Backend`]. On a GPU target the call
    /// enqueues on the target's stream and returns without waiting; the output is ready
    /// once that stream reaches this point. The lookup of `M` in the plan allocates nothing
    /// and takes no lock.
    pub fn forward(
        &mut self,
        input: &Tensor<'_>,
        output: &mut TensorMut<'_>,
    ) -> Result<(), KernelError> {
        fp8_linear_core::validate::check_io(&self.config, input, output)?;
        let i = self.route_of(input.shape[0], input)?;
        self.kernels[i].1.apply(input, output)
    }

    /// `output = dequant(codes, scales) @ W^T (+ bias)`: [`Linear::forward`] on activations
    /// already quantized per the layer's activation key, skipping the layer's own
    /// quantization (for engines that fuse it into the op before, such as
    /// [`ActivationQuantizer::silu_mul`](crate::ActivationQuantizer::silu_mul)):
    ///
    /// - `codes`: `[M, K]` e4m3 ([`Tensor::fp8`] on the CPU, device memory of
    ///   [`DType::F8E4m3`](crate::DType) on a GPU), row-major;
    /// - `scales`: f32, row-major, `[M, ceil(K / G)]` for 1 x G groups (block checkpoints),
    ///   `[M, 1]` per token, `[1, 1]` per tensor (static or dynamic), see
    ///   [`validate::activation_scale_shape`](crate::validate::activation_scale_shape);
    /// - `output`: `[M, N]` in the layer's output dtype.
    ///
    /// The call runs on the kernel the plan gives `M` rows, as `forward` does, or, when that
    /// kernel has no path for given codes (the decode kernel, which quantizes inside its
    /// GEMM), on the plan's next kernel that serves `M` rows (prepared by
    /// [`Linear::prepare`] for them too). With the codes and scales an
    /// [`ActivationQuantizer`](crate::ActivationQuantizer) of this layer made from an input,
    /// the output equals `forward`'s on that input bit for bit when both run on one kernel
    /// (and is within the same bounds of the reference otherwise). The typed
    /// errors are `forward`'s ([`KernelError::Shape`], [`KernelError::DType`],
    /// [`KernelError::NonContiguous`], [`KernelError::BufferTooSmall`], for `"codes"`,
    /// `"scales"` and `"output"`), and [`KernelError::PreQuantized`] for a weight-only layer
    /// or a kernel that reads unquantized activations (W8A16: Marlin) or has no such path,
    /// naming it. On a GPU the call enqueues on the layer's stream, allocates nothing after
    /// [`Linear::prepare`] and can be captured into a CUDA graph, as `forward`.
    pub fn forward_quantized(
        &mut self,
        codes: &Tensor<'_>,
        scales: &Tensor<'_>,
        output: &mut TensorMut<'_>,
    ) -> Result<(), KernelError> {
        let m = fp8_linear_core::validate::check_quantized_io(&self.config, codes, scales, output)?;
        let i = self.route_of(m, codes)?;
        let first = self.kernels[i].1.apply_quantized(codes, scales, output);
        let Err(KernelError::PreQuantized { .. }) = first else {
            return first;
        };
        // A kernel without a path for given codes (the decode kernel quantizes inside its
        // GEMM) refuses before it enqueues anything: the plan's next kernel that serves `m`
        // rows runs the call instead (cuBLASLt block on an H200 at M = 1).
        for (j, (entry, kernel)) in self.kernels.iter_mut().enumerate() {
            if j == i || !entry.rows.contains(m) {
                continue;
            }
            match kernel.apply_quantized(codes, scales, output) {
                Err(KernelError::PreQuantized { .. }) => continue,
                done => return done,
            }
        }
        first
    }

    /// The index of the kernel serving `m` rows (of `input`, named in the error).
    fn route_of(&self, m: usize, input: &Tensor<'_>) -> Result<usize, KernelError> {
        match self.route.iter().find(|(rows, _)| rows.contains(m)) {
            Some(&(_, i)) => Ok(i),
            None => Err(KernelError::shape(
                "input",
                format!("[M, K] with M in the layer's plan ({})", self.plan),
                format!("{:?}", input.shape),
            )),
        }
    }

    /// Makes `forward` ready for every M from 1 to `max_m`, so that such a call allocates
    /// nothing, makes no plan and never synchronizes, and can be captured into a CUDA graph
    /// (see [`Fp8Kernel::prepare`]): each kernel of the plan up to the last M of its ranges
    /// below `max_m`. A GPU layer that was neither prepared nor run at an M
    /// returns [`KernelError::NotPrepared`] for a call at that M while its stream is being
    /// captured; CPU layers have nothing to prepare. Cost: the scratch for the largest of
    /// those calls, and for the cuBLASLt kernels a plan per M (host work: descriptors and
    /// one heuristic query each).
    pub fn prepare(&mut self, max_m: usize) -> Result<(), KernelError> {
        for (i, (_, kernel)) in self.kernels.iter_mut().enumerate() {
            let up_to = self
                .route
                .iter()
                .filter(|(rows, k)| *k == i && rows.first() <= max_m)
                .map(|(rows, _)| rows.last().min(max_m))
                .max();
            if let Some(m) = up_to {
                kernel.prepare(m)?;
            }
        }
        Ok(())
    }

    /// The layer's kernel per range of M.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// The kernel a call of `m` rows runs (None for an `m` the plan does not serve, such
    /// as 0).
    pub fn entry_for(&self, m: usize) -> Option<&'static KernelEntry> {
        self.plan.entry_for(m)
    }

    /// The device copies of the weights the layer's kernels share: one per layout (CPU
    /// kernels keep their own and add none). A plan whose kernels read one layout holds the
    /// weights once, however many kernels it has.
    pub fn shared_weights(&self) -> &SharedWeights {
        &self.shared
    }

    /// The layer config.
    pub fn config(&self) -> &LayerConfig {
        &self.config
    }
}
