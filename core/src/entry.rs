//! Kernel entries: the constant data `#[fp8_kernel]` generates for each kernel.

use std::fmt;

use crate::arch::ArchSpec;
use crate::build_ctx::BuildCtx;
use crate::config::LayerConfig;
use crate::error::{KernelError, Unsupported};
use crate::grouped::Fp8GroupedKernel;
use crate::kernel::Fp8Kernel;
use crate::kind::LayerKind;
use crate::numerics::Numerics;
use crate::param::LayerParam;
use crate::platform::Platform;
use crate::rows::RowRange;

/// Builds a kernel for a layer through its typed constructor.
pub type ConstructFn = fn(&BuildCtx<'_>) -> Result<Box<dyn Fp8Kernel>, KernelError>;

/// Builds a grouped kernel for a layer of experts through its typed constructor.
pub type GroupedConstructFn = fn(&BuildCtx<'_>) -> Result<Box<dyn Fp8GroupedKernel>, KernelError>;

/// The uniform constructor of an entry, of the kernel's kind (`#[fp8_kernel(kind = ..)]`).
#[derive(Copy, Clone)]
pub enum Constructor {
    /// A linear kernel ([`Fp8Kernel`]).
    Linear(ConstructFn),
    /// A grouped kernel ([`Fp8GroupedKernel`]).
    Grouped(GroupedConstructFn),
}

impl Constructor {
    /// The kind of layer the kernel computes.
    pub const fn kind(&self) -> LayerKind {
        match self {
            Constructor::Linear(_) => LayerKind::Linear,
            Constructor::Grouped(_) => LayerKind::Grouped,
        }
    }
}

/// Checks whether a kernel can implement a layer config.
pub type CanImplementFn = fn(&LayerConfig) -> Result<(), Unsupported>;

/// Everything the dispatcher knows about one kernel, as a constant.
#[derive(Copy, Clone)]
pub struct KernelEntry {
    /// The kernel's name (its type name).
    pub name: &'static str,
    /// Platform it runs on.
    pub platform: Platform,
    /// Position in a table: 1 is tried first.
    pub priority: u16,
    /// Compute capabilities its code runs on.
    pub arch: ArchSpec,
    /// Wider capability range allowed when the kernel is forced by name (for testing an
    /// older-GPU kernel on a newer GPU); None when forcing does not widen it.
    pub force_arch: Option<ArchSpec>,
    /// Backend family (`cpu`, `cublaslt`, `marlin`, ...), for the backend override.
    pub backend: &'static str,
    /// The rows (M) of a call the kernel serves (`#[fp8_kernel(rows = 1..=16)]`; default
    /// every M): a layer's plan gives it only calls of these sizes.
    pub rows: RowRange,
    /// Layer parameters the constructor receives.
    pub params: &'static [LayerParam],
    /// The arithmetic the kernel implements (which reference it is checked against).
    pub numerics: Numerics,
    /// The config check.
    pub can_implement: CanImplementFn,
    /// The uniform constructor (calls the typed `new`), of the kernel's kind.
    pub construct: Constructor,
}

impl KernelEntry {
    /// The same entry at another priority (a kernel may sit at different positions in
    /// different tables).
    pub const fn with_priority(mut self, priority: u16) -> Self {
        self.priority = priority;
        self
    }

    /// The same entry for fewer rows (`fp8_table!`'s `Kernel { rows = 2..=64 }`: a table
    /// may list a kernel first for the rows where it is fastest and again, lower, for the
    /// rest). `rows` must lie inside the kernel's own; the table's compile-time check
    /// refuses any other.
    pub const fn with_rows(mut self, rows: RowRange) -> Self {
        self.rows = rows;
        self
    }

    /// The kind of layer the kernel computes (linear or grouped).
    pub const fn kind(&self) -> LayerKind {
        self.construct.kind()
    }

    /// Builds the (linear) kernel for the context's layer, after checking the config (so a
    /// constructor is never called for a layer the kernel rejects).
    /// The device must be of the kernel's platform and inside its arch (or its `force_arch`);
    /// a grouped kernel is [`KernelError::WrongKind`].
    pub fn build(&self, ctx: &BuildCtx<'_>) -> Result<Box<dyn Fp8Kernel>, KernelError> {
        self.check_build(ctx)?;
        match self.construct {
            Constructor::Linear(f) => f(ctx),
            Constructor::Grouped(_) => Err(self.wrong_kind(LayerKind::Linear)),
        }
    }

    /// Like [`KernelEntry::build`], for a grouped kernel (the context's config is one
    /// expert's layer); a linear kernel is [`KernelError::WrongKind`].
    pub fn build_grouped(
        &self,
        ctx: &BuildCtx<'_>,
    ) -> Result<Box<dyn Fp8GroupedKernel>, KernelError> {
        self.check_build(ctx)?;
        match self.construct {
            Constructor::Grouped(f) => f(ctx),
            Constructor::Linear(_) => Err(self.wrong_kind(LayerKind::Grouped)),
        }
    }

    fn wrong_kind(&self, wanted: LayerKind) -> KernelError {
        KernelError::WrongKind {
            kernel: self.name,
            kind: self.kind(),
            wanted,
        }
    }

    /// The device and config checks of a build.
    fn check_build(&self, ctx: &BuildCtx<'_>) -> Result<(), KernelError> {
        let device = ctx.device();
        let arch_ok = self.arch.matches(device.capability)
            || self
                .force_arch
                .is_some_and(|a| a.matches(device.capability));
        if !self.platform.same(device.platform) || !arch_ok {
            return Err(KernelError::WrongDevice {
                kernel: self.name,
                device: device.to_string(),
                arch: self.arch.to_string(),
            });
        }
        (self.can_implement)(ctx.config()).map_err(|reason| KernelError::Unsupported {
            kernel: self.name,
            reason,
        })
    }

    /// The config of the f64 reference that computes what this kernel computes for
    /// `config` (see [`Numerics::reference_config`]).
    pub const fn reference_config(&self, config: &LayerConfig) -> LayerConfig {
        self.numerics.reference_config(config)
    }
}

impl fmt::Debug for KernelEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KernelEntry")
            .field("name", &self.name)
            .field("platform", &self.platform)
            .field("priority", &self.priority)
            .field("arch", &self.arch)
            .field("backend", &self.backend)
            .field("rows", &self.rows)
            .field("params", &self.params)
            .field("numerics", &self.numerics)
            .field("kind", &self.kind())
            .finish()
    }
}

/// Implemented by `#[fp8_kernel]` for every registered kernel type (linear or grouped);
/// tables list types that implement it.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a registered fp8 kernel",
    label = "not registered",
    note = "add `#[fp8_kernel(platform = ..., priority = ..., arch = ...)]` to the type's definition"
)]
pub trait Registered: crate::kernel::KernelName + Sized {
    /// The kernel's entry.
    const ENTRY: KernelEntry;
}
