//! What the block-scaled FP8 kernels (R x C weight blocks, dynamic 1 x C activation groups)
//! share: the configs they accept, [`BlockWeights`] (a layer's weights on the device in one
//! [`WeightLayout`], shared by the layer's kernels of that layout) and [`BlockLayer`], the
//! weights and activation quantization in front of each kernel's GEMM. A kernel supplies
//! only its weight layout and its activation-scale order ([`ActLayout`]); in the skeleton's
//! steps (`layer::Recipe`) its reservation takes the activation scratch through
//! [`BlockLayer::reserve`] and its launch runs the GEMM on what [`BlockLayer::quantize`]
//! returns.

use std::sync::Arc;

use fp8_linear_core::quant::GroupShape;
use fp8_linear_core::validate::check_config_basics;
use fp8_linear_core::{DType, KernelError, LayerConfig, LayerWeights, SharedWeights, Unsupported};
use fp8_linear_cuda::{CudaError, DeviceBuffer, Gpu};

use super::error::{be, be_at};
use super::layer::Io;
use super::weights::DeviceWeights;
use crate::cuda::quant::{ActQuant, GroupQuantBuffers, Grouping, RoutedRows, ScaleOrder};

/// The weight-block shapes a block kernel takes.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Blocks {
    /// 128 x 128 blocks only (cuBLASLt's block-scaled mode).
    Only128,
    /// R x C blocks with R a multiple of 8 (along N: each 8-column MMA tile within one
    /// block) and C in 32, 64, 128 (along K: whole MMA K steps of 32 in a 128-long K tile).
    Tiled,
}

/// Layers the block-FP8 CUDA kernels accept: f32 or ue8m0 (power-of-two f32) weight block
/// scales of the shapes `blocks` allows, dynamic 1xC activation groups as wide as the
/// blocks (f32 or ue8m0 scales), float input and output.
pub const fn block_checks(config: &LayerConfig, blocks: Blocks) -> Result<(), Unsupported> {
    if let Err(e) = check_config_basics(config) {
        return Err(e);
    }
    let cols = match (config.weight.group, blocks) {
        (
            GroupShape::Block {
                rows: 128,
                cols: 128,
            },
            _,
        ) => 128,
        (GroupShape::Block { rows, cols }, Blocks::Tiled) => {
            if rows == 0 || !rows.is_multiple_of(8) || !matches!(cols, 32 | 64 | 128) {
                return Err(Unsupported::new(
                    "weight blocks must be RxC with R (along N) a multiple of 8 and C (along \
                     K) 32, 64 or 128",
                ));
            }
            cols
        }
        (GroupShape::Block { .. }, Blocks::Only128) => {
            return Err(Unsupported::new(
                "weights must be quantized in 128x128 blocks",
            ))
        }
        _ => return Err(Unsupported::new("weights must be block-quantized")),
    };
    match config.activation {
        Some(a) => {
            match a.group {
                GroupShape::Group { cols: g } if g == cols => {}
                _ => {
                    return Err(Unsupported::new(
                        "activations must be quantized in 1xC groups, C the weight block's \
                         width along K",
                    ))
                }
            }
            if !a.dynamic {
                return Err(Unsupported::new(
                    "only dynamic per-token-group activation quantization is supported",
                ));
            }
        }
        None => return Err(Unsupported::new("activations must be quantized (W8A8)")),
    }
    if matches!(config.input_dtype, DType::F8E4m3) {
        return Err(Unsupported::new("input dtype must be f32, f16 or bf16"));
    }
    if matches!(config.output_dtype, DType::F8E4m3) {
        return Err(Unsupported::new("output dtype must be f32, f16 or bf16"));
    }
    if config.n > i32::MAX as usize || config.k > i32::MAX as usize {
        return Err(Unsupported::new("N and K must fit in 32 bits"));
    }
    Ok(())
}

/// For kernels that index tiles past N and K (up to N + 255) in 32-bit integers: N and K
/// below 2^31 - 256.
pub const fn tile_indices_fit(config: &LayerConfig) -> Result<(), Unsupported> {
    if config.n > i32::MAX as usize - 256 || config.k > i32::MAX as usize - 256 {
        return Err(Unsupported::new("N and K must be below 2^31 - 256"));
    }
    Ok(())
}

