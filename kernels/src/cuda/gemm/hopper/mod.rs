//! Hopper block-scaled FP8 GEMM (sm_90a, the DeepGEMM class): TMA loads into a multi-stage
//! shared-memory ring with mbarriers; a producer warpgroup with few registers (setmaxnreg)
//! whose first thread issues the tile loads and whose second warp copies each stage's
//! scales into shared memory (cp.async, arriving on the stage's barrier); math warpgroups
//! issuing wgmma m64nNk32 e4m3 from 128B-swizzled descriptors, with per-block promotion
//! into f32 with the 1xC activation and RxC weight scales (R 32, 64 or 128, C 32, 64 or 128;
//! f32 or ue8m0); a stage goes back to the producer after its promotions. Persistent tile
//! scheduling over tiles of 64, 128, 192 or 256 rows x 16 to 144 columns, both chosen per
//! call by [`plan_tile`] so the tiles fill the GPU; the tiles of at most 128 rows and
//! columns keep two accumulator sets, so one scale block's MMAs run while the previous one
//! is promoted. Split-K where no tile fills the GPU (each split stores its partial tile to
//! an f32 workspace, an epilogue kernel sums them in order). Tiles (and split partial sums)
//! leave through a small shared buffer per math warp as whole 16-byte row pieces where the
//! output's row length allows it. On request
//! ([`KernelOptions::cluster`](fp8_linear_core::KernelOptions)), clusters of two CTAs along M
//! that load each weight tile once, half each, multicast to both. The GEMM is launched
//! overlapped with the activation quantization before it (programmatic dependent launch,
//! [`KernelOptions::overlap`](fp8_linear_core::KernelOptions), on by default): its launch,
//! prologue and first round of weight tiles run while the quantization does, and it waits for
//! the quantization before it reads the activations. It reads the weights in any block
//! layout (the scales with their row stride), so in a plan with cuBLASLt for other rows it
//! uses cuBLASLt's copy and the layer holds the weights once.
//! Source: `cu/hopper_gemm.cu` (and the wgmma wrappers, `cu/wgmma.cuh`); the tiles it has
//! are listed in `variants.rs` beside this file, the planner is in `plan.rs`, and the
//! grouped (mixture-of-experts) form of the same kernel, [`HopperGroupedFp8`], in
//! `grouped.rs`.

use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaModule, PushKernelArg};
use fp8_linear_core::{
    fp8_kernel, BuildCtx, Fp8Kernel, KernelError, LayerConfig, LayerWeights, Unsupported,
};
use fp8_linear_cuda::cudarc;
use fp8_linear_cuda::tma::TensorMap;
use fp8_linear_cuda::Gpu;

use crate::cuda::skeleton::block::{
    block_checks, tile_indices_fit, weight_block, ActLayout, BlockLayer, BlockWeights, Blocks,
    ROWS_16_ROW_MAJOR,
};
use crate::cuda::skeleton::dtype::float_index;
use crate::cuda::skeleton::error::{be, be_at};
use crate::cuda::skeleton::launch::{elementwise, grid, launch, launch_params, param};
use crate::cuda::skeleton::layer::{skeleton_calls, Call, GpuLayer, Io, Recipe};
use crate::cuda::skeleton::plans_by_m::PlansByM;
use crate::cuda::skeleton::scratch::Scratch;

/// The Hopper module specs (compiled for `sm_90a`), registered in [`crate::cuda::sources`].
pub use crate::cuda::sources::{hopper_grouped_module, hopper_module};
pub use grouped::HopperGroupedFp8;
pub use plan::{plan_tile, tile_cost, TileChoice};

use variants::{has_tall_tile, has_variant, has_width, smem_bytes, VARIANTS, WIDTHS};

mod grouped;
mod plan;
mod variants;

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
    /// A fixed tile width (the build options' `tile_cols`); None chooses per call.
    tile_cols: Option<usize>,
    /// A fixed cluster size, 1 or 2 (the build options' `cluster`); None chooses per call.
    cluster: Option<usize>,
    /// The GEMM launched overlapped with the activation quantization (the build options'
    /// `overlap`, default on).
    overlap: bool,
}

