//! The skeleton every CUDA kernel runs on: [`GpuLayer`] (its layer, the GPU handle it was
//! built with, whose stream every launch goes to, the layer's shared weights and the state
//! `process_weights` leaves) and [`Recipe`], what makes one kernel different. A call is
//! [`GpuLayer::apply`]: check (rows, device memory) -> plan -> reserve -> enqueue (the activation quantization
//! and the GEMM), so that a call refused during a CUDA graph capture has enqueued nothing;
//! [`GpuLayer::prepare`] makes the plans and scratch of every M once.

use std::sync::Arc;

use fp8_linear_core::kernel::processed;
use fp8_linear_core::validate::check_quantized_io;
use fp8_linear_core::{
    BuildCtx, DeviceMemory, KernelError, LayerConfig, SharedWeights, Tensor, TensorMut,
};
use fp8_linear_cuda::Gpu;

use super::device_io::{check_row_count, device_in, device_io, device_out, gpu_of, same_device};
use super::error::be_at;
use super::scratch::Scratch;

/// A call's checked input and output: M (`.0`), the input's device memory (`.1`: the
/// unquantized activations, or the codes `[M, K]` of a pre-quantized call), the output's
/// (`.2`), and the scales of a pre-quantized call (`.3`, in the public row-major layout of
/// `validate::activation_scale_shape`; None when the kernel quantizes `.1` itself). A kernel
/// whose GEMM reads `.1` directly as unquantized input must check `.3` first; the block
/// kernels hand the whole `Io` to [`BlockLayer::quantize`](super::block::BlockLayer::quantize),
/// which takes either.
#[derive(Copy, Clone, Debug)]
pub struct Io(
    pub usize,
    pub DeviceMemory,
    pub DeviceMemory,
    pub Option<DeviceMemory>,
);

impl Io {
    /// The codes and scales of a pre-quantized call.
    pub fn pre_quantized(&self) -> Option<(DeviceMemory, DeviceMemory)> {
        self.3.map(|s| (self.1, s))
    }
}

/// What every step of a call sees: the layer, its GPU and the call's rows.
#[derive(Copy, Clone)]
pub struct Call<'a> {
    /// The layer.
    pub c: &'a LayerConfig,
    /// The layer's GPU (whose stream the call is enqueued on).
    pub gpu: &'a Arc<Gpu>,
    /// The call's rows.
    pub m: usize,
}

impl Call<'_> {
    /// The error for a call of more rows than `kernel`'s launch can number: `expected` says
    /// what it takes (`"[M <= 65535 * 128, K]"`).
    pub fn too_many_rows(&self, expected: &'static str) -> KernelError {
        KernelError::shape("input", expected, format!("[{}, {}]", self.m, self.c.k))
    }

    /// The call's split-K workspace of `len` floats in `ws` (grown only when too small,
    /// which is refused while the stream is being captured): its address, 0 when `len` is
    /// 0; `len` None (its size overflows) is an error naming the `splits`.
    pub fn workspace(
        &self,
        kernel: &'static str,
        ws: &mut Scratch<f32>,
        len: Option<usize>,
        splits: usize,
    ) -> Result<u64, KernelError> {
        let (m, n) = (self.m, self.c.n);
        match len {
            Some(0) => Ok(0),
            Some(len) => Ok(ws.get(self.gpu, len).map_err(be_at(kernel, m))?.ptr()),
            None => Err(KernelError::backend(
                kernel,
                format!("split-K workspace of {splits} x {m} x {n}"),
            )),
        }
    }
}

/// What one CUDA kernel adds to the skeleton, implemented by its processed state: the
/// launch plan of a call, the scratch that call needs and the launch itself. `Knobs` are the
/// kernel's build options that the plan reads (tile heights, split caps).
pub trait Recipe: Send {
    /// The build options the plan reads.
    type Knobs;
    /// The launch of a call (tile variant, grid, K splits).
    type Plan;
    /// What the reservation hands the launch (workspace addresses).
    type Scratch;

    /// The most rows one call takes: more is refused by name before anything else, and
    /// `prepare` stops there.
    const MAX_M: usize = usize::MAX;

    /// Why the kernel cannot run on pre-quantized activations (None: it can, its `enqueue`
    /// takes an [`Io`] with scales); `apply_quantized` refuses with this reason before
    /// anything else.
    const NO_PRE_QUANTIZED: Option<&'static str> = None;

