//! Our own block-scaled FP8 GEMM for sm_89 and newer: FP8 `mma.sync` m16n8k32 with f32
//! accumulation, 1xC activation / RxC weight scales (R a multiple of 8, C 32, 64 or 128;
//! f32 or ue8m0) applied per C-long K block,
//! masking for any M, N, K, split-K for small grids (reduced inside the GEMM launch: no
//! memset, no second launch). The role the Triton block kernel plays
//! upstream, with an honest arch (FP8 tensor-core instructions exist from sm_89 on).
//! Source: `cu/block_gemm.cu`; its grouped (mixture-of-experts) form, [`PortableGroupedFp8`],
//! is in `grouped.rs` beside this file.

use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaModule, PushKernelArg};
use fp8_linear_core::{
    fp8_kernel, BuildCtx, Capability, Fp8Kernel, KernelError, LayerConfig, LayerWeights,
    Unsupported,
};
use fp8_linear_cuda::cudarc;
use fp8_linear_cuda::Gpu;

use crate::cuda::skeleton::block::{
    block_checks, weight_block, ActLayout, BlockLayer, Blocks, ROWS_16_ROW_MAJOR,
};
use crate::cuda::skeleton::dtype::float_index;
use crate::cuda::skeleton::error::{be, be_at, compile_target};
use crate::cuda::skeleton::launch::{grid, launch, per_float};
use crate::cuda::skeleton::layer::{skeleton_calls, Call, GpuLayer, Io, Recipe};
use crate::cuda::skeleton::scratch::Scratch;
use crate::cuda::sources;

pub use grouped::PortableGroupedFp8;

mod grouped;

const NAME: &str = PortableBlockFp8::NAME;

/// Portable block-scaled FP8 GEMM (FP8 `mma.sync`, sm_89+): RxC weight blocks (R a
/// multiple of 8 along N, C 32, 64 or 128 along K; 128x128 is DeepSeek-V3's) and dynamic
/// 1xC activation groups, f32 or ue8m0 scales, any M, N, K, bf16/f16/f32 in and out,
/// optional bias.
#[fp8_kernel(platform = Cuda, priority = 5, arch = sm89.., backend = portable)]
pub struct PortableBlockFp8 {
    layer: GpuLayer<State>,
    forced: (Option<u32>, Option<usize>),
    blocks_per_sm: Option<u32>,
    target: Option<Capability>,
}

/// One compiled tile configuration.
struct Variant {
    mt: u32,
    stages: u32,
    blocks_per_sm: u32,
    smem: u32,
    gemm: [CudaFunction; 3],
    _module: Arc<CudaModule>,
}

struct State {
    /// Weights with row-major block scales, activations with row-major group scales.
    block: BlockLayer,
    variants: Vec<Variant>,
    /// Split-K: one u32 counter per output tile (rounded up to 4 words), then the m*n f32
    /// sums; all zero between calls (the last split of each tile puts the zeros back).
    ws: Scratch<f32>,
}

impl PortableBlockFp8 {
    /// Builds the kernel for a layer on the context's GPU (nothing touches the GPU until
    /// `process_weights`). The options' `compile_for` picks an older target (see
    /// [`PortableBlockFp8::compile_for`]).
    pub fn new(ctx: &BuildCtx<'_>) -> Result<Self, KernelError> {
        Ok(PortableBlockFp8 {
            layer: GpuLayer::new(NAME, ctx)?,
            forced: (None, None),
            blocks_per_sm: None,
            target: ctx.options().compile_for.map(fp8_mma_target).transpose()?,
        })
    }

    /// Compiles the kernel for an older compute capability than the device's (8.9 on an
    /// H200, to run the code an L4 / L40S / RTX 4090 runs): NVRTC emits PTX for
    /// `compute_XY` and the driver compiles it for the device at load. Call before
    /// `process_weights`. Capabilities below 8.9 are refused (FP8 `mma.sync` needs sm_89).
    pub fn compile_for(&mut self, cap: Capability) -> Result<(), KernelError> {
        self.target = Some(fp8_mma_target(cap)?);
        Ok(())
    }

    /// Forces the resident blocks per SM every tile variant is built for (1 or 2; more is
    /// taken as 2) instead of the automatic choice, for tests and tuning. Takes effect at the
    /// next `process_weights`. `None` keeps the automatic choice.
    pub fn force_blocks_per_sm(&mut self, blocks: Option<u32>) {
        self.blocks_per_sm = blocks.map(|b| b.clamp(1, 2));
    }

