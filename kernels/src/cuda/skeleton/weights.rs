//! A layer's weights on the GPU: FP8 codes with rows padded to a multiple of 16 bytes,
//! scales in the layout a kernel asks for, optional bias. Built from host weights (uploaded)
//! or device weights (repacked on their device).

use std::sync::Arc;

use fp8_linear_core::tensor::Storage;
use fp8_linear_core::validate::check_layer_weights;
use fp8_linear_core::{DType, KernelError, LayerConfig, LayerWeights, Tensor};
use fp8_linear_cuda::{DeviceBuffer, Gpu};

use super::device_io::{download, same_device};
use super::error::be;
use crate::cuda::quant::ActQuant;

/// Weights as the CUDA kernels use them.
pub struct DeviceWeights {
    /// Codes `[n, ldk]`, columns `k..ldk` zero.
    pub codes: DeviceBuffer<u8>,
    /// Row stride of `codes` in bytes (`k` rounded up to 16).
    pub ldk: usize,
    /// The weight scales as given (row-major in the config's scale shape), on the host.
    pub host_scales: Vec<f32>,
    /// Static input scale (host copy), if the layer has one.
    pub input_scale: Option<f32>,
    /// Upper bound of per-token scales (host copy), if given.
    pub input_scale_ub: Option<f32>,
    /// Bias `[n]` as f32 on the device.
    pub bias: Option<DeviceBuffer<f32>>,
}

/// Host f32 copy of a small f32/f16/bf16 tensor (host or device).
pub fn small_to_host(
    kernel: &'static str,
    what: &'static str,
    t: &Tensor<'_>,
    gpu: &Arc<Gpu>,
) -> Result<Vec<f32>, KernelError> {
    let n = t.shape[0] * t.shape[1];
    Ok(match t.data {
        Storage::F32(s) => s[..n].to_vec(),
        Storage::F16(s) => s[..n].iter().map(|v| v.to_f32()).collect(),
        Storage::Bf16(s) => s[..n].iter().map(|v| v.to_f32()).collect(),
        Storage::Device(mem, DType::F32) => {
            let mut out = vec![0f32; n];
            download(kernel, what, &mem, gpu, &mut out)?;
            out
        }
        _ => {
            return Err(KernelError::DType {
                what,
                expected: "f32 (host or device), or host f16/bf16".into(),
                got: t.dtype(),
            })
        }
    })
}

/// K rounded up to 16 (the row stride of FP8 operands, so every row is 16-byte aligned).
pub const fn padded_k(k: usize) -> usize {
    k.div_ceil(16) * 16
}

impl DeviceWeights {
    /// Validates the weights against the config and puts them on the GPU with rows padded
    /// to a multiple of 16 bytes.
    pub fn load(
        kernel: &'static str,
        gpu: &Arc<Gpu>,
        config: &LayerConfig,
        w: &LayerWeights<'_>,
    ) -> Result<Self, KernelError> {
        Self::load_padded(kernel, gpu, config, w, 16)
    }

    /// Like [`DeviceWeights::load`], with rows padded to a multiple of `pad` bytes (a
    /// multiple of 16).
    /// Device weights must be on `gpu` and ready on its stream.
    pub fn load_padded(
        kernel: &'static str,
        gpu: &Arc<Gpu>,
        config: &LayerConfig,
        w: &LayerWeights<'_>,
        pad: usize,
    ) -> Result<Self, KernelError> {
        check_layer_weights(config, w)?;
        let (n, k) = (config.n, config.k);
        let ldk = padded_k(k).div_ceil(pad) * pad;
        let gpu = gpu.clone();
        let codes = match w.weight.data {
            Storage::F8E4m3(host) => {
                let mut padded = vec![0u8; n * ldk];
                for (dst, src) in padded.chunks_mut(ldk).zip(host.chunks(k)) {
                    dst[..k].copy_from_slice(src);
                }
                DeviceBuffer::from_host(&gpu, &padded).map_err(be(kernel))?
            }
            Storage::Device(mem, DType::F8E4m3) => {
                same_device("weight", &mem, &gpu)?;
                let buf = DeviceBuffer::<u8>::zeros(&gpu, n * ldk).map_err(be(kernel))?;
                let q = ActQuant::new(&gpu).map_err(be(kernel))?;
                // SAFETY: the source holds n*k bytes (checked by check_layer_weights), the
                // destination n*ldk; both on this GPU; the layer's stream.
                unsafe { q.pad_rows(mem.ptr, buf.ptr(), n, k, ldk) }.map_err(be(kernel))?;
                gpu.synchronize().map_err(be(kernel))?;
                buf
            }
            _ => {
                return Err(KernelError::DType {
                    what: "weight",
                    expected: "f8e4m3".into(),
                    got: w.weight.dtype(),
                })
            }
        };
        let host_scales = small_to_host(kernel, "weight_scale", &w.weight_scale, &gpu)?;
        if let Some((index, &value)) = host_scales
            .iter()
            .enumerate()
            .find(|(_, v)| !v.is_finite() || **v < 0.0)
        {
            return Err(KernelError::NotFinite {
                what: "weight_scale",
                index,
                value,
            });
        }
        let scalar = |what, t: &Option<Tensor<'_>>| -> Result<Option<f32>, KernelError> {
            match t {
                Some(t) => Ok(Some(small_to_host(kernel, what, t, &gpu)?[0])),
                None => Ok(None),
            }
        };
        let input_scale = scalar("input_scale", &w.input_scale)?;
        let input_scale_ub = scalar("input_scale_ub", &w.input_scale_ub)?;
        for (what, v) in [
            ("input_scale", input_scale),
            ("input_scale_ub", input_scale_ub),
        ] {
            if let Some(v) = v {
                if !v.is_finite() || v <= 0.0 {
                    return Err(KernelError::NotFinite {
                        what,
                        index: 0,
                        value: v,
                    });
                }
            }
        }
        let bias = match (&w.bias, config.bias) {
            (Some(b), true) => {
                let host = small_to_host(kernel, "bias", b, &gpu)?;
                Some(DeviceBuffer::from_host(&gpu, &host).map_err(be(kernel))?)
            }
            _ => None,
        };
        Ok(DeviceWeights {
            codes,
            ldk,
            host_scales,
            input_scale,
            input_scale_ub,
            bias,
        })
    }
}
