//! Selection: walk a table in priority order, return the first kernel whose platform and
//! arch match the device, whose rows hold the call's M and whose config check accepts the
//! layer. [`Table::plan`] gives a layer its kernel per range of M (the [`Plan`] a
//! `Linear` runs); [`Table::select_m`] picks for one M and [`Table::select`] for calls of
//! many rows; `explain` returns every verdict; the `_tuned` forms put a measured winner
//! first.

use std::fmt;

use crate::arch::{ArchSpec, Capability};
use crate::config::LayerConfig;
use crate::device::Device;
use crate::entry::KernelEntry;
use crate::error::Unsupported;
use crate::options::{OverrideSource, Overrides, ENV_DISABLE};
use crate::plan::Plan;
use crate::platform::Platform;
use crate::rows::RowRange;
use crate::table::{Registry, Table};
use crate::tuning::TuningFile;

/// The verdict on one candidate kernel.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The kernel selection returns.
    Chosen,
    /// It could run the layer, but a kernel before it was chosen.
    Eligible,
    /// Disabled by name.
    Disabled(OverrideSource),
    /// Not of the backend family selection was restricted to.
    OtherBackend,
    /// A kernel of another platform than the device's.
    PlatformMismatch {
        /// The kernel's platform.
        kernel: Platform,
        /// The device's platform.
        device: Platform,
    },
    /// Its code cannot run on the device's compute capability.
    ArchMismatch {
        /// What the kernel declares.
        arch: ArchSpec,
        /// What the device has.
        device: Option<Capability>,
    },
    /// It rejects the layer config.
    Unsupported(Unsupported),
    /// It can run the layer, but not a call of this many rows: it serves these rows only.
    OtherRows(RowRange),
}

impl Verdict {
    /// Whether the kernel could run the layer.
    pub fn runnable(&self) -> bool {
        matches!(self, Verdict::Chosen | Verdict::Eligible)
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::Chosen => f.write_str("chosen"),
            Verdict::Eligible => f.write_str("can run it, but a higher-priority kernel was chosen"),
            Verdict::Disabled(OverrideSource::Env) => {
                write!(f, "is disabled by environment variable {ENV_DISABLE}")
            }
            Verdict::Disabled(OverrideSource::Api) => f.write_str("is disabled by override"),
            Verdict::OtherBackend => f.write_str("is not of the requested backend family"),
            Verdict::PlatformMismatch { kernel, device } => {
                write!(f, "is a {kernel} kernel; the device is a {device} device")
            }
            Verdict::ArchMismatch { arch, device } => match device {
                Some(c) => write!(
                    f,
                    "requires compute capability {arch}; the device has {c} (sm_{}{})",
                    c.major, c.minor
                ),
                None => write!(f, "requires compute capability {arch}; the device has none"),
            },
            Verdict::Unsupported(u) => write!(f, "cannot implement this layer: {u}"),
            Verdict::OtherRows(r) => write!(f, "serves only M = {r}"),
        }
    }
}

/// What `select` returns: the chosen kernel and, when a forced kernel could not run, why.
#[derive(Copy, Clone, Debug)]
pub struct Selected<'t> {
    /// The chosen kernel.
    pub entry: &'t KernelEntry,
    /// When a kernel was forced but could not run: its name and the reason (selection then
    /// fell back to the normal walk).
    pub force_rejected: Option<(&'t str, Verdict)>,
}