    /// Forces the tile height (`mt` m16 tiles per warp: BM = 32 * mt, one of 1, 2, 4) and
    /// the split-K factor (clamped to the K-block count) instead of choosing them from M and
    /// the SM count; for tests and tuning. `None` keeps the automatic choice.
    pub fn force_launch(&mut self, mt: Option<u32>, splits: Option<usize>) {
        self.forced = (mt, splits);
    }
}

/// `cap` as a compile target: FP8 `mma.sync` needs 8.9 or newer.
fn fp8_mma_target(cap: Capability) -> Result<Capability, KernelError> {
    let needs = "the portable kernel needs compute capability 8.9 or newer (FP8 mma.sync)";
    compile_target(NAME, cap, Capability::new(8, 9), needs)
}

/// Shared memory the system reserves per resident block.
const RESERVED_PER_BLOCK: u32 = 1024;

/// Blocks per SM and pipeline stages for `mt` m16 tiles per warp on a device whose opt-in
/// shared memory per block is `optin` (the SM holds about `optin` + 1 KiB): two blocks when
/// the SM holds two of at least three stages each (H100 / H200: every tile height), else one
/// block with up to four stages (the 99 KiB of the sm_89 cards). `forced` picks the block
/// count; the stages then follow from it (at least 2).
pub fn occupancy(mt: u32, optin: u32, forced: Option<u32>) -> (u32, u32) {
    let stage_bytes = (32 * mt + 128) * 128;
    let two = ((optin + RESERVED_PER_BLOCK) / 2).saturating_sub(RESERVED_PER_BLOCK) / stage_bytes;
    match forced {
        Some(2) => (2, two.clamp(2, 4)),
        Some(_) => (1, (optin / stage_bytes).clamp(2, 4)),
        None if two >= 3 => (2, two.min(4)),
        None => (1, (optin / stage_bytes).clamp(2, 4)),
    }
}

