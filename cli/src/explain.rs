//! `explain`: the decision table for a layer on a device.

use fp8_linear::{Choice, Device, Explanation, LayerConfig, Verdict};
use serde_json::{json, Value};

/// Renders an explanation for humans: the candidates, the chosen kernel per range of M, and
/// for each M of `ms` the kernel a call of that many rows runs.
pub fn render_text(
    device: &Device,
    config: &LayerConfig,
    ex: &Explanation,
    ms: &[usize],
) -> String {
    let mut s = String::new();
    s += &format!("device: {device}\n");
    s += &format!("layer:  {config}\n");
    s += &format!(
        "table:  {} ({} {}, {} candidates, tried in order)\n\n",
        ex.table.name,
        ex.table.platform,
        ex.table.family,
        ex.candidates.len()
    );
    let w = ex
        .candidates
        .iter()
        .map(|c| c.entry.name.len())
        .max()
        .unwrap_or(6)
        .max(6);
    s += &format!(
        "  {:>4}  {:<w$}  {:<34}  {:<6}  verdict\n",
        "prio", "kernel", "arch", "rows"
    );
    for c in &ex.candidates {
        let mark = match c.verdict {
            Verdict::Chosen => "->",
            v if v.runnable() => " +",
            _ => " x",
        };
        s += &format!(
            "{mark}{:>4}  {:<w$}  {:<34}  {:<6}  {}\n",
            c.entry.priority,
            c.entry.name,
            c.entry.arch.to_string(),
            c.entry.rows.to_string(),
            c.verdict
        );
    }
    if let Some((name, v)) = ex.force_rejected() {
        s += &format!("\nforced kernel {name} {v}; fell back to the table order\n");
    }
    match (&ex.plan, &ex.error) {
        (Some(plan), _) => {
            s += &format!("\nchosen: {}\n", chosen_line(plan));
            if plan.ranges.len() > 1 {
                s += "plan (the kernel each call runs, by its rows M):\n";
                for r in &plan.ranges {
                    s += &format!(
                        "  M = {:<8} {}{}\n",
                        r.rows.to_string(),
                        r.entry.name,
                        why(r)
                    );
                }
            }
            if !ms.is_empty() {
                s += "\n";
                for &m in ms {
                    let name = plan.entry_for(m).map_or("no kernel", |e| e.name);
                    s += &format!("M = {m}: {name}\n");
                }
            }
        }
        (None, Some(fp8_linear::SelectError::NoKernel { .. })) => {
            s += "\nno kernel: every candidate above was rejected\n";
            if let Some(note) = fp8_linear::tables::below_every_cuda_kernel(device) {
                s += &format!("note: {note}\n");
            }
        }
        (None, Some(e)) => s += &format!("\nno kernel: {e}\n"),
        (None, None) => {}
    }
    s
}

/// `CpuFp8Gemm` for a plan of one kernel; `HopperBlockFp8 (M = 1..=64), CublasLtBlockFp8 (M =
/// 65..)` for several.
fn chosen_line(plan: &fp8_linear::Plan) -> String {
    if let [only] = plan.ranges.as_slice() {
        if only.rows == fp8_linear::RowRange::ALL {
            return only.entry.name.to_string();
        }
    }
    plan.ranges
        .iter()
        .map(|r| format!("{} (M = {})", r.entry.name, r.rows))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Why a range's kernel was chosen, when not by the table order.
fn why(r: &fp8_linear::PlanRange) -> &'static str {
    match r.choice {
        Choice::Forced => " (forced)",
        Choice::Tuned => " (measured winner, autotune file)",
        Choice::Table => "",
    }
}

/// Renders an explanation as JSON (`plan`: the ranges of M and their kernels; `per_m`: the
/// kernel for each M of `ms`; `chosen`: the kernel of calls of many rows).
pub fn render_json(device: &Device, config: &LayerConfig, ex: &Explanation, ms: &[usize]) -> Value {
    json!({
        "device": device.to_string(),
        "capability": device.capability.map(|c| c.to_string()),
        "layer": config.to_string(),
        "family": config.family().name(),
        "table": ex.table.name,
        "candidates": ex.candidates.iter().map(|c| json!({
            "kernel": c.entry.name,
            "priority": c.entry.priority,
            "arch": c.entry.arch.to_string(),
            "rows": c.entry.rows.to_string(),
            "backend": c.entry.backend,
            "runnable": c.verdict.runnable(),
            "verdict": c.verdict.to_string(),
        })).collect::<Vec<_>>(),
        "chosen": ex.chosen_for(usize::MAX).map(|e| e.name),
        "plan": ex.plan.as_ref().map(|p| p.ranges.iter().map(|r| json!({
            "first": r.rows.first(),
            "last": (!r.rows.is_unbounded()).then(|| r.rows.last()),
            "kernel": r.entry.name,
            "choice": format!("{:?}", r.choice).to_lowercase(),
        })).collect::<Vec<_>>()),
        "per_m": ms.iter().map(|&m| json!({
            "m": m,
            "kernel": ex.chosen_for(m).map(|e| e.name),
        })).collect::<Vec<_>>(),
        "force_rejected": ex.force_rejected().map(|(n, v)| json!({"kernel": n, "reason": v.to_string()})),
        "error": ex.error.as_ref().map(|e| e.to_string()),
        "note": ex.plan.is_none().then(|| fp8_linear::tables::below_every_cuda_kernel(device)).flatten(),
    })
}
