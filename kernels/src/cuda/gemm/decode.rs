//! Decode block-scaled FP8 on Hopper: M up to [`DECODE_MAX_M`] rows in one launch that
//! quantizes the activations itself, streams the weight once at full bandwidth with FP8
//! `mma.sync` (swap AB: the weight is the 16-row operand) and reduces split K inside the
//! kernel (the last split of a tile sums the partials; no memset, no second launch).
//!
//! An ordinary entry of the block table, after the Hopper kernel's listing for M = 1..=64
//! (which measured faster at M = 1 on every layer of the decode bench, H100 2026-12-06): it
//! serves M = 1 (`rows = 1..=1`) of the block layers the Hopper kernel does not take (weight
//! blocks whose rows are a multiple of 8 other than 32, 64 and 128), and a layer's plan
//! gives larger M to the next kernel of the table. It reads the weights in any block
//! layout, so in a plan with cuBLASLt, Hopper or the portable kernel it uses their device
//! copy: the layer holds the weights once. Built alone it runs any M up to
//! [`DECODE_MAX_M`]. Source: `cu/decode_gemm.cu`.

use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaModule, PushKernelArg};
use fp8_linear_core::{
    fp8_kernel, BuildCtx, Fp8Kernel, KernelError, LayerConfig, LayerWeights, Unsupported,
};
use fp8_linear_cuda::cudarc;
use fp8_linear_cuda::Gpu;

use crate::cuda::quant::{vector_loads, Grouping};
use crate::cuda::skeleton::block::{
    block_checks, tile_indices_fit, weight_block, BlockWeights, Blocks, ROWS_16_ROW_MAJOR,
};
use crate::cuda::skeleton::dtype::float_index;
use crate::cuda::skeleton::error::be;
use crate::cuda::skeleton::launch::{grid, launch};
use crate::cuda::skeleton::layer::{skeleton_calls, Call, GpuLayer, Io, Recipe};
use crate::cuda::skeleton::scratch::Scratch;
use crate::cuda::sources::decode_module;

const NAME: &str = DecodeBlockFp8::NAME;

/// The most rows the decode kernel can take in one call.
pub const DECODE_MAX_M: usize = 16;

/// Weight rows per CTA of the decode kernel (`DROWS` in the source).
const ROWS_PER_CTA: usize = 256;

/// Threads per CTA (`DTHREADS`).
const THREADS: u32 = 512;

/// Most K blocks per split: the split's quantized activations sit in shared memory.
const MAX_KB_PER_SPLIT: usize = 64;

/// Dynamic shared memory of a launch of `rows` (8 or 16) activation rows and `kbps` K
/// blocks per split: codes in rows of `kbps * 128 + 64` bytes, then the f32 scales
/// (`act_stride` in the source).
const fn smem_bytes(rows: usize, kbps: usize) -> usize {
    rows * (kbps * 128 + 64) + rows * kbps * 4
}

/// Block-scaled FP8 for decode on Hopper (sm_90): RxC weight blocks with R a multiple of 8
/// and C = 128, dynamic 1x128 activation groups (f32 or ue8m0 scales), any N and K, f32,
/// f16 or bf16 in and out, bias; up to [`DECODE_MAX_M`] rows a call. In a plan it serves
/// M = 1 (measured on the H200: 1.06-1.46x cuBLASLt block-scaled at M = 1 on the eight
/// DeepSeek-V3-style layers; at M = 4 it wins on half of them, at M = 16 on none).
#[fp8_kernel(platform = Cuda, priority = 1, arch = sm90, backend = decode, rows = 1..=1)]
pub struct DecodeBlockFp8 {
    layer: GpuLayer<State>,
    /// Upper bound on K splits (the build options' `max_splits`, default 32).
    max_splits: usize,
}

struct State {
    /// The layer's weights, in whichever block layout the layer holds them.
    weights: Arc<BlockWeights>,
    /// `decode_gemm_m8` (M <= 8) and `decode_gemm_m16`.
    gemm: [CudaFunction; 2],
    _module: Arc<CudaModule>,
    /// Split-K: one u32 counter per tile (zero between calls), then the f32 partials.
    ws: Scratch<f32>,
    ue8m0: bool,
}

