//! A hand-built base table with a kernel of priority 0: the extending table reports it, naming
//! the base.
use fp8_linear::{
    fp8_kernel, fp8_table, BuildCtx, Family, KernelEntry, KernelError, LayerKind, Platform, Registered, Table,
};

#[fp8_kernel(platform = Cpu, priority = 1)]
pub struct K;

impl K {
    pub fn new(_ctx: &BuildCtx<'_>) -> Result<Self, KernelError> {
        Ok(K)
    }
}

fp8_linear_tests::inert_kernel_impl!(K);

#[fp8_kernel(platform = Cpu, priority = 2)]
pub struct J;

impl J {
    pub fn new(_ctx: &BuildCtx<'_>) -> Result<Self, KernelError> {
        Ok(J)
    }
}

fp8_linear_tests::inert_kernel_impl!(J);

/// A table built by hand, not by `fp8_table!` (which would refuse it).
const HAND_MADE_ENTRIES: [KernelEntry; 2] = [<K as Registered>::ENTRY.with_priority(0), J::ENTRY];
const HAND_MADE: Table = Table {
    name: "HAND_MADE",
    platform: Platform::Cpu,
    family: Family::BlockScaled,
    kind: LayerKind::Linear,
    entries: &HAND_MADE_ENTRIES,
};

fp8_table! {
    pub MY_TABLE: Cpu, BlockScaled = HAND_MADE + [];
}

fn main() {}
