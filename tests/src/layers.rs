//! Random FP8 layers for tests (fresh, seeded data every run: see [`crate::seed`]),
//! quantized the way checkpoints are, and their f64 reference through the CPU oracle.
//!
//! Weight codes are drawn uniformly over all 254 finite e4m3 codes ([`random_codes`]), so
//! every exponent (subnormals included) is as common as every other: drawn uniformly over
//! the values in +-448 instead, fewer than 0.5 % of the weights would be below 1 and a
//! kernel that mishandled small codes would still pass.

use fp8_linear::cpu::CpuReference;
use fp8_linear::fp8::round_scale_ue8m0;
use fp8_linear::{
    DType, Fp8Kernel, GroupShape, GroupedWeights, KernelError, LayerConfig, LayerWeights, QuantKey,
    ScaleDtype, Tensor, TensorMut,
};
use rand::Rng;

use crate::oracle;
use crate::seed::rng;

/// The code of the `i`-th finite e4m3 code, `i` in `0..254`: `0x00..=0x7e`, then
/// `0x80..=0xfe` (the NaN codes `0x7f` / `0xff` left out).
pub fn finite_code(i: u8) -> u8 {
    assert!(i < 254, "254 finite codes");
    if i < 0x7f {
        i
    } else {
        i + 1
    }
}

/// `count` FP8 codes drawn uniformly over all 254 finite e4m3 codes (every exponent, both
/// signs, subnormals and zeros included; never NaN).
pub fn random_codes(count: usize) -> Vec<u8> {
    let mut rng = rng();
    (0..count)
        .map(|_| finite_code(rng.random_range(0..254u8)))
        .collect()
}

/// `count` FP8 codes drawn uniformly over the codes with an exponent field of at most
/// `max_exponent` (both signs): e.g. 3 gives the subnormals and the three lowest binades,
/// magnitudes up to 0.1171875.
pub fn random_small_codes(count: usize, max_exponent: u8) -> Vec<u8> {
    assert!(max_exponent < 15, "the top binade holds the NaN code");
    let per_sign = (u16::from(max_exponent) + 1) * 8;
    let mut rng = rng();
    (0..count)
        .map(|_| {
            let i = rng.random_range(0..2 * per_sign);
            let mag = (i % per_sign) as u8;
            if i >= per_sign {
                mag | 0x80
            } else {
                mag
            }
        })
        .collect()
}

/// Random block scales for a 128x128 block weight: `2^[-spread, spread] * [0.5, 1) / 448`.
fn spread_scales(count: usize, spread: i32) -> Vec<f32> {
    let mut rng = rng();
    (0..count)
        .map(|_| 2f32.powi(rng.random_range(-spread..=spread)) * rng.random_range(0.5..1.0) / 448.0)
        .collect()
}

/// A random 128x128 block-quantized weight `[n, k]`: FP8 codes uniform over every finite
/// code and block scales `[ceil(n/128), ceil(k/128)]` spread over `spread` binades.
pub fn random_block_weight(n: usize, k: usize, spread: i32) -> (Vec<u8>, Vec<f32>) {
    random_weight_blocks(n, k, (128, 128), spread)
}

/// A random block-quantized weight `[n, k]` of `rows` x `cols` blocks: FP8 codes uniform over
/// every finite code and block scales `[ceil(n/rows), ceil(k/cols)]` spread over `spread`
/// binades.
pub fn random_weight_blocks(
    n: usize,
    k: usize,
    (rows, cols): (usize, usize),
    spread: i32,
) -> (Vec<u8>, Vec<f32>) {
    let (nb, kb) = (n.div_ceil(rows), k.div_ceil(cols));
    (random_codes(n * k), spread_scales(nb * kb, spread))
}

/// Random activations `[m, k]` in `(-1, 1)` with 1 % outliers of 30x, as f32.
pub fn random_activations(m: usize, k: usize) -> Vec<f32> {
    let mut rng = rng();
    (0..m * k)
        .map(|_| {
            let v: f32 = rng.random_range(-1.0..1.0);
            if rng.random_range(0..100) == 0 {
                v * 30.0
            } else {
                v
            }
        })
        .collect()
}