impl DecodeBlockFp8 {
    /// Builds the kernel for a layer on the context's GPU (nothing touches the GPU until
    /// `process_weights`).
    pub fn new(ctx: &BuildCtx<'_>) -> Result<Self, KernelError> {
        Ok(DecodeBlockFp8 {
            layer: GpuLayer::new(NAME, ctx)?,
            max_splits: ctx
                .options()
                .max_splits
                .map_or(32, usize::from)
                .clamp(1, 64),
        })
    }
}

/// Streaming rate one SM reaches alone, bytes per microsecond (a model constant: an SM
/// with more work than the others finishes at this rate while the rest idle).
const SM_RATE: f64 = 35e3;
/// Fixed cost of each CTA an SM runs in turn (activation quantization, pipeline fill,
/// epilogue), microseconds: what made two or more waves measure slower than one.
const WAVE_US: f64 = 2.0;
/// Device-memory rate of the whole GPU, bytes per microsecond.
const HBM_RATE: f64 = 4.3e6;

/// K splits of a decode call: `tiles` CTA tiles of 256 rows, `kb` 128-long K blocks, `sms`
/// SMs, an output of `mn` elements, at most `max` splits (but always enough for at most 64
/// K blocks per split). Returns (splits, K blocks per split). The cost model: the weight
/// streams at the GPU's rate or at one SM's rate over the most-loaded SM's share (one CTA
/// per SM at a time, CTAs spread evenly), whichever is slower, plus a fixed cost per CTA
/// an SM runs;
/// a split adds 0.3 us (the fence and counter) and writes and reads an f32 partial per
/// split and output element at about 3 TB/s.
pub fn plan_decode_splits(
    tiles: usize,
    kb: usize,
    sms: usize,
    mn: usize,
    max: usize,
) -> (usize, usize) {
    let (sms, kb) = (sms.max(1), kb.max(1));
    let total = (tiles * kb * ROWS_PER_CTA * 128) as f64;
    let cost = |s: usize| -> (f64, usize, usize) {
        let per = kb.div_ceil(s);
        let s_eff = kb.div_ceil(per);
        let per_sm = (tiles * s_eff).div_ceil(sms);
        let bytes = (per_sm * per * ROWS_PER_CTA * 128) as f64;
        let mut t = (total / HBM_RATE).max(bytes / SM_RATE) + WAVE_US * per_sm as f64;
        if s_eff > 1 {
            t += 0.3 + (s_eff * mn * 8) as f64 / 3e6;
        }
        (t, s_eff, per)
    };
    let least = kb.div_ceil(MAX_KB_PER_SPLIT);
    let mut best = cost(least);
    for s in least + 1..=kb.min(max.max(least)) {
        let c = cost(s);
        if c.0 < best.0 * 0.97 {
            best = c;
        }
    }
    (best.1, best.2)
}

/// What a decode call launches.
struct Plan {
    tiles: usize,
    splits: usize,
    kb_per_split: usize,
}

impl Plan {
    fn new(c: &LayerConfig, gpu: &Gpu, max_splits: usize, m: usize) -> Plan {
        let tiles = c.n.div_ceil(ROWS_PER_CTA);
        let sms = gpu.device().sm_count.max(1) as usize;
        let (splits, kb_per_split) =
            plan_decode_splits(tiles, c.k.div_ceil(128), sms, m * c.n, max_splits);
        Plan {
            tiles,
            splits,
            kb_per_split,
        }
    }

    /// f32 words of the workspace: the counters (rounded to 4 for 16-byte alignment), then
    /// `splits * m * n` partials; 0 without a split.
    fn ws_len(&self, m: usize, n: usize) -> Option<usize> {
        if self.splits <= 1 {
            return Some(0);
        }
        (m * n)
            .checked_mul(self.splits)?
            .checked_add(self.tiles.div_ceil(4) * 4)
    }
}

impl Fp8Kernel for DecodeBlockFp8 {
    fn can_implement(config: &LayerConfig) -> Result<(), Unsupported> {
        block_checks(config, Blocks::Tiled)?;
        // One 128-long K block per promotion: the K permutation of the MMA fragments stays
        // inside a block of 128 columns.
        if weight_block(config).1 != 128 {
            return Err(Unsupported::new(
                "weight blocks must be 128 columns along K",
            ));
        }
        // Row and tile indices are 32-bit in the kernel.
        tile_indices_fit(config)
    }

