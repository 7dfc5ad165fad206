//! The grouped portable kernel: E experts of one block-scaled layer in one launch of the
//! portable GEMM's grouped kernels (`block_grouped_*`, the same source built with
//! `-DBLOCK_GROUPED`): one grid row per row tile of an expert's rows, from a table the host
//! uploads with the routing weights, or, masked with the counts in device memory, E slabs of
//! row tiles that read their expert's count there and leave when past it. Every row's
//! activations are quantized once, as a dense layer's.

use std::sync::Arc;

use cudarc::driver::PushKernelArg;
use fp8_linear_core::grouped::{DeviceMasked, Fp8GroupedKernel, GroupedWeights, Routing};
use fp8_linear_core::kernel::processed;
use fp8_linear_core::{
    fp8_kernel, BuildCtx, Capability, Fp8Kernel, KernelError, LayerConfig, Tensor, TensorMut,
    Unsupported,
};
use fp8_linear_cuda::cudarc;
use fp8_linear_cuda::Gpu;

use super::{fp8_mma_target, heights, load_variant, plan_launch, PortableBlockFp8, Variant};
use crate::cuda::quant::RoutedRows;
use crate::cuda::skeleton::block::{weight_block, ActLayout, BlockLayer};
use crate::cuda::skeleton::device_io::gpu_of;
use crate::cuda::skeleton::dtype::float_index;
use crate::cuda::skeleton::error::{be, be_at};
use crate::cuda::skeleton::grouped::{
    masked_io, routed_io, segments, stackable, stacked_block, GroupedIo, RoutingUpload,
};
use crate::cuda::skeleton::launch::{grid, launch};
use crate::cuda::skeleton::layer::Io;

const NAME: &str = PortableGroupedFp8::NAME;

/// Grouped block-scaled FP8 GEMM on FP8 `mma.sync` (sm_89+: the L4 / L40S / RTX 4090 path
/// for mixture-of-experts layers): E experts of one layer [`PortableBlockFp8`] takes whose N
/// is a multiple of the weight block's rows, every call form of [`Routing`] in one launch
/// with one grid row per 32-, 64- or 128-row tile of an expert's rows (empty experts and rows
/// no expert owns cost nothing), each reading its expert's slice of the stacked weights;
/// `(sum + bias) * route_weight` leaves in the layer's output dtype. Never split along K; the
/// tile height is the dense kernel's choice for the mean rows per expert.
///
/// Tested on the GPU and on its host model (every call form, clamped device counts, each
/// tile height); last in the block-scaled grouped table ([`crate::tables::GROUPED`]), after
/// the Hopper and Marlin grouped kernels. A [`Routing`] call uploads its row-tile table and
/// routing weights (one copy from host memory, refused inside a CUDA graph capture); a
/// masked call with its counts in device memory
/// ([`GroupedLinear::forward_masked_on_device`](crate::GroupedLinear::forward_masked_on_device))
/// uploads nothing and can be captured.
#[fp8_kernel(platform = Cuda, kind = Grouped, priority = 2, arch = sm89.., backend = portable)]
pub struct PortableGroupedFp8 {
    gpu: Arc<Gpu>,
    config: LayerConfig,
    target: Option<Capability>,
    state: Option<State>,
}

struct State {
    /// The stacked weights (`[E * N, ldk]` codes, `[E * N / R, ceil(K / C)]` scales,
    /// `[E * N]` bias) and the activation quantization (row-major group scales).
    block: BlockLayer,
    experts: usize,
    /// The grouped kernels of each tile height (32, 64, 128 rows).
    variants: Vec<Variant>,
    /// A call's row tiles as (expert, first row, end row) i32 triples, uploaded with the
    /// routing weights.
    routing: RoutingUpload,
}

