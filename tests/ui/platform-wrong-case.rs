//! Platform names are case-sensitive; the message suggests the right one.
use fp8_linear::{fp8_kernel, BuildCtx, KernelError};

#[fp8_kernel(platform = cuda, priority = 1, arch = sm80..)]
pub struct K;

impl K {
    pub fn new(_ctx: &BuildCtx<'_>) -> Result<Self, KernelError> {
        Ok(K)
    }
}

fp8_linear_tests::inert_kernel_impl!(K);

fn main() {}
