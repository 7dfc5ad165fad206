//! The grouped Marlin kernel: E experts of one weight-only (W8A16) layer in one launch of the
//! Marlin kernels built with `-DMARLIN_GROUPED` (`marlin_grouped_*`). Each expert's weight
//! is repacked as a dense layer's and the E of them stacked; a call's rows are cut into items
//! of at most one M tile of one expert, each a pass over that expert's weight, and the
//! stages of all the items, laid end to end, into one range per resident block, so every SM
//! streams an equal share of the experts touched whatever their rows. The items are a table
//! the host uploads with the routing weights, or, masked with the counts in device memory,
//! derived from the counts by every block.

use std::sync::Arc;

use cudarc::driver::{DeviceRepr, PushKernelArg};
use fp8_linear_core::grouped::{DeviceMasked, Fp8GroupedKernel, GroupedWeights, Routing};
use fp8_linear_core::kernel::processed;
use fp8_linear_core::validate::check_layer_weights;
use fp8_linear_core::{
    fp8_kernel, BuildCtx, Capability, Fp8Kernel, KernelError, LayerConfig, Tensor, TensorMut,
    Unsupported,
};
use fp8_linear_cuda::cudarc;
use fp8_linear_cuda::Gpu;

use super::device::{DeviceMarlin, KernelNames};
use super::plan::{self, GroupedPlan, GroupedWork, MarlinPipeline};
use super::repack;
use super::{host_codes, MarlinFp8};
use crate::cuda::skeleton::device_io::gpu_of;
use crate::cuda::skeleton::error::{be, be_at, compile_target};
use crate::cuda::skeleton::grouped::{masked_io, routed_io, segments, GroupedIo, RoutingUpload};
use crate::cuda::skeleton::launch::{grid, launch};
use crate::cuda::skeleton::scratch::Scratch;
use crate::cuda::skeleton::weights::small_to_host;
use crate::cuda::sources;

const NAME: &str = MarlinGroupedFp8::NAME;

const KERNELS: KernelNames = [
    [
        "marlin_grouped_f16_mt1",
        "marlin_grouped_f16_mt2",
        "marlin_grouped_f16_mt4",
        "marlin_grouped_f16_mt8",
    ],
    [
        "marlin_grouped_bf16_mt1",
        "marlin_grouped_bf16_mt2",
        "marlin_grouped_bf16_mt4",
        "marlin_grouped_bf16_mt8",
    ],
];

/// Grouped Marlin-class FP8 weight-only GEMM (W8A16) for Ampere-class GPUs (sm_80..sm_89,
/// forcible on newer ones: the A100 path for mixture-of-experts layers): E experts of one
/// layer [`MarlinFp8`] takes (every weight scale layout it takes, f16 or bf16 activations,
/// output in the activation dtype, optional bias), every call form of [`Routing`] in one
/// launch. The rows of each expert are cut into items of at most one M tile (8 to 64 rows,
/// chosen for the call's tallest segment, or the masked call's expected rows), each a pass
/// over its expert's weight; every resident block streams an equal range of all the items'
/// weight stages, and cut stripes are summed in a fixed order (reruns are bit-identical).
/// `(sum + bias) * route_weight` leaves in the activation dtype; rows no expert owns are not
/// written.
///
/// Tested on the GPU and on its host model (every call form, clamped device counts, every M
/// tile); second in the block-scaled grouped table and first in the others
/// ([`crate::tables::GROUPED`]); its sm_80 code is timed on an H100 in the MoE bench
/// (`cargo bench -p fp8-linear --bench moe`). A [`Routing`] call uploads its item table and
/// routing weights (one copy from host memory, refused inside a CUDA graph capture); a
/// masked call with its counts in device memory
/// ([`GroupedLinear::forward_masked_on_device`](crate::GroupedLinear::forward_masked_on_device))
/// uploads nothing and can be captured.
#[fp8_kernel(platform = Cuda, kind = Grouped, priority = 4, arch = sm80..sm89,
             force_arch = sm80.., backend = marlin, numerics = W8A16)]
pub struct MarlinGroupedFp8 {
    gpu: Arc<Gpu>,
    config: LayerConfig,
    target: Option<Capability>,
    tuning: MarlinPipeline,
    state: Option<State>,
}

struct State {
    /// The experts' repacked weights, one after another.
    dev: DeviceMarlin,
    experts: usize,
    /// A call's items as (expert, first row, rows) i32 triples, uploaded with the routing
    /// weights.
    routing: RoutingUpload,
    /// The rows of a call's segments (the plan's input).
    rows: Vec<usize>,
    work: Scratch<f32>,
    counters: Scratch<u8>,
}

