//! A hand-built grouped base table holding a linear kernel: the extending table reports it,
//! naming the base.
use fp8_linear::{
    fp8_kernel, fp8_table, BuildCtx, Family, KernelEntry, KernelError, LayerKind, Platform,
    Registered, Table,
};

#[fp8_kernel(platform = Cpu, priority = 1)]
pub struct K;

impl K {
    pub fn new(_ctx: &BuildCtx<'_>) -> Result<Self, KernelError> {
        Ok(K)
    }
}

fp8_linear_tests::inert_kernel_impl!(K);

/// A table built by hand, not by `fp8_table!` (which would refuse it).
const HAND_MADE_ENTRIES: [KernelEntry; 1] = [<K as Registered>::ENTRY];
const HAND_MADE: Table = Table {
    name: "HAND_MADE",
    platform: Platform::Cpu,
    family: Family::BlockScaled,
    kind: LayerKind::Grouped,
    entries: &HAND_MADE_ENTRIES,
};

fp8_table! {
    pub MY_TABLE: Cpu, BlockScaled, Grouped = HAND_MADE + [];
}

fn main() {}
