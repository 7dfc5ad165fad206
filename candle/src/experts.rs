//! [`Fp8Experts`]: the experts of one mixture-of-experts projection (every
//! `mlp.experts.E.gate_proj` of a layer, say) as one grouped FP8 layer, and [`Routed`],
//! the candle [`Module`] it is with a routing input. CPU tensors (grouped kernels are CPU
//! kernels today).

use std::sync::Mutex;

use candle_core::{DType, Device, Module, Tensor};
use candle_nn::VarBuilder;
use float8::F8E4M3;
use fp8_linear::{
    GroupedLinear, GroupedWeights, LayerConfig, LayerWeights, Options, Routing, Target,
};
use fp8_linear_checkpoint::QuantConfig;

use crate::error::Problem;
use crate::linear::{check_input, layer_error};
use crate::weights::Fp8Weights;

/// E FP8 experts of one shape `[out_dim, in_dim]`, run as one grouped layer (fp8-linear's
/// `GroupedLinear`, on the CPU). Loaded from a [`VarBuilder`] at the experts' prefix
/// (`model.layers.0.mlp.experts`) as Qwen3-MoE and DeepSeek-V3 checkpoints store them:
/// `E.<proj>.weight` + `E.<proj>.weight_scale_inv` for `E` in `0..experts`.
///
/// [`Fp8Experts::forward_routed`] takes the tokens and their routing: per row, the expert
/// (`-1` for a padding row, whose output is zero) and optionally a routing weight
/// multiplied into the row's output. [`Fp8Experts::routed`] makes that a [`Module`].
pub struct Fp8Experts {
    name: String,
    config: LayerConfig,
    experts: usize,
    dtype: DType,
    layer: Mutex<GroupedLinear>,
}

impl std::fmt::Debug for Fp8Experts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fp8Experts")
            .field("name", &self.name)
            .field("experts", &self.experts)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// The e4m3 codes of a tensor read as F8E4M3, on the host.
fn host_codes(t: &Tensor) -> candle_core::Result<Vec<u8>> {
    Ok(t.to_device(&Device::Cpu)?
        .flatten_all()?
        .to_vec1::<F8E4M3>()?
        .iter()
        .map(|c| c.to_bits())
        .collect())
}

impl Fp8Experts {
    /// Loads experts `0..experts` of the projection `proj` (`gate_proj`, `up_proj`,
    /// `down_proj`) at `vb`'s prefix (the experts' module, `model.layers.L.mlp.experts`),
    /// each read and checked as [`Fp8Linear::load`](crate::Fp8Linear::load) reads a layer.
    /// The VarBuilder's dtype is the activation dtype; its device must be the CPU.
    pub fn load(
        in_dim: usize,
        out_dim: usize,
        experts: usize,
        proj: &str,
        vb: VarBuilder,
        quant: &QuantConfig,
    ) -> candle_core::Result<Self> {
        let name = format!("{}.{proj}", vb.prefix());
        let not_cpu = |what: String| {
            layer_error(
                &name,
                Problem::Build(fp8_linear::LinearError::Kernel(
                    fp8_linear::KernelError::Device {
                        what: "experts",
                        detail: what,
                    },
                )),
            )
        };
        if !vb.device().is_cpu() {
            return Err(not_cpu(format!(
                "{:?}: grouped (mixture-of-experts) kernels run on the CPU today",
                vb.device().location()
            )));
        }
        let read: Vec<Fp8Weights> = (0..experts)
            .map(|e| Fp8Weights::read(in_dim, out_dim, &vb.pp(e).pp(proj), quant))
            .collect::<candle_core::Result<_>>()?;
        let Some(first) = read.first() else {
            return Err(not_cpu("no experts to load (experts = 0)".into()));
        };
        let config = first.config;
        let mut codes = Vec::with_capacity(experts * config.n * config.k);
        for w in &read {
            codes.extend(host_codes(&w.codes)?);
        }
        let scales: Vec<f32> = read.iter().flat_map(|w| w.scales.clone()).collect();
        let input_scales: Option<Vec<f32>> = read.iter().map(|w| w.input_scale).collect();
        let biases: Option<Vec<f32>> = read
            .iter()
            .map(|w| w.bias.clone())
            .collect::<Option<Vec<_>>>()
            .map(|b| b.concat());
        let [sr, sc] = config.weight_scale_shape();
        let mut stacked = LayerWeights::new(
            fp8_linear::Tensor::fp8(&codes, [experts * config.n, config.k]),
            fp8_linear::Tensor::f32(&scales, [experts * sr, sc]),
        );
        if let Some(s) = &input_scales {
            stacked = stacked.with_input_scale(fp8_linear::Tensor::f32(s, [experts, 1]));
        }
        if let Some(b) = &biases {
            stacked = stacked.with_bias(fp8_linear::Tensor::f32(b, [experts, config.n]));
        }
        let weights = GroupedWeights::new(experts, stacked);
        let layer = GroupedLinear::new(&Target::cpu(), &config, &weights, &Options::none())
            .map_err(|e| layer_error(&name, Problem::Grouped(e)))?;
        Ok(Fp8Experts {
            name,
            config,
            experts,
            dtype: vb.dtype(),
            layer: Mutex::new(layer),
        })
    }

