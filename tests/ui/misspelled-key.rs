//! A misspelled key: one error, with the key it was probably meant to be (not also "needs `priority`").
use fp8_linear::{fp8_kernel, BuildCtx, KernelError};

#[fp8_kernel(platform = Cpu, priorty = 1)]
pub struct K;

impl K {
    pub fn new(_ctx: &BuildCtx<'_>) -> Result<Self, KernelError> {
        Ok(K)
    }
}

fp8_linear_tests::inert_kernel_impl!(K);

fn main() {}
