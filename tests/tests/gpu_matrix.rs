//! Every CUDA kernel of the built-in tables against the f64 reference, in one matrix.
//!
//! The matrix walks a fixed list of layers (rows below: block 128x128, per-tensor static and
//! dynamic, per-token with per-channel or per-tensor weights, weight-only; ragged N and K
//! as real models have them, tiny and odd shapes; small M 1..33 and larger M up to 4096;
//! f32/f16/bf16 in and out; bias; host and device weights; wide scale ranges). For each
//! layer, every CUDA entry of every table in `fp8_linear::tables::BUILTIN` (each kernel
//! once, however many tables list it) whose `can_implement` accepts the layer and whose
//! arch (or, forced, its `force_arch`) matches this GPU is built with `Linear::with_entry`,
//! plus the option variants that concern it (Hopper with its K splits capped, Marlin
//! compiled for sm_80), and run for every M of the row (the first M rows of one fresh random
//! activation matrix). Each output (poisoned before the call) is compared with the f64
//! reference of the numerics the entry declares (`entry.reference_config`, then the CPU
//! oracle `CpuReference`, which quantizes activations by its own statement of the spec):
//! NaN never passes; the relative Frobenius error and every element must stay within the
//! bounds of the entry's backend, numerics and output dtype (`fp8_linear_tests::check`,
//! where each is derived: e.g. bf16 output of a W8A8 kernel 1e-2 Frobenius and per element
//! its bf16 rounding plus 2e-3 of its row's largest output; f32 output of the portable
//! kernel 1e-5 and 1e-5; W8A16 three 16-bit roundings of the row). Weight codes are drawn
//! over all 254 finite e4m3 codes, the data is seeded (the seed is printed;
//! `FP8_TEST_SEED` replays it). Each layer's kernels run on the same data and share one
//! reference per numerics; large outputs are checked on a spread of rows (`check_rows`).
//!
//! One line per cell goes to stderr (kernel, variant, layer, M, N, K, dtypes, weights, rel
//! err, worst element); failures are collected and reported together at the end, after
//! checking that every CUDA entry that can run on this GPU passed at least one cell. An
//! entry whose arch does not match this GPU is a visible skip, and a failure under
//! `FP8_REQUIRE_CUDA=1` unless `FP8_ALLOW_ARCH_SKIPS` allows it.
//!
//! `FP8_MATRIX=quick` keeps the small layers only (N*K <= 2^20, M <= 300), for runs under
//! compute-sanitizer; `FP8_MATRIX_KERNELS=HopperBlockFp8,MarlinFp8` runs only the kernels
//! named. Skips without a GPU unless FP8_REQUIRE_CUDA=1. Two checks run without a GPU: the
//! rows give every CUDA kernel cells on every GPU generation, and the reference equals the
//! direct f64 formulas.

use std::collections::HashMap;

use fp8_linear::cpu::reference::rel_frobenius;
use fp8_linear::cuda::{HopperBlockFp8, MarlinFp8};
use fp8_linear::{
    Capability, DType, GroupShape, KernelEntry, KernelOptions, LayerConfig, Linear, QuantKey,
    Registered, ScaleDtype, Target,
};
use fp8_linear_tests::check::{compare_rows, Tolerance};
use fp8_linear_tests::gpu::{
    check_rows, cuda_entries, gpu_or_skip, pick_rows, upload_as, AnyBuffer, DeviceLayer,
};
use fp8_linear_tests::layers::{random_activations, reference_rows, HostLayer, WeightGen};
use fp8_linear_tests::skip::try_arch_skip;

const SM80: Capability = Capability::new(8, 0);

/// 1 x 128 weight scale groups (weight-only layers).
const WEIGHT_GROUP_128: QuantKey = QuantKey {
    group: GroupShape::Group { cols: 128 },
    scale_dtype: ScaleDtype::F32,
    dynamic: false,
};

/// The layer kinds of the matrix.
#[derive(Copy, Clone, Debug)]
enum Kind {
    /// 128x128 weight blocks, dynamic 1x128 activation groups.
    Block,
    /// Per-tensor weight, static per-tensor activation scale.
    TensorStatic,
    /// Per-tensor weight, dynamic per-tensor activation scale.
    TensorDynamic,
    /// Per-channel weight, dynamic per-token activations.
    TokenChannel,
    /// Per-tensor weight, dynamic per-token activations.
    TokenTensorWeight,
    /// FP8 weight with this key, unquantized activations (W8A16).
    WeightOnly(QuantKey),
    /// `rows` x `cols` weight blocks, dynamic 1 x `cols` activation groups; power-of-two
    /// (ue8m0) weight and activation scales when `ue8m0`.
    Layout { rows: u32, cols: u32, ue8m0: bool },
}