/// Activations with the awkward cases of quantization mixed in: magnitudes over 28 binades
/// (so some groups quantize into the e4m3 subnormals and some values round to zero), 2 %
/// outliers of 100x, an all-zero group (row 1, first 128 columns, when there is one), a row
/// of exact ties (values on e4m3 midpoints once scaled by a power of two) and a row of tiny
/// values below the 1e-10 absmax floor. All finite in f16 (max 65504) and bf16.
pub fn nasty_activations(m: usize, k: usize) -> Vec<f32> {
    let mut rng = rng();
    let mut x: Vec<f32> = (0..m * k)
        .map(|_| {
            let mag = 2f32.powi(rng.random_range(-20..8));
            let v: f32 = rng.random_range(-1.0..1.0) * mag;
            if rng.random_range(0..50) == 0 {
                v * 100.0
            } else {
                v
            }
        })
        .collect();
    if k >= 128 && m > 1 {
        x[k..k + 128].iter_mut().for_each(|v| *v = 0.0);
    }
    if m > 2 {
        // Row 2: 448 first (scale 1 for its group: a power of two), then the midpoints
        // between neighbouring e4m3 values, each exactly a tie.
        let grid = oracle::magnitudes();
        let row = &mut x[2 * k..3 * k];
        for (i, v) in row.iter_mut().enumerate() {
            *v = if i % 128 == 0 {
                448.0
            } else {
                let j = (i * 7) % 126;
                let mid = ((grid[j] + grid[j + 1]) / 2.0) as f32;
                if i % 2 == 0 {
                    mid
                } else {
                    -mid
                }
            };
        }
    }
    if m > 3 {
        x[3 * k..4 * k]
            .iter_mut()
            .enumerate()
            .for_each(|(i, v)| *v = ((i % 97) as f32 - 3.0) * 1e-13);
    }
    x
}

/// The activations quantized per 1x128 group by the test oracle ([`oracle`], not the
/// kernels' quantizer): codes and scales `[m, ceil(k/128)]`.
pub fn quantize_groups(x: &[f32], m: usize, k: usize) -> (Vec<u8>, Vec<f32>) {
    oracle::quantize_groups(x, m, k, 128)
}

/// How a random layer's weight codes and scales are drawn.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum WeightGen {
    /// Codes uniform over all 254 finite codes, scales `2^[-spread, spread] * [0.5, 1) /
    /// 448`.
    Spread(i32),
    /// Scales in `[100, 900)` (far above what f16 holds after a 1/256 rebase: the f32
    /// channel scale of the Marlin kernel carries them) and codes uniform over the
    /// subnormals and the three lowest binades (magnitudes up to 0.117, every exponent of
    /// that range), so that f16 outputs stay finite: with codes up to 448 the outputs of a
    /// K = 1000 layer would reach ~1e6.
    LargeScales,
}

/// A random layer on the host: everything its config asks for (weight, scales, the static
/// input scale of a static activation key, the bias of a biased layer).
#[derive(Clone, Debug)]
pub struct HostLayer {
    /// The layer.
    pub config: LayerConfig,
    /// FP8 weight codes `[n, k]`.
    pub codes: Vec<u8>,
    /// Weight scales, row-major in `config.weight_scale_shape()`.
    pub scales: Vec<f32>,
    /// The static activation scale (static activation keys only).
    pub input_scale: Option<f32>,
    /// The bias `[n]` (biased layers only).
    pub bias: Option<Vec<f32>>,
}

/// The static activation scale random layers get (activations are about 1, with outliers
/// of 30 that saturate).
pub const STATIC_INPUT_SCALE: f32 = 0.02;

