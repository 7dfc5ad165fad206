//! Two kernels with the same priority in one table: rejected at compile time.
use fp8_linear::{fp8_kernel, fp8_table, BuildCtx, KernelError};

#[fp8_kernel(platform = Cpu, priority = 1)]
pub struct A;

impl A {
    pub fn new(_ctx: &BuildCtx<'_>) -> Result<Self, KernelError> {
        Ok(A)
    }
}

fp8_linear_tests::inert_kernel_impl!(A);

#[fp8_kernel(platform = Cpu, priority = 1)]
pub struct B;

impl B {
    pub fn new(_ctx: &BuildCtx<'_>) -> Result<Self, KernelError> {
        Ok(B)
    }
}

fp8_linear_tests::inert_kernel_impl!(B);

fp8_table! {
    pub MY_TABLE: Cpu, BlockScaled = [A, B];
}

fn main() {}
