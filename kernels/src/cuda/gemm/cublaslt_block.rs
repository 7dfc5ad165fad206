//! cuBLASLt's block-scaled FP8 GEMM on Hopper (sm_90 exactly, cuBLASLt >= 12.9): 1x128
//! activation scales (`VEC128_32F`) and 128x128 weight scales (`BLK128x128_32F`).
//!
//! Scale layouts cuBLASLt expects (checked against the f64 reference with N != K and
//! non-uniform scales in the GPU tests): activation scales `[M, ceil(K/128)]` with M the
//! fast index (`s[kb * M + m]`); weight scales `[ceil(N/128), ceil(K/128)]` row-major with the
//! row length rounded up to a multiple of 4. K is padded with zeros to a multiple of 128.

use fp8_linear_core::{
    fp8_kernel, BuildCtx, DType, Fp8Kernel, KernelError, LayerConfig, LayerWeights, Unsupported,
};
use fp8_linear_cuda::cublaslt::ScaleMode;

use crate::cuda::quant::ScaleOrder;
use crate::cuda::skeleton::block::{block_checks, ActLayout, BlockLayer, Blocks, WeightLayout};
use crate::cuda::skeleton::error::{be, be_at};
use crate::cuda::skeleton::layer::{skeleton_calls, Call, GpuLayer, Io, Recipe};
use crate::cuda::skeleton::lt_gemm::{lt_layer_checks, LtGemm};
use crate::cuda::skeleton::scratch::Scratch;

const NAME: &str = CublasLtBlockFp8::NAME;

/// The order of the activation scales cuBLASLt's VEC128 mode reads (M fastest; `apply`
/// uses it with M padded to [`M_MULTIPLE`]).
pub const ACT_SCALE_ORDER: ScaleOrder = ScaleOrder::ColMajor;

/// cuBLASLt's VEC128 / BLK128x128 FP8 GEMM takes only M that are multiples of 4 (the
/// activation scale columns must be 16-byte aligned); other M run padded to this multiple
/// into a scratch output, whose first M rows are then copied out.
pub const M_MULTIPLE: usize = 4;

/// cuBLASLt block-scaled FP8 GEMM (Hopper): bf16 output, N a multiple of 16, no bias.
#[fp8_kernel(platform = Cuda, priority = 2, arch = sm90, backend = cublaslt)]
pub struct CublasLtBlockFp8 {
    layer: GpuLayer<State>,
}

struct State {
    /// Weights (K padded to whole 128-blocks) with scales in cuBLASLt's BLK128x128 layout,
    /// activations with M-fastest scales over M padded to [`M_MULTIPLE`].
    block: BlockLayer,
    gemm: LtGemm,
    /// Output for padded M.
    padded_out: Scratch<half::bf16>,
}

impl CublasLtBlockFp8 {
    /// Builds the kernel for a layer on the context's GPU (nothing touches the GPU until
    /// `process_weights`).
    pub fn new(ctx: &BuildCtx<'_>) -> Result<Self, KernelError> {
        Ok(CublasLtBlockFp8 {
            layer: GpuLayer::new(NAME, ctx)?,
        })
    }
}

/// cuBLASLt's weight layout: K padded to whole 128-blocks (the block-scaled GEMM then never
/// sees a partial group), scales in BLK128x128 order ([`blk128_weight_scales`]).
pub const BLK128_LAYOUT: WeightLayout = WeightLayout {
    name: "block FP8: rows padded to 128 bytes, BLK128x128 scales (rows of 4)",
    pad: 128,
    scales: blk128_weight_scales,
};

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
        block_checks(config, Blocks::Only128)?;
        if !matches!(config.output_dtype, DType::Bf16) {
            return Err(Unsupported::new(
                "cuBLASLt block-scaled FP8 writes bf16 output only",
            ));
        }
        lt_layer_checks(config)
    }

    fn process_weights(&mut self, weights: &LayerWeights<'_>) -> Result<(), KernelError> {
        let l = &self.layer;
        let (gpu, config) = (&l.gpu, &l.config);
        let act = ActLayout::ColMajor { rows: M_MULTIPLE };
        let w = (weights, l.shared.as_ref());
        let block = BlockLayer::load(NAME, gpu, config, w, BLK128_LAYOUT, act)?;
        let modes = (ScaleMode::Blk128x128, ScaleMode::Vec128);
        let gemm = LtGemm::new(gpu, config, block.weights.w.ldk, modes).map_err(be(NAME))?;
        self.layer.set(State {
            block,
            gemm,
            padded_out: Scratch::default(),
        });
        Ok(())
    }

    skeleton_calls!(layer, |_| ());
}

impl Recipe for State {
    type Knobs = ();
    type Plan = ();
    /// The padded output's address when M is not a multiple of [`M_MULTIPLE`].
    type Scratch = Option<u64>;

    fn plan(&mut self, _: Call<'_>, _: &()) -> Result<(), KernelError> {
        Ok(())
    }

    /// The activation scratch, the GEMM plan for M padded to [`M_MULTIPLE`], and the padded
    /// output when M is not a multiple.
    fn reserve(&mut self, call: Call<'_>, _: &()) -> Result<Option<u64>, KernelError> {
        let (c, gpu, m) = (call.c, call.gpu, call.m);
        let lt = |e| be_at(NAME, m)(e);
        let (_, act_scales) = self.block.reserve(c, gpu, m).map_err(lt)?;
        let mp = self.block.rows(m);
        let ws = self.block.weights.scales.ptr();
        self.gemm.plan(mp, ws, act_scales).map_err(lt)?;
        if mp == m {
            return Ok(None);
        }
        Ok(Some(self.padded_out.get(gpu, mp * c.n).map_err(lt)?.ptr()))
    }

    fn enqueue(
        &mut self,
        call: Call<'_>,
        _: (),
        padded: Option<u64>,
        io: Io,
    ) -> Result<(), KernelError> {
        let (c, gpu) = (call.c, call.gpu);
        let m = io.0;
        // Rows m..mp of the padded activations are whatever the scratch holds: they only
        // reach output rows that are never copied out.
        let call = self.block.quantize(NAME, c, gpu, io)?;
        let mp = call.rows;
        let w = &self.block.weights;
        let (wc, ws) = (w.w.codes.ptr(), w.scales.ptr());
        let target = padded.unwrap_or(call.out);
        // SAFETY: weight n*ldk bytes, scales in BLK128x128 layout, activations mp*ldk bytes,
        // activation scales kb*mp floats, output mp*n bf16 (the scratch when padded, else
        // the output, checked by check_io); all on this GPU.
        unsafe { self.gemm.run(mp, wc, ws, call.codes, call.scales, target) }
            .map_err(be_at(NAME, m))?;
        if mp != m {
            // SAFETY: the first m rows (m*n bf16, contiguous) of the scratch into the output,
            // which holds m*n elements (check_io); same stream.
            unsafe { gpu.copy_async(call.out, target, m * c.n * 2) }
                .map_err(|e| be(NAME)(e.within("copying the padded output")))?;
        }
        Ok(())
    }

    fn keep_retired(&mut self, max_m: usize) {
        self.block.keep_retired();
        self.padded_out.keep_retired();
        self.gemm.pin_up_to(self.block.rows(max_m));
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
