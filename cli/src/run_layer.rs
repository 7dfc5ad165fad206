//! `run` without a checkpoint: a random FP8 layer of the given shape on the current device,
//! checked against the f64 reference of the numerics its kernel implements.

use std::time::Instant;

use fp8_linear::cpu::{quantize, reference};
use fp8_linear::fp8::{e4m3_to_f32, f32_to_e4m3};
use fp8_linear::{
    DType, LayerConfig, LayerWeights, Linear, Options, Registry, Tensor, TensorMut, TuningFile,
};
use rand::Rng;
use serde_json::{json, Value};

use crate::check::{tolerance, Reference};
use crate::place::{choose, Place};

/// The outcome of one run.
pub struct RunReport {
    /// Kernel that ran.
    pub kernel: &'static str,
    /// Device it ran on.
    pub device: String,
    /// The reference it was checked against (`w8a8` or `w8a16`).
    pub reference: &'static str,
    /// Rows checked against the reference.
    pub rows_checked: usize,
    /// Relative Frobenius error on those rows.
    pub rel_error: f64,
    /// The tolerance on `rel_error`.
    pub tolerance: f64,
    /// A forced kernel that could not run, and what ran instead.
    pub force_note: Option<String>,
    /// Median time of one call, seconds.
    pub seconds: f64,
    /// M, N, K.
    pub mnk: (usize, usize, usize),
}

impl RunReport {
    /// Throughput in TFLOP/s.
    pub fn tflops(&self) -> f64 {
        let (m, n, k) = self.mnk;
        2.0 * (m * n * k) as f64 / self.seconds / 1e12
    }

    /// Whether the output is within tolerance of the reference.
    pub fn ok(&self) -> bool {
        self.rel_error < self.tolerance
    }

    /// Human-readable summary.
    pub fn text(&self) -> String {
        let (m, n, k) = self.mnk;
        let mut s = format!(
            "kernel:    {}\ndevice:    {}\nshape:     M={m} N={n} K={k}\n",
            self.kernel, self.device
        );
        if let Some(note) = &self.force_note {
            s += &format!("forced:    {note}\n");
        }
        s += &format!(
            "check:     checked against the {} reference (f64): {:.3e} relative Frobenius (< {:.0e}), {} rows -> {}\ntime:      {:.3} ms per call (median)\nthroughput: {:.2} GFLOP/s\n",
            self.reference,
            self.rel_error,
            self.tolerance,
            self.rows_checked,
            if self.ok() { "ok" } else { "FAILED" },
            self.seconds * 1e3,
            self.tflops() * 1e3
        );
        s
    }

    /// Machine-readable summary.
    pub fn json(&self) -> Value {
        let (m, n, k) = self.mnk;
        json!({
            "kernel": self.kernel, "device": self.device, "m": m, "n": n, "k": k,
            "reference": self.reference, "rel_error": self.rel_error,
            "tolerance": self.tolerance, "rows_checked": self.rows_checked,
            "ok": self.ok(), "force_rejected": self.force_note,
            "seconds": self.seconds, "tflops": self.tflops(),
        })
    }
}

/// A random layer's weights: FP8 codes `[n, k]`, f32 scales in the config's shape spread
/// over 8 binades, and a static input scale (used by static activation keys only).
pub struct RandomWeights {
    /// FP8 codes `[n, k]`.
    pub codes: Vec<u8>,
    /// Weight scales in the config's scale shape.
    pub scales: Vec<f32>,
    /// Static input scale.
    pub input_scale: [f32; 1],
    scale_shape: [usize; 2],
    nk: [usize; 2],
}

impl RandomWeights {
    /// Fresh random weights for `config`.
    pub fn new(config: &LayerConfig) -> Self {
        let mut rng = rand::rng();
        let [r, c] = config.weight_scale_shape();
        let scales = (0..r * c)
            .map(|_| 2f32.powi(rng.random_range(-4..=4)) * rng.random_range(0.5f32..1.0) / 448.0)
            .collect();
        let codes = (0..config.n * config.k)
            .map(|_| f32_to_e4m3(rng.random_range(-448.0f32..448.0)))
            .collect();
        RandomWeights {
            codes,
            scales,
            input_scale: [0.02],
            scale_shape: [r, c],
            nk: [config.n, config.k],
        }
    }

