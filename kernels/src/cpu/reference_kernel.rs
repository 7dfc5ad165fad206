//! The f64 CPU kernel: slow, exact, the oracle the other kernels are tested against.
//!
//! It shares no numerics with the kernels it judges: the weight is dequantized from the
//! e4m3 bit fields and the scales in f64 here, the activations are quantized by the spec
//! as [`super::reference`] states it, in the activation key's scale format (ue8m0 scales
//! rounded up to powers of two by the reference's own rule; not by `super::quantize` or
//! `super::host`, which the fast kernel runs), the products are summed in f64, and the
//! result is rounded once, from f64, to the output dtype. Only the input checks (`fp8_linear_core::validate`) are shared,
//! so every CPU kernel rejects bad input with the same typed errors.

use fp8_linear_core::kernel::processed;
use fp8_linear_core::quant::GroupShape;
use fp8_linear_core::tensor::{Storage, StorageMut};
use fp8_linear_core::validate::{check_io, check_layer_weights};
use fp8_linear_core::{
    fp8_kernel, BuildCtx, DType, Fp8Kernel, KernelError, LayerConfig, LayerWeights, Tensor,
    TensorMut, Unsupported,
};
use half::{bf16, f16};

use super::checks::cpu_can_implement;
use super::host::given_activations;
use super::reference::{
    e4m3_f64, quantize_groups_fmt, quantize_per_tensor_fmt, quantize_per_token_fmt,
};

/// f64 reference kernel for every FP8 layer kind (block-scaled, scaled, weight-only):
/// activations quantized per the layer's key by the spec (f32 or ue8m0 scales, as the key
/// says), `deq(A) * deq(B)` summed in f64.
#[fp8_kernel(platform = Cpu, priority = 100, backend = cpu_reference)]
pub struct CpuReference {
    config: LayerConfig,
    weights: Option<RefWeights>,
}

/// The layer's tensors as the reference keeps them: the codes and scales as given (each
/// weight row is dequantized in f64 when it is used), the activation scalars, the bias.
#[derive(Clone, Debug)]
struct RefWeights {
    codes: Vec<u8>,
    scales: Vec<f32>,
    scale_cols: usize,
    input_scale: Option<f32>,
    input_scale_ub: Option<f32>,
    bias: Option<Vec<f64>>,
}

impl CpuReference {
    /// Builds the kernel for the context's layer.
    pub fn new(ctx: &BuildCtx<'_>) -> Result<Self, KernelError> {
        Ok(Self::for_layer(ctx.config()))
    }

    /// The reference for a layer: it needs no device, so it can be made from the config
    /// alone (the oracle tests and the CLI check other kernels against). A config no CPU
    /// kernel takes is refused by `process_weights`.
    pub fn for_layer(config: &LayerConfig) -> Self {
        CpuReference {
            config: *config,
            weights: None,
        }
    }
}

fn host_only(kernel: &'static str, what: &'static str) -> KernelError {
    KernelError::Device {
        what,
        detail: format!("{kernel} runs on the CPU and needs host memory; got device memory"),
    }
}

/// The elements of a host float tensor (already checked: shape, contiguity, size), as f32.
fn read_f32(
    kernel: &'static str,
    what: &'static str,
    t: &Tensor<'_>,
) -> Result<Vec<f32>, KernelError> {
    let n = t.shape[0] * t.shape[1];
    Ok(match t.data {
        Storage::F32(s) => s[..n].to_vec(),
        Storage::Bf16(s) => s[..n].iter().map(|v| v.to_f32()).collect(),
        Storage::F16(s) => s[..n].iter().map(|v| v.to_f32()).collect(),
        Storage::F8E4m3(_) => {
            return Err(KernelError::DType {
                what,
                expected: "f32, bf16 or f16".into(),
                got: DType::F8E4m3,
            })
        }
        Storage::Device(..) => return Err(host_only(kernel, what)),
    })
}

/// A `[1, 1]` scalar tensor's value.
fn scalar(kernel: &'static str, what: &'static str, t: &Tensor<'_>) -> Result<f32, KernelError> {
    Ok(read_f32(kernel, what, t)?[0])
}

