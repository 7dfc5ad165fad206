//! cuBLASLt FP8 GEMMs for the non-block ("scaled") table: one scale per tensor
//! ([`CublasLtFp8PerTensor`], sm_89+), and per-token activation x per-channel weight scales
//! through cuBLASLt's outer-vector scale mode ([`CublasLtFp8Rowwise`], sm_90+, cuBLASLt >=
//! 12.9). Activations are quantized on the GPU per the layer's key; K is padded to 16.

use std::sync::Arc;

use fp8_linear_core::quant::GroupShape;
use fp8_linear_core::validate::check_config_basics;
use fp8_linear_core::{
    fp8_kernel, BuildCtx, DType, Fp8Kernel, KernelError, LayerConfig, LayerWeights, Tensor,
    TensorMut, Unsupported,
};
use fp8_linear_cuda::cublaslt::ScaleMode;
use fp8_linear_cuda::{CudaError, DeviceBuffer, Gpu};

use crate::cuda::quant::{ue8m0_activations, ActQuant, ScaleOrder};
use crate::cuda::skeleton::error::{be, be_at};
use crate::cuda::skeleton::layer::{skeleton_calls, Call, GpuLayer, Io, Recipe};
use crate::cuda::skeleton::lt_gemm::{lt_layer_checks, LtGemm};
use crate::cuda::skeleton::scratch::Scratch;
use crate::cuda::skeleton::weights::DeviceWeights;

/// Checks shared by both kernels: FP8 e4m3 W8A8 with f32 scales, float input, N % 16 == 0,
/// no bias.
const fn scaled_basics(config: &LayerConfig) -> Result<(), Unsupported> {
    if let Err(e) = check_config_basics(config) {
        return Err(e);
    }
    // ue8m0 scales are f32 powers of two here: weight scales need nothing, dynamic
    // activation scales are rounded up by the quantization (static ones are used as given).
    if config.activation.is_none() {
        return Err(Unsupported::new("activations must be quantized (W8A8)"));
    }
    if matches!(config.input_dtype, DType::F8E4m3) {
        return Err(Unsupported::new("input dtype must be f32, f16 or bf16"));
    }
    lt_layer_checks(config)
}

/// What both kernels keep after `process_weights`.
struct State {
    /// The kernel's name (errors name it).
    kernel: &'static str,
    w: DeviceWeights,
    /// Weight scales as cuBLASLt reads them (one, or one per output channel).
    ws: DeviceBuffer<f32>,
    /// Static input scale / upper bound, on the device.
    input_scale: Option<DeviceBuffer<f32>>,
    input_scale_ub: Option<DeviceBuffer<f32>>,
    quant: ActQuant,
    gemm: LtGemm,
    /// Whether the GEMM reads one activation scale per row (else one per tensor).
    per_row: bool,
    q: Scratch<u8>,
    a_scales: Scratch<f32>,
    amax: Scratch<f32>,
}

impl State {
    fn load(
        kernel: &'static str,
        gpu: &Arc<Gpu>,
        c: &LayerConfig,
        weights: &LayerWeights<'_>,
        modes: (ScaleMode, ScaleMode),
    ) -> Result<Self, KernelError> {
        let w = DeviceWeights::load(kernel, gpu, c, weights)?;
        let gemm = LtGemm::new(gpu, c, w.ldk, modes).map_err(be(kernel))?;
        // The outer-vector mode reads one weight scale per output channel.
        let per_channel = modes.0 == ScaleMode::OuterVec;
        let scales: Vec<f32> = if per_channel && w.host_scales.len() == 1 {
            vec![w.host_scales[0]; c.n]
        } else {
            w.host_scales.clone()
        };
        let ws = DeviceBuffer::from_host(gpu, &scales).map_err(be(kernel))?;
        let up = |v: Option<f32>| -> Result<Option<DeviceBuffer<f32>>, KernelError> {
            v.map(|v| DeviceBuffer::from_host(gpu, &[v]).map_err(be(kernel)))
                .transpose()
        };
        let input_scale = up(w.input_scale)?;
        let input_scale_ub = up(w.input_scale_ub)?;
        let quant = ActQuant::new(gpu).map_err(be(kernel))?;
        Ok(State {
            kernel,
            w,
            ws,
            input_scale,
            input_scale_ub,
            quant,
            gemm,
            per_row: modes.1 == ScaleMode::OuterVec,
            q: Scratch::default(),
            a_scales: Scratch::default(),
            amax: Scratch::default(),
        })
    }

    /// Makes everything a call of `m` rows needs ready (codes, scales, the absmax scratch,
    /// the GEMM plan); returns the addresses of the codes, the activation scales and the
    /// absmax. Allocating or planning is refused while the stream is being captured.
    fn buffers(&mut self, gpu: &Arc<Gpu>, m: usize) -> Result<(u64, u64, u64), CudaError> {
        let q = self.q.get(gpu, m * self.w.ldk)?.ptr();
        let a_s = self.a_scales.get(gpu, m)?.ptr();
        let amax = self.amax.get(gpu, 1)?.ptr();
        self.gemm.plan(m, self.ws.ptr(), a_s)?;
        Ok((q, a_s, amax))
    }
}

