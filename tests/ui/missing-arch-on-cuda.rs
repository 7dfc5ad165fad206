//! A Cuda kernel must say which compute capabilities its code runs on.
use fp8_linear::{fp8_kernel, BuildCtx, KernelError};

#[fp8_kernel(platform = Cuda, priority = 5)]
pub struct TritonLike;

impl TritonLike {
    pub fn new(_ctx: &BuildCtx<'_>) -> Result<Self, KernelError> {
        Ok(TritonLike)
    }
}

fp8_linear_tests::inert_kernel_impl!(TritonLike);

fn main() {}
