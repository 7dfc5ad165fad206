//! Reading one FP8 linear layer from a [`VarBuilder`]: the tensors a Hugging Face FP8
//! checkpoint stores for it, checked against the checkpoint's quantization config, and the
//! layer config ([`LayerConfig`]) that config implies.

use candle_core::{DType, Device, Tensor};
use candle_nn::{Init, VarBuilder};
use fp8_linear::{DType as FpDType, GroupShape, LayerConfig};
use fp8_linear_checkpoint::{layer_config, QuantConfig};

use crate::error::{Fp8LinearError, Problem};

/// The activation dtypes a layer runs in.
pub(crate) fn activation_dtype(d: DType) -> Option<FpDType> {
    match d {
        DType::BF16 => Some(FpDType::Bf16),
        DType::F16 => Some(FpDType::F16),
        DType::F32 => Some(FpDType::F32),
        _ => None,
    }
}

/// A layer's tensors as read: the FP8 codes `[N, K]` on the VarBuilder's device, the scales
/// and the bias as host f32.
pub(crate) struct Fp8Weights {
    /// The module (the VarBuilder's prefix).
    pub name: String,
    /// The layer (dtypes: the activation dtype, in and out).
    pub config: LayerConfig,
    /// `[N, K]`, `F8E4M3`, contiguous, on the VarBuilder's device.
    pub codes: Tensor,
    /// The weight scales, row-major in `config.weight_scale_shape()`.
    pub scales: Vec<f32>,
    /// The static activation scale.
    pub input_scale: Option<f32>,
    /// The bias `[N]`.
    pub bias: Option<Vec<f32>>,
}

fn err(name: &str, problem: Problem) -> candle_core::Error {
    candle_core::Error::wrap(Fp8LinearError {
        layer: name.to_string(),
        problem,
    })
}

/// Host f32 values of a tensor: copied to the host first, then converted there (candle's
/// CUDA backend has no cast kernel for F8E4M3 on every build, and the copy is raw bytes).
fn host_f32(t: &Tensor) -> candle_core::Result<Vec<f32>> {
    t.to_device(&Device::Cpu)?
        .to_dtype(DType::F32)?
        .flatten_all()?
        .to_vec1::<f32>()
}

/// Whether a scale tensor's shape is one value (`[]`, `[1]`, `[1, 1]`).
fn is_scalar(dims: &[usize]) -> bool {
    matches!(dims, [] | [1] | [1, 1])
}

