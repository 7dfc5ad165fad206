//! An extension whose kernel takes the priority of a kernel of the base table: an error at
//! the entry, naming the base table.
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
    pub MY_TABLE: Cpu, BlockScaled = fp8_linear::tables::CPU_BLOCK + [K => 10];
}

fn main() {}