/// The module of `kernel` for `mt` m16 tiles per warp and scale blocks `block`, with the
/// occupancy and stages of [`occupancy`]: the dense kernels (`grouped` false) or the grouped
/// ones.
fn load_variant(
    (kernel, grouped): (&'static str, bool),
    gpu: &Arc<Gpu>,
    (mt, optin): (u32, u32),
    forced: Option<u32>,
    (block, target): ((usize, usize), Option<Capability>),
) -> Result<Variant, KernelError> {
    let (blocks_per_sm, stages) = occupancy(mt, optin, forced);
    let smem = stages * (32 * mt + 128) * 128;
    let (spec, prefix) = if grouped {
        let spec = sources::block_grouped_module(mt, stages, blocks_per_sm, block);
        (spec, "block_grouped")
    } else {
        let spec = sources::block_gemm_module(mt, stages, blocks_per_sm, block);
        (spec, "block_gemm")
    };
    let (module, _) = gpu.module_for(&spec, target).map_err(be(kernel))?;
    Ok(Variant {
        mt,
        stages,
        blocks_per_sm,
        smem,
        gemm: per_float(&module, prefix, Some(smem)).map_err(be(kernel))?,
        _module: module,
    })
}

impl Fp8Kernel for PortableBlockFp8 {
    fn can_implement(config: &LayerConfig) -> Result<(), Unsupported> {
        block_checks(config, Blocks::Tiled)
    }

    fn process_weights(&mut self, weights: &LayerWeights<'_>) -> Result<(), KernelError> {
        let l = &self.layer;
        let (gpu, config) = (&l.gpu, &l.config);
        let w = (weights, l.shared.as_ref());
        let block = BlockLayer::load(NAME, gpu, config, w, ROWS_16_ROW_MAJOR, ActLayout::RowMajor)?;
        let optin = gpu.max_shared_memory_per_block().map_err(be(NAME))?;
        let scale_block = weight_block(config);
        let (forced, target) = (self.blocks_per_sm, self.target);
        let variants = [1, 2, 4]
            .into_iter()
            .map(|mt| {
                let at = (mt, optin);
                load_variant((NAME, false), gpu, at, forced, (scale_block, target))
            })
            .collect::<Result<Vec<_>, _>>()?;
        self.layer.set(State {
            block,
            variants,
            ws: Scratch::default(),
        });
        Ok(())
    }

    skeleton_calls!(layer, |k| k.forced);
}

impl Recipe for State {
    /// The forced tile height (m16 tiles per warp) and K split.
    type Knobs = (Option<u32>, Option<usize>);
    type Plan = Plan;
    /// The split-K workspace's address (0 without a split).
    type Scratch = u64;

    fn plan(&mut self, call: Call<'_>, forced: &Self::Knobs) -> Result<Plan, KernelError> {
        let (c, gpu, m) = (call.c, call.gpu, call.m);
        let p = self.launch(c, gpu, *forced, m);
        if p.gm > 65535 {
            return Err(call.too_many_rows("[M <= 65535 * 128, K]"));
        }
        Ok(p)
    }

    /// The activation buffers, and the split-K workspace when split.
    fn reserve(&mut self, call: Call<'_>, p: &Plan) -> Result<u64, KernelError> {
        let (c, gpu, m) = (call.c, call.gpu, call.m);
        self.block.reserve(c, gpu, m).map_err(be_at(NAME, m))?;
        let len = match p.splits {
            1 => Some(0),
            _ => (m * c.n).checked_add(p.counter_words()),
        };
        call.workspace(NAME, &mut self.ws, len, p.splits)
    }

    fn keep_retired(&mut self, _max_m: usize) {
        self.block.keep_retired();
        self.ws.keep_retired();
    }

    fn enqueue(&mut self, call: Call<'_>, p: Plan, ws: u64, io: Io) -> Result<(), KernelError> {
        let (c, gpu) = (call.c, call.gpu);
        let (m, st) = (io.0, self);
        let call = st.block.quantize(NAME, c, gpu, io)?;
        let (n, k) = (c.n, c.k);
        let ldk = st.block.weights.w.ldk;
        let v = &st.variants[p.variant];
        let bm = 32 * v.mt as usize;
        let oi = float_index("output", c.output_dtype)?;
        let bias = st
            .block
            .weights
            .w
            .bias
            .as_ref()
            .map(|b| b.ptr())
            .unwrap_or(0);
        let (wptr, bsptr) = (
            st.block.weights.w.codes.ptr(),
            st.block.weights.scales.ptr(),
        );
        let (q, a_s, out) = (call.codes, call.scales, call.out);
        let (mi, ni, ki, kpi) = (m as i32, n as i32, k as i32, ldk as i32);
        let ld = ldk as i32;
        let kbs = p.kb_per_split as i32;
        let (counters, sums) = if ws == 0 {
            (0, 0)
        } else {
            (ws, ws + 4 * p.counter_words() as u64)
        };
        let s = gpu.stream();
        let mut b = s.launch_builder(&v.gemm[oi]);
        b.arg(&q)
            .arg(&ld)
            .arg(&a_s)
            .arg(&wptr)
            .arg(&ld)
            .arg(&bsptr)
            .arg(&out)
            .arg(&sums)
            .arg(&counters)
            .arg(&bias);
        b.arg(&mi).arg(&ni).arg(&ki).arg(&kpi).arg(&kbs);
        let cfg = grid((p.gn as u32, p.gm as u32, p.splits as u32), 256, v.smem);
        // SAFETY: the stream belongs to this GPU (checked ordinal); every pointer addresses
        // memory of the sizes the kernel reads/writes (A m*ldk, As m*ceil(k/C), B n*ldk, Bs
        // ceil(n/R)*ceil(k/C), out m*n, ws m*n when split); masking keeps accesses in
        // bounds; when split, the workspace holds the tiles' counters and m*n sums, all zero
        // (as allocated, and as every split call leaves them).
        unsafe {
            launch(
                b,
                cfg,
                format_args!(
                    "block_gemm (BM={bm}, {} stages, {} blocks per SM)",
                    v.stages, v.blocks_per_sm
                ),
            )
        }
        .map_err(be(NAME))?;
        Ok(())
    }
}

/// The launch of a call: tile variant, grid and K split.
struct Plan {
    variant: usize,
    gn: usize,
    gm: usize,
    splits: usize,
    kb_per_split: usize,
}

impl Plan {
    /// Words of the split-K workspace taken by the tiles' counters (16-byte aligned sums).
    fn counter_words(&self) -> usize {
        (self.gn * self.gm).next_multiple_of(4)
    }
}

impl State {
    /// The launch for `m` rows (tile height and K split, each forced or chosen by
    /// [`plan_launch`]).
    fn launch(
        &self,
        c: &LayerConfig,
        gpu: &Gpu,
        forced: (Option<u32>, Option<usize>),
        m: usize,
    ) -> Plan {
        let kb = c.k.div_ceil(128);
        let gn = c.n.div_ceil(128);
        let (auto_variant, auto_splits) = plan_launch(&heights(&self.variants, gpu), gn, m, kb);
        let variant = match forced.0 {
            Some(mt) => self
                .variants
                .iter()
                .position(|v| v.mt == mt)
                .unwrap_or(auto_variant),
            None => auto_variant,
        };
        let splits = forced.1.map_or(auto_splits, |s| s.clamp(1, kb));
        let kb_per_split = kb.div_ceil(splits.max(1));
        Plan {
            variant,
            gn,
            gm: m.div_ceil(32 * self.variants[variant].mt as usize),
            splits: kb.div_ceil(kb_per_split),
            kb_per_split,
        }
    }
}

/// The `heights` of [`plan_launch`] for `variants` on `gpu`: (m16 tiles per warp,
/// resident-block slots on the GPU) of each.
fn heights(variants: &[Variant], gpu: &Gpu) -> Vec<(u32, usize)> {
    let sms = gpu.device().sm_count.max(1) as usize;
    variants
        .iter()
        .map(|v| (v.mt, sms * v.blocks_per_sm as usize))
        .collect()
}

/// The automatic launch for `m` rows of a layer with `gn` 128-column tiles and `kb` 128-long
/// K tiles: (index into `heights`, K splits). `heights` lists each tile variant as (m16
/// tiles per warp, resident-block slots on the GPU), shortest first. From the H200 sweep
/// (`PORTABLE_SWEEP=1` of the `portable` bench, docs/perf-log.md, "Issue 15 on the H200"):
/// - the tallest tile whose grid fills at least 5/6 of its slots (a wave), else the shortest
///   (32 rows: at M = 64-128 shorter tiles on more SMs beat taller ones on fewer);
/// - K split only while the tiles leave slots idle, into at most `slots / tiles` parts (one
///   wave) of at least 4 K tiles each, and only where the reduction is cheap against the work
///   saved: M <= 32, or K of at least 32 tiles (the atomics into the workspace cost about
///   as much as a split saves on short K).
fn plan_launch(heights: &[(u32, usize)], gn: usize, m: usize, kb: usize) -> (usize, usize) {
    let tiles = |mt: u32| gn * m.div_ceil(32 * mt as usize);
    let variant = (0..heights.len())
        .rev()
        .find(|&i| 6 * tiles(heights[i].0) >= 5 * heights[i].1)
        .unwrap_or(0);
    let (t, slots) = (tiles(heights[variant].0), heights[variant].1);
    let splits = if t == 0 || 6 * t >= 5 * slots || (m > 32 && kb < 32) {
        1
    } else {
        (slots / t).clamp(1, (kb / 4).max(1))
    };
    (variant, splits)
}

#[cfg(test)]
mod tests {
    use super::{occupancy, plan_launch};

    /// The H200's variants: 32, 64 and 128 rows, two blocks per SM on 132 SMs.
    const H200: [(u32, usize); 3] = [(1, 264), (2, 264), (4, 264)];

    #[test]
    fn launch_plan_follows_the_h200_sweep() {
        // (gn, M, kb) -> (tile rows, splits): the sweep's best on 4096x7168 (gn 32, kb 56)
        // and 7168x2048 (gn 56, kb 16); a grid that fills the GPU is never split, a 1-tile
        // K never.
        let cases = [
            ((32, 4, 56), (32, 8)),
            ((32, 16, 56), (32, 8)),
            ((32, 64, 56), (32, 4)),
            ((32, 128, 56), (32, 2)),
            ((32, 512, 56), (64, 1)),
            ((32, 4096, 56), (128, 1)),
            ((56, 4, 16), (32, 4)),
            ((56, 16, 16), (32, 4)),
            ((56, 64, 16), (32, 1)),
            ((56, 128, 16), (32, 1)),
            ((56, 512, 16), (128, 1)),
            ((144, 16, 56), (32, 1)),
            ((1, 1, 1), (32, 1)),
        ];
        for ((gn, m, kb), want) in cases {
            let (v, s) = plan_launch(&H200, gn, m, kb);
            assert_eq!((32 << v, s), want, "gn {gn}, M {m}, kb {kb}");
        }
    }

    #[test]
    fn two_blocks_per_sm_where_the_sm_holds_two_of_three_stages() {
        // H100 / H200 (227 KiB per block): every tile height at two blocks per SM.
        assert_eq!(occupancy(1, 232_448, None), (2, 4));
        assert_eq!(occupancy(2, 232_448, None), (2, 4));
        assert_eq!(occupancy(4, 232_448, None), (2, 3));
        // sm_89 (99 KiB): one block per SM, the stages of before.
        assert_eq!(occupancy(1, 101_376, None), (1, 4));
        assert_eq!(occupancy(2, 101_376, None), (1, 4));
        assert_eq!(occupancy(4, 101_376, None), (1, 3));
        // Forced.
        assert_eq!(occupancy(4, 232_448, Some(1)), (1, 4));
        assert_eq!(occupancy(4, 101_376, Some(2)), (2, 2));
    }
}
