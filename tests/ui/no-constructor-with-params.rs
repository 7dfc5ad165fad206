//! A kernel with `params` but without `new`: the message names `LayerParams<2>`.
use fp8_linear::fp8_kernel;

#[fp8_kernel(platform = Cpu, priority = 1, params = [weight, bias])]
pub struct K;

fp8_linear_tests::inert_kernel_impl!(K);

fn main() {}
