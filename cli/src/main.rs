//! `fp8-linear`: explain kernel selection, run layers, list tables.

mod autotune;
mod explain;
mod gen;
#[cfg(feature = "cuda")]
mod gpu;
mod layer_args;
mod layer_reference;
mod model_run;
mod plan;
mod run_layer;

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use fp8_linear::{Device, Overrides};

use layer_args::{LayerArgs, OverrideArgs};

/// FP8 linear-layer kernels and their dispatcher.
#[derive(Parser, Debug)]
#[command(name = "fp8-linear", version, about)]
struct Cli {
    /// Print JSON instead of text.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Show, for a device and a layer, every candidate kernel with its verdict.
    Explain {
        /// Device profile (a100, h100, h200, rtx3090, sm89, cpu...) or `auto` for the
        /// detected device.
        #[arg(long, default_value = "auto")]
        device: String,
        #[command(flatten)]
        layer: LayerArgs,
        #[command(flatten)]
        overrides: OverrideArgs,
    },
    /// Run a random FP8 layer (or, given DIR, every layer of a checkpoint) on the current
    /// device and check it against the f64 reference.
    Run {
        #[command(flatten)]
        checkpoint: model_run::CheckpointRunArgs,
        /// Rows of the activations (tokens).
        #[arg(long, short = 'm', default_value_t = 16)]
        m: usize,
        /// Timed calls (the median is reported).
        #[arg(long, default_value_t = 5)]
        iters: usize,
        #[command(flatten)]
        layer: LayerArgs,
        #[command(flatten)]
        overrides: OverrideArgs,
    },
    /// For every quantized layer of a checkpoint: its config and the kernel each device
    /// would run, grouped by config, with totals.
    Plan(plan::PlanArgs),
    /// Write a small synthetic FP8 checkpoint (Hugging Face format) to a directory.
    GenCheckpoint(gen::GenArgs),
    /// Time every kernel that can run a layer on this device at a few M, and save the
    /// winner per M bucket to the autotune file that selection consults (`run` uses it).
    Autotune {
        #[command(flatten)]
        sweep: SweepArgs,
        /// The autotune file (default: $FP8_LINEAR_TUNING, else the user's cache dir).
        #[arg(long)]
        file: Option<std::path::PathBuf>,
    },
    /// Time every kernel that can run a layer on this device at a few M and print
    /// TFLOP/s and the speed relative to a baseline kernel (nothing is saved).
    Bench {
        #[command(flatten)]
        sweep: SweepArgs,
        /// Kernel the others are compared with (default: the one `select` picks).
        #[arg(long)]
        baseline: Option<String>,
    },
    /// List the device profiles and the built-in kernel tables.
    List,
}

/// What `autotune` and `bench` measure: a layer, the rows to time it at, and how often.
#[derive(clap::Args, Debug)]
struct SweepArgs {
    /// Rows to measure, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "1,16,64,128,512,4096")]
    ms: Vec<usize>,
    /// Timed calls per kernel and M (the median counts).
    #[arg(long, default_value_t = 10)]
    iters: usize,
    #[command(flatten)]
    layer: LayerArgs,
    #[command(flatten)]
    overrides: OverrideArgs,
}

impl SweepArgs {
    /// Times every runnable kernel on the current device; `path` receives the winners.
    fn measure(
        &self,
        quiet: bool,
        path: Option<&std::path::Path>,
    ) -> Result<
        (
            Device,
            fp8_linear::LayerConfig,
            Vec<fp8_linear::autotune::Measurement>,
        ),
        String,
    > {
        if self.ms.contains(&0) {
            return Err("every M must be at least 1".into());
        }
        let target = current_target(quiet);
        let device = target.device();
        let config = self.layer.config();
        let measured = autotune::run(
            &device,
            &config,
            &self.ms,
            self.iters,
            &self.overrides.overrides(),
            target.executor().as_mut(),
            path,
        )?;
        Ok((device, config, measured))
    }
}

/// The autotune file to use: the one named, else the default location.
fn tuning_path(file: &Option<std::path::PathBuf>) -> Result<std::path::PathBuf, String> {
    file.clone()
        .or_else(fp8_linear::TuningFile::default_path)
        .ok_or_else(|| "no autotune file location: set FP8_LINEAR_TUNING or HOME".to_string())
}

/// Where layers run: the first CUDA device, else the host CPU.
enum Target {
    #[cfg(feature = "cuda")]
    Gpu(std::sync::Arc<fp8_linear_cuda::Gpu>),
    Cpu(Device),
}

impl Target {
    fn device(&self) -> Device {
        match self {
            #[cfg(feature = "cuda")]
            Target::Gpu(g) => gpu::device(g),
            Target::Cpu(d) => d.clone(),
        }
    }

