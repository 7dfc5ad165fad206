//! `run <dir>` on a checkpoint's mixture-of-experts layers: each expert group (one per
//! projection) built as one `GroupedLinear`, run on tokens routed to `top_k` experts each
//! from a seeded distribution, in every call form (offsets, expert ids with padding rows,
//! masked), and checked against the grouped f64 reference.
//!
//! The experts run on the CPU here, also in a GPU run (the report says so): `plan` shows the
//! grouped CUDA kernel each GPU would run, and the MoE bench times them.

use std::time::Instant;

use fp8_linear::cpu::CpuGroupedReference;
use fp8_linear::{
    DType, GroupedLinear, LayerConfig, Options, Registered, Routing, Target, Tensor, TensorMut,
};
use fp8_linear_checkpoint::{Checkpoint, ExpertGroup};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

use crate::check::tolerance;
use crate::error::CliError;
use crate::run_layer::random_activations;

/// Experts each token is routed to (fewer when the layer has fewer experts).
pub const TOP_K: usize = 2;

/// Rows each expert's run is padded to in the expert-ids form (padding rows have id -1),
/// as the contiguous layouts of grouped GEMMs pad them.
const ID_ALIGN: usize = 4;

/// The outcome of one expert group.
pub struct MoeResult {
    name: String,
    experts: usize,
    n: usize,
    k: usize,
    /// Rows routed to each expert.
    counts: Vec<usize>,
    kernel: Result<&'static str, String>,
    /// Median seconds of the offsets-form call.
    seconds: f64,
    /// Per call form: its relative error against the reference and the tolerance.
    forms: Vec<(&'static str, f64, f64)>,
    /// Why a call failed, or rows the kernel wrote that no expert owns / left unwritten.
    failure: Option<String>,
}

impl MoeResult {
    /// Whether the kernel ran every form within tolerance.
    pub fn ok(&self) -> bool {
        self.kernel.is_ok()
            && self.failure.is_none()
            && self.forms.iter().all(|&(_, e, tol)| e < tol)
    }

    /// Whether no kernel could be built.
    pub fn unserved(&self) -> bool {
        self.kernel.is_err()
    }

    /// Whether it failed to run (as opposed to failing a check).
    pub fn failed(&self) -> bool {
        self.failure.is_some()
    }

    /// The kernel, the median seconds of its offsets-form call and the FLOPs of that call
    /// (`2 * M_sum * N * K`), when it ran.
    pub fn timed(&self) -> Option<(&'static str, f64, f64)> {
        let kernel = *self.kernel.as_ref().ok()?;
        let rows: usize = self.counts.iter().sum();
        (self.failure.is_none())
            .then(|| (kernel, self.seconds, 2.0 * (rows * self.n * self.k) as f64))
    }
}

/// Host activations or outputs in a layer's dtype.
enum Host {
    F32(Vec<f32>),
    Bf16(Vec<half::bf16>),
    F16(Vec<half::f16>),
}

impl Host {
    /// `values` in `dtype`; NaN stays NaN (the poison of outputs).
    fn new(dtype: DType, values: &[f32]) -> Host {
        match dtype {
            DType::Bf16 => Host::Bf16(values.iter().map(|&v| half::bf16::from_f32(v)).collect()),
            DType::F16 => Host::F16(values.iter().map(|&v| half::f16::from_f32(v)).collect()),
            _ => Host::F32(values.to_vec()),
        }
    }

    fn tensor(&self, shape: [usize; 2]) -> Tensor<'_> {
        match self {
            Host::F32(v) => Tensor::f32(v, shape),
            Host::Bf16(v) => Tensor::bf16(v, shape),
            Host::F16(v) => Tensor::f16(v, shape),
        }
    }

    fn tensor_mut(&mut self, shape: [usize; 2]) -> TensorMut<'_> {
        match self {
            Host::F32(v) => TensorMut::f32(v, shape),
            Host::Bf16(v) => TensorMut::bf16(v, shape),
            Host::F16(v) => TensorMut::f16(v, shape),
        }
    }

    fn to_f32(&self) -> Vec<f32> {
        match self {
            Host::F32(v) => v.clone(),
            Host::Bf16(v) => v.iter().map(|x| x.to_f32()).collect(),
            Host::F16(v) => v.iter().map(|x| x.to_f32()).collect(),
        }
    }
}

