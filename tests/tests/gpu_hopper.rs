//! Kernel-specific checks of the Hopper wgmma + TMA block-FP8 kernel that the matrix
//! (gpu_matrix.rs: its numerics on every layer it takes, with and without capped K splits)
//! does not make: selection on the real device (first for a layer cuBLASLt cannot take,
//! never off sm_90), one kernel object reused while M changes (tensor maps rebuilt and
//! reused, scratch growth), and small-M diagnostics (bit-identical reruns, the portable
//! kernel on the same data, the GPU quantization against the oracle, the worst elements),
//! each asserted; and every tile height (64, 128, 192, 256 rows, fixed through the build
//! options, and the per-call choice) against the f64 reference on ragged layers, split and
//! unsplit, each call repeated bit-identical. Skips without a GPU unless FP8_REQUIRE_CUDA=1; on a GPU that is not
//! sm_90 it checks that selection never picks the kernel, then skips visibly (a failure
//! under FP8_REQUIRE_CUDA=1 unless FP8_ALLOW_ARCH_SKIPS allows it).

use fp8_linear::cuda::runtime::DeviceBuffer;
use fp8_linear::cuda::HopperBlockFp8;
use fp8_linear::{
    DType, Fp8Kernel, KernelOptions, LayerConfig, LayerWeights, Overrides, Registered, ScaleDtype,
    Target, Tensor,
};
use fp8_linear_tests::check::{compare, compare_rows, Tolerance};
use fp8_linear_tests::gpu::{
    block_reference_rows, build, check_rows, entry_runs_on, gpu_or_skip, pick_rows, run,
};
use fp8_linear_tests::layers::{
    quantize_groups, random_activations, random_block_weight, reference_rows, HostLayer, WeightGen,
};
use fp8_linear_tests::skip::arch_skip;

/// The GPU when it is a Hopper (sm_90, the kernel's arch); None after checking that
/// selection does not pick the kernel there and reporting the skip.
fn hopper(test: &str) -> Option<std::sync::Arc<fp8_linear::cuda::runtime::Gpu>> {
    let gpu = gpu_or_skip(test)?;
    let cap = gpu.capability();
    if !entry_runs_on(&HopperBlockFp8::ENTRY, cap, false) {
        let cfg = LayerConfig::block_128(4096, 7168, DType::Bf16, DType::Bf16);
        let chosen = fp8_linear::tables::BUILTIN.select(gpu.device(), &cfg, &Overrides::none());
        assert!(
            chosen
                .map(|s| s.entry.name != HopperBlockFp8::NAME)
                .unwrap_or(true),
            "HopperBlockFp8 selected on {cap}"
        );
        arch_skip(
            test,
            &format!(
                "HopperBlockFp8 is {} only; this GPU is {cap} (not selected there: checked)",
                HopperBlockFp8::ENTRY.arch
            ),
        );
        return None;
    }
    Some(gpu)
}

#[test]
fn repeated_calls_reuse_and_rebuild_tensor_maps() {
    let Some(gpu) = hopper("repeated_calls_reuse_and_rebuild_tensor_maps") else {
        return;
    };
    // One kernel object, M changing between calls (new activation tensor map, scratch
    // growth) and repeating (cached map): each result must match the reference.
    let (n, k) = (640, 1280);
    let cfg = LayerConfig::block_128(n, k, DType::Bf16, DType::Bf16);
    let (w, ws) = random_block_weight(n, k, 4);
    let weights = LayerWeights::new(
        Tensor::fp8(&w, [n, k]),
        Tensor::f32(&ws, [n.div_ceil(128), k.div_ceil(128)]),
    );
    let mut kernel = build(&gpu, &HopperBlockFp8::ENTRY, &cfg, &weights).unwrap();
    for m in [3, 3, 500, 64, 500, 2] {
        let x = random_activations(m, k);
        let (got, exact) = run(&gpu, kernel.as_mut(), &cfg, &x, m).unwrap();
        let (aq, as_) = quantize_groups(&exact, m, k);
        let rows: Vec<usize> = (0..m).collect();
        let want = block_reference_rows(&aq, &as_, &w, &ws, n, k, &rows);
        let c = compare(
            &got,
            &want,
            n,
            Tolerance::for_kernel(&HopperBlockFp8::ENTRY, &cfg),
        );
        eprintln!("M={m}: {}", c.summary());
        c.assert_ok(&format!("repeated call, M={m}"));
    }
}