impl RefWeights {
    /// The scale of weight element `(j, kk)` per the weight key.
    fn scale(&self, group: GroupShape, j: usize, kk: usize) -> f64 {
        f64::from(match group {
            GroupShape::PerTensor => self.scales[0],
            GroupShape::PerToken | GroupShape::PerChannel => self.scales[j],
            GroupShape::Group { cols } => self.scales[j * self.scale_cols + kk / cols as usize],
            GroupShape::Block { rows, cols } => {
                self.scales[(j / rows as usize) * self.scale_cols + kk / cols as usize]
            }
        })
    }
}

impl Fp8Kernel for CpuReference {
    fn can_implement(config: &LayerConfig) -> Result<(), Unsupported> {
        cpu_can_implement(config)
    }

    fn process_weights(&mut self, w: &LayerWeights<'_>) -> Result<(), KernelError> {
        let name = Self::NAME;
        let c = &self.config;
        cpu_can_implement(c).map_err(|reason| KernelError::Unsupported {
            kernel: name,
            reason,
        })?;
        check_layer_weights(c, w)?;
        let codes = match w.weight.data {
            Storage::F8E4m3(s) => s[..c.n * c.k].to_vec(),
            _ => return Err(host_only(name, "weight")),
        };
        if let Some(index) = codes.iter().position(|&b| e4m3_f64(b).is_nan()) {
            return Err(KernelError::NotFinite {
                what: "weight",
                index,
                value: f32::NAN,
            });
        }
        let input_scale = match (&w.input_scale, c.activation) {
            (Some(t), Some(a)) if !a.dynamic => Some(scalar(name, "input_scale", t)?),
            _ => None,
        };
        let input_scale_ub = match &w.input_scale_ub {
            Some(t) => Some(scalar(name, "input_scale_ub", t)?),
            None => None,
        };
        let bias = match (&w.bias, c.bias) {
            (Some(t), true) => Some(
                read_f32(name, "bias", t)?
                    .into_iter()
                    .map(f64::from)
                    .collect(),
            ),
            _ => None,
        };
        self.weights = Some(RefWeights {
            codes,
            scales: read_f32(name, "weight_scale", &w.weight_scale)?,
            scale_cols: c.weight_scale_shape()[1],
            input_scale,
            input_scale_ub,
            bias,
        });
        Ok(())
    }

    fn apply(&mut self, input: &Tensor<'_>, output: &mut TensorMut<'_>) -> Result<(), KernelError> {
        let name = Self::NAME;
        let c = self.config;
        let w = processed(&mut self.weights, name)?;
        let m = check_io(&c, input, output)?;
        let k = c.k;
        let x = read_f32(name, "input", input)?;
        // The activations as the layer multiplies them, in f64 (code value times scale is
        // exact: 4 significant bits times 24).
        let a: Vec<f64> = match c.activation {
            None => x.iter().map(|&v| f64::from(v)).collect(),
            Some(key) => {
                let (codes, scale_of): (Vec<u8>, Box<dyn Fn(usize) -> f32>) = match key.group {
                    GroupShape::Group { cols } => {
                        let g = cols as usize;
                        let (q, s) = quantize_groups_fmt(&x, m, k, g, key.scale_dtype);
                        let per_row = k.div_ceil(g);
                        (
                            q,
                            Box::new(move |idx| s[(idx / k) * per_row + (idx % k) / g]),
                        )
                    }
                    GroupShape::PerToken => {
                        let (q, s) =
                            quantize_per_token_fmt(&x, m, k, w.input_scale_ub, key.scale_dtype);
                        (q, Box::new(move |idx| s[idx / k]))
                    }
                    GroupShape::PerTensor => {
                        let fixed = if key.dynamic {
                            None
                        } else {
                            Some(w.input_scale.ok_or(KernelError::MissingParam {
                                kernel: name,
                                name: "input_scale",
                            })?)
                        };
                        let (q, s) = quantize_per_tensor_fmt(&x, fixed, key.scale_dtype);
                        (q, Box::new(move |_| s))
                    }
                    GroupShape::PerChannel | GroupShape::Block { .. } => {
                        unreachable!("refused by cpu_can_implement in process_weights")
                    }
                };
                codes
                    .iter()
                    .enumerate()
                    .map(|(idx, &q)| e4m3_f64(q) * f64::from(scale_of(idx)))
                    .collect()
            }
        };
        gemm_f64(&c, w, &a, m, output)
    }

