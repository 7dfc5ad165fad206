//! A ready-to-use grouped (mixture-of-experts) layer: E experts of one shape, planned from
//! the grouped tables like a linear layer, each call's rows routed to their experts.

use fp8_linear_core::grouped::{
    check_grouped_io, DeviceMasked, Fp8GroupedKernel, GroupedWeights, Routing,
};
use fp8_linear_core::validate::check_io;
use fp8_linear_core::{
    KernelEntry, KernelError, KernelOptions, LayerConfig, LayerKind, Options, Plan, Registry,
    SelectError, Tensor, TensorMut,
};

use crate::target::Target;

/// Why a [`GroupedLinear`] could not be built.
#[derive(Debug, thiserror::Error)]
pub enum GroupedLinearError {
    /// No grouped kernel fits (the error lists every candidate's reason: on a GPU, for
    /// example, a per-channel layer on an sm_90 GPU, where only Marlin, sm_80..sm_89, takes
    /// grouped per-channel weights).
    #[error(transparent)]
    Select(#[from] SelectError),
    /// The chosen kernel failed to construct or to process the weights, or the registry
    /// holds linear tables.
    #[error(transparent)]
    Kernel(#[from] KernelError),
}

/// E FP8 experts of one shape `[N, K]` (one mixture-of-experts projection: the gate, up or
/// down projection of every expert of a layer), bound to the grouped kernels planned for a
/// target. Each call takes one of the two call forms of [`Routing`]: contiguous (rows
/// sorted by expert, with offsets or per-row expert ids) or masked (`[E * M_max, K]` with
/// per-expert counts), and optional per-row routing weights multiplied into the output.
///
/// ```
/// use fp8_linear::{DType, GroupedLinear, GroupedWeights, LayerConfig, LayerWeights, Options,
///                  Routing, Target, Tensor, TensorMut};
///
/// let (e, n, k) = (2, 128, 128);
/// let cfg = LayerConfig::block_128(n, k, DType::F32, DType::F32);
/// let codes = vec![0x38u8; e * n * k]; // e4m3 1.0, both experts
/// let scales = [0.5f32, 0.25]; // one 128x128 block per expert: [E * 1, 1]
/// let weights = GroupedWeights::new(
///     e,
///     LayerWeights::new(Tensor::fp8(&codes, [e * n, k]), Tensor::f32(&scales, [e, 1])),
/// );
/// let mut moe = GroupedLinear::new(&Target::cpu(), &cfg, &weights, &Options::none()).unwrap();
///
/// // Contiguous: rows 0..1 to expert 0, rows 1..3 to expert 1, the last row padding.
/// let x = vec![1.0f32; 4 * k];
/// let mut y = vec![-1.0f32; 4 * n];
/// let (input, routing) = (Tensor::f32(&x, [4, k]), Routing::Offsets(&[0, 1, 3]));
/// moe.forward(&input, &routing, None, &mut TensorMut::f32(&mut y, [4, n])).unwrap();
/// assert_eq!((y[0], y[n], y[3 * n]), (64.0, 32.0, -1.0));
///
/// // Masked, [E * M_max, K] with M_max = 2: one row of expert 0, none of expert 1, weighted.
/// let routing = Routing::Masked(&[1, 0]);
/// let w = [0.5f32, 0.0, 0.0, 0.0];
/// moe.forward(&input, &routing, Some(&w), &mut TensorMut::f32(&mut y, [4, n])).unwrap();
/// assert_eq!(y[0], 32.0);
///
/// // Bad routing is a typed error naming the problem.
/// let e = moe.forward(&input, &Routing::Offsets(&[0, 3, 2]), None,
///                     &mut TensorMut::f32(&mut y, [4, n]));
/// assert_eq!(e.unwrap_err().to_string(),
///            "offsets out of order: expert 1 starts at row 3 but ends at row 2");
/// ```
pub struct GroupedLinear {
    plan: Plan,
    /// The plan's distinct kernels.
    kernels: Vec<(&'static KernelEntry, Box<dyn Fp8GroupedKernel>)>,
    config: LayerConfig,
    experts: usize,
}

impl std::fmt::Debug for GroupedLinear {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupedLinear")
            .field("plan", &self.plan.to_string())
            .field("config", &self.config)
            .field("experts", &self.experts)
            .finish_non_exhaustive()
    }
}

impl GroupedLinear {
    /// Plans the experts from the built-in grouped tables ([`crate::tables::GROUPED`]) for
    /// the target's device, builds the plan's kernels there and processes the weights.
    /// `config` is one expert's layer; `weights` holds every expert's, stacked.
    pub fn new(
        target: &Target,
        config: &LayerConfig,
        weights: &GroupedWeights<'_>,
        options: &Options,
    ) -> Result<Self, GroupedLinearError> {
        Self::with_registry(&crate::tables::GROUPED, target, config, weights, options)
    }

    /// Like [`GroupedLinear::new`], with your own grouped tables (a registry of linear
    /// tables is [`KernelError::WrongKind`]).
    pub fn with_registry(
        registry: &Registry,
        target: &Target,
        config: &LayerConfig,
        weights: &GroupedWeights<'_>,
        options: &Options,
    ) -> Result<Self, GroupedLinearError> {
        if registry.kind() != LayerKind::Grouped {
            return Err(KernelError::WrongKind {
                kernel: "Registry",
                kind: registry.kind(),
                wanted: LayerKind::Grouped,
            }
            .into());
        }
        let plan = registry.plan(target.device(), config, &options.overrides)?;
        Self::with_plan(plan, target, config, weights, &options.kernel)
    }

    /// Builds a specific grouped kernel for the experts (no selection; it must still run on
    /// the target's device).
    pub fn with_entry(
        entry: &'static KernelEntry,
        target: &Target,
        config: &LayerConfig,
        weights: &GroupedWeights<'_>,
        options: &KernelOptions,
    ) -> Result<Self, GroupedLinearError> {
        Self::with_plan(Plan::single(entry), target, config, weights, options)
    }

    /// Builds every kernel of `plan` for the experts on the target and processes the
    /// weights (checked against `config` first: a stack of another expert count or shape is
    /// [`KernelError::Shape`]).
    pub fn with_plan(
        plan: Plan,
        target: &Target,
        config: &LayerConfig,
        weights: &GroupedWeights<'_>,
        options: &KernelOptions,
    ) -> Result<Self, GroupedLinearError> {
        weights.check(config)?;
        let mut kernels = Vec::new();
        for entry in plan.kernels() {
            let ctx = target.build_ctx(config, options);
            let mut kernel = entry.build_grouped(&ctx)?;
            kernel.process_weights(weights)?;
            kernels.push((entry, kernel));
        }
        Ok(GroupedLinear {
            plan,
            kernels,
            config: *config,
            experts: weights.experts,
        })
    }

    /// For each row the routing gives expert `e`: `output[row] = input[row] @ W_e^T
    /// (+ bias_e)`, times `route_weights[row]` when given, on the kernel the plan gives a
    /// call of this many rows. `input` is `[M_sum, K]` (contiguous) or `[E * M_max, K]`
    /// (masked) in the layer's input dtype, `output` the same rows by `N` in its output
    /// dtype; rows no expert owns are left as they were.
    ///
    /// Everything is checked before a kernel sees it, never a panic: the input and output
    /// as [`crate::Linear::forward`] checks them ([`KernelError::Shape`],
    /// [`KernelError::DType`], ...), and the routing ([`KernelError::Routing`]: offsets out
    /// of order or past the rows, counts above `M_max`, a list of another length than the
    /// experts or rows, expert ids out of range).
    pub fn forward(
        &mut self,
        input: &Tensor<'_>,
        routing: &Routing<'_>,
        route_weights: Option<&[f32]>,
        output: &mut TensorMut<'_>,
    ) -> Result<(), KernelError> {
        let rows = check_grouped_io(
            &self.config,
            self.experts,
            input,
            routing,
            route_weights,
            output,
        )?;
        self.kernel_for(rows, input)?
            .apply(input, routing, route_weights, output)
    }

    /// A masked call whose counts (and routing weights) stay in device memory
    /// ([`DeviceMasked`]): `input` `[E * M_max, K]` and `output` `[E * M_max, N]` on the
    /// layer's GPU, as for [`Routing::Masked`], the kernel reading each expert's count
    /// there (clamped to `0..=M_max`). Nothing is uploaded, so a CUDA graph can capture the
    /// call and replay it with other counts; run it once at this shape before the capture
    /// (the activation scratch is allocated then). The plan's kernel for `E * M_max` rows
    /// must read the counts on the device: the grouped Hopper and portable kernels do; any
    /// other is [`KernelError::Backend`] saying so. Bad shapes or routing buffers are typed
    /// errors ([`DeviceMasked::check`]). Every row of the input is quantized, counted or not.
    pub fn forward_masked_on_device(
        &mut self,
        input: &Tensor<'_>,
        routing: &DeviceMasked,
        output: &mut TensorMut<'_>,
    ) -> Result<(), KernelError> {
        let rows = check_io(&self.config, input, output)?;
        routing.check(self.experts, rows)?;
        self.kernel_for(rows, input)?
            .apply_masked_on_device(input, routing, output)
    }

    /// The plan's kernel for a call of `rows` rows of `input`.
    fn kernel_for(
        &mut self,
        rows: usize,
        input: &Tensor<'_>,
    ) -> Result<&mut Box<dyn Fp8GroupedKernel>, KernelError> {
        let Some(entry) = self.plan.entry_for(rows) else {
            return Err(KernelError::shape(
                "input",
                format!("[M, K] with M in the layer's plan ({})", self.plan),
                format!("{:?}", input.shape),
            ));
        };
        self.kernels
            .iter_mut()
            .find(|(e, _)| e.name == entry.name)
            .map(|(_, k)| k)
            .ok_or_else(|| KernelError::backend("GroupedLinear", "plan kernel not built"))
    }

    /// The layer's kernel per range of rows.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// One expert's layer config.
    pub fn config(&self) -> &LayerConfig {
        &self.config
    }

    /// The number of experts.
    pub fn experts(&self) -> usize {
        self.experts
    }
}