/// One tile (height, width) and cluster size: its pipeline depth, kernel and weight map.
struct Variant {
    bm: usize,
    bn: usize,
    /// CTAs per cluster along M (2: the weight tile is multicast to both).
    cluster: usize,
    /// Math warpgroups (the CTA has one more, the producer).
    math_wgs: u32,
    smem: u32,
    gemm: CudaFunction,
    /// The weight codes' tensor map: boxes of `bn / cluster` rows x 128 bytes.
    tb: TensorMap,
}

struct State {
    /// Weights (the layer's copy in any block layout: row-major block scales of row stride
    /// `scale_ld`), activations with M-fastest group scales.
    block: BlockLayer,
    /// The entries of [`VARIANTS`] this layer has ([`has_variant`]).
    variants: Vec<Variant>,
    _module: Arc<CudaModule>,
    /// The split-K epilogue (of the layer's output dtype).
    finalize: CudaFunction,
    /// Split-K partial sums, `splits * m * n` floats.
    ws: Scratch<f32>,
    /// Last activation tensor map: (codes address, M, BM) -> map.
    ta: Option<((u64, usize, usize), TensorMap)>,
    /// Launch plans by M, with the knobs each was made for: planning weighs every tile and K
    /// split (1.4-2.2 us of host time per call on the 2-core development machine, release
    /// build), a kept plan is a lookup.
    plans: PlansByM<(Knobs, Plan)>,
}

impl HopperBlockFp8 {
    /// Builds the kernel for a layer on the context's GPU (nothing touches the GPU until
    /// `process_weights`).
    ///
    /// A `tile_rows` option other than 64, 128, 192 or 256 (192 and 256 need weight blocks of
    /// at least 64 columns along K) is [`KernelError::Backend`] naming the heights it has; so
    /// is a `tile_cols` option other than the widths of the layer's weight blocks (16, 32, 64
    /// and 128; 96, 112 and 144 too over 128-row blocks), and a `cluster` option other than 1
    /// or 2.
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
        let tile_cols = ctx.options().tile_cols.map(usize::from);
        if let Some(w) = tile_cols {
            let block = weight_block(ctx.config());
            if !has_width(w, block) {
                let widths: Vec<String> = WIDTHS
                    .iter()
                    .filter(|&&bn| has_width(bn, block))
                    .map(|bn| bn.to_string())
                    .collect();
                return Err(KernelError::backend(
                    NAME,
                    format!(
                        "tile_cols {w}: this layer's tiles are {} columns",
                        widths.join(", ")
                    ),
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
            tile_cols,
            cluster,
            overlap: ctx.options().overlap.unwrap_or(true),
        })
    }
}

/// Which kernels of the Hopper source a layer loads.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Form {
    /// `hopper_gemm_*` of [`hopper_module`]: one layer, every tile the layer has.
    Dense,
    /// `hopper_grouped_*` of [`hopper_grouped_module`]: stacked experts, the tiles without
    /// clusters but the 192-row one (whose registers would spill the grouped walk's).
    Grouped,
}

