//! A Cuda kernel in a Cpu table.
use fp8_linear::{fp8_kernel, fp8_table, BuildCtx, KernelError};

#[fp8_kernel(platform = Cuda, priority = 1, arch = sm89..)]
pub struct GpuOnly;

impl GpuOnly {
    pub fn new(_ctx: &BuildCtx<'_>) -> Result<Self, KernelError> {
        Ok(GpuOnly)
    }
}

fp8_linear_tests::inert_kernel_impl!(GpuOnly);

fp8_table! {
    pub MY_TABLE: Cpu, BlockScaled = [GpuOnly];
}

fn main() {}
