//! A grouped kernel gets the same constructor checks as a linear one: params declared, `new`
//! takes only the build context.
use fp8_linear::{fp8_kernel, BuildCtx, KernelError};

#[fp8_kernel(platform = Cpu, priority = 1, kind = Grouped, params = [weight, weight_scale])]
pub struct G;

impl G {
    pub fn new(_ctx: &BuildCtx<'_>) -> Result<Self, KernelError> {
        Ok(G)
    }
}

fp8_linear_tests::inert_grouped_kernel_impl!(G);

fn main() {}