/// The weight block `(rows along N, cols along K)` of a block layer (128 x 128 for any
/// other weight key).
pub fn weight_block(config: &LayerConfig) -> (usize, usize) {
    match config.weight.group {
        GroupShape::Block { rows, cols } => (rows as usize, cols as usize),
        _ => (128, 128),
    }
}

/// How a kernel lays out the weight block scales on the device, from the row-major
/// `[nb, kb]` = `[ceil(N/R), ceil(K/C)]` scales of the checkpoint (R x C blocks).
pub type ScaleLayout = fn(scales: &[f32], nb: usize, kb: usize) -> Vec<f32>;

/// The weight block scales as given: `[nb, kb]` row-major.
pub fn row_major(scales: &[f32], _nb: usize, _kb: usize) -> Vec<f32> {
    scales.to_vec()
}

/// How a kernel lays out a block layer's weights on the device: the codes' row padding and
/// the block scales' order. Kernels of one layout share one device copy of a layer's
/// weights (the layer's [`SharedWeights`], keyed by `name`).
#[derive(Copy, Clone, Debug)]
pub struct WeightLayout {
    /// The layout's name: the key of its copy among a layer's shared weights.
    pub name: &'static str,
    /// Code rows padded to a multiple of this many bytes (16, or 128 for whole K blocks).
    pub pad: usize,
    /// The block scales' order.
    pub scales: ScaleLayout,
}

/// Rows padded to 16 bytes, row-major block scales: the portable kernel's layout, and the
/// Hopper and decode kernels' when no kernel of another layout is in the layer's plan (both
/// read any layout's copy).
pub const ROWS_16_ROW_MAJOR: WeightLayout = WeightLayout {
    name: "block FP8: rows padded to 16 bytes, row-major block scales",
    pad: 16,
    scales: row_major,
};

/// A block-scaled layer's weights on the device in one [`WeightLayout`]: what the block
/// kernels of a layer share.
pub struct BlockWeights {
    /// The weight codes `[n, ldk]`, row stride, bias.
    pub w: DeviceWeights,
    /// The weight block scales in the layout's [`ScaleLayout`].
    pub scales: DeviceBuffer<f32>,
}

impl BlockWeights {
    /// Validates and uploads the weights in `layout`. Device weights must be on `gpu` and
    /// ready on its stream. Returns the copy and its device bytes.
    fn load(
        kernel: &'static str,
        gpu: &Arc<Gpu>,
        config: &LayerConfig,
        weights: &LayerWeights<'_>,
        layout: WeightLayout,
    ) -> Result<(Self, usize), KernelError> {
        let w = DeviceWeights::load_padded(kernel, gpu, config, weights, layout.pad)?;
        let block = weight_block(config);
        let (nb, kb) = (config.n.div_ceil(block.0), config.k.div_ceil(block.1));
        let scales = DeviceBuffer::from_host(gpu, &(layout.scales)(&w.host_scales, nb, kb))
            .map_err(be(kernel))?;
        let bytes = w.codes.len() + 4 * (scales.len() + w.bias.as_ref().map_or(0, |b| b.len()));
        Ok((BlockWeights { w, scales }, bytes))
    }

    /// The layer's copy in `layout`: taken from the layer's `shared` weights when they
    /// hold it, else made (and put there for the layer's other kernels).
    pub fn get(
        kernel: &'static str,
        gpu: &Arc<Gpu>,
        config: &LayerConfig,
        weights: &LayerWeights<'_>,
        layout: WeightLayout,
        shared: Option<&Arc<SharedWeights>>,
    ) -> Result<Arc<Self>, KernelError> {
        let make = || Self::load(kernel, gpu, config, weights, layout);
        match shared {
            Some(s) => s.get_or_try_insert(layout.name, make),
            None => make().map(|(w, _)| Arc::new(w)),
        }
    }

    /// The block scales' row stride in floats (each layout stores them row-major: rows of
    /// ceil(K / C), padded in some layouts).
    pub fn scale_ld(&self, config: &LayerConfig) -> usize {
        self.scales.len() / config.n.div_ceil(weight_block(config).0).max(1)
    }

