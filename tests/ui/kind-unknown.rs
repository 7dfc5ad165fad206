//! `kind` is `Linear` or `Grouped`: a misspelled kind names both.
use fp8_linear::{fp8_kernel, BuildCtx, KernelError};

#[fp8_kernel(platform = Cpu, priority = 1, kind = Groupd)]
pub struct K;

impl K {
    pub fn new(_ctx: &BuildCtx<'_>) -> Result<Self, KernelError> {
        Ok(K)
    }
}

fp8_linear_tests::inert_grouped_kernel_impl!(K);

fn main() {}
