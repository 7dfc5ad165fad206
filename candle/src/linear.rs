//! [`Fp8Linear`]: an FP8 linear layer as a candle [`Module`], and [`linear`], which loads a
//! checkpoint's layer as FP8 or as a plain [`candle_nn::Linear`] as the quantization config
//! says.

use std::sync::{Mutex, MutexGuard};

use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, CustomOp1, DType, Device, Layout, Module, Shape, Tensor};
use candle_nn::VarBuilder;
use fp8_linear::{
    bf16, f16, tables::BUILTIN, Explanation, LayerConfig, LayerWeights, Linear, Options, Target,
    Verdict,
};
use fp8_linear_checkpoint::QuantConfig;

use crate::error::{Fp8LinearError, Problem};
use crate::weights::{activation_dtype, Fp8Weights};

/// An FP8 linear layer `y = x @ W^T (+ b)` with its weights in FP8 (e4m3) and their scales,
/// run by the kernel fp8-linear selects for the device the layer was loaded on (see
/// [`Fp8Linear::kernel_name`] and [`Fp8Linear::explain`]).
///
/// Built from a [`VarBuilder`] the way candle-transformers loads a Hugging Face layer
/// ([`Fp8Linear::load`]); a candle [`Module`]: `forward` takes any leading batch dimensions
/// (`[..., in_dim]` to `[..., out_dim]`) in bf16, f16 or f32, on the layer's device. The
/// layer computes in its activation dtype (the VarBuilder's); an input of another of the
/// three is converted to it and the output back.
///
/// On a CUDA device the kernels launch on the candle device's own context and stream, take
/// the input where it is and write a new tensor on the device: nothing is copied to the
/// host. The layer's scratch is reused by every call, so calls are serialized (the layer is
/// `Send + Sync`; a second thread waits for the first's call to be enqueued).
pub struct Fp8Linear {
    name: String,
    config: LayerConfig,
    dtype: DType,
    device: Device,
    target: Target,
    kernel: &'static str,
    explanation: Explanation,
    state: Mutex<State>,
}

/// The layer and, on CUDA, what orders calls from several threads.
pub(crate) struct State {
    pub(crate) linear: Linear,
    /// The layer's activation quantizer, for `silu_mul_quantize`.
    pub(crate) quant: crate::prequant::Quantizer,
    #[cfg(feature = "cuda")]
    pub(crate) order: crate::cuda::CallOrder,
}

impl std::fmt::Debug for Fp8Linear {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fp8Linear")
            .field("name", &self.name)
            .field("kernel", &self.kernel)
            .field("config", &self.config)
            .field("device", &self.device)
            .finish_non_exhaustive()
    }
}

pub(crate) fn layer_error(layer: &str, problem: Problem) -> candle_core::Error {
    candle_core::Error::wrap(Fp8LinearError {
        layer: layer.to_string(),
        problem,
    })
}

/// The fp8-linear target of a candle device: the CPU, or the CUDA device's context and
/// stream.
fn target_of(name: &str, device: &Device) -> candle_core::Result<Target> {
    match device {
        Device::Cpu => Ok(Target::cpu()),
        #[cfg(feature = "cuda")]
        Device::Cuda(d) => crate::cuda::target(d).map_err(|error| {
            layer_error(
                name,
                Problem::Kernel {
                    kernel: "cuda",
                    error,
                },
            )
        }),
        other => Err(layer_error(
            name,
            Problem::Build(fp8_linear::LinearError::Kernel(
                fp8_linear::KernelError::Device {
                    what: "layer",
                    detail: format!(
                        "{:?} is not supported: fp8-linear-candle runs on the CPU, and on CUDA \
                         with its `cuda` feature",
                        other.location()
                    ),
                },
            )),
        )),
    }
}

