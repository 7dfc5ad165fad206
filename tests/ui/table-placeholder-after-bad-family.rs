//! A table whose declaration has an error still exists (empty), so its uses add no
//! "cannot find value" errors: the declaration's error is the only one.
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
    pub MY_TABLE: Cpu, Blocky = [K];
}

fn main() {
    assert!(MY_TABLE.entries.is_empty());
    let _ = MY_TABLE.entry("K");
}