/// The routing of `tokens` tokens over `experts` experts: each token to `top_k` distinct
/// experts drawn from a seeded, skewed distribution (expert weights from random logits),
/// as a router makes them. Returns the rows per expert (`tokens * top_k` in all).
pub fn route_tokens(tokens: usize, experts: usize, top_k: usize, seed: u64) -> Vec<usize> {
    let mut rng = StdRng::seed_from_u64(seed);
    let weights: Vec<f64> = (0..experts)
        .map(|_| rng.random_range(-1.5f64..1.5).exp())
        .collect();
    let mut counts = vec![0usize; experts];
    let top_k = top_k.min(experts);
    for _ in 0..tokens {
        let mut chosen: Vec<usize> = Vec::with_capacity(top_k);
        while chosen.len() < top_k {
            let free: f64 = (0..experts)
                .filter(|e| !chosen.contains(e))
                .map(|e| weights[e])
                .sum();
            let mut r = rng.random_range(0.0..free);
            let pick = (0..experts)
                .filter(|e| !chosen.contains(e))
                .find(|&e| {
                    r -= weights[e];
                    r < 0.0
                })
                .unwrap_or_else(|| {
                    (0..experts)
                        .rev()
                        .find(|e| !chosen.contains(e))
                        .unwrap_or(0)
                });
            chosen.push(pick);
        }
        for e in chosen {
            counts[e] += 1;
        }
    }
    counts
}

/// A seed from a name (so each group gets its own routing, the same every run).
fn seed_of(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The three call forms of one routing (rows per expert): the offsets of the contiguous
/// rows (expert 0's first), and for the expert-ids and masked forms the contiguous row each
/// of their rows holds (None for a padding row).
struct Forms {
    offsets: Vec<usize>,
    ids: Vec<i32>,
    /// Contiguous row of each expert-ids row (None: padding).
    id_rows: Vec<Option<usize>>,
    /// Contiguous row of each masked row (None: past its expert's count), `M_max` per
    /// expert.
    masked_rows: Vec<Option<usize>>,
}

impl Forms {
    fn new(counts: &[usize]) -> Forms {
        let mut offsets = vec![0];
        for c in counts {
            offsets.push(offsets.last().copied().unwrap_or(0) + c);
        }
        let (mut ids, mut id_rows) = (Vec::new(), Vec::new());
        let m_max = counts.iter().copied().max().unwrap_or(0).max(1);
        let mut masked_rows = vec![None; counts.len() * m_max];
        for (e, &c) in counts.iter().enumerate() {
            let start = offsets[e];
            for r in 0..c.next_multiple_of(ID_ALIGN) {
                let real = r < c;
                ids.push(if real { e as i32 } else { -1 });
                id_rows.push(real.then_some(start + r));
            }
            for r in 0..c {
                masked_rows[e * m_max + r] = Some(start + r);
            }
        }
        Forms {
            offsets,
            ids,
            id_rows,
            masked_rows,
        }
    }
}

/// One call form's call: its input rows, routing and weights, and for each input row the
/// contiguous row it holds (None: no expert owns it).
struct FormCall<'a> {
    form: &'static str,
    input: &'a [f32],
    routing: Routing<'a>,
    weights: &'a [f32],
    rows: &'a [Option<usize>],
}

/// Rows of `src` (`cols` wide) picked by `rows` (None: `fill`).
fn pick(src: &[f32], cols: usize, rows: &[Option<usize>], fill: f32) -> Vec<f32> {
    rows.iter()
        .flat_map(|r| match r {
            Some(i) => src[i * cols..(i + 1) * cols].to_vec(),
            None => vec![fill; cols],
        })
        .collect()
}

/// One grouped call into a NaN-poisoned output; the output as f32 and the seconds.
fn call(
    layer: &mut GroupedLinear,
    c: &LayerConfig,
    x: &[f32],
    routing: &Routing<'_>,
    weights: &[f32],
) -> Result<(Vec<f32>, f64), String> {
    let rows = x.len() / c.k;
    let input = Host::new(c.input_dtype, x);
    let mut out = Host::new(c.output_dtype, &vec![f32::NAN; rows * c.n]);
    let t = Instant::now();
    layer
        .forward(
            &input.tensor([rows, c.k]),
            routing,
            Some(weights),
            &mut out.tensor_mut([rows, c.n]),
        )
        .map_err(|e| format!("{} call: {e}", routing.name()))?;
    Ok((out.to_f32(), t.elapsed().as_secs_f64()))
}

