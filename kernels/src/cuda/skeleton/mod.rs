//! The parts every CUDA kernel shares:
//! - `layer`: `GpuLayer` and the `Recipe` trait (check -> plan -> reserve -> enqueue);
//! - `block`: the block-scaled config checks, `BlockWeights` (a layer's weights on the
//!   device in one layout, shared by its kernels) and `BlockLayer` (weights + activation
//!   quantization in front of a GEMM);
//! - `weights`: weights on the device; `device_io`: tensors as device memory of the layer's
//!   GPU, row-count checks, downloads; `launch`: functions per output dtype, grids and
//!   launches with named errors; `lt_gemm`: the cuBLASLt kernels' checks and GEMM with its
//!   plans by M (`plans_by_m`, which the Hopper kernel's launch plans use too); `grouped`:
//!   what the grouped kernels share on the host (the stack as one layer, a call's checks,
//!   its routing's segments and their upload); `scratch`,
//!   `dtype`, `error` (the one CUDA-error-to-kernel-error conversion).

pub(crate) mod block;
pub(crate) mod device_io;
pub(crate) mod dtype;
pub(crate) mod error;
pub(crate) mod grouped;
pub(crate) mod launch;
pub(crate) mod layer;
pub(crate) mod lt_gemm;
pub(crate) mod plans_by_m;
pub(crate) mod scratch;
pub(crate) mod weights;
