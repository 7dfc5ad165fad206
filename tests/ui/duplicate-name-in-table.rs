//! A kernel listed twice in one table.
use fp8_linear::{fp8_kernel, fp8_table, BuildCtx, KernelError};

#[fp8_kernel(platform = Cpu, priority = 1)]
pub struct A;

impl A {
    pub fn new(_ctx: &BuildCtx<'_>) -> Result<Self, KernelError> {
        Ok(A)
    }
}

fp8_linear_tests::inert_kernel_impl!(A);

fp8_table! {
    pub MY_TABLE: Cpu, BlockScaled = [A, A => 2];
}

fn main() {}
