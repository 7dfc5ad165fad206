//! What the cuBLASLt kernels share: the layer checks of cuBLASLt's FP8 GEMM and
//! [`LtGemm`], a layer's GEMM with its cuBLASLt handle and plans by M.

use std::sync::Arc;

use fp8_linear_core::{DType, LayerConfig, Unsupported};
use fp8_linear_cuda::cublaslt::{Fp8GemmPlan, Fp8GemmShape, Lt, ScaleMode};
use fp8_linear_cuda::{CudaError, Gpu};

use super::plans_by_m::PlansByM;

/// The checks every cuBLASLt FP8 layer ends with: N a multiple of 16, no bias.
pub const fn lt_layer_checks(config: &LayerConfig) -> Result<(), Unsupported> {
    if !config.n.is_multiple_of(16) {
        return Err(Unsupported::new("N must be a multiple of 16").with("N", config.n as u64));
    }
    if config.bias {
        return Err(Unsupported::new(
            "bias is not supported (no epilogue wired)",
        ));
    }
    Ok(())
}

/// A layer's cuBLASLt FP8 GEMM `out[m, n] = act[m, ldk] @ weight[n, ldk]^T` with fixed
/// scale modes (weight, activation): the GPU handle's cuBLASLt handle and a plan per M.
///
/// Plans are made on first use of an M ([`LtGemm::plan`]); making one is refused while the
/// stream is being captured. Plans for M up to [`LtGemm::pin_up_to`] are never dropped;
/// beyond that at most 64 others are kept ([`PlansByM`]).
pub struct LtGemm {
    lt: Arc<Lt>,
    gpu: Arc<Gpu>,
    n: usize,
    ldk: usize,
    out: DType,
    modes: (ScaleMode, ScaleMode),
    plans: PlansByM<Fp8GemmPlan>,
}

impl LtGemm {
    /// The GEMM of a layer whose operands have rows of `ldk` bytes.
    pub fn new(
        gpu: &Arc<Gpu>,
        config: &LayerConfig,
        ldk: usize,
        modes: (ScaleMode, ScaleMode),
    ) -> Result<Self, CudaError> {
        Ok(LtGemm {
            lt: gpu.cublaslt()?,
            gpu: gpu.clone(),
            n: config.n,
            ldk,
            out: config.output_dtype,
            modes,
            plans: PlansByM::default(),
        })
    }

    /// Keeps the plans of every M up to `m` from now on (`prepare`).
    pub fn pin_up_to(&mut self, m: usize) {
        self.plans.pin_up_to(m);
    }

    /// Makes the plan for `m` rows (and the stream's cuBLASLt workspace) ready, unless it
    /// is: host work that a stream being captured must not see, so then refused with
    /// [`CudaError::Capturing`]. `weight_scales` and `act_scales` are the scale addresses
    /// the calls will use (cuBLASLt's heuristic wants them for vector and block modes).
    pub fn plan(&mut self, m: usize, weight_scales: u64, act_scales: u64) -> Result<(), CudaError> {
        self.planned(m, weight_scales, act_scales).map(|_| ())
    }

    /// The plan for `m` rows, made first if need be (see [`LtGemm::plan`]).
    fn planned(
        &mut self,
        m: usize,
        weight_scales: u64,
        act_scales: u64,
    ) -> Result<&mut Fp8GemmPlan, CudaError> {
        let (lt, gpu) = (&self.lt, &self.gpu);
        let shape = Fp8GemmShape {
            m,
            n: self.n,
            k: self.ldk,
            ld_weight: self.ldk,
            ld_act: self.ldk,
            out: self.out,
            weight_scale: self.modes.0,
            act_scale: self.modes.1,
        };
        self.plans.get_or_make(m, || {
            gpu.refuse_in_capture(|| format!("make a cuBLASLt plan for M = {m}"))?;
            lt.reserve_workspace(gpu.raw_stream())?;
            Fp8GemmPlan::new(lt, shape, weight_scales, act_scales)
        })
    }

    /// Runs the GEMM for `m` rows on the layer's stream, planning it first if need be (see
    /// [`LtGemm::plan`]).
    ///
    /// # Safety
    /// As for [`Fp8GemmPlan::run`]: every address must cover what the GEMM reads or writes
    /// for `m` rows in the scale modes, on the GPU of the handle, ready on its stream.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn run(
        &mut self,
        m: usize,
        weight: u64,
        weight_scales: u64,
        act: u64,
        act_scales: u64,
        out: u64,
    ) -> Result<(), CudaError> {
        let stream = self.gpu.raw_stream();
        let plan = self.planned(m, weight_scales, act_scales)?;
        // SAFETY: the caller vouches for every address; the stream is the layer's.
        unsafe { plan.run(weight, weight_scales, act, act_scales, out, stream) }
    }
}
