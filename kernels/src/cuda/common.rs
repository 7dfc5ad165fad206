//! Helpers shared by the CUDA kernels: device-tensor access, the GPU of a layer, error
//! mapping, dtype codes.

use std::sync::Arc;

use fp8_linear_core::tensor::{Storage, StorageMut};
use fp8_linear_core::validate::check_io;
use fp8_linear_core::{BuildCtx, DType, DeviceMemory, KernelError, LayerConfig, Tensor, TensorMut};
use fp8_linear_cuda::{CudaError, Gpu};

/// The device memory behind a tensor, or a typed error for host memory.
pub fn device_in(
    kernel: &'static str,
    what: &'static str,
    t: &Tensor<'_>,
) -> Result<DeviceMemory, KernelError> {
    match t.data {
        Storage::Device(m, _) => Ok(m),
        _ => Err(KernelError::Device {
            what,
            detail: format!("{kernel} runs on a CUDA GPU and needs device memory; got host memory"),
        }),
    }
}

/// The device memory behind a writable tensor, or a typed error for host memory.
pub fn device_out(
    kernel: &'static str,
    what: &'static str,
    t: &TensorMut<'_>,
) -> Result<DeviceMemory, KernelError> {
    match t.data {
        StorageMut::Device(m, _) => Ok(m),
        _ => Err(KernelError::Device {
            what,
            detail: format!("{kernel} runs on a CUDA GPU and needs device memory; got host memory"),
        }),
    }
}

/// Checks that memory lives on the kernel's GPU.
pub fn same_device(what: &'static str, m: &DeviceMemory, gpu: &Gpu) -> Result<(), KernelError> {
    if m.ordinal != gpu.ordinal() {
        return Err(KernelError::Device {
            what,
            detail: format!(
                "memory is on CUDA device {}, the layer's weights are on device {}",
                m.ordinal,
                gpu.ordinal()
            ),
        });
    }
    Ok(())
}

/// The checks every CUDA kernel's `apply` starts with: shapes and dtypes against the layer
/// (returns M), then the input and the output as device memory on the layer's GPU.
pub fn device_io(
    kernel: &'static str,
    config: &LayerConfig,
    gpu: &Gpu,
    input: &Tensor<'_>,
    output: &TensorMut<'_>,
) -> Result<(usize, DeviceMemory, DeviceMemory), KernelError> {
    let m = check_io(config, input, output)?;
    let x = device_in(kernel, "input", input)?;
    let out = device_out(kernel, "output", output)?;
    same_device("input", &x, gpu)?;
    same_device("output", &out, gpu)?;
    Ok((m, x, out))
}

/// Rejects inputs whose row count the kernels cannot index: rows are 32-bit in the kernels,
/// and `M * N` output offsets must fit in 64 bits.
pub fn check_row_count(input: &Tensor<'_>, m: usize, n: usize) -> Result<(), KernelError> {
    if m > i32::MAX as usize || m.checked_mul(n).is_none_or(|v| v > i64::MAX as usize) {
        return Err(KernelError::shape(
            "input",
            "[M < 2^31, K]",
            format!("{:?}", input.shape),
        ));
    }
    Ok(())
}

/// The GPU a kernel is built for: the runtime handle in its build context, which must be
/// the device selection judged the kernel against. Typed errors for a profile device or a
/// context without a handle.
pub fn gpu_of(kernel: &'static str, ctx: &BuildCtx<'_>) -> Result<Arc<Gpu>, KernelError> {
    let gpu = ctx.require_runtime::<Arc<Gpu>>(kernel)?;
    if ctx.device().ordinal != Some(gpu.ordinal()) {
        return Err(KernelError::Device {
            what: "build context",
            detail: format!(
                "{kernel} was selected for {} but handed the runtime of CUDA device {}",
                ctx.device(),
                gpu.ordinal()
            ),
        });
    }
    Ok(gpu.clone())
}

/// Maps a CUDA-layer error to a kernel error naming the kernel.
pub fn be(kernel: &'static str) -> impl Fn(CudaError) -> KernelError {
    move |e| KernelError::backend(kernel, e)
}

/// Index of a float dtype in the kernels' instantiation order (f32, f16, bf16).
pub fn float_index(what: &'static str, d: DType) -> Result<usize, KernelError> {
    match d {
        DType::F32 => Ok(0),
        DType::F16 => Ok(1),
        DType::Bf16 => Ok(2),
        DType::F8E4m3 => Err(KernelError::DType {
            what,
            expected: "f32, f16 or bf16".into(),
            got: d,
        }),
    }
}

/// The name suffix of a float dtype in kernel names.
pub const FLOAT_NAMES: [&str; 3] = ["f32", "f16", "bf16"];

/// K rounded up to 16 (the row stride of FP8 operands, so every row is 16-byte aligned).
pub const fn padded_k(k: usize) -> usize {
    k.div_ceil(16) * 16
}

/// A growable device scratch buffer, reallocated only when too small.
pub struct Scratch<T: fp8_linear_cuda::buffer::Element> {
    buf: Option<fp8_linear_cuda::DeviceBuffer<T>>,
}

impl<T: fp8_linear_cuda::buffer::Element> Default for Scratch<T> {
    fn default() -> Self {
        Scratch { buf: None }
    }
}

impl<T: fp8_linear_cuda::buffer::Element> Scratch<T> {
    /// A buffer of at least `len` elements (its address is stable until it must grow).
    pub fn get(
        &mut self,
        gpu: &Arc<Gpu>,
        len: usize,
    ) -> Result<&mut fp8_linear_cuda::DeviceBuffer<T>, CudaError> {
        let grow = match &self.buf {
            Some(b) => b.len() < len,
            None => true,
        };
        if grow {
            self.buf = None; // free first
            self.buf = Some(fp8_linear_cuda::DeviceBuffer::zeros(
                gpu,
                len.next_power_of_two(),
            )?);
        }
        Ok(self.buf.as_mut().expect("allocated above"))
    }
}