/// The grouped kernels' second argument (`struct Groups` in `cu/marlin.cu`, same field
/// order and types): the item table or the masked counts, the routing weights (device
/// addresses, 0 for none).
#[repr(C)]
#[derive(Copy, Clone, Debug)]
struct Groups {
    items: u64,
    counts: u64,
    rw: u64,
    n_items: i32,
    experts: i32,
    m_max: i32,
}

// SAFETY: plain-old-data with the C layout the kernel's `Groups` has.
unsafe impl DeviceRepr for Groups {}

impl MarlinGroupedFp8 {
    /// Builds the kernel for one expert's layer on the context's GPU (nothing touches the
    /// GPU until `process_weights`); the options' `compile_for` picks an older target as for
    /// [`MarlinFp8::compile_for`] (8.0 or newer).
    pub fn new(ctx: &BuildCtx<'_>) -> Result<Self, KernelError> {
        let needs = "the Marlin kernel needs compute capability 8.0 or newer";
        let target = ctx
            .options()
            .compile_for
            .map(|cap| compile_target(NAME, cap, Capability::new(8, 0), needs))
            .transpose()?;
        Ok(MarlinGroupedFp8 {
            gpu: gpu_of(NAME, ctx)?,
            config: *ctx.config(),
            target,
            tuning: MarlinPipeline::default(),
            state: None,
        })
    }
}

// Not listed among "other types that implement it" in the error for a type that does not
// implement `Fp8GroupedKernel` (as the CPU grouped kernels).
#[diagnostic::do_not_recommend]
impl Fp8GroupedKernel for MarlinGroupedFp8 {
    fn can_implement(config: &LayerConfig) -> Result<(), Unsupported> {
        <MarlinFp8 as Fp8Kernel>::can_implement(config)
    }

