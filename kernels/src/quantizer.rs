//! [`ActivationQuantizer`]: a layer's activation quantization on its own, for engines that
//! hand the layer activations already quantized ([`Linear::forward_quantized`]). It runs
//! the code the layer's kernels run ([`crate::cpu::quantize`] on the CPU, the CUDA
//! quantization kernels of `ActQuant` on a GPU), so its codes and scales are the ones the
//! layer would have made.
//!
//! [`Linear::forward_quantized`]: crate::Linear::forward_quantized

use fp8_linear_core::quant::QuantKey;
use fp8_linear_core::validate::check_quantizer_io;
use fp8_linear_core::{KernelError, LayerConfig, LayerWeights, Tensor, TensorMut};

use crate::cpu::host::to_f32;
use crate::cpu::quantize::{per_key_into, ActStatics};
use crate::target::Target;

/// The name errors give the quantizer.
const NAME: &str = "ActivationQuantizer";

/// Quantizes activations exactly as a layer does (per its activation key: dynamic 1 x G
/// groups, per token with its optional bound, per tensor static or dynamic, f32 or ue8m0
/// scales) into the public pre-quantized layout that [`Linear::forward_quantized`] takes:
///
/// - codes `[M, K]` e4m3, row-major;
/// - scales f32, row-major: `[M, ceil(K / G)]` for 1 x G groups, `[M, 1]` per token,
///   `[1, 1]` per tensor.
///
/// On the CPU target tensors are host slices; on a GPU target, device memory of the
/// target's GPU, and every call enqueues on the target's stream without waiting.
///
/// ```
/// use fp8_linear::{
///     ActivationQuantizer, DType, LayerConfig, LayerWeights, Linear, Options, Target, Tensor,
///     TensorMut,
/// };
///
/// let (n, k, m) = (128, 256, 2);
/// let cfg = LayerConfig::block_128(n, k, DType::F32, DType::F32);
/// let w = vec![0x38u8; n * k]; // e4m3 1.0
/// let ws = [0.5f32, 0.25];
/// let weights = LayerWeights::new(Tensor::fp8(&w, [n, k]), Tensor::f32(&ws, [1, 2]));
/// let target = Target::cpu();
/// let mut layer = Linear::new(&target, &cfg, &weights, &Options::none()).unwrap();
/// let mut quant = ActivationQuantizer::new(&target, &cfg, &weights).unwrap();
///
/// let x: Vec<f32> = (0..m * k).map(|i| (i % 7) as f32 - 3.0).collect();
/// let (mut codes, mut scales) = (vec![0u8; m * k], vec![0f32; m * 2]); // [M, ceil(K/128)]
/// quant
///     .quantize(
///         &Tensor::f32(&x, [m, k]),
///         &mut TensorMut::fp8(&mut codes, [m, k]),
///         &mut TensorMut::f32(&mut scales, [m, 2]),
///     )
///     .unwrap();
/// let mut y = vec![0f32; m * n];
/// layer
///     .forward_quantized(
///         &Tensor::fp8(&codes, [m, k]),
///         &Tensor::f32(&scales, [m, 2]),
///         &mut TensorMut::f32(&mut y, [m, n]),
///     )
///     .unwrap();
///
/// // The same as the layer quantizing the input itself, bit for bit.
/// let mut y_ref = vec![0f32; m * n];
/// layer.forward(&Tensor::f32(&x, [m, k]), &mut TensorMut::f32(&mut y_ref, [m, n])).unwrap();
/// assert_eq!(y, y_ref);
/// ```
///
/// [`Linear::forward_quantized`]: crate::Linear::forward_quantized
pub struct ActivationQuantizer {
    config: LayerConfig,
    key: QuantKey,
    backend: Backend,
}

enum Backend {
    Cpu {
        statics: ActStatics,
        /// The input (or SiLU-and-multiply result) as f32.
        x: Vec<f32>,
    },
    #[cfg(feature = "cuda")]
    Gpu(Box<crate::cuda::prequant::GpuQuantizer>),
}

