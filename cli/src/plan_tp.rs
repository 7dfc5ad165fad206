//! `plan DIR --tp N`: every quantized layer sharded over N GPUs as engines shard it
//! (column-parallel q/k/v/gate/up split N, row-parallel o/down split K; see
//! `fp8_linear::tensor_parallel`), each shard's config, the kernel each device would run for
//! it, and what each GPU holds in all. Shards that are ragged or cut a scale block are named,
//! with what happens to them.

use std::collections::BTreeMap;

use fp8_linear::tables::BUILTIN;
use fp8_linear::tensor_parallel::{shard, Shard, ShardError, Split};
use fp8_linear::{Device, Overrides, Plan as LayerPlan};
use fp8_linear_checkpoint::Checkpoint;
use serde_json::{json, Value};

use crate::plan::{bytes, plan_json, plan_text};

/// One layer of the plan: its split and its shards (or why it cannot be split).
pub struct TpLayer {
    name: String,
    split: Split,
    n: usize,
    k: usize,
    shards: Result<Vec<TpShard>, ShardError>,
}

/// One shard and, per device, the kernel or the reason none fits.
pub struct TpShard {
    shard: Shard,
    choices: Vec<Result<LayerPlan, String>>,
}

impl TpShard {
    /// Bytes of FP8 weight the shard's GPU holds (padding columns included).
    fn weight_bytes(&self) -> usize {
        self.shard.config.n * self.shard.config.k
    }
}

/// The whole plan.
pub struct TpPlan {
    tp: usize,
    layers: Vec<TpLayer>,
    devices: Vec<(String, Device)>,
}

/// Shards every layer of `ck` over `tp` GPUs and selects a kernel per shard and device.
pub fn build(ck: &Checkpoint, tp: usize, devices: Vec<(String, Device)>, ov: &Overrides) -> TpPlan {
    let layers = ck
        .layers()
        .iter()
        .map(|l| {
            let split = Split::of_layer(&l.name);
            let shards = shard(&l.config, split, tp).map(|shards| {
                shards
                    .into_iter()
                    .map(|s| TpShard {
                        choices: devices
                            .iter()
                            .map(|(_, d)| BUILTIN.plan(d, &s.config, ov).map_err(|e| e.to_string()))
                            .collect(),
                        shard: s,
                    })
                    .collect()
            });
            TpLayer {
                name: l.name.clone(),
                split,
                n: l.config.n,
                k: l.config.k,
                shards,
            }
        })
        .collect();
    TpPlan {
        tp,
        layers,
        devices,
    }
}