impl Kind {
    fn config(self, n: usize, k: usize, input: DType, out: DType, bias: bool) -> LayerConfig {
        let c = match self {
            Kind::Block => LayerConfig::block_128(n, k, input, out),
            Kind::TensorStatic => LayerConfig::per_tensor_static(n, k, input, out),
            Kind::TensorDynamic => LayerConfig {
                activation: Some(QuantKey::ACT_PER_TENSOR_DYNAMIC),
                ..LayerConfig::per_tensor_static(n, k, input, out)
            },
            Kind::TokenChannel => LayerConfig::per_token_per_channel(n, k, input, out),
            Kind::TokenTensorWeight => LayerConfig {
                weight: QuantKey::WEIGHT_PER_TENSOR,
                ..LayerConfig::per_token_per_channel(n, k, input, out)
            },
            Kind::WeightOnly(key) => LayerConfig {
                output_dtype: out,
                ..LayerConfig::weight_only(key, n, k, input)
            },
            Kind::Layout { rows, cols, ue8m0 } => {
                let scale_dtype = if ue8m0 {
                    ScaleDtype::Ue8m0
                } else {
                    ScaleDtype::F32
                };
                LayerConfig::block(n, k, (rows, cols), scale_dtype, input, out)
            }
        };
        LayerConfig { bias, ..c }
    }

    fn name(self) -> String {
        match self {
            Kind::Block => "block128".into(),
            Kind::TensorStatic => "tensor/static".into(),
            Kind::TensorDynamic => "tensor/dynamic".into(),
            Kind::TokenChannel => "token/channel".into(),
            Kind::TokenTensorWeight => "token/tensor-w".into(),
            Kind::WeightOnly(key) => format!("w8a16 {}", key.group),
            Kind::Layout { rows, cols, ue8m0 } => {
                format!("block{rows}x{cols}{}", if ue8m0 { "/ue8m0" } else { "" })
            }
        }
    }
}

/// An option variant of a kernel, run next to its default build on the rows that ask for it.
#[derive(Copy, Clone, Debug)]
enum Variant {
    /// The Hopper kernel with its K splits capped (1: no split-K).
    MaxSplits(u16),
    /// The Marlin kernel compiled for an older GPU (the code an A100 runs), on a GPU of
    /// another capability.
    CompileFor(Capability),
}

impl Variant {
    fn applies(self, entry: &KernelEntry, gpu: Capability) -> bool {
        match self {
            Variant::MaxSplits(_) => entry.name == HopperBlockFp8::NAME,
            Variant::CompileFor(cap) => entry.name == MarlinFp8::NAME && gpu != cap,
        }
    }

    fn options(self) -> KernelOptions {
        match self {
            Variant::MaxSplits(s) => KernelOptions::none().max_splits(s),
            Variant::CompileFor(cap) => KernelOptions::none().compile_for(cap),
        }
    }

    fn label(self) -> String {
        match self {
            Variant::MaxSplits(s) => format!("splits<={s}"),
            Variant::CompileFor(c) => format!("sm_{}{} code", c.major, c.minor),
        }
    }
}

/// A group of layers: every kind x shape x dtype pair, each run for every M.
struct Row {
    what: &'static str,
    kinds: &'static [Kind],
    shapes: &'static [(usize, usize)],
    dtypes: &'static [(DType, DType)],
    ms: &'static [usize],
    bias: bool,
    device_weights: bool,
    gen: WeightGen,
    variants: &'static [Variant],
}

use DType::{Bf16, F16, F32};

const BLOCK_MS: &[usize] = &[1, 7, 16, 33, 64, 130, 200, 1000, 1024];
const SMALL_MS: &[usize] = &[1, 3, 7, 16, 33, 65, 83, 200];
const MARLIN_MS: &[usize] = &[1, 7, 16, 33, 64, 200, 1024];
const SCALED_MS: &[usize] = &[1, 7, 16, 33, 83, 200];
const WEIGHT_ONLY_MS: &[usize] = &[1, 7, 16, 33, 100, 200];
const WIDE_SHAPES: &[(usize, usize)] = &[
    (7748, 3884),
    (300, 200),
    (129, 130),
    (64, 32),
    (1, 1),
    (4096, 7168),
];
const WEIGHT_ONLY_KINDS: &[Kind] = &[
    Kind::WeightOnly(QuantKey::WEIGHT_PER_CHANNEL),
    Kind::WeightOnly(QuantKey::WEIGHT_PER_TENSOR),
    Kind::WeightOnly(WEIGHT_GROUP_128),
    Kind::WeightOnly(QuantKey::WEIGHT_BLOCK_128),
];

