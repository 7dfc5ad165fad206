//! The grouped Hopper kernel: E experts of one block-scaled layer (a mixture-of-experts
//! projection) in one persistent launch of the Hopper GEMM's grouped kernels
//! (`hopper_grouped_*`, the same source built with `-DHOPPER_GROUPED`): the call's rows are
//! cut into (expert, first row, rows) segments on the host, uploaded (or, masked with the
//! counts in device memory, read there by the kernel), and the CTAs walk
//! every segment's tiles, each reading its expert's rows of the stacked weights, scales and
//! bias; the routing weights are multiplied in the epilogue. The activations of every row
//! are quantized once, as a dense layer's, and the GEMM is launched overlapped with that
//! quantization (its launch and first weight loads run while the quantization does).

use std::sync::Arc;

use cudarc::driver::CudaModule;
use fp8_linear_core::grouped::{DeviceMasked, Fp8GroupedKernel, GroupedWeights, Routing};
use fp8_linear_core::kernel::processed;
use fp8_linear_core::{
    fp8_kernel, BuildCtx, DeviceMemory, Fp8Kernel, KernelError, LayerConfig, Tensor, TensorMut,
    Unsupported,
};
use fp8_linear_cuda::cudarc;
use fp8_linear_cuda::tma::TensorMap;
use fp8_linear_cuda::Gpu;

use super::{load, plan_tile, Form, HopperBlockFp8, Variant};
use crate::cuda::quant::RoutedRows;
use crate::cuda::skeleton::block::{weight_block, ActLayout, BlockLayer};
use crate::cuda::skeleton::device_io::gpu_of;
use crate::cuda::skeleton::dtype::float_index;
use crate::cuda::skeleton::error::{be, be_at};
use crate::cuda::skeleton::grouped::{
    masked_io, routed_io, segments, stackable, stacked_block, RoutingUpload,
};
use crate::cuda::skeleton::launch::{grid, launch_params, param};
use crate::cuda::skeleton::layer::Io;
use crate::cuda::skeleton::plans_by_m::PlansByM;

const NAME: &str = HopperGroupedFp8::NAME;

/// Grouped block-scaled FP8 GEMM with wgmma and TMA for Hopper (sm_90a exactly): E experts
/// of one layer (the layers [`HopperBlockFp8`] takes whose N is a multiple of the weight
/// block's rows, as every mixture-of-experts checkpoint's is), every call form of
/// [`Routing`] in one launch: the persistent CTAs walk the tiles of each expert's rows
/// (an empty expert has none; rows no expert owns are neither computed nor written), each
/// tile reads its expert's slice of the stacked weights, and `(sum + bias) * route_weight`
/// leaves in the layer's output dtype. Never split along K; the tile is chosen per call
/// from the mean rows per expert.
///
/// Tested on the GPU and on its host model (every call form, empty experts, ragged segments,
/// each tile height); first in the block-scaled grouped table ([`crate::tables::GROUPED`]),
/// timed in the MoE bench (`cargo bench -p fp8-linear --bench moe`).
/// A [`Routing`] call uploads its segments and routing weights from host memory (one copy),
/// which a stream being captured into a CUDA graph refuses ([`KernelError::Backend`] saying
/// so); a masked call with its counts and routing weights in device memory
/// ([`GroupedLinear::forward_masked_on_device`](crate::GroupedLinear::forward_masked_on_device))
/// uploads nothing and can be captured: the CTAs read each expert's count there, clamped to
/// the slab, and the launch is sized for every slab full. Like the dense kernel, the GEMM
/// is launched overlapped with the activation quantization before it (programmatic
/// dependent launch; [`KernelOptions::overlap`](fp8_linear_core::KernelOptions) turns it
/// off).
#[fp8_kernel(platform = Cuda, kind = Grouped, priority = 1, arch = sm90a, backend = hopper)]
pub struct HopperGroupedFp8 {
    gpu: Arc<Gpu>,
    config: LayerConfig,
    /// The GEMM launched overlapped with the activation quantization (the build options'
    /// `overlap`, default on), as the dense kernel's.
    overlap: bool,
    state: Option<State>,
}

