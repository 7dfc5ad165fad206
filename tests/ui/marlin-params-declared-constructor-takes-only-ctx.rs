//! The seed bug: a kernel declared with four layer params whose constructor takes only the
//! build context. Upstream this was a TypeError at model load; here it does not compile, and
//! the message names the arity (`LayerParams<4>`) and the signature to write.
use fp8_linear::{fp8_kernel, BuildCtx, KernelError};

#[fp8_kernel(platform = Cuda, priority = 4, arch = sm75..sm89,
             params = [weight, weight_scale, input_scale, input_scale_ub])]
pub struct MarlinFp8;

impl MarlinFp8 {
    pub fn new(_ctx: &BuildCtx<'_>) -> Result<Self, KernelError> {
        Ok(MarlinFp8)
    }
}

fp8_linear_tests::inert_kernel_impl!(MarlinFp8);

fn main() {}
