//! Decode block-scaled FP8 on Hopper: M up to [`DECODE_MAX_M`] rows in one launch that
//! quantizes the activations itself, streams the weight once at full bandwidth with FP8
//! `mma.sync` (swap AB: the weight is the 16-row operand) and reduces split K inside the
//! kernel (the last split of a tile sums the partials; no memset, no second launch), by
//! default for M up to [`DECODE_DEFAULT_M`] (where it measured faster). Larger M go to the
//! kernel the block table ranks next for the layer on this GPU (cuBLASLt
//! block-scaled, else our Hopper kernel, else the portable one), which owns the weights: the
//! decode launch reads that kernel's device copy, so the layer is on the GPU once.
//! Source: `cu/decode_gemm.cu`.

use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaModule, PushKernelArg};
use fp8_linear_core::{
    fp8_kernel, BuildCtx, Device, Fp8Kernel, KernelEntry, KernelError, LayerConfig, LayerWeights,
    Registered, Tensor, TensorMut, Unsupported,
};
use fp8_linear_cuda::cudarc;
use fp8_linear_cuda::Gpu;

use super::block::{block_checks, tile_indices_fit, weight_block, BlockLayer, Blocks};
use super::dtype::float_index;
use super::error::{be, be_at};
use super::launch::{grid, launch};
use super::quant::{vector_loads, Grouping};
use super::scratch::Scratch;
use super::sources::decode_module;
use super::{CublasLtBlockFp8, HopperBlockFp8, PortableBlockFp8};

const NAME: &str = DecodeBlockFp8::NAME;

/// The most rows the decode kernel can take (see [`DecodeBlockFp8::with_decode_up_to`]).
pub const DECODE_MAX_M: usize = 16;

/// The rows the decode kernel takes by default; larger M run on the prefill kernel. Set
/// from the H200 measurements (BENCHMARKS.md, "the decode kernel"): at M = 1 it is
/// 1.06-1.46x cuBLASLt block-scaled on all eight DeepSeek-V3-style layers measured; at M = 4
/// it wins on half of them, at M = 16 on none yet.
pub const DECODE_DEFAULT_M: usize = 1;

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
/// f16 or bf16 in and out, bias. M up to [`DecodeBlockFp8::decode_up_to`] (default
/// [`DECODE_DEFAULT_M`]) runs the one-launch decode kernel; larger M run on the next kernel
/// of the block table that takes the layer here.
#[fp8_kernel(platform = Cuda, priority = 1, arch = sm90, backend = decode)]
pub struct DecodeBlockFp8 {
    prefill: Prefill,
    gpu: Arc<Gpu>,
    config: LayerConfig,
    /// Upper bound on K splits (the build options' `max_splits`, default 32).
    max_splits: usize,
    /// M up to this run on the decode kernel.
    decode_up_to: usize,
    state: Option<State>,
}

/// The kernel that runs M above the decode range and owns the weights.
enum Prefill {
    Lt(Box<CublasLtBlockFp8>),
    Hopper(Box<HopperBlockFp8>),
    Portable(Box<PortableBlockFp8>),
}

/// The kernel that runs a layer's M above the decode range on a device: the first of
/// cuBLASLt block-scaled, Hopper and portable (the block table's order) whose arch matches
/// the device and that implements the layer; None when none does.
pub fn prefill_entry(device: &Device, config: &LayerConfig) -> Option<&'static KernelEntry> {
    [
        &CublasLtBlockFp8::ENTRY,
        &HopperBlockFp8::ENTRY,
        &PortableBlockFp8::ENTRY,
    ]
    .into_iter()
    .find(|e| e.arch.matches(device.capability) && (e.can_implement)(config).is_ok())
}

/// Why the decode kernel runs a layer the way it does on a device, for `explain`: which M
/// it runs itself and which kernel takes the rest.
pub fn describe(device: &Device, config: &LayerConfig) -> String {
    let prefill = prefill_entry(device, config).map_or("no kernel", |e| e.name);
    format!(
        "M = {DECODE_DEFAULT_M} on {NAME} (one launch: activation quantization fused, the FP8 \
         weight streamed once, K splits reduced inside the kernel; measured 1.06-1.46x cuBLASLt \
         block-scaled at M = 1 on the H200, BENCHMARKS.md); M > {DECODE_DEFAULT_M} on {prefill}, \
         the next kernel of the table that takes the layer here (it holds the weights, which \
         the decode launch reads)"
    )
}

impl Prefill {
    /// The kernel [`prefill_entry`] names, built for the context.
    fn pick(ctx: &BuildCtx<'_>) -> Result<Self, KernelError> {
        match prefill_entry(ctx.device(), ctx.config()).map(|e| e.name) {
            Some(CublasLtBlockFp8::NAME) => Ok(Prefill::Lt(Box::new(CublasLtBlockFp8::new(ctx)?))),
            Some(HopperBlockFp8::NAME) => Ok(Prefill::Hopper(Box::new(HopperBlockFp8::new(ctx)?))),
            Some(PortableBlockFp8::NAME) => {
                Ok(Prefill::Portable(Box::new(PortableBlockFp8::new(ctx)?)))
            }
            _ => Err(KernelError::backend(
                NAME,
                "no block kernel takes this layer's M above 16 on this GPU",
            )),
        }
    }

    fn kernel(&mut self) -> &mut dyn Fp8Kernel {
        match self {
            Prefill::Lt(k) => k.as_mut(),
            Prefill::Hopper(k) => k.as_mut(),
            Prefill::Portable(k) => k.as_mut(),
        }
    }

