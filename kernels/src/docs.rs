//! The documentation pages of the crate's `docs/` folder (`kernels/docs/` in the repository,
//! packaged with the crate), carried in the rustdoc so that the API documentation alone says
//! everything a user or a kernel author needs. Their code examples are compiled and run as
//! doctests.

#[doc = include_str!("../docs/design.md")]
pub mod design {}

#[doc = include_str!("../docs/writing-kernels.md")]
#[doc = ""]
#[doc = "```rust"]
#[doc = include_str!("../examples/custom_cpu_kernel.rs")]
#[doc = "```"]
pub mod writing_kernels {}

#[doc = include_str!("../docs/numerics.md")]
pub mod numerics {}

#[doc = include_str!("../docs/gpu-host.md")]
pub mod gpu_host {}