struct State {
    /// The stacked weights (`[E * N, ldk]` codes, `[E * N / R, ldbs]` scales, `[E * N]`
    /// bias) and the activation quantization (M-fastest group scales).
    block: BlockLayer,
    experts: usize,
    /// The scale rows' stride in floats.
    ldbs: usize,
    /// The grouped tiles, their kernels and weight maps (over the `E * N` stacked rows).
    variants: Vec<Variant>,
    _module: Arc<CudaModule>,
    /// A call's segments as (expert, first row, rows) i32 triples, uploaded with the
    /// routing weights.
    routing: RoutingUpload,
    /// The tiles of calls so far ([`State::tile`]).
    tiles: PlansByM<(usize, usize, usize)>,
    /// Last activation tensor map: (codes address, M, BM) -> map.
    ta: Option<((u64, usize, usize), TensorMap)>,
    /// The GEMM launched overlapped with the quantization (the kernel's `overlap`).
    overlap: bool,
}

impl HopperGroupedFp8 {
    /// Builds the kernel for one expert's layer on the context's GPU (nothing touches the
    /// GPU until `process_weights`).
    pub fn new(ctx: &BuildCtx<'_>) -> Result<Self, KernelError> {
        Ok(HopperGroupedFp8 {
            gpu: gpu_of(NAME, ctx)?,
            config: *ctx.config(),
            overlap: ctx.options().overlap.unwrap_or(true),
            state: None,
        })
    }
}

// Not listed among "other types that implement it" in the error for a type that does not
// implement `Fp8GroupedKernel` (as the CPU grouped kernels).
#[diagnostic::do_not_recommend]
impl Fp8GroupedKernel for HopperGroupedFp8 {
    fn can_implement(config: &LayerConfig) -> Result<(), Unsupported> {
        <HopperBlockFp8 as Fp8Kernel>::can_implement(config)?;
        stackable(config)
    }

    fn process_weights(&mut self, weights: &GroupedWeights<'_>) -> Result<(), KernelError> {
        self.state = None;
        let (gpu, config) = (&self.gpu, &self.config);
        let act = ActLayout::ColMajor { rows: 1 };
        let (block, ldbs) = stacked_block(NAME, gpu, config, weights, act)?;
        let w = &block.weights.w;
        let codes = (w.codes.ptr(), weights.experts * config.n, w.ldk);
        let output = float_index("output", config.output_dtype)?;
        let (module, variants) = load(
            (NAME, Form::Grouped),
            gpu,
            (weight_block(config), output),
            codes,
        )?;
        self.state = Some(State {
            block,
            experts: weights.experts,
            ldbs,
            variants,
            _module: module,
            routing: RoutingUpload::default(),
            tiles: PlansByM::default(),
            ta: None,
            overlap: self.overlap,
        });
        Ok(())
    }

    fn apply(
        &mut self,
        input: &Tensor<'_>,
        routing: &Routing<'_>,
        route_weights: Option<&[f32]>,
        output: &mut TensorMut<'_>,
    ) -> Result<(), KernelError> {
        let (c, gpu) = (&self.config, &self.gpu);
        let st = processed(&mut self.state, NAME)?;
        let at = (NAME, c, gpu.as_ref(), st.experts);
        let (m, x, out) = routed_io(at, input, (routing, route_weights), output)?;
        // The segments with rows (routed_io: rows fit in i32).
        let words = &mut st.routing.words;
        words.clear();
        let mut routed = 0;
        for (e, r0, rows) in segments(routing, st.experts, m) {
            routed += rows;
            words.extend([e as i32, r0 as i32, rows as i32]);
        }
        let nseg = words.len() / 3;
        if nseg == 0 {
            return Ok(()); // no row is routed: nothing to compute or write
        }
        let t = st.tile(gpu, (routed, nseg), (c.n, c.k))?;
        let tiles = |s: &[i32]| (s[2] as usize).div_ceil(t.0) * c.n.div_ceil(t.1);
        let units: usize = st.routing.words.chunks(3).map(tiles).sum();
        st.block.reserve(c, gpu, m).map_err(be_at(NAME, m))?;
        let up = st
            .routing
            .upload(NAME, gpu, (routing, st.experts), route_weights, m)?;
        let work = Work {
            segs: up.table,
            counts: 0,
            nseg,
            m_max: 0,
            rw: up.rw,
            routed: up.routed,
        };
        // SAFETY: the segments are the routing's, checked against the experts and the m
        // rows (Routing::check via routed_io); the routing weights m floats.
        unsafe { st.enqueue(c, gpu, (m, x, out), t, units, work) }
    }

