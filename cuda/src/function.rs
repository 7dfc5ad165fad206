//! Kernel functions of a loaded module: lookup by name, with the dynamic shared memory limit
//! raised for kernels that use more than the default 48 KiB.

use std::sync::Arc;

use cudarc::driver::sys::CUfunction_attribute;
use cudarc::driver::{CudaFunction, CudaModule};

use crate::error::CudaError;

/// The function `name` of `module`.
pub fn function(module: &Arc<CudaModule>, name: &str) -> Result<CudaFunction, CudaError> {
    module
        .load_function(name)
        .map_err(|e| CudaError::driver(format!("loading function {name}"), e))
}

/// The function `name` of `module`, allowed `bytes` of dynamic shared memory per block (at
/// most the device's opt-in limit, [`Gpu::max_shared_memory_per_block`](crate::Gpu::max_shared_memory_per_block)).
pub fn function_with_shared_memory(
    module: &Arc<CudaModule>,
    name: &str,
    bytes: u32,
) -> Result<CudaFunction, CudaError> {
    let f = function(module, name)?;
    let value = i32::try_from(bytes).map_err(|_| {
        CudaError::InvalidArgument(format!("{bytes} B of shared memory for {name}"))
    })?;
    // SAFETY: a valid function handle of a live module; raising its dynamic shared memory
    // limit.
    unsafe {
        cudarc::driver::result::function::set_function_attribute(
            f.cu_function(),
            CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            value,
        )
    }
    .map_err(|e| CudaError::driver(format!("setting {bytes} B shared memory on {name}"), e))?;
    Ok(f)
}
