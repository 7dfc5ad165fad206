//! Device discovery into core's [`Device`].

use std::borrow::Cow;

use cudarc::driver::result;
use cudarc::driver::sys::CUdevice_attribute;
use fp8_linear_core::{Capability, Device, Platform};

use crate::error::CudaError;
use crate::probe;

/// Number of CUDA devices; an error (never a panic) when there is no driver.
pub fn device_count() -> Result<usize, CudaError> {
    probe::driver()?;
    let n = result::device::get_count().map_err(|e| CudaError::driver("cuDeviceGetCount", e))?;
    Ok(n.max(0) as usize)
}

/// Every CUDA device, described with its exact capability, SM count, name, memory and
/// ordinal. `NoDevice` when the driver sees none.
pub fn discover() -> Result<Vec<Device>, CudaError> {
    let n = device_count()?;
    if n == 0 {
        return Err(CudaError::NoDevice {
            detail: "the CUDA driver reports 0 devices".into(),
        });
    }
    (0..n).map(describe).collect()
}

/// Describes one device by ordinal without creating a context.
pub fn describe(ordinal: usize) -> Result<Device, CudaError> {
    let n = device_count()?;
    if ordinal >= n {
        return Err(CudaError::NoDevice {
            detail: format!("ordinal {ordinal} requested, the driver reports {n} device(s)"),
        });
    }
    let ctx_err =
        |what: &'static str| move |e| CudaError::driver(format!("{what} (device {ordinal})"), e);
    let dev = result::device::get(ordinal as i32).map_err(ctx_err("cuDeviceGet"))?;
    // SAFETY: `dev` is a valid device handle from cuDeviceGet.
    let attr = |a| unsafe { result::device::get_attribute(dev, a) };
    let major = attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
        .map_err(ctx_err("compute capability"))?;
    let minor = attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)
        .map_err(ctx_err("compute capability"))?;
    let sms = attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
        .map_err(ctx_err("SM count"))?;
    let name = result::device::get_name(dev).map_err(ctx_err("cuDeviceGetName"))?;
    // SAFETY: `dev` is a valid device handle.
    let mem = unsafe { result::device::total_mem(dev) }.map_err(ctx_err("cuDeviceTotalMem"))?;
    Ok(Device {
        platform: Platform::Cuda,
        capability: Some(Capability::new(major as u8, minor as u8)),
        name: Cow::Owned(name),
        sm_count: sms as u32,
        cpu_cores: 0,
        memory_bytes: mem as u64,
        ordinal: Some(ordinal as u32),
    })
}
