//! The one options layer: selection overrides ([`Overrides`]) and kernel
//! knobs ([`KernelOptions`]) are read from the environment here and nowhere below; kernels
//! receive them typed, in their build context.

use crate::arch::Capability;

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

    pub(crate) fn disabled_by(&self, name: &str) -> Option<OverrideSource> {
        self.disabled
            .iter()
            .find(|(d, _)| d.eq_ignore_ascii_case(name))
            .map(|(_, s)| *s)
    }
}

/// Environment variable capping the K splits of split-K kernels (1..=16).
pub const ENV_MAX_SPLITS: &str = "FP8_LINEAR_MAX_SPLITS";
/// Environment variable naming an older compute capability to compile kernels for
/// (`sm80`: run the code an A100 runs on a newer GPU), for kernels that can.
pub const ENV_COMPILE_FOR: &str = "FP8_LINEAR_COMPILE_FOR";
/// Environment variable fixing the row height of the output tiles, for kernels that choose
/// one per call (the Hopper kernel: 64, 128, 192 or 256).
pub const ENV_TILE_ROWS: &str = "FP8_LINEAR_TILE_ROWS";
/// Environment variable fixing the column width of the output tiles, for kernels that choose
/// one per call (the Hopper kernel: 16, 32, 64, 96, 112, 128 or 144).
pub const ENV_TILE_COLS: &str = "FP8_LINEAR_TILE_COLS";
/// Environment variable fixing the thread-block cluster size, for kernels that share tiles
/// across a cluster (the Hopper kernel: 1 or 2).
pub const ENV_CLUSTER: &str = "FP8_LINEAR_CLUSTER";

/// Environment variable turning the overlapped launch of a GEMM with the activation
/// quantization before it on (`1`) or off (`0`), for kernels that have one (the Hopper kernel).
pub const ENV_OVERLAP: &str = "FP8_LINEAR_OVERLAP";

/// Tuning knobs kernels read from their build context. `Default` is every kernel's own
/// choice.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct KernelOptions {
    /// Upper bound on K splits for kernels that split K (None: the kernel's own cap, 16).
    pub max_splits: Option<u16>,
    /// Compile for this older compute capability instead of the device's (kernels that
    /// support it: Marlin, from 8.0; the portable block kernel, from 8.9); None compiles for
    /// the device.
    pub compile_for: Option<Capability>,
    /// Row height of the output tiles for kernels that choose one per call (the Hopper
    /// kernel: 64, 128, 192 or 256); None lets the kernel choose by M. A kernel that cannot use
    /// the height refuses to build, naming the heights it has.
    pub tile_rows: Option<u16>,
    /// Column width of the output tiles for kernels that choose one per call (the Hopper
    /// kernel: 16, 32, 64 or 128, and 96, 112 or 144 over 128-row weight blocks); None lets
    /// the kernel choose by shape. A kernel that cannot use the width refuses to build,
    /// naming the widths it has; with a fixed height that lacks the width (the Hopper
    /// kernel's 192 and 256 rows have 128 columns only), the height's own widths are chosen
    /// from as usual.
    pub tile_cols: Option<u16>,
    /// CTAs per thread-block cluster for kernels that share a tile across one (the Hopper
    /// kernel: 2 loads each weight tile once for two vertically adjacent output tiles and
    /// multicasts it; 1 never clusters); None is the kernel's default (the Hopper kernel: 1).
    /// A kernel that cannot use the size refuses to build, naming the sizes it has.
    pub cluster: Option<u16>,
    /// Whether kernels that can launch their GEMM overlapped with their activation
    /// quantization do (programmatic dependent launch: the GEMM's launch, prologue and first
    /// weight loads run while the quantization does; the Hopper kernel on sm_90): None is the
    /// kernel's default (the Hopper kernel: on).
    pub overlap: Option<bool>,
}

/// A bad value in an options environment variable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("environment variable {var}={value:?}: {expected}")]
pub struct OptionsError {
    /// The variable.
    pub var: &'static str,
    /// Its value.
    pub value: String,
    /// What it must be.
    pub expected: &'static str,
}

impl KernelOptions {
    /// Every kernel's own choice.
    pub fn none() -> Self {
        KernelOptions::default()
    }

    /// Reads [`ENV_MAX_SPLITS`], [`ENV_COMPILE_FOR`], [`ENV_TILE_ROWS`], [`ENV_TILE_COLS`],
    /// [`ENV_CLUSTER`] and [`ENV_OVERLAP`];
    /// unset or empty variables keep the default, bad values are errors.
    pub fn from_env() -> Result<Self, OptionsError> {
        Self::from_vars(env)
    }