/// Why no kernel could be selected.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum SelectError {
    /// The registry has no table for the device's platform and the layer's family.
    #[error("no {family} kernel table for platform {platform} (device {device}); layer {config}")]
    NoTable {
        /// Platform of the device.
        platform: String,
        /// Family of the layer.
        family: String,
        /// The device.
        device: String,
        /// The layer.
        config: String,
    },
    /// The backend filter leaves no kernel in the table.
    #[error(
        "no kernel of backend family `{backend}` in table {table} (backends there: {available})"
    )]
    NoSuchBackend {
        /// Requested backend.
        backend: String,
        /// The table.
        table: &'static str,
        /// Backends the table has.
        available: String,
    },
    /// Some row counts have no kernel: the table's kernels that run the layer serve only
    /// other M. `reasons` is the [`SelectError::NoKernel`] of the first M of `rows` (every
    /// candidate's verdict there).
    #[error("no kernel serves M = {rows}: {reasons}")]
    NoKernelForRows {
        /// The rows without a kernel.
        rows: RowRange,
        /// Every candidate's reason at the first M of `rows`.
        reasons: Box<SelectError>,
    },
    /// Every candidate was rejected.
    #[error("{}", format_no_kernel(.table, .device, .config, .reasons))]
    NoKernel {
        /// The table walked.
        table: &'static str,
        /// The device.
        device: String,
        /// The layer.
        config: String,
        /// One `(kernel, reason)` per candidate, in table order.
        reasons: Vec<(&'static str, String)>,
    },
}

fn format_no_kernel(
    table: &str,
    device: &str,
    config: &str,
    reasons: &[(&'static str, String)],
) -> String {
    let mut s = format!(
        "Failed to find a kernel that can implement the FP8 linear layer ({config}) on {device} \
         (table {table}). Reasons:"
    );
    if reasons.is_empty() {
        s.push_str("\n  (the table is empty)");
    }
    for (name, r) in reasons {
        s.push_str(&format!("\n  {name} {r}."));
    }
    s
}

fn arch_ok(arch: ArchSpec, device: &Device) -> Result<(), Verdict> {
    if arch.matches(device.capability) {
        Ok(())
    } else {
        Err(Verdict::ArchMismatch {
            arch,
            device: device.capability,
        })
    }
}

/// The verdict for one entry, ignoring the force override. `Ok` means it can run.
pub(crate) fn judge(
    e: &KernelEntry,
    device: &Device,
    config: &LayerConfig,
    ov: &Overrides,
) -> Result<(), Verdict> {
    if let Some(src) = ov.disabled_by(e.name) {
        return Err(Verdict::Disabled(src));
    }
    if let Some((b, _)) = &ov.backend {
        if !b.eq_ignore_ascii_case(e.backend) {
            return Err(Verdict::OtherBackend);
        }
    }
    if !e.platform.same(device.platform) {
        return Err(Verdict::PlatformMismatch {
            kernel: e.platform,
            device: device.platform,
        });
    }
    arch_ok(e.arch, device)?;
    (e.can_implement)(config).map_err(Verdict::Unsupported)
}

/// Verdict for a forced entry: like `judge`, but a kernel's `force_arch` widens its arch.
fn judge_forced(
    e: &KernelEntry,
    device: &Device,
    config: &LayerConfig,
    ov: &Overrides,
) -> Result<(), Verdict> {
    match judge(e, device, config, ov) {
        Err(Verdict::ArchMismatch { .. }) if e.force_arch.is_some() => {
            arch_ok(e.force_arch.unwrap_or(e.arch), device)?;
            (e.can_implement)(config).map_err(Verdict::Unsupported)
        }
        other => other,
    }
}

pub(crate) fn check_backend(table: &Table, ov: &Overrides) -> Result<(), SelectError> {
    if let Some((b, _)) = &ov.backend {
        if !table
            .entries
            .iter()
            .any(|e| e.backend.eq_ignore_ascii_case(b))
        {
            let mut avail: Vec<&str> = table.entries.iter().map(|e| e.backend).collect();
            avail.dedup();
            return Err(SelectError::NoSuchBackend {
                backend: b.clone(),
                table: table.name,
                available: avail.join(", "),
            });
        }
    }
    Ok(())
}

/// A measured autotune file and the key of the device in it
/// ([`tuning::device_key`](crate::tuning::device_key), computed once by the caller so that
/// selection stays allocation-free): its per-M-bucket winners go before the table order.
#[derive(Copy, Clone, Debug)]
pub struct Tuned<'a> {
    /// The device's key in the file.
    pub device_key: &'a str,
    /// The file.
    pub file: &'a TuningFile,
}

/// Why a kernel was chosen for a range of M.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Choice {
    /// Forced by name (API or environment).
    Forced,
    /// The autotune file's measured winner for the M bucket.
    Tuned,
    /// The first kernel in table order that serves the rows and can run the layer.
    Table,
}

