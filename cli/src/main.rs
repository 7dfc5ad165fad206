//! `fp8-linear`: explain kernel selection, run layers, list tables.

mod autotune;
mod check;
mod explain;
mod gen;
#[cfg(feature = "cuda")]
mod gpu;
mod layer_args;
mod layer_reference;
mod model_run;
mod place;
mod plan;
mod run_layer;

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use fp8_linear::{tables::BUILTIN, Device, Options, Target};

use layer_args::{LayerArgs, OverrideArgs};
use place::{Place, TargetArgs};

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
    /// Run a random FP8 layer (or, given DIR, every layer of a checkpoint) on GPU 0 (or the
    /// CPU, or `--gpu N`) and check it against the f64 reference of the numerics its kernel
    /// implements (W8A16 for weight-only kernels such as Marlin, else the layer's own).
    Run {
        #[command(flatten)]
        checkpoint: model_run::CheckpointRunArgs,
        #[command(flatten)]
        target: TargetArgs,
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
    target: TargetArgs,
    #[command(flatten)]
    layer: LayerArgs,
    #[command(flatten)]
    overrides: OverrideArgs,
}

/// What a sweep ran on and measured.
struct Measured {
    place: Place,
    config: fp8_linear::LayerConfig,
    options: Options,
    sweep: autotune::Sweep,
}

impl SweepArgs {
    /// Times every runnable kernel on the chosen target (checking each against its
    /// reference); `path` receives the winners.
    fn measure(
        &self,
        quiet: bool,
        env: &Options,
        path: Option<&std::path::Path>,
    ) -> Result<Measured, String> {
        if self.ms.contains(&0) {
            return Err("every M must be at least 1".into());
        }
        let place = Place::open(&self.target, quiet)?;
        let config = self.layer.config();
        let options = self.overrides.options(env);
        let sweep = autotune::run(
            &BUILTIN,
            &place,
            &config,
            &self.ms,
            self.iters,
            &options,
            place.executor().as_mut(),
            path,
        )?;
        Ok(Measured {
            place,
            config,
            options,
            sweep,
        })
    }
}

/// The autotune file to use: the one named, else the default location.
fn tuning_path(file: &Option<std::path::PathBuf>) -> Result<std::path::PathBuf, String> {
    file.clone()
        .or_else(fp8_linear::TuningFile::default_path)
        .ok_or_else(|| "no autotune file location: set FP8_LINEAR_TUNING or HOME".to_string())
}

/// A `--device` of `explain` and `plan`: `auto` for this machine's best target (GPU 0 when
/// usable, else the CPU), else a profile by name.
fn resolve_target(name: &str, quiet: bool) -> Result<Target, String> {
    if name.eq_ignore_ascii_case("auto") {
        Ok(Place::best_available(quiet).target)
    } else {
        Target::profile(name).map_err(|e| e.to_string())
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

fn exit(ok: bool) -> ExitCode {
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

fn run(cli: &Cli) -> Result<ExitCode, String> {
    // The one read of the environment: overrides and kernel options.
    let env = Options::from_env().map_err(|e| e.to_string())?;
    match &cli.command {
        Command::Explain {
            device,
            layer,
            overrides,
        } => {
            let target = resolve_target(device, cli.json)?;
            let device = target.device();
            let config = layer.config();
            let ex = BUILTIN
                .explain(device, &config, &overrides.options(&env).overrides)
                .map_err(|e| e.to_string())?;
            if cli.json {
                println!("{:#}", explain::render_json(device, &config, &ex));
            } else {
                print!("{}", explain::render_text(device, &config, &ex));
            }
            Ok(exit(ex.chosen.is_some()))
        }
        Command::Run {
            checkpoint,
            target,
            m,
            iters,
            layer,
            overrides,
        } => {
            if *m == 0 {
                return Err("M must be at least 1".into());
            }
            let place = Place::open(target, cli.json)?;
            let options = overrides.options(&env);
            if let Some(dir) = &checkpoint.dir {
                let report = model_run::run(
                    dir,
                    &BUILTIN,
                    &place,
                    place.executor().as_mut(),
                    *m,
                    *iters,
                    checkpoint.check,
                    &options,
                    cli.json,
                )?;
                if cli.json {
                    println!("{:#}", report.json());
                } else {
                    print!("{}", report.text());
                }
                return Ok(exit(report.ok()));
            }
            let config = layer.config();
            let tuning = match tuning_path(&None) {
                Ok(p) => fp8_linear::TuningFile::load(&p).map_err(|e| e.to_string())?,
                Err(_) => fp8_linear::TuningFile::new(),
            };
            let report = run_layer::run_random(
                &BUILTIN,
                &place,
                &config,
                *m,
                *iters,
                &options,
                &tuning,
                place.executor().as_mut(),
            )?;
            if cli.json {
                println!("{:#}", report.json());
            } else {
                print!("{}", report.text());
            }
            Ok(exit(report.ok()))
        }
        Command::Autotune { sweep, file } => {
            let path = tuning_path(file)?;
            let done = sweep.measure(cli.json, &env, Some(&path))?;
            if cli.json {
                println!("{:#}", done.sweep.json(Some(&path)));
            } else {
                print!("{}", done.sweep.text(&done.config, None, Some(&path)));
            }
            Ok(exit(done.sweep.all_checked_ok()))
        }
        Command::Bench { sweep, baseline } => {
            let done = sweep.measure(cli.json, &env, None)?;
            let base = match baseline {
                Some(b) => b.clone(),
                None => place::choose(
                    &BUILTIN,
                    &done.place,
                    &done.config,
                    None,
                    &done.options.overrides,
                )?
                .entry
                .name
                .to_string(),
            };
            if cli.json {
                println!("{:#}", done.sweep.json(None));
            } else {
                println!("device: {}", done.place.device());
                print!("{}", done.sweep.text(&done.config, Some(&base), None));
            }
            Ok(exit(done.sweep.all_checked_ok()))
        }
        Command::Plan(args) => plan::run(args, cli.json, &env),
        Command::GenCheckpoint(args) => gen::run(args, cli.json),
        Command::List => {
            list(cli.json);
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// The device profiles, this machine's target, and the built-in tables.
fn list(json: bool) {
    let tables = BUILTIN.tables();
    let here = Place::best_available(true);
    if json {
        let v = serde_json::json!({
            "profiles": Device::profile_names(),
            "current": {
                "device": here.device().to_string(),
                "platform": here.device().platform.name(),
                "no_gpu": here.cpu_reason,
            },
            "tables": tables.iter().map(|t| serde_json::json!({
                "name": t.name, "platform": t.platform.name(), "family": t.family.name(),
                "kernels": t.entries.iter().map(|e| serde_json::json!({
                    "name": e.name, "priority": e.priority, "arch": e.arch.to_string(),
                    "backend": e.backend, "numerics": e.numerics.name(),
                    "params": e.params.iter().map(|p| p.name()).collect::<Vec<_>>(),
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
    match &here.cpu_reason {
        None => println!("this machine: {}\n", here.device()),
        Some(why) => println!("this machine: {} ({why})\n", here.device()),
    }
    for t in tables {
        println!("{} ({} {}):", t.name, t.platform, t.family);
        for e in t.entries {
            println!(
                "  {:>3}  {:<24} {:<14} {}",
                e.priority,
                e.name,
                e.arch.to_string(),
                e.numerics
            );
        }
    }
}