impl State {
    /// The GEMM of `m` rows on the codes `q` (`[m, ldk]`) and activation scales `a_s`.
    fn gemm_on(&mut self, m: usize, (q, a_s): (u64, u64), out: u64) -> Result<(), KernelError> {
        let w = self.w.codes.ptr();
        // SAFETY: weight n*ldk bytes with its scales, activations m*ldk bytes with theirs,
        // output m*n (check_io); all on this GPU.
        unsafe { self.gemm.run(m, w, self.ws.ptr(), q, a_s, out) }.map_err(be_at(self.kernel, m))
    }
}

impl Recipe for State {
    type Knobs = ();
    type Plan = ();
    /// The addresses of the codes, the activation scales and the absmax.
    type Scratch = (u64, u64, u64);

    fn plan(&mut self, _: Call<'_>, _: &()) -> Result<(), KernelError> {
        Ok(())
    }

    fn reserve(&mut self, call: Call<'_>, _: &()) -> Result<(u64, u64, u64), KernelError> {
        let (gpu, m) = (call.gpu, call.m);
        self.buffers(gpu, m).map_err(be_at(self.kernel, m))
    }

    fn keep_retired(&mut self, max_m: usize) {
        self.q.keep_retired();
        self.a_scales.keep_retired();
        self.amax.keep_retired();
        self.gemm.pin_up_to(max_m);
    }

    /// Quantizes the input per the layer's activation key and runs the GEMM.
    fn enqueue(
        &mut self,
        call: Call<'_>,
        _: (),
        (q, a_s, amax): (u64, u64, u64),
        io: Io,
    ) -> Result<(), KernelError> {
        let c = call.c;
        let kernel = self.kernel;
        let (k, ldk) = (c.k, self.w.ldk);
        let act = c.activation.expect("checked by can_implement");
        let Io(m, x, out, _) = io;
        if let Some((given_q, given_s)) = io.pre_quantized() {
            // Per token: [M, 1] scales; per tensor: [1, 1], read once per row by the
            // outer-vector mode.
            let rows = if self.per_row { m } else { 1 };
            let broadcast = self.per_row && matches!(act.group, GroupShape::PerTensor);
            // SAFETY: the given codes hold m*k bytes and the scales their [M, 1] or [1, 1]
            // (check_quantized_io), the scratch m*ldk bytes and m floats; all on this GPU.
            let (q, a_s) = unsafe {
                let q = self.quant.given_codes(given_q.ptr, (m, k), (m, ldk), q);
                let s = (rows, 1, broadcast);
                let a_s = self
                    .quant
                    .given_scales(given_s.ptr, s, a_s, ScaleOrder::RowMajor);
                (q.map_err(be(kernel))?, a_s.map_err(be(kernel))?)
            };
            return self.gemm_on(m, (q, a_s), out.ptr);
        }
        let fixed =
            if act.dynamic {
                None
            } else {
                Some(self.input_scale.as_ref().map(|b| b.ptr()).ok_or(
                    KernelError::MissingParam {
                        kernel,
                        name: "input_scale",
                    },
                )?)
            };
        let per_row = self.per_row;
        let ue8m0 = ue8m0_activations(c);
        // SAFETY: x holds m*k elements, q m*ldk bytes, a_s m floats, scalars one f32 each;
        // all on this GPU, ordered on the layer's stream.
        unsafe {
            match act.group {
                GroupShape::PerToken => {
                    let ub = self.input_scale_ub.as_ref().map(|b| b.ptr());
                    self.quant
                        .per_token(x.ptr, c.input_dtype, m, k, q, ldk, a_s, ub, ue8m0)
                }
                _ => {
                    let (rows, one) = if per_row {
                        (Some(a_s), None)
                    } else {
                        (None, Some(a_s))
                    };
                    self.quant.per_tensor(
                        x.ptr,
                        c.input_dtype,
                        m,
                        k,
                        q,
                        ldk,
                        fixed,
                        amax,
                        rows,
                        one,
                        ue8m0,
                    )
                }
            }
        }
        .map_err(be(kernel))?;
        self.gemm_on(m, (q, a_s), out.ptr)
    }
}

/// The layer of either kernel and the scale modes that tell them apart (weight, activation).
struct ScaledGemm {
    layer: GpuLayer<State>,
    modes: (ScaleMode, ScaleMode),
}

impl ScaledGemm {
    fn new(
        kernel: &'static str,
        ctx: &BuildCtx<'_>,
        modes: (ScaleMode, ScaleMode),
    ) -> Result<Self, KernelError> {
        Ok(ScaledGemm {
            layer: GpuLayer::new(kernel, ctx)?,
            modes,
        })
    }