/// The checkpoint layouts besides 128x128 f32 (32x32 ue8m0 is DeepSeek's 2026 layout;
/// 8, 16 and 96 rows only the portable kernel takes).
const LAYOUT_KINDS: &[Kind] = &[
    Kind::Layout {
        rows: 32,
        cols: 32,
        ue8m0: false,
    },
    Kind::Layout {
        rows: 32,
        cols: 32,
        ue8m0: true,
    },
    Kind::Layout {
        rows: 64,
        cols: 64,
        ue8m0: false,
    },
    Kind::Layout {
        rows: 128,
        cols: 64,
        ue8m0: false,
    },
    Kind::Layout {
        rows: 64,
        cols: 128,
        ue8m0: true,
    },
    Kind::Layout {
        rows: 16,
        cols: 128,
        ue8m0: false,
    },
    Kind::Layout {
        rows: 8,
        cols: 32,
        ue8m0: false,
    },
    Kind::Layout {
        rows: 96,
        cols: 128,
        ue8m0: false,
    },
    Kind::Layout {
        rows: 128,
        cols: 128,
        ue8m0: true,
    },
];

const ROWS: &[Row] = &[
    Row {
        // N != K everywhere, tails in N and K (7748 x 3884); M covers one row, ragged
        // split-K tiles, exactly one BM=64 tile, ragged BM=128 tiles and many tiles.
        what: "model shapes",
        kinds: &[Kind::Block],
        shapes: &[
            (7748, 3884),
            (4096, 3884),
            (2112, 7168),
            (1536, 7168),
            (7744, 2048),
            (576, 1536),
            (2112, 1536),
        ],
        dtypes: &[(Bf16, Bf16)],
        ms: BLOCK_MS,
        bias: false,
        device_weights: false,
        gen: WeightGen::Spread(5),
        variants: &[Variant::MaxSplits(1), Variant::MaxSplits(2)],
    },
    Row {
        what: "model shapes, device weights",
        kinds: &[Kind::Block],
        shapes: &[(4096, 3884), (7748, 3884)],
        dtypes: &[(Bf16, Bf16)],
        ms: &[1, 7, 200],
        bias: false,
        device_weights: true,
        gen: WeightGen::Spread(5),
        variants: &[],
    },
    Row {
        // Boxes larger than the whole tensor, odd N (scalar stores), K below one block.
        what: "tiny and odd",
        kinds: &[Kind::Block],
        shapes: &[
            (1, 1),
            (16, 16),
            (129, 130),
            (300, 200),
            (7, 2048),
            (256, 384),
            (64, 32),
        ],
        dtypes: &[(Bf16, Bf16)],
        ms: SMALL_MS,
        bias: false,
        device_weights: false,
        gen: WeightGen::Spread(5),
        variants: &[Variant::MaxSplits(1)],
    },
    Row {
        // Block scales over 24 binades: Marlin's per-channel rebase of the block scales.
        what: "wide bf16 scales",
        kinds: &[Kind::Block],
        shapes: WIDE_SHAPES,
        dtypes: &[(Bf16, Bf16)],
        ms: MARLIN_MS,
        bias: false,
        device_weights: false,
        gen: WeightGen::Spread(12),
        variants: &[Variant::CompileFor(SM80)],
    },
    Row {
        // f16: 6 binades keep every block scale representable after the rebase.
        what: "wide f16 scales",
        kinds: &[Kind::Block],
        shapes: WIDE_SHAPES,
        dtypes: &[(F16, F16)],
        ms: MARLIN_MS,
        bias: false,
        device_weights: false,
        gen: WeightGen::Spread(6),
        variants: &[Variant::CompileFor(SM80)],
    },
    Row {
        what: "dtypes, device weights",
        kinds: &[Kind::Block],
        shapes: &[(520, 1000), (257, 259), (256, 512)],
        dtypes: &[
            (F32, F32),
            (F16, F16),
            (Bf16, F32),
            (F32, Bf16),
            (Bf16, Bf16),
        ],
        ms: &[5, 300, 4096],
        bias: false,
        device_weights: true,
        gen: WeightGen::Spread(5),
        variants: &[],
    },
    Row {
        // M = 37 splits K (few tiles); M = 900 over N = 4096 does not.
        what: "bias",
        kinds: &[Kind::Block],
        shapes: &[(392, 700), (4096, 512)],
        dtypes: &[(Bf16, F32), (Bf16, Bf16), (F16, F16)],
        ms: &[1, 37, 900],
        bias: true,
        device_weights: false,
        gen: WeightGen::Spread(3),
        variants: &[Variant::MaxSplits(1)],
    },
    Row {
        what: "per-tensor",
        kinds: &[Kind::TensorStatic, Kind::TensorDynamic],
        shapes: &[(256, 384), (1024, 3884), (4096, 1000), (512, 512)],
        dtypes: &[(Bf16, Bf16), (Bf16, F16), (Bf16, F32), (F16, F16)],
        ms: SCALED_MS,
        bias: false,
        device_weights: false,
        gen: WeightGen::Spread(4),
        variants: &[],
    },
    Row {
        what: "per-token",
        kinds: &[Kind::TokenChannel, Kind::TokenTensorWeight],
        shapes: &[(256, 384), (2048, 3884), (2048, 7168), (1536, 130)],
        dtypes: &[(Bf16, Bf16), (F32, Bf16), (F16, F16)],
        ms: SCALED_MS,
        bias: false,
        device_weights: false,
        gen: WeightGen::Spread(4),
        variants: &[],
    },
    Row {
        what: "scaled, device weights",
        kinds: &[Kind::TensorStatic, Kind::TokenChannel],
        shapes: &[(1024, 3884)],
        dtypes: &[(Bf16, Bf16)],
        ms: &[7, 200],
        bias: false,
        device_weights: true,
        gen: WeightGen::Spread(4),
        variants: &[],
    },
    Row {
        // Scales far above what f16 holds after the rebase: the f32 channel scale
        // carries them.
        what: "weight-only, bias, device weights",
        kinds: WEIGHT_ONLY_KINDS,
        shapes: &[(1000, 1000)],
        dtypes: &[(Bf16, Bf16), (F16, F16)],
        ms: WEIGHT_ONLY_MS,
        bias: true,
        device_weights: true,
        gen: WeightGen::LargeScales,
        variants: &[Variant::CompileFor(SM80)],
    },
    Row {
        // Tails in N and K against every block shape (7748 = 60.5 x 128, 3884 = 121.4 x 32),
        // K below one block, one row and many; split-K and unsplit; Marlin's sm_80 code.
        what: "layouts",
        kinds: LAYOUT_KINDS,
        shapes: &[
            (7748, 3884),
            (2112, 1536),
            (300, 200),
            (129, 130),
            (64, 32),
            (1, 1),
        ],
        dtypes: &[(Bf16, Bf16)],
        ms: &[1, 7, 16, 33, 130, 1000],
        bias: false,
        device_weights: false,
        gen: WeightGen::Spread(5),
        variants: &[Variant::MaxSplits(1), Variant::CompileFor(SM80)],
    },
    Row {
        what: "layouts, dtypes, bias, device weights",
        kinds: &[
            Kind::Layout {
                rows: 32,
                cols: 32,
                ue8m0: true,
            },
            Kind::Layout {
                rows: 128,
                cols: 64,
                ue8m0: false,
            },
        ],
        shapes: &[(520, 1000), (257, 259)],
        dtypes: &[(F32, F32), (F16, F16), (Bf16, F32)],
        ms: &[5, 300],
        bias: true,
        device_weights: true,
        gen: WeightGen::Spread(4),
        variants: &[],
    },
    Row {
        what: "weight-only, ragged, bias",
        kinds: WEIGHT_ONLY_KINDS,
        shapes: &[(7748, 1000)],
        dtypes: &[(Bf16, Bf16), (F16, F16)],
        ms: WEIGHT_ONLY_MS,
        bias: true,
        device_weights: false,
        gen: WeightGen::LargeScales,
        variants: &[],
    },
];

