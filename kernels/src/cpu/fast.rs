//! The fast CPU default: activations quantized per the layer's key and dequantized, then
//! either the FP8 decode path (few rows: the weight streams as one byte per element, see
//! `gemv`) or a multithreaded f32 GEMM on the weight dequantized once at load
//! (matrixmultiply's packed SGEMM kernels, split across threads with rayon).

use fp8_linear_core::kernel::processed;
use fp8_linear_core::validate::check_io;
use fp8_linear_core::{
    fp8_kernel, BuildCtx, Fp8Kernel, KernelError, LayerConfig, LayerWeights, Tensor, TensorMut,
    Unsupported,
};
use rayon::prelude::*;

use super::checks::cpu_can_implement;
use super::gemv;
use super::host::{given_activations, to_f32, write_output, ActScratch, HostWeights};

/// Fast CPU kernel for every FP8 layer kind: the embedded default when there is no GPU.
#[fp8_kernel(platform = Cpu, priority = 10, backend = cpu)]
pub struct CpuFp8Gemm {
    config: LayerConfig,
    /// Dequantized weight `[n, k]`, row-major.
    w: Vec<f32>,
    bias: Option<Vec<f32>>,
    host: Option<HostWeights>,
    act: ActScratch,
    a: Vec<f32>,
    acc: Vec<f32>,
    acc_t: Vec<f32>,
}

impl CpuFp8Gemm {
    /// Builds the kernel for the context's layer.
    pub fn new(ctx: &BuildCtx<'_>) -> Result<Self, KernelError> {
        Ok(CpuFp8Gemm {
            config: *ctx.config(),
            w: Vec::new(),
            bias: None,
            host: None,
            act: ActScratch::default(),
            a: Vec::new(),
            acc: Vec::new(),
            acc_t: Vec::new(),
        })
    }
}

/// `c[m, n] = a[m, k] @ w[n, k]^T` in f32 (all row-major), split over threads along M, or
/// along N when M is small: the threaded SGEMM the fast kernel ends in.
///
/// # Panics
/// When a slice is shorter than its shape (`a`: `m*k`, `w`: `n*k`, `c`: `m*n`).
pub fn sgemm_abt(a: &[f32], w: &[f32], c: &mut [f32], m: usize, n: usize, k: usize) {
    assert!(
        a.len() >= m * k && w.len() >= n * k && c.len() >= m * n,
        "sgemm_abt: slices shorter than [m, k] x [n, k] -> [m, n]"
    );
    let threads = rayon::current_num_threads().max(1);
    // SAFETY (all calls below): the pointers cover [rows, k] / [cols, k] / [rows, n] row-major
    // slices that outlive the call, with the strides given.
    let run = |a: &[f32], w: &[f32], c: &mut [f32], rows: usize, cols: usize, c_stride: usize| unsafe {
        matrixmultiply::sgemm(
            rows,
            k,
            cols,
            1.0,
            a.as_ptr(),
            k as isize,
            1,
            w.as_ptr(),
            1,
            k as isize,
            0.0,
            c.as_mut_ptr(),
            c_stride as isize,
            1,
        )
    };
    if threads == 1 || m * n * k < 1 << 18 {
        run(a, w, c, m, n, n);
    } else if m >= threads * 4 {
        let rows = m.div_ceil(threads);
        c.par_chunks_mut(rows * n)
            .zip(a.par_chunks(rows * k))
            .for_each(|(c, a)| run(a, w, c, a.len() / k, n, n));
    } else {
        // Few rows (decode): split the output columns; each thread writes a column stripe.
        let cols = n.div_ceil(threads).next_multiple_of(16).min(n);
        let stripes: Vec<(usize, Vec<f32>)> = w
            .par_chunks(cols * k)
            .enumerate()
            .map(|(s, ws)| {
                let nc = ws.len() / k;
                let mut part = vec![0f32; m * nc];
                run(a, ws, &mut part, m, nc, nc);
                (s * cols, part)
            })
            .collect();
        for (j0, part) in stripes {
            let nc = part.len() / m;
            for i in 0..m {
                c[i * n + j0..i * n + j0 + nc].copy_from_slice(&part[i * nc..(i + 1) * nc]);
            }
        }
    }
}

impl Fp8Kernel for CpuFp8Gemm {
    fn can_implement(config: &LayerConfig) -> Result<(), Unsupported> {
        cpu_can_implement(config)
    }

    fn process_weights(&mut self, weights: &LayerWeights<'_>) -> Result<(), KernelError> {
        let host = HostWeights::load(Self::NAME, &self.config, weights)?;
        self.w = host.dequantized();
        self.bias = host.bias.clone();
        self.host = Some(host);
        Ok(())
    }

    fn apply(&mut self, input: &Tensor<'_>, output: &mut TensorMut<'_>) -> Result<(), KernelError> {
        let name = Self::NAME;
        let c = self.config;
        let host = processed(&mut self.host, name)?;
        let m = check_io(&c, input, output)?;
        to_f32(name, "input", input, &mut self.act.x)?;
        self.act.quantize(&c, host, m);
        self.gemm(m, output)
    }

    fn apply_quantized(
        &mut self,
        codes: &Tensor<'_>,
        scales: &Tensor<'_>,
        output: &mut TensorMut<'_>,
    ) -> Result<(), KernelError> {
        processed(&mut self.host, Self::NAME)?;
        let (m, q, s) = given_activations(Self::NAME, &self.config, (codes, scales), output)?;
        self.act.set_quantized(q, s);
        self.gemm(m, output)
    }
}

impl CpuFp8Gemm {
    /// The GEMM on the quantized activations in `self.act` (`m` rows), bias, output: the
    /// part of a call after the activations are quantized.
    fn gemm(&mut self, m: usize, output: &mut TensorMut<'_>) -> Result<(), KernelError> {
        let name = Self::NAME;
        let c = self.config;
        let host = processed(&mut self.host, name)?;
        self.act.dequantized_into(&c, m, &mut self.a);
        self.acc.clear();
        self.acc.resize(m * c.n, 0.0);
        if m <= gemv::MAX_ROWS {
            gemv::fp8_gemv(&self.a, m, host, (c.n, c.k), &mut self.acc, &mut self.acc_t);
        } else {
            sgemm_abt(&self.a, &self.w, &mut self.acc, m, c.n, c.k);
        }
        if let Some(b) = &self.bias {
            for row in self.acc.chunks_mut(c.n) {
                row.iter_mut().zip(b).for_each(|(o, b)| *o += b);
            }
        }
        write_output(name, &self.acc, output)
    }
}
