//! The autotune pass: time every kernel that can run a layer on this device, for a few M,
//! and record the fastest per M bucket in a [`TuningFile`] that `plan_tuned` (and
//! `select_tuned`) consult.

use fp8_linear_core::tuning::device_key;
use fp8_linear_core::{
    Device, KernelEntry, LayerConfig, Overrides, Registry, SelectError, TuningFile,
};

/// One timed candidate.
#[derive(Clone, Debug)]
pub struct Measurement {
    /// Rows of the activations.
    pub m: usize,
    /// The kernel.
    pub kernel: &'static str,
    /// Seconds per call, or why it could not be timed.
    pub seconds: Result<f64, String>,
    /// Whether it was the fastest at this M.
    pub winner: bool,
}

/// Times every runnable candidate for `config` on `device` at each M in `ms` it serves
/// (its `rows`) with `time`
/// (which builds and runs the kernel and returns seconds per call), records the winner of
/// each M in `tuning`, and returns every measurement.
pub fn autotune_layer(
    registry: &Registry,
    device: &Device,
    config: &LayerConfig,
    ms: &[usize],
    overrides: &Overrides,
    tuning: &mut TuningFile,
    mut time: impl FnMut(&'static KernelEntry, usize) -> Result<f64, String>,
) -> Result<Vec<Measurement>, SelectError> {
    let ex = registry.explain(device, config, overrides)?;
    if let Some(e) = ex.error {
        return Err(e);
    }
    let candidates: Vec<&'static KernelEntry> = ex
        .candidates
        .iter()
        .filter(|c| c.verdict.runnable())
        .map(|c| c.entry)
        .collect();
    let key = device_key(device);
    let mut out = Vec::new();
    for &m in ms {
        let first = out.len();
        // A kernel is timed at the rows it serves (a plan never gives it others).
        for &entry in candidates.iter().filter(|e| e.rows.contains(m)) {
            out.push(Measurement {
                m,
                kernel: entry.name,
                seconds: time(entry, m),
                winner: false,
            });
        }
        let best = out[first..]
            .iter()
            .enumerate()
            .filter_map(|(i, x)| x.seconds.as_ref().ok().map(|s| (i, *s)))
            .min_by(|a, b| a.1.total_cmp(&b.1));
        if let Some((i, s)) = best {
            out[first + i].winner = true;
            tuning.insert(fp8_linear_core::tuning::Winner {
                device: key.clone(),
                family: config.family(),
                n: config.n,
                k: config.k,
                m_bucket: fp8_linear_core::tuning::m_bucket(m),
                kernel: out[first + i].kernel.to_string(),
                seconds: s,
            });
        }
    }
    Ok(out)
}
