//! `plan`: for every quantized layer of a checkpoint, the config it implies and the kernel
//! each device would run, grouped by identical configs, with totals.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use fp8_linear::tables::{BUILTIN, GROUPED};
use fp8_linear::{Device, LayerConfig, Options, Overrides, Plan as LayerPlan, Registry};
use fp8_linear_checkpoint::Checkpoint;
use serde_json::{json, Value};

use crate::error::{CliError, Kind};
use crate::layer_args::OverrideArgs;

/// Arguments of `plan`.
#[derive(Args, Debug, Clone)]
pub struct PlanArgs {
    /// Checkpoint directory (config.json and *.safetensors).
    pub dir: PathBuf,
    /// Devices to plan for: profiles (a100, h100, h200, rtx3090, sm89, cpu...) or `auto`
    /// for the detected device; comma separated or repeated.
    #[arg(long, value_delimiter = ',', default_value = "auto")]
    pub device: Vec<String>,
    /// Exit with status 3 (no kernel) when some layer cannot be served on some device.
    #[arg(long)]
    pub strict: bool,
    /// Shard every layer over this many GPUs, as engines do (column-parallel q/k/v/gate/up
    /// split N, row-parallel o/down split K) and plan each shard.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub tp: Option<u16>,
    #[command(flatten)]
    pub overrides: OverrideArgs,
}

/// Human-readable byte count (decimal units).
pub fn bytes(b: usize) -> String {
    let b = b as f64;
    if b >= 1e9 {
        format!("{:.2} GB", b / 1e9)
    } else if b >= 1e6 {
        format!("{:.2} MB", b / 1e6)
    } else if b >= 1e3 {
        format!("{:.1} KB", b / 1e3)
    } else {
        format!("{b} B")
    }
}

/// Layers sharing one config (and expert count), and what each device would run for it.
struct Group {
    config: LayerConfig,
    /// Experts per layer: 0 for dense layers, E for grouped (mixture-of-experts) ones.
    experts: usize,
    layers: Vec<String>,
    weight_bytes: usize,
    scale_bytes: usize,
    /// Per device: the layer's plan (a kernel per range of M), or the full reason some M
    /// has no kernel.
    choices: Vec<Result<LayerPlan, String>>,
}

struct Plan {
    groups: Vec<Group>,
    /// The mixture-of-experts layers (one per projection), planned from the grouped tables.
    moe: Vec<Group>,
    devices: Vec<(String, Device)>,
}

/// One layer to plan: name, config, experts (0: dense), FP8 bytes, scale bytes.
type Item<'a> = (&'a str, LayerConfig, usize, usize, usize);

/// The layers grouped by (config, experts), each group planned on every device from
/// `registry`.
fn group<'a>(
    items: impl Iterator<Item = Item<'a>>,
    devices: &[(String, Device)],
    registry: &Registry,
    ov: &Overrides,
) -> Vec<Group> {
    let mut groups: Vec<Group> = Vec::new();
    let mut by_config: HashMap<(LayerConfig, usize), usize> = HashMap::new();
    for (name, config, experts, weight_bytes, scale_bytes) in items {
        let i = *by_config.entry((config, experts)).or_insert_with(|| {
            groups.push(Group {
                config,
                experts,
                layers: Vec::new(),
                weight_bytes: 0,
                scale_bytes: 0,
                choices: devices
                    .iter()
                    .map(|(_, d)| registry.plan(d, &config, ov).map_err(|e| e.to_string()))
                    .collect(),
            });
            groups.len() - 1
        });
        let g = &mut groups[i];
        g.layers.push(name.to_string());
        g.weight_bytes += weight_bytes;
        g.scale_bytes += scale_bytes;
    }
    groups
}

fn build(ck: &Checkpoint, devices: Vec<(String, Device)>, ov: &Overrides) -> Plan {
    let dense = ck.layers().iter().map(|l| {
        (
            l.name.as_str(),
            l.config,
            0,
            l.weight_bytes(),
            l.scale_bytes(),
        )
    });
    let moe = ck.expert_groups().iter().map(|g| {
        let e = g.experts.len();
        let l = &g.experts[0];
        (
            g.name.as_str(),
            g.config,
            e,
            e * l.weight_bytes(),
            e * l.scale_bytes(),
        )
    });
    Plan {
        groups: group(dense, &devices, &BUILTIN, ov),
        moe: group(moe, &devices, &GROUPED, ov),
        devices,
    }
}