/// `FP8_MATRIX=quick`: layers with at most this many weight elements ...
const QUICK_NK: usize = 1 << 20;
/// ... and M up to this.
const QUICK_M: usize = 300;

/// How an entry runs on a GPU of capability `cap`: natively, forced (only its `force_arch`
/// matches), or not at all.
fn how_it_runs(e: &KernelEntry, cap: Capability) -> Option<&'static str> {
    if e.arch.matches(Some(cap)) {
        Some("default")
    } else if e.force_arch.is_some_and(|a| a.matches(Some(cap))) {
        Some("forced")
    } else {
        None
    }
}

/// Which part of the matrix runs: `FP8_MATRIX=quick` (small layers only, for the
/// sanitizers) and `FP8_MATRIX_KERNELS=A,B` (only these kernels, by name).
#[derive(Clone, Debug, Default)]
struct Scope {
    quick: bool,
    kernels: Option<Vec<String>>,
}

impl Scope {
    fn from_env() -> Self {
        let var = |v: &str| std::env::var(v).ok().map(|s| s.trim().to_string());
        Scope {
            quick: var("FP8_MATRIX").is_some_and(|v| v == "quick"),
            kernels: var("FP8_MATRIX_KERNELS")
                .filter(|v| !v.is_empty())
                .map(|v| {
                    v.split(',')
                        .map(|s| s.trim().to_string())
                        .filter(|s| !s.is_empty())
                        .collect()
                }),
        }
    }