impl HostLayer {
    /// A fresh random layer for `config`.
    pub fn random(config: &LayerConfig, gen: WeightGen) -> Self {
        let (n, k) = (config.n, config.k);
        let [sr, sc] = config.weight_scale_shape();
        let (codes, scales): (Vec<u8>, Vec<f32>) = match gen {
            WeightGen::Spread(spread) => (random_codes(n * k), spread_scales(sr * sc, spread)),
            WeightGen::LargeScales => {
                let mut rng = rng();
                (
                    random_small_codes(n * k, 3),
                    (0..sr * sc)
                        .map(|_| rng.random_range(100.0f32..900.0))
                        .collect(),
                )
            }
        };
        // ue8m0 weight keys hold powers of two (as the checkpoint reader requires).
        let scales = if config.weight.scale_dtype == ScaleDtype::Ue8m0 {
            scales.into_iter().map(round_scale_ue8m0).collect()
        } else {
            scales
        };
        let input_scale = config
            .activation
            .filter(|a| !a.dynamic)
            .map(|_| STATIC_INPUT_SCALE);
        let bias_scale = match gen {
            WeightGen::Spread(_) => 5.0,
            WeightGen::LargeScales => 1000.0,
        };
        let bias = config.bias.then(|| {
            random_activations(1, n)
                .iter()
                .map(|v| v * bias_scale)
                .collect()
        });
        HostLayer {
            config: *config,
            codes,
            scales,
            input_scale,
            bias,
        }
    }

    /// Host views of the layer's tensors, as `process_weights` takes them.
    pub fn weights(&self) -> LayerWeights<'_> {
        let c = &self.config;
        let mut w = LayerWeights::new(
            Tensor::fp8(&self.codes, [c.n, c.k]),
            Tensor::f32(&self.scales, c.weight_scale_shape()),
        );
        if let Some(s) = &self.input_scale {
            w = w.with_input_scale(Tensor::f32(std::slice::from_ref(s), [1, 1]));
        }
        if let Some(b) = &self.bias {
            w = w.with_bias(Tensor::f32(b, [1, c.n]));
        }
        w
    }
}

/// The f64 reference (the CPU oracle, [`CpuReference`]) of `ref_config` on the rows `rows`
/// of the activations `x` `[m, k]` (f32 values, as the device held them): the layer's
/// weights, scales and bias, activations quantized per the reference config's key (none
/// for weight-only numerics). `ref_config` is the checked kernel's
/// `entry.reference_config(&layer.config)`. Rows are computed in parallel; a dynamic
/// per-tensor activation scale is taken over all `m` rows first (it depends on every row),
/// then applied as a static scale. Returns `[rows.len(), n]` row-major.
pub fn reference_rows(
    ref_config: &LayerConfig,
    layer: &HostLayer,
    x: &[f32],
    m: usize,
    rows: &[usize],
) -> Result<Vec<f64>, KernelError> {
    let (n, k) = (ref_config.n, ref_config.k);
    assert_eq!(x.len(), m * k, "activations are [m, k]");
    let mut cfg = LayerConfig {
        input_dtype: DType::F32,
        output_dtype: DType::F32,
        ..*ref_config
    };
    let mut input_scale = layer.input_scale;
    if let Some(a) = cfg.activation {
        if a.dynamic && matches!(a.group, GroupShape::PerTensor) {
            let s = oracle::dynamic_scale(x, None);
            input_scale = Some(if a.scale_dtype == ScaleDtype::Ue8m0 {
                oracle::ue8m0(s)
            } else {
                s
            });
            cfg.activation = Some(QuantKey {
                dynamic: false,
                ..a
            });
        }
    }
    let static_act = cfg.activation.is_some_and(|a| !a.dynamic);
    let input_scale = if static_act {
        Some(input_scale.expect("a static activation key comes with an input scale"))
    } else {
        None
    };
    // Each thread dequantizes the whole weight once: at most 8 threads, 2+ rows each.
    let threads = std::thread::available_parallelism()
        .map_or(4, |p| p.get())
        .min(8)
        .min(rows.len().div_ceil(2))
        .max(1);
    let per = rows.len().div_ceil(threads).max(1);
    let chunks: Vec<&[usize]> = rows.chunks(per).collect();
    let run = |chunk: &[usize]| -> Result<Vec<f32>, KernelError> {
        let mut w = LayerWeights::new(
            Tensor::fp8(&layer.codes, [n, k]),
            Tensor::f32(&layer.scales, cfg.weight_scale_shape()),
        );
        let is;
        if let Some(s) = input_scale {
            is = [s];
            w = w.with_input_scale(Tensor::f32(&is, [1, 1]));
        }
        if cfg.bias {
            let b = layer.bias.as_ref().expect("a biased layer has a bias");
            w = w.with_bias(Tensor::f32(b, [1, n]));
        }
        let mut oracle = CpuReference::for_layer(&cfg);
        oracle.process_weights(&w)?;
        let xr: Vec<f32> = chunk
            .iter()
            .flat_map(|&r| x[r * k..(r + 1) * k].iter().copied())
            .collect();
        let mut out = vec![0f32; chunk.len() * n];
        oracle.apply(
            &Tensor::f32(&xr, [chunk.len(), k]),
            &mut TensorMut::f32(&mut out, [chunk.len(), n]),
        )?;
        Ok(out)
    };
    let parts: Vec<Result<Vec<f32>, KernelError>> = std::thread::scope(|s| {
        let handles: Vec<_> = chunks.iter().map(|c| s.spawn(|| run(c))).collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("reference thread panicked"))
            .collect()
    });
    let mut want = Vec::with_capacity(rows.len() * n);
    for p in parts {
        want.extend(p?.into_iter().map(f64::from));
    }
    Ok(want)
}

