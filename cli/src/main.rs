//! `fp8-linear`: explain kernel selection, run layers, list tables.
//!
//! # Exit codes
//!
//! The same outcome has the same code in every subcommand (also printed by `--help`):
//!
//! | code | kind (`--json`) | outcome |
//! |---|---|---|
//! | 0 | - | success |
//! | 1 | `check_failed` | a kernel ran, but its output is off the f64 reference or holds a NaN (an unwritten element) |
//! | 2 | `bad_input` | bad arguments or input: an unknown kernel, backend or device name, a value out of range, sizes that overflow or exceed the memory available, an invalid checkpoint or autotune file |
//! | 3 | `no_kernel` | no kernel can run a layer on the device (`explain`, `run`, `plan --strict`, `bench`, `autotune`) |
//! | 4 | `runtime` | the device or a kernel failed: a GPU that cannot be opened, a kernel that fails to build or launch, a file that cannot be written |
//!
//! A report with several outcomes (a checkpoint run with a layer that has no kernel and one
//! that fails its check) exits with the highest code. With `--json`, every error is a JSON
//! object on stdout, `{"error": {"kind": "bad_input", "code": 2, "message": "..."}}` (the
//! message is also printed on stderr); reports are printed as JSON whatever their outcome.

mod autotune;
mod check;
mod error;
mod executor;
mod explain;
mod floor;
mod gen;
#[cfg(feature = "cuda")]
mod gpu;
mod layer_args;
mod layer_reference;
mod model_run;
mod moe_run;
mod names;
mod place;
mod plan;
mod plan_tp;
mod progress;
mod run_layer;
mod sizes;
mod tp_run;

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use fp8_linear::{tables::BUILTIN, Device, Options, Platform, Target};

use error::{as_kind, CliError, Kind};
use layer_args::{parse_iters, parse_m, LayerArgs, OverrideArgs};
use place::{Place, TargetArgs};

