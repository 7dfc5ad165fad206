//! A table listing a kernel for rows the kernel does not serve: an error at the braces.
use fp8_linear::{fp8_kernel, fp8_table, BuildCtx, KernelError};

#[fp8_kernel(platform = Cpu, priority = 1, rows = 1..=16)]
pub struct K;

impl K {
    pub fn new(_ctx: &BuildCtx<'_>) -> Result<Self, KernelError> {
        Ok(K)
    }
}

fp8_linear_tests::inert_kernel_impl!(K);

fp8_table! {
    pub MY_TABLE: Cpu, BlockScaled = [K { rows = 8.. } => 1];
}

fn main() {}
