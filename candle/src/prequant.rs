//! Pre-quantized activations for candle users: [`Fp8Linear::forward_quantized`] runs the
//! layer on e4m3 codes (a `U8` tensor of their bit patterns) and f32 scales, and
//! [`Fp8Linear::silu_mul_quantize`] makes them for the down projection of an MLP from its
//! `gate_up` activations (`SiLU(gate) * up`, quantized per the layer's activation key), as
//! `fp8_linear::ActivationQuantizer` does. CPU tensors; on CUDA both return an error that
//! says so.

use candle_core::{CpuStorage, DType, Device, Storage, Tensor};
use fp8_linear::{bf16, f16, ActivationQuantizer, KernelError};

use crate::error::Problem;
use crate::linear::{layer_error, Fp8Linear};

/// The host slice of a contiguous CPU tensor of `T` (`what` names it in errors).
fn host<'s, T>(
    l: &Fp8Linear,
    what: &'static str,
    storage: &'s Storage,
    t: &Tensor,
    pick: fn(&CpuStorage) -> Option<&[T]>,
) -> candle_core::Result<&'s [T]> {
    let (start, end) = t
        .layout()
        .contiguous_offsets()
        .ok_or_else(|| l.kernel_error(not_contiguous(what, t)))?;
    match storage {
        Storage::Cpu(s) => pick(s)
            .map(|v| &v[start..end])
            .ok_or_else(|| layer_error(l.name(), Problem::InputDType { got: t.dtype() })),
        _ => Err(l.kernel_error(KernelError::Device {
            what,
            detail: "pre-quantized calls of fp8-linear-candle take CPU tensors (CUDA: use \
                     fp8_linear::Linear::forward_quantized on the device memory)"
                .into(),
        })),
    }
}

fn not_contiguous(what: &'static str, t: &Tensor) -> KernelError {
    KernelError::NonContiguous {
        what,
        cols: t.dims().last().copied().unwrap_or(0),
        strides: [0, 0],
    }
}

/// Rows (the product of the leading dimensions) of a `[..., cols]` tensor, or the shape
/// error naming `what`.
fn rows_of(what: &'static str, t: &Tensor, cols: usize) -> Result<usize, KernelError> {
    match t.dims().split_last() {
        Some((&last, lead)) if last == cols => Ok(lead.iter().product()),
        _ => Err(KernelError::shape(
            what,
            format!("[..., {cols}]"),
            format!("{:?}", t.dims()),
        )),
    }
}

