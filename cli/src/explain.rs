//! `explain`: the decision table for a layer on a device.

use fp8_linear::{Device, Explanation, LayerConfig, Verdict};
use serde_json::{json, Value};

/// Renders an explanation for humans.
pub fn render_text(device: &Device, config: &LayerConfig, ex: &Explanation) -> String {
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
        "  {:>4}  {:<w$}  {:<34}  verdict\n",
        "prio", "kernel", "arch"
    );
    for c in &ex.candidates {
        let mark = match c.verdict {
            Verdict::Chosen => "->",
            v if v.runnable() => " +",
            _ => " x",
        };
        s += &format!(
            "{mark}{:>4}  {:<w$}  {:<34}  {}\n",
            c.entry.priority,
            c.entry.name,
            c.entry.arch.to_string(),
            c.verdict
        );
    }
    if let Some((name, v)) = &ex.force_rejected {
        s += &format!("\nforced kernel {name} {v}; fell back to the table order\n");
    }
    match (ex.chosen, &ex.error) {
        (Some(i), _) => {
            let name = ex.candidates[i].entry.name;
            s += &format!("\nchosen: {name}\n");
            #[cfg(feature = "cuda")]
            if name == fp8_linear::cuda::DecodeBlockFp8::NAME {
                s += &format!(
                    "        {}\n",
                    fp8_linear::cuda::decode::describe(device, config)
                );
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

/// Renders an explanation as JSON.
pub fn render_json(device: &Device, config: &LayerConfig, ex: &Explanation) -> Value {
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
            "backend": c.entry.backend,
            "runnable": c.verdict.runnable(),
            "verdict": c.verdict.to_string(),
        })).collect::<Vec<_>>(),
        "chosen": ex.chosen.map(|i| ex.candidates[i].entry.name),
        "force_rejected": ex.force_rejected.map(|(n, v)| json!({"kernel": n, "reason": v.to_string()})),
        "error": ex.error.as_ref().map(|e| e.to_string()),
        "note": ex.chosen.is_none().then(|| fp8_linear::tables::below_every_cuda_kernel(device)).flatten(),
    })
}
