//! Where `run`, `bench` and `autotune` build and run layers: a [`Target`] (GPU 0 when this
//! machine has a usable one, the GPU named with `--gpu N`, else the host CPU), the executor
//! that moves data to it, and the kernel choice for a layer there, with a plain account of
//! a forced kernel that could not run.

use clap::Args;
use fp8_linear::{
    Device, KernelEntry, LayerConfig, Overrides, Plan, Platform, Registry, Target, Tuned,
    TuningFile, Verdict,
};

use crate::error::CliError;
use crate::executor::{Executor, HostExecutor};

/// Device selection of the commands that run layers.
#[derive(Args, Debug, Clone, Default)]
pub struct TargetArgs {
    /// Run on CUDA GPU N (an error when it cannot be opened). Default: GPU 0 when this
    /// machine has a usable GPU, else the host CPU.
    #[arg(long, value_name = "N", conflicts_with = "cpu")]
    pub gpu: Option<u32>,
    /// Run on the host CPU even when a GPU is usable.
    #[arg(long)]
    pub cpu: bool,
}

/// The target layers are built for, and why it is the CPU when it is.
pub struct Place {
    /// The target.
    pub target: Target,
    /// Why the CPU is used (`--cpu`, or why no GPU could be used); None on a GPU.
    pub cpu_reason: Option<String>,
}

/// Why this process cannot use GPU 0.
pub fn no_gpu_reason() -> String {
    #[cfg(feature = "cuda")]
    {
        if let Err(e) = Target::cuda(0) {
            return e.to_string();
        }
        if let Err(e) = fp8_linear::cuda::runtime::probe::nvrtc() {
            return e.to_string();
        }
        "GPU 0 opened, but is not usable".to_string()
    }
    #[cfg(not(feature = "cuda"))]
    {
        "this build has no CUDA support (feature `cuda` off)".to_string()
    }
}

impl Place {
    /// The target the arguments name; says on stderr (unless `quiet`) why the CPU is used
    /// when no GPU was asked for and none is usable.
    pub fn open(args: &TargetArgs, quiet: bool) -> Result<Place, CliError> {
        if let Some(n) = args.gpu {
            return Self::gpu(n);
        }
        if args.cpu {
            return Ok(Place {
                target: Target::cpu(),
                cpu_reason: Some("--cpu was given".into()),
            });
        }
        Ok(Self::best_available(quiet))
    }

    /// GPU 0 when usable ([`Target::best_available`]), else the CPU with the reason.
    pub fn best_available(quiet: bool) -> Place {
        let target = Target::best_available();
        if target.device().platform != Platform::Cpu {
            return Place {
                target,
                cpu_reason: None,
            };
        }
        let why = no_gpu_reason();
        if !quiet {
            eprintln!(
                "note: no GPU found ({why}); using the CPU: {}",
                target.device()
            );
        }
        Place {
            target,
            cpu_reason: Some(format!("no GPU: {why}")),
        }
    }

    #[cfg(feature = "cuda")]
    fn gpu(ordinal: u32) -> Result<Place, CliError> {
        let target = Target::cuda(ordinal)
            .map_err(|e| CliError::runtime(format!("--gpu {ordinal}: {e}")))?;
        Ok(Place {
            target,
            cpu_reason: None,
        })
    }

    #[cfg(not(feature = "cuda"))]
    fn gpu(ordinal: u32) -> Result<Place, CliError> {
        Err(CliError::runtime(format!(
            "--gpu {ordinal}: this build has no CUDA support (feature `cuda` off)"
        )))
    }

    /// The device layers are judged against and run on.
    pub fn device(&self) -> &Device {
        self.target.device()
    }

    /// The executor that feeds layers on this target: device buffers and CUDA events on a
    /// GPU, host memory on the CPU.
    pub fn executor(&self) -> Box<dyn Executor> {
        #[cfg(feature = "cuda")]
        if let Some(gpu) = self.target.gpu() {
            return Box::new(crate::gpu::GpuExecutor::new(gpu.clone()));
        }
        Box::new(HostExecutor)
    }
}

/// The plan made for a layer (a kernel per range of M), the kernel of the M a run uses,
/// and, when a forced kernel could not be used, why and what ran instead.
pub struct Choice {
    /// The layer's plan: what `Linear::with_plan` builds.
    pub plan: Plan,
    /// The plan's kernel for the run's M.
    pub entry: &'static KernelEntry,
    /// "forced kernel X (why it cannot run here); fell back to Y", when a kernel was forced
    /// and the plan does not use it.
    pub force_note: Option<String>,
}

/// Plans `config` on the place's device from `registry` (measured autotune winners first
/// where `tuning` has them, then the static order) and names the plan's kernel for calls of
/// `m` rows.
pub fn choose(
    registry: &Registry,
    place: &Place,
    config: &LayerConfig,
    m: usize,
    tuning: Option<&TuningFile>,
    ov: &Overrides,
) -> Result<Choice, CliError> {
    let device = place.device();
    let plan = match tuning {
        Some(file) => {
            let key = fp8_linear::tuning::device_key(device);
            let tuned = Tuned {
                device_key: &key,
                file,
            };
            registry.plan_tuned(device, config, tuned, ov)
        }
        None => registry.plan(device, config, ov),
    }
    .map_err(crate::error::select_error)?;
    let entry = plan
        .entry_for(m.max(1))
        .ok_or_else(|| CliError::runtime(format!("the plan ({plan}) has no kernel for M = {m}")))?;
    let force_note = match &ov.force {
        Some((name, _))
            if !plan
                .kernels()
                .iter()
                .any(|e| e.name.eq_ignore_ascii_case(name)) =>
        {
            let why = match plan.force_rejected {
                Some((n, v)) => format!("{n} {v}"),
                None => not_in_table(registry, place, config, name),
            };
            Some(format!("forced kernel {why}; fell back to {}", entry.name))
        }
        _ => None,
    };
    Ok(Choice {
        plan,
        entry,
        force_note,
    })
}

/// Why a forced kernel that is not in the device's table for the layer was not considered.
fn not_in_table(registry: &Registry, place: &Place, config: &LayerConfig, name: &str) -> String {
    let device = place.device();
    let Some(e) = registry.entry(name) else {
        let build = if cfg!(feature = "cuda") {
            ""
        } else {
            " (this build has no CUDA kernels: feature `cuda` off)"
        };
        return format!("{name} is not a kernel of this build{build}");
    };
    if e.platform != device.platform {
        let v = Verdict::PlatformMismatch {
            kernel: e.platform,
            device: device.platform,
        };
        let why = place
            .cpu_reason
            .as_ref()
            .map(|r| format!(" ({r})"))
            .unwrap_or_default();
        return format!("{} {v}{why}", e.name);
    }
    let table = registry
        .table_for(device, config)
        .map(|t| t.name)
        .unwrap_or("-");
    format!(
        "{} is not in table {table}, the one for {} layers on this device",
        e.name,
        config.family()
    )
}
