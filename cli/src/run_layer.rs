//! `run` without a checkpoint: a random FP8 layer of the given shape on the current device,
//! checked against the f64 reference of the numerics its kernel implements.

use fp8_linear::cpu::{quantize, reference};
use fp8_linear::fp8::{e4m3_to_f32, f32_to_e4m3};
use fp8_linear::{DType, LayerConfig, LayerWeights, Linear, Options, Registry, Tensor, TuningFile};
use rand::Rng;
use serde_json::{json, Value};

use crate::check::{count_nan, tolerance, Reference};
use crate::error::{CliError, Kind};
use crate::executor::Executor;
use crate::place::{choose, Place};
use crate::sizes::{try_collect, try_filled};

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
    /// NaN elements in the whole output (unwritten: outputs are poisoned with NaN).
    pub nan_outputs: usize,
}

impl RunReport {
    /// Throughput in TFLOP/s.
    pub fn tflops(&self) -> f64 {
        let (m, n, k) = self.mnk;
        2.0 * (m * n * k) as f64 / self.seconds / 1e12
    }

    /// Whether the output is within tolerance of the reference and fully written.
    pub fn ok(&self) -> bool {
        self.nan_outputs == 0 && self.rel_error < self.tolerance
    }

    /// The exit code: 0, or 1 when the check failed.
    pub fn outcome(&self) -> Option<Kind> {
        crate::error::worst((!self.ok()).then_some(Kind::CheckFailed))
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
        if self.nan_outputs > 0 {
            s += &format!(
                "unwritten: {} of {} output elements are NaN (never written by the kernel)\n",
                self.nan_outputs,
                m * n
            );
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
            "nan_outputs": self.nan_outputs,
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
    /// Fresh random weights for `config` (an error, not an abort, when they cannot be
    /// allocated).
    pub fn new(config: &LayerConfig) -> Result<Self, CliError> {
        let mut rng = rand::rng();
        let [r, c] = config.weight_scale_shape();
        let overflow = || {
            CliError::bad_input(format!(
                "layer N={} K={}: the weight's size overflows usize",
                config.n, config.k
            ))
        };
        let len = r.checked_mul(c).ok_or_else(overflow)?;
        // ue8m0 weight keys hold powers of two.
        let pow2 = config.weight.scale_dtype == fp8_linear::ScaleDtype::Ue8m0;
        let scales = try_collect(
            "weight scales",
            len,
            (0..len).map(|_| {
                let s = 2f32.powi(rng.random_range(-4..=4)) * rng.random_range(0.5f32..1.0) / 448.0;
                if pow2 {
                    fp8_linear::fp8::round_scale_ue8m0(s)
                } else {
                    s
                }
            }),
        )?;
        let len = config.n.checked_mul(config.k).ok_or_else(overflow)?;
        let mut rng = rand::rng();
        let codes = try_collect(
            "FP8 weight",
            len,
            (0..len).map(|_| f32_to_e4m3(rng.random_range(-448.0f32..448.0))),
        )?;
        Ok(RandomWeights {
            codes,
            scales,
            input_scale: [0.02],
            scale_shape: [r, c],
            nk: [config.n, config.k],
        })
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

/// `m` rows of uniform random activations in [-1, 1) for a layer of `config`, as f32 values
/// already rounded to its input dtype (an error, not an abort, when they overflow or cannot
/// be allocated).
pub fn random_activations(config: &LayerConfig, m: usize) -> Result<Vec<f32>, CliError> {
    let len = m.checked_mul(config.k).ok_or_else(|| {
        CliError::bad_input(format!("M={m} x K={} activations overflow usize", config.k))
    })?;
    let mut rng = rand::rng();
    let x = try_collect(
        "activations",
        len,
        (0..len).map(|_| rng.random_range(-1.0f32..1.0)),
    )?;
    Ok(to_dtype_bits(x, config.input_dtype))
}

/// The values a kernel sees after conversion of `x` to the input dtype, back in f32 (in
/// place).
pub fn to_dtype_bits(mut x: Vec<f32>, dtype: DType) -> Vec<f32> {
    match dtype {
        DType::Bf16 => x
            .iter_mut()
            .for_each(|v| *v = half::bf16::from_f32(*v).to_f32()),
        DType::F16 => x
            .iter_mut()
            .for_each(|v| *v = half::f16::from_f32(*v).to_f32()),
        _ => {}
    }
    x
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
    // ue8m0 activation scales (powers of two) when the key says so.
    let fmt = config
        .activation
        .map_or(fp8_linear::ScaleDtype::F32, |a| a.scale_dtype);
    match config.activation.map(|a| a.group) {
        Some(fp8_linear::GroupShape::Group { cols }) => {
            let (q, s) = quantize::per_token_group_fmt(&xs, r, k, cols as usize, fmt);
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
            quantize::per_token_fmt_into(&xs, k, None, fmt, &mut q, &mut s);
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
) -> Result<RunReport, CliError> {
    let choice = choose(registry, place, config, m, Some(tuning), &options.overrides)?;
    let rw = RandomWeights::new(config)?;
    let mut linear = Linear::with_plan(
        choice.plan,
        &place.target,
        config,
        &rw.weights(),
        &options.kernel,
    )
    .map_err(|e| CliError::runtime(format!("{}: {e}", choice.entry.name)))?;
    let x = random_activations(config, m)?;
    let len = m.checked_mul(config.n).ok_or_else(|| {
        CliError::bad_input(format!("M={m} x N={} outputs overflow usize", config.n))
    })?;
    let mut out = try_filled("output", len, f32::NAN)?;
    // One untimed call (module load, first-touch), then the timed ones.
    exec.forward(&mut linear, config, &x, m, &mut out)?;
    let mut times = Vec::new();
    for _ in 0..iters.max(1) {
        times.push(exec.forward(&mut linear, config, &x, m, &mut out)?);
    }
    times.sort_by(f64::total_cmp);
    let rows: Vec<usize> = sample_rows(m);
    let refr = Reference::for_kernel(
        linear.entry_for(m).expect("the plan serves every M"),
        config,
    );
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
        kernel: linear.entry_for(m).expect("the plan serves every M").name,
        device: place.device().to_string(),
        reference: refr.label,
        rows_checked: rows.len(),
        rel_error: reference::rel_frobenius(&got, &want),
        tolerance: tolerance(config.output_dtype),
        force_note: choice.force_note,
        seconds: times[times.len() / 2],
        mnk: (m, config.n, config.k),
        nan_outputs: count_nan(&out),
    })
}

/// The given rows of an `[m, n]` output.
pub fn gather_rows(out: &[f32], n: usize, rows: &[usize]) -> Vec<f32> {
    rows.iter()
        .flat_map(|&i| out[i * n..(i + 1) * n].iter().copied())
        .collect()
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::executor::HostExecutor;
    use fp8_linear::cpu::CpuReference;
    use fp8_linear::{
        BuildCtx, Constructor, Family, Fp8Kernel, KernelEntry, KernelError, KernelName, LayerKind,
        Platform, Registered, Table, Target, Unsupported,
    };
    use fp8_linear::{StorageMut, TensorMut};

    /// Row of the output the lazy kernel leaves unwritten: not among the sampled rows at
    /// M = 40, so only the poisoned buffer shows it.
    const SKIPPED_ROW: usize = 1;

    /// A kernel that computes every row but one (the reference kernel into scratch, then a
    /// copy that skips [`SKIPPED_ROW`]).
    struct Lazy {
        inner: CpuReference,
        n: usize,
    }

    impl KernelName for Lazy {
        fn name(&self) -> &'static str {
            "CpuLazy"
        }
    }

    impl Fp8Kernel for Lazy {
        fn can_implement(_: &LayerConfig) -> Result<(), Unsupported> {
            Ok(())
        }
        fn process_weights(&mut self, w: &LayerWeights<'_>) -> Result<(), KernelError> {
            self.inner.process_weights(w)
        }
        fn apply(&mut self, x: &Tensor<'_>, out: &mut TensorMut<'_>) -> Result<(), KernelError> {
            let m = x.shape[0];
            let mut scratch = vec![0f32; m * self.n];
            self.inner
                .apply(x, &mut TensorMut::f32(&mut scratch, [m, self.n]))?;
            let n = self.n;
            let keep = |i: usize| i / n != SKIPPED_ROW;
            match &mut out.data {
                StorageMut::F32(o) => (0..m * n)
                    .filter(|&i| keep(i))
                    .for_each(|i| o[i] = scratch[i]),
                StorageMut::Bf16(o) => (0..m * n)
                    .filter(|&i| keep(i))
                    .for_each(|i| o[i] = half::bf16::from_f32(scratch[i])),
                StorageMut::F16(o) => (0..m * n)
                    .filter(|&i| keep(i))
                    .for_each(|i| o[i] = half::f16::from_f32(scratch[i])),
                _ => unreachable!("host outputs only"),
            }
            Ok(())
        }
    }

    fn lazy(ctx: &BuildCtx<'_>) -> Result<Box<dyn Fp8Kernel>, KernelError> {
        let c = ctx.config();
        let f32_out = LayerConfig {
            output_dtype: DType::F32,
            ..*c
        };
        Ok(Box::new(Lazy {
            inner: CpuReference::for_layer(&f32_out),
            n: c.n,
        }))
    }

    const LAZY: KernelEntry = KernelEntry {
        name: "CpuLazy",
        priority: 1,
        construct: Constructor::Linear(lazy),
        ..<CpuReference as Registered>::ENTRY
    };
    static LAZY_BLOCK: Table = Table {
        name: "TEST_LAZY_BLOCK",
        platform: Platform::Cpu,
        family: Family::BlockScaled,
        kind: LayerKind::Linear,
        entries: &[LAZY],
    };
    static LAZY_REGISTRY: Registry = Registry::new(&[&LAZY_BLOCK]);

    #[test]
    fn an_unwritten_output_row_fails_the_check_in_every_output_dtype() {
        let m = 40;
        assert!(!sample_rows(m).contains(&SKIPPED_ROW));
        let place = Place {
            target: Target::cpu(),
            cpu_reason: Some("test".into()),
        };
        for out in [DType::F32, DType::Bf16, DType::F16] {
            let config = LayerConfig::block_128(48, 256, DType::Bf16, out);
            let r = run_random(
                &LAZY_REGISTRY,
                &place,
                &config,
                m,
                1,
                &Options::none(),
                &TuningFile::new(),
                &mut HostExecutor,
            )
            .unwrap();
            // The sampled rows match the reference; the unwritten row is NaN, not 0.
            assert!(r.rel_error < r.tolerance, "{out}: {}", r.text());
            assert_eq!(r.nan_outputs, config.n, "{out}: {}", r.text());
            assert!(!r.ok(), "{out}");
            assert_eq!(r.outcome(), Some(Kind::CheckFailed));
            assert!(r.text().contains("FAILED"), "{}", r.text());
            assert!(
                r.text().contains("48 of 1920 output elements are NaN"),
                "{}",
                r.text()
            );
        }
        // The same layer through the real kernel: every element written, ok.
        let config = LayerConfig::block_128(48, 256, DType::Bf16, DType::Bf16);
        let r = run_random(
            &fp8_linear::tables::BUILTIN,
            &place,
            &config,
            m,
            1,
            &Options::none(),
            &TuningFile::new(),
            &mut HostExecutor,
        )
        .unwrap();
        assert!(r.ok(), "{}", r.text());
        assert_eq!(r.outcome(), None);
    }
}
