//! Selection: walk a table in priority order, return the first kernel whose platform and
//! arch match the device and whose config check accepts the layer. [`Table::select`] and
//! [`Registry::select`] pick; `explain` returns every verdict; `select_tuned` puts a
//! measured winner first.

use std::fmt;

use crate::arch::{ArchSpec, Capability};
use crate::config::LayerConfig;
use crate::device::Device;
use crate::entry::KernelEntry;
use crate::kernel::Unsupported;
use crate::platform::Platform;
use crate::table::{Registry, Table};
use crate::tuning::TuningFile;

/// Environment variable naming a kernel to force (first choice when it can run).
pub const ENV_FORCE: &str = "FP8_LINEAR_FORCE";
/// Environment variable with a comma-separated list of kernel names to disable.
pub const ENV_DISABLE: &str = "FP8_LINEAR_DISABLE";
/// Environment variable restricting selection to one backend family (`cublaslt`, `cpu`...).
pub const ENV_BACKEND: &str = "FP8_LINEAR_BACKEND";

/// Where an override came from.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum OverrideSource {
    /// Set through the API.
    Api,
    /// Read from an environment variable.
    Env,
}

/// User overrides of the static order. Build once (e.g. [`Overrides::from_env`]) and reuse:
/// `select` itself never reads the environment and never allocates on success.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Overrides {
    /// Kernel to try first, by name (case-insensitive).
    pub force: Option<(String, OverrideSource)>,
    /// Kernels never to pick, by name (case-insensitive).
    pub disabled: Vec<(String, OverrideSource)>,
    /// Only kernels of this backend family (`cpu`, `cublaslt`, `portable`, `marlin`...).
    pub backend: Option<(String, OverrideSource)>,
}

impl Overrides {
    /// No overrides.
    pub fn none() -> Self {
        Overrides::default()
    }

    /// Reads [`ENV_FORCE`], [`ENV_DISABLE`] and [`ENV_BACKEND`].
    pub fn from_env() -> Self {
        let mut o = Overrides::default();
        if let Ok(v) = std::env::var(ENV_FORCE) {
            if !v.trim().is_empty() {
                o.force = Some((v.trim().to_string(), OverrideSource::Env));
            }
        }
        if let Ok(v) = std::env::var(ENV_DISABLE) {
            o.disabled.extend(
                v.split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(|s| (s.to_string(), OverrideSource::Env)),
            );
        }
        if let Ok(v) = std::env::var(ENV_BACKEND) {
            if !v.trim().is_empty() {
                o.backend = Some((v.trim().to_string(), OverrideSource::Env));
            }
        }
        o
    }

    /// Forces a kernel by name.
    pub fn force(mut self, name: impl Into<String>) -> Self {
        self.force = Some((name.into(), OverrideSource::Api));
        self
    }

    /// Disables a kernel by name.
    pub fn disable(mut self, name: impl Into<String>) -> Self {
        self.disabled.push((name.into(), OverrideSource::Api));
        self
    }

    /// Restricts selection to one backend family.
    pub fn backend(mut self, backend: impl Into<String>) -> Self {
        self.backend = Some((backend.into(), OverrideSource::Api));
        self
    }

    fn disabled_by(&self, name: &str) -> Option<OverrideSource> {
        self.disabled
            .iter()
            .find(|(d, _)| d.eq_ignore_ascii_case(name))
            .map(|(_, s)| *s)
    }
}

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
fn judge(
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

fn check_backend(table: &Table, ov: &Overrides) -> Result<(), SelectError> {
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

impl Table {
    /// Picks the kernel for a layer from this table. Allocation-free on success.
    pub fn select(
        &'static self,
        device: &Device,
        config: &LayerConfig,
        ov: &Overrides,
    ) -> Result<Selected<'static>, SelectError> {
        let table = self;
        let mut force_rejected = None;
        if let Some((name, _)) = &ov.force {
            if let Some(e) = table.entry(name) {
                match judge_forced(e, device, config, ov) {
                    Ok(()) => {
                        return Ok(Selected {
                            entry: e,
                            force_rejected: None,
                        })
                    }
                    Err(v) => force_rejected = Some((e.name, v)),
                }
            }
        }
        if ov.backend.is_some() {
            check_backend(table, ov)?;
        }
        for e in table.entries {
            if judge(e, device, config, ov).is_ok() {
                return Ok(Selected {
                    entry: e,
                    force_rejected,
                });
            }
        }
        Err(no_kernel(table, device, config, ov))
    }

    /// Like [`Table::select`], but a measured winner for this device, layer and M bucket
    /// (see [`TuningFile`]) comes first when it can run the layer; otherwise the static
    /// order. A forced kernel still wins over a measurement. `device_key` is
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
        if ov.force.is_none() {
            if let Some(w) = tuning.winner(device_key, config, m) {
                if let Some(e) = self.entries.iter().find(|e| e.name == w.kernel) {
                    if judge(e, device, config, ov).is_ok() {
                        return Ok(Selected {
                            entry: e,
                            force_rejected: None,
                        });
                    }
                }
            }
        }
        self.select(device, config, ov)
    }

    /// Explains the decision for a layer: the verdict on every candidate in the table.
    pub fn explain(
        &'static self,
        device: &Device,
        config: &LayerConfig,
        ov: &Overrides,
    ) -> Explanation {
        let table = self;
        let result = table.select(device, config, ov);
        let chosen_name = result.as_ref().ok().map(|s| s.entry.name);
        let mut candidates = Vec::with_capacity(table.entries.len());
        let mut chosen = None;
        for (i, e) in table.entries.iter().enumerate() {
            let verdict = if Some(e.name) == chosen_name {
                chosen = Some(i);
                Verdict::Chosen
            } else {
                match judge(e, device, config, ov) {
                    Ok(()) => Verdict::Eligible,
                    Err(v) => v,
                }
            };
            candidates.push(Candidate { entry: e, verdict });
        }
        let (force_rejected, error) = match result {
            Ok(s) => (s.force_rejected, None),
            Err(e) => (None, Some(e)),
        };
        Explanation {
            table,
            candidates,
            chosen,
            force_rejected,
            error,
        }
    }
}

fn no_kernel(table: &Table, device: &Device, config: &LayerConfig, ov: &Overrides) -> SelectError {
    SelectError::NoKernel {
        table: table.name,
        device: device.to_string(),
        config: config.to_string(),
        reasons: table
            .entries
            .iter()
            .map(|e| {
                let v = judge(e, device, config, ov)
                    .err()
                    .unwrap_or(Verdict::Eligible);
                (e.name, v.to_string())
            })
            .collect(),
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
                family: config.family().to_string(),
                device: device.to_string(),
                config: config.to_string(),
            })
    }

    /// Picks the table for the device's platform and the layer's family, then the kernel.
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

    /// Explains the decision of [`Registry::select`]: every candidate with its verdict.
    pub fn explain(
        &self,
        device: &Device,
        config: &LayerConfig,
        ov: &Overrides,
    ) -> Result<Explanation, SelectError> {
        Ok(self.table_for(device, config)?.explain(device, config, ov))
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
    /// Every candidate in table order.
    pub candidates: Vec<Candidate>,
    /// Index of the chosen candidate, if any.
    pub chosen: Option<usize>,
    /// A forced kernel that could not run, and why.
    pub force_rejected: Option<(&'static str, Verdict)>,
    /// The error `select` returns, when nothing fits.
    pub error: Option<SelectError>,
}