/// The module of `form` for weight blocks `block` and output dtype `output` (a float
/// index), with a variant for each entry of [`VARIANTS`] the layer has in that form, over the
/// weight codes at `codes` (`n` rows of `ldk` bytes); errors name `kernel`.
fn load(
    (kernel, form): (&'static str, Form),
    gpu: &Arc<Gpu>,
    (block, output): ((usize, usize), usize),
    (codes, n, ldk): (u64, usize, usize),
) -> Result<(Arc<CudaModule>, Vec<Variant>), KernelError> {
    let optin = gpu.max_shared_memory_per_block().map_err(be(kernel))?;
    let (spec, prefix) = match form {
        Form::Dense => (hopper_module(block, output), "hopper_gemm"),
        Form::Grouped => (hopper_grouped_module(block, output), "hopper_grouped"),
    };
    let (module, _) = gpu.module(&spec).map_err(be(kernel))?;
    let in_form =
        |v: &&(usize, usize, usize, u32, u32)| form == Form::Dense || (v.2 == 1 && v.0 != 192);
    let variants = VARIANTS
        .iter()
        .filter(|v| has_variant(v, block))
        .filter(in_form)
        .map(|&(bm, bn, cluster, math_wgs, stages)| {
            let smem = smem_bytes((bm, bn, math_wgs), stages, block, form == Form::Grouped);
            if smem > optin {
                return Err(KernelError::backend(
                    kernel,
                    format!("needs {smem} B of shared memory per block, the device allows {optin}"),
                ));
            }
            let c2 = if cluster > 1 { "c2" } else { "" };
            let name = format!("{prefix}_bm{bm}_n{bn}{c2}");
            let gemm = fp8_linear_cuda::function_with_shared_memory(&module, &name, smem)
                .map_err(be(kernel))?;
            let box_rows = (bn / cluster) as u32;
            let tb = TensorMap::e4m3_2d(codes, n, ldk, ldk, box_rows, 128).map_err(be(kernel))?;
            Ok(Variant {
                bm,
                bn,
                cluster,
                math_wgs,
                smem,
                gemm,
                tb,
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok((module, variants))
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
        // Any block layout's copy (cuBLASLt's, when the layer's plan has it for other rows):
        // the kernel reads the scales with their row stride.
        let shared = l.shared.as_ref();
        let copy = BlockWeights::any(NAME, gpu, config, weights, ROWS_16_ROW_MAJOR, shared)?;
        let block = BlockLayer::with_weights(NAME, gpu, config, copy, act)?;
        let w = &block.weights.w;
        let codes = (w.codes.ptr(), config.n, w.ldk);
        let output = float_index("output", config.output_dtype)?;
        let (module, variants) = load(
            (NAME, Form::Dense),
            gpu,
            (weight_block(config), output),
            codes,
        )?;
        let finalize = fp8_linear_cuda::function(&module, "hopper_finalize").map_err(be(NAME))?;
        self.layer.set(State {
            block,
            variants,
            _module: module,
            finalize,
            ws: Scratch::default(),
            ta: None,
            plans: PlansByM::default(),
        });
        Ok(())
    }

    skeleton_calls!(layer, |k| {
        (k.max_splits, k.tile_rows, k.tile_cols, k.cluster, k.overlap)
    });
}

impl Recipe for State {
    /// (max splits, tile rows, tile columns, cluster size, overlapped launch).
    type Knobs = Knobs;
    type Plan = Plan;
    /// The split-K workspace's address (0 without a split).
    type Scratch = u64;

    fn plan(&mut self, call: Call<'_>, knobs: &Self::Knobs) -> Result<Plan, KernelError> {
        let (c, gpu, m, knobs) = (call.c, call.gpu, call.m, *knobs);
        let variants = &self.variants;
        let make = || launch_plan(variants, c, gpu, knobs, m);
        let kept = self
            .plans
            .get_or_make(m, || Ok::<_, KernelError>((knobs, make())))?;
        if kept.0 != knobs {
            *kept = (knobs, make());
        }
        let p = kept.1;
        if p.units > i32::MAX as usize {
            // The kernel numbers its work units with 32-bit integers.
            return Err(call.too_many_rows(
                "[M, K] with fewer than 2^31 work units of 64 to 256 rows x 16 to 144 columns",
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

    fn keep_retired(&mut self, max_m: usize) {
        self.block.keep_retired();
        self.ws.keep_retired();
        self.plans.pin_up_to(max_m);
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

        let bias = st
            .block
            .weights
            .w
            .bias
            .as_ref()
            .map(|b| b.ptr())
            .unwrap_or(0);
        let bsptr = st.block.weights.scales.ptr();
        let ldbs = st.block.weights.scale_ld(c) as i32;
        let (mi, ni, ki) = (m as i32, n as i32, k as i32);
        let (kbpsi, splitsi) = (kbps as i32, splits as i32);
        let tb = v.tb;
        let threads = 128 * (v.math_wgs + 1);
        let sms = gpu.device().sm_count.max(1) as usize;
        // Persistent: at most one CTA per SM; whole clusters (the kernel walks the units by
        // cluster, `p.units` counting clusters' units).
        let ctas = p.units.min(sms / v.cluster) * v.cluster;
        let cfg = grid((ctas as u32, 1, 1), threads, v.smem);
        let what = format_args!(
            "hopper_gemm (BM={}, BN={}, cluster {}, {splits} splits)",
            v.bm, v.bn, v.cluster
        );
        // Development trace (feature `dev-sources`, FP8_LINEAR_TRACE set): each distinct
        // launch once.
        #[cfg(feature = "dev-sources")]
        if std::env::var_os("FP8_LINEAR_TRACE").is_some() {
            static SEEN: std::sync::Mutex<Vec<[usize; 7]>> = std::sync::Mutex::new(Vec::new());
            let key = [m, n, k, v.bm, v.bn, splits, usize::from(overlap)];
            let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
            if !seen.contains(&key) {
                seen.push(key);
                eprintln!("{NAME} M={m} N={n} K={k}: {what}, {ctas} CTAs, overlap {overlap}");
            }
        }
        let s = gpu.stream();
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
            param(&ldbs),
        ];
        // SAFETY: the layer's stream belongs to this GPU; the tensor maps cover A (m x ldk
        // bytes of codes at `q`, from the quantization) and B (n x ldk bytes of the weight
        // codes, boxes of the variant's width); the kernels store the layer's output dtype;
        // As holds ceil(k/C)*m floats, Bs ceil(n/R) rows of ldbs >= ceil(k/C) floats, out
        // m*n elements, ws splits*m*n floats when split; the kernel masks every store and
        // TMA zero-fills out-of-bounds boxes. Overlapped (never for given codes): the kernel
        // before it on the stream is the quantization just enqueued, and the kernel waits for
        // it (griddep_wait) before it reads the codes or the activation scales and so before
        // anything it writes; what it reads before (weight codes) was written before that
        // kernel.
        unsafe { launch_params(s, &v.gemm, cfg, &mut params, overlap, what) }.map_err(be(NAME))?;
        if splits > 1 {
            let mut f = s.launch_builder(&st.finalize);
            f.arg(&ws)
                .arg(&out)
                .arg(&bias)
                .arg(&mi)
                .arg(&ni)
                .arg(&splitsi);
            // SAFETY: ws holds splits*m*n partial sums, out m*n elements, bias n floats.
            unsafe { launch(f, elementwise(m * n), "hopper_finalize") }.map_err(be(NAME))?;
        }
        #[cfg(feature = "dev-sources")]
        stamps_dump(NAME, &st._module, s)?;
        Ok(())
    }
}

/// Development stamps (feature `dev-sources`, FP8_LINEAR_STAMPS set): a module compiled
/// from FP8_LINEAR_CU_DIR sources that define `hopper_stamps_dump` records stamps of some
/// launches; that kernel, enqueued on `s` after each GEMM, prints them.
#[cfg(feature = "dev-sources")]
fn stamps_dump(
    name: &'static str,
    module: &Arc<CudaModule>,
    s: &cudarc::driver::CudaStream,
) -> Result<(), KernelError> {
    if std::env::var_os("FP8_LINEAR_STAMPS").is_none() {
        return Ok(());
    }
    if let Ok(dump) = module.load_function("hopper_stamps_dump") {
        let b = s.launch_builder(&dump);
        // SAFETY: the dump kernel takes no arguments and reads only its module's globals.
        unsafe { launch(b, grid((1, 1, 1), 1, 0), "hopper_stamps_dump") }.map_err(be(name))?;
    }
    Ok(())
}

/// The build options a call's plan reads: (max splits, tile rows, tile columns, cluster
/// size, overlapped launch).
type Knobs = (usize, Option<usize>, Option<usize>, Option<usize>, bool);

/// The launch of a call: tile variant, K split and work units (of clusters, for a
/// clustered variant).
#[derive(Copy, Clone, Debug, PartialEq)]
struct Plan {
    variant: usize,
    splits: usize,
    kb_per_split: usize,
    units: usize,
    /// Launched overlapped with the quantization before it (programmatic dependent launch).
    overlap: bool,
}

/// The launch for `m` rows over the layer's `variants`: the tile and K split of
/// [`plan_tile`] among the variants without clusters (a height or width fixed by the options narrows the choice; `knobs`
/// = (max splits, tile rows, tile columns, cluster, overlap)); clusters of two only when
/// the options ask and the tile has them (on the H200 they measured no faster: see
/// [`VARIANTS`]), their K split planned over the same tiles.
fn launch_plan(variants: &[Variant], c: &LayerConfig, gpu: &Gpu, knobs: Knobs, m: usize) -> Plan {
    let (max_splits, tile_rows, tile_cols, cluster, overlap) = knobs;
    let sms = gpu.device().sm_count.max(1) as usize;
    let fits = |v: &Variant| {
        v.cluster == 1 && tile_rows.is_none_or(|r| v.bm == r) && tile_cols.is_none_or(|w| v.bn == w)
    };
    let mut tiles: Vec<(usize, usize)> = variants
        .iter()
        .filter(|v| fits(v))
        .map(|v| (v.bm, v.bn))
        .collect();
    if tiles.is_empty() {
        // A fixed width the fixed height lacks: the height's own widths, chosen as usual.
        tiles = variants
            .iter()
            .filter(|v| v.cluster == 1 && tile_rows.is_none_or(|r| v.bm == r))
            .map(|v| (v.bm, v.bn))
            .collect();
    }
    let t = plan_tile(m, c.n, c.k, sms, &tiles, max_splits);
    let want = cluster.unwrap_or(1);
    let variant = variants
        .iter()
        .position(|v| v.bm == t.bm && v.bn == t.bn && v.cluster == want)
        .or_else(|| {
            variants
                .iter()
                .position(|v| v.bm == t.bm && v.bn == t.bn && v.cluster == 1)
        })
        .expect("plan_tile picks among the layer's variants");
    let cl = variants[variant].cluster;
    let tiles = m.div_ceil(t.bm).div_ceil(cl) * c.n.div_ceil(t.bn);
    Plan {
        variant,
        splits: t.splits,
        kb_per_split: t.kb_per_split,
        units: tiles * t.splits,
        overlap,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tile_rows_option_is_checked_at_build() {
        use fp8_linear_core::{DType, Device, KernelOptions};
        let device = Device::profile("h200").unwrap();
        // The build error of `options` on `cfg`, "" when it builds.
        let error = |cfg: &LayerConfig, options: KernelOptions| {
            HopperBlockFp8::new(&BuildCtx::new(cfg, &device, &options))
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
        };
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
        // A 4096x7168 layer of `block` weight blocks.
        let blocks = |block: (u32, u32)| {
            let f32_scales = fp8_linear_core::ScaleDtype::F32;
            LayerConfig::block(4096, 7168, block, f32_scales, DType::Bf16, DType::Bf16)
        };
        // 32-column weight blocks have no tall tiles.
        let narrow = blocks((128, 32));
        let e = build(&narrow, 256).expect("256 rows refused").to_string();
        assert!(e.contains("64 or 128"), "{e}");
        // Heights it has pass the check (and then stop at the profile device, no GPU).
        for rows in [64, 128, 192, 256] {
            let e = build(&c, rows).map(|e| e.to_string()).unwrap_or_default();
            assert!(!e.contains("tile_rows"), "{rows}: {e}");
        }
        // Widths: 96 exists over 128-row blocks only; 48 nowhere.
        let cols = |cfg: &LayerConfig, w: u16| error(cfg, KernelOptions::none().tile_cols(w));
        let e = cols(&c, 48);
        assert!(
            e.contains("tile_cols 48") && e.contains("16, 32, 64, 96"),
            "{e}"
        );
        let b64 = blocks((64, 64));
        let e = cols(&b64, 96);
        assert!(e.contains("16, 32, 64, 128 columns"), "{e}");
        for w in [16, 32, 64, 96, 112, 128, 144] {
            assert!(!cols(&c, w).contains("tile_cols"), "{w}");
        }
        // Cluster sizes: 1 and 2 pass, others are refused by name.
        let cluster = |ctas: u16| error(&c, KernelOptions::none().cluster(ctas));
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