    fn entries(&self) -> Vec<&'static KernelEntry> {
        let all = cuda_entries();
        if let Some(names) = &self.kernels {
            for n in names {
                assert!(
                    all.iter().any(|e| e.name.eq_ignore_ascii_case(n)),
                    "FP8_MATRIX_KERNELS names {n}, which is no CUDA kernel of the built-in tables"
                );
            }
        }
        all.into_iter()
            .filter(|e| {
                self.kernels
                    .as_ref()
                    .is_none_or(|ns| ns.iter().any(|n| e.name.eq_ignore_ascii_case(n)))
            })
            .collect()
    }
}

/// One layer of the matrix with the kernels (and variants) that run it on a GPU.
struct LayerPlan {
    row: &'static Row,
    kind: Kind,
    config: LayerConfig,
    /// (entry, variant label, its options)
    kernels: Vec<(&'static KernelEntry, String, KernelOptions)>,
}

impl LayerPlan {
    fn name(&self) -> String {
        let c = &self.config;
        format!(
            "{:<22} N={:<5} K={:<5} {}->{}{} {}",
            self.kind.name(),
            c.n,
            c.k,
            c.input_dtype,
            c.output_dtype,
            if c.bias { " +bias" } else { "" },
            if self.row.device_weights {
                "device W"
            } else {
                "host W"
            }
        )
    }

    fn ms(&self, scope: &Scope) -> impl Iterator<Item = usize> + '_ {
        let quick = scope.quick;
        self.row
            .ms
            .iter()
            .copied()
            .filter(move |&m| !quick || m <= QUICK_M)
    }
}

/// Every layer of the matrix in scope, with the kernels that take it on a GPU of
/// capability `cap` (layers no kernel takes are left out).
fn plan(cap: Capability, scope: &Scope) -> Vec<LayerPlan> {
    let entries = scope.entries();
    let mut out = Vec::new();
    for row in ROWS {
        if row.ms.iter().all(|&m| scope.quick && m > QUICK_M) {
            continue;
        }
        for &kind in row.kinds {
            for &(n, k) in row.shapes {
                for &(input, output) in row.dtypes {
                    if scope.quick && n * k > QUICK_NK {
                        continue;
                    }
                    let config = kind.config(n, k, input, output, row.bias);
                    let mut kernels = Vec::new();
                    for &e in &entries {
                        let Some(how) = how_it_runs(e, cap) else {
                            continue;
                        };
                        if (e.can_implement)(&config).is_err() {
                            continue;
                        }
                        kernels.push((e, how.to_string(), KernelOptions::none()));
                        for &v in row.variants {
                            if v.applies(e, cap) {
                                kernels.push((e, v.label(), v.options()));
                            }
                        }
                    }
                    if !kernels.is_empty() {
                        out.push(LayerPlan {
                            row,
                            kind,
                            config,
                            kernels,
                        });
                    }
                }
            }
        }
    }
    out
}

/// The f64 references of one layer, each computed once per reference config (numerics) and
/// shared by every kernel and M. The activations of each M are the first M rows of one
/// `[max M, K]` matrix, so a row's reference is the same for every M: one reference run
/// covers the rows any M checks. Dynamic per-tensor activations (whose scale depends on
/// every row) get one run per M.
struct References<'a> {
    host: &'a HostLayer,
    exact: &'a [f32],
    max_m: usize,
    /// Every row some M checks, sorted.
    union: Vec<usize>,
    by_row: HashMap<LayerConfig, Vec<f64>>,
    by_m: HashMap<(LayerConfig, usize), Vec<f64>>,
}

impl<'a> References<'a> {
    fn new(host: &'a HostLayer, exact: &'a [f32], max_m: usize, ms: &[usize]) -> Self {
        let (n, k) = (host.config.n, host.config.k);
        let mut union: Vec<usize> = ms.iter().flat_map(|&m| check_rows(m, n, k)).collect();
        union.sort_unstable();
        union.dedup();
        References {
            host,
            exact,
            max_m,
            union,
            by_row: HashMap::new(),
            by_m: HashMap::new(),
        }
    }

