//! cuBLASLt's block-scaled FP8 GEMM on Hopper (sm_90 exactly, cuBLASLt >= 12.9): 1x128
//! activation scales (`VEC128_32F`) and 128x128 weight scales (`BLK128x128_32F`).
//!
//! Scale layouts cuBLASLt expects (checked against the f64 reference with N != K and
//! non-uniform scales in the GPU tests): activation scales `[M, ceil(K/128)]` with M the
//! fast index (`s[kb * M + m]`); weight scales `[ceil(N/128), ceil(K/128)]` row-major with the
//! row length rounded up to a multiple of 4. K is padded with zeros to a multiple of 128.

use fp8_linear_core::kernel::processed;
use std::collections::HashMap;
use std::sync::Arc;

use fp8_linear_core::{
    fp8_kernel, BuildCtx, DType, Fp8Kernel, KernelError, LayerConfig, LayerWeights, Tensor,
    TensorMut, Unsupported,
};
use fp8_linear_cuda::cublaslt::{Fp8GemmPlan, Fp8GemmShape, Lt, ScaleMode};
use fp8_linear_cuda::cudarc;
use fp8_linear_cuda::{DeviceBuffer, Gpu};

use super::common::{be, device_io, gpu_of, Scratch};
use super::portable::block_128_checks;
use super::quant::{ActQuant, GroupQuantBuffers, ScaleOrder};
use super::weights::DeviceWeights;

const NAME: &str = CublasLtBlockFp8::NAME;

/// The order of the activation scales cuBLASLt's VEC128 mode reads (M fastest; `apply`
/// uses it with M padded to [`M_MULTIPLE`]).
pub const ACT_SCALE_ORDER: ScaleOrder = ScaleOrder::ColMajor;

/// cuBLASLt's VEC128 / BLK128x128 FP8 GEMM takes only M that are multiples of 4 (the
/// activation scale columns must be 16-byte aligned); other M run padded to this multiple
/// into a scratch output, whose first M rows are then copied out.
pub const M_MULTIPLE: usize = 4;

/// Most M values whose cuBLASLt plans are kept per layer.
const MAX_PLANS: usize = 64;

/// cuBLASLt block-scaled FP8 GEMM (Hopper): bf16 output, N a multiple of 16, no bias.
#[fp8_kernel(platform = Cuda, priority = 2, arch = sm90, backend = cublaslt)]
pub struct CublasLtBlockFp8 {
    config: LayerConfig,
    gpu: Arc<Gpu>,
    state: Option<State>,
}

struct State {
    lt: Arc<Lt>,
    w: DeviceWeights,
    /// Weight scales in cuBLASLt's BLK128x128 layout.
    bs: DeviceBuffer<f32>,
    quant: ActQuant,
    plans: HashMap<usize, Fp8GemmPlan>,
    act: GroupQuantBuffers,
    /// Output for padded M.
    padded_out: Scratch<half::bf16>,
}

impl CublasLtBlockFp8 {
    /// Builds the kernel for a layer on the context's GPU (nothing touches the GPU until
    /// `process_weights`).
    pub fn new(ctx: &BuildCtx<'_>) -> Result<Self, KernelError> {
        Ok(CublasLtBlockFp8 {
            config: *ctx.config(),
            gpu: gpu_of(NAME, ctx)?,
            state: None,
        })
    }
}

/// Weight block scales `[nb, kb]` (row-major) in cuBLASLt's BLK128x128 layout: rows of
/// `kb` rounded up to 4, zero-padded.
pub fn blk128_weight_scales(scales: &[f32], nb: usize, kb: usize) -> Vec<f32> {
    let ld = kb.div_ceil(4) * 4;
    let mut out = vec![0f32; nb * ld];
    for (dst, src) in out.chunks_mut(ld).zip(scales.chunks(kb)) {
        dst[..kb].copy_from_slice(src);
    }
    out
}

