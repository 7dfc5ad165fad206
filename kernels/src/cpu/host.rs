//! Host-side pieces every CPU kernel needs, public so that a downstream CPU kernel does not
//! write them again: reading a host tensor of any float dtype as f32 ([`to_f32`]), writing
//! f32 results into an output of any float dtype ([`write_output`]), copying and checking a
//! layer's weights ([`HostWeights`]), and quantizing activations per the layer's key the
//! way the built-in kernels do ([`ActScratch`]).
//!
//! ```
//! use fp8_linear::cpu::host::{to_f32, write_output};
//! use fp8_linear::{bf16, f16, Tensor, TensorMut};
//!
//! let x = [bf16::from_f32(1.5), bf16::from_f32(-2.0)];
//! let mut buf = Vec::new();
//! to_f32("MyKernel", "input", &Tensor::bf16(&x, [1, 2]), &mut buf).unwrap();
//! assert_eq!(buf, [1.5, -2.0]);
//!
//! let mut out = [f16::ZERO; 2];
//! write_output("MyKernel", &[buf[0] * 2.0, buf[1] * 2.0], &mut TensorMut::f16(&mut out, [1, 2]))
//!     .unwrap();
//! assert_eq!(out[1].to_f32(), -4.0);
//! ```

use fp8_linear_core::fp8::e4m3_to_f32;
use fp8_linear_core::quant::GroupShape;
use fp8_linear_core::tensor::{Storage, StorageMut};
use fp8_linear_core::{DType, KernelError, LayerConfig, LayerWeights, Tensor, TensorMut};
use half::{bf16, f16};

use super::quantize;

fn host_only(what: &'static str, kernel: &'static str) -> KernelError {
    KernelError::Device {
        what,
        detail: format!("{kernel} runs on the CPU and needs host memory; got device memory"),
    }
}

/// Reads a contiguous host tensor of f32, bf16 or f16 into `buf` as f32, row-major
/// (`buf` is cleared first and keeps its capacity, so a kernel can reuse it every call).
///
/// `kernel` and `what` name the kernel and the tensor in errors:
/// [`KernelError::DType`] for FP8 data, [`KernelError::Device`] for device memory (a CPU
/// kernel needs host memory), [`KernelError::NonContiguous`] / [`KernelError::BufferTooSmall`]
/// for a view its buffer does not back. Never panics.
pub fn to_f32(
    kernel: &'static str,
    what: &'static str,
    t: &Tensor<'_>,
    buf: &mut Vec<f32>,
) -> Result<(), KernelError> {
    t.check_contiguous(what)?;
    let n = t.shape[0] * t.shape[1];
    buf.clear();
    match t.data {
        Storage::F32(s) => buf.extend_from_slice(&s[..n]),
        Storage::Bf16(s) => buf.extend(s[..n].iter().map(|v| v.to_f32())),
        Storage::F16(s) => buf.extend(s[..n].iter().map(|v| v.to_f32())),
        Storage::F8E4m3(_) => {
            return Err(KernelError::DType {
                what,
                expected: "f32, bf16 or f16".into(),
                got: DType::F8E4m3,
            })
        }
        Storage::Device(..) => return Err(host_only(what, kernel)),
    }
    Ok(())
}

/// The slice of one dtype in a storage, if it holds that dtype.
type Pick<'t, T> = fn(Storage<'t>) -> Option<&'t [T]>;

/// The first `len` host elements of a tensor (`what`, already checked contiguous and
/// backed) that `pick` finds in its storage, or the typed error: [`KernelError::Device`] for
/// device memory, [`KernelError::DType`] naming `want` for another dtype.
fn host_elements<'t, T>(
    (kernel, what): (&'static str, &'static str),
    t: &Tensor<'t>,
    len: usize,
    (want, pick): (DType, Pick<'t, T>),
) -> Result<&'t [T], KernelError> {
    if let Storage::Device(..) = t.data {
        return Err(host_only(what, kernel));
    }
    match pick(t.data) {
        Some(s) if s.len() >= len => Ok(&s[..len]),
        _ => Err(KernelError::DType {
            what,
            expected: want.to_string(),
            got: t.dtype(),
        }),
    }
}