impl std::fmt::Debug for ActivationQuantizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let on = match self.backend {
            Backend::Cpu { .. } => "cpu",
            #[cfg(feature = "cuda")]
            Backend::Gpu(_) => "gpu",
        };
        f.debug_struct("ActivationQuantizer")
            .field("config", &self.config)
            .field("on", &on)
            .finish_non_exhaustive()
    }
}

impl ActivationQuantizer {
    /// The quantizer of `config`'s activations on `target`. Of `weights` it reads only the
    /// static `input_scale` (static per-tensor keys, where it is required, `[1, 1]`) and the
    /// per-token bound `input_scale_ub` (host tensors, or device memory of the target's GPU),
    /// the same tensors the layer is built with.
    ///
    /// Errors: [`KernelError::PreQuantized`] for a weight-only layer (no activation key) or
    /// a key activations are not quantized with (per channel, blocks);
    /// [`KernelError::MissingParam`] for a static key without `input_scale`;
    /// [`KernelError::ProfileDevice`] for a profile target; the GPU's own errors
    /// ([`KernelError::Cuda`]) when the quantization kernels cannot be loaded.
    pub fn new(
        target: &Target,
        config: &LayerConfig,
        weights: &LayerWeights<'_>,
    ) -> Result<Self, KernelError> {
        let key = match config.activation {
            Some(key) if fp8_linear_core::validate::activation_scale_shape(config, 1).is_some() => {
                key
            }
            _ => {
                return Err(KernelError::PreQuantized {
                    kernel: NAME,
                    reason: format!(
                        "the layer's activations are not quantized per group, token or tensor ({config})"
                    ),
                })
            }
        };
        let scalar =
            |what: &'static str, t: &Option<Tensor<'_>>| -> Result<Option<f32>, KernelError> {
                let Some(t) = t else { return Ok(None) };
                t.check_shape(what, [1, 1])?;
                t.check_contiguous(what)?;
                #[cfg(feature = "cuda")]
                if let Some(gpu) = target.gpu() {
                    let v = crate::cuda::prequant::scalar_of(NAME, what, t, gpu)?;
                    return Ok(Some(v));
                }
                let mut v = Vec::new();
                to_f32(NAME, what, t, &mut v)?;
                Ok(Some(v[0]))
            };
        let statics = ActStatics {
            input_scale: if key.dynamic {
                None
            } else {
                Some(scalar("input_scale", &weights.input_scale)?.ok_or(
                    KernelError::MissingParam {
                        kernel: NAME,
                        name: "input_scale",
                    },
                )?)
            },
            input_scale_ub: scalar("input_scale_ub", &weights.input_scale_ub)?,
        };
        #[cfg(feature = "cuda")]
        if let Some(gpu) = target.gpu() {
            let q = crate::cuda::prequant::GpuQuantizer::new(NAME, gpu, config, statics)?;
            return Ok(ActivationQuantizer {
                config: *config,
                key,
                backend: Backend::Gpu(Box::new(q)),
            });
        }
        if target.device().platform != fp8_linear_core::Platform::Cpu {
            return Err(KernelError::ProfileDevice {
                kernel: NAME,
                device: target.device().to_string(),
            });
        }
        Ok(ActivationQuantizer {
            config: *config,
            key,
            backend: Backend::Cpu {
                statics,
                x: Vec::new(),
            },
        })
    }

    /// Makes calls of up to `max_m` rows allocate nothing, so that they can be captured
    /// into a CUDA graph on the target's stream (the scratch of per-tensor absmaxes and of
    /// `silu_mul`'s `h`); a call past it grows the scratch, which is refused while the
    /// stream is being captured ([`KernelError::NotPrepared`]). Nothing to do on the CPU.
    pub fn prepare(&mut self, max_m: usize) -> Result<(), KernelError> {
        match &mut self.backend {
            Backend::Cpu { .. } => {
                let _ = max_m;
                Ok(())
            }
            #[cfg(feature = "cuda")]
            Backend::Gpu(g) => g.prepare(max_m),
        }
    }