/// Per device: kernel -> (layers, weight bytes), and the unserved (layers, bytes).
type Totals = (BTreeMap<&'static str, (usize, usize)>, (usize, usize));

impl Plan {
    fn totals(&self, d: usize) -> Totals {
        let mut per_kernel: BTreeMap<&'static str, (usize, usize)> = BTreeMap::new();
        let mut unserved = (0, 0);
        for g in self.groups.iter().chain(&self.moe) {
            let add = |slot: &mut (usize, usize)| {
                slot.0 += g.layers.len();
                slot.1 += g.weight_bytes;
            };
            // A layer counts for every kernel of its plan.
            match &g.choices[d] {
                Ok(p) => p
                    .kernels()
                    .iter()
                    .for_each(|e| add(per_kernel.entry(e.name).or_default())),
                Err(_) => add(&mut unserved),
            }
        }
        (per_kernel, unserved)
    }

    fn all_served(&self) -> bool {
        self.groups
            .iter()
            .chain(&self.moe)
            .all(|g| g.choices.iter().all(|c| c.is_ok()))
    }
}

/// A layer's plan as JSON: `kernel` (the kernel of calls of many rows), `plan` (each range
/// of M and its kernel), `error` null.
pub fn plan_json(p: &LayerPlan) -> Value {
    json!({
        "kernel": p.entry_for(usize::MAX).map(|e| e.name),
        "plan": p.ranges.iter().map(|r| json!({
            "first": r.rows.first(),
            "last": (!r.rows.is_unbounded()).then(|| r.rows.last()),
            "kernel": r.entry.name,
        })).collect::<Vec<_>>(),
        "error": null,
    })
}

/// `CpuFp8Gemm` for a plan of one kernel for every M, else the plan's ranges
/// (`M = 1..=64: HopperBlockFp8; M = 65..: CublasLtBlockFp8`).
pub fn plan_text(p: &LayerPlan) -> String {
    match p.ranges.as_slice() {
        [only] if only.rows == fp8_linear::RowRange::ALL => only.entry.name.to_string(),
        _ => p.to_string(),
    }
}

fn indent(text: &str, pad: &str) -> String {
    text.lines()
        .map(|l| format!("{pad}{l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Each group: its config, its layers, and what each device runs for it.
fn render_groups(groups: &[Group], devices: &[(String, Device)], w: usize) -> String {
    let mut s = String::new();
    for (i, g) in groups.iter().enumerate() {
        let experts = match g.experts {
            0 => String::new(),
            e => format!("{e} experts of "),
        };
        s += &format!(
            "\n[{}] {experts}{} ({} family)\n",
            i + 1,
            g.config,
            g.config.family()
        );
        let shown: Vec<&str> = g.layers.iter().take(4).map(String::as_str).collect();
        let more = g.layers.len().saturating_sub(shown.len());
        s += &format!(
            "    {} layer(s), {} FP8 + {} scales: {}{}\n",
            g.layers.len(),
            bytes(g.weight_bytes),
            bytes(g.scale_bytes),
            shown.join(", "),
            if more > 0 {
                format!(", ... and {more} more")
            } else {
                String::new()
            }
        );
        for ((name, _), c) in devices.iter().zip(&g.choices) {
            match c {
                Ok(p) => s += &format!("    {name:<w$} -> {}\n", plan_text(p)),
                Err(e) => {
                    s += &format!("    {name:<w$} -> NO KERNEL:\n");
                    s += &indent(e, &" ".repeat(w + 10));
                    s.push('\n');
                }
            }
        }
    }
    s
}

fn render_text(ck: &Checkpoint, plan: &Plan) -> String {
    let layers = ck.layers();
    let fp8: usize = layers.iter().map(|l| l.weight_bytes()).sum();
    let scales: usize = layers.iter().map(|l| l.scale_bytes()).sum();
    let other = ck.unquantized();
    let other_bytes: usize = other.iter().map(|(_, t)| t.info.range.len()).sum();
    let mut s = format!("checkpoint: {}\n", ck.dir().display());
    s += &format!("  format:   {}\n", ck.quant().describe());
    s += &format!(
        "  contents: {} file(s), {} tensors: {} quantized linear layers ({} FP8 weights + {} scales), {} other tensors left alone ({})\n",
        ck.shards().len(),
        ck.tensors().len(),
        layers.len(),
        bytes(fp8),
        bytes(scales),
        other.len(),
        bytes(other_bytes)
    );
    let groups = ck.expert_groups();
    if !groups.is_empty() {
        let experts: usize = groups.iter().map(|g| g.experts.len()).sum();
        let fp8: usize = groups
            .iter()
            .flat_map(|g| &g.experts)
            .map(|l| l.weight_bytes())
            .sum();
        s += &format!(
            "  experts:  {} mixture-of-experts layers (one per projection), {experts} experts, {} FP8 weights\n",
            groups.len(),
            bytes(fp8)
        );
    }
    let w = plan.devices.iter().map(|(n, _)| n.len()).max().unwrap_or(4);
    s += "devices:\n";
    for (name, d) in &plan.devices {
        s += &format!("  {name:<w$} = {d}\n");
    }
    s += &format!("\n{} distinct layer configs:\n", plan.groups.len());
    s += &render_groups(&plan.groups, &plan.devices, w);
    if !plan.moe.is_empty() {
        s += &format!(
            "\n{} distinct mixture-of-experts configs (grouped kernels, one layer per projection):\n",
            plan.moe.len()
        );
        s += &render_groups(&plan.moe, &plan.devices, w);
    }
    s += &format!(
        "\ntotals ({} layers, {} FP8 weights{}; a layer counts under each kernel of its plan):\n",
        layers.len(),
        bytes(fp8),
        match plan.moe.len() {
            0 => String::new(),
            _ => format!("; {} mixture-of-experts layers", ck.expert_groups().len()),
        }
    );
    for (d, (name, _)) in plan.devices.iter().enumerate() {
        let (per_kernel, unserved) = plan.totals(d);
        let mut parts: Vec<String> = per_kernel
            .iter()
            .map(|(k, (n, b))| format!("{k}: {n} layers ({})", bytes(*b)))
            .collect();
        if unserved.0 > 0 {
            parts.push(format!(
                "CANNOT SERVE {} layers ({})",
                unserved.0,
                bytes(unserved.1)
            ));
        }
        s += &format!("  {name:<w$}  {}\n", parts.join("; "));
    }
    s
}

/// Each group as JSON: config, layers, sizes, experts (mixture-of-experts groups) and the
/// plan per device.
fn groups_json(groups: &[Group], devices: &[(String, Device)]) -> Vec<Value> {
    groups
        .iter()
        .map(|g| {
            let mut v = json!({
                "config": g.config.to_string(),
                "family": g.config.family().name(),
                "n": g.config.n, "k": g.config.k,
                "layers": g.layers,
                "weight_bytes": g.weight_bytes,
                "scale_bytes": g.scale_bytes,
                "kernels": devices.iter().zip(&g.choices).map(|((n, _), c)| (n.clone(), match c {
                    Ok(p) => plan_json(p),
                    Err(e) => json!({"kernel": null, "error": e}),
                })).collect::<serde_json::Map<String, Value>>(),
            });
            if g.experts > 0 {
                v["experts"] = json!(g.experts);
            }
            v
        })
        .collect()
}

fn render_json(ck: &Checkpoint, plan: &Plan) -> Value {
    let q = ck.quant();
    json!({
        "checkpoint": {
            "dir": ck.dir().display().to_string(),
            "format": q.describe(),
            "block": q.block,
            "static_activations": q.static_activations,
            "files": ck.shards().iter().map(|s| s.path().display().to_string()).collect::<Vec<_>>(),
            "tensors": ck.tensors().len(),
            "quantized_layers": ck.layers().len(),
            "unquantized_tensors": ck.unquantized().iter().map(|(n, _)| *n).collect::<Vec<_>>(),
            "fp8_bytes": ck.layers().iter().map(|l| l.weight_bytes()).sum::<usize>(),
        },
        "devices": plan.devices.iter().map(|(n, d)| json!({
            "name": n, "device": d.to_string(),
            "capability": d.capability.map(|c| c.to_string()),
        })).collect::<Vec<_>>(),
        "groups": groups_json(&plan.groups, &plan.devices),
        "moe_groups": groups_json(&plan.moe, &plan.devices),
        "totals": plan.devices.iter().enumerate().map(|(d, (n, _))| {
            let (per_kernel, unserved) = plan.totals(d);
            (n.clone(), json!({
                "kernels": per_kernel.iter().map(|(k, (l, b))| (k.to_string(), json!({"layers": l, "weight_bytes": b}))).collect::<serde_json::Map<String, Value>>(),
                "unserved_layers": unserved.0,
                "unserved_weight_bytes": unserved.1,
            }))
        }).collect::<serde_json::Map<String, Value>>(),
        "all_served": plan.all_served(),
    })
}

/// Runs `plan` with the environment's options `env` (the command line's overrides on top).
pub fn run(args: &PlanArgs, json: bool, env: &Options) -> Result<ExitCode, CliError> {
    let options = args.overrides.options(env)?;
    let devices = args
        .device
        .iter()
        .map(|d| crate::resolve_target(d, json).map(|t| (d.clone(), t.device().clone())))
        .collect::<Result<Vec<_>, _>>()?;
    let ck = Checkpoint::open(&args.dir).map_err(crate::error::checkpoint_error)?;
    if let Some(tp) = args.tp {
        let plan = crate::plan_tp::build(&ck, tp as usize, devices, &options.overrides);
        if json {
            println!("{:#}", plan.render_json());
        } else {
            print!("{}", plan.render_text());
        }
        return Ok(if args.strict && !plan.all_served() {
            Kind::NoKernel.exit()
        } else {
            ExitCode::SUCCESS
        });
    }
    let plan = build(&ck, devices, &options.overrides);
    if json {
        println!("{:#}", render_json(&ck, &plan));
    } else {
        print!("{}", render_text(&ck, &plan));
    }
    Ok(if args.strict && !plan.all_served() {
        Kind::NoKernel.exit()
    } else {
        ExitCode::SUCCESS
    })
}