/// The checks of a pre-quantized call (`fp8_linear_core::validate::check_quantized_io`)
/// and its host codes (`[M, K]`) and scales (as many as the activation key gives M rows):
/// returns M and both slices. `kernel` names the kernel in errors.
pub fn given_activations<'t>(
    kernel: &'static str,
    config: &LayerConfig,
    (codes, scales): (&Tensor<'t>, &Tensor<'t>),
    output: &TensorMut<'_>,
) -> Result<(usize, &'t [u8], &'t [f32]), KernelError> {
    let m = fp8_linear_core::validate::check_quantized_io(config, codes, scales, output)?;
    let count = scales.shape[0] * scales.shape[1];
    let fp8 = |s| match s {
        Storage::F8E4m3(s) => Some(s),
        _ => None,
    };
    let f32s = |s| match s {
        Storage::F32(s) => Some(s),
        _ => None,
    };
    let q = host_elements((kernel, "codes"), codes, m * config.k, (DType::F8E4m3, fp8))?;
    let s = host_elements((kernel, "scales"), scales, count, (DType::F32, f32s))?;
    Ok((m, q, s))
}

/// Writes `acc` (f32, row-major, one value per element of `out`) into the contiguous host
/// output in its dtype: copied for f32, rounded to nearest for bf16 and f16.
///
/// Errors, never panics: [`KernelError::Shape`] when `acc` does not hold exactly one value
/// per output element, [`KernelError::DType`] for an FP8 output, [`KernelError::Device`] for
/// device memory, [`KernelError::NonContiguous`] / [`KernelError::BufferTooSmall`] for a view
/// its buffer does not back.
pub fn write_output(
    kernel: &'static str,
    acc: &[f32],
    out: &mut TensorMut<'_>,
) -> Result<(), KernelError> {
    out.check_contiguous("output")?;
    let n = acc.len();
    if n != out.shape[0] * out.shape[1] {
        return Err(KernelError::shape(
            "output",
            format!("{n} values ({kernel}'s result)"),
            format!("{:?} = {} elements", out.shape, out.shape[0] * out.shape[1]),
        ));
    }
    match &mut out.data {
        StorageMut::F32(o) => o[..n].copy_from_slice(acc),
        StorageMut::Bf16(o) => o[..n]
            .iter_mut()
            .zip(acc)
            .for_each(|(o, v)| *o = bf16::from_f32(*v)),
        StorageMut::F16(o) => o[..n]
            .iter_mut()
            .zip(acc)
            .for_each(|(o, v)| *o = f16::from_f32(*v)),
        StorageMut::F8E4m3(_) => {
            return Err(KernelError::DType {
                what: "output",
                expected: "f32, bf16 or f16".into(),
                got: DType::F8E4m3,
            })
        }
        StorageMut::Device(..) => return Err(host_only("output", kernel)),
    }
    Ok(())
}

/// A layer's weights copied to host memory: FP8 codes, scales, static activation scales,
/// bias.
#[derive(Clone, Debug)]
pub struct HostWeights {
    /// Weight codes `[n, k]`.
    pub codes: Vec<u8>,
    /// Weight scales, row-major in the config's scale shape.
    pub scales: Vec<f32>,
    /// Columns of the scale tensor.
    pub scale_cols: usize,
    /// Static input scale.
    pub input_scale: Option<f32>,
    /// Upper bound of dynamic per-token scales.
    pub input_scale_ub: Option<f32>,
    /// Bias `[n]`.
    pub bias: Option<Vec<f32>>,
    group: GroupShape,
    k: usize,
}

fn scalar(kernel: &'static str, what: &'static str, t: &Tensor<'_>) -> Result<f32, KernelError> {
    let mut v = Vec::new();
    to_f32(kernel, what, t, &mut v)?;
    Ok(v[0])
}

impl HostWeights {
    /// Checks the weights against the config and copies them.
    pub fn load(
        kernel: &'static str,
        config: &LayerConfig,
        w: &LayerWeights<'_>,
    ) -> Result<Self, KernelError> {
        fp8_linear_core::validate::check_layer_weights(config, w)?;
        let codes = match w.weight.data {
            Storage::F8E4m3(s) => s[..config.n * config.k].to_vec(),
            _ => return Err(host_only("weight", kernel)),
        };
        if let Some(index) = codes.iter().position(|c| c & 0x7f == 0x7f) {
            return Err(KernelError::NotFinite {
                what: "weight",
                index,
                value: f32::NAN,
            });
        }
        let mut scales = Vec::new();
        to_f32(kernel, "weight_scale", &w.weight_scale, &mut scales)?;
        let input_scale = match (&w.input_scale, config.activation) {
            (Some(t), Some(a)) if !a.dynamic => Some(scalar(kernel, "input_scale", t)?),
            _ => None,
        };
        let input_scale_ub = match &w.input_scale_ub {
            Some(t) => Some(scalar(kernel, "input_scale_ub", t)?),
            None => None,
        };
        let bias = match (&w.bias, config.bias) {
            (Some(t), true) => {
                let mut b = Vec::new();
                to_f32(kernel, "bias", t, &mut b)?;
                Some(b)
            }
            _ => None,
        };
        Ok(HostWeights {
            codes,
            scales,
            scale_cols: w.weight_scale.shape[1],
            input_scale,
            input_scale_ub,
            bias,
            group: config.weight.group,
            k: config.k,
        })
    }

