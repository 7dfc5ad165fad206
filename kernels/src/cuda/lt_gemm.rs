//! What the cuBLASLt kernels share: the layer checks of cuBLASLt's FP8 GEMM and
//! [`LtGemm`], a layer's GEMM with its cuBLASLt handle and plans by M.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::sync::Arc;

use fp8_linear_core::{DType, LayerConfig, Unsupported};
use fp8_linear_cuda::cublaslt::{Fp8GemmPlan, Fp8GemmShape, Lt, ScaleMode};
use fp8_linear_cuda::{CudaError, Gpu};

/// Most M values whose cuBLASLt plans are kept per layer (all are dropped when full).
const MAX_PLANS: usize = 64;

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
pub struct LtGemm {
    lt: Arc<Lt>,
    n: usize,
    ldk: usize,
    out: DType,
    modes: (ScaleMode, ScaleMode),
    plans: HashMap<usize, Fp8GemmPlan>,
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
            n: config.n,
            ldk,
            out: config.output_dtype,
            modes,
            plans: HashMap::new(),
        })
    }

    /// Runs the GEMM for `m` rows on `stream`, planning it on first use of this M.
    ///
    /// # Safety
    /// As for [`Fp8GemmPlan::run`]: every address must cover what the GEMM reads or writes
    /// for `m` rows in the scale modes, on the GPU of the handle, ready on `stream`.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn run(
        &mut self,
        m: usize,
        weight: u64,
        weight_scales: u64,
        act: u64,
        act_scales: u64,
        out: u64,
        stream: u64,
    ) -> Result<(), CudaError> {
        if self.plans.len() >= MAX_PLANS && !self.plans.contains_key(&m) {
            self.plans.clear();
        }
        let plan = match self.plans.entry(m) {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(v) => {
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
                v.insert(Fp8GemmPlan::new(
                    &self.lt,
                    shape,
                    weight_scales,
                    act_scales,
                )?)
            }
        };
        // SAFETY: the caller vouches for every address and the stream.
        unsafe { plan.run(weight, weight_scales, act, act_scales, out, stream) }
    }
}