/// FP8 linear-layer kernels and their dispatcher.
#[derive(Parser, Debug)]
#[command(name = "fp8-linear", version, about, after_help = error::EXIT_CODES)]
struct Cli {
    /// Print JSON instead of text (errors too: a JSON error object on stdout).
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Show, for a device and a layer, every candidate kernel with its verdict (exit 3 when
    /// no kernel fits).
    #[command(after_help = error::EXIT_CODES)]
    Explain {
        /// Device profile (a100, h100, h200, rtx3090, sm89, sm90a, cpu...) or `auto` for the
        /// detected device.
        #[arg(long, default_value = "auto")]
        device: String,
        #[command(flatten)]
        layer: LayerArgs,
        /// Rows of calls to show the kernel of, comma separated (`-m 1,16,4096`): a layer's
        /// plan gives each range of M its own kernel.
        #[arg(short = 'm', long = "m", value_delimiter = ',', value_parser = parse_m)]
        ms: Vec<usize>,
        /// Explain the layer as the experts of a mixture-of-experts projection: the grouped
        /// tables.
        #[arg(long)]
        grouped: bool,
        #[command(flatten)]
        overrides: OverrideArgs,
    },
    /// Run a random FP8 layer (or, given DIR, every layer of a checkpoint) on GPU 0 (or the
    /// CPU, or `--gpu N`) and check it against the f64 reference of the numerics its kernel
    /// implements (W8A16 for weight-only kernels such as Marlin, else the layer's own).
    #[command(after_help = error::EXIT_CODES)]
    Run {
        #[command(flatten)]
        checkpoint: model_run::CheckpointRunArgs,
        #[command(flatten)]
        target: TargetArgs,
        /// Rows of the activations (tokens), at least 1.
        #[arg(long, short = 'm', default_value_t = 16, value_parser = parse_m)]
        m: usize,
        /// Timed calls (the median is reported), 1 to 100000.
        #[arg(long, default_value_t = 5, value_parser = parse_iters)]
        iters: usize,
        #[command(flatten)]
        layer: LayerArgs,
        #[command(flatten)]
        overrides: OverrideArgs,
    },
    /// For every quantized layer of a checkpoint: its config and the kernel each device
    /// would run, grouped by config, with totals.
    #[command(after_help = error::EXIT_CODES)]
    Plan(plan::PlanArgs),
    /// Write a small synthetic FP8 checkpoint (Hugging Face format) to a directory.
    #[command(after_help = error::EXIT_CODES)]
    GenCheckpoint(gen::GenArgs),
    /// Time every kernel that can run a layer on this device at a few M, and save the
    /// winner per M bucket to the autotune file that selection consults (`run` uses it).
    #[command(after_help = error::EXIT_CODES)]
    Autotune {
        #[command(flatten)]
        sweep: SweepArgs,
        /// The autotune file (default: $FP8_LINEAR_TUNING, else the user's cache dir).
        #[arg(long)]
        file: Option<std::path::PathBuf>,
    },
    /// Time every kernel that can run a layer on this device at a few M and print, as
    /// BENCHMARKS.md does, the time per call, TFLOP/s, the speed relative to a baseline
    /// kernel and, at M <= 64, the percent of the weight-read floor (nothing is saved).
    #[command(after_help = error::EXIT_CODES)]
    Bench {
        #[command(flatten)]
        sweep: SweepArgs,
        /// Kernel the others are compared with (default: the one `select` picks); it must
        /// be one of the kernels measured here.
        #[arg(long)]
        baseline: Option<String>,
    },
    /// List the device profiles and the built-in kernel tables.
    List,
}

/// The Ms `bench` and `autotune` measure on a GPU when `--ms` is not given.
const GPU_MS: [usize; 6] = [1, 16, 64, 128, 512, 4096];
/// The Ms they measure on the CPU (a 2-core machine finishes the default sweep in seconds).
const CPU_MS: [usize; 3] = [1, 16, 128];
/// Timed calls per kernel and M on a GPU / on the CPU when `--iters` is not given.
const GPU_ITERS: usize = 10;
const CPU_ITERS: usize = 3;

/// What `autotune` and `bench` measure: a layer, the rows to time it at, and how often.
#[derive(clap::Args, Debug)]
struct SweepArgs {
    /// Rows to measure, comma separated, each at least 1 (default: 1,16,64,128,512,4096 on
    /// a GPU, 1,16,128 on the CPU).
    #[arg(long, value_delimiter = ',', value_parser = parse_m)]
    ms: Vec<usize>,
    /// Timed calls per kernel and M, the median counts: 1 to 100000 (default: 10 on a GPU,
    /// 3 on the CPU).
    #[arg(long, value_parser = parse_iters)]
    iters: Option<usize>,
    /// Also time CpuReference, the f64 reference kernel (seconds per call at M = 512 on a
    /// large layer); skipped by default unless forced or named as the baseline.
    #[arg(long)]
    with_reference: bool,
    /// The device's weight-read rate in TB/s, for the floor% column (M <= 64: the N x K
    /// weight bytes read once at this rate, over the time); default: 4.3 on an H200 (its
    /// device-copy rate), else no floor% column.
    #[arg(long, value_parser = floor::parse_read_tbs)]
    read_tbs: Option<f64>,
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
    sweep: autotune::Sweep,
}

const REFERENCE_KERNEL: &str = fp8_linear::cpu::CpuReference::NAME;

impl SweepArgs {
    /// Times every runnable kernel on the chosen target (checking each against its
    /// reference); `path` receives the winners. `baseline` is the `--baseline` of `bench`:
    /// `Some(None)` for the default (the selected kernel).
    fn measure(
        &self,
        quiet: bool,
        env: &Options,
        path: Option<&std::path::Path>,
        baseline: Option<Option<&str>>,
    ) -> Result<Measured, CliError> {
        let config = self.layer.config()?;
        let mut options = self.overrides.options(env)?;
        let baseline = match baseline {
            Some(Some(b)) => Some(Some(names::kernel(&BUILTIN, b, "--baseline")?)),
            other => other.map(|_| None),
        };
        let what = if path.is_some() { "autotune" } else { "bench" };
        if !self.ms.is_empty() {
            // Sizes the user gave are checked before the device is opened.
            sizes::check_layer(what, &config, &self.ms)?;
        }
        let place = Place::open(&self.target, quiet)?;
        let on_gpu = place.device().platform != Platform::Cpu;
        let ms: Vec<usize> = match (self.ms.is_empty(), on_gpu) {
            (false, _) => self.ms.clone(),
            (true, true) => GPU_MS.to_vec(),
            (true, false) => CPU_MS.to_vec(),
        };
        let iters = self
            .iters
            .unwrap_or(if on_gpu { GPU_ITERS } else { CPU_ITERS });
        // The f64 reference kernel takes seconds per call on a large layer: skip it unless
        // asked for, forced, or the baseline.
        let forced = |name: &str| {
            options
                .overrides
                .force
                .as_ref()
                .is_some_and(|(f, _)| f.eq_ignore_ascii_case(name))
        };
        let wants_reference = self.with_reference
            || forced(REFERENCE_KERNEL)
            || baseline == Some(Some(REFERENCE_KERNEL));
        let mut skipped = None;
        if !wants_reference {
            let ex = BUILTIN.explain(place.device(), &config, &options.overrides);
            let runnable = ex.as_ref().is_ok_and(|ex| {
                ex.candidates
                    .iter()
                    .any(|c| c.entry.name == REFERENCE_KERNEL && c.verdict.runnable())
            });
            if runnable {
                options.overrides = options.overrides.clone().disable(REFERENCE_KERNEL);
                skipped = Some(REFERENCE_KERNEL);
            }
        }
        let ex = BUILTIN
            .explain(place.device(), &config, &options.overrides)
            .map_err(error::select_error)?;
        if let Some(e) = ex.error {
            return Err(error::select_error(e));
        }
        let runnable: Vec<&'static str> = ex
            .candidates
            .iter()
            .filter(|c| c.verdict.runnable())
            .map(|c| c.entry.name)
            .collect();
        let baseline = match baseline {
            None => None,
            Some(Some(b)) => {
                if !runnable.contains(&b) {
                    return Err(CliError::bad_input(format!(
                        "--baseline {b}: not among the kernels measured for this layer on {} (table {}: {})",
                        place.device(),
                        ex.table.name,
                        runnable.join(", ")
                    )));
                }
                Some(b)
            }
            Some(None) => Some(
                place::choose(
                    &BUILTIN,
                    &place,
                    &config,
                    usize::MAX,
                    None,
                    &options.overrides,
                )?
                .entry
                .name,
            ),
        };
        sizes::check_layer(what, &config, &ms)?;
        let bar = progress::bar((ms.len() * runnable.len()) as u64, "measurements", quiet);
        let sweep = autotune::run(
            &BUILTIN,
            &place,
            &config,
            &ms,
            iters,
            &options,
            place.executor().as_mut(),
            path,
            &bar,
        );
        bar.finish_and_clear();
        let mut sweep = sweep?;
        sweep.skipped = skipped;
        sweep.baseline = baseline;
        sweep.iters = iters;
        sweep.read_tbs = self
            .read_tbs
            .or_else(|| floor::default_read_tbs(place.device()));
        Ok(Measured {
            place,
            config,
            sweep,
        })
    }
}

/// The autotune file to use: the one named, else the default location.
fn tuning_path(file: &Option<std::path::PathBuf>) -> Result<std::path::PathBuf, CliError> {
    file.clone()
        .or_else(fp8_linear::TuningFile::default_path)
        .ok_or_else(|| {
            CliError::bad_input("no autotune file location: set FP8_LINEAR_TUNING or HOME")
        })
}

/// A `--device` of `explain` and `plan`: `auto` for this machine's best target (GPU 0 when
/// usable, else the CPU), else a profile by name.
fn resolve_target(name: &str, quiet: bool) -> Result<Target, CliError> {
    if name.eq_ignore_ascii_case("auto") {
        Ok(Place::best_available(quiet).target)
    } else {
        Target::profile(name).map_err(as_kind(Kind::BadInput))
    }
}

fn main() -> ExitCode {
    let json = std::env::args_os().skip(1).any(|a| a == "--json");
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            use clap::error::ErrorKind as E;
            let shown = matches!(e.kind(), E::DisplayHelp | E::DisplayVersion)
                || e.kind() == E::DisplayHelpOnMissingArgumentOrSubcommand && !json;
            if shown || !json {
                e.exit();
            }
            let err = CliError::bad_input(e.render().to_string().trim_end().to_string());
            eprintln!("{}", e.render());
            println!("{:#}", err.json());
            return err.kind.exit();
        }
    };
    match run(&cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            if cli.json {
                println!("{:#}", e.json());
            }
            e.kind.exit()
        }
    }
}