    /// The given codes and scales dequantized in f64 (each code value times its scale, by
    /// the public layout: `[M, ceil(K/G)]`, `[M, 1]` or `[1, 1]`), then the same f64 GEMM.
    fn apply_quantized(
        &mut self,
        codes: &Tensor<'_>,
        scales: &Tensor<'_>,
        output: &mut TensorMut<'_>,
    ) -> Result<(), KernelError> {
        let c = self.config;
        let w = processed(&mut self.weights, Self::NAME)?;
        let (m, q, s) = given_activations(Self::NAME, &c, (codes, scales), output)?;
        let k = c.k;
        let per_row = scales.shape[1];
        let a: Vec<f64> = match c.activation.map(|a| a.group) {
            Some(GroupShape::Group { cols }) => q
                .iter()
                .enumerate()
                .map(|(idx, &b)| {
                    let sc = s[(idx / k) * per_row + (idx % k) / cols as usize];
                    e4m3_f64(b) * f64::from(sc)
                })
                .collect(),
            Some(GroupShape::PerTensor) => {
                q.iter().map(|&b| e4m3_f64(b) * f64::from(s[0])).collect()
            }
            _ => q
                .iter()
                .enumerate()
                .map(|(idx, &b)| e4m3_f64(b) * f64::from(s[idx / k]))
                .collect(),
        };
        gemm_f64(&c, w, &a, m, output)
    }
}

/// `output = a @ W^T + bias` with the weights dequantized in f64, each result rounded once.
fn gemm_f64(
    c: &LayerConfig,
    w: &RefWeights,
    a: &[f64],
    m: usize,
    output: &mut TensorMut<'_>,
) -> Result<(), KernelError> {
    let name = CpuReference::NAME;
    let (n, k) = (c.n, c.k);
    let mut acc = vec![0f64; m * n];
    let mut row = vec![0f64; k];
    for j in 0..n {
        for (kk, v) in row.iter_mut().enumerate() {
            *v = e4m3_f64(w.codes[j * k + kk]) * w.scale(c.weight.group, j, kk);
        }
        let b = w.bias.as_ref().map_or(0.0, |b| b[j]);
        for i in 0..m {
            let s: f64 = a[i * k..(i + 1) * k]
                .iter()
                .zip(&row)
                .map(|(x, y)| x * y)
                .sum();
            acc[i * n + j] = s + b;
        }
    }
    write_rounded(name, &acc, output)
}

/// Writes the f64 results into the host output, each rounded once (to nearest even) to the
/// output dtype.
fn write_rounded(
    kernel: &'static str,
    acc: &[f64],
    out: &mut TensorMut<'_>,
) -> Result<(), KernelError> {
    let n = acc.len();
    match &mut out.data {
        StorageMut::F32(o) => o[..n].iter_mut().zip(acc).for_each(|(o, v)| *o = *v as f32),
        StorageMut::Bf16(o) => o[..n]
            .iter_mut()
            .zip(acc)
            .for_each(|(o, v)| *o = bf16::from_f64(*v)),
        StorageMut::F16(o) => o[..n]
            .iter_mut()
            .zip(acc)
            .for_each(|(o, v)| *o = f16::from_f64(*v)),
        StorageMut::F8E4m3(_) => {
            return Err(KernelError::DType {
                what: "output",
                expected: "f32, bf16 or f16".into(),
                got: DType::F8E4m3,
            })
        }
        StorageMut::Device(..) => return Err(host_only(kernel, "output")),
    }
    Ok(())
}
