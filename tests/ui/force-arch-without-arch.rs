//! `force_arch` widens `arch`; a Cuda kernel with `force_arch` but no `arch` gets one error, about `arch`.
use fp8_linear::{fp8_kernel, BuildCtx, KernelError};

#[fp8_kernel(platform = Cuda, priority = 1, force_arch = sm80..)]
pub struct K;

impl K {
    pub fn new(_ctx: &BuildCtx<'_>) -> Result<Self, KernelError> {
        Ok(K)
    }
}

fp8_linear_tests::inert_kernel_impl!(K);

fn main() {}
