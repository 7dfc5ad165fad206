//! The GPU side of [`ActivationQuantizer`](crate::ActivationQuantizer): the layer's
//! quantization kernels ([`ActQuant`], the ones its GEMM kernels run) writing into the
//! caller's buffers in the public layout (codes `[M, K]`, row-major scales), and the
//! SiLU-and-multiply kernel in front of them for `silu_mul`.

use std::sync::Arc;

use fp8_linear_core::quant::GroupShape;
use fp8_linear_core::{DType, KernelError, LayerConfig, Tensor, TensorMut};
use fp8_linear_cuda::{DeviceBuffer, Gpu};

use super::quant::{ue8m0_activations, ActQuant, Grouping, ScaleOrder};
use super::skeleton::device_io::{device_in, device_out, same_device};
use super::skeleton::error::{be, be_at};
use super::skeleton::scratch::Scratch;
use super::skeleton::weights::small_to_host;
use crate::cpu::quantize::ActStatics;

/// One f32 of a `[1, 1]` tensor, host or device memory of `gpu`.
pub(crate) fn scalar_of(
    kernel: &'static str,
    what: &'static str,
    t: &Tensor<'_>,
    gpu: &Arc<Gpu>,
) -> Result<f32, KernelError> {
    Ok(small_to_host(kernel, what, t, gpu)?[0])
}

/// The quantization kernels of one GPU, the layer's static scalars on it, and the scratch
/// of a call (the absmax of per-tensor keys, `h` of `silu_mul`).
pub(crate) struct GpuQuantizer {
    kernel: &'static str,
    gpu: Arc<Gpu>,
    config: LayerConfig,
    quant: ActQuant,
    input_scale: Option<DeviceBuffer<f32>>,
    input_scale_ub: Option<DeviceBuffer<f32>>,
    amax: Scratch<f32>,
    h: Scratch<f32>,
}

impl GpuQuantizer {
    /// Loads the quantization module on `gpu` and uploads the static scalars.
    pub(crate) fn new(
        kernel: &'static str,
        gpu: &Arc<Gpu>,
        config: &LayerConfig,
        statics: ActStatics,
    ) -> Result<Self, KernelError> {
        let up = |v: Option<f32>| -> Result<Option<DeviceBuffer<f32>>, KernelError> {
            v.map(|v| DeviceBuffer::from_host(gpu, &[v]).map_err(be(kernel)))
                .transpose()
        };
        Ok(GpuQuantizer {
            kernel,
            gpu: gpu.clone(),
            config: *config,
            quant: ActQuant::new(gpu).map_err(be(kernel))?,
            input_scale: up(statics.input_scale)?,
            input_scale_ub: up(statics.input_scale_ub)?,
            amax: Scratch::default(),
            h: Scratch::default(),
        })
    }

    /// Makes calls of up to `max_m` rows allocate nothing (so they can be captured into a
    /// CUDA graph): the absmax and `h` scratch, kept alive once grown.
    pub(crate) fn prepare(&mut self, max_m: usize) -> Result<(), KernelError> {
        self.amax.keep_retired();
        self.h.keep_retired();
        let k = self.config.k;
        self.amax.get(&self.gpu, 1).map_err(be(self.kernel))?;
        self.h
            .get(&self.gpu, max_m.max(1) * k)
            .map_err(be_at(self.kernel, max_m))?;
        Ok(())
    }

    /// One call (checked by `check_quantizer_io`): `m` rows of `input` (`[m, 2K]` when
    /// `gated`) into `codes` and `scales`, enqueued on the GPU's stream.
    pub(crate) fn run(
        &mut self,
        m: usize,
        input: &Tensor<'_>,
        gated: bool,
        codes: &mut TensorMut<'_>,
        scales: &mut TensorMut<'_>,
    ) -> Result<(), KernelError> {
        let kernel = self.kernel;
        let (c, gpu) = (&self.config, &self.gpu);
        let what = if gated { "gate_up" } else { "input" };
        let x = device_in(kernel, what, input)?;
        let q = device_out(kernel, "codes", codes)?;
        let s = device_out(kernel, "scales", scales)?;
        for (name, mem) in [(what, &x), ("codes", &q), ("scales", &s)] {
            same_device(name, mem, gpu)?;
        }
        let k = c.k;
        let key = c.activation.ok_or_else(|| KernelError::PreQuantized {
            kernel,
            reason: "the layer is weight-only".into(),
        })?;
        let amax = match key.group {
            GroupShape::PerTensor if key.dynamic => {
                self.amax.get(gpu, 1).map_err(be_at(kernel, m))?.ptr()
            }
            _ => 0,
        };
        let (x, dtype) = if gated {
            let h = self.h.get(gpu, m * k).map_err(be_at(kernel, m))?.ptr();
            // SAFETY: x holds m * 2k elements of the input dtype and h m * k floats, on
            // this GPU (checked above and by check_quantizer_io).
            unsafe { self.quant.silu_mul(x.ptr, c.input_dtype, (m, k), h) }.map_err(be(kernel))?;
            (h, DType::F32)
        } else {
            (x.ptr, c.input_dtype)
        };
        let ue8m0 = ue8m0_activations(c);
        // SAFETY: x holds m * k elements of `dtype`, q m * k bytes, s the scales of the
        // public layout (check_quantizer_io), the scalars one f32 each; all on this GPU and
        // ordered on its stream.
        unsafe {
            match key.group {
                GroupShape::Group { .. } => {
                    let grouping = Grouping::of(c).expect("a 1 x G key");
                    let order = ScaleOrder::RowMajor;
                    self.quant
                        .groups(x, dtype, (m, k), grouping, q.ptr, k, s.ptr, order, None)
                }
                GroupShape::PerTensor => {
                    let fixed = match (&self.input_scale, key.dynamic) {
                        (_, true) => None,
                        (Some(b), false) => Some(b.ptr()),
                        (None, false) => {
                            return Err(KernelError::MissingParam {
                                kernel,
                                name: "input_scale",
                            })
                        }
                    };
                    self.quant.per_tensor(
                        x,
                        dtype,
                        m,
                        k,
                        q.ptr,
                        k,
                        fixed,
                        amax,
                        None,
                        Some(s.ptr),
                        ue8m0,
                    )
                }
                _ => {
                    let ub = self.input_scale_ub.as_ref().map(|b| b.ptr());
                    self.quant
                        .per_token(x, dtype, m, k, q.ptr, k, s.ptr, ub, ue8m0)
                }
            }
        }
        .map_err(be_at(kernel, m))
    }
}