impl Fp8Linear {
    /// The layer on activations already quantized per its activation key (see
    /// `fp8_linear::Linear::forward_quantized`): `codes` a `U8` tensor `[..., in_dim]` of
    /// e4m3 bit patterns, `scales` an `F32` tensor `[..., ceil(in_dim / G)]` for 1 x G
    /// groups, `[..., 1]` per token, one element (`[1, 1]`) per tensor; the output is
    /// `[..., out_dim]` in the layer's dtype. With the codes and scales of
    /// [`Fp8Linear::silu_mul_quantize`] (or of an `ActivationQuantizer` of this layer) it
    /// equals `forward` on the activations they were made from, bit for bit. CPU tensors.
    pub fn forward_quantized(
        &self,
        codes: &Tensor,
        scales: &Tensor,
    ) -> candle_core::Result<Tensor> {
        let (n, k) = (self.config().n, self.config().k);
        let m = rows_of("codes", codes, k).map_err(|e| self.kernel_error(e))?;
        let lead = &codes.dims()[..codes.dims().len() - 1];
        let mut out_dims = lead.to_vec();
        out_dims.push(n);
        let shape = fp8_linear::validate::activation_scale_shape(self.config(), m)
            .ok_or_else(|| self.kernel_error(weight_only(self)))?;
        let (cs, _) = codes.storage_and_layout();
        let (ss, _) = scales.storage_and_layout();
        let q = host(self, "codes", &cs, codes, |s| match s {
            CpuStorage::U8(v) => Some(v),
            _ => None,
        })?;
        let s = host(self, "scales", &ss, scales, |s| match s {
            CpuStorage::F32(v) => Some(v),
            _ => None,
        })?;
        if s.len() != shape[0] * shape[1] {
            return Err(self.kernel_error(KernelError::shape(
                "scales",
                format!("{shape:?} elements"),
                format!("{:?}", scales.dims()),
            )));
        }
        let (qt, st) = (
            fp8_linear::Tensor::fp8(q, [m, k]),
            fp8_linear::Tensor::f32(s, shape),
        );
        let mut state = self.lock()?;
        let mut run = |out: &mut fp8_linear::TensorMut<'_>| {
            state
                .linear
                .forward_quantized(&qt, &st, out)
                .map_err(|e| self.kernel_error(e))
        };
        let y = match self.dtype() {
            DType::BF16 => {
                let mut y = vec![bf16::ZERO; m * n];
                run(&mut fp8_linear::TensorMut::bf16(&mut y, [m, n]))?;
                Tensor::from_vec(y, out_dims, &Device::Cpu)?
            }
            DType::F16 => {
                let mut y = vec![f16::ZERO; m * n];
                run(&mut fp8_linear::TensorMut::f16(&mut y, [m, n]))?;
                Tensor::from_vec(y, out_dims, &Device::Cpu)?
            }
            _ => {
                let mut y = vec![0f32; m * n];
                run(&mut fp8_linear::TensorMut::f32(&mut y, [m, n]))?;
                Tensor::from_vec(y, out_dims, &Device::Cpu)?
            }
        };
        Ok(y)
    }

    /// The MLP activation fused with this layer's activation quantization, for the down
    /// projection: `gate_up` `[..., 2 * in_dim]` (gate first, then up; any of bf16, f16, f32,
    /// converted to the layer's dtype first, as `forward` converts its input) gives the codes
    /// (`U8` `[..., in_dim]`) and scales (`F32`, the shape [`Fp8Linear::forward_quantized`]
    /// takes; `[1, 1]` per tensor) of `h = SiLU(gate) * up`, computed in f32 with
    /// fp8-linear's own `exp` (`fp8_linear::ActivationQuantizer::silu_mul`). CPU tensors.
    pub fn silu_mul_quantize(&self, gate_up: &Tensor) -> candle_core::Result<(Tensor, Tensor)> {
        let k = self.config().k;
        let m = rows_of("gate_up", gate_up, 2 * k).map_err(|e| self.kernel_error(e))?;
        let lead = gate_up.dims()[..gate_up.dims().len() - 1].to_vec();
        let shape = fp8_linear::validate::activation_scale_shape(self.config(), m)
            .ok_or_else(|| self.kernel_error(weight_only(self)))?;
        let x = gate_up
            .reshape((m, 2 * k))?
            .to_dtype(self.dtype())?
            .contiguous()?;
        let (xs, _) = x.storage_and_layout();
        let mut codes = vec![0u8; m * k];
        let mut scales = vec![0f32; shape[0] * shape[1]];
        let mut state = self.lock()?;
        let quant = state
            .quant
            .as_mut()
            .map_err(|e| self.kernel_error(e.clone()))?;
        let mut run = |input: fp8_linear::Tensor<'_>| {
            quant
                .silu_mul(
                    &input,
                    &mut fp8_linear::TensorMut::fp8(&mut codes, [m, k]),
                    &mut fp8_linear::TensorMut::f32(&mut scales, shape),
                )
                .map_err(|e| self.kernel_error(e))
        };
        let shape2 = [m, 2 * k];
        match self.dtype() {
            DType::BF16 => run(fp8_linear::Tensor::bf16(
                host(self, "gate_up", &xs, &x, |s| match s {
                    CpuStorage::BF16(v) => Some(v),
                    _ => None,
                })?,
                shape2,
            ))?,
            DType::F16 => run(fp8_linear::Tensor::f16(
                host(self, "gate_up", &xs, &x, |s| match s {
                    CpuStorage::F16(v) => Some(v),
                    _ => None,
                })?,
                shape2,
            ))?,
            _ => run(fp8_linear::Tensor::f32(
                host(self, "gate_up", &xs, &x, |s| match s {
                    CpuStorage::F32(v) => Some(v),
                    _ => None,
                })?,
                shape2,
            ))?,
        }
        let mut code_dims = lead.clone();
        code_dims.push(k);
        let scale_dims = if shape[0] == m && m > 0 {
            let mut d = lead;
            d.push(shape[1]);
            d
        } else {
            vec![1, 1]
        };
        Ok((
            Tensor::from_vec(codes, code_dims, &Device::Cpu)?,
            Tensor::from_vec(scales, scale_dims, &Device::Cpu)?,
        ))
    }
}

/// The error of a pre-quantized call on a layer without activation quantization.
fn weight_only(l: &Fp8Linear) -> KernelError {
    KernelError::PreQuantized {
        kernel: "layer",
        reason: format!(
            "{} reads unquantized activations ({})",
            l.name(),
            l.config()
        ),
    }
}

/// The layer's activation quantizer (for [`Fp8Linear::silu_mul_quantize`]), or why it has
/// none (a weight-only layer).
pub(crate) type Quantizer = Result<ActivationQuantizer, KernelError>;