impl Table {
    /// The forced kernel, when the overrides force one of this table's kernels and it can
    /// run the layer here (`Ok(Some)`); `Err` with its name and reason when it cannot.
    pub(crate) fn forced(
        &'static self,
        device: &Device,
        config: &LayerConfig,
        ov: &Overrides,
    ) -> Result<Option<&'static KernelEntry>, (&'static str, Verdict)> {
        let Some(e) = ov.force.as_ref().and_then(|(name, _)| self.entry(name)) else {
            return Ok(None);
        };
        match judge_forced(e, device, config, ov) {
            Ok(()) => Ok(Some(e)),
            Err(v) => Err((e.name, v)),
        }
    }

    /// The kernel for a call of `m` rows: the forced kernel (`forced`) where it serves `m`,
    /// else the tuning file's winner for `m`'s bucket where it serves `m` and can run the
    /// layer, else the first kernel in table order that serves `m` and can run the layer.
    /// Allocation-free.
    pub(crate) fn choose(
        &'static self,
        device: &Device,
        config: &LayerConfig,
        m: usize,
        forced: Option<&'static KernelEntry>,
        tuned: Option<Tuned<'_>>,
        ov: &Overrides,
    ) -> Option<(&'static KernelEntry, Choice)> {
        if let Some(e) = forced.filter(|e| e.rows.contains(m)) {
            return Some((e, Choice::Forced));
        }
        if let Some(t) = tuned.filter(|_| ov.force.is_none()) {
            if let Some(w) = t.file.winner(t.device_key, config, m) {
                let listing = |e: &&KernelEntry| e.name == w.kernel && e.rows.contains(m);
                if let Some(e) = self.entries.iter().find(listing) {
                    if judge(e, device, config, ov).is_ok() {
                        return Some((e, Choice::Tuned));
                    }
                }
            }
        }
        self.entries
            .iter()
            .find(|e| e.rows.contains(m) && judge(e, device, config, ov).is_ok())
            .map(|e| (e, Choice::Table))
    }

    /// The kernel for a call of `m` rows (see [`Table::plan`] for what serves which M).
    /// Allocation-free on success.
    pub fn select_m(
        &'static self,
        device: &Device,
        config: &LayerConfig,
        m: usize,
        ov: &Overrides,
    ) -> Result<Selected<'static>, SelectError> {
        self.select_with(device, config, m, None, ov)
    }

    /// The kernel for calls of many rows (the last range of the layer's [`Plan`]: the
    /// kernel that serves M without an upper bound). For a kernel per M, see
    /// [`Table::plan`] and [`Table::select_m`]. Allocation-free on success.
    pub fn select(
        &'static self,
        device: &Device,
        config: &LayerConfig,
        ov: &Overrides,
    ) -> Result<Selected<'static>, SelectError> {
        self.select_m(device, config, usize::MAX, ov)
    }

    /// Like [`Table::select_m`], but a measured winner for this device, layer and M bucket
    /// (see [`TuningFile`]) comes first when it serves `m` and can run the layer; otherwise
    /// the static order. A forced kernel still wins over a measurement. `device_key` is
    /// [`tuning::device_key`](crate::tuning::device_key) of `device` (computed once by the
    /// caller, so this stays allocation-free).
    pub fn select_tuned(
        &'static self,
        device: &Device,
        device_key: &str,
        config: &LayerConfig,
        m: usize,
        tuning: &TuningFile,
        ov: &Overrides,
    ) -> Result<Selected<'static>, SelectError> {
        let tuned = Tuned {
            device_key,
            file: tuning,
        };
        self.select_with(device, config, m, Some(tuned), ov)
    }

    fn select_with(
        &'static self,
        device: &Device,
        config: &LayerConfig,
        m: usize,
        tuned: Option<Tuned<'_>>,
        ov: &Overrides,
    ) -> Result<Selected<'static>, SelectError> {
        let (forced, force_rejected) = match self.forced(device, config, ov) {
            Ok(f) => (f, None),
            Err(r) => (None, Some(r)),
        };
        if forced.is_none() && ov.backend.is_some() {
            check_backend(self, ov)?;
        }
        match self.choose(device, config, m, forced, tuned, ov) {
            Some((entry, _)) => Ok(Selected {
                entry,
                force_rejected,
            }),
            None => Err(no_kernel(self, device, config, m, ov)),
        }
    }

    /// Explains the decision for a layer: the verdict on every candidate in the table (a
    /// kernel of the plan is [`Verdict::Chosen`]) and the per-M plan.
    pub fn explain(
        &'static self,
        device: &Device,
        config: &LayerConfig,
        ov: &Overrides,
    ) -> Explanation {
        self.explain_with(device, config, None, ov)
    }

    /// Like [`Table::explain`], with an autotune file's winners in the plan.
    pub fn explain_tuned(
        &'static self,
        device: &Device,
        config: &LayerConfig,
        tuned: Tuned<'_>,
        ov: &Overrides,
    ) -> Explanation {
        self.explain_with(device, config, Some(tuned), ov)
    }

    fn explain_with(
        &'static self,
        device: &Device,
        config: &LayerConfig,
        tuned: Option<Tuned<'_>>,
        ov: &Overrides,
    ) -> Explanation {
        let table = self;
        let result = table.plan_with(device, config, tuned, ov);
        let in_plan = |e: &KernelEntry| {
            result.as_ref().is_ok_and(|p| {
                // The listing itself (a kernel may be listed for several row ranges).
                p.ranges
                    .iter()
                    .any(|r| r.entry.name == e.name && r.entry.rows == e.rows)
            })
        };
        let candidates = table
            .entries
            .iter()
            .map(|e| Candidate {
                entry: e,
                verdict: if in_plan(e) {
                    Verdict::Chosen
                } else {
                    match judge(e, device, config, ov) {
                        Ok(()) => Verdict::Eligible,
                        Err(v) => v,
                    }
                },
            })
            .collect();
        let (plan, error) = match result {
            Ok(p) => (Some(p), None),
            Err(e) => (None, Some(e)),
        };
        Explanation {
            table,
            candidates,
            plan,
            error,
        }
    }
}