/// A block layout: `rows x cols` weight blocks, 1 x `cols` dynamic activation groups (what
/// the checkpoint reader makes of `weight_block_size: [rows, cols]`), with the given scale
/// dtypes (weight, activation) and input and output dtypes.
pub fn block_config(
    (rows, cols): (u32, u32),
    (wfmt, afmt): (ScaleDtype, ScaleDtype),
    (n, k): (usize, usize),
    (input, out): (DType, DType),
) -> LayerConfig {
    LayerConfig {
        weight: QuantKey {
            group: GroupShape::Block { rows, cols },
            scale_dtype: wfmt,
            dynamic: false,
        },
        activation: Some(QuantKey {
            group: GroupShape::Group { cols },
            scale_dtype: afmt,
            dynamic: true,
        }),
        ..LayerConfig::block_128(n, k, input, out)
    }
}

/// Gate values that probe the edges of SiLU-and-multiply: large |g| of both signs (where
/// `exp(-g)` overflows or underflows), zeros, subnormals, infinities, NaN.
pub const AWKWARD_GATES: [f32; 14] = [
    0.0,
    -0.0,
    1e-40,
    -1e-40,
    88.0,
    -88.0,
    -89.0,
    104.0,
    -104.5,
    1e30,
    -1e30,
    f32::INFINITY,
    f32::NEG_INFINITY,
    f32::NAN,
];

/// E random experts of one config, stacked.
pub struct Experts {
    /// Each expert's layer.
    pub layers: Vec<HostLayer>,
    codes: Vec<u8>,
    scales: Vec<f32>,
    input_scales: Option<Vec<f32>>,
    biases: Option<Vec<f32>>,
}

impl Experts {
    /// `e` experts of `config`, each [`HostLayer::random`] with [`WeightGen::Spread`]`(2)`.
    pub fn random(config: &LayerConfig, e: usize) -> Self {
        let layers: Vec<HostLayer> = (0..e)
            .map(|_| HostLayer::random(config, WeightGen::Spread(2)))
            .collect();
        let cat = |f: &dyn Fn(&HostLayer) -> Option<Vec<f32>>| -> Option<Vec<f32>> {
            layers
                .iter()
                .map(f)
                .collect::<Option<Vec<_>>>()
                .map(|v| v.concat())
        };
        Experts {
            codes: layers.iter().flat_map(|l| l.codes.clone()).collect(),
            scales: layers.iter().flat_map(|l| l.scales.clone()).collect(),
            input_scales: cat(&|l| l.input_scale.map(|s| vec![s])),
            biases: cat(&|l| l.bias.clone()),
            layers,
        }
    }

    /// The stacked tensors: codes `[E N, K]`, scales `[E rows, cols]`, input scales
    /// `[E, 1]`, bias `[E, N]`.
    pub fn weights(&self) -> GroupedWeights<'_> {
        let c = &self.layers[0].config;
        let e = self.layers.len();
        let [sr, sc] = c.weight_scale_shape();
        let mut w = LayerWeights::new(
            Tensor::fp8(&self.codes, [e * c.n, c.k]),
            Tensor::f32(&self.scales, [e * sr, sc]),
        );
        if let Some(s) = &self.input_scales {
            w = w.with_input_scale(Tensor::f32(s, [e, 1]));
        }
        if let Some(b) = &self.biases {
            w = w.with_bias(Tensor::f32(b, [e, c.n]));
        }
        GroupedWeights::new(e, w)
    }
}
