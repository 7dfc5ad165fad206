//! `numerics` is `Layer` or `W8A16`, not a string.
use fp8_linear::{fp8_kernel, BuildCtx, KernelError};

#[fp8_kernel(platform = Cpu, priority = 1, numerics = "W8A16")]
pub struct K;

impl K {
    pub fn new(_ctx: &BuildCtx<'_>) -> Result<Self, KernelError> {
        Ok(K)
    }
}

fp8_linear_tests::inert_kernel_impl!(K);

fn main() {}