#[test]
fn selected_first_on_hopper() {
    let Some(gpu) = hopper("selected_first_on_hopper") else {
        return;
    };
    let cfg = LayerConfig::block_128(7748, 3884, DType::Bf16, DType::Bf16);
    // N = 7748 is not a multiple of 16: cuBLASLt's block kernel refuses it, so the Hopper
    // kernel runs it: every M.
    let plan = fp8_linear::tables::BUILTIN
        .plan(gpu.device(), &cfg, &Overrides::none())
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        plan.to_string(),
        format!("M = 1..: {}", HopperBlockFp8::NAME)
    );
    let s = fp8_linear::tables::BUILTIN
        .select(gpu.device(), &cfg, &Overrides::none())
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(s.entry.name, HopperBlockFp8::NAME);
}

/// Small-M layers checked element by element: the Hopper kernel twice (bit-identical
/// results required), the portable kernel on the same data (its own, tighter bounds), the
/// GPU quantization (column-major scales) against the oracle (bit-exact required), and the
/// worst elements, printed; then each kernel's bounds.
#[test]
fn diagnose_small_m() {
    use fp8_linear::cuda::{ActQuant, Grouping, PortableBlockFp8, ScaleOrder};
    use fp8_linear_tests::gpu::upload_as;
    let Some(gpu) = hopper("diagnose_small_m") else {
        return;
    };
    let mut failures = Vec::new();
    for (m, n, k) in [
        (3, 16, 16),
        (3, 128, 128),
        (37, 384, 768),
        (37, 392, 700),
        (7, 7748, 3884),
        (64, 7748, 3884),
    ] {
        let cfg = LayerConfig::block_128(n, k, DType::Bf16, DType::F32);
        let (w, ws) = random_block_weight(n, k, 3);
        let weights = LayerWeights::new(
            Tensor::fp8(&w, [n, k]),
            Tensor::f32(&ws, [n.div_ceil(128), k.div_ceil(128)]),
        );
        let x = random_activations(m, k);
        let mut hop = build(&gpu, &HopperBlockFp8::ENTRY, &cfg, &weights).unwrap();
        let mut port = build(&gpu, &PortableBlockFp8::ENTRY, &cfg, &weights).unwrap();
        let (h1, exact) = run(&gpu, hop.as_mut(), &cfg, &x, m).unwrap();
        let (h2, _) = run(&gpu, hop.as_mut(), &cfg, &x, m).unwrap();
        let (p1, _) = run(&gpu, port.as_mut(), &cfg, &x, m).unwrap();
        let (aq, as_) = quantize_groups(&exact, m, k);
        // GPU quantization with column-major scales against the oracle, into poisoned
        // buffers (NaN codes and scales).
        let (xd, _) = upload_as(&gpu, &exact, DType::Bf16);
        let kb = k.div_ceil(128);
        let ldk = k.div_ceil(16) * 16;
        let mut qd = DeviceBuffer::<u8>::zeros(&gpu, m * ldk).unwrap();
        qd.fill_bytes(0x7f).unwrap();
        let mut sd = DeviceBuffer::<f32>::zeros(&gpu, m * kb).unwrap();
        sd.fill_bytes(0xff).unwrap();
        let quant = ActQuant::new(&gpu).unwrap();
        let xt = xd.tensor([m, k]);
        let xptr = match xt.data {
            fp8_linear::Storage::Device(mem, _) => mem.ptr,
            _ => unreachable!(),
        };
        // SAFETY: sizes as allocated above; every buffer is on the GPU handle's stream.
        unsafe {
            quant
                .groups(
                    xptr,
                    DType::Bf16,
                    (m, k),
                    Grouping::G128,
                    qd.ptr(),
                    ldk,
                    sd.ptr(),
                    ScaleOrder::ColMajor,
                    None,
                )
                .unwrap()
        };
        let (qh, sh) = (qd.to_host().unwrap(), sd.to_host().unwrap());
        let code_mismatch = (0..m * k)
            .filter(|&i| qh[(i / k) * ldk + i % k] != aq[i])
            .count();
        let scale_mismatch = (0..m * kb)
            .filter(|&i| sh[(i % kb) * m + i / kb].to_bits() != as_[i].to_bits())
            .count();
        let rows: Vec<usize> = (0..m).collect();
        let want = block_reference_rows(&aq, &as_, &w, &ws, n, k, &rows);
        let hc = compare(
            &h1,
            &want,
            n,
            Tolerance::for_kernel(&HopperBlockFp8::ENTRY, &cfg),
        );
        let h2c = compare(
            &h2,
            &want,
            n,
            Tolerance::for_kernel(&HopperBlockFp8::ENTRY, &cfg),
        );
        let pc = compare(
            &p1,
            &want,
            n,
            Tolerance::for_kernel(&PortableBlockFp8::ENTRY, &cfg),
        );
        let rerun = h1
            .iter()
            .zip(&h2)
            .filter(|(a, b)| a.to_bits() != b.to_bits())
            .count();
        eprintln!(
            "diag M={m} N={n} K={k}: hopper {} (rerun {:.2e}, {rerun} elements differ); \
             portable {}; GPU quant vs oracle: {code_mismatch} codes, {scale_mismatch} scales differ",
            hc.summary(),
            h2c.frob,
            pc.summary()
        );
        let mut row_err = Vec::new();
        for r in 0..m.min(16) {
            let g = &h1[r * n..(r + 1) * n];
            let wv = &want[r * n..(r + 1) * n];
            row_err.push(format!(
                "{:.0e}",
                fp8_linear::cpu::reference::rel_frobenius(g, wv)
            ));
        }
        eprintln!("  per-row error (first 16 rows): {}", row_err.join(" "));
        let mut idx: Vec<usize> = (0..m * n).collect();
        idx.sort_by(|&a, &b| {
            let da = (h1[a] as f64 - want[a]).abs();
            let db = (h1[b] as f64 - want[b]).abs();
            db.total_cmp(&da)
        });
        for &i in idx.iter().take(6) {
            eprintln!(
                "  worst: row {} col {}: hopper {} portable {} want {:.6}",
                i / n,
                i % n,
                h1[i],
                p1[i],
                want[i]
            );
        }
        let shape = format!("M={m} N={n} K={k}");
        // Split partials are stored, not accumulated with atomics, and summed in order:
        // the same input gives the same bits.
        if rerun != 0 {
            failures.push(format!("{shape}: two runs differ in {rerun} elements"));
        }
        if code_mismatch + scale_mismatch != 0 {
            failures.push(format!(
                "{shape}: GPU quantization differs from the oracle in {code_mismatch} codes \
                 and {scale_mismatch} scales"
            ));
        }
        if !hc.ok() {
            failures.push(format!("{shape}: HopperBlockFp8 {}", hc.summary()));
        }
        if !pc.ok() {
            failures.push(format!("{shape}: PortableBlockFp8 {}", pc.summary()));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Every tile height, fixed by the build options (`tile_rows`) and chosen per call, with
/// and without K splits, on ragged layers (M cuts the tall tiles' waves and warpgroups:
/// 65, 200, 300 rows), every output dtype, bias, and 64x64 ue8m0 blocks: each result
/// against the f64 reference, each call repeated and required bit-identical (the split
/// counters reset themselves between calls).
#[test]
fn every_tile_height_matches_the_reference() {
    let Some(gpu) = hopper("every_tile_height_matches_the_reference") else {
        return;
    };
    let mut biased = LayerConfig::block_128(640, 1280, DType::F16, DType::F32);
    biased.bias = true;
    // (N not a multiple of 16, K not of 128; small enough that the f64 reference is quick.)
    let layers = [
        LayerConfig::block_128(1940, 1100, DType::Bf16, DType::Bf16),
        biased,
        LayerConfig::block_128(300, 700, DType::F32, DType::F16),
        LayerConfig::block(
            1000,
            2000,
            (64, 64),
            ScaleDtype::Ue8m0,
            DType::Bf16,
            DType::Bf16,
        ),
    ];
    let heights = [None, Some(64), Some(128), Some(192), Some(256)];
    check_tiles(
        &gpu,
        &layers,
        &heights,
        &[None],
        &[None],
        &[1, 65, 200, 300],
    );
}

/// Every tile width (16 to 144 columns, fixed by `tile_cols`) at 64 and 128 rows, with and
/// without K splits, on the ragged layers of [`ragged_layers`]: the last tile's columns past
/// N, 128x128 blocks (the 96-, 112- and 144-column tiles straddle two scale rows), 64x64
/// ue8m0 and 32x32 blocks (a 16-column tile inside a scale row, a 128-column one over four),
/// every output dtype, bias; each result against the f64 reference, each call repeated and
/// required bit-identical. A width a layer's blocks lack is refused at build (checked by
/// name) and skipped.
#[test]
fn every_tile_width_matches_the_reference() {
    let Some(gpu) = hopper("every_tile_width_matches_the_reference") else {
        return;
    };
    let layers = ragged_layers();
    let widths = [16, 32, 64, 96, 112, 128, 144].map(Some);
    check_tiles(
        &gpu,
        &layers,
        &[Some(64), Some(128)],
        &widths,
        &[None],
        &[1, 70, 200],
    );
}

/// A narrow, an unaligned and the widest width (16, 96 and 144 columns) at 64 and 128 rows on
/// two ragged layers, split and unsplit: the small case the sanitizers run. The first layer's
/// rows (1940 bf16) take the direct stores, the second's (520 f16, 16-byte rows) the staged
/// epilogue; split partial sums are staged in both.
#[test]
fn widths_for_the_sanitizers() {
    let Some(gpu) = hopper("widths_for_the_sanitizers") else {
        return;
    };
    let layers = [
        LayerConfig::block_128(1940, 1100, DType::Bf16, DType::Bf16),
        LayerConfig::block_128(520, 1100, DType::Bf16, DType::F16),
    ];
    let widths = [Some(16), Some(96), Some(144)];
    check_tiles(
        &gpu,
        &layers,
        &[Some(64), Some(128)],
        &widths,
        &[None],
        &[1, 70],
    );
}

/// The tall tiles alone (192 and 256 rows), on two ragged layers (direct stores; the staged
/// epilogue with bias): the small case the race and sync checkers run.
#[test]
fn tall_tiles_match_the_reference() {
    let Some(gpu) = hopper("tall_tiles_match_the_reference") else {
        return;
    };
    let mut biased = LayerConfig::block_128(904, 1100, DType::Bf16, DType::Bf16);
    biased.bias = true;
    let layers = [
        LayerConfig::block_128(1940, 1100, DType::Bf16, DType::Bf16),
        biased,
    ];
    check_tiles(
        &gpu,
        &layers,
        &[Some(192), Some(256)],
        &[None],
        &[None],
        &[65, 300],
    );
}

/// The 128- and 256-row tiles with and without clusters of two CTAs sharing the weight
/// tile (multicast): M of one tile row (no pair: the planner falls back to one CTA), of
/// whole pairs, and of an odd count of tile rows (the last pair's second CTA has no rows and
/// only keeps its side of the shared loads going), N not a multiple of 128, 64x64 ue8m0
/// blocks, f32 output with bias.
#[test]
fn clustered_tiles_match_the_reference() {
    let Some(gpu) = hopper("clustered_tiles_match_the_reference") else {
        return;
    };
    let mut biased = LayerConfig::block(
        1000,
        2000,
        (64, 64),
        ScaleDtype::Ue8m0,
        DType::Bf16,
        DType::F32,
    );
    biased.bias = true;
    let layers = [
        LayerConfig::block_128(1940, 1100, DType::Bf16, DType::Bf16),
        biased,
    ];
    check_tiles(
        &gpu,
        &layers,
        &[Some(128), Some(256)],
        &[None],
        &[Some(1), Some(2)],
        &[100, 256, 300, 700],
    );
}

/// Ragged layers for the tile tests: N not a multiple of 128 and K not of 128, bf16 and f16
/// input, every output dtype, bias, 64x64 ue8m0 and 32x32 blocks.
fn ragged_layers() -> [LayerConfig; 4] {
    let mut biased = LayerConfig::block_128(640, 1280, DType::F16, DType::F32);
    biased.bias = true;
    [
        LayerConfig::block_128(1940, 1104, DType::Bf16, DType::Bf16),
        biased,
        LayerConfig::block(
            1000,
            2000,
            (64, 64),
            ScaleDtype::Ue8m0,
            DType::Bf16,
            DType::F16,
        ),
        LayerConfig::block(520, 904, (32, 32), ScaleDtype::F32, DType::F16, DType::Bf16),
    ]
}

/// One checked call of `m` rows of a layer: its config, host weights, reference config and
/// tolerance.
struct Checked<'a> {
    cfg: &'a LayerConfig,
    layer: &'a HostLayer,
    ref_cfg: &'a LayerConfig,
    tol: Tolerance,
    m: usize,
}

impl Checked<'_> {
    /// Runs `kernel` on fresh activations against the f64 reference, then `other` (None: the
    /// same kernel again) on the same input, bit for bit against the first output; each
    /// failure is pushed labelled.
    fn check(
        &self,
        gpu: &std::sync::Arc<fp8_linear::cuda::runtime::Gpu>,
        kernel: &mut dyn Fp8Kernel,
        other: Option<&mut dyn Fp8Kernel>,
        label: &str,
        failures: &mut Vec<String>,
    ) {
        let (cfg, m) = (self.cfg, self.m);
        let x = random_activations(m, cfg.k);
        let (got, exact) = run(gpu, kernel, cfg, &x, m).unwrap();
        let (what, second) = match other {
            Some(o) => ("the other kernel", run(gpu, o, cfg, &x, m).unwrap().0),
            None => ("a rerun", run(gpu, kernel, cfg, &x, m).unwrap().0),
        };
        let ids = check_rows(m, cfg.n, cfg.k);
        let want = reference_rows(self.ref_cfg, self.layer, &exact, m, &ids).unwrap();
        let c = compare_rows(&pick_rows(&got, cfg.n, &ids), &want, cfg.n, &ids, self.tol);
        let differ = got
            .iter()
            .zip(&second)
            .filter(|(a, b)| a.to_bits() != b.to_bits())
            .count();
        eprintln!("{label}: {} ({what}: {differ} differ)", c.summary());
        if !c.ok() {
            failures.push(format!("{label}: {}", c.summary()));
        }
        if differ > 0 {
            failures.push(format!("{label}: {what} differs in {differ} elements"));
        }
    }
}

/// Each layer x tile height x tile width (None: chosen per call) x cluster size (None:
/// chosen per call) x K split cap (none, 1; tiles of more than 128 rows never split) x M:
/// the result against the f64 reference, and a rerun bit-identical. A width the layer's
/// blocks lack must be refused at build by name, and is skipped.
fn check_tiles(
    gpu: &std::sync::Arc<fp8_linear::cuda::runtime::Gpu>,
    layers: &[LayerConfig],
    heights: &[Option<u16>],
    widths: &[Option<u16>],
    clusters: &[Option<u16>],
    ms: &[usize],
) {
    let target = Target::from_gpu(gpu.clone());
    let mut failures = Vec::new();
    for cfg in layers {
        let layer = HostLayer::random(cfg, WeightGen::Spread(3));
        let ref_cfg = HopperBlockFp8::ENTRY.reference_config(cfg);
        let tol = Tolerance::for_kernel(&HopperBlockFp8::ENTRY, cfg);
        for (&rows, &cols, &cluster) in heights.iter().flat_map(|r| {
            widths
                .iter()
                .flat_map(move |w| clusters.iter().map(move |c| (r, w, c)))
        }) {
            let caps: &[Option<u16>] = if rows > Some(128) {
                &[None]
            } else {
                &[None, Some(1)]
            };
            for &splits in caps {
                let options = KernelOptions {
                    max_splits: splits,
                    tile_rows: rows,
                    tile_cols: cols,
                    cluster,
                    ..KernelOptions::none()
                };
                let mut kernel: Box<dyn Fp8Kernel> =
                    match HopperBlockFp8::ENTRY.build(&target.build_ctx(cfg, &options)) {
                        Ok(k) => k,
                        Err(e) if cols.is_some() && e.to_string().contains("tile_cols") => {
                            eprintln!("{}x{} tile_cols {cols:?}: {e}", cfg.n, cfg.k);
                            continue;
                        }
                        Err(e) => panic!("build {rows:?}x{cols:?}: {e}"),
                    };
                kernel
                    .process_weights(&layer.weights())
                    .unwrap_or_else(|e| panic!("process_weights: {e}"));
                for &m in ms {
                    let label = format!(
                        "{}x{} {:?}->{:?}, tile_rows {rows:?}, tile_cols {cols:?}, \
                         cluster {cluster:?}, max_splits {splits:?}, M={m}",
                        cfg.n, cfg.k, cfg.input_dtype, cfg.output_dtype
                    );
                    let call = Checked {
                        cfg,
                        layer: &layer,
                        ref_cfg: &ref_cfg,
                        tol,
                        m,
                    };
                    call.check(gpu, kernel.as_mut(), None, &label, &mut failures);
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The GEMM launched overlapped with the activation quantization before it (`overlap(true)`,
/// the default: it loads its first weight tiles while the quantization runs and waits for it
/// before the activations) against the same kernel launched after it (`overlap(false)`):
/// bit-identical outputs, against the f64 reference, on ragged layers (N not a multiple of
/// 128, K not a multiple of 128), bf16 and f16 input, every output dtype, bias, 64x64 ue8m0
/// and 32x32 blocks, every tile height (M up to 700), split and unsplit.
#[test]
fn overlapped_launch_matches_the_serial_one_bit_for_bit() {
    let Some(gpu) = hopper("overlapped_launch_matches_the_serial_one_bit_for_bit") else {
        return;
    };
    let target = Target::from_gpu(gpu.clone());
    let layers = ragged_layers();
    let mut failures = Vec::new();
    for cfg in &layers {
        let layer = HostLayer::random(cfg, WeightGen::Spread(3));
        let ref_cfg = HopperBlockFp8::ENTRY.reference_config(cfg);
        let tol = Tolerance::for_kernel(&HopperBlockFp8::ENTRY, cfg);
        for splits in [None, Some(1)] {
            let make = |overlap: bool| {
                let options = KernelOptions {
                    max_splits: splits,
                    ..KernelOptions::none().overlap(overlap)
                };
                let mut k = HopperBlockFp8::ENTRY
                    .build(&target.build_ctx(cfg, &options))
                    .unwrap_or_else(|e| panic!("build: {e}"));
                k.process_weights(&layer.weights())
                    .unwrap_or_else(|e| panic!("process_weights: {e}"));
                k
            };
            let (mut overlapped, mut serial) = (make(true), make(false));
            for m in [1, 7, 64, 65, 200, 300, 700] {
                let label = format!(
                    "{}x{} {:?}->{:?} {:?}, max_splits {splits:?}, M={m}",
                    cfg.n, cfg.k, cfg.input_dtype, cfg.output_dtype, cfg.weight.group
                );
                let call = Checked {
                    cfg,
                    layer: &layer,
                    ref_cfg: &ref_cfg,
                    tol,
                    m,
                };
                let other = Some(serial.as_mut());
                call.check(&gpu, overlapped.as_mut(), other, &label, &mut failures);
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