    /// For a kernel that reads every layout: the first copy the layer's `shared` weights
    /// hold, else a copy in `fallback` (put there as [`BlockWeights::get`] does).
    pub fn any(
        kernel: &'static str,
        gpu: &Arc<Gpu>,
        config: &LayerConfig,
        weights: &LayerWeights<'_>,
        fallback: WeightLayout,
        shared: Option<&Arc<SharedWeights>>,
    ) -> Result<Arc<Self>, KernelError> {
        if let Some((w, _)) = shared.and_then(|s| s.any::<BlockWeights>()) {
            return Ok(w);
        }
        Self::get(kernel, gpu, config, weights, fallback, shared)
    }
}

/// How a kernel wants the 1 x C activation scales of a call.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ActLayout {
    /// `[M, G]` row-major.
    RowMajor,
    /// M fastest, over M rounded up to a multiple of `rows` (1: unpadded); the quantized
    /// codes have as many rows (those past M hold whatever the scratch held).
    ColMajor {
        /// The multiple M is padded to.
        rows: usize,
    },
}

impl ActLayout {
    /// The rows of the quantized activations for `m` input rows, and their scale order.
    fn for_rows(self, m: usize) -> (usize, ScaleOrder) {
        match self {
            ActLayout::RowMajor => (m, ScaleOrder::RowMajor),
            ActLayout::ColMajor { rows: 1 } => (m, ScaleOrder::ColMajor),
            ActLayout::ColMajor { rows } => {
                let padded = m.div_ceil(rows) * rows;
                (padded, ScaleOrder::ColMajorLd(padded))
            }
        }
    }
}

/// A block-scaled layer on the GPU: the weight codes (rows padded), the weight block scales
/// in the kernel's layout, and the activation quantization with its scratch.
pub struct BlockLayer {
    /// The weights in the kernel's layout (shared with the layer's other kernels of that
    /// layout).
    pub weights: Arc<BlockWeights>,
    quant: ActQuant,
    act: GroupQuantBuffers,
    layout: ActLayout,
    grouping: Grouping,
}

/// What [`BlockLayer::quantize`] hands the GEMM: the call's sizes and device addresses.
#[derive(Copy, Clone, Debug)]
pub struct BlockCall {
    /// Rows of the quantized activations and their scales (M padded per [`ActLayout`]).
    pub rows: usize,
    /// The output `[m, n]`.
    pub out: u64,
    /// The activation codes `[rows, ldk]`.
    pub codes: u64,
    /// The activation scales `rows * ceil(k / C)`, in the kernel's order.
    pub scales: u64,
}