    /// The static activation scalars (input scale, per-token bound) the quantization reads.
    pub fn statics(&self) -> quantize::ActStatics {
        quantize::ActStatics {
            input_scale: self.input_scale,
            input_scale_ub: self.input_scale_ub,
        }
    }

    /// The scale of weight element `(j, kk)`.
    #[inline]
    pub fn scale(&self, j: usize, kk: usize) -> f32 {
        match self.group {
            GroupShape::PerTensor => self.scales[0],
            GroupShape::PerToken | GroupShape::PerChannel => self.scales[j],
            GroupShape::Group { cols } => self.scales[j * self.scale_cols + kk / cols as usize],
            GroupShape::Block { rows, cols } => {
                self.scales[(j / rows as usize) * self.scale_cols + kk / cols as usize]
            }
        }
    }

    /// Columns of K that share one weight scale (the block or group width; K for per-tensor
    /// and per-channel scales).
    pub fn k_group(&self) -> usize {
        match self.group {
            GroupShape::Group { cols } | GroupShape::Block { cols, .. } => cols as usize,
            _ => self.k,
        }
    }

    /// The weight dequantized to f32, `[n, k]` row-major.
    pub fn dequantized(&self) -> Vec<f32> {
        let k = self.k;
        self.codes
            .iter()
            .enumerate()
            .map(|(idx, &c)| e4m3_to_f32(c) * self.scale(idx / k, idx % k))
            .collect()
    }
}

/// Activations as the kernel multiplies them: quantized and dequantized again per the
/// layer's activation key (so the product matches W8A8 arithmetic), or left as they are for
/// weight-only layers. Buffers are reused across calls.
#[derive(Default, Debug)]
pub struct ActScratch {
    /// Input converted to f32.
    pub x: Vec<f32>,
    /// FP8 codes.
    pub codes: Vec<u8>,
    /// Scales (per group, per row, or one).
    pub scales: Vec<f32>,
}

impl ActScratch {
    /// Quantizes `self.x` (`[m, k]`) per the config's activation key (its granularity and
    /// its scale format: ue8m0 dynamic scales are rounded up to powers of two, a static
    /// input scale is used as given); returns the scale of element `(i, kk)` through
    /// [`ActScratch::scale`]. A no-op for weight-only layers.
    pub fn quantize(&mut self, config: &LayerConfig, w: &HostWeights, m: usize) {
        let k = config.k;
        let Some(key) = config.activation else {
            return;
        };
        self.codes.resize(m * k, 0);
        self.scales.resize(quantize::scale_count(key, m, k), 0.0);
        quantize::per_key_into(
            key,
            k,
            w.statics(),
            &self.x,
            &mut self.codes,
            &mut self.scales,
        );
    }

    /// Takes pre-quantized activations instead of quantizing `self.x`: `codes` (`[m, k]`)
    /// and `scales` (as [`ActScratch::quantize`] leaves them) are copied into the scratch,
    /// so [`ActScratch::dequantized_into`] and [`ActScratch::scale`] read them.
    pub fn set_quantized(&mut self, codes: &[u8], scales: &[f32]) {
        self.codes.clear();
        self.codes.extend_from_slice(codes);
        self.scales.clear();
        self.scales.extend_from_slice(scales);
    }

    /// Scale of activation element `(i, kk)` after [`ActScratch::quantize`].
    #[inline]
    pub fn scale(&self, config: &LayerConfig, i: usize, kk: usize) -> f32 {
        match config.activation.map(|a| a.group) {
            Some(GroupShape::Group { cols }) => {
                self.scales[i * config.k.div_ceil(cols as usize) + kk / cols as usize]
            }
            Some(GroupShape::PerTensor) => self.scales[0],
            Some(_) => self.scales[i],
            None => 1.0,
        }
    }

    /// The activations as multiplied: dequantized codes, or the raw input for weight-only.
    pub fn dequantized_into(&self, config: &LayerConfig, m: usize, out: &mut Vec<f32>) {
        let k = config.k;
        out.clear();
        if config.activation.is_none() {
            out.extend_from_slice(&self.x[..m * k]);
            return;
        }
        out.extend(
            self.codes[..m * k]
                .iter()
                .enumerate()
                .map(|(idx, &c)| e4m3_to_f32(c) * self.scale(config, idx / k, idx % k)),
        );
    }
}