impl Fp8Linear {
    /// Loads the layer `[out_dim, in_dim]` at `vb`'s prefix as the checkpoint stores it:
    /// `weight` in F8E4M3 with `weight_scale_inv` (one f32 per 128x128 block, or the blocks of
    /// `weight_block_size`) for block-quantized checkpoints, or `weight_scale` (one value, or
    /// one per output channel) plus `input_scale` for a static activation scheme; `bias`
    /// when present. `quant` (the checkpoint's `quantization_config`, see
    /// [`QuantConfig::read`]) decides the layer's quantization key, and so the kernel table;
    /// the VarBuilder's dtype is the activation dtype (bf16, f16 or f32) and its device the
    /// layer's. No options (see [`Fp8Linear::load_with`]).
    ///
    /// Every problem is a candle error naming the layer and the problem: a missing tensor,
    /// a scale of the wrong shape, a bad scale value, an activation dtype the kernels do not
    /// take, a layer the config lists as not quantized, or no kernel for it on the device
    /// (with every candidate's reason). The VarBuilder converts what it reads to the dtype
    /// asked for, so the weight must be stored as F8_E4M3, as the config says.
    pub fn load(
        in_dim: usize,
        out_dim: usize,
        vb: VarBuilder,
        quant: &QuantConfig,
    ) -> candle_core::Result<Self> {
        Self::load_with(in_dim, out_dim, vb, quant, &Options::none())
    }

    /// Like [`Fp8Linear::load`], with fp8-linear's options: kernel overrides (force, disable,
    /// backend) and kernel knobs; `Options::from_env()` reads them from `FP8_LINEAR_*`.
    pub fn load_with(
        in_dim: usize,
        out_dim: usize,
        vb: VarBuilder,
        quant: &QuantConfig,
        options: &Options,
    ) -> candle_core::Result<Self> {
        let w = Fp8Weights::read(in_dim, out_dim, &vb, quant)?;
        Self::build(w, vb.dtype(), vb.device(), options)
    }

    fn build(
        w: Fp8Weights,
        dtype: DType,
        device: &Device,
        options: &Options,
    ) -> candle_core::Result<Self> {
        let name = w.name.clone();
        let target = target_of(&name, device)?;
        let c = w.config;
        let scale_shape = c.weight_scale_shape();
        let input_scale = w.input_scale.map(|s| [s]);
        let build = |weight: fp8_linear::Tensor<'_>| {
            let mut lw = LayerWeights::new(weight, fp8_linear::Tensor::f32(&w.scales, scale_shape));
            if let Some(s) = &input_scale {
                lw = lw.with_input_scale(fp8_linear::Tensor::f32(s, [1, 1]));
            }
            if let Some(b) = &w.bias {
                lw = lw.with_bias(fp8_linear::Tensor::f32(b, [1, c.n]));
            }
            Linear::new(&target, &c, &lw, options)
        };
        let (storage, layout) = w.codes.storage_and_layout();
        let start = layout.start_offset();
        let built = match &*storage {
            candle_core::Storage::Cpu(CpuStorage::F8E4M3(v)) => {
                let v = &v[start..start + c.n * c.k];
                // SAFETY: float8's F8E4M3 is `#[repr(transparent)]` over its u8 bit pattern:
                // the slice's bytes are the e4m3 codes, as many as elements.
                let codes: &[u8] =
                    unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), v.len()) };
                build(fp8_linear::Tensor::fp8(codes, [c.n, c.k]))
            }
            #[cfg(feature = "cuda")]
            candle_core::Storage::Cuda(s) => crate::cuda::with_device_codes(s, start, &c, build)?,
            _ => {
                return Err(layer_error(
                    &name,
                    Problem::Missing {
                        tensor: "weight",
                        why: "the FP8 weight codes were not read as F8E4M3 on a supported device"
                            .into(),
                    },
                ))
            }
        };
        drop(storage);
        let linear = built.map_err(|e| layer_error(&name, Problem::Build(e)))?;
        // The quantizer reads only the static scalars of the weights.
        let mut statics = LayerWeights::new(
            fp8_linear::Tensor::fp8(&[], [0, 0]),
            fp8_linear::Tensor::f32(&w.scales, scale_shape),
        );
        if let Some(s) = &input_scale {
            statics = statics.with_input_scale(fp8_linear::Tensor::f32(s, [1, 1]));
        }
        let quant = fp8_linear::ActivationQuantizer::new(&target, &c, &statics);
        let explanation = BUILTIN
            .explain(target.device(), &c, &options.overrides)
            .map_err(|e| layer_error(&name, Problem::Build(fp8_linear::LinearError::Select(e))))?;
        Ok(Fp8Linear {
            kernel: linear.plan().ranges.last().map_or("", |r| r.entry.name),
            state: Mutex::new(State {
                linear,
                quant,
                #[cfg(feature = "cuda")]
                order: Default::default(),
            }),
            name,
            config: c,
            dtype,
            device: device.clone(),
            target,
            explanation,
        })
    }

    /// The kernel that runs calls of many rows (`CpuFp8Gemm`, `CublasLtBlockFp8`, ...): the
    /// last range of the layer's plan. [`Fp8Linear::explanation`] has the whole plan (on an
    /// H200 the decode kernel takes M = 1).
    pub fn kernel_name(&self) -> &'static str {
        self.kernel
    }

    /// Why that kernel: the device, the layer, the table walked and every candidate in
    /// priority order with its verdict (`->` chosen, `+` could run it, `x` cannot, and why).
    pub fn explain(&self) -> String {
        let ex = &self.explanation;
        let mut s = format!(
            "layer {}: {}\ndevice: {}\ntable: {} ({} candidates, tried in order)\n",
            self.name,
            self.config,
            self.target.device(),
            ex.table.name,
            ex.candidates.len()
        );
        for c in &ex.candidates {
            let mark = match c.verdict {
                Verdict::Chosen => "->",
                v if v.runnable() => " +",
                _ => " x",
            };
            s += &format!("{mark} {:<22} {}\n", c.entry.name, c.verdict);
        }
        if let Some((name, v)) = ex.force_rejected() {
            s += &format!("forced kernel {name} {v}; fell back to the table order\n");
        }
        match &ex.plan {
            Some(plan) => s += &format!("plan: {plan}"),
            None => s += &format!("chosen: {}", self.kernel),
        }
        s
    }

    /// The selection's decision as data (every candidate and its verdict).
    pub fn explanation(&self) -> &Explanation {
        &self.explanation
    }

    /// The layer config: quantization key, N (`out_dim`), K (`in_dim`), activation dtype,
    /// bias.
    pub fn config(&self) -> &LayerConfig {
        &self.config
    }

    /// The module name (the VarBuilder prefix it was loaded from).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The activation dtype the layer computes in.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The device of the layer's weights.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The fp8-linear target the layer was built for (its GPU handle on CUDA).
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// Makes the kernel's part of calls of up to `max_m` rows (the product of the leading
    /// dimensions) allocate nothing, plan nothing and never synchronize, so that it can be
    /// captured into a CUDA graph on the layer's stream (see `fp8_linear::Linear::prepare`);
    /// nothing to do on the CPU. The output tensor itself comes from candle's allocator on
    /// the stream, as for candle's own ops.
    pub fn prepare(&self, max_m: usize) -> candle_core::Result<()> {
        let mut st = self.lock()?;
        let kernel = self.kernel;
        st.linear
            .prepare(max_m)
            .map_err(|error| layer_error(&self.name, Problem::Kernel { kernel, error }))
    }

    pub(crate) fn lock(&self) -> candle_core::Result<MutexGuard<'_, State>> {
        self.state.lock().map_err(|_| {
            candle_core::Error::msg(format!(
                "Fp8Linear `{}`: a call panicked while holding the layer",
                self.name
            ))
        })
    }

    pub(crate) fn kernel_error(&self, error: fp8_linear::KernelError) -> candle_core::Error {
        layer_error(
            &self.name,
            Problem::Kernel {
                kernel: self.kernel,
                error,
            },
        )
    }
}