/// Per device and rank: kernel -> (shards, bytes), and the unserved (shards, bytes).
type RankTotals = (BTreeMap<&'static str, (usize, usize)>, (usize, usize));

impl TpPlan {
    /// What GPU `rank` holds on device `d`.
    fn totals(&self, d: usize, rank: usize) -> RankTotals {
        let mut per_kernel: BTreeMap<&'static str, (usize, usize)> = BTreeMap::new();
        let mut unserved = (0, 0);
        for l in &self.layers {
            match &l.shards {
                Ok(shards) => {
                    let s = &shards[rank];
                    let add = |slot: &mut (usize, usize)| {
                        slot.0 += 1;
                        slot.1 += s.weight_bytes();
                    };
                    // A shard counts for every kernel of its plan.
                    match &s.choices[d] {
                        Ok(p) => p
                            .kernels()
                            .iter()
                            .for_each(|e| add(per_kernel.entry(e.name).or_default())),
                        Err(_) => add(&mut unserved),
                    }
                }
                Err(_) => {
                    unserved.0 += 1;
                    unserved.1 += l.n * l.k / self.tp;
                }
            }
        }
        (per_kernel, unserved)
    }

    /// Whether every shard of every layer has a kernel on every device.
    pub fn all_served(&self) -> bool {
        self.layers.iter().all(|l| match &l.shards {
            Ok(shards) => shards.iter().all(|s| s.choices.iter().all(Result::is_ok)),
            Err(_) => false,
        })
    }

    /// The plan as text.
    pub fn render_text(&self) -> String {
        let w = self.devices.iter().map(|(n, _)| n.len()).max().unwrap_or(4);
        let mut s = format!(
            "tensor parallel over {} GPUs: column-parallel layers split N (outputs concatenated), \
             row-parallel layers split K (partial outputs summed, bias on rank 0)\n",
            self.tp
        );
        for (name, d) in &self.devices {
            s += &format!("  {name:<w$} = {d}\n");
        }
        for l in &self.layers {
            s += &format!("\n{}  {}-parallel  N={} K={}\n", l.name, l.split, l.n, l.k);
            let shards = match &l.shards {
                Ok(shards) => shards,
                Err(e) => {
                    s += &format!("    CANNOT SHARD: {e}\n");
                    continue;
                }
            };
            for sh in shards {
                let x = &sh.shard;
                s += &format!(
                    "  rank {}: rows {}..{}{} cols {}..{}{}  {}\n",
                    x.rank,
                    x.rows.start,
                    x.rows.end,
                    if x.lead_rows > 0 {
                        format!(" (+{} zero rows in front)", x.lead_rows)
                    } else {
                        String::new()
                    },
                    x.cols.start,
                    x.cols.end,
                    if x.lead_pad > 0 {
                        format!(" (+{} zero cols in front)", x.lead_pad)
                    } else {
                        String::new()
                    },
                    x.config
                );
                for n in &x.notes {
                    s += &format!("    note: {n}\n");
                }
                for ((name, _), c) in self.devices.iter().zip(&sh.choices) {
                    match c {
                        Ok(p) => s += &format!("    {name:<w$} -> {}\n", plan_text(p)),
                        Err(e) => {
                            let first = e.lines().next().unwrap_or("");
                            s += &format!("    {name:<w$} -> NO KERNEL: {first}\n");
                            for line in e.lines().skip(1) {
                                s += &format!("    {:w$}    {line}\n", "");
                            }
                        }
                    }
                }
            }
        }
        s += "\nper GPU (each holds one shard of every layer):\n";
        for (d, (name, _)) in self.devices.iter().enumerate() {
            for rank in 0..self.tp {
                let (per_kernel, unserved) = self.totals(d, rank);
                let held: usize = per_kernel.values().map(|v| v.1).sum::<usize>() + unserved.1;
                let mut parts: Vec<String> = per_kernel
                    .iter()
                    .map(|(k, (n, b))| format!("{k}: {n} shards ({})", bytes(*b)))
                    .collect();
                if unserved.0 > 0 {
                    parts.push(format!(
                        "CANNOT SERVE {} shards ({})",
                        unserved.0,
                        bytes(unserved.1)
                    ));
                }
                s += &format!(
                    "  {name:<w$} GPU {rank}: {} FP8 weights; {}\n",
                    bytes(held),
                    parts.join("; ")
                );
            }
        }
        s
    }

    /// The plan as JSON.
    pub fn render_json(&self) -> Value {
        let kernels = |choices: &[Result<LayerPlan, String>]| {
            self.devices
                .iter()
                .zip(choices)
                .map(|((n, _), c)| {
                    (
                        n.clone(),
                        match c {
                            Ok(p) => plan_json(p),
                            Err(e) => json!({"kernel": null, "error": e}),
                        },
                    )
                })
                .collect::<serde_json::Map<String, Value>>()
        };
        json!({
            "tp": self.tp,
            "devices": self.devices.iter().map(|(n, d)| json!({
                "name": n, "device": d.to_string(),
            })).collect::<Vec<_>>(),
            "layers": self.layers.iter().map(|l| json!({
                "name": l.name,
                "split": l.split.name(),
                "n": l.n,
                "k": l.k,
                "error": l.shards.as_ref().err().map(|e| e.to_string()),
                "shards": l.shards.as_ref().map(|shards| shards.iter().map(|sh| {
                    let x = &sh.shard;
                    json!({
                        "rank": x.rank,
                        "rows": [x.rows.start, x.rows.end],
                        "cols": [x.cols.start, x.cols.end],
                        "lead_rows": x.lead_rows,
                        "lead_pad": x.lead_pad,
                        "n": x.config.n,
                        "k": x.config.k,
                        "config": x.config.to_string(),
                        "weight_group": x.config.weight.group.to_string(),
                        "bias": x.config.bias,
                        "notes": x.notes.iter().map(|n| n.to_string()).collect::<Vec<_>>(),
                        "kernels": kernels(&sh.choices),
                    })
                }).collect::<Vec<_>>()).unwrap_or_default(),
            })).collect::<Vec<_>>(),
            "per_gpu": self.devices.iter().enumerate().map(|(d, (n, _))| {
                (n.clone(), Value::Array((0..self.tp).map(|rank| {
                    let (per_kernel, unserved) = self.totals(d, rank);
                    json!({
                        "rank": rank,
                        "kernels": per_kernel.iter().map(|(k, (c, b))| (k.to_string(), json!({"shards": c, "weight_bytes": b}))).collect::<serde_json::Map<String, Value>>(),
                        "unserved_shards": unserved.0,
                        "unserved_weight_bytes": unserved.1,
                    })
                }).collect::<Vec<_>>()))
            }).collect::<serde_json::Map<String, Value>>(),
            "all_served": self.all_served(),
        })
    }
}