    /// The reference of `ref_cfg` for rows `rows` of the M-row activations,
    /// `[rows.len(), n]`.
    fn rows(&mut self, ref_cfg: &LayerConfig, m: usize, rows: &[usize]) -> Vec<f64> {
        let (n, k) = (ref_cfg.n, ref_cfg.k);
        let fail = |e| panic!("the CPU reference failed: {e}");
        let per_tensor_dynamic = ref_cfg
            .activation
            .is_some_and(|a| a.dynamic && matches!(a.group, GroupShape::PerTensor));
        if per_tensor_dynamic {
            return self
                .by_m
                .entry((*ref_cfg, m))
                .or_insert_with(|| {
                    reference_rows(ref_cfg, self.host, &self.exact[..m * k], m, rows)
                        .unwrap_or_else(fail)
                })
                .clone();
        }
        let (host, exact, max_m, union) = (self.host, self.exact, self.max_m, &self.union);
        let all = self.by_row.entry(*ref_cfg).or_insert_with(|| {
            reference_rows(ref_cfg, host, exact, max_m, union).unwrap_or_else(fail)
        });
        rows.iter()
            .flat_map(|r| {
                let i = union
                    .binary_search(r)
                    .expect("every checked row is in the union");
                all[i * n..(i + 1) * n].iter().copied()
            })
            .collect()
    }
}

/// One kernel built for the current layer.
struct Built {
    entry: &'static KernelEntry,
    variant: String,
    layer: Linear,
}