/// Why no kernel serves a call of `m` rows: every candidate's verdict at `m`
/// ([`Verdict::OtherRows`] for a kernel that runs the layer but not at `m`).
pub(crate) fn no_kernel(
    table: &Table,
    device: &Device,
    config: &LayerConfig,
    m: usize,
    ov: &Overrides,
) -> SelectError {
    let reasons = table
        .entries
        .iter()
        .map(|e| {
            let v = match judge(e, device, config, ov) {
                Ok(()) if !e.rows.contains(m) => Verdict::OtherRows(e.rows),
                Ok(()) => Verdict::Eligible,
                Err(v) => v,
            };
            (e.name, v.to_string())
        })
        .collect();
    SelectError::NoKernel {
        table: table.name,
        device: device.to_string(),
        config: config.to_string(),
        reasons,
    }
}

impl Registry {
    /// The table for the device's platform and the layer's family, or
    /// [`SelectError::NoTable`].
    pub fn table_for(
        &self,
        device: &Device,
        config: &LayerConfig,
    ) -> Result<&'static Table, SelectError> {
        self.find(device.platform, config.family())
            .ok_or_else(|| SelectError::NoTable {
                platform: device.platform.to_string(),
                family: match self.kind() {
                    crate::kind::LayerKind::Linear => config.family().to_string(),
                    kind => format!("{kind} {}", config.family()),
                },
                device: device.to_string(),
                config: config.to_string(),
            })
    }

    /// Picks the table for the device's platform and the layer's family, then the kernel
    /// for calls of many rows (see [`Table::select`]).
    pub fn select(
        &self,
        device: &Device,
        config: &LayerConfig,
        ov: &Overrides,
    ) -> Result<Selected<'static>, SelectError> {
        self.table_for(device, config)?.select(device, config, ov)
    }

    /// Like [`Registry::select`] with a measured winner first (see [`Table::select_tuned`]).
    pub fn select_tuned(
        &self,
        device: &Device,
        device_key: &str,
        config: &LayerConfig,
        m: usize,
        tuning: &TuningFile,
        ov: &Overrides,
    ) -> Result<Selected<'static>, SelectError> {
        self.table_for(device, config)?
            .select_tuned(device, device_key, config, m, tuning, ov)
    }

    /// The per-M plan for a layer (see [`Table::plan`]).
    pub fn plan(
        &self,
        device: &Device,
        config: &LayerConfig,
        ov: &Overrides,
    ) -> Result<Plan, SelectError> {
        self.table_for(device, config)?.plan(device, config, ov)
    }

    /// The per-M plan with a tuning file's winners first (see [`Table::plan_tuned`]).
    pub fn plan_tuned(
        &self,
        device: &Device,
        config: &LayerConfig,
        tuned: Tuned<'_>,
        ov: &Overrides,
    ) -> Result<Plan, SelectError> {
        self.table_for(device, config)?
            .plan_tuned(device, config, tuned, ov)
    }

    /// Explains the decision of [`Registry::plan`]: every candidate with its verdict, and
    /// the plan.
    pub fn explain(
        &self,
        device: &Device,
        config: &LayerConfig,
        ov: &Overrides,
    ) -> Result<Explanation, SelectError> {
        Ok(self.table_for(device, config)?.explain(device, config, ov))
    }

    /// Like [`Registry::explain`], with a tuning file's winners in the plan.
    pub fn explain_tuned(
        &self,
        device: &Device,
        config: &LayerConfig,
        tuned: Tuned<'_>,
        ov: &Overrides,
    ) -> Result<Explanation, SelectError> {
        Ok(self
            .table_for(device, config)?
            .explain_tuned(device, config, tuned, ov))
    }

    /// The kernel for a call of `m` rows (see [`Table::select_m`]).
    pub fn select_m(
        &self,
        device: &Device,
        config: &LayerConfig,
        m: usize,
        ov: &Overrides,
    ) -> Result<Selected<'static>, SelectError> {
        self.table_for(device, config)?
            .select_m(device, config, m, ov)
    }
}

/// One row of an explanation.
#[derive(Clone, Debug)]
pub struct Candidate {
    /// The kernel.
    pub entry: &'static KernelEntry,
    /// Its verdict.
    pub verdict: Verdict,
}

/// The whole decision for one layer on one device: every candidate with its verdict.
#[derive(Clone, Debug)]
pub struct Explanation {
    /// The table walked.
    pub table: &'static Table,
    /// Every candidate in table order (the kernels of the plan are [`Verdict::Chosen`]).
    pub candidates: Vec<Candidate>,
    /// The per-M plan, when every M has a kernel.
    pub plan: Option<Plan>,
    /// The error [`Table::plan`] returns, when some M has no kernel.
    pub error: Option<SelectError>,
}

impl Explanation {
    /// A forced kernel that could not run, and why.
    pub fn force_rejected(&self) -> Option<(&'static str, Verdict)> {
        self.plan.as_ref().and_then(|p| p.force_rejected)
    }

    /// The kernel a call of `m` rows runs, if the plan has one.
    pub fn chosen_for(&self, m: usize) -> Option<&'static KernelEntry> {
        self.plan.as_ref().and_then(|p| p.entry_for(m))
    }
}