    /// `y[i] = x[i] @ W_{ids[i]}^T (+ bias) * weights[i]` for every row `i` of `xs`
    /// (`[M, in_dim]`, bf16, f16 or f32 on the CPU): `expert_ids` is `[M]` (I64, U32 or
    /// U8), `-1` marking a padding row whose output is zero; `route_weights`, when given,
    /// `[M]`. Rows of one expert are best kept together (each run is one GEMM). Every
    /// problem (shapes, dtypes, an id out of range) is a candle error naming the experts
    /// and the problem.
    pub fn forward_routed(
        &self,
        xs: &Tensor,
        expert_ids: &Tensor,
        route_weights: Option<&Tensor>,
    ) -> candle_core::Result<Tensor> {
        let (n, k) = (self.config.n, self.config.k);
        let lead = check_input(&self.name, xs, k, &Device::Cpu)?;
        let &[m] = lead else {
            return Err(layer_error(
                &self.name,
                Problem::InputShape {
                    got: xs.dims().to_vec(),
                    k,
                },
            ));
        };
        let dt = xs.dtype();
        let ids: Vec<i32> = expert_ids
            .to_dtype(DType::I64)?
            .flatten_all()?
            .to_vec1::<i64>()?
            .into_iter()
            .map(|id| i32::try_from(id).unwrap_or(i32::MIN))
            .collect();
        let weights = match route_weights {
            Some(w) => Some(w.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?),
            None => None,
        };
        let routing = Routing::ExpertIds(&ids);
        let x = xs.to_dtype(self.dtype)?.contiguous()?.flatten_all()?;
        let mut layer = self.layer.lock().map_err(|_| {
            candle_core::Error::msg(format!("Fp8Experts `{}`: a call panicked", self.name))
        })?;
        let kernel = layer.plan().entry_for(m.max(1)).map_or("", |e| e.name);
        let call = Call {
            layer: &mut layer,
            routing: &routing,
            weights: weights.as_deref(),
            shape: (m, n, k),
        };
        let y = match self.dtype {
            DType::BF16 => call.run(
                &x,
                |d, s| fp8_linear::Tensor::bf16(d, s),
                |d, s| fp8_linear::TensorMut::bf16(d, s),
            ),
            DType::F16 => call.run(
                &x,
                |d, s| fp8_linear::Tensor::f16(d, s),
                |d, s| fp8_linear::TensorMut::f16(d, s),
            ),
            _ => call.run(
                &x,
                |d, s| fp8_linear::Tensor::f32(d, s),
                |d, s| fp8_linear::TensorMut::f32(d, s),
            ),
        }
        .map_err(|error| match error {
            CallError::Candle(e) => e,
            CallError::Kernel(error) => layer_error(&self.name, Problem::Kernel { kernel, error }),
        })?;
        y.to_dtype(dt)
    }

    /// The experts with a routing, as a candle [`Module`] on the tokens.
    pub fn routed<'a>(
        &'a self,
        expert_ids: &'a Tensor,
        route_weights: Option<&'a Tensor>,
    ) -> Routed<'a> {
        Routed {
            experts: self,
            expert_ids,
            route_weights,
        }
    }

    /// One expert's layer config.
    pub fn config(&self) -> &LayerConfig {
        &self.config
    }

    /// The number of experts.
    pub fn experts(&self) -> usize {
        self.experts
    }

    /// The grouped kernel that runs the experts (`CpuGroupedFp8Gemm`).
    pub fn kernel_name(&self) -> &'static str {
        self.layer
            .lock()
            .ok()
            .and_then(|l| l.plan().ranges.last().map(|r| r.entry.name))
            .unwrap_or("")
    }
}

/// One grouped call on host data of one element type.
struct Call<'a> {
    layer: &'a mut GroupedLinear,
    routing: &'a Routing<'a>,
    weights: Option<&'a [f32]>,
    /// M, N, K.
    shape: (usize, usize, usize),
}

/// Why a call failed: reading the input, or the kernel.
enum CallError {
    Candle(candle_core::Error),
    Kernel(fp8_linear::KernelError),
}

impl Call<'_> {
    /// The call on `x` (flat, `T` elements) through the views `view` / `view_mut` of `T`.
    fn run<T: candle_core::WithDType>(
        self,
        x: &Tensor,
        view: for<'t> fn(&'t [T], [usize; 2]) -> fp8_linear::Tensor<'t>,
        view_mut: for<'t> fn(&'t mut [T], [usize; 2]) -> fp8_linear::TensorMut<'t>,
    ) -> Result<Tensor, CallError> {
        let (m, n, k) = self.shape;
        let xv = x.to_vec1::<T>().map_err(CallError::Candle)?;
        let mut y = vec![T::zero(); m * n];
        self.layer
            .forward(
                &view(&xv, [m, k]),
                self.routing,
                self.weights,
                &mut view_mut(&mut y, [m, n]),
            )
            .map_err(CallError::Kernel)?;
        Tensor::from_vec(y, (m, n), &Device::Cpu).map_err(CallError::Candle)
    }
}

/// [`Fp8Experts`] with a routing input: a candle [`Module`] whose `forward` is
/// [`Fp8Experts::forward_routed`] with that routing.
#[derive(Debug)]
pub struct Routed<'a> {
    experts: &'a Fp8Experts,
    expert_ids: &'a Tensor,
    route_weights: Option<&'a Tensor>,
}

impl Module for Routed<'_> {
    fn forward(&self, xs: &Tensor) -> candle_core::Result<Tensor> {
        self.experts
            .forward_routed(xs, self.expert_ids, self.route_weights)
    }
}
