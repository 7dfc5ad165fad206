//! The reverse: the constructor takes four layer params, the attribute declares none.
use fp8_linear::{fp8_kernel, BuildCtx, KernelError, LayerParams};

#[fp8_kernel(platform = Cuda, priority = 4, arch = sm75..sm89)]
pub struct MarlinFp8;

impl MarlinFp8 {
    pub fn new(_ctx: &BuildCtx<'_>, _params: LayerParams<4>) -> Result<Self, KernelError> {
        Ok(MarlinFp8)
    }
}

fp8_linear_tests::inert_kernel_impl!(MarlinFp8);

fn main() {}
