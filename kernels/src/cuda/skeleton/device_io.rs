//! Device-side checks of a CUDA kernel's inputs and outputs: tensors as device memory on the
//! layer's GPU, the row count the kernels can index, the GPU of a build context, downloads of
//! small device tensors.

use std::sync::Arc;

use fp8_linear_core::tensor::{Storage, StorageMut};
use fp8_linear_core::validate::check_io;
use fp8_linear_core::{BuildCtx, DeviceMemory, KernelError, LayerConfig, Tensor, TensorMut};
use fp8_linear_cuda::cudarc::driver::DeviceRepr;
use fp8_linear_cuda::Gpu;

use super::error::be;

/// Device memory, or the typed error for a tensor in host memory.
fn on_device(
    kernel: &'static str,
    what: &'static str,
    mem: Option<DeviceMemory>,
) -> Result<DeviceMemory, KernelError> {
    mem.ok_or_else(|| KernelError::Device {
        what,
        detail: format!("{kernel} runs on a CUDA GPU and needs device memory; got host memory"),
    })
}

/// The device memory behind a tensor, or a typed error for host memory.
pub fn device_in(
    kernel: &'static str,
    what: &'static str,
    t: &Tensor<'_>,
) -> Result<DeviceMemory, KernelError> {
    let mem = match t.data {
        Storage::Device(m, _) => Some(m),
        _ => None,
    };
    on_device(kernel, what, mem)
}

/// The device memory behind a writable tensor, or a typed error for host memory.
pub fn device_out(
    kernel: &'static str,
    what: &'static str,
    t: &TensorMut<'_>,
) -> Result<DeviceMemory, KernelError> {
    let mem = match t.data {
        StorageMut::Device(m, _) => Some(m),
        _ => None,
    };
    on_device(kernel, what, mem)
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

/// Copies the first `dst.len()` elements of the device tensor memory `mem` (`what`, on the
/// layer's GPU) to the host, synchronously; memory that is too small is a typed error.
pub fn download<T: DeviceRepr>(
    kernel: &'static str,
    what: &'static str,
    mem: &DeviceMemory,
    gpu: &Gpu,
    dst: &mut [T],
) -> Result<(), KernelError> {
    same_device(what, mem, gpu)?;
    let bytes = std::mem::size_of_val(dst);
    if mem.bytes < bytes {
        return Err(KernelError::Device {
            what,
            detail: format!("holds {} bytes, {bytes} are needed", mem.bytes),
        });
    }
    // SAFETY: the memory is on this GPU and holds at least `bytes` bytes (checked above).
    unsafe { gpu.copy_to_host(mem.ptr, dst) }
        .map_err(|e| be(kernel)(e.within(format_args!("downloading {what}"))))
}
