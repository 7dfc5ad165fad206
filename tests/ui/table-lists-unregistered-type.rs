//! A table may only list types registered with #[fp8_kernel].
use fp8_linear::fp8_table;

pub struct NotAKernel;

fp8_table! {
    pub MY_TABLE: Cpu, BlockScaled = [NotAKernel];
}

fn main() {}