impl PortableGroupedFp8 {
    /// Builds the kernel for one expert's layer on the context's GPU (nothing touches the
    /// GPU until `process_weights`); the options' `compile_for` picks an older target as for
    /// [`PortableBlockFp8`].
    pub fn new(ctx: &BuildCtx<'_>) -> Result<Self, KernelError> {
        Ok(PortableGroupedFp8 {
            gpu: gpu_of(NAME, ctx)?,
            config: *ctx.config(),
            target: ctx.options().compile_for.map(fp8_mma_target).transpose()?,
            state: None,
        })
    }
}

// Not listed among "other types that implement it" in the error for a type that does not
// implement `Fp8GroupedKernel` (as the CPU grouped kernels).
#[diagnostic::do_not_recommend]
impl Fp8GroupedKernel for PortableGroupedFp8 {
    fn can_implement(config: &LayerConfig) -> Result<(), Unsupported> {
        <PortableBlockFp8 as Fp8Kernel>::can_implement(config)?;
        stackable(config)
    }

    fn process_weights(&mut self, weights: &GroupedWeights<'_>) -> Result<(), KernelError> {
        self.state = None;
        let (gpu, config) = (&self.gpu, &self.config);
        // (The tall copy's scale rows are ceil(K / C) floats: what the kernel reads.)
        let (block, _) = stacked_block(NAME, gpu, config, weights, ActLayout::RowMajor)?;
        float_index("output", config.output_dtype)?;
        let optin = gpu.max_shared_memory_per_block().map_err(be(NAME))?;
        let scales = (weight_block(config), self.target);
        let variants = [1, 2, 4]
            .into_iter()
            .map(|mt| load_variant((NAME, true), gpu, (mt, optin), None, scales))
            .collect::<Result<Vec<_>, _>>()?;
        self.state = Some(State {
            block,
            experts: weights.experts,
            variants,
            routing: RoutingUpload::default(),
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
        let (mut routed, mut nseg) = (0, 0);
        for (_, _, rows) in segments(routing, st.experts, m) {
            routed += rows;
            nseg += 1;
        }
        if nseg == 0 {
            return Ok(()); // no row is routed: nothing to compute or write
        }
        let vi = st.height(gpu, c, (routed, nseg));
        let bm = 32 * st.variants[vi].mt as usize;
        // One row tile per grid row: (expert, first row, end row).
        let words = &mut st.routing.words;
        words.clear();
        for (e, r0, rows) in segments(routing, st.experts, m) {
            for t in (0..rows).step_by(bm) {
                words.extend([e, r0 + t, r0 + rows].map(|v| v as i32));
            }
        }
        let gm = words.len() / 3;
        st.block.reserve(c, gpu, m).map_err(be_at(NAME, m))?;
        let up = st
            .routing
            .upload(NAME, gpu, (routing, st.experts), route_weights, m)?;
        let work = Work {
            tiles: up.table,
            counts: 0,
            tps: 0,
            m_max: 0,
            rw: up.rw,
            routed: up.routed,
        };
        // SAFETY: the tiles are the routing's segments cut at bm rows (experts in 0..E,
        // rows inside 0..m: Routing::check via routed_io); the routing weights m floats.
        unsafe { st.enqueue(c, gpu, (m, x, out), (vi, gm), work) }
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
        let vi = st.height(gpu, c, (routing.expected_rows * e, e));
        let tps = m_max.div_ceil(32 * st.variants[vi].mt as usize);
        st.block.reserve(c, gpu, m).map_err(be_at(NAME, m))?;
        let work = Work {
            tiles: 0,
            counts: routing.counts.ptr,
            tps,
            m_max,
            rw: routing.route_weights.map_or(0, |w| w.ptr),
            routed: Some(rows),
        };
        // SAFETY: counts holds E i32 and the routing weights m floats on this GPU
        // (masked_io); the kernel clamps each count to 0..=m_max, so every tile lies inside
        // its slab of the m = E * m_max rows.
        unsafe { st.enqueue(c, gpu, (m, x, out), (vi, e * tps), work) }
    }
}

/// A grouped launch's routing: the row tiles' triples (`tiles`) or the masked counts
/// (`counts`, `tps` tiles per slab of `m_max` rows), and the routing weights (`rw`); device
/// addresses, 0 for none; a masked call's rows for its quantization (`routed`).
struct Work {
    tiles: u64,
    counts: u64,
    tps: usize,
    m_max: usize,
    rw: u64,
    routed: Option<RoutedRows>,
}

impl State {
    /// The tile height (index into `variants`) for `routed` rows over `nseg` experts: the
    /// dense kernel's choice for the mean rows per expert and the experts' columns side by
    /// side.
    fn height(&self, gpu: &Gpu, c: &LayerConfig, (routed, nseg): (usize, usize)) -> usize {
        let gn = c.n.div_ceil(128) * nseg;
        plan_launch(
            &heights(&self.variants, gpu),
            gn,
            routed.div_ceil(nseg.max(1)),
            1,
        )
        .0
    }

    /// Quantizes the `m` rows at `x` and enqueues the grouped GEMM of `work` into `out` on
    /// the tile height `vi`, `gm` grid rows. Call `block.reserve` for `m` first.
    ///
    /// # Safety
    /// `work` addresses device memory of this GPU: `tiles` gm (expert, first row, end row)
    /// triples with experts in 0..E and rows inside 0..m, or `counts` E counts with gm =
    /// E x tps, `tps` row tiles per slab of `m_max` rows and E x m_max = m; `rw` m floats;
    /// each may be 0; `routed`'s counts one i32 per slab of the m rows.
    unsafe fn enqueue(
        &mut self,
        c: &LayerConfig,
        gpu: &Arc<Gpu>,
        (m, x, out): GroupedIo,
        (vi, gm): (usize, usize),
        work: Work,
    ) -> Result<(), KernelError> {
        if gm > 65535 {
            return Err(KernelError::shape(
                "input",
                "[M, K] with at most 65535 row tiles of the experts' rows",
                format!("[{m}, {}]", c.k),
            ));
        }
        if gm == 0 {
            return Ok(());
        }
        // SAFETY: `work.routed`'s counts are the call's (E of them over slabs of m / E rows),
        // as the caller vouches.
        let call = unsafe {
            (self.block).quantize_routed(NAME, c, gpu, Io(m, x, out, None), work.routed)?
        };
        let v = &self.variants[vi];
        let oi = float_index("output", c.output_dtype)?;
        let w = &self.block.weights;
        let bias = w.w.bias.as_ref().map_or(0, |b| b.ptr());
        let (wptr, bs) = (w.w.codes.ptr(), w.scales.ptr());
        let ld = w.w.ldk as i32;
        let (q, a_s, out) = (call.codes, call.scales, call.out);
        let (tps, m_max) = (work.tps as i32, work.m_max as i32);
        let (mi, ni, ki) = (m as i32, c.n as i32, c.k as i32);
        let mut b = gpu.stream().launch_builder(&v.gemm[oi]);
        b.arg(&q).arg(&ld).arg(&a_s).arg(&wptr).arg(&ld).arg(&bs);
        b.arg(&out)
            .arg(&bias)
            .arg(&work.rw)
            .arg(&work.tiles)
            .arg(&work.counts);
        b.arg(&tps).arg(&m_max).arg(&mi).arg(&ni).arg(&ki).arg(&ld);
        let cfg = grid((c.n.div_ceil(128) as u32, gm as u32, 1), 256, v.smem);
        let bm = 32 * v.mt;
        let what = format_args!("block_grouped (BM={bm}, {gm} row tiles)");
        // SAFETY: the stream belongs to this GPU; A holds m * ldk codes and As m *
        // ceil(k/C) scales (the quantization's), B the E * N * ldk stacked codes and Bs
        // their E * N / R scale rows, bias E * N floats (or null), out m * n elements of the
        // output dtype; the routing as the caller vouches; the kernel masks every access to
        // its tile's rows, N and the padded K.
        unsafe { launch(b, cfg, what) }.map_err(be(NAME))?;
        Ok(())
    }
}