    /// The prefill kernel's weights (after `process_weights`).
    fn block(&mut self) -> Result<&BlockLayer, KernelError> {
        match self {
            Prefill::Lt(k) => k.block_layer(),
            Prefill::Hopper(k) => k.block_layer(),
            Prefill::Portable(k) => k.block_layer(),
        }
    }

    /// The prefill kernel's name.
    pub fn name(&self) -> &'static str {
        match self {
            Prefill::Lt(_) => CublasLtBlockFp8::NAME,
            Prefill::Hopper(_) => HopperBlockFp8::NAME,
            Prefill::Portable(_) => PortableBlockFp8::NAME,
        }
    }
}

struct State {
    /// `decode_gemm_m8` (M <= 8) and `decode_gemm_m16`.
    gemm: [CudaFunction; 2],
    _module: Arc<CudaModule>,
    /// Split-K: one u32 counter per tile (zero between calls), then the f32 partials.
    ws: Scratch<f32>,
    ue8m0: bool,
}

impl DecodeBlockFp8 {
    /// Picks the prefill kernel for the layer on the context's GPU (nothing touches the GPU
    /// until `process_weights`).
    pub fn new(ctx: &BuildCtx<'_>) -> Result<Self, KernelError> {
        let prefill = Prefill::pick(ctx)?;
        Ok(DecodeBlockFp8 {
            prefill,
            gpu: super::device_io::gpu_of(NAME, ctx)?,
            config: *ctx.config(),
            max_splits: ctx
                .options()
                .max_splits
                .map_or(32, usize::from)
                .clamp(1, 64),
            decode_up_to: DECODE_DEFAULT_M,
            state: None,
        })
    }

    /// Runs M up to `m` (clamped to 1..=[`DECODE_MAX_M`]) on the decode kernel instead of
    /// [`DECODE_DEFAULT_M`]: for measuring it, or for a GPU where it wins further.
    pub fn with_decode_up_to(mut self, m: usize) -> Self {
        self.decode_up_to = m.clamp(1, DECODE_MAX_M);
        self
    }

    /// The most rows a call runs on the decode kernel; larger M go to [`Self::prefill_kernel`].
    pub fn decode_up_to(&self) -> usize {
        self.decode_up_to
    }

    /// The kernel that runs M above [`Self::decode_up_to`] for this layer.
    pub fn prefill_kernel(&self) -> &'static str {
        self.prefill.name()
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

impl State {
    /// The workspace of a call (0 without a split): reserved before anything is enqueued.
    fn reserve(
        &mut self,
        c: &LayerConfig,
        gpu: &Arc<Gpu>,
        p: &Plan,
        m: usize,
    ) -> Result<u64, KernelError> {
        let len = p.ws_len(m, c.n).ok_or_else(|| {
            KernelError::backend(
                NAME,
                format!("split-K workspace of {} x {m} x {}", p.splits, c.n),
            )
        })?;
        if len == 0 {
            return Ok(0);
        }
        Ok(self.ws.get(gpu, len).map_err(be_at(NAME, m))?.ptr())
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
        self.state = None;
        self.prefill.kernel().process_weights(weights)?;
        let c = &self.config;
        let dtypes = (
            float_index("input", c.input_dtype)?,
            float_index("output", c.output_dtype)?,
        );
        let spec = decode_module(weight_block(c), dtypes);
        let (module, _) = self.gpu.module(&spec).map_err(be(NAME))?;
        let smem = smem_bytes(16, MAX_KB_PER_SPLIT) as u32;
        let load = |name: &str| {
            fp8_linear_cuda::function_with_shared_memory(&module, name, smem).map_err(be(NAME))
        };
        let gemm = [load("decode_gemm_m8")?, load("decode_gemm_m16")?];
        let ue8m0 = Grouping::of(c).is_some_and(|g| g.ue8m0);
        self.state = Some(State {
            gemm,
            _module: module,
            ws: Scratch::default(),
            ue8m0,
        });
        Ok(())
    }

    fn apply(&mut self, input: &Tensor<'_>, output: &mut TensorMut<'_>) -> Result<(), KernelError> {
        let (c, gpu) = (&self.config, &self.gpu);
        let state = fp8_linear_core::kernel::processed(&mut self.state, NAME)?;
        // Above the decode range the prefill kernel runs (and checks) the whole call.
        if input.shape[0] > self.decode_up_to {
            return self.prefill.kernel().apply(input, output);
        }
        let block = self.prefill.block()?;
        let (m, x, out) = block.check(NAME, c, gpu, input, output)?;
        let p = Plan::new(c, gpu, self.max_splits, m);
        // Everything the call needs, before anything is enqueued.
        let ws = state.reserve(c, gpu, &p, m)?;
        let block = self.prefill.block()?;
        let (n, k) = (c.n, c.k);
        let nb = n.div_ceil(weight_block(c).0);
        let s_ld = block.scales.len() / nb;
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

    fn prepare(&mut self, max_m: usize) -> Result<(), KernelError> {
        self.prefill.kernel().prepare(max_m)?;
        let (c, gpu) = (&self.config, &self.gpu);
        let state = fp8_linear_core::kernel::processed(&mut self.state, NAME)?;
        state.ws.keep_retired();
        for m in 1..=max_m.min(self.decode_up_to) {
            let p = Plan::new(c, gpu, self.max_splits, m);
            state.reserve(c, gpu, &p, m)?;
        }
        Ok(())
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

    /// The choices the H200 split sweep backs at M = 1 (BENCHMARKS.md, the decode kernel's
    /// split table): one wave of CTAs, not more; a layer whose tiles nearly fill the GPU is
    /// not split at all.
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
