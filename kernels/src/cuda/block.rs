//! What the block-scaled FP8 kernels (128 x 128 weight blocks, dynamic 1 x 128 activation
//! groups) share: the configs they accept, and [`BlockLayer`], the weights and activation
//! quantization in front of each kernel's GEMM. A kernel supplies only its weight-scale
//! layout, its row padding and its activation-scale order ([`ActLayout`]), then runs its
//! GEMM on what [`BlockLayer::quantize`] returns: each call is [`BlockLayer::check`], the
//! kernel's reservation of everything the call needs (activation scratch through
//! [`BlockLayer::reserve`], its own workspaces and plans), then the quantization and the
//! GEMM, so that a call refused during a CUDA graph capture has enqueued nothing.

use std::sync::Arc;

use fp8_linear_core::quant::{GroupShape, ScaleDtype};
use fp8_linear_core::validate::check_config_basics;
use fp8_linear_core::{
    DType, DeviceMemory, KernelError, LayerConfig, LayerWeights, Tensor, TensorMut, Unsupported,
};
use fp8_linear_cuda::{CudaError, DeviceBuffer, Gpu};

use super::device_io::{check_row_count, device_io};
use super::error::{be, be_at};
use super::quant::{ActQuant, GroupQuantBuffers, ScaleOrder};
use super::weights::DeviceWeights;

/// Layers the block-FP8 CUDA kernels accept: 128x128 f32 weight blocks, dynamic 1x128 f32
/// activation groups, float input and output.
pub const fn block_128_checks(config: &LayerConfig) -> Result<(), Unsupported> {
    if let Err(e) = check_config_basics(config) {
        return Err(e);
    }
    match config.weight.group {
        GroupShape::Block {
            rows: 128,
            cols: 128,
        } => {}
        _ => {
            return Err(Unsupported::new(
                "weights must be quantized in 128x128 blocks",
            ))
        }
    }
    if matches!(config.weight.scale_dtype, ScaleDtype::Ue8m0) {
        return Err(Unsupported::new("ue8m0 weight scales are not supported"));
    }
    match config.activation {
        Some(a) => {
            if !matches!(a.group, GroupShape::Group { cols: 128 }) {
                return Err(Unsupported::new(
                    "activations must be quantized in 1x128 groups",
                ));
            }
            if !a.dynamic {
                return Err(Unsupported::new(
                    "only dynamic per-token-group activation quantization is supported",
                ));
            }
            if matches!(a.scale_dtype, ScaleDtype::Ue8m0) {
                return Err(Unsupported::new(
                    "ue8m0 activation scales are not supported",
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

/// How a kernel lays out the weight block scales on the device, from the row-major
/// `[nb, kb]` = `[ceil(N/128), ceil(K/128)]` scales of the checkpoint.
pub type ScaleLayout = fn(scales: &[f32], nb: usize, kb: usize) -> Vec<f32>;

/// The weight block scales as given: `[nb, kb]` row-major.
pub fn row_major(scales: &[f32], _nb: usize, _kb: usize) -> Vec<f32> {
    scales.to_vec()
}

/// How a kernel wants the 1 x 128 activation scales of a call.
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
    /// The weight codes `[n, ldk]`, row stride, bias.
    pub w: DeviceWeights,
    /// The weight block scales in the kernel's [`ScaleLayout`].
    pub scales: DeviceBuffer<f32>,
    quant: ActQuant,
    act: GroupQuantBuffers,
    layout: ActLayout,
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
    /// The activation scales `rows * ceil(k / 128)`, in the kernel's order.
    pub scales: u64,
}

impl BlockLayer {
    /// Validates and uploads the weights with rows padded to a multiple of `pad` bytes (16,
    /// or 128 for whole K blocks), the scales in `scale_layout`, and loads the activation
    /// quantization. Device weights must be on `gpu` and ready on its stream.
    pub fn load(
        kernel: &'static str,
        gpu: &Arc<Gpu>,
        config: &LayerConfig,
        weights: &LayerWeights<'_>,
        pad: usize,
        scale_layout: ScaleLayout,
        act: ActLayout,
    ) -> Result<Self, KernelError> {
        let w = DeviceWeights::load_padded(kernel, gpu, config, weights, pad)?;
        let (nb, kb) = (config.n.div_ceil(128), config.k.div_ceil(128));
        let scales = DeviceBuffer::from_host(gpu, &scale_layout(&w.host_scales, nb, kb))
            .map_err(be(kernel))?;
        let quant = ActQuant::new(gpu).map_err(be(kernel))?;
        Ok(BlockLayer {
            w,
            scales,
            quant,
            act: GroupQuantBuffers::default(),
            layout: act,
        })
    }

    /// The checks every call opens with: the input and output as device memory on `gpu`
    /// against the layer, and the row count. Returns M and the input's and output's memory.
    pub fn check(
        &self,
        kernel: &'static str,
        config: &LayerConfig,
        gpu: &Arc<Gpu>,
        input: &Tensor<'_>,
        output: &TensorMut<'_>,
    ) -> Result<(usize, DeviceMemory, DeviceMemory), KernelError> {
        let (m, x, out) = device_io(kernel, config, gpu, input, output)?;
        check_row_count(input, m, config.n)?;
        Ok((m, x, out))
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
        self.act.reserve(gpu, rows, config.k, self.w.ldk)
    }

    /// Keeps grown activation buffers alive (graphs captured before stay valid).
    pub fn keep_retired(&mut self) {
        self.act.keep_retired();
    }

    /// Quantizes the input (`m` rows at `x`, checked by [`BlockLayer::check`]) per 1 x 128
    /// group into the layer's scratch in the kernel's [`ActLayout`], enqueued on `gpu`'s
    /// stream. Call [`BlockLayer::reserve`] for `m` first: then nothing is allocated.
    pub fn quantize(
        &mut self,
        kernel: &'static str,
        config: &LayerConfig,
        gpu: &Arc<Gpu>,
        (m, x, out): (usize, DeviceMemory, DeviceMemory),
    ) -> Result<BlockCall, KernelError> {
        let (rows, order) = self.layout.for_rows(m);
        // SAFETY: x holds the m * k input elements (checked by device_io) on this GPU.
        let (codes, scales) = unsafe {
            self.act.quantize(
                &self.quant,
                gpu,
                x.ptr,
                config.input_dtype,
                (m, config.k, rows, self.w.ldk),
                order,
            )
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