    fn process_weights(&mut self, weights: &LayerWeights<'_>) -> Result<(), KernelError> {
        self.layer.clear();
        let l = &self.layer;
        let (c, gpu) = (&l.config, &l.gpu);
        let weights =
            BlockWeights::any(NAME, gpu, c, weights, ROWS_16_ROW_MAJOR, l.shared.as_ref())?;
        let dtypes = (
            float_index("input", c.input_dtype)?,
            float_index("output", c.output_dtype)?,
        );
        let spec = decode_module(weight_block(c), dtypes);
        let (module, _) = gpu.module(&spec).map_err(be(NAME))?;
        let smem = smem_bytes(16, MAX_KB_PER_SPLIT) as u32;
        let load = |name: &str| {
            fp8_linear_cuda::function_with_shared_memory(&module, name, smem).map_err(be(NAME))
        };
        let gemm = [load("decode_gemm_m8")?, load("decode_gemm_m16")?];
        let ue8m0 = Grouping::of(c).is_some_and(|g| g.ue8m0);
        self.layer.set(State {
            weights,
            gemm,
            _module: module,
            ws: Scratch::default(),
            ue8m0,
        });
        Ok(())
    }

    skeleton_calls!(layer, |k| k.max_splits);
}

impl Recipe for State {
    /// The cap on K splits.
    type Knobs = usize;
    type Plan = Plan;
    /// The split-K workspace's address (0 without a split).
    type Scratch = u64;

    const MAX_M: usize = DECODE_MAX_M;

