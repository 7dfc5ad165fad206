// A CPU kernel of your own, from declaration to a checked result.
//
// `GroupedCpuGemm` is a small but real block-scaled W8A8 kernel: it quantizes the
// activations it is handed to FP8 per 1x128 group (as every block-scaled kernel must: `apply`
// receives them unquantized), multiplies FP8 codes one 128-wide K group at a time in f32,
// and applies the activation scale of the group and the weight scale of the 128x128 block
// to each partial sum. It is registered with `#[fp8_kernel]`, put first in a table that
// extends the built-in CPU block table, selected from a registry, run through `Linear`, and
// compared with the f64 oracle `CpuReference`.
//
//     cargo run -p fp8-linear --example custom_cpu_kernel

use fp8_linear::cpu::host::{to_f32, write_output};
use fp8_linear::cpu::CpuReference;
use fp8_linear::fp8::{e4m3_to_f32, f32_to_e4m3, quantize_row_groups};
use fp8_linear::kernel::processed;
use fp8_linear::tables::{CPU_SCALED, CPU_WEIGHT_ONLY};
use fp8_linear::validate::{check_config_basics, check_io, check_layer_weights};
use fp8_linear::{
    fp8_kernel, fp8_table, BuildCtx, DType, Fp8Kernel, GroupShape, KernelError, LayerConfig,
    LayerWeights, Linear, Options, Overrides, Registry, ScaleDtype, Storage, Target, Tensor,
    TensorMut, Unsupported, Verdict,
};

/// Block-scaled W8A8 (128x128 weight blocks, dynamic 1x128 activation groups) on the CPU,
/// accumulating in f32 one K group at a time.
#[fp8_kernel(platform = Cpu, priority = 20, backend = example)]
pub struct GroupedCpuGemm {
    config: LayerConfig,
    weights: Option<Weights>,
    /// The input as f32, `[m, k]`.
    x: Vec<f32>,
    /// The input quantized: FP8 codes `[m, k]` and one scale per 1x128 group `[m, groups]`.
    x_codes: Vec<f32>,
    x_scales: Vec<f32>,
    /// The result in f32, `[m, n]`.
    acc: Vec<f32>,
}

/// What `process_weights` keeps: the weight's FP8 codes decoded to f32 (exact; the scales
/// are applied per block at run time), the block scales, the bias.
struct Weights {
    codes: Vec<f32>,
    scales: Vec<f32>,
    bias: Option<Vec<f32>>,
}

const GROUP: usize = 128;

impl GroupedCpuGemm {
    /// No `params = [...]` in the attribute, so the constructor takes the build context
    /// alone. A CPU kernel needs nothing from it but the layer.
    pub fn new(ctx: &BuildCtx<'_>) -> Result<Self, KernelError> {
        Ok(GroupedCpuGemm {
            config: *ctx.config(),
            weights: None,
            x: Vec::new(),
            x_codes: Vec::new(),
            x_scales: Vec::new(),
            acc: Vec::new(),
        })
    }
}

fn float_dtype(d: DType) -> bool {
    matches!(d, DType::F32 | DType::Bf16 | DType::F16)
}

impl Fp8Kernel for GroupedCpuGemm {
    fn can_implement(c: &LayerConfig) -> Result<(), Unsupported> {
        check_config_basics(c)?;
        if c.weight.group
            != (GroupShape::Block {
                rows: 128,
                cols: 128,
            })
        {
            return Err(Unsupported::new("weights must have 128x128 block scales"));
        }
        match c.activation {
            Some(a)
                if a.dynamic
                    && a.group == (GroupShape::Group { cols: 128 })
                    && a.scale_dtype == ScaleDtype::F32 => {}
            _ => {
                return Err(Unsupported::new(
                    "activations must be quantized dynamically per 1x128 group, f32 scales",
                ))
            }
        }
        if !float_dtype(c.input_dtype) || !float_dtype(c.output_dtype) {
            return Err(Unsupported::new(
                "input and output must be f32, bf16 or f16",
            ));
        }
        Ok(())
    }