    fn apply_masked_on_device(
        &mut self,
        input: &Tensor<'_>,
        routing: &DeviceMasked,
        output: &mut TensorMut<'_>,
    ) -> Result<(), KernelError> {
        let (c, gpu) = (&self.config, &self.gpu);
        let st = processed(&mut self.state, NAME)?;
        let at = (NAME, c, gpu.as_ref(), st.experts);
        let ((m, x, out), rows) = masked_io(at, input, routing, output)?;
        let m_max = rows.slab;
        let e = st.experts;
        let t = st.tile(gpu, (routing.expected_rows * e, e), (c.n, c.k))?;
        // At most every slab full: the grid's bound (the CTAs find the counts' units).
        let units = e * m_max.div_ceil(t.0) * c.n.div_ceil(t.1);
        st.block.reserve(c, gpu, m).map_err(be_at(NAME, m))?;
        let work = Work {
            segs: 0,
            counts: routing.counts.ptr,
            nseg: e,
            m_max,
            rw: routing.route_weights.map_or(0, |w| w.ptr),
            routed: Some(rows),
        };
        // SAFETY: counts holds E i32 and the routing weights m floats on this GPU
        // (DeviceMasked::check, same_device); the kernel clamps each count to 0..=m_max, so
        // every segment lies inside its slab of the m = E * m_max rows.
        unsafe { st.enqueue(c, gpu, (m, x, out), t, units, work) }
    }
}

/// A grouped launch's routing: the segments' triples (`segs`) or the masked counts
/// (`counts`, over slabs of `m_max` rows), `nseg` of them, and the routing weights (`rw`);
/// device addresses, 0 for none; a masked call's rows for its quantization (`routed`).
struct Work {
    segs: u64,
    counts: u64,
    nseg: usize,
    m_max: usize,
    rw: u64,
    routed: Option<RoutedRows>,
}

impl State {
    /// The tile (rows, columns) and its variant's index for `routed` rows over `nseg`
    /// segments ([`grouped_tile`]).
    /// Kept by (mean rows per segment, segments), as the dense layer keeps its plans by M:
    /// the planner weighs every tile (microseconds of host time), a kept tile is a lookup.
    fn tile(
        &mut self,
        gpu: &Gpu,
        (routed, nseg): (usize, usize),
        (n, k): (usize, usize),
    ) -> Result<(usize, usize, usize), KernelError> {
        // (Both below 2^31: rows and segments are checked to fit in i32.)
        let key = (routed.div_ceil(nseg.max(1)) << 32) | nseg;
        let variants = &self.variants;
        let make = || {
            let sms = gpu.device().sm_count.max(1) as usize;
            let tiles: Vec<(usize, usize)> = variants.iter().map(|v| (v.bm, v.bn)).collect();
            let t = grouped_tile((routed, nseg), (n, k), sms, &tiles);
            let vi = tiles
                .iter()
                .position(|&v| v == (t.bm, t.bn))
                .ok_or_else(|| {
                    KernelError::backend(NAME, "plan_tile picked a tile it was not given")
                })?;
            Ok((t.bm, t.bn, vi))
        };
        self.tiles.get_or_make(key, make).copied()
    }

