//! Hopper block-scaled FP8 GEMM (sm_90a, the DeepGEMM class): TMA loads into a multi-stage
//! shared-memory ring with mbarriers; a producer warpgroup with few registers (setmaxnreg)
//! whose first thread issues the tile loads and whose second warp copies each stage's
//! scales into shared memory (cp.async, arriving on the stage's barrier); math warpgroups
//! issuing wgmma m64n128k32 e4m3 from 128B-swizzled descriptors, with per-block promotion
//! into f32 with the 1xC activation and RxC weight scales (R 32, 64 or 128, C 32, 64 or 128;
//! f32 or ue8m0). Persistent tile scheduling over tiles of 64, 128, 192 or 256 rows x 128
//! columns (the height chosen per call by [`plan_tile_rows`]); the 64- and 128-row tiles keep
//! two accumulator sets, so one scale block's MMAs run while the previous one is promoted.
//! Split-K when the tiles do not fill the GPU (each split stores its partial tile to an f32
//! workspace, an epilogue kernel sums them in order). On request
//! ([`KernelOptions::cluster`](fp8_linear_core::KernelOptions)), clusters of two CTAs along M
//! that load each weight tile once, half each, multicast to both. The GEMM is launched
//! overlapped with the activation quantization before it (programmatic dependent launch,
//! [`KernelOptions::overlap`](fp8_linear_core::KernelOptions), on by default): its launch,
//! prologue and first round of weight tiles run while the quantization does, and it waits for
//! the quantization before it reads the activations.
//! Source: `cu/hopper_gemm.cu`.

use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaModule, PushKernelArg};
use fp8_linear_core::{
    fp8_kernel, BuildCtx, Fp8Kernel, KernelError, LayerConfig, LayerWeights, Unsupported,
};
use fp8_linear_cuda::cudarc;
use fp8_linear_cuda::tma::TensorMap;
use fp8_linear_cuda::Gpu;

use crate::cuda::skeleton::block::{
    block_checks, tile_indices_fit, weight_block, ActLayout, BlockLayer, Blocks, ROWS_16_ROW_MAJOR,
};
use crate::cuda::skeleton::dtype::float_index;
use crate::cuda::skeleton::error::{be, be_at};
use crate::cuda::skeleton::launch::{
    elementwise, grid, launch, launch_overlapped, param, per_float,
};
use crate::cuda::skeleton::layer::{skeleton_calls, Call, GpuLayer, Io, Recipe};
use crate::cuda::skeleton::scratch::Scratch;

/// The Hopper module spec (compiled for `sm_90a`), registered in [`crate::cuda::sources`].
pub use crate::cuda::sources::hopper_module;

const NAME: &str = HopperBlockFp8::NAME;

/// Block-scaled FP8 GEMM with wgmma and TMA for Hopper (sm_90a exactly): RxC weight blocks
/// (R 32, 64 or 128 along N, C 32, 64 or 128 along K; 128x128 is DeepSeek-V3's), dynamic
/// 1xC activation groups, f32 or ue8m0 scales, any M, N, K, f32/f16/bf16 in and out, bias.
#[fp8_kernel(platform = Cuda, priority = 1, arch = sm90a, backend = hopper)]
pub struct HopperBlockFp8 {
    layer: GpuLayer<State>,
    /// Upper bound on K splits (the build options' `max_splits`, default 16).
    max_splits: usize,
    /// A fixed tile height (the build options' `tile_rows`); None chooses per call.
    tile_rows: Option<usize>,
    /// A fixed cluster size, 1 or 2 (the build options' `cluster`); None chooses per call.
    cluster: Option<usize>,
    /// The GEMM launched overlapped with the activation quantization (the build options'
    /// `overlap`, default on).
    overlap: bool,
}

/// One tile height and cluster size: BM rows per CTA, its pipeline depth and kernels.
struct Variant {
    bm: usize,
    /// CTAs per cluster along M (2: the weight tile is multicast to both).
    cluster: usize,
    /// Math warpgroups (the CTA has one more, the producer).
    math_wgs: u32,
    smem: u32,
    gemm: [CudaFunction; 3],
}