    fn executor(&self) -> Box<dyn run_layer::Executor> {
        match self {
            #[cfg(feature = "cuda")]
            Target::Gpu(g) => Box::new(gpu::GpuExecutor::new(g.clone())),
            Target::Cpu(_) => Box::new(run_layer::HostExecutor),
        }
    }
}

/// The first CUDA device, else the host CPU; says plainly (on stderr) why the CPU is used.
fn current_target(quiet: bool) -> Target {
    let cpu = Device::host_cpu();
    #[cfg(feature = "cuda")]
    let why = match gpu::detect() {
        Ok(g) => return Target::Gpu(g),
        Err(e) => e,
    };
    #[cfg(not(feature = "cuda"))]
    let why = "this build has no CUDA support (feature `cuda` off)".to_string();
    if !quiet {
        eprintln!("note: no GPU found ({why}); using the CPU: {cpu}");
    }
    Target::Cpu(cpu)
}

fn resolve_device(name: &str, quiet: bool) -> Result<Device, String> {
    if name.eq_ignore_ascii_case("auto") {
        Ok(current_target(quiet).device())
    } else {
        Device::profile(name).map_err(|e| e.to_string())
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(&cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

fn run(cli: &Cli) -> Result<ExitCode, String> {
    match &cli.command {
        Command::Explain {
            device,
            layer,
            overrides,
        } => {
            let device = resolve_device(device, cli.json)?;
            let config = layer.config();
            let ex = fp8_linear::explain_builtin(&device, &config, &overrides.overrides())
                .map_err(|e| e.to_string())?;
            if cli.json {
                println!("{:#}", explain::render_json(&device, &config, &ex));
            } else {
                print!("{}", explain::render_text(&device, &config, &ex));
            }
            Ok(if ex.chosen.is_some() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
        Command::Run {
            checkpoint,
            m,
            iters,
            layer,
            overrides,
        } => {
            if *m == 0 {
                return Err("M must be at least 1".into());
            }
            let target = current_target(cli.json);
            if let Some(dir) = &checkpoint.dir {
                let report = model_run::run(
                    dir,
                    &target.device(),
                    target.executor().as_mut(),
                    *m,
                    *iters,
                    checkpoint.check,
                    &overrides.overrides(),
                    cli.json,
                )?;
                if cli.json {
                    println!("{:#}", report.json());
                } else {
                    print!("{}", report.text());
                }
                return Ok(if report.ok() {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::from(1)
                });
            }
            let config = layer.config();
            let tuning = match tuning_path(&None) {
                Ok(p) => fp8_linear::TuningFile::load(&p).map_err(|e| e.to_string())?,
                Err(_) => fp8_linear::TuningFile::new(),
            };
            let report = run_layer::run_random(
                &target.device(),
                &config,
                *m,
                *iters,
                &overrides.overrides(),
                &tuning,
                target.executor().as_mut(),
            )?;
            if cli.json {
                println!("{:#}", report.json());
            } else {
                print!("{}", report.text());
            }
            Ok(if report.rel_error < 1e-2 {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
        Command::Autotune { sweep, file } => {
            let path = tuning_path(file)?;
            let (_, config, measured) = sweep.measure(cli.json, Some(&path))?;
            if cli.json {
                println!("{:#}", autotune::json(&measured, Some(&path)));
            } else {
                print!("{}", autotune::text(&config, &measured, None, Some(&path)));
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Bench { sweep, baseline } => {
            let (device, config, measured) = sweep.measure(cli.json, None)?;
            let base = match baseline {
                Some(b) => b.clone(),
                None => fp8_linear::select_builtin(&device, &config, &sweep.overrides.overrides())
                    .map_err(|e| e.to_string())?
                    .entry
                    .name
                    .to_string(),
            };
            if cli.json {
                println!("{:#}", autotune::json(&measured, None));
            } else {
                println!("device: {device}");
                print!("{}", autotune::text(&config, &measured, Some(&base), None));
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Plan(args) => plan::run(args, cli.json),
        Command::GenCheckpoint(args) => gen::run(args, cli.json),
        Command::List => {
            list(cli.json);
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn list(json: bool) {
    let tables = fp8_linear::tables::all();
    if json {
        let v = serde_json::json!({
            "profiles": Device::profile_names(),
            "tables": tables.iter().map(|t| serde_json::json!({
                "name": t.name, "platform": t.platform.name(), "family": t.family.name(),
                "kernels": t.entries.iter().map(|e| serde_json::json!({
                    "name": e.name, "priority": e.priority, "arch": e.arch.to_string(),
                    "backend": e.backend, "params": e.params,
                })).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
        });
        println!("{v:#}");
        return;
    }
    println!(
        "device profiles: {}, smXY\n",
        Device::profile_names().join(", ")
    );
    for t in tables {
        println!("{} ({} {}):", t.name, t.platform, t.family);
        for e in t.entries {
            println!("  {:>3}  {:<24} {}", e.priority, e.name, e.arch);
        }
    }
    let _ = Overrides::none();
}