/// The relative error of the rows a form's call owns against the reference rows, and an
/// error when a row no expert owns was written or an owned row left unwritten.
fn compare(
    form: &str,
    got: &[f32],
    rows: &[Option<usize>],
    want: &[f64],
    n: usize,
) -> Result<f64, String> {
    let (mut g, mut w) = (Vec::new(), Vec::new());
    for (i, r) in rows.iter().enumerate() {
        let row = &got[i * n..(i + 1) * n];
        match r {
            Some(j) => {
                if row.iter().any(|v| v.is_nan()) {
                    return Err(format!(
                        "{form}: row {i} (owned by an expert) was not written"
                    ));
                }
                g.extend_from_slice(row);
                w.extend_from_slice(&want[j * n..(j + 1) * n]);
            }
            None if row.iter().any(|v| !v.is_nan()) => {
                return Err(format!("{form}: row {i} (padding, no expert) was written"));
            }
            None => {}
        }
    }
    Ok(fp8_linear::cpu::reference::rel_frobenius(&g, &w))
}

/// Runs one expert group for `tokens` tokens: every form on the planned grouped kernel,
/// checked against the grouped f64 reference.
fn run_group(
    ck: &Checkpoint,
    g: &ExpertGroup,
    tokens: usize,
    iters: usize,
    options: &Options,
) -> Result<MoeResult, CliError> {
    let c = g.config;
    let experts = g.experts.len();
    let counts = route_tokens(tokens, experts, TOP_K, seed_of(&g.name));
    let mut res = MoeResult {
        name: g.name.clone(),
        experts,
        n: c.n,
        k: c.k,
        counts: counts.clone(),
        kernel: Err(String::new()),
        seconds: 0.0,
        forms: Vec::new(),
        failure: None,
    };
    let tensors = ck
        .grouped_tensors(g)
        .map_err(crate::error::checkpoint_error)?;
    let cpu = Target::cpu();
    let mut layer = match GroupedLinear::new(&cpu, &c, &tensors.view(), options) {
        Ok(l) => l,
        Err(e) => {
            res.kernel = Err(e.to_string());
            return Ok(res);
        }
    };
    let m_sum: usize = counts.iter().sum();
    res.kernel = Ok(layer.plan().entry_for(m_sum).map_or("?", |e| e.name));
    let forms = Forms::new(&counts);
    let x = random_activations(&c, m_sum)?;
    let mut rng = StdRng::seed_from_u64(seed_of(&g.name) ^ 1);
    let w: Vec<f32> = (0..m_sum).map(|_| rng.random_range(0.05f32..1.0)).collect();
    // The reference: the grouped f64 kernel, f32 output, on the contiguous rows.
    let ref_config = LayerConfig {
        output_dtype: DType::F32,
        ..c
    };
    let mut reference = GroupedLinear::with_entry(
        &<CpuGroupedReference as Registered>::ENTRY,
        &cpu,
        &ref_config,
        &tensors.view(),
        &options.kernel,
    )
    .map_err(|e| CliError::runtime(format!("experts {}: reference: {e}", g.name)))?;
    let offsets = Routing::Offsets(&forms.offsets);
    let want: Vec<f64> = call(&mut reference, &ref_config, &x, &offsets, &w)
        .map_err(|e| CliError::runtime(format!("experts {}: reference {e}", g.name)))?
        .0
        .into_iter()
        .map(f64::from)
        .collect();
    let tol = tolerance(c.output_dtype);
    let contiguous: Vec<Option<usize>> = (0..m_sum).map(Some).collect();
    let id_x = pick(&x, c.k, &forms.id_rows, 0.0);
    let id_w: Vec<f32> = forms
        .id_rows
        .iter()
        .map(|r| r.map_or(0.0, |i| w[i]))
        .collect();
    let masked_x = pick(&x, c.k, &forms.masked_rows, 0.0);
    let masked_w: Vec<f32> = forms
        .masked_rows
        .iter()
        .map(|r| r.map_or(0.0, |i| w[i]))
        .collect();
    let runs = [
        FormCall {
            form: "offsets",
            input: &x,
            routing: offsets,
            weights: &w,
            rows: &contiguous,
        },
        FormCall {
            form: "expert ids",
            input: &id_x,
            routing: Routing::ExpertIds(&forms.ids),
            weights: &id_w,
            rows: &forms.id_rows,
        },
        FormCall {
            form: "masked",
            input: &masked_x,
            routing: Routing::Masked(&counts),
            weights: &masked_w,
            rows: &forms.masked_rows,
        },
    ];
    for FormCall {
        form,
        input,
        routing,
        weights,
        rows,
    } in runs
    {
        let mut times = Vec::new();
        let mut last = Vec::new();
        for _ in 0..if form == "offsets" { iters.max(1) } else { 1 } {
            match call(&mut layer, &c, input, &routing, weights) {
                Ok((out, secs)) => {
                    times.push(secs);
                    last = out;
                }
                Err(e) => {
                    res.failure = Some(e);
                    return Ok(res);
                }
            }
        }
        if form == "offsets" {
            times.sort_by(f64::total_cmp);
            res.seconds = times[times.len() / 2];
        }
        match compare(form, &last, rows, &want, c.n) {
            Ok(e) => res.forms.push((form, e, tol)),
            Err(e) => {
                res.failure = Some(e);
                return Ok(res);
            }
        }
    }
    Ok(res)
}