fn run(cli: &Cli) -> Result<ExitCode, CliError> {
    // The one read of the environment: overrides and kernel options.
    let env = Options::from_env().map_err(as_kind(Kind::BadInput))?;
    match &cli.command {
        Command::Explain {
            device,
            layer,
            ms,
            grouped,
            overrides,
        } => {
            let options = overrides.options(&env)?;
            let target = resolve_target(device, cli.json)?;
            let device = target.device();
            let config = layer.config()?;
            let registry = if *grouped {
                &fp8_linear::tables::GROUPED
            } else {
                &BUILTIN
            };
            let ex = registry
                .explain(device, &config, &options.overrides)
                .map_err(error::select_error)?;
            if cli.json {
                println!("{:#}", explain::render_json(device, &config, &ex, ms));
            } else {
                print!("{}", explain::render_text(device, &config, &ex, ms));
            }
            Ok(if ex.plan.is_some() {
                ExitCode::SUCCESS
            } else {
                Kind::NoKernel.exit()
            })
        }
        Command::Run {
            checkpoint,
            target,
            m,
            iters,
            layer,
            overrides,
        } => {
            let options = overrides.options(&env)?;
            let spec = model_run::RunSpec {
                m: *m,
                iters: *iters,
                check: checkpoint.check,
                only: checkpoint.only.as_deref(),
            };
            if let (Some(dir), Some(devices)) = (&checkpoint.dir, &checkpoint.devices) {
                let places = tp_run::open_places(devices)?;
                let report = tp_run::run(dir, &BUILTIN, &places, &spec, &options, cli.json)?;
                if cli.json {
                    println!("{:#}", report.json());
                } else {
                    print!("{}", report.text());
                }
                return Ok(error::exit_code(report.outcome()));
            }
            if let Some(dir) = &checkpoint.dir {
                let place = Place::open(target, cli.json)?;
                let report = model_run::run(
                    dir,
                    &BUILTIN,
                    &place,
                    place.executor().as_mut(),
                    &spec,
                    &options,
                    cli.json,
                )?;
                if cli.json {
                    println!("{:#}", report.json());
                } else {
                    print!("{}", report.text());
                }
                return Ok(error::exit_code(report.outcome()));
            }
            let config = layer.config()?;
            // Sizes first: nothing is allocated for a layer that cannot fit.
            sizes::check_layer("run", &config, &[*m])?;
            let place = Place::open(target, cli.json)?;
            let tuning = match tuning_path(&None) {
                Ok(p) => fp8_linear::TuningFile::load(&p).map_err(as_kind(Kind::BadInput))?,
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
            Ok(error::exit_code(report.outcome()))
        }
        Command::Autotune { sweep, file } => {
            let path = tuning_path(file)?;
            let done = sweep.measure(cli.json, &env, Some(&path), None)?;
            if cli.json {
                println!(
                    "{:#}",
                    done.sweep
                        .json(done.place.device(), &done.config, Some(&path))
                );
            } else {
                print!(
                    "{}",
                    done.sweep.text(&done.place, &done.config, Some(&path))
                );
            }
            Ok(error::exit_code(done.sweep.outcome()))
        }
        Command::Bench { sweep, baseline } => {
            let done = sweep.measure(cli.json, &env, None, Some(baseline.as_deref()))?;
            if cli.json {
                println!(
                    "{:#}",
                    done.sweep.json(done.place.device(), &done.config, None)
                );
            } else {
                print!("{}", done.sweep.text(&done.place, &done.config, None));
            }
            Ok(error::exit_code(done.sweep.outcome()))
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
    let tables: Vec<&fp8_linear::Table> = BUILTIN
        .tables()
        .iter()
        .chain(fp8_linear::tables::GROUPED.tables())
        .copied()
        .collect();
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
                "kind": t.kind.name(),
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
        let kind = match t.kind {
            fp8_linear::LayerKind::Linear => String::new(),
            k => format!(" {k}"),
        };
        println!("{} ({} {}{kind}):", t.name, t.platform, t.family);
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
