//! [`Plan`]: a layer's kernel per range of M, made once from a table (in priority order),
//! the overrides and the autotune file's per-bucket winners. The best kernel for a layer
//! depends on M, which is known only at call time: a plan says which kernel each M runs, so
//! a call looks its M up (no allocation, no lock) instead of one kernel choosing another.

use crate::config::LayerConfig;
use crate::device::Device;
use crate::entry::KernelEntry;
use crate::options::Overrides;
use crate::rows::RowRange;
use crate::select::{no_kernel, Choice, SelectError, Tuned, Verdict};
use crate::table::Table;

/// One range of a plan: the rows, the kernel that runs them and why it was chosen.
#[derive(Copy, Clone, Debug)]
pub struct PlanRange {
    /// The calls' row counts.
    pub rows: RowRange,
    /// The kernel.
    pub entry: &'static KernelEntry,
    /// Forced, measured (autotune) or the table order.
    pub choice: Choice,
}

/// A layer's kernel per range of M: contiguous ranges from M = 1 without an upper bound,
/// each with one kernel, neighbours with different kernels.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The ranges, by increasing M.
    pub ranges: Vec<PlanRange>,
    /// When a kernel was forced but cannot run the layer: its name and the reason (the plan
    /// then follows the table order).
    pub force_rejected: Option<(&'static str, Verdict)>,
}

impl Plan {
    /// The range that holds `m` rows (none for `m` = 0). Allocation-free.
    pub fn range_for(&self, m: usize) -> Option<&PlanRange> {
        self.ranges.iter().find(|r| r.rows.contains(m))
    }

    /// The kernel a call of `m` rows runs (none for `m` = 0).
    pub fn entry_for(&self, m: usize) -> Option<&'static KernelEntry> {
        self.range_for(m).map(|r| r.entry)
    }

    /// The plan's distinct kernels, in the order of their first range.
    pub fn kernels(&self) -> Vec<&'static KernelEntry> {
        let mut out: Vec<&'static KernelEntry> = Vec::new();
        for r in &self.ranges {
            if !out.iter().any(|e| e.name == r.entry.name) {
                out.push(r.entry);
            }
        }
        out
    }

    /// A plan of one kernel for the rows it serves (no selection: for a kernel built by
    /// name).
    pub fn single(entry: &'static KernelEntry) -> Plan {
        Plan {
            ranges: vec![PlanRange {
                rows: entry.rows,
                entry,
                choice: Choice::Forced,
            }],
            force_rejected: None,
        }
    }
}

impl std::fmt::Display for Plan {
    /// `M = 1..=64: HopperBlockFp8; M = 65..: CublasLtBlockFp8`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, r) in self.ranges.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "M = {}: {}", r.rows, r.entry.name)?;
            match r.choice {
                Choice::Forced => f.write_str(" (forced)")?,
                Choice::Tuned => f.write_str(" (measured)")?,
                Choice::Table => {}
            }
        }
        Ok(())
    }
}

/// The row counts where the choice can change: M = 1, each kernel's first row and the row
/// after its last, and each measured bucket's bounds (bucket B holds M in B/2+1..=B).
fn breakpoints(table: &Table, config: &LayerConfig, tuned: Option<Tuned<'_>>) -> Vec<usize> {
    let mut at = vec![1];
    for e in table.entries {
        at.push(e.rows.first());
        if !e.rows.is_unbounded() {
            at.push(e.rows.last() + 1);
        }
    }
    if let Some(t) = tuned {
        for w in t.file.winners().iter().filter(|w| {
            w.device == t.device_key
                && w.family == config.family()
                && w.n == config.n
                && w.k == config.k
        }) {
            at.push(w.m_bucket / 2 + 1);
            at.push(w.m_bucket.saturating_add(1));
        }
    }
    at.sort_unstable();
    at.dedup();
    at
}

impl Table {
    /// The layer's kernel per range of M, walked from this table in priority order for
    /// each range: a forced kernel (overrides) takes every M it serves; then the kernels in
    /// priority order, each where its `rows` hold the call's M and it can run the layer on
    /// the device. Disabled kernels and the backend filter act on every range. An error
    /// when some M has no kernel (naming those rows and every candidate's reason).
    pub fn plan(
        &'static self,
        device: &Device,
        config: &LayerConfig,
        ov: &Overrides,
    ) -> Result<Plan, SelectError> {
        self.plan_with(device, config, None, ov)
    }

    /// Like [`Table::plan`], with the autotune file's measured winner first in each M bucket
    /// it has for this device and layer (where that kernel serves the rows and can run the
    /// layer); a forced kernel still goes before a measurement.
    pub fn plan_tuned(
        &'static self,
        device: &Device,
        config: &LayerConfig,
        tuned: Tuned<'_>,
        ov: &Overrides,
    ) -> Result<Plan, SelectError> {
        self.plan_with(device, config, Some(tuned), ov)
    }

    pub(crate) fn plan_with(
        &'static self,
        device: &Device,
        config: &LayerConfig,
        tuned: Option<Tuned<'_>>,
        ov: &Overrides,
    ) -> Result<Plan, SelectError> {
        let (forced, force_rejected) = match self.forced(device, config, ov) {
            Ok(f) => (f, None),
            Err(r) => (None, Some(r)),
        };
        if forced.is_none() && ov.backend.is_some() {
            crate::select::check_backend(self, ov)?;
        }
        let at = breakpoints(self, config, tuned);
        let mut ranges: Vec<PlanRange> = Vec::new();
        for (i, &first) in at.iter().enumerate() {
            let last = at.get(i + 1).map_or(usize::MAX, |next| next - 1);
            let rows = RowRange::new(first, last);
            let Some((entry, choice)) = self.choose(device, config, first, forced, tuned, ov)
            else {
                return Err(self.gap(device, config, ov, &at[i..]));
            };
            match ranges.last_mut() {
                Some(r) if r.entry.name == entry.name && r.choice == choice => {
                    r.rows = RowRange::new(r.rows.first(), last)
                }
                _ => ranges.push(PlanRange {
                    rows,
                    entry,
                    choice,
                }),
            }
        }
        Ok(Plan {
            ranges,
            force_rejected,
        })
    }

    /// The error for rows from `at[0]` on that no kernel serves: the whole run of segments
    /// without a kernel, with every candidate's reason at its first M.
    fn gap(
        &'static self,
        device: &Device,
        config: &LayerConfig,
        ov: &Overrides,
        at: &[usize],
    ) -> SelectError {
        let first = at[0];
        let served = |m: usize| {
            self.entries
                .iter()
                .any(|e| e.rows.contains(m) && crate::select::judge(e, device, config, ov).is_ok())
        };
        // The gap ends where a later segment has a kernel again.
        let last = at[1..]
            .iter()
            .find(|&&m| served(m))
            .map_or(usize::MAX, |m| m - 1);
        let e = no_kernel(self, device, config, first, ov);
        if first == 1 && last == usize::MAX {
            return e;
        }
        SelectError::NoKernelForRows {
            rows: RowRange::new(first, last),
            reasons: Box::new(e),
        }
    }
}