/// Runs every expert group of the checkpoint (or those whose name contains `only`) for
/// `tokens` tokens.
pub fn run_groups(
    ck: &Checkpoint,
    tokens: usize,
    iters: usize,
    only: Option<&str>,
    options: &Options,
) -> Result<Vec<MoeResult>, CliError> {
    ck.expert_groups()
        .iter()
        .filter(|g| only.is_none_or(|t| g.name.contains(t)))
        .map(|g| run_group(ck, g, tokens, iters, options))
        .collect()
}

/// The report's section on the expert groups (empty when there are none); `on_gpu` adds
/// that they ran on the CPU.
pub fn text(results: &[MoeResult], tokens: usize, on_gpu: bool) -> String {
    if results.is_empty() {
        return String::new();
    }
    let mut s = format!(
        "\nmixture-of-experts layers: {} (one per projection), {tokens} tokens routed to {TOP_K} experts each (seeded); every form checked against the grouped f64 reference:\n",
        results.len()
    );
    if on_gpu {
        s += "  (run checks the expert groups on the CPU: these ran there; `plan` shows each \
              GPU's grouped kernel)\n";
    }
    let w = results.iter().map(|r| r.name.len()).max().unwrap_or(5);
    for r in results {
        let shape = format!("{} x N={} K={}", r.experts, r.n, r.k);
        match &r.kernel {
            Err(e) => {
                s += &format!("  {:<w$}  {shape}  NO KERNEL:\n", r.name);
                for line in e.lines() {
                    s += &format!("      {line}\n");
                }
            }
            Ok(k) => {
                s += &format!(
                    "  {:<w$}  {shape}  {k}  {:.3} ms  rows per expert {:?}",
                    r.name,
                    r.seconds * 1e3,
                    r.counts
                );
                for (form, e, tol) in &r.forms {
                    s += &format!(
                        "  {form}: {e:.2e} {}",
                        if e < tol { "ok" } else { "FAILED" }
                    );
                }
                if let Some(f) = &r.failure {
                    s += &format!("  FAILED: {f}");
                }
                s.push('\n');
            }
        }
    }
    s
}

/// The expert groups as JSON.
pub fn json(results: &[MoeResult]) -> Value {
    json!(results
        .iter()
        .map(|r| json!({
            "name": r.name, "experts": r.experts, "n": r.n, "k": r.k,
            "rows_per_expert": r.counts,
            "kernel": r.kernel.as_ref().ok(),
            "error": r.kernel.as_ref().err().or(r.failure.as_ref()),
            "seconds": r.seconds,
            "forms": r.forms.iter().map(|(f, e, t)| json!({"form": f, "rel_error": e, "tolerance": t})).collect::<Vec<_>>(),
            "ok": r.ok(),
        }))
        .collect::<Vec<_>>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routing_is_seeded_and_counts_every_token_top_k_times() {
        let a = route_tokens(37, 5, 2, 9);
        assert_eq!(a.iter().sum::<usize>(), 74);
        assert_eq!(a, route_tokens(37, 5, 2, 9));
        assert!(a.iter().all(|&c| c <= 37));
        assert_eq!(route_tokens(3, 1, 2, 0), [3]);
    }

    #[test]
    fn forms_pad_ids_and_slab_the_masked_rows() {
        let f = Forms::new(&[1, 0, 5]);
        assert_eq!(f.offsets, [0, 1, 1, 6]);
        assert_eq!(f.ids.len(), 4 + 8);
        assert_eq!(&f.ids[..4], &[0, -1, -1, -1]);
        assert_eq!(f.id_rows[4], Some(1));
        assert_eq!(f.masked_rows.len(), 3 * 5);
        assert_eq!(f.masked_rows[0], Some(0));
        assert_eq!(f.masked_rows[1], None);
        assert_eq!(f.masked_rows[10], Some(1));
    }
}
