//! Launch plumbing shared by the kernels: the functions of a module in the kernels' three
//! output dtypes, grid shapes, and a launch whose driver error names what was launched.

use std::ffi::c_void;
use std::fmt::Display;
use std::sync::Arc;

use fp8_linear_cuda::cudarc::driver::{
    sys, CudaFunction, CudaModule, CudaStream, LaunchArgs, LaunchConfig,
};
use fp8_linear_cuda::{function, function_with_shared_memory, CudaError};

use super::dtype::FLOAT_NAMES;

/// Threads per block of the elementwise and quantization kernels.
pub const THREADS: u32 = 256;

/// Most blocks of a grid-stride elementwise launch.
const MAX_ELEMENTWISE_BLOCKS: usize = 4096;

/// The functions `names` of `module`, each allowed `smem` bytes of dynamic shared memory
/// when given.
pub fn functions(
    module: &Arc<CudaModule>,
    names: [String; 3],
    smem: Option<u32>,
) -> Result<[CudaFunction; 3], CudaError> {
    let load = |name: String| match smem {
        Some(bytes) => function_with_shared_memory(module, &name, bytes),
        None => function(module, &name),
    };
    let [a, b, c] = names;
    Ok([load(a)?, load(b)?, load(c)?])
}

/// The instantiations `{prefix}_f32`, `{prefix}_f16`, `{prefix}_bf16` of a kernel, indexed
/// by [`float_index`](super::dtype::float_index).
pub fn per_float(
    module: &Arc<CudaModule>,
    prefix: &str,
    smem: Option<u32>,
) -> Result<[CudaFunction; 3], CudaError> {
    functions(module, FLOAT_NAMES.map(|s| format!("{prefix}_{s}")), smem)
}

/// A launch of `grid` blocks of `threads` threads with `smem` bytes of dynamic shared memory.
pub const fn grid(grid_dim: (u32, u32, u32), threads: u32, smem: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim,
        block_dim: (threads, 1, 1),
        shared_mem_bytes: smem,
    }
}

/// A launch of `grid` blocks of [`THREADS`] threads without dynamic shared memory.
pub const fn blocks(grid_dim: (u32, u32, u32)) -> LaunchConfig {
    grid(grid_dim, THREADS, 0)
}

/// A grid-stride launch over `count` elements, one per thread, at most 4096 blocks.
pub const fn elementwise(count: usize) -> LaunchConfig {
    let b = count.div_ceil(THREADS as usize);
    let b = if b < MAX_ELEMENTWISE_BLOCKS {
        b
    } else {
        MAX_ELEMENTWISE_BLOCKS
    };
    blocks((b as u32, 1, 1))
}

/// Launches the built arguments with `cfg`; a driver error names `what`.
///
/// # Safety
/// As for cudarc's `LaunchArgs::launch`: the arguments must match the kernel's parameters
/// and every address must cover what the kernel reads and writes for this launch.
pub unsafe fn launch(
    mut args: LaunchArgs<'_>,
    cfg: LaunchConfig,
    what: impl Display,
) -> Result<(), CudaError> {
    // SAFETY: the caller vouches for the arguments and the configuration.
    unsafe { args.launch(cfg) }
        .map(|_| ())
        .map_err(|e| CudaError::driver(format!("launching {what}"), e))
}

/// A kernel argument for [`launch_overlapped`]: the address of its value (which must
/// outlive the launch call; the driver copies the values when the launch is enqueued).
pub fn param<T>(value: &T) -> *mut c_void {
    (value as *const T).cast_mut().cast()
}

/// Launches `func` on `stream` with `cfg` and the kernel parameters `params`; when
/// `overlapped`, with programmatic stream serialization: its grid may start while the
/// kernel before it on the stream is still running, from the moment every block of that
/// kernel has executed `griddepcontrol.launch_dependents` (or exited), so its launch and
/// prologue overlap that kernel's tail. A driver error names `what`.
///
/// # Safety
/// `params` holds the address of every kernel parameter's value, in order and of the
/// parameter's type; every device address in them covers what the kernel reads and writes.
/// When `overlapped`, the kernel executes `griddepcontrol.wait` before it reads anything the
/// kernel before it on the stream writes, or writes anything that kernel reads or writes,
/// and the kernel before it must be one the caller enqueued on `stream` itself (a kernel it
/// knows), since what is read before the wait is only ordered after the kernels before that
/// one.
pub unsafe fn launch_params(
    stream: &CudaStream,
    func: &CudaFunction,
    cfg: LaunchConfig,
    params: &mut [*mut c_void],
    overlapped: bool,
    what: impl Display,
) -> Result<(), CudaError> {
    let err = |e| CudaError::driver(format!("launching {what} (overlapped {overlapped})"), e);
    stream.context().bind_to_thread().map_err(err)?;
    // SAFETY: plain old data; the attribute's value is the union's int member.
    let mut attr: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
    attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attr.value.programmaticStreamSerializationAllowed = 1;
    let config = sys::CUlaunchConfig {
        gridDimX: cfg.grid_dim.0,
        gridDimY: cfg.grid_dim.1,
        gridDimZ: cfg.grid_dim.2,
        blockDimX: cfg.block_dim.0,
        blockDimY: cfg.block_dim.1,
        blockDimZ: cfg.block_dim.2,
        sharedMemBytes: cfg.shared_mem_bytes,
        hStream: stream.cu_stream(),
        attrs: &mut attr,
        numAttrs: u32::from(overlapped),
    };
    // SAFETY: the config and the attribute live across the call; the caller vouches for the
    // parameters and the kernel's waits.
    unsafe {
        sys::cuLaunchKernelEx(
            &config,
            func.cu_function(),
            params.as_mut_ptr(),
            std::ptr::null_mut(),
        )
    }
    .result()
    .map_err(err)
}