impl Fp8Kernel for CublasLtBlockFp8 {
    fn can_implement(config: &LayerConfig) -> Result<(), Unsupported> {
        block_128_checks(config)?;
        if !matches!(config.output_dtype, DType::Bf16) {
            return Err(Unsupported::new(
                "cuBLASLt block-scaled FP8 writes bf16 output only",
            ));
        }
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

    fn process_weights(&mut self, weights: &LayerWeights<'_>) -> Result<(), KernelError> {
        let c = self.config;
        // K padded to whole 128-blocks: the block-scaled GEMM then never sees a partial group.
        let gpu = self.gpu.clone();
        let w = DeviceWeights::load_padded(NAME, &gpu, &c, weights, 128)?;
        let lt = gpu.cublaslt().map_err(be(NAME))?;
        let (nb, kb) = (c.n.div_ceil(128), c.k.div_ceil(128));
        let bs = DeviceBuffer::from_host(&gpu, &blk128_weight_scales(&w.host_scales, nb, kb))
            .map_err(be(NAME))?;
        let quant = ActQuant::new(&gpu).map_err(be(NAME))?;
        self.state = Some(State {
            lt,
            w,
            bs,
            quant,
            plans: HashMap::new(),
            act: GroupQuantBuffers::default(),
            padded_out: Scratch::default(),
        });
        Ok(())
    }

    fn apply(&mut self, input: &Tensor<'_>, output: &mut TensorMut<'_>) -> Result<(), KernelError> {
        let c = self.config;
        let gpu = self.gpu.clone();
        let st = processed(&mut self.state, NAME)?;
        let (m, x, out) = device_io(NAME, &c, &gpu, input, output)?;
        let (k, ldk) = (c.k, st.w.ldk);
        let stream = gpu.raw_stream();
        let mp = m.div_ceil(M_MULTIPLE) * M_MULTIPLE;
        // Rows m..mp of the padded activations are whatever the scratch holds: they only
        // reach output rows that are never copied out.
        // SAFETY: x holds the m * k input elements (checked by device_io) on this GPU.
        let (q, a_s) = unsafe {
            st.act.quantize(
                &st.quant,
                &gpu,
                x.ptr,
                c.input_dtype,
                (m, k, mp, ldk),
                ScaleOrder::ColMajorLd(mp),
            )
        }
        .map_err(be(NAME))?;
        if !st.plans.contains_key(&mp) {
            if st.plans.len() >= MAX_PLANS {
                st.plans.clear();
            }
            let shape = Fp8GemmShape {
                m: mp,
                n: c.n,
                k: ldk,
                ld_weight: ldk,
                ld_act: ldk,
                out: c.output_dtype,
                weight_scale: ScaleMode::Blk128x128,
                act_scale: ScaleMode::Vec128,
            };
            let plan = Fp8GemmPlan::new(&st.lt, shape, st.bs.ptr(), a_s).map_err(be(NAME))?;
            st.plans.insert(mp, plan);
        }
        let target = if mp == m {
            out.ptr
        } else {
            st.padded_out.get(&gpu, mp * c.n).map_err(be(NAME))?.ptr()
        };
        let plan = st.plans.get_mut(&mp).expect("inserted above");
        // SAFETY: weight n*ldk bytes, scales in BLK128x128 layout, activations mp*ldk bytes,
        // activation scales kb*mp floats, output mp*n bf16 (the scratch when padded, else
        // the output, checked by check_io); all on this GPU.
        unsafe { plan.run(st.w.codes.ptr(), st.bs.ptr(), q, a_s, target, stream) }
            .map_err(be(NAME))?;
        if mp != m {
            // SAFETY: the first m rows (m*n bf16, contiguous) of the scratch into the output,
            // which holds m*n elements (check_io); same stream.
            unsafe {
                cudarc::driver::result::memcpy_dtod_async(
                    out.ptr,
                    target,
                    m * c.n * 2,
                    stream as cudarc::driver::sys::CUstream,
                )
            }
            .map_err(|e| KernelError::backend(NAME, format!("copying the padded output: {e:?}")))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weight_scale_rows_are_padded_to_four() {
        // nb = 2, kb = 5 -> rows of 8
        let s: Vec<f32> = (0..10).map(|v| v as f32 + 1.0).collect();
        let out = blk128_weight_scales(&s, 2, 5);
        assert_eq!(out.len(), 16);
        assert_eq!(&out[..8], &[1.0, 2.0, 3.0, 4.0, 5.0, 0.0, 0.0, 0.0]);
        assert_eq!(&out[8..], &[6.0, 7.0, 8.0, 9.0, 10.0, 0.0, 0.0, 0.0]);
        // kb already a multiple of 4: unchanged
        assert_eq!(blk128_weight_scales(&s[..8], 2, 4), s[..8].to_vec());
    }
}