    fn process_weights(&mut self, w: &LayerWeights<'_>) -> Result<(), KernelError> {
        // FP8 [N, K], f32 scales [ceil(N/128), ceil(K/128)], bias [1, N] when the layer has
        // one, every scale finite: checked once here, with the same typed errors as every
        // built-in kernel.
        check_layer_weights(&self.config, w)?;
        let Storage::F8E4m3(codes) = w.weight.data else {
            return Err(KernelError::Device {
                what: "weight",
                detail: format!("{} needs the weight in host memory", Self::NAME),
            });
        };
        let mut scales = Vec::new();
        to_f32(Self::NAME, "weight_scale", &w.weight_scale, &mut scales)?;
        let bias = match (&w.bias, self.config.bias) {
            (Some(b), true) => {
                let mut v = Vec::new();
                to_f32(Self::NAME, "bias", b, &mut v)?;
                Some(v)
            }
            _ => None,
        };
        let (n, k) = (self.config.n, self.config.k);
        self.weights = Some(Weights {
            codes: codes[..n * k].iter().map(|&c| e4m3_to_f32(c)).collect(),
            scales,
            bias,
        });
        Ok(())
    }

    fn apply(&mut self, x: &Tensor<'_>, out: &mut TensorMut<'_>) -> Result<(), KernelError> {
        let c = self.config;
        let w = processed(&mut self.weights, Self::NAME)?;
        // `Linear::forward` has checked these already; a kernel called directly checks
        // them itself (cheap, and the one place shapes are trusted below).
        let m = check_io(&c, x, out)?;
        let (n, k) = (c.n, c.k);
        let groups = k.div_ceil(GROUP);

        // The activations arrive unquantized, in the layer's input dtype: quantize them per
        // 1x128 group, scale = max(|x|, 1e-10) / 448, code = e4m3(x / scale).
        to_f32(Self::NAME, "input", x, &mut self.x)?;
        let mut codes = vec![0u8; k];
        self.x_codes.clear();
        self.x_scales.resize(m * groups, 0.0);
        for (row, scales) in self.x.chunks(k).zip(self.x_scales.chunks_mut(groups)) {
            quantize_row_groups(row, GROUP, &mut codes, scales);
            self.x_codes.extend(codes.iter().map(|&q| e4m3_to_f32(q)));
        }

        // out[i, j] = sum over K groups g of
        //   (sum over kk in g of xq[i, kk] * wq[j, kk]) * x_scale[i, g] * w_scale[j / 128, g]
        self.acc.clear();
        for i in 0..m {
            let xq = &self.x_codes[i * k..(i + 1) * k];
            let xs = &self.x_scales[i * groups..(i + 1) * groups];
            for j in 0..n {
                let wq = &w.codes[j * k..(j + 1) * k];
                let ws = &w.scales[(j / 128) * groups..(j / 128 + 1) * groups];
                let mut sum = 0f32;
                for g in 0..groups {
                    let span = g * GROUP..((g + 1) * GROUP).min(k);
                    let dot: f32 = xq[span.clone()]
                        .iter()
                        .zip(&wq[span])
                        .map(|(a, b)| a * b)
                        .sum();
                    sum += dot * xs[g] * ws[g];
                }
                if let Some(b) = &w.bias {
                    sum += b[j];
                }
                self.acc.push(sum);
            }
        }
        // Into the output's dtype (f32, bf16 or f16).
        write_output(Self::NAME, &self.acc, out)
    }
}

fp8_table! {
    /// The built-in CPU block table with `GroupedCpuGemm` tried first: the table overrides
    /// the kernel's own priority (20) with 5, ahead of `CpuFp8Gemm` (10) and `CpuReference`
    /// (100). Sorted and checked (no duplicate kernel or priority) at compile time.
    pub MY_CPU_BLOCK: Cpu, BlockScaled = fp8_linear::tables::CPU_BLOCK + [GroupedCpuGemm => 5];
}

