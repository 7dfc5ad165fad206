//! `params` entries are names, not strings.
use fp8_linear::{fp8_kernel, BuildCtx, KernelError, LayerParams};

#[fp8_kernel(platform = Cpu, priority = 1, params = ["weight"])]
pub struct K;

impl K {
    pub fn new(_ctx: &BuildCtx<'_>, _params: LayerParams<1>) -> Result<Self, KernelError> {
        Ok(K)
    }
}

fp8_linear_tests::inert_kernel_impl!(K);

fn main() {}
