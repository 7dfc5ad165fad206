//! `rows =` with nothing after it in a table: an error at the `=`.
use fp8_linear::{fp8_kernel, fp8_table, BuildCtx, KernelError};

#[fp8_kernel(platform = Cpu, priority = 1)]
pub struct K;

impl K {
    pub fn new(_ctx: &BuildCtx<'_>) -> Result<Self, KernelError> {
        Ok(K)
    }
}

fp8_linear_tests::inert_kernel_impl!(K);

fp8_table! {
    pub MY_TABLE: Cpu, BlockScaled = [K { rows = } => 1, K => 2];
}

fn main() {}
