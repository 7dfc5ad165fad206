//! A grouped table that extends a linear one.
use fp8_linear::{fp8_kernel, fp8_table, BuildCtx, KernelError};

#[fp8_kernel(platform = Cpu, priority = 1, kind = Grouped)]
pub struct G;

impl G {
    pub fn new(_ctx: &BuildCtx<'_>) -> Result<Self, KernelError> {
        Ok(G)
    }
}

fp8_linear_tests::inert_grouped_kernel_impl!(G);

fp8_table! {
    pub MY_TABLE: Cpu, BlockScaled, Grouped = fp8_linear::tables::CPU_BLOCK + [G];
}

fn main() {}
