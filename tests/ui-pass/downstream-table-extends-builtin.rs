//! A downstream crate's table: the built-in CPU block table plus its own kernel, sorted and
//! validated at compile time, put in a registry, selected, built on the CPU and run.
use fp8_linear::cpu::{CpuFp8Gemm, CpuReference};
use fp8_linear::fp8::f32_to_e4m3;
use fp8_linear::tables::{CPU_BLOCK, CPU_SCALED, CPU_WEIGHT_ONLY};
use fp8_linear::{
    bf16, fp8_kernel, fp8_table, BuildCtx, DType, Fp8Kernel, KernelError, KernelOptions,
    LayerConfig, LayerWeights, Linear, Options, Overrides, Registry, Target, Tensor, TensorMut,
    Unsupported,
};

/// The built-in fast CPU GEMM, restricted to K a multiple of 256: a downstream kernel that
/// delegates (its name and entry come from the attribute).
#[fp8_kernel(platform = Cpu, priority = 50, backend = mine)]
pub struct MyCpuKernel {
    inner: CpuFp8Gemm,
}

impl MyCpuKernel {
    pub fn new(ctx: &BuildCtx<'_>) -> Result<Self, KernelError> {
        Ok(MyCpuKernel {
            inner: CpuFp8Gemm::new(ctx)?,
        })
    }
}

impl Fp8Kernel for MyCpuKernel {
    fn can_implement(c: &LayerConfig) -> Result<(), Unsupported> {
        if c.k % 256 != 0 {
            return Err(Unsupported::new("K must be a multiple of 256").with("K", c.k as u64));
        }
        CpuFp8Gemm::can_implement(c)
    }
    fn process_weights(&mut self, w: &LayerWeights<'_>) -> Result<(), KernelError> {
        self.inner.process_weights(w)
    }
    fn apply(&mut self, x: &Tensor<'_>, out: &mut TensorMut<'_>) -> Result<(), KernelError> {
        self.inner.apply(x, out)
    }
}

fp8_table! {
    /// The built-in CPU block table with our kernel tried first.
    pub MY_CPU_BLOCK: Cpu, BlockScaled = fp8_linear::tables::CPU_BLOCK + [MyCpuKernel => 5];
}

/// Our block table and the built-in others.
static MINE: Registry = Registry::new(&[&MY_CPU_BLOCK, &CPU_SCALED, &CPU_WEIGHT_ONLY]);

fn run(kernel: &mut dyn Fp8Kernel, x: &[bf16], m: usize, k: usize, n: usize) -> Vec<f32> {
    let mut out = vec![bf16::ZERO; m * n];
    kernel
        .apply(
            &Tensor::bf16(x, [m, k]),
            &mut TensorMut::bf16(&mut out, [m, n]),
        )
        .unwrap();
    out.iter().map(|v| v.to_f32()).collect()
}

fn main() {
    assert_eq!(MY_CPU_BLOCK.entries.len(), CPU_BLOCK.entries.len() + 1);
    assert_eq!(MY_CPU_BLOCK.entries[0].name, MyCpuKernel::NAME);
    assert_eq!(MY_CPU_BLOCK.entries[0].priority, 5);
    assert_eq!(MY_CPU_BLOCK.entries[0].backend, "mine");

    let target = Target::cpu();
    let (m, n, k) = (3, 128, 256);
    let layer = LayerConfig::block_128(n, k, DType::Bf16, DType::Bf16);
    let s = MY_CPU_BLOCK
        .select(target.device(), &layer, &Overrides::none())
        .unwrap();
    assert_eq!(s.entry.name, "MyCpuKernel");
    let ragged = LayerConfig::block_128(n, 300, DType::Bf16, DType::Bf16);
    let r = MY_CPU_BLOCK
        .select(target.device(), &ragged, &Overrides::none())
        .unwrap();
    assert_eq!(r.entry.name, "CpuFp8Gemm");

    // A small layer with varied codes, scales and activations.
    let codes: Vec<u8> = (0..n * k)
        .map(|i| f32_to_e4m3(((i * 7 % 17) as f32 - 8.0) / 4.0))
        .collect();
    let scales = [0.5f32, 0.25]; // [ceil(n/128), ceil(k/128)]
    let weights = LayerWeights::new(Tensor::fp8(&codes, [n, k]), Tensor::f32(&scales, [1, 2]));
    let x: Vec<bf16> = (0..m * k)
        .map(|i| bf16::from_f32(((i * 5 % 13) as f32 - 6.0) / 8.0))
        .collect();

    // Our kernel, built through its entry on the CPU.
    let options = KernelOptions::none();
    let mut mine = s.entry.build(&target.build_ctx(&layer, &options)).unwrap();
    assert_eq!(mine.name(), "MyCpuKernel");
    mine.process_weights(&weights).unwrap();
    let got = run(mine.as_mut(), &x, m, k, n);

    // The same layer through our registry and `Linear`.
    let mut linear =
        Linear::with_registry(&MINE, &target, &layer, &weights, &Options::none()).unwrap();
    assert_eq!(linear.plan().to_string(), "M = 1..: MyCpuKernel");
    let mut out = vec![bf16::ZERO; m * n];
    linear
        .forward(
            &Tensor::bf16(&x, [m, k]),
            &mut TensorMut::bf16(&mut out, [m, n]),
        )
        .unwrap();
    let via_linear: Vec<f32> = out.iter().map(|v| v.to_f32()).collect();
    assert_eq!(got, via_linear);

    // The f64 oracle agrees.
    let mut oracle = CpuReference::for_layer(&layer);
    oracle.process_weights(&weights).unwrap();
    let want = run(&mut oracle, &x, m, k, n);
    let scale = want.iter().fold(0f32, |a, v| a.max(v.abs()));
    assert!(scale > 1.0, "a degenerate layer: max |output| = {scale}");
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!((g - w).abs() <= 0.02 * scale, "output {i}: {g} vs {w}");
    }
}