/// (BM, cluster size, math warpgroups, pipeline stages, kernel tag): BM 64 (one math
/// warpgroup, 8 stages of 24 KiB of tiles), BM 128 (two, 6 stages of 32 KiB), BM 192
/// (three, 5 stages of 40 KiB, 160 registers per math thread; never split), BM 256 (two
/// warpgroups of two 64-row waves each, 4 stages of 48 KiB; never split), and BM 128 and 256
/// in clusters of two CTAs sharing the weight tile (multicast: each CTA loads half of it for
/// both), only where the build options ask for clusters of 2; must match `HOPPER_KERNEL` and
/// `HOPPER_KERNEL_C2` in the source. On the H200 the clusters cut the kernel's L2 traffic
/// (48 % of L2 throughput against 56 %, 4096x7168 at M = 4096) but not its time (within
/// 2 %): every variant takes in about 28 bytes of tiles per SM-cycle, which multicast
/// leaves as it is (docs/perf-log.md, "GPU: Hopper kernel, issue 12").
const VARIANTS: [(usize, usize, u32, u32, &str); 6] = [
    (64, 1, 1, 8, "bm64"),
    (128, 1, 2, 6, "bm128"),
    (128, 2, 2, 6, "bm128c2"),
    (192, 1, 3, 5, "bm192"),
    (256, 1, 2, 4, "bm256"),
    (256, 2, 2, 4, "bm256c2"),
];

/// Dynamic shared memory of a variant of `bm` rows and `stages` stages for weight blocks
/// `block` (rows along N, columns along K): per stage the A and B tiles, the scales of the
/// stage (for each of the 128 / C scale blocks of a K tile, `bm` activation scales and
/// 128 / R weight scales, f32, rounded up to 16 bytes) and two mbarriers; 1 KiB covers the
/// 1024-byte alignment of the swizzled tiles (`Sc` and the stage layout in the source).
fn smem_bytes(bm: usize, stages: u32, block: (usize, usize)) -> u32 {
    let subs = 128 / block.1;
    let scales = (subs * (bm + 128 / block.0) * 4).div_ceil(16) * 16;
    let stage = bm * 128 + 128 * 128 + scales + 16;
    1024 + stages * stage as u32
}

/// Whether the tall tiles (192 and 256 rows) exist for weight blocks `block` (rows along N,
/// columns along K): their registers leave room for the scales of at most two scale blocks
/// per 128-long K tile (C >= 64; the source compiles them under the same rule).
fn has_tall_tile(block: (usize, usize)) -> bool {
    block.1 >= 64
}

struct State {
    /// Weights with row-major block scales, activations with M-fastest group scales.
    block: BlockLayer,
    /// Tensor maps of the weight codes: boxes of 128 rows x 128 bytes, and of 64 rows (each
    /// CTA's half of the tile in a cluster of two).
    tb: TensorMap,
    tb_half: TensorMap,
    /// The entries of [`VARIANTS`] this layer has (the tall ones where [`has_tall_tile`]).
    variants: Vec<Variant>,
    _module: Arc<CudaModule>,
    /// The split-K epilogues.
    finalize: [CudaFunction; 3],
    /// Split-K partial sums, `splits * m * n` floats.
    ws: Scratch<f32>,
    /// Last activation tensor map: (codes address, M, BM) -> map.
    ta: Option<((u64, usize, usize), TensorMap)>,
}

impl HopperBlockFp8 {
    /// Builds the kernel for a layer on the context's GPU (nothing touches the GPU until
    /// `process_weights`).
    ///
    /// A `tile_rows` option other than 64, 128, 192 or 256 (192 and 256 need weight blocks of
    /// at least 64 columns along K) is [`KernelError::Backend`] naming the heights it has; so
    /// is a `cluster` option other than 1 or 2.
    pub fn new(ctx: &BuildCtx<'_>) -> Result<Self, KernelError> {
        let tile_rows = ctx.options().tile_rows.map(usize::from);
        let cluster = ctx.options().cluster.map(usize::from);
        if let Some(c) = cluster {
            if c != 1 && c != 2 {
                return Err(KernelError::backend(
                    NAME,
                    format!("cluster {c}: clusters are 1 or 2 CTAs"),
                ));
            }
        }
        if let Some(r) = tile_rows {
            let tall = has_tall_tile(weight_block(ctx.config()));
            if !(r == 64 || r == 128 || (tall && (r == 192 || r == 256))) {
                let heights = if tall {
                    "64, 128, 192 or 256"
                } else {
                    "64 or 128"
                };
                return Err(KernelError::backend(
                    NAME,
                    format!("tile_rows {r}: this layer's tiles are {heights} rows"),
                ));
            }
        }
        Ok(HopperBlockFp8 {
            layer: GpuLayer::new(NAME, ctx)?,
            max_splits: ctx
                .options()
                .max_splits
                .map_or(16, usize::from)
                .clamp(1, 16),
            tile_rows,
            cluster,
            overlap: ctx.options().overlap.unwrap_or(true),
        })
    }
}