    /// Views of the weights as a kernel's `process_weights` takes them.
    pub fn weights(&self) -> LayerWeights<'_> {
        LayerWeights {
            weight: Tensor::fp8(&self.codes, self.nk),
            weight_scale: Tensor::f32(&self.scales, self.scale_shape),
            input_scale: Some(Tensor::f32(&self.input_scale, [1, 1])),
            input_scale_ub: None,
            bias: None,
        }
    }
}

/// The values a kernel sees after conversion of `x` to the input dtype, back in f32.
pub fn to_dtype_bits(x: &[f32], dtype: DType) -> Vec<f32> {
    match dtype {
        DType::Bf16 => x
            .iter()
            .map(|v| half::bf16::from_f32(*v).to_f32())
            .collect(),
        DType::F16 => x.iter().map(|v| half::f16::from_f32(*v).to_f32()).collect(),
        _ => x.to_vec(),
    }
}

/// f64 reference output of a random layer for selected rows of `x`, computed for `config`
/// (pass the kernel's [`Reference`] config).
pub fn reference_rows(
    config: &LayerConfig,
    x: &[f32],
    rows: &[usize],
    codes: &[u8],
    scales: &[f32],
    input_scale: f32,
) -> Vec<f64> {
    let (n, k) = (config.n, config.k);
    let xs: Vec<f32> = rows
        .iter()
        .flat_map(|&i| x[i * k..(i + 1) * k].to_vec())
        .collect();
    let r = rows.len();
    let [_, sc] = config.weight_scale_shape();
    let wscale = |j: usize, kk: usize| match config.weight.group {
        fp8_linear::GroupShape::Block { rows, cols } => {
            scales[(j / rows as usize) * sc + kk / cols as usize]
        }
        fp8_linear::GroupShape::PerTensor => scales[0],
        _ => scales[j],
    };
    match config.activation.map(|a| a.group) {
        Some(fp8_linear::GroupShape::Group { cols }) => {
            let (q, s) = quantize::per_token_group(&xs, r, k, cols as usize);
            reference::weight_only_f64(
                &deq_groups(&q, &s, r, k, cols as usize),
                codes,
                r,
                n,
                k,
                wscale,
            )
        }
        Some(fp8_linear::GroupShape::PerTensor) => {
            let mut q = vec![0u8; r * k];
            quantize::per_tensor_into(&xs, Some(input_scale), &mut q);
            let a: Vec<f32> = q.iter().map(|&c| e4m3_to_f32(c) * input_scale).collect();
            reference::weight_only_f64(&a, codes, r, n, k, wscale)
        }
        Some(_) => {
            let mut q = vec![0u8; r * k];
            let mut s = vec![0f32; r];
            quantize::per_token_into(&xs, k, None, &mut q, &mut s);
            let a: Vec<f32> = q
                .iter()
                .enumerate()
                .map(|(i, &c)| e4m3_to_f32(c) * s[i / k])
                .collect();
            reference::weight_only_f64(&a, codes, r, n, k, wscale)
        }
        None => reference::weight_only_f64(&xs, codes, r, n, k, wscale),
    }
}

fn deq_groups(q: &[u8], s: &[f32], m: usize, k: usize, g: usize) -> Vec<f32> {
    let groups = k.div_ceil(g);
    (0..m * k)
        .map(|idx| e4m3_to_f32(q[idx]) * s[(idx / k) * groups + (idx % k) / g])
        .collect()
}

/// Runs one forward call of a layer on `x` (`[m, k]` f32 values already representable in
/// the input dtype) and writes the output as f32; returns the seconds the call took.
pub trait Executor {
    /// One timed forward call.
    fn forward(
        &mut self,
        linear: &mut Linear,
        config: &LayerConfig,
        x: &[f32],
        m: usize,
        out: &mut [f32],
    ) -> Result<f64, String>;
}

/// Runs layers on host memory (CPU kernels).
pub struct HostExecutor;

