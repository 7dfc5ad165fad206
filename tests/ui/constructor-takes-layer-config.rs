//! The constructor of the old API (`&LayerConfig`): not a kernel constructor any more.
use fp8_linear::{fp8_kernel, KernelError, LayerConfig};

#[fp8_kernel(platform = Cpu, priority = 1)]
pub struct K;

impl K {
    pub fn new(_config: &LayerConfig) -> Result<Self, KernelError> {
        Ok(K)
    }
}

fp8_linear_tests::inert_kernel_impl!(K);

fn main() {}