/// Our block table and the built-in others: what selection walks for this program.
static MINE: Registry = Registry::new(&[&MY_CPU_BLOCK, &CPU_SCALED, &CPU_WEIGHT_ONLY]);

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // A block-scaled layer with ragged sizes (N = 200, K = 300: partial blocks and groups),
    // f32 in and out, with a bias.
    let (m, n, k) = (4, 200, 300);
    let cfg = LayerConfig {
        bias: true,
        ..LayerConfig::block_128(n, k, DType::F32, DType::F32)
    };
    let codes: Vec<u8> = (0..n * k)
        .map(|i| f32_to_e4m3(((i * 7 % 17) as f32 - 8.0) / 4.0))
        .collect();
    // Multipliers: dequantized weight = e4m3(code) * scale of its 128x128 block.
    let [sr, sc] = cfg.weight_scale_shape(); // [ceil(200/128), ceil(300/128)] = [2, 3]
    let scales: Vec<f32> = (0..sr * sc).map(|i| 0.25 + 0.125 * i as f32).collect();
    let bias: Vec<f32> = (0..n).map(|j| j as f32 / 100.0).collect();
    let weights = LayerWeights::new(Tensor::fp8(&codes, [n, k]), Tensor::f32(&scales, [sr, sc]))
        .with_bias(Tensor::f32(&bias, [1, n]));
    let x: Vec<f32> = (0..m * k)
        .map(|i| ((i * 5 % 13) as f32 - 6.0) / 8.0)
        .collect();

    // Selection, explained: every candidate of the table with its verdict.
    let target = Target::cpu();
    let why = MINE.explain(target.device(), &cfg, &Overrides::none())?;
    println!("layer {cfg}\ntable {}:", why.table.name);
    for c in &why.candidates {
        let mark = match c.verdict {
            Verdict::Chosen => "->",
            Verdict::Eligible => " +",
            _ => " x",
        };
        println!(
            "  {mark} {} (priority {}): {}",
            c.entry.name, c.entry.priority, c.verdict
        );
    }

    // Built through our registry: our kernel is chosen.
    let mut layer = Linear::with_registry(&MINE, &target, &cfg, &weights, &Options::none())?;
    assert_eq!(
        layer.plan().to_string(),
        format!("M = 1..: {}", GroupedCpuGemm::NAME)
    );
    let mut y = vec![f32::NAN; m * n];
    layer.forward(
        &Tensor::f32(&x, [m, k]),
        &mut TensorMut::f32(&mut y, [m, n]),
    )?;

    // The f64 oracle on the same layer and weights.
    let mut oracle = CpuReference::for_layer(&cfg);
    oracle.process_weights(&weights)?;
    let mut want = vec![f32::NAN; m * n];
    oracle.apply(
        &Tensor::f32(&x, [m, k]),
        &mut TensorMut::f32(&mut want, [m, n]),
    )?;
    let (num, den) = y
        .iter()
        .zip(&want)
        .fold((0f64, 0f64), |(num, den), (g, w)| {
            let (g, w) = (*g as f64, *w as f64);
            (num + (g - w) * (g - w), den + w * w)
        });
    let rel = (num / den).sqrt();
    println!(
        "{} vs CpuReference: relative Frobenius error {rel:.1e}",
        layer.plan()
    );
    assert!(rel < 1e-5, "rel err {rel:e}");

    // A mis-shaped output never reaches the kernel: `forward` checks input and output first.
    let mut short = vec![0f32; m * (n - 1)];
    let e = layer
        .forward(
            &Tensor::f32(&x, [m, k]),
            &mut TensorMut::f32(&mut short, [m, n - 1]),
        )
        .unwrap_err();
    assert!(
        matches!(e, KernelError::Shape { what: "output", .. }),
        "{e}"
    );
    println!("typed error for a wrong output shape: {e}");
    Ok(())
}