    const NO_PRE_QUANTIZED: Option<&'static str> = Some(
        "it quantizes its activations inside its GEMM (one launch) and has no path for given \
         codes yet; build the layer with the plan's next block kernel for pre-quantized calls",
    );

    fn plan(&mut self, call: Call<'_>, max_splits: &usize) -> Result<Plan, KernelError> {
        let (c, gpu, m) = (call.c, call.gpu, call.m);
        Ok(Plan::new(c, gpu, *max_splits, m))
    }

    /// The split-K workspace (counters, then partials) when split.
    fn reserve(&mut self, call: Call<'_>, p: &Plan) -> Result<u64, KernelError> {
        let len = p.ws_len(call.m, call.c.n);
        call.workspace(NAME, &mut self.ws, len, p.splits)
    }

    fn keep_retired(&mut self, _max_m: usize) {
        self.ws.keep_retired();
    }

    fn enqueue(
        &mut self,
        call: Call<'_>,
        p: Plan,
        ws: u64,
        Io(m, x, out, _): Io,
    ) -> Result<(), KernelError> {
        let (c, gpu) = (call.c, call.gpu);
        let state = self;
        let (n, k) = (c.n, c.k);
        let block = &state.weights;
        let s_ld = block.scale_ld(c);
        let w = &block.w;
        let bias = w.bias.as_ref().map_or(0, |b| b.ptr());
        let (wptr, sptr) = (w.codes.ptr(), block.scales.ptr());
        let counters = ws;
        let part = if ws == 0 {
            0
        } else {
            ws + (p.tiles.div_ceil(4) * 16) as u64
        };
        let vec = vector_loads(x.ptr, c.input_dtype, k) as i32;
        let (mi, ni, ki, ldw, s_ldi) = (m as i32, n as i32, k as i32, w.ldk as i32, s_ld as i32);
        let (kbps, splits) = (p.kb_per_split as i32, p.splits as i32);
        let ue8m0 = state.ue8m0 as i32;
        let f = &state.gemm[usize::from(m > 8)];
        let mut b = gpu.stream().launch_builder(f);
        b.arg(&x.ptr)
            .arg(&wptr)
            .arg(&ldw)
            .arg(&sptr)
            .arg(&s_ldi)
            .arg(&bias)
            .arg(&out.ptr)
            .arg(&part)
            .arg(&counters);
        b.arg(&mi)
            .arg(&ni)
            .arg(&ki)
            .arg(&kbps)
            .arg(&splits)
            .arg(&vec)
            .arg(&ue8m0);
        let smem = smem_bytes(if m > 8 { 16 } else { 8 }, p.kb_per_split) as u32;
        let cfg = grid((p.tiles as u32, p.splits as u32, 1), THREADS, smem);
        // SAFETY: x holds m*k input elements and out m*n outputs (checked by device_io) on
        // this GPU; the weight codes n*ldw bytes with ldw % 16 == 0 (the kernel reads whole
        // 16-byte pieces below ldw), the scales nb*s_ld floats, bias n floats; with a split,
        // ws holds the tiles' counters (zero between calls) then splits*m*n floats. Rows are
        // clamped below N and every store is masked.
        unsafe {
            launch(
                b,
                cfg,
                format_args!("decode_gemm (M={m}, {} splits)", p.splits),
            )
        }
        .map_err(be(NAME))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fp8_linear_core::DType;

    #[test]
    fn splits_fill_the_gpu() {
        // 4096 x 7168 (16 tiles, 56 K blocks): split until most SMs stream.
        let (s, per) = plan_decode_splits(16, 56, 132, 16 * 4096, 32);
        assert!(s >= 4 && 16 * s <= 2 * 132, "{s}");
        assert!(per * s >= 56 && per * (s - 1) < 56);
        // Many tiles (18432 rows) at M = 1: a few splits even out the SMs' shares.
        let (s, _) = plan_decode_splits(72, 56, 132, 18432, 32);
        assert!(s >= 2, "{s}");
        // The cap holds, except that a split holds at most 64 K blocks; never more splits
        // than K blocks.
        assert_eq!(plan_decode_splits(16, 56, 132, 4096, 1), (1, 56));
        assert_eq!(plan_decode_splits(28, 128, 132, 7168, 1), (2, 64));
        assert_eq!(plan_decode_splits(1, 1, 132, 1, 32), (1, 1));
        let (s, per) = plan_decode_splits(3, 5, 132, 300, 32);
        assert!(s <= 5 && per * s >= 5);
    }

    /// The choices the H200 split sweep backs at M = 1 (docs/perf-log.md, "GPU: the decode
    /// kernel", its split table): one wave of CTAs, not more; a layer whose tiles nearly
    /// fill the GPU is not split at all.
    #[test]
    fn splits_match_the_h200_sweep() {
        let plan =
            |n: usize, k: usize| plan_decode_splits(n.div_ceil(256), k.div_ceil(128), 132, n, 32).0;
        assert_eq!(plan(24576, 1536), 1); // 96 tiles: 17.9 us unsplit, 26.8 at 4 splits
        assert_eq!(plan(14336, 4096), 2); // 56 tiles: 25.6 us at 2, 32.4 at 7
        assert_eq!(plan(7168, 2048), 4); // 28 tiles: 13.4 us at 4, 14.0 at 2
        assert_eq!(plan(4096, 7168), 8); // 16 tiles: 18.0 us at 8, 19.5 at 4
        for (n, k) in [(4096, 4096), (2112, 7168), (7168, 16384), (18432, 7168)] {
            let s = plan(n, k);
            assert!(n.div_ceil(256) * s <= 2 * 132, "{n}x{k}: {s} splits");
        }
    }

    #[test]
    fn takes_model_shapes_and_128_column_blocks_only() {
        for (n, k) in [(7748, 3884), (1, 1), (24576, 1536), (7, 16384)] {
            let c = LayerConfig::block_128(n, k, DType::Bf16, DType::Bf16);
            assert!(DecodeBlockFp8::can_implement(&c).is_ok(), "{n}x{k}");
        }
        let c = LayerConfig::block(
            256,
            256,
            (128, 64),
            fp8_linear_core::quant::ScaleDtype::F32,
            DType::Bf16,
            DType::Bf16,
        );
        assert!(DecodeBlockFp8::can_implement(&c).is_err());
        let big = i32::MAX as usize - 100;
        let c = LayerConfig::block_128(big, 128, DType::Bf16, DType::Bf16);
        assert!(DecodeBlockFp8::can_implement(&c).is_err());
    }
}