    /// [`KernelOptions::from_env`] over `env`, which returns a variable's trimmed, non-empty
    /// value.
    fn from_vars(env: impl Fn(&str) -> Option<String>) -> Result<Self, OptionsError> {
        // A u16 variable within `range`, else an error saying what it must be.
        let number = |var: &'static str,
                      range: std::ops::RangeInclusive<u16>,
                      expected: &'static str|
         -> Result<Option<u16>, OptionsError> {
            env(var)
                .map(|v| match v.parse::<u16>() {
                    Ok(n) if range.contains(&n) => Ok(n),
                    _ => Err(OptionsError {
                        var,
                        value: v,
                        expected,
                    }),
                })
                .transpose()
        };
        let mut o = KernelOptions {
            max_splits: number(ENV_MAX_SPLITS, 1..=16, "an integer from 1 to 16")?,
            tile_rows: number(
                ENV_TILE_ROWS,
                1..=u16::MAX,
                "a positive integer (the Hopper kernel has 64, 128, 192 and 256)",
            )?,
            tile_cols: number(
                ENV_TILE_COLS,
                1..=u16::MAX,
                "a positive integer (the Hopper kernel has 16, 32, 64, 96, 112, 128 and 144)",
            )?,
            cluster: number(
                ENV_CLUSTER,
                1..=u16::MAX,
                "a positive integer (the Hopper kernel has 1 and 2)",
            )?,
            overlap: number(ENV_OVERLAP, 0..=1, "0 (off) or 1 (on)")?.map(|v| v == 1),
            ..KernelOptions::default()
        };
        if let Some(v) = env(ENV_COMPILE_FOR) {
            o.compile_for = Some(crate::arch::parse_sm(&v).map(|(c, _)| c).ok_or(
                OptionsError {
                    var: ENV_COMPILE_FOR,
                    value: v,
                    expected: "a compute capability such as sm80",
                },
            )?);
        }
        Ok(o)
    }

    /// Caps K splits.
    pub fn max_splits(mut self, cap: u16) -> Self {
        self.max_splits = Some(cap);
        self
    }

    /// Fixes the output tiles' row height (for kernels that choose one).
    pub fn tile_rows(mut self, rows: u16) -> Self {
        self.tile_rows = Some(rows);
        self
    }

    /// Fixes the output tiles' column width (for kernels that choose one).
    pub fn tile_cols(mut self, cols: u16) -> Self {
        self.tile_cols = Some(cols);
        self
    }

    /// Fixes the thread-block cluster size (for kernels that share tiles across one).
    pub fn cluster(mut self, ctas: u16) -> Self {
        self.cluster = Some(ctas);
        self
    }

    /// Turns the overlapped launch of the GEMM with the activation quantization on or off
    /// (for kernels that have one).
    pub fn overlap(mut self, on: bool) -> Self {
        self.overlap = Some(on);
        self
    }

    /// Compiles for an older compute capability.
    pub fn compile_for(mut self, cap: Capability) -> Self {
        self.compile_for = Some(cap);
        self
    }
}

fn env(var: &str) -> Option<String> {
    std::env::var(var)
        .ok()
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

/// Everything the caller decides about how layers are built: selection overrides and kernel
/// knobs. [`Options::from_env`] is the one place the environment is read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// Selection overrides (force, disable, backend).
    pub overrides: Overrides,
    /// Kernel knobs.
    pub kernel: KernelOptions,
}

impl Options {
    /// No overrides, every kernel's own choices.
    pub fn none() -> Self {
        Options::default()
    }

    /// [`Overrides::from_env`] and
    /// [`KernelOptions::from_env`].
    pub fn from_env() -> Result<Self, OptionsError> {
        Ok(Options {
            overrides: Overrides::from_env(),
            kernel: KernelOptions::from_env()?,
        })
    }

    /// With these overrides.
    pub fn with_overrides(mut self, overrides: Overrides) -> Self {
        self.overrides = overrides;
        self
    }

    /// With these kernel knobs.
    pub fn with_kernel(mut self, kernel: KernelOptions) -> Self {
        self.kernel = kernel;
        self
    }
}

impl From<Overrides> for Options {
    fn from(overrides: Overrides) -> Self {
        Options {
            overrides,
            kernel: KernelOptions::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(vars: &[(&str, &str)]) -> Result<KernelOptions, OptionsError> {
        KernelOptions::from_vars(|name| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.to_string())
        })
    }

    #[test]
    fn knobs_parse_and_bad_values_name_the_variable() {
        assert_eq!(parse(&[]).unwrap(), KernelOptions::none());
        let o = parse(&[
            (ENV_MAX_SPLITS, "4"),
            (ENV_TILE_ROWS, "256"),
            (ENV_TILE_COLS, "32"),
            (ENV_CLUSTER, "2"),
            (ENV_OVERLAP, "0"),
        ])
        .unwrap();
        assert_eq!(
            o,
            KernelOptions::none()
                .max_splits(4)
                .tile_rows(256)
                .tile_cols(32)
                .cluster(2)
                .overlap(false)
        );
        for (var, value) in [
            (ENV_MAX_SPLITS, "0"),
            (ENV_MAX_SPLITS, "17"),
            (ENV_TILE_ROWS, "0"),
            (ENV_TILE_ROWS, "tall"),
            (ENV_TILE_COLS, "0"),
            (ENV_CLUSTER, "0"),
            (ENV_CLUSTER, "pair"),
            (ENV_OVERLAP, "2"),
            (ENV_OVERLAP, "on"),
            (ENV_COMPILE_FOR, "sm_x"),
        ] {
            let e = parse(&[(var, value)]).unwrap_err();
            assert_eq!((e.var, e.value.as_str()), (var, value));
            assert!(e.to_string().contains(var), "{e}");
        }
    }
}