/// Time of one work unit of each tile height over the same K, relative to a 128-row unit:
/// (rows, cost). Fitted on an H200 run of the Hopper bench with every height fixed
/// (docs/perf-log.md, "GPU: Hopper kernel, taller tiles"): at M = 128, 512 and 4096 on the six
/// DeepSeek-V3 shapes, the wave counts times these costs pick the measured best height on
/// 14 of the 18 points and miss the others by 0.4-5 %. A 256-row unit does twice the MMAs of a
/// 128-row one for 1.5 times the tile loads; a 192-row unit runs three math warpgroups.
const TILE_COSTS: [(usize, f64); 3] = [(128, 1.0), (192, 1.35), (256, 1.7)];

/// The tile height for `m` rows of an `n`-column output on `sms` SMs: 64 up to 64 rows;
/// else the height whose waves of work units (persistent CTAs take units round-robin, so
/// a call takes ceil(units / sms) units per CTA) cost least, at 1.0 per 128-row unit, 1.35
/// per 192-row unit and 1.7 per 256-row unit (fitted on the H200), among 128 and, where
/// `tall` (the layer has them), 192 and 256.
pub fn plan_tile_rows(m: usize, n: usize, sms: usize, tall: bool) -> usize {
    if m <= 64 {
        return 64;
    }
    let cost = |&(bm, c): &(usize, f64)| {
        let units = m.div_ceil(bm) * n.div_ceil(128);
        units.div_ceil(sms.max(1)) as f64 * c
    };
    let candidates = if tall {
        &TILE_COSTS[..]
    } else {
        &TILE_COSTS[..1]
    };
    // The first of equal costs: the shorter tile.
    candidates
        .iter()
        .min_by(|a, b| cost(a).total_cmp(&cost(b)))
        .map_or(128, |t| t.0)
}

/// K splits for `tiles` output tiles (of `mn` output elements in all) and `kb` K blocks on
/// `sms` SMs, at most `max` (<= 16): returns (splits, K blocks per split). A cost model fitted
/// on an H200 (docs/perf-log.md, "GPU: Hopper wgmma block-FP8 kernel", the columns with and
/// without splits; it reproduces those times within about 10 %): per wave of CTAs, a K block
/// takes 0.4 us or the time to stream the wave's 16 KiB weight tiles at 4.3 TB/s, whichever
/// is longer, and a work unit adds 1.4 us (pipeline fill, promotion, epilogue); splitting
/// adds 6 us (the epilogue kernel) plus writing and reading an f32 partial per split and
/// output element at about 3 TB/s. No split when the tiles fill two waves.
pub fn plan_splits(tiles: usize, kb: usize, sms: usize, mn: usize, max: usize) -> (usize, usize) {
    let sms = sms.max(1);
    if tiles >= 2 * sms || kb <= 1 {
        return (1, kb);
    }
    let cost = |s: usize| -> (f64, usize, usize) {
        let per = kb.div_ceil(s);
        let s_eff = kb.div_ceil(per);
        let mut left = tiles * s_eff;
        let mut t = 0.0;
        while left > 0 {
            let active = left.min(sms);
            let t_kb = ((active * 16384) as f64 / 4.3e6).max(0.4);
            t += per as f64 * t_kb + 1.4;
            left -= active;
        }
        if s_eff > 1 {
            t += 6.0 + (s_eff * mn * 8) as f64 / 3e6;
        }
        (t, s_eff, per)
    };
    let mut best = cost(1);
    for s in 2..=kb.min(max.clamp(1, 16)) {
        let c = cost(s);
        if c.0 < best.0 * 0.97 {
            best = c;
        }
    }
    (best.1, best.2)
}

/// The loaded module, its tile variants and the split-K epilogues.
type Loaded = (Arc<CudaModule>, Vec<Variant>, [CudaFunction; 3]);

