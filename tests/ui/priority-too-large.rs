//! Priorities are u16.
use fp8_linear::{fp8_kernel, BuildCtx, KernelError};

#[fp8_kernel(platform = Cpu, priority = 70000)]
pub struct K;

impl K {
    pub fn new(_ctx: &BuildCtx<'_>) -> Result<Self, KernelError> {
        Ok(K)
    }
}

fp8_linear_tests::inert_kernel_impl!(K);

fn main() {}