    fn process_weights(&mut self, weights: &GroupedWeights<'_>) -> Result<(), KernelError> {
        self.state = None;
        let (gpu, c) = (&self.gpu, &self.config);
        weights.check(c)?;
        // Every expert's weights checked (and its bias taken) before any is repacked.
        let mut bias = Vec::new();
        for e in 0..weights.experts {
            let w = weights.expert(e)?;
            check_layer_weights(c, &w)?;
            if let (Some(b), true) = (&w.bias, c.bias) {
                bias.extend(small_to_host(NAME, "bias", b, gpu)?);
            }
        }
        // A layer without a bias (or not declaring one) runs without one, as the dense one.
        let bias = (!bias.is_empty()).then_some(bias);
        // Each expert repacked as a dense layer, uploaded into its place in the stack.
        let expert = |e: usize| {
            let w = weights.expert(e)?;
            let codes = host_codes(&w.weight, c.n, c.k, gpu)?;
            let scales = small_to_host(NAME, "weight_scale", &w.weight_scale, gpu)?;
            repack::prepare(c, &codes, &scales)
        };
        let module = (&sources::marlin_grouped_module(), &KERNELS, self.target);
        let parts = (weights.experts, expert);
        let dev = DeviceMarlin::upload(NAME, gpu, module, parts, bias.as_deref())?;
        // Graphs captured before a scratch buffer grows keep addressing the old one.
        let (mut work, mut counters) = (Scratch::default(), Scratch::default());
        work.keep_retired();
        counters.keep_retired();
        self.state = Some(State {
            dev,
            experts: weights.experts,
            routing: RoutingUpload::default(),
            rows: Vec::new(),
            work,
            counters,
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
        st.rows.clear();
        st.rows
            .extend(segments(routing, st.experts, m).map(|(_, _, rows)| rows));
        if st.rows.is_empty() {
            return Ok(()); // no row is routed: nothing to compute or write
        }
        let p = st.plan(gpu, GroupedWork::Routed(&st.rows), &self.tuning)?;
        // One item per M tile of each segment: (expert, first row, rows).
        let bm = 8 * p.mt;
        let words = &mut st.routing.words;
        words.clear();
        for (e, r0, rows) in segments(routing, st.experts, m) {
            for t in (0..rows).step_by(bm) {
                words.extend([e, r0 + t, bm.min(rows - t)].map(|v| v as i32));
            }
        }
        let n_items = words.len() / 3;
        let up = st
            .routing
            .upload(NAME, gpu, (routing, st.experts), route_weights, m)?;
        let (items, rw) = (up.table, up.rw);
        let groups = Groups {
            items,
            counts: 0,
            rw,
            n_items: n_items as i32,
            experts: st.experts as i32,
            m_max: 0,
        };
        // SAFETY: the items are the routing's segments cut at bm rows (experts in 0..E, rows
        // inside 0..m: Routing::check via routed_io), n_items of them, as the plan counted;
        // the routing weights m floats.
        unsafe { st.enqueue(c, gpu, (m, x, out), &p, groups) }
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
        let work = GroupedWork::Masked {
            experts: st.experts,
            m_max,
            expected: routing.expected_rows,
        };
        let p = st.plan(gpu, work, &self.tuning)?;
        let groups = Groups {
            items: 0,
            counts: routing.counts.ptr,
            rw: routing.route_weights.map_or(0, |w| w.ptr),
            n_items: 0,
            experts: st.experts as i32,
            m_max: m_max as i32,
        };
        // SAFETY: counts holds E i32 and the routing weights m floats on this GPU
        // (masked_io); the kernel clamps each count to 0..=m_max, so every item lies inside
        // its slab of the m = E * m_max rows, and it has at most the plan's max_items items.
        unsafe { st.enqueue(c, gpu, (m, x, out), &p, groups) }
    }
}

impl State {
    /// The launch plan of `work` on `gpu`'s SMs and shared memory; an error when the shared
    /// memory holds no ring beside a masked call's table of the counts, or when the items'
    /// stages do not fit the kernel's 32-bit counts.
    fn plan(
        &self,
        gpu: &Gpu,
        work: GroupedWork<'_>,
        tuning: &MarlinPipeline,
    ) -> Result<GroupedPlan, KernelError> {
        let dev = &self.dev;
        let sms = gpu.device().sm_count as usize;
        let p = GroupedPlan::new(
            work,
            (dev.stripes(), dev.ksteps()),
            (sms, dev.smem_optin),
            tuning,
        )
        .ok_or_else(|| {
            let table = format!(
                "the {} B table of the counts of {} experts",
                work.table_bytes(),
                self.experts
            );
            dev.too_few_stages(NAME, Some(table))
        })?;
        let stages = p.max_items as u128 * p.stripes as u128 * (dev.ksteps() / 4) as u128;
        if stages >= 1 << 31 {
            return Err(KernelError::shape(
                "input",
                "rows whose M tiles times the experts' weight stages stay below 2^31",
                format!("{} items of {} rows", p.max_items, 8 * p.mt),
            ));
        }
        Ok(p)
    }

    /// Enqueues the grouped GEMM of the `m` rows at `x` into `out` on plan `p`, routed by
    /// `groups`.
    ///
    /// # Safety
    /// `groups` addresses device memory of this GPU: `items` n_items (expert, first row,
    /// rows) triples with experts in 0..E, rows at most 8 * p.mt and inside 0..m, n_items
    /// at most p.max_items; or `counts` E counts with E x m_max = m; `rw` m floats or 0.
    unsafe fn enqueue(
        &mut self,
        c: &LayerConfig,
        gpu: &Arc<Gpu>,
        (m, x, out): GroupedIo,
        p: &GroupedPlan,
        groups: Groups,
    ) -> Result<(), KernelError> {
        let (work, counters) = if p.cuts {
            let work = self.work.get(gpu, p.workspace_floats());
            let work = work.map_err(be_at(NAME, m))?.ptr();
            // Zeroed when allocated; the last block of each stripe resets its counter.
            let counters = self.counters.get(gpu, p.counters() * 4);
            (work, counters.map_err(be_at(NAME, m))?.ptr())
        } else {
            (0, 0)
        };
        let args = self.dev.args(
            c,
            m,
            (x.ptr, out.ptr),
            (work, counters),
            (p.stripes, p.stages),
        );
        let mut b = gpu
            .stream()
            .launch_builder(&self.dev.funcs[p.mt.trailing_zeros() as usize]);
        b.arg(&args).arg(&groups);
        let cfg = grid((1, p.ranges as u32, 1), plan::THREADS, p.smem as u32);
        let what = format_args!("marlin_grouped (MT={}, {} ranges)", p.mt, p.ranges);
        // SAFETY: the stacked weights, scales and channel scales cover E experts of
        // (n_pad, k_pad, groups), the bias E * n floats (or none); input and output were
        // checked by routed_io / masked_io (contiguous [m, k] / [m, n] of this GPU); the
        // workspace and counters were sized by the plan for its ranges and most items, the
        // counters zero between launches; the routing as the caller vouches; the shared
        // memory (ring and table) within the limit the functions were loaded with.
        unsafe { launch(b, cfg, what) }.map_err(be(NAME))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_layers_marlin_takes_and_no_other() {
        use fp8_linear_core::DType;
        let ok = LayerConfig::block_128(2048, 7168, DType::Bf16, DType::Bf16);
        assert!(MarlinGroupedFp8::can_implement(&ok).is_ok());
        let f32_in = LayerConfig::block_128(2048, 7168, DType::F32, DType::F32);
        assert!(MarlinGroupedFp8::can_implement(&f32_in).is_err());
    }
}