fn load(gpu: &Arc<Gpu>, block: (usize, usize)) -> Result<Loaded, KernelError> {
    let optin = gpu.max_shared_memory_per_block().map_err(be(NAME))?;
    let (module, _) = gpu.module(&hopper_module(block)).map_err(be(NAME))?;
    let variants = VARIANTS
        .iter()
        .filter(|v| v.0 <= 128 || has_tall_tile(block))
        .map(|&(bm, cluster, math_wgs, stages, tag)| {
            let smem = smem_bytes(bm, stages, block);
            if smem > optin {
                return Err(KernelError::backend(
                    NAME,
                    format!("needs {smem} B of shared memory per block, the device allows {optin}"),
                ));
            }
            let gemm =
                per_float(&module, &format!("hopper_gemm_{tag}"), Some(smem)).map_err(be(NAME))?;
            Ok(Variant {
                bm,
                cluster,
                math_wgs,
                smem,
                gemm,
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let finalize = per_float(&module, "hopper_finalize", None).map_err(be(NAME))?;
    Ok((module, variants, finalize))
}

impl Fp8Kernel for HopperBlockFp8 {
    fn can_implement(config: &LayerConfig) -> Result<(), Unsupported> {
        // Rows are padded to 16 bytes at load (TMA's stride rule), so any K works; TMA
        // zero-fills partial tiles and the stores are masked, so any M and N work.
        block_checks(config, Blocks::Tiled)?;
        // A 128-column tile holds whole blocks (its promotion indexes the tile's scale rows
        // from its start); fewer than 32 rows would need more scale registers per thread
        // than the two-warpgroup variant has. The portable kernel takes the others.
        if !matches!(weight_block(config).0, 32 | 64 | 128) {
            return Err(Unsupported::new(
                "weight blocks must be 32, 64 or 128 rows along N",
            ));
        }
        // Tile coordinates (up to N + 127) are 32-bit in the kernel and in TMA.
        tile_indices_fit(config)
    }

    fn process_weights(&mut self, weights: &LayerWeights<'_>) -> Result<(), KernelError> {
        let l = &self.layer;
        let (gpu, config) = (&l.gpu, &l.config);
        let act = ActLayout::ColMajor { rows: 1 };
        let w = (weights, l.shared.as_ref());
        let block = BlockLayer::load(NAME, gpu, config, w, ROWS_16_ROW_MAJOR, act)?;
        let (module, variants, finalize) = load(gpu, weight_block(config))?;
        let w = &block.weights.w;
        let tb = TensorMap::e4m3_2d(w.codes.ptr(), config.n, w.ldk, w.ldk, 128, 128)
            .map_err(be(NAME))?;
        let tb_half =
            TensorMap::e4m3_2d(w.codes.ptr(), config.n, w.ldk, w.ldk, 64, 128).map_err(be(NAME))?;
        self.layer.set(State {
            block,
            tb,
            tb_half,
            variants,
            _module: module,
            finalize,
            ws: Scratch::default(),
            ta: None,
        });
        Ok(())
    }

    skeleton_calls!(layer, |k| (k.max_splits, k.tile_rows, k.cluster, k.overlap));
}

impl Recipe for State {
    /// (max splits, tile rows, cluster size, overlapped launch).
    type Knobs = (usize, Option<usize>, Option<usize>, bool);
    type Plan = Plan;
    /// The split-K workspace's address (0 without a split).
    type Scratch = u64;

    fn plan(&self, call: Call<'_>, knobs: &Self::Knobs) -> Result<Plan, KernelError> {
        let (c, gpu, m) = (call.c, call.gpu, call.m);
        let p = self.launch(c, gpu, *knobs, m);
        if p.units > i32::MAX as usize {
            // The kernel numbers its work units with 32-bit integers.
            return Err(call.too_many_rows(
                "[M, K] with fewer than 2^31 work units of 64 or 128 rows x 128 columns",
            ));
        }
        Ok(p)
    }

    /// The activation buffers, and the split-K workspace when split.
    fn reserve(&mut self, call: Call<'_>, p: &Plan) -> Result<u64, KernelError> {
        let (c, gpu, m) = (call.c, call.gpu, call.m);
        self.block.reserve(c, gpu, m).map_err(be_at(NAME, m))?;
        // Every split stores every valid element of its tiles: no clearing needed.
        let len = match p.splits {
            1 => Some(0),
            s => (m * c.n).checked_mul(s),
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
        // Overlapped only after this call's own quantization kernel: given codes may be read
        // in place, and the kernel before this one could then be anything, such as the
        // weights' processing.
        let overlap = p.overlap && io.pre_quantized().is_none();
        let call = st.block.quantize(NAME, c, gpu, io)?;
        let (n, k) = (c.n, c.k);
        let ldk = st.block.weights.w.ldk;
        let (q, a_s, out) = (call.codes, call.scales, call.out);
        let v = &st.variants[p.variant];
        let key = (q, m, v.bm);
        let ta = match &st.ta {
            Some((k0, map)) if *k0 == key => *map,
            _ => {
                // Host-only encoding (no driver work on the stream): fine during a capture,
                // whose kernel node keeps the map by value.
                let map = TensorMap::e4m3_2d(q, m, ldk, ldk, v.bm as u32, 128).map_err(be(NAME))?;
                st.ta = Some((key, map));
                map
            }
        };
        let (splits, kbps) = (p.splits, p.kb_per_split);
        let oi = float_index("output", c.output_dtype)?;
        let bias = st
            .block
            .weights
            .w
            .bias
            .as_ref()
            .map(|b| b.ptr())
            .unwrap_or(0);
        let bsptr = st.block.weights.scales.ptr();
        let (mi, ni, ki) = (m as i32, n as i32, k as i32);
        let (kbpsi, splitsi) = (kbps as i32, splits as i32);
        let tb = if v.cluster > 1 { st.tb_half } else { st.tb };
        let threads = 128 * (v.math_wgs + 1);
        let sms = gpu.device().sm_count.max(1) as usize;
        // Persistent: at most one CTA per SM; whole clusters (the kernel walks the units by
        // cluster, `p.units` counting clusters' units).
        let ctas = p.units.min(sms / v.cluster) * v.cluster;
        let cfg = grid((ctas as u32, 1, 1), threads, v.smem);
        let what = format_args!(
            "hopper_gemm (BM={}, cluster {}, {splits} splits)",
            v.bm, v.cluster
        );
        let s = gpu.stream();
        // SAFETY: the layer's stream belongs to this GPU; the tensor maps cover A (m x ldk
        // bytes of codes at `q`, from the quantization) and B (n x ldk bytes of the weight
        // codes); As holds ceil(k/C)*m floats, Bs ceil(n/R)*ceil(k/C), out m*n elements, ws
        // splits*m*n floats when split; the kernel masks every store and TMA zero-fills
        // out-of-bounds boxes. Overlapped (never for given codes): the kernel before it on
        // the stream is the quantization just enqueued, and the kernel waits for it
        // (griddep_wait) before it reads the codes or the activation scales and so before
        // anything it writes; what it reads before (weight codes) was written before that
        // kernel.
        unsafe {
            if overlap {
                let mut params = [
                    param(&ta),
                    param(&tb),
                    param(&a_s),
                    param(&bsptr),
                    param(&out),
                    param(&ws),
                    param(&bias),
                    param(&mi),
                    param(&ni),
                    param(&ki),
                    param(&kbpsi),
                    param(&splitsi),
                ];
                launch_overlapped(s, &v.gemm[oi], cfg, &mut params, what)
            } else {
                let mut b = s.launch_builder(&v.gemm[oi]);
                b.arg(&ta)
                    .arg(&tb)
                    .arg(&a_s)
                    .arg(&bsptr)
                    .arg(&out)
                    .arg(&ws)
                    .arg(&bias);
                b.arg(&mi).arg(&ni).arg(&ki).arg(&kbpsi).arg(&splitsi);
                launch(b, cfg, what)
            }
        }
        .map_err(be(NAME))?;
        if splits > 1 {
            let mut f = s.launch_builder(&st.finalize[oi]);
            f.arg(&ws)
                .arg(&out)
                .arg(&bias)
                .arg(&mi)
                .arg(&ni)
                .arg(&splitsi);
            // SAFETY: ws holds splits*m*n partial sums, out m*n elements, bias n floats.
            unsafe { launch(f, elementwise(m * n), "hopper_finalize") }.map_err(be(NAME))?;
        }
        Ok(())
    }
}

/// The launch of a call: tile variant, K split and work units (of clusters, for a
/// clustered variant).
struct Plan {
    variant: usize,
    splits: usize,
    kb_per_split: usize,
    units: usize,
    /// Launched overlapped with the quantization before it (programmatic dependent launch).
    overlap: bool,
}

impl State {
    /// The launch for `m` rows: the tile height of [`plan_tile_rows`] (or the one fixed by
    /// the options, `knobs` = (max splits, tile rows, cluster, overlap)); clusters of two only when
    /// the options ask and the height has them (on the H200 they measured no faster: see
    /// [`VARIANTS`]); the K split of [`plan_splits`] (none for tiles of more than 128 rows).
    fn launch(
        &self,
        c: &LayerConfig,
        gpu: &Gpu,
        knobs: (usize, Option<usize>, Option<usize>, bool),
        m: usize,
    ) -> Plan {
        let (max_splits, tile_rows, cluster, overlap) = knobs;
        let sms = gpu.device().sm_count.max(1) as usize;
        let tall = self.variants.iter().any(|v| v.bm > 128);
        let bm = tile_rows.unwrap_or_else(|| plan_tile_rows(m, c.n, sms, tall));
        let num_m = m.div_ceil(bm);
        let want = cluster.unwrap_or(1);
        let variant = self
            .variants
            .iter()
            .position(|v| v.bm == bm && v.cluster == want)
            .or_else(|| {
                self.variants
                    .iter()
                    .position(|v| v.bm == bm && v.cluster == 1)
            })
            .expect("tile heights are checked at build");
        let cl = self.variants[variant].cluster;
        let tiles = num_m.div_ceil(cl) * c.n.div_ceil(128);
        let kb = c.k.div_ceil(128);
        let (splits, kb_per_split) = if bm > 128 {
            (1, kb)
        } else {
            plan_splits(tiles * cl, kb, sms, m * c.n, max_splits)
        };
        Plan {
            variant,
            splits,
            kb_per_split,
            units: tiles * splits,
            overlap,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_fill_the_gpu_without_overshooting() {
        // Many tiles: no split.
        assert_eq!(plan_splits(1792, 56, 132, 4096 * 7168, 16), (1, 56));
        // M = 1, N = 4096 (32 tiles), 56 K blocks: one wave of at least 4 splits.
        let (s, per) = plan_splits(32, 56, 132, 4096, 16);
        assert!(s * 32 <= 132 && s >= 4, "{s}");
        assert!(per * s >= 56 && per * (s - 1) < 56);
        // The cap holds; never more splits than K blocks.
        assert_eq!(plan_splits(32, 56, 132, 4096, 1), (1, 56));
        assert_eq!(plan_splits(1, 1, 132, 1, 16), (1, 1));
        let (s, per) = plan_splits(3, 5, 132, 300, 16);
        assert!(s <= 5 && per * s >= 5);
        // Choices the H200 measurements back: a short K (16 blocks) over 56 tiles is not
        // split at M = 1 (splitting measured 1.7x slower); a long K over 32 or 144 tiles is.
        assert_eq!(plan_splits(56, 16, 132, 7168, 16).0, 1);
        assert!(plan_splits(32, 56, 132, 4096, 16).0 >= 3);
        assert!(plan_splits(144, 56, 132, 18432, 16).0 > 1);
        // Large outputs split less: the partials cost more than the waves they save.
        let (s_small, _) = plan_splits(68, 56, 132, 64 * 2112, 16);
        let (s_large, _) = plan_splits(68, 56, 132, 4096 * 2112, 16);
        assert!(s_large <= s_small, "{s_large} > {s_small}");
    }

    #[test]
    fn every_variant_fits_hopper_shared_memory() {
        // 227 KiB per block (H100 / H200 opt-in), for every weight block the kernel takes;
        // the tall tiles only where they exist.
        for block in [
            (32, 32),
            (64, 64),
            (128, 128),
            (128, 32),
            (32, 128),
            (64, 128),
        ] {
            for &(bm, _, _, stages, tag) in &VARIANTS {
                if bm > 128 && !has_tall_tile(block) {
                    continue;
                }
                let smem = smem_bytes(bm, stages, block);
                assert!(smem <= 232_448, "{tag} {block:?}: {smem}");
            }
        }
        // 128x128 blocks, 128 rows: 6 stages of 32 KiB tiles, 516 B of scales (rounded to
        // 528) and 16 B of barriers each.
        assert_eq!(
            smem_bytes(128, 6, (128, 128)),
            1024 + 6 * (32768 + 528 + 16)
        );
    }

    #[test]
    fn tile_heights_follow_the_waves() {
        // Up to 64 rows: one math warpgroup. Without the tall tiles: 128.
        assert_eq!(plan_tile_rows(1, 4096, 132, true), 64);
        assert_eq!(plan_tile_rows(64, 4096, 132, true), 64);
        assert_eq!(plan_tile_rows(4096, 4096, 132, false), 128);
        // The heights it picks at M = 4096 and 512 by N: the H200 bench's best (docs/perf-log.md)
        // except 24576x1536 at 4096 and 18432x7168 at 512, where 192 rows measured 4 % and
        // 5 % faster; 7168 stands for 7168x2048 and 7168x16384.
        for (n, at_4096, at_512) in [
            (4096, 256, 128),
            (7168, 256, 256),
            (2112, 192, 128),
            (24576, 256, 256),
            (18432, 256, 128),
        ] {
            assert_eq!(plan_tile_rows(4096, n, 132, true), at_4096, "M=4096 N={n}");
            assert_eq!(plan_tile_rows(512, n, 132, true), at_512, "M=512 N={n}");
        }
        // M = 128: one unit per CTA at most for 128-row tiles on these N.
        assert_eq!(plan_tile_rows(128, 4096, 132, true), 128);
        assert_eq!(plan_tile_rows(65, 128, 132, true), 128);
    }

    #[test]
    fn tile_rows_option_is_checked_at_build() {
        use fp8_linear_core::{DType, Device, KernelOptions};
        let device = Device::profile("h200").unwrap();
        let build = |cfg: &LayerConfig, rows: u16| {
            let options = KernelOptions::none().tile_rows(rows);
            HopperBlockFp8::new(&BuildCtx::new(cfg, &device, &options)).err()
        };
        let c = LayerConfig::block_128(4096, 7168, DType::Bf16, DType::Bf16);
        let e = build(&c, 96).expect("96 rows refused").to_string();
        assert!(
            e.contains("tile_rows 96") && e.contains("64, 128, 192 or 256"),
            "{e}"
        );
        // 32-column weight blocks have no tall tiles.
        let narrow = LayerConfig::block(
            4096,
            7168,
            (128, 32),
            fp8_linear_core::ScaleDtype::F32,
            DType::Bf16,
            DType::Bf16,
        );
        let e = build(&narrow, 256).expect("256 rows refused").to_string();
        assert!(e.contains("64 or 128"), "{e}");
        // Heights it has pass the check (and then stop at the profile device, no GPU).
        for rows in [64, 128, 192, 256] {
            let e = build(&c, rows).map(|e| e.to_string()).unwrap_or_default();
            assert!(!e.contains("tile_rows"), "{rows}: {e}");
        }
        // Cluster sizes: 1 and 2 pass, others are refused by name.
        let cluster = |ctas: u16| {
            let options = KernelOptions::none().cluster(ctas);
            HopperBlockFp8::new(&BuildCtx::new(&c, &device, &options))
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
        };
        let e = cluster(4);
        assert!(e.contains("cluster 4") && e.contains("1 or 2"), "{e}");
        for ctas in [1, 2] {
            assert!(!cluster(ctas).contains("cluster"), "{ctas}");
        }
    }

    #[test]
    fn accepts_model_shapes_and_rejects_32_bit_overflow() {
        use fp8_linear_core::DType;
        for (n, k) in [(7748, 3884), (1, 1), (24576, 1536), (7, 16384)] {
            let c = LayerConfig::block_128(n, k, DType::Bf16, DType::Bf16);
            assert!(HopperBlockFp8::can_implement(&c).is_ok(), "{n}x{k}");
        }
        let big = i32::MAX as usize - 100;
        for (n, k) in [(big, 128), (128, big)] {
            let c = LayerConfig::block_128(n, k, DType::Bf16, DType::Bf16);
            assert!(HopperBlockFp8::can_implement(&c).is_err(), "{n}x{k}");
        }
    }
}