/// Checks the input of a layer `name` of `k` input features on `device`: `[..., k]`, bf16,
/// f16 or f32, on the device. Returns the leading dimensions.
pub(crate) fn check_input<'t>(
    name: &str,
    xs: &'t Tensor,
    k: usize,
    device: &Device,
) -> candle_core::Result<&'t [usize]> {
    let dims = xs.dims();
    let bad_shape = || {
        layer_error(
            name,
            Problem::InputShape {
                got: dims.to_vec(),
                k,
            },
        )
    };
    let Some((&last, lead)) = dims.split_last() else {
        return Err(bad_shape());
    };
    if last != k {
        return Err(bad_shape());
    }
    let dt = xs.dtype();
    if activation_dtype(dt).is_none() {
        return Err(layer_error(name, Problem::InputDType { got: dt }));
    }
    if !xs.device().same_device(device) {
        return Err(layer_error(
            name,
            Problem::InputDevice {
                layer: format!("{:?}", device.location()),
                input: format!("{:?}", xs.device().location()),
            },
        ));
    }
    Ok(lead)
}

impl Module for Fp8Linear {
    fn forward(&self, xs: &Tensor) -> candle_core::Result<Tensor> {
        let (n, k) = (self.config.n, self.config.k);
        let lead = check_input(&self.name, xs, k, &self.device)?;
        let dt = xs.dtype();
        let m: usize = lead.iter().product();
        let mut out_dims = lead.to_vec();
        out_dims.push(n);
        if m == 0 {
            return Tensor::zeros(out_dims, dt, xs.device());
        }
        let x = xs.reshape((m, k))?.to_dtype(self.dtype)?.contiguous()?;
        let y = x.apply_op1_no_bwd(&Op(self))?;
        y.to_dtype(dt)?.reshape(out_dims)
    }
}

