//! A kernel without `new`: the message says what to add.
use fp8_linear::fp8_kernel;

#[fp8_kernel(platform = Cpu, priority = 1)]
pub struct K;

fp8_linear_tests::inert_kernel_impl!(K);

fn main() {}