impl Executor for HostExecutor {
    fn forward(
        &mut self,
        linear: &mut Linear,
        config: &LayerConfig,
        x: &[f32],
        m: usize,
        out: &mut [f32],
    ) -> Result<f64, String> {
        let k = config.k;
        let xb: Vec<half::bf16>;
        let xh: Vec<half::f16>;
        let input = match config.input_dtype {
            DType::Bf16 => {
                xb = x.iter().map(|v| half::bf16::from_f32(*v)).collect();
                Tensor::bf16(&xb, [m, k])
            }
            DType::F16 => {
                xh = x.iter().map(|v| half::f16::from_f32(*v)).collect();
                Tensor::f16(&xh, [m, k])
            }
            _ => Tensor::f32(x, [m, k]),
        };
        let t = Instant::now();
        run_out(linear, &input, config, out).map_err(|e| e.to_string())?;
        Ok(t.elapsed().as_secs_f64())
    }
}

/// Runs a random layer of `m` rows on the place's target with the kernel selected from
/// `registry` (autotune winners first) and `exec`, and checks sampled rows against the f64
/// reference of the numerics that kernel implements.
#[allow(clippy::too_many_arguments)]
pub fn run_random(
    registry: &Registry,
    place: &Place,
    config: &LayerConfig,
    m: usize,
    iters: usize,
    options: &Options,
    tuning: &TuningFile,
    exec: &mut dyn Executor,
) -> Result<RunReport, String> {
    let rw = RandomWeights::new(config);
    let choice = choose(
        registry,
        place,
        config,
        Some((m, tuning)),
        &options.overrides,
    )?;
    let mut linear = Linear::with_entry(
        choice.entry,
        &place.target,
        config,
        &rw.weights(),
        &options.kernel,
    )
    .map_err(|e| e.to_string())?;
    let mut rng = rand::rng();
    let x: Vec<f32> = (0..m * config.k)
        .map(|_| rng.random_range(-1.0f32..1.0))
        .collect();
    let x = to_dtype_bits(&x, config.input_dtype);
    let mut out = vec![f32::NAN; m * config.n];
    // One untimed call (module load, first-touch), then the timed ones.
    exec.forward(&mut linear, config, &x, m, &mut out)?;
    let mut times = Vec::with_capacity(iters);
    for _ in 0..iters.max(1) {
        times.push(exec.forward(&mut linear, config, &x, m, &mut out)?);
    }
    times.sort_by(f64::total_cmp);
    let rows: Vec<usize> = sample_rows(m);
    let refr = Reference::for_kernel(linear.entry(), config);
    let want = reference_rows(
        &refr.config,
        &x,
        &rows,
        &rw.codes,
        &rw.scales,
        rw.input_scale[0],
    );
    let got = gather_rows(&out, config.n, &rows);
    Ok(RunReport {
        kernel: linear.entry().name,
        device: place.device().to_string(),
        reference: refr.label,
        rows_checked: rows.len(),
        rel_error: reference::rel_frobenius(&got, &want),
        tolerance: tolerance(config.output_dtype),
        force_note: choice.force_note,
        seconds: times[times.len() / 2],
        mnk: (m, config.n, config.k),
    })
}

/// The given rows of an `[m, n]` output.
pub fn gather_rows(out: &[f32], n: usize, rows: &[usize]) -> Vec<f32> {
    rows.iter()
        .flat_map(|&i| out[i * n..(i + 1) * n].iter().copied())
        .collect()
}

fn run_out(
    linear: &mut Linear,
    input: &Tensor<'_>,
    config: &LayerConfig,
    out: &mut [f32],
) -> Result<(), fp8_linear::KernelError> {
    let m = input.shape[0];
    match config.output_dtype {
        DType::Bf16 => {
            let mut o = vec![half::bf16::ZERO; out.len()];
            linear.forward(input, &mut TensorMut::bf16(&mut o, [m, config.n]))?;
            out.iter_mut().zip(&o).for_each(|(d, s)| *d = s.to_f32());
        }
        DType::F16 => {
            let mut o = vec![half::f16::ZERO; out.len()];
            linear.forward(input, &mut TensorMut::f16(&mut o, [m, config.n]))?;
            out.iter_mut().zip(&o).for_each(|(d, s)| *d = s.to_f32());
        }
        _ => linear.forward(input, &mut TensorMut::f32(out, [m, config.n]))?,
    }
    Ok(())
}

/// Up to 16 rows spread over M, always including the first and last.
pub fn sample_rows(m: usize) -> Vec<usize> {
    if m <= 16 {
        return (0..m).collect();
    }
    let mut v: Vec<usize> = (0..16).map(|i| i * (m - 1) / 15).collect();
    v.dedup();
    v
}