    /// Quantizes `input` (`[M, K]` in the layer's input dtype) into `codes` (`[M, K]` e4m3)
    /// and `scales` (f32, `[M, ceil(K / G)]`, `[M, 1]` or `[1, 1]` per the key), as the
    /// layer's own quantization does, bit for bit.
    ///
    /// Errors, checked before anything runs: [`KernelError::Shape`], [`KernelError::DType`],
    /// [`KernelError::NonContiguous`], [`KernelError::BufferTooSmall`] naming `"input"`,
    /// `"codes"` or `"scales"`; [`KernelError::Device`] for host memory on a GPU target,
    /// device memory on the CPU, or memory of another GPU.
    pub fn quantize(
        &mut self,
        input: &Tensor<'_>,
        codes: &mut TensorMut<'_>,
        scales: &mut TensorMut<'_>,
    ) -> Result<(), KernelError> {
        let m = check_quantizer_io(&self.config, input, false, codes, scales)?;
        self.run(m, input, false, codes, scales)
    }

    /// The MLP activation fused with the quantization: `gate_up` is `[M, 2K]` in the layer's
    /// input dtype (gate = columns `0..K`, up = `K..2K`; K is this layer's, the down
    /// projection's, input features), and `codes` / `scales` receive the quantization of
    /// `h = SiLU(gate) * up` (`[M, K]`), computed in f32 with `SiLU(g) = g / (1 + exp(-g))`
    /// (this crate's own `exp`, bit-identical on the CPU and the GPU; see the numerics page),
    /// then quantized exactly as [`ActivationQuantizer::quantize`] quantizes an f32 `h`.
    /// The errors are those of `quantize`, the input named `"gate_up"`.
    pub fn silu_mul(
        &mut self,
        gate_up: &Tensor<'_>,
        codes: &mut TensorMut<'_>,
        scales: &mut TensorMut<'_>,
    ) -> Result<(), KernelError> {
        let m = check_quantizer_io(&self.config, gate_up, true, codes, scales)?;
        self.run(m, gate_up, true, codes, scales)
    }

    fn run(
        &mut self,
        m: usize,
        input: &Tensor<'_>,
        gated: bool,
        codes: &mut TensorMut<'_>,
        scales: &mut TensorMut<'_>,
    ) -> Result<(), KernelError> {
        let k = self.config.k;
        match &mut self.backend {
            Backend::Cpu { statics, x } => {
                let what = if gated { "gate_up" } else { "input" };
                to_f32(NAME, what, input, x)?;
                if gated {
                    crate::cpu::silu::silu_mul_rows_in_place(x, k);
                }
                let (q, s) = host_outputs(codes, scales)?;
                per_key_into(self.key, k, *statics, &x[..m * k], q, s);
                Ok(())
            }
            #[cfg(feature = "cuda")]
            Backend::Gpu(g) => g.run(m, input, gated, codes, scales),
        }
    }
}

/// The host slices of the quantizer's outputs (already checked by `check_quantizer_io`).
fn host_outputs<'o>(
    codes: &'o mut TensorMut<'_>,
    scales: &'o mut TensorMut<'_>,
) -> Result<(&'o mut [u8], &'o mut [f32]), KernelError> {
    use fp8_linear_core::tensor::StorageMut;
    let device = |what| KernelError::Device {
        what,
        detail: format!("{NAME} on the CPU needs host memory; got device memory"),
    };
    let q = match &mut codes.data {
        StorageMut::F8E4m3(q) => &mut **q,
        _ => return Err(device("codes")),
    };
    let s = match &mut scales.data {
        StorageMut::F32(s) => &mut **s,
        _ => return Err(device("scales")),
    };
    Ok((q, s))
}
