//! How the CLI runs one forward call of a layer: the [`Executor`] trait (a timed call on
//! f32 values into a poisoned output) and its host implementation; the GPU one is in `gpu`.

use std::time::Instant;

use fp8_linear::{DType, LayerConfig, Linear, Tensor, TensorMut};

use crate::error::{as_kind, CliError, Kind};
use crate::sizes::{try_collect, try_filled};

/// Runs one forward call of a layer on `x` (`[m, k]` f32 values already representable in
/// the input dtype) and writes the output as f32; returns the seconds the call took. The
/// buffer handed to the kernel is poisoned first (NaN for f32, 0xffff for bf16 / f16, a NaN
/// in both), so an element the kernel does not write comes back as NaN in `out`.
pub trait Executor {
    /// One timed forward call.
    fn forward(
        &mut self,
        linear: &mut Linear,
        config: &LayerConfig,
        x: &[f32],
        m: usize,
        out: &mut [f32],
    ) -> Result<f64, CliError>;
}

/// The bf16 / f16 bit pattern the CLI poisons 16-bit outputs with: all ones, a NaN.
pub const POISON_16: u16 = 0xffff;

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
    ) -> Result<f64, CliError> {
        let k = config.k;
        let xb: Vec<half::bf16>;
        let xh: Vec<half::f16>;
        let input = match config.input_dtype {
            DType::Bf16 => {
                xb = try_collect(
                    "bf16 input",
                    x.len(),
                    x.iter().map(|v| half::bf16::from_f32(*v)),
                )?;
                Tensor::bf16(&xb, [m, k])
            }
            DType::F16 => {
                xh = try_collect(
                    "f16 input",
                    x.len(),
                    x.iter().map(|v| half::f16::from_f32(*v)),
                )?;
                Tensor::f16(&xh, [m, k])
            }
            _ => Tensor::f32(x, [m, k]),
        };
        run_out(linear, &input, config, out)
    }
}
/// One timed call into a poisoned output of the layer's dtype, copied to `out` as f32;
/// returns the seconds of the call alone.
fn run_out(
    linear: &mut Linear,
    input: &Tensor<'_>,
    config: &LayerConfig,
    out: &mut [f32],
) -> Result<f64, CliError> {
    let m = input.shape[0];
    let shape = [m, config.n];
    let err = as_kind(Kind::Runtime);
    let t;
    let secs = match config.output_dtype {
        DType::Bf16 => {
            let poison = half::bf16::from_bits(POISON_16);
            let mut o = try_filled("bf16 output", out.len(), poison)?;
            t = Instant::now();
            linear
                .forward(input, &mut TensorMut::bf16(&mut o, shape))
                .map_err(err)?;
            let secs = t.elapsed().as_secs_f64();
            out.iter_mut().zip(&o).for_each(|(d, s)| *d = s.to_f32());
            secs
        }
        DType::F16 => {
            let poison = half::f16::from_bits(POISON_16);
            let mut o = try_filled("f16 output", out.len(), poison)?;
            t = Instant::now();
            linear
                .forward(input, &mut TensorMut::f16(&mut o, shape))
                .map_err(err)?;
            let secs = t.elapsed().as_secs_f64();
            out.iter_mut().zip(&o).for_each(|(d, s)| *d = s.to_f32());
            secs
        }
        _ => {
            out.fill(f32::NAN);
            t = Instant::now();
            linear
                .forward(input, &mut TensorMut::f32(out, shape))
                .map_err(err)?;
            t.elapsed().as_secs_f64()
        }
    };
    Ok(secs)
}