    /// The launch of a call.
    fn plan(&mut self, call: Call<'_>, knobs: &Self::Knobs) -> Result<Self::Plan, KernelError>;

    /// Makes everything the call needs ready (scratch, workspaces, library plans): allocates
    /// only when too small, which is refused while the stream is being captured.
    fn reserve(&mut self, call: Call<'_>, plan: &Self::Plan) -> Result<Self::Scratch, KernelError>;

    /// Enqueues the call on the GPU's stream: the activation quantization (where the kernel
    /// has one outside its GEMM) and the GEMM.
    fn enqueue(
        &mut self,
        call: Call<'_>,
        plan: Self::Plan,
        scratch: Self::Scratch,
        io: Io,
    ) -> Result<(), KernelError>;

    /// Before `prepare` reserves every M up to `max_m`: keep grown buffers alive (graphs
    /// captured before stay valid) and pin the plans of those M.
    fn keep_retired(&mut self, max_m: usize);
}

/// A CUDA kernel's layer, GPU and processed state `S`.
pub struct GpuLayer<S> {
    /// The kernel's name (errors name it).
    pub kernel: &'static str,
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
            kernel,
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
    pub fn processed(&mut self) -> Result<(&LayerConfig, &Arc<Gpu>, &mut S), KernelError> {
        let state = processed(&mut self.state, self.kernel)?;
        Ok((&self.config, &self.gpu, state))
    }
}

impl<S: Recipe> GpuLayer<S> {
    /// One call: check, plan, reserve everything, then enqueue (nothing is enqueued before
    /// every reservation succeeded).
    pub fn apply(
        &mut self,
        knobs: &S::Knobs,
        input: &Tensor<'_>,
        output: &mut TensorMut<'_>,
    ) -> Result<(), KernelError> {
        let kernel = self.kernel;
        let (c, gpu, st) = self.processed()?;
        if input.shape[0] > S::MAX_M {
            return Err(KernelError::shape(
                "input",
                format!("[M, K] with M <= {} (the rows {kernel} takes)", S::MAX_M),
                format!("{:?}", input.shape),
            ));
        }
        // The input and output as device memory of the layer's GPU, against the layer.
        let (m, x, out) = device_io(kernel, c, gpu, input, output)?;
        check_row_count(input, m, c.n)?;
        let call = Call { c, gpu, m };
        let plan = st.plan(call, knobs)?;
        let scratch = st.reserve(call, &plan)?;
        st.enqueue(call, plan, scratch, Io(m, x, out, None))
    }

    /// [`GpuLayer::apply`] on pre-quantized activations (see `Fp8Kernel::apply_quantized`):
    /// the same checks on the codes, scales and output, then the same steps, the scales
    /// handed to `enqueue` in [`Io`]'s `.3`. A kernel with [`Recipe::NO_PRE_QUANTIZED`] is
    /// refused first.
    pub fn apply_quantized(
        &mut self,
        knobs: &S::Knobs,
        (codes, scales): (&Tensor<'_>, &Tensor<'_>),
        output: &mut TensorMut<'_>,
    ) -> Result<(), KernelError> {
        let kernel = self.kernel;
        if let Some(reason) = S::NO_PRE_QUANTIZED {
            return Err(KernelError::PreQuantized {
                kernel,
                reason: reason.into(),
            });
        }
        let (c, gpu, st) = self.processed()?;
        let m = check_quantized_io(c, codes, scales, output)?;
        if m > S::MAX_M {
            return Err(KernelError::shape(
                "codes",
                format!("[M, K] with M <= {} (the rows {kernel} takes)", S::MAX_M),
                format!("{:?}", codes.shape),
            ));
        }
        let q = device_in(kernel, "codes", codes)?;
        let s = device_in(kernel, "scales", scales)?;
        let out = device_out(kernel, "output", output)?;
        for (what, mem) in [("codes", &q), ("scales", &s), ("output", &out)] {
            same_device(what, mem, gpu)?;
        }
        check_row_count(codes, m, c.n)?;
        let call = Call { c, gpu, m };
        let plan = st.plan(call, knobs)?;
        let scratch = st.reserve(call, &plan)?;
        st.enqueue(call, plan, scratch, Io(m, q, out, Some(s)))
    }

    /// Makes every M from 1 to `max_m` (at most [`Recipe::MAX_M`]) ready: its plan and
    /// scratch, so such a call allocates and plans nothing (see `Fp8Kernel::prepare`).
    pub fn prepare(&mut self, knobs: &S::Knobs, max_m: usize) -> Result<(), KernelError> {
        let (c, gpu, st) = self.processed()?;
        let max_m = max_m.min(S::MAX_M);
        st.keep_retired(max_m);
        for m in 1..=max_m {
            let call = Call { c, gpu, m };
            let plan = st.plan(call, knobs)?;
            st.reserve(call, &plan)?;
        }
        Ok(())
    }
}

/// The `apply`, `apply_quantized` and `prepare` of a kernel on the skeleton, inside its
/// `impl Fp8Kernel`: `skeleton_calls!(layer, |k| k.max_splits)` runs them on the `GpuLayer` in the kernel's
/// field `layer` with the knobs the closure reads off the kernel.
macro_rules! skeleton_calls {
    ($layer:ident, $knobs:expr) => {
        fn apply(
            &mut self,
            input: &fp8_linear_core::Tensor<'_>,
            output: &mut fp8_linear_core::TensorMut<'_>,
        ) -> Result<(), fp8_linear_core::KernelError> {
            let knobs = $crate::cuda::skeleton::layer::knobs_of(self, $knobs);
            self.$layer.apply(&knobs, input, output)
        }

        fn apply_quantized(
            &mut self,
            codes: &fp8_linear_core::Tensor<'_>,
            scales: &fp8_linear_core::Tensor<'_>,
            output: &mut fp8_linear_core::TensorMut<'_>,
        ) -> Result<(), fp8_linear_core::KernelError> {
            let knobs = $crate::cuda::skeleton::layer::knobs_of(self, $knobs);
            self.$layer.apply_quantized(&knobs, (codes, scales), output)
        }

        fn prepare(&mut self, max_m: usize) -> Result<(), fp8_linear_core::KernelError> {
            let knobs = $crate::cuda::skeleton::layer::knobs_of(self, $knobs);
            self.$layer.prepare(&knobs, max_m)
        }
    };
}
pub(crate) use skeleton_calls;

/// The knobs `f` reads off `kernel` (for [`skeleton_calls`], where the closure's argument
/// type is inferred from here).
pub fn knobs_of<T, K>(kernel: &T, f: impl Fn(&T) -> K) -> K {
    f(kernel)
}
