//! Launch plumbing shared by the kernels: the functions of a module in the kernels' three
//! output dtypes, grid shapes, and a launch whose driver error names what was launched.

use std::fmt::Display;
use std::sync::Arc;

use fp8_linear_cuda::cudarc::driver::{CudaFunction, CudaModule, LaunchArgs, LaunchConfig};
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