    fn process_weights(
        &mut self,
        kernel: &'static str,
        weights: &LayerWeights<'_>,
    ) -> Result<(), KernelError> {
        let l = &self.layer;
        let state = State::load(kernel, &l.gpu, &l.config, weights, self.modes)?;
        self.layer.set(state);
        Ok(())
    }

    skeleton_calls!(layer, |_| ());
}

/// cuBLASLt FP8 GEMM with one scale per tensor for weights and activations (static or
/// dynamic), bf16/f16/f32 output (sm_89+).
#[fp8_kernel(platform = Cuda, priority = 2, arch = sm89.., backend = cublaslt)]
pub struct CublasLtFp8PerTensor(ScaledGemm);

impl CublasLtFp8PerTensor {
    /// Builds the kernel for a layer on the context's GPU (nothing touches the GPU until
    /// `process_weights`).
    pub fn new(ctx: &BuildCtx<'_>) -> Result<Self, KernelError> {
        let modes = (ScaleMode::Scalar, ScaleMode::Scalar);
        ScaledGemm::new(Self::NAME, ctx, modes).map(Self)
    }
}

impl Fp8Kernel for CublasLtFp8PerTensor {
    fn can_implement(config: &LayerConfig) -> Result<(), Unsupported> {
        scaled_basics(config)?;
        if !matches!(config.weight.group, GroupShape::PerTensor) {
            return Err(Unsupported::new("weights must have one scale per tensor"));
        }
        match config.activation {
            Some(a) if matches!(a.group, GroupShape::PerTensor) => {}
            _ => {
                return Err(Unsupported::new(
                    "activations must have one scale per tensor",
                ))
            }
        }
        if matches!(config.output_dtype, DType::F8E4m3) {
            return Err(Unsupported::new("output dtype must be f32, f16 or bf16"));
        }
        Ok(())
    }

    fn process_weights(&mut self, weights: &LayerWeights<'_>) -> Result<(), KernelError> {
        self.0.process_weights(Self::NAME, weights)
    }

    fn apply(&mut self, input: &Tensor<'_>, output: &mut TensorMut<'_>) -> Result<(), KernelError> {
        self.0.apply(input, output)
    }

    fn apply_quantized(
        &mut self,
        codes: &Tensor<'_>,
        scales: &Tensor<'_>,
        output: &mut TensorMut<'_>,
    ) -> Result<(), KernelError> {
        self.0.apply_quantized(codes, scales, output)
    }

    fn prepare(&mut self, max_m: usize) -> Result<(), KernelError> {
        self.0.prepare(max_m)
    }
}

/// cuBLASLt FP8 GEMM with per-token (or per-tensor) activation scales and per-channel (or
/// per-tensor) weight scales through the outer-vector scale mode, bf16 output (sm_90+).
#[fp8_kernel(platform = Cuda, priority = 3, arch = sm90.., backend = cublaslt)]
pub struct CublasLtFp8Rowwise(ScaledGemm);

impl CublasLtFp8Rowwise {
    /// Builds the kernel for a layer on the context's GPU (nothing touches the GPU until
    /// `process_weights`).
    pub fn new(ctx: &BuildCtx<'_>) -> Result<Self, KernelError> {
        let modes = (ScaleMode::OuterVec, ScaleMode::OuterVec);
        ScaledGemm::new(Self::NAME, ctx, modes).map(Self)
    }
}

impl Fp8Kernel for CublasLtFp8Rowwise {
    fn can_implement(config: &LayerConfig) -> Result<(), Unsupported> {
        scaled_basics(config)?;
        if !matches!(
            config.weight.group,
            GroupShape::PerTensor | GroupShape::PerChannel
        ) {
            return Err(Unsupported::new(
                "weights must have per-channel or per-tensor scales",
            ));
        }
        match config.activation {
            Some(a) if matches!(a.group, GroupShape::PerTensor) => {}
            Some(a) if matches!(a.group, GroupShape::PerToken) && a.dynamic => {}
            _ => {
                return Err(Unsupported::new(
                    "activations must have dynamic per-token or per-tensor scales",
                ))
            }
        }
        if !matches!(config.output_dtype, DType::Bf16) {
            return Err(Unsupported::new(
                "cuBLASLt outer-vector FP8 writes bf16 output only",
            ));
        }
        Ok(())
    }

    fn process_weights(&mut self, weights: &LayerWeights<'_>) -> Result<(), KernelError> {
        self.0.process_weights(Self::NAME, weights)
    }

    fn apply(&mut self, input: &Tensor<'_>, output: &mut TensorMut<'_>) -> Result<(), KernelError> {
        self.0.apply(input, output)
    }

    fn apply_quantized(
        &mut self,
        codes: &Tensor<'_>,
        scales: &Tensor<'_>,
        output: &mut TensorMut<'_>,
    ) -> Result<(), KernelError> {
        self.0.apply_quantized(codes, scales, output)
    }

    fn prepare(&mut self, max_m: usize) -> Result<(), KernelError> {
        self.0.prepare(max_m)
    }
}