#[test]
fn every_cuda_entry_matches_the_reference() {
    let Some(gpu) = gpu_or_skip("every_cuda_entry_matches_the_reference") else {
        return;
    };
    let cap = gpu.capability();
    let target = Target::from_gpu(gpu.clone());
    let scope = Scope::from_env();
    let entries = scope.entries();
    eprintln!(
        "matrix on {} (sm_{}{}){}{}",
        gpu.device(),
        cap.major,
        cap.minor,
        if scope.quick { ", quick" } else { "" },
        scope
            .kernels
            .as_ref()
            .map_or(String::new(), |k| format!(", kernels {}", k.join(",")))
    );
    for e in &entries {
        eprintln!(
            "  entry {:<22} arch {:<10} force_arch {:<10} numerics {:<6} on this GPU: {}",
            e.name,
            e.arch.to_string(),
            e.force_arch.map_or("-".to_string(), |a| a.to_string()),
            e.numerics.to_string(),
            how_it_runs(e, cap).unwrap_or("not runnable")
        );
    }
    let mut passed: HashMap<&'static str, usize> = entries.iter().map(|e| (e.name, 0)).collect();
    let mut failures: Vec<String> = Vec::new();
    let mut cells = 0usize;
    for lp in plan(cap, &scope) {
        let cfg = lp.config;
        let (n, k) = (cfg.n, cfg.k);
        let layer_name = lp.name();
        eprintln!(
            "layer {layer_name} ({}): {}",
            lp.row.what,
            lp.kernels
                .iter()
                .map(|(e, v, _)| format!("{} [{v}]", e.name))
                .collect::<Vec<_>>()
                .join(", ")
        );
        let host = HostLayer::random(&cfg, lp.row.gen);
        let device = lp
            .row
            .device_weights
            .then(|| DeviceLayer::upload(&gpu, &host).unwrap_or_else(|e| panic!("upload: {e}")));
        let weights = match &device {
            Some(d) => d.weights(),
            None => host.weights(),
        };
        let mut built: Vec<Built> = Vec::new();
        for (entry, variant, opts) in &lp.kernels {
            match Linear::with_entry(entry, &target, &cfg, &weights, opts) {
                Ok(layer) => built.push(Built {
                    entry,
                    variant: variant.clone(),
                    layer,
                }),
                Err(e) => {
                    let msg = format!("{} [{variant}] {layer_name}: build failed: {e}", entry.name);
                    eprintln!("cell {msg}");
                    failures.push(msg);
                }
            }
        }
        let ms: Vec<usize> = lp.ms(&scope).collect();
        let max_m = ms.iter().copied().max().unwrap_or(0);
        // The activations of every M: the first M rows of one random [max M, K] matrix.
        let x = random_activations(max_m, k);
        let (xin, exact) = upload_as(&gpu, &x, cfg.input_dtype);
        let mut refs = References::new(&host, &exact, max_m, &ms);
        for &m in &ms {
            let rows = check_rows(m, n, k);
            for b in &mut built {
                // A kernel of bounded rows (the decode kernel: M = 1) serves only those.
                if !b.entry.rows.contains(m) {
                    continue;
                }
                cells += 1;
                let cell = format!(
                    "{:<18} {:<12} M={m:<5} {layer_name}",
                    b.entry.name, b.variant
                );
                let mut y = AnyBuffer::poisoned(&gpu, m * n, cfg.output_dtype);
                if let Err(e) = b
                    .layer
                    .forward(&xin.tensor([m, k]), &mut y.tensor_mut([m, n]))
                {
                    eprintln!("cell {cell}: forward failed: {e}");
                    failures.push(format!("{cell}: forward failed: {e}"));
                    continue;
                }
                let got = y.to_f32();
                if let Some(i) = got.iter().position(|v| v.is_nan()) {
                    // Anywhere in the output, checked rows or not.
                    eprintln!("cell {cell}: NaN at output index {i} FAIL");
                    failures.push(format!(
                        "{cell}: NaN at output index {i} (unwritten or poisoned)"
                    ));
                    continue;
                }
                let want = refs.rows(&b.entry.reference_config(&cfg), m, &rows);
                let tol = Tolerance::for_kernel(b.entry, &cfg);
                let c = compare_rows(&pick_rows(&got, n, &rows), &want, n, &rows, tol);
                let ok = c.ok();
                eprintln!(
                    "cell {cell}: {} {}",
                    c.summary(),
                    if ok { "ok" } else { "FAIL" }
                );
                if ok {
                    *passed.get_mut(b.entry.name).expect("listed") += 1;
                } else {
                    failures.push(format!("{cell}: {}", c.summary()));
                }
            }
        }
    }
    for e in &entries {
        let n = passed[e.name];
        match how_it_runs(e, cap) {
            Some(how) => {
                eprintln!("entry {:<22} ({how}): {n} cells passed", e.name);
                if n == 0 {
                    failures.push(format!(
                        "{} runs on this GPU ({how}) but passed no cell of the matrix",
                        e.name
                    ));
                }
            }
            None => {
                let reason = format!(
                    "{} (arch {}) does not run on sm_{}{}: not run",
                    e.name, e.arch, cap.major, cap.minor
                );
                eprintln!("entry {:<22}: {reason}", e.name);
                if let Err(msg) = try_arch_skip("every_cuda_entry_matches_the_reference", &reason) {
                    failures.push(msg);
                }
            }
        }
    }
    eprintln!("matrix: {cells} cells, {} failures", failures.len());
    assert!(
        failures.is_empty(),
        "{} of {cells} cells failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Without a GPU: on every GPU generation the kernels target, every CUDA entry that can run
/// there gets at least one layer of the matrix (also in quick mode), so the final coverage
/// assertion on the GPU host is about the kernels, not about the rows.
#[test]
fn the_matrix_covers_every_cuda_entry_on_every_gpu_generation() {
    for quick in [false, true] {
        let scope = Scope {
            quick,
            kernels: None,
        };
        for cap in [(8, 0), (8, 6), (8, 9), (9, 0), (10, 0), (12, 0)] {
            let cap = Capability::new(cap.0, cap.1);
            let plans = plan(cap, &scope);
            let mut cells: HashMap<&str, usize> = HashMap::new();
            for lp in &plans {
                for (e, _, _) in &lp.kernels {
                    let ms = lp.ms(&scope).filter(|&m| e.rows.contains(m)).count();
                    *cells.entry(e.name).or_default() += ms;
                }
            }
            for e in cuda_entries() {
                if how_it_runs(e, cap).is_some() {
                    assert!(
                        cells.get(e.name).copied().unwrap_or(0) > 0,
                        "{} runs on sm_{}{} but no layer of the matrix (quick: {quick}) is for it",
                        e.name,
                        cap.major,
                        cap.minor
                    );
                }
            }
            let total: usize = cells.values().sum();
            eprintln!(
                "sm_{}{}{}: {} layers, {total} cells: {:?}",
                cap.major,
                cap.minor,
                if quick { " quick" } else { "" },
                plans.len(),
                {
                    let mut v: Vec<_> = cells.into_iter().collect();
                    v.sort();
                    v
                }
            );
        }
    }
}

/// Without a GPU: the reference the matrix compares with (the entry's reference config, the
/// CPU oracle, rows in parallel, a dynamic per-tensor scale fixed over all rows) equals the
/// direct f64 formulas the kernel tests used before, on every kind of layer, for all rows
/// and for a subset.
#[test]
fn the_matrix_reference_equals_the_direct_formulas() {
    use fp8_linear::cpu::reference::{block_gemm_f64, scaled_gemm_f64, weight_only_f64};
    use fp8_linear_tests::layers::STATIC_INPUT_SCALE;
    use fp8_linear_tests::oracle;

    let (m, n, k) = (9, 200, 300);
    let kinds = [
        Kind::Block,
        Kind::TensorStatic,
        Kind::TensorDynamic,
        Kind::TokenChannel,
        Kind::TokenTensorWeight,
        Kind::WeightOnly(QuantKey::WEIGHT_PER_CHANNEL),
        Kind::WeightOnly(QuantKey::WEIGHT_PER_TENSOR),
        Kind::WeightOnly(WEIGHT_GROUP_128),
        Kind::WeightOnly(QuantKey::WEIGHT_BLOCK_128),
    ];
    for kind in kinds {
        for bias in [false, true] {
            let cfg = kind.config(n, k, DType::Bf16, DType::Bf16, bias);
            let host = HostLayer::random(&cfg, WeightGen::Spread(4));
            let x = random_activations(m, k);
            let (w, ws) = (&host.codes, &host.scales);
            let mut want = match cfg.activation {
                // Activations quantized by the test oracle, not by any kernel's code.
                Some(a) => match a.group {
                    GroupShape::Group { .. } => {
                        let (q, s) = oracle::quantize_groups(&x, m, k, 128);
                        block_gemm_f64(&q, &s, w, ws, m, n, k, (128, 128))
                    }
                    GroupShape::PerToken => {
                        let (q, s) = oracle::quantize_per_token(&x, m, k, None);
                        scaled_gemm_f64(&q, &s, w, ws, m, n, k)
                    }
                    _ => {
                        let fixed = (!a.dynamic).then_some(STATIC_INPUT_SCALE);
                        let (q, s) = oracle::quantize_per_tensor(&x, fixed);
                        scaled_gemm_f64(&q, &[s], w, ws, m, n, k)
                    }
                },
                None => {
                    let [_, cols] = cfg.weight_scale_shape();
                    weight_only_f64(&x, w, m, n, k, |j, kk| match cfg.weight.group {
                        GroupShape::PerTensor => ws[0],
                        GroupShape::PerChannel => ws[j],
                        GroupShape::Group { cols: g } => ws[j * cols + kk / g as usize],
                        GroupShape::Block { rows, cols: g } => {
                            ws[(j / rows as usize) * cols + kk / g as usize]
                        }
                        GroupShape::PerToken => unreachable!("not a weight key"),
                    })
                }
            };
            if let Some(b) = &host.bias {
                for (i, v) in want.iter_mut().enumerate() {
                    *v += f64::from(b[i % n]);
                }
            }
            let all: Vec<usize> = (0..m).collect();
            let got = reference_rows(&cfg, &host, &x, m, &all).unwrap();
            let f32s: Vec<f32> = got.iter().map(|&v| v as f32).collect();
            let err = rel_frobenius(&f32s, &want);
            assert!(err < 1e-6, "{} bias={bias}: {err}", kind.name());
            // A subset of rows, in chunks: the same rows of the full result.
            let some = [0, 4, 8];
            let part = reference_rows(&cfg, &host, &x, m, &some).unwrap();
            assert_eq!(
                part,
                pick_rows(&got, n, &some),
                "{} bias={bias}",
                kind.name()
            );
        }
    }
    // The shared references of the matrix: the same numbers as one reference run per M.
    for kind in [Kind::Block, Kind::TensorDynamic, Kind::TokenChannel] {
        let cfg = kind.config(n, k, DType::F16, DType::F16, true);
        let host = HostLayer::random(&cfg, WeightGen::Spread(4));
        let ms = [1, 3, 9];
        let x = random_activations(9, k);
        let mut refs = References::new(&host, &x, 9, &ms);
        for m in ms {
            let rows = check_rows(m, n, k);
            let alone = reference_rows(&cfg, &host, &x[..m * k], m, &rows).unwrap();
            assert_eq!(refs.rows(&cfg, m, &rows), alone, "{} M={m}", kind.name());
        }
    }
    // W8A16 numerics: the reference config drops the activation key.
    let cfg = Kind::Block.config(n, k, DType::Bf16, DType::Bf16, false);
    let w8a16 = fp8_linear::cuda::MarlinFp8::ENTRY.reference_config(&cfg);
    assert!(w8a16.activation.is_none());
    assert_eq!(
        fp8_linear::cuda::PortableBlockFp8::ENTRY.reference_config(&cfg),
        cfg
    );
}
