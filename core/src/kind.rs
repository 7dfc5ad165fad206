//! The kind of layer a kernel computes: one linear layer, or a group of experts.

use std::fmt;

/// What a kernel computes, declared with `kind = ...` in `#[fp8_kernel]` (default
/// `Linear`): a kernel of one kind sits only in tables of that kind, and is built only for
/// layers of that kind.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum LayerKind {
    /// One linear layer `out[M, N] = x[M, K] @ W[N, K]^T` ([`Fp8Kernel`](crate::Fp8Kernel)).
    Linear,
    /// E experts of one shape, each its own FP8 linear layer, applied to the rows routed to
    /// it (a mixture-of-experts projection, [`Fp8GroupedKernel`](crate::Fp8GroupedKernel)).
    Grouped,
}

impl LayerKind {
    /// Lower-case name for messages, the CLI and JSON.
    pub const fn name(self) -> &'static str {
        match self {
            LayerKind::Linear => "linear",
            LayerKind::Grouped => "grouped",
        }
    }

    /// `self == other`, usable in `const fn`.
    pub const fn same(self, other: LayerKind) -> bool {
        self as u8 == other as u8
    }
}

impl fmt::Display for LayerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