    /// Quantizes the `m` rows at `x` and enqueues the grouped GEMM of `work` into `out` on
    /// tile `(bm, bn, variant)`, a grid of at most `units` CTAs (one per SM at most).
    /// Call `block.reserve` for `m` first.
    ///
    /// # Safety
    /// `work` addresses device memory of this GPU: `segs` nseg (expert, first row, rows)
    /// triples with experts in 0..E and rows inside 0..m, or `counts` nseg = E counts with
    /// `nseg * m_max == m`; `rw` m floats; each may be 0; `routed`'s counts one i32 per slab
    /// of the m rows.
    unsafe fn enqueue(
        &mut self,
        c: &LayerConfig,
        gpu: &Arc<Gpu>,
        (m, x, out): (usize, DeviceMemory, DeviceMemory),
        (bm, bn, vi): (usize, usize, usize),
        units: usize,
        work: Work,
    ) -> Result<(), KernelError> {
        if units > i32::MAX as usize {
            return Err(KernelError::shape(
                "input",
                "[M, K] with fewer than 2^31 tiles of the experts' rows",
                format!("[{m}, {}]", c.k),
            ));
        }
        if units == 0 {
            return Ok(());
        }
        // SAFETY: `work.routed`'s counts are the call's (E of them over slabs of m / E rows),
        // as the caller vouches.
        let call = unsafe {
            (self.block).quantize_routed(NAME, c, gpu, Io(m, x, out, None), work.routed)?
        };
        let ldk = self.block.weights.w.ldk;
        let key = (call.codes, m, bm);
        let ta = match &self.ta {
            Some((k0, map)) if *k0 == key => *map,
            _ => {
                // Host-only encoding: fine during a capture (the node keeps it by value).
                let map = TensorMap::e4m3_2d(call.codes, m, ldk, ldk, bm as u32, 128)
                    .map_err(be(NAME))?;
                self.ta = Some((key, map));
                map
            }
        };
        let v = &self.variants[vi];
        let bias = self.block.weights.w.bias.as_ref().map_or(0, |b| b.ptr());
        let bs = self.block.weights.scales.ptr();
        let (a_s, out) = (call.scales, call.out);
        let (nsegi, m_maxi) = (work.nseg as i32, work.m_max as i32);
        let (mi, ni, ki, ldbs) = (m as i32, c.n as i32, c.k as i32, self.ldbs as i32);
        let sms = gpu.device().sm_count.max(1) as usize;
        let cfg = grid(
            (units.min(sms) as u32, 1, 1),
            128 * (v.math_wgs + 1),
            v.smem,
        );
        let mut params = [
            param(&ta),
            param(&v.tb),
            param(&a_s),
            param(&bs),
            param(&out),
            param(&bias),
            param(&work.rw),
            param(&work.segs),
            param(&work.counts),
            param(&nsegi),
            param(&m_maxi),
            param(&mi),
            param(&ni),
            param(&ki),
            param(&ldbs),
        ];
        let what = format_args!("hopper_grouped (BM={bm}, BN={bn}, {} segments)", work.nseg);
        // SAFETY: the layer's stream belongs to this GPU. `ta` covers the m x ldk codes the
        // quantization wrote at `call.codes`, `tb` the E * N x ldk stacked weight codes;
        // As holds ceil(k/C) * m floats (M fastest), Bs the E * N / R scale rows of ldbs
        // floats, bias E * N floats (or null), out m x n elements of the layer's output
        // dtype; the routing as the caller vouches; the kernel masks every store to its
        // segment's rows and N, and TMA zero-fills boxes past the maps. Overlapped: the
        // kernel before it on the stream is the quantization `quantize` just enqueued, which
        // the kernel waits for (griddep_wait) before it reads the codes or the activation
        // scales, and so before anything it writes; what it reads before (the weights, the
        // segments or counts, the routing weights) was written before that kernel.
        unsafe { launch_params(gpu.stream(), &v.gemm, cfg, &mut params, self.overlap, what) }
            .map_err(be(NAME))?;
        #[cfg(feature = "dev-sources")]
        super::stamps_dump(NAME, &self._module, gpu.stream())?;
        Ok(())
    }
}

/// The tile of a grouped call of `routed` rows in `nseg` non-empty segments of an `n` x `k`
/// layer on `sms` SMs among `tiles`: [`plan_tile`]'s for a dense layer of the mean rows per
/// segment and the segments' columns side by side (their tiles fill the GPU alike), never
/// split along K.
fn grouped_tile(
    (routed, nseg): (usize, usize),
    (n, k): (usize, usize),
    sms: usize,
    tiles: &[(usize, usize)],
) -> super::TileChoice {
    plan_tile(routed.div_ceil(nseg.max(1)), nseg * n, k, sms, tiles, 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_takes_64_row_tiles_and_prefill_tall_ones() {
        use crate::cuda::hopper::variants::{has_variant, VARIANTS};
        // The grouped tiles of a 128x128-block layer (no clusters, no 192-row tile).
        let tiles: Vec<(usize, usize)> = VARIANTS
            .iter()
            .filter(|v| v.2 == 1 && v.0 != 192 && has_variant(v, (128, 128)))
            .map(|v| (v.0, v.1))
            .collect();
        let tile = |experts: usize, rows: usize, (n, k)| {
            let t = grouped_tile((experts * rows, experts), (n, k), 132, &tiles);
            assert_eq!(t.splits, 1);
            (t.bm, t.bn)
        };
        // Masked decode, 1 to 16 rows per expert: 64-row tiles (the fewest wasted rows).
        for (e, r) in [(64, 1), (32, 4), (8, 16)] {
            for shape in [(4096, 7168), (7168, 2048), (1536, 2048)] {
                assert_eq!(tile(e, r, shape).0, 64, "{e} x {r} on {shape:?}");
            }
        }
        // Contiguous prefill: the dense layer's tile for the rows per expert.
        assert_eq!(tile(8, 4096, (4096, 7168)), (256, 128));
        assert!(tile(8, 512, (4096, 7168)).0 >= 128);
    }
}
