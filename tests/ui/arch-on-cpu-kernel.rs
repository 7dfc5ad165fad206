//! CPU devices have no compute capability: a Cpu kernel with an `arch` would never be selected.
use fp8_linear::{fp8_kernel, BuildCtx, KernelError};

#[fp8_kernel(platform = Cpu, priority = 1, arch = sm80..)]
pub struct K;

impl K {
    pub fn new(_ctx: &BuildCtx<'_>) -> Result<Self, KernelError> {
        Ok(K)
    }
}

fp8_linear_tests::inert_kernel_impl!(K);

fn main() {}