impl Fp8Weights {
    /// Reads the layer `[out_dim, in_dim]` at `vb`'s prefix: `weight` (F8E4M3), its scale
    /// (`weight_scale_inv` for block-quantized checkpoints, `weight_scale` per tensor or per
    /// channel otherwise, the other name accepted as well), `input_scale` for a static
    /// activation scheme, and `bias` when present. Activations run in `vb.dtype()`.
    pub fn read(
        in_dim: usize,
        out_dim: usize,
        vb: &VarBuilder,
        quant: &QuantConfig,
    ) -> candle_core::Result<Self> {
        let name = vb.prefix();
        let (n, k) = (out_dim, in_dim);
        let e = |p| err(&name, p);
        if let Some(entry) = quant.ignored_entry(&name) {
            return Err(e(Problem::NotQuantized {
                entry: entry.to_string(),
            }));
        }
        if n == 0 || k == 0 {
            return Err(e(Problem::Empty { n, k }));
        }
        let act =
            activation_dtype(vb.dtype()).ok_or(e(Problem::ActivationDType { got: vb.dtype() }))?;
        if !vb.contains_tensor("weight") {
            return Err(e(Problem::Missing {
                tensor: "weight",
                why: "the FP8 weight codes [N, K]".into(),
            }));
        }
        let codes = vb
            .get_with_hints_dtype((n, k), "weight", Init::Const(0.), DType::F8E4M3)?
            .contiguous()?;

        // The scale: the name the config implies first, the other one accepted.
        let names = if quant.block.is_some() {
            ["weight_scale_inv", "weight_scale"]
        } else {
            ["weight_scale", "weight_scale_inv"]
        };
        let Some(sname) = names.into_iter().find(|s| vb.contains_tensor(s)) else {
            let why = match quant.block {
                Some([r, c]) => format!(
                    "weight_block_size is [{r}, {c}]: the FP8 weight needs one scale per \
                     {r}x{c} block, [ceil(N/{r}), ceil(K/{c})] = [{}, {}]",
                    n.div_ceil(r as usize),
                    k.div_ceil(c as usize)
                ),
                None => "the FP8 weight needs its dequantization scale: one ([] or [1]) or \
                         one per output channel ([N] or [N, 1])"
                    .into(),
            };
            return Err(e(Problem::Missing {
                tensor: names[0],
                why,
            }));
        };
        let scale = vb.get_unchecked_dtype(sname, DType::F32)?;
        let dims = scale.dims().to_vec();
        let per_channel = match quant.block {
            Some([r, c]) => {
                let want = [n.div_ceil(r as usize), k.div_ceil(c as usize)];
                if dims != want {
                    return Err(e(Problem::ScaleShape {
                        tensor: sname,
                        got: dims,
                        expected: format!(
                            "[ceil(N/{r}), ceil(K/{c})] = {want:?} (weight_block_size [{r}, {c}], weight [{n}, {k}])"
                        ),
                    }));
                }
                false
            }
            None if is_scalar(&dims) => false,
            None if matches!(dims[..], [x] | [x, 1] if x == n) => true,
            None => {
                return Err(e(Problem::ScaleShape {
                    tensor: sname,
                    got: dims,
                    expected: format!(
                        "[] or [1] (per tensor), or [N] / [N, 1] = [{n}] (per output channel)"
                    ),
                }))
            }
        };
        let scales = host_f32(&scale)?;
        if let Some((index, &value)) = scales
            .iter()
            .enumerate()
            .find(|(_, v)| !v.is_finite() || **v < 0.0)
        {
            return Err(e(Problem::BadScale {
                tensor: sname,
                index,
                value,
            }));
        }

        let input_scale = if quant.static_activations {
            if !vb.contains_tensor("input_scale") {
                return Err(e(Problem::Missing {
                    tensor: "input_scale",
                    why: "activation_scheme is static: the layer needs its activation scale".into(),
                }));
            }
            let t = vb.get_unchecked_dtype("input_scale", DType::F32)?;
            if !is_scalar(t.dims()) {
                return Err(e(Problem::ScaleShape {
                    tensor: "input_scale",
                    got: t.dims().to_vec(),
                    expected: "[] or [1] (one static activation scale)".into(),
                }));
            }
            let v = host_f32(&t)?[0];
            if !v.is_finite() || v <= 0.0 {
                return Err(e(Problem::BadScale {
                    tensor: "input_scale",
                    index: 0,
                    value: v,
                }));
            }
            Some(v)
        } else {
            None
        };

        let bias = if vb.contains_tensor("bias") {
            let b = vb.get_with_hints_dtype(n, "bias", Init::Const(0.), DType::F32)?;
            Some(host_f32(&b)?)
        } else {
            None
        };

        let mut config = layer_config(quant, n, k, per_channel, bias.is_some());
        config.input_dtype = act;
        config.output_dtype = act;
        Ok(Fp8Weights {
            name,
            config,
            codes,
            scales,
            input_scale,
            bias,
        })
    }

    /// The weight dequantized, `[N, K]` f32 on the host: code times its block's (or
    /// channel's, or the tensor's) scale.
    pub fn dequantize(&self) -> candle_core::Result<Vec<f32>> {
        let (n, k) = (self.config.n, self.config.k);
        let codes = host_f32(&self.codes)?;
        let sc = self.config.weight_scale_shape()[1];
        // Rows and columns per scale.
        let (br, bc) = match self.config.weight.group {
            GroupShape::Block { rows, cols } => (rows as usize, cols as usize),
            GroupShape::Group { cols } => (1, cols as usize),
            GroupShape::PerChannel | GroupShape::PerToken => (1, k),
            GroupShape::PerTensor => (n, k),
        };
        let mut out = codes;
        for (r, row) in out.chunks_mut(k).enumerate() {
            for (c, v) in row.iter_mut().enumerate() {
                *v *= self.scales[(r / br) * sc + c / bc];
            }
        }
        Ok(out)
    }
}

/// The layer `[out_dim, in_dim]` at `vb`'s prefix with its weight dequantized (code times
/// scale, computed in f32 on the host), as a plain [`candle_nn::Linear`] in the VarBuilder's
/// dtype on its device, with the checkpoint's bias: what candle itself computes for the
/// checkpoint, to compare an [`Fp8Linear`](crate::Fp8Linear) with. The tensors are read and
/// checked as [`Fp8Linear::load`](crate::Fp8Linear::load) reads them.
pub fn dequantized_linear(
    in_dim: usize,
    out_dim: usize,
    vb: VarBuilder,
    quant: &QuantConfig,
) -> candle_core::Result<candle_nn::Linear> {
    let w = Fp8Weights::read(in_dim, out_dim, &vb, quant)?;
    let weight = Tensor::from_vec(w.dequantize()?, (out_dim, in_dim), &Device::Cpu)?
        .to_dtype(vb.dtype())?
        .to_device(vb.device())?;
    let bias = match &w.bias {
        Some(b) => Some(
            Tensor::from_slice(b, out_dim, &Device::Cpu)?
                .to_dtype(vb.dtype())?
                .to_device(vb.device())?,
        ),
        None => None,
    };
    Ok(candle_nn::Linear::new(weight, bias))
}