/// The layer as a candle custom op on `[M, K]` contiguous input in the layer's dtype.
struct Op<'a>(&'a Fp8Linear);

impl CustomOp1 for Op<'_> {
    fn name(&self) -> &'static str {
        "fp8-linear"
    }

    fn cpu_fwd(
        &self,
        storage: &CpuStorage,
        layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let l = self.0;
        let (n, k) = (l.config.n, l.config.k);
        let (start, end) = layout
            .contiguous_offsets()
            .ok_or_else(|| candle_core::Error::msg("fp8-linear: non-contiguous input"))?;
        let m = (end - start) / k;
        let mut st = l.lock()?;
        let out = match storage {
            CpuStorage::BF16(v) => {
                let mut y = vec![bf16::ZERO; m * n];
                st.linear
                    .forward(
                        &fp8_linear::Tensor::bf16(&v[start..end], [m, k]),
                        &mut fp8_linear::TensorMut::bf16(&mut y, [m, n]),
                    )
                    .map_err(|e| l.kernel_error(e))?;
                CpuStorage::BF16(y)
            }
            CpuStorage::F16(v) => {
                let mut y = vec![f16::ZERO; m * n];
                st.linear
                    .forward(
                        &fp8_linear::Tensor::f16(&v[start..end], [m, k]),
                        &mut fp8_linear::TensorMut::f16(&mut y, [m, n]),
                    )
                    .map_err(|e| l.kernel_error(e))?;
                CpuStorage::F16(y)
            }
            CpuStorage::F32(v) => {
                let mut y = vec![0f32; m * n];
                st.linear
                    .forward(
                        &fp8_linear::Tensor::f32(&v[start..end], [m, k]),
                        &mut fp8_linear::TensorMut::f32(&mut y, [m, n]),
                    )
                    .map_err(|e| l.kernel_error(e))?;
                CpuStorage::F32(y)
            }
            other => {
                return Err(layer_error(
                    &l.name,
                    Problem::InputDType { got: other.dtype() },
                ))
            }
        };
        Ok((out, Shape::from((m, n))))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        storage: &candle_core::CudaStorage,
        layout: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        crate::cuda::forward(self.0, storage, layout)
    }
}

/// A checkpoint's linear layer: FP8 when its weight is quantized, a plain candle linear
/// layer when the quantization config lists the module as not converted
/// (`modules_to_not_convert` / `ignored_layers`, e.g. `lm_head`).
#[derive(Debug)]
pub enum LinearLayer {
    /// FP8 weights, run by an fp8-linear kernel (boxed: the layer carries its selection's
    /// explanation).
    Fp8(Box<Fp8Linear>),
    /// Unquantized weights (in the VarBuilder's dtype), run by candle.
    Plain(candle_nn::Linear),
}

impl Module for LinearLayer {
    fn forward(&self, xs: &Tensor) -> candle_core::Result<Tensor> {
        match self {
            LinearLayer::Fp8(l) => l.forward(xs),
            LinearLayer::Plain(l) => l.forward(xs),
        }
    }
}

/// Loads the linear layer `[out_dim, in_dim]` at `vb`'s prefix as the quantization config
/// says: [`Fp8Linear::load`] for a quantized module, `candle_nn::linear` (with a bias when
/// the checkpoint has one) for a module the config lists as not converted.
pub fn linear(
    in_dim: usize,
    out_dim: usize,
    vb: VarBuilder,
    quant: &QuantConfig,
) -> candle_core::Result<LinearLayer> {
    if quant.ignored_entry(&vb.prefix()).is_some() {
        let plain = if vb.contains_tensor("bias") {
            candle_nn::linear(in_dim, out_dim, vb)?
        } else {
            candle_nn::linear_no_bias(in_dim, out_dim, vb)?
        };
        return Ok(LinearLayer::Plain(plain));
    }
    Fp8Linear::load(in_dim, out_dim, vb, quant).map(|l| LinearLayer::Fp8(Box::new(l)))
}
