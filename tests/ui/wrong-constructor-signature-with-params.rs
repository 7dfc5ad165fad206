//! A kernel with `params` whose `new` has another shape (the old `&LayerConfig` first
//! argument): the message says what to write.
use fp8_linear::{fp8_kernel, KernelError, LayerConfig, LayerParams};

#[fp8_kernel(platform = Cpu, priority = 1, params = [weight])]
pub struct K;

impl K {
    pub fn new(_config: &LayerConfig, _params: LayerParams<1>) -> Result<Self, KernelError> {
        Ok(K)
    }
}

fp8_linear_tests::inert_kernel_impl!(K);

fn main() {}