impl BlockLayer {
    /// The weights in `layout` (the layer's shared copy when `shared` holds one, see
    /// [`BlockWeights::get`]) and the activation quantization. Device weights must be on
    /// `gpu` and ready on its stream.
    pub fn load(
        kernel: &'static str,
        gpu: &Arc<Gpu>,
        config: &LayerConfig,
        (weights, shared): (&LayerWeights<'_>, Option<&Arc<SharedWeights>>),
        layout: WeightLayout,
        act: ActLayout,
    ) -> Result<Self, KernelError> {
        let weights = BlockWeights::get(kernel, gpu, config, weights, layout, shared)?;
        Self::with_weights(kernel, gpu, config, weights, act)
    }

    /// The layer around a weight copy the kernel got itself, such as
    /// [`BlockWeights::any`]'s for a kernel that reads every layout (codes with rows padded
    /// to 16 bytes or more, row-major scales of any row stride: [`BlockWeights::scale_ld`]):
    /// the activation quantization of `config`'s groups.
    pub fn with_weights(
        kernel: &'static str,
        gpu: &Arc<Gpu>,
        config: &LayerConfig,
        weights: Arc<BlockWeights>,
        act: ActLayout,
    ) -> Result<Self, KernelError> {
        let grouping = Grouping::of(config).ok_or_else(|| {
            KernelError::backend(kernel, "block layers quantize activations in 1xC groups")
        })?;
        let quant = ActQuant::new(gpu).map_err(be(kernel))?;
        Ok(BlockLayer {
            weights,
            quant,
            act: GroupQuantBuffers::default(),
            layout: act,
            grouping,
        })
    }

    /// The rows of the quantized activations for `m` input rows (M padded per the kernel's
    /// [`ActLayout`]).
    pub fn rows(&self, m: usize) -> usize {
        self.layout.for_rows(m).0
    }

    /// Makes the activation scratch ready for calls of `m` rows; returns the addresses of
    /// the codes and the scales. Allocates only when it is too small, which is refused
    /// while `gpu`'s stream is being captured.
    pub fn reserve(
        &mut self,
        config: &LayerConfig,
        gpu: &Arc<Gpu>,
        m: usize,
    ) -> Result<(u64, u64), CudaError> {
        let rows = self.rows(m);
        self.act.reserve(
            gpu,
            rows,
            (config.k, self.grouping.cols),
            self.weights.w.ldk,
        )
    }

    /// Keeps grown activation buffers alive (graphs captured before stay valid).
    pub fn keep_retired(&mut self) {
        self.act.keep_retired();
    }

    /// Quantizes the input (`m` rows at `io.1`, checked by the skeleton's `GpuLayer::apply`)
    /// per 1 x C group into the layer's scratch in the kernel's [`ActLayout`], enqueued on
    /// `gpu`'s stream; or, for a pre-quantized call (`io.3`, from
    /// `GpuLayer::apply_quantized`), takes the given codes and row-major scales: passed as
    /// they are where they already are what the kernel reads (rows of `ldk = K` bytes,
    /// 16-byte aligned, no padded rows; row-major scales, or one group), else copied into
    /// the scratch in the kernel's layout. Call [`BlockLayer::reserve`] for `m` first: then
    /// nothing is allocated.
    pub fn quantize(
        &mut self,
        kernel: &'static str,
        config: &LayerConfig,
        gpu: &Arc<Gpu>,
        io: Io,
    ) -> Result<BlockCall, KernelError> {
        // SAFETY: no routed rows.
        unsafe { self.quantize_routed(kernel, config, gpu, io, None) }
    }

    /// [`BlockLayer::quantize`], with `routed` (a masked grouped call) only its rows.
    ///
    /// # Safety
    /// `routed`'s counts address `ceil(m / slab)` i32 of `gpu`, ready on its stream.
    pub unsafe fn quantize_routed(
        &mut self,
        kernel: &'static str,
        config: &LayerConfig,
        gpu: &Arc<Gpu>,
        io: Io,
        routed: Option<RoutedRows>,
    ) -> Result<BlockCall, KernelError> {
        let Io(m, x, out, _) = io;
        let (rows, order) = self.layout.for_rows(m);
        let (k, ldk) = (config.k, self.weights.w.ldk);
        let (codes, scales) = match io.pre_quantized() {
            None => {
                // SAFETY: x holds the m * k input elements (checked by device_io) on this GPU;
                // the caller vouches for `routed`.
                unsafe {
                    self.act.quantize(
                        &self.quant,
                        gpu,
                        x.ptr,
                        config.input_dtype,
                        (m, k, rows, ldk),
                        self.grouping,
                        order,
                        routed,
                    )
                }
            }
            Some((q, s)) => {
                let groups = k.div_ceil(self.grouping.cols);
                self.act
                    .reserve(gpu, rows, (k, self.grouping.cols), ldk)
                    .and_then(|(dq, ds)| {
                        // SAFETY: q holds m * k bytes and s m * groups floats (checked by
                        // check_quantized_io) on this GPU; the scratch rows * ldk bytes and
                        // rows * groups floats.
                        unsafe {
                            let codes = self.quant.given_codes(q.ptr, (m, k), (rows, ldk), dq)?;
                            let g = (m, groups, false);
                            Ok((codes, self.quant.given_scales(s.ptr, g, ds, order)?))
                        }
                    })
            }
        }
        .map_err(be_at(kernel, m))?;
        Ok(BlockCall {
            rows,
            out: out.ptr,
            codes,
            scales,
        })
    }
}
