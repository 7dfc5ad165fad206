//! A declaration that does not parse still defines its table (empty), and the other
//! declarations of the invocation are kept: the parse error is the only error.
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
    pub BROKEN: Cpu, BlockScaled = [K => first];
    pub FINE: Cpu, Scaled = [K];
}

fn main() {
    assert!(BROKEN.entries.is_empty());
    assert_eq!(FINE.entries.len(), 1);
}
