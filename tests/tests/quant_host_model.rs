//! The host model of the activation quantization kernels (`cu/quant.cu`: `quant_groups`
//! and `quant_rows`, which every block-scaled and per-token GPU path runs): the kernels' own
//! source compiled on the CPU (tests/src/host_model.rs) under the address and
//! undefined-behaviour sanitizers, checked bit for bit against the CPU quantizer
//! (`cpu::quantize`) on the awkward activations (28 binades, outliers, an all-zero group,
//! exact e4m3 ties, values below the absmax floor) and on ties under a scale of 7 (which only
//! a correctly rounded division gets right): f32 / f16 / bf16 input, groups of 8, 32
//! and 128 with a ragged last group, f32 and ue8m0 scales, per-token scales with and
//! without an upper bound, codes padded to a 16-byte row stride. Skips with a printed reason
//! without a C++20 compiler.

use fp8_linear::cpu::quantize::{per_token_fmt_into, per_token_group_fmt};
use fp8_linear::cuda::sources::quant_module;
use fp8_linear::cuda::testing::quant::{group_launch, GroupCut};
use fp8_linear::{DType, ScaleDtype};
use fp8_linear_tests::host_model::{encode_input, le, section, HostModel};
use fp8_linear_tests::layers::nasty_activations;
use fp8_linear_tests::oracle::magnitudes;

const DRIVER: &str = include_str!("../host_model/quant_main.cpp");

/// The launch of `cut` that quant.rs makes for a group quantization, as the driver's
/// params (cut, lg_lanes, units, threads, grid x); nothing for a per-token one.
fn launch_params(cut: GroupCut, m: usize, ldq: usize, group: usize) -> Vec<i32> {
    let l = group_launch(cut, m, ldq, group).expect("launch shape");
    vec![
        cut as i32,
        l.lg_lanes as i32,
        l.units as i32,
        l.threads as i32,
        l.grid.0 as i32,
    ]
}

/// Rows whose every 128-group is 3136 (so the scale is exactly 7) then e4m3 midpoints times
/// 7: x / scale is an exact tie, which x times the f32 reciprocal of 7 (0.36 ulp off) misses
/// for midpoints of large mantissa (the kernels' correctly rounded division is what keeps
/// these codes equal to the CPU's).
fn scaled_ties(m: usize, k: usize) -> Vec<f32> {
    let grid = magnitudes();
    (0..m * k)
        .map(|i| {
            let c = i % k;
            if c.is_multiple_of(128) {
                3136.0
            } else {
                let j = (c * 7 + i / k) % 126;
                let mid = ((grid[j] + grid[j + 1]) / 2.0) as f32 * 7.0;
                if c.is_multiple_of(2) {
                    mid
                } else {
                    -mid
                }
            }
        })
        .collect()
}

/// One quantization: groups of `group` (None: per token, with `ub`), input dtype, M x K,
/// the scaled ties instead of the awkward activations.
struct Case {
    ties: bool,
    group: Option<usize>,
    ub: Option<f32>,
    dt: DType,
    m: usize,
    k: usize,
    fmt: ScaleDtype,
}

/// A case: (ties, group, ub, dtype, M, K, scale format).
const fn case(
    ties: bool,
    group: Option<usize>,
    ub: Option<f32>,
    dt: DType,
    (m, k): (usize, usize),
    fmt: ScaleDtype,
) -> Case {
    Case {
        ties,
        group,
        ub,
        dt,
        m,
        k,
        fmt,
    }
}

const CASES: [Case; 9] = [
    case(
        false,
        Some(128),
        None,
        DType::Bf16,
        (5, 1000),
        ScaleDtype::F32,
    ),
    case(
        false,
        Some(128),
        None,
        DType::F16,
        (4, 1000),
        ScaleDtype::Ue8m0,
    ),
    case(false, Some(32), None, DType::F32, (4, 300), ScaleDtype::F32),
    case(false, Some(8), None, DType::Bf16, (3, 77), ScaleDtype::F32),
    // Codes padded past the last group of 8 (88 of 96 columns): zeroed too.
    case(
        false,
        Some(8),
        None,
        DType::Bf16,
        (3, 81),
        ScaleDtype::Ue8m0,
    ),
    case(false, None, None, DType::Bf16, (5, 1000), ScaleDtype::F32),
    case(
        false,
        None,
        Some(50.0),
        DType::F32,
        (4, 300),
        ScaleDtype::Ue8m0,
    ),
    case(
        true,
        Some(128),
        None,
        DType::Bf16,
        (3, 384),
        ScaleDtype::F32,
    ),
    case(true, None, None, DType::F32, (2, 256), ScaleDtype::F32),
];

fn run_case(model: &HostModel, c: &Case, cut: GroupCut, tag: &str) {
    let (m, k) = (c.m, c.k);
    let ldq = k.div_ceil(16) * 16;
    let x = if c.ties {
        scaled_ties(m, k)
    } else {
        nasty_activations(m, k)
    };
    let (xb, seen) = encode_input(&x, c.dt);
    let group = c.group.unwrap_or(k);
    let dt = match c.dt {
        DType::F32 => 0,
        DType::F16 => 1,
        _ => 2,
    };
    let elem = if c.dt == DType::F32 { 4 } else { 2 };
    let vec = usize::from((k * elem).is_multiple_of(16));
    let params: Vec<i32> = [
        usize::from(c.group.is_none()),
        dt,
        m,
        k,
        ldq,
        group,
        usize::from(c.fmt == ScaleDtype::Ue8m0),
        vec,
        usize::from(c.ub.is_some()),
    ]
    .iter()
    .map(|&v| v as i32)
    .chain(match c.group {
        Some(g) => launch_params(cut, m, ldq, g),
        None => Vec::new(),
    })
    .collect();
    let mut input = Vec::new();
    section(&mut input, &le(&params, |v| v.to_le_bytes()));
    section(
        &mut input,
        &le(&c.ub.into_iter().collect::<Vec<f32>>(), |v| v.to_le_bytes()),
    );
    section(&mut input, &xb);
    let what = format!(
        "{} M={m} K={k} group {:?} ub {:?} {:?} ties {} ({cut:?} cut)",
        c.dt, c.group, c.ub, c.fmt, c.ties
    );
    let raw = model
        .run(&input, tag)
        .unwrap_or_else(|e| panic!("{what}: the host model failed: {e}"));
    let (want_q, want_s) = match c.group {
        Some(g) => per_token_group_fmt(&seen, m, k, g, c.fmt),
        None => {
            let (mut q, mut s) = (vec![0u8; m * k], vec![0f32; m]);
            per_token_fmt_into(&seen, k, c.ub, c.fmt, &mut q, &mut s);
            (q, s)
        }
    };
    assert_eq!(raw.len(), m * ldq + 4 * want_s.len(), "{what}");
    for r in 0..m {
        let got = &raw[r * ldq..(r + 1) * ldq];
        assert_eq!(
            &got[..k],
            &want_q[r * k..(r + 1) * k],
            "{what}: codes of row {r}"
        );
        assert!(got[k..].iter().all(|&b| b == 0), "{what}: row {r} padding");
    }
    let got_s: Vec<u32> = raw[m * ldq..]
        .chunks(4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    let want_bits: Vec<u32> = want_s.iter().map(|v| v.to_bits()).collect();
    assert_eq!(got_s, want_bits, "{what}: scales");
    eprintln!("host model quant {what}: codes and scales bit-identical");
}

#[test]
fn the_quantization_kernels_match_the_cpu_quantizer_bit_for_bit() {
    let Some(model) = HostModel::build("quant-asan", DRIVER, &quant_module(), "address,undefined")
    else {
        return;
    };
    for (i, c) in CASES.iter().enumerate() {
        // Every cut of the group kernel on every group case (the deep one takes 16-bit input).
        let cuts: &[GroupCut] = match (c.group, c.dt) {
            (None, _) => &[GroupCut::Narrow],
            (Some(_), DType::F32) => &[GroupCut::Narrow, GroupCut::Wide],
            _ => &[GroupCut::Narrow, GroupCut::Wide, GroupCut::Deep],
        };
        for &cut in cuts {
            run_case(&model, c, cut, &format!("case{i}-{cut:?}"));
        }
    }
}

/// A masked call's quantization (its slabs' counts given, as the grouped GEMMs' masked
/// calls quantize): the rows under the counts are quantized as the CPU quantizer does, bit
/// for bit; every other row keeps what the buffers held (codes 0xee, scales -1), for counts
/// of 0, inside the slab, the whole slab, and past it or negative (clamped); every cut of
/// the kernel, bf16 input with and without vector loads.
#[test]
fn a_masked_quantization_writes_only_the_routed_rows() {
    // (Its own tag: each test builds its model in a folder of its own.)
    let sanitizers = "address,undefined";
    let Some(model) = HostModel::build("masked-asan", DRIVER, &quant_module(), sanitizers) else {
        return;
    };
    let (slab, group) = (4, 128);
    let counts: [i32; 5] = [2, 0, 4, 9, -3];
    let m = slab * counts.len();
    for k in [384usize, 300] {
        let ldq = k.div_ceil(16) * 16;
        let (xb, seen) = encode_input(&nasty_activations(m, k), DType::Bf16);
        let (want_q, want_s) = per_token_group_fmt(&seen, m, k, group, ScaleDtype::F32);
        let groups = k.div_ceil(group);
        let vec = usize::from((2 * k).is_multiple_of(16));
        for cut in [GroupCut::Narrow, GroupCut::Wide, GroupCut::Deep] {
            let params: Vec<i32> = [0, 2, m, k, ldq, group, 0, vec, 0]
                .iter()
                .map(|&v| v as i32)
                .chain(launch_params(cut, m, ldq, group))
                .chain([slab as i32])
                .collect();
            let mut input = Vec::new();
            section(&mut input, &le(&params, |v| v.to_le_bytes()));
            section(&mut input, &[]);
            section(&mut input, &xb);
            section(&mut input, &le(&counts, |v| v.to_le_bytes()));
            let what = format!("masked K={k} ({cut:?} cut)");
            let raw = model
                .run(&input, &format!("masked-{k}-{cut:?}"))
                .unwrap_or_else(|e| panic!("{what}: the host model failed: {e}"));
            assert_eq!(raw.len(), m * ldq + 4 * m * groups, "{what}");
            for r in 0..m {
                let routed = r % slab < counts[r / slab].clamp(0, slab as i32) as usize;
                let got = &raw[r * ldq..(r + 1) * ldq];
                let at = m * ldq + 4 * r * groups;
                let got_s: Vec<u32> = raw[at..at + 4 * groups]
                    .chunks(4)
                    .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                    .collect();
                if routed {
                    assert_eq!(&got[..k], &want_q[r * k..(r + 1) * k], "{what}: row {r}");
                    assert!(got[k..].iter().all(|&b| b == 0), "{what}: row {r} padding");
                    let want: Vec<u32> = want_s[r * groups..(r + 1) * groups]
                        .iter()
                        .map(|v| v.to_bits())
                        .collect();
                    assert_eq!(got_s, want, "{what}: scales of row {r}");
                } else {
                    assert!(got.iter().all(|&b| b == 0xee), "{what}: row {r} written");
                    let untouched = (-1.0f32).to_bits();
                    assert!(
                        got_s.iter().all(|&b| b == untouched),
                        "{what}: scales of row {r}"
                    );
                }
            }
            eprintln!("host model quant {what}: routed rows bit-identical, the others untouched");
        }
    }
}

/// The SiLU-and-multiply kernel (`silu_mul_*`, then the f32 quantization of h) against the
/// CPU (`cpu::silu::silu_mul`, then `cpu::quantize`), bit for bit: h itself, the codes and
/// the scales, on gates with the awkward values (large |g| of both signs where exp(-g)
/// overflows or underflows, zeros, subnormals, infinities, NaN) and a dense -120..120
/// sweep, ups of every magnitude; f32 / f16 / bf16 input; ragged K (the down projection's
/// N); 1 x 128 and 1 x 32 groups with f32 and ue8m0 scales, and per-token scales.
#[test]
fn silu_mul_matches_the_cpu_bit_for_bit() {
    use fp8_linear::cpu::silu::silu_mul;
    use fp8_linear_tests::layers::AWKWARD_GATES;
    let Some(model) = HostModel::build("silu-asan", DRIVER, &quant_module(), "address,undefined")
    else {
        return;
    };
    let cases: [(DType, usize, usize, Option<usize>, ScaleDtype); 6] = [
        (DType::F32, 3, 300, Some(128), ScaleDtype::F32),
        (DType::Bf16, 2, 257, Some(128), ScaleDtype::Ue8m0),
        (DType::F16, 4, 96, Some(32), ScaleDtype::F32),
        (DType::Bf16, 1, 45, Some(32), ScaleDtype::Ue8m0),
        (DType::F32, 3, 130, None, ScaleDtype::F32),
        (DType::Bf16, 2, 200, None, ScaleDtype::Ue8m0),
    ];
    for (i, &(dt, m, k, group, fmt)) in cases.iter().enumerate() {
        let mut gu = nasty_activations(m, 2 * k);
        for (j, g) in AWKWARD_GATES.iter().enumerate() {
            // Row 0 only: a NaN gate makes its group's (or row's) scale NaN.
            gu[(j * 13) % k] = *g;
        }
        if m > 1 {
            let last = (m - 1) * 2 * k;
            for j in 0..k {
                gu[last + j] = -120.0 + 240.0 * j as f32 / k as f32;
            }
        }
        let (xb, seen) = encode_input(&gu, dt);
        let h: Vec<f32> = (0..m * k)
            .map(|e| {
                let (r, c) = (e / k, e % k);
                silu_mul(seen[r * 2 * k + c], seen[r * 2 * k + k + c])
            })
            .collect();
        let ldq = k.div_ceil(16) * 16;
        let (want_q, want_s) = match group {
            Some(g) => per_token_group_fmt(&h, m, k, g, fmt),
            None => {
                let (mut q, mut s) = (vec![0u8; m * k], vec![0f32; m]);
                per_token_fmt_into(&h, k, None, fmt, &mut q, &mut s);
                (q, s)
            }
        };
        let dti = match dt {
            DType::F32 => 0,
            DType::F16 => 1,
            _ => 2,
        };
        let ue = usize::from(fmt == ScaleDtype::Ue8m0);
        let params: Vec<i32> = [2, dti, m, k, ldq, group.unwrap_or(0), ue, 1, 0]
            .iter()
            .map(|&v| v as i32)
            .chain(match group {
                Some(g) => launch_params(GroupCut::Narrow, m, ldq, g),
                None => Vec::new(),
            })
            .collect();
        let mut input = Vec::new();
        section(&mut input, &le(&params, |v| v.to_le_bytes()));
        section(&mut input, &[]);
        section(&mut input, &xb);
        let what = format!("silu_mul {dt} M={m} K={k} group {group:?} {fmt:?}");
        let raw = model
            .run(&input, &format!("silu{i}"))
            .unwrap_or_else(|e| panic!("{what}: the host model failed: {e}"));
        let words = |b: &[u8]| -> Vec<u32> {
            b.chunks(4)
                .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
                .collect()
        };
        let ns = want_s.len();
        assert_eq!(raw.len(), m * ldq + 4 * ns + 4 * m * k, "{what}");
        let got_h = words(&raw[m * ldq + 4 * ns..]);
        let want_h: Vec<u32> = h.iter().map(|v| v.to_bits()).collect();
        if let Some(e) = (0..m * k).find(|&e| got_h[e] != want_h[e]) {
            let (r, c) = (e / k, e % k);
            panic!(
                "{what}: h[{r}, {c}] = {:e} on the model, {:e} on the CPU (g = {:e}, u = {:e})",
                f32::from_bits(got_h[e]),
                h[e],
                seen[r * 2 * k + c],
                seen[r * 2 * k + k + c]
            );
        }
        let span = group.unwrap_or(k);
        for r in 0..m {
            let got = &raw[r * ldq..(r + 1) * ldq];
            for g in 0..k.div_ceil(span) {
                let cols = g * span..((g + 1) * span).min(k);
                // Known difference of the existing quantizer (not of SiLU): where a group's
                // absmax is infinite (scale inf, no NaN), the GPU's division (product by
                // the reciprocal 0, then a correction step through 0 * inf) gives NaN codes
                // for its finite values, the CPU's IEEE division zeros.
                if want_s[r * k.div_ceil(span) + g].is_infinite() {
                    continue;
                }
                let want = &want_q[r * k + cols.start..r * k + cols.end];
                assert_eq!(
                    &got[cols.clone()],
                    want,
                    "{what}: codes of row {r}, {cols:?}"
                );
            }
        }
        let want_bits: Vec<u32> = want_s.iter().map(|v| v.to_bits()).collect();
        assert_eq!(
            words(&raw[m * ldq..m * ldq + 4 * ns]),
            want_bits,
            "{what}: scales"
        );
        eprintln!("host model {what}: h, codes and scales bit-identical");
    }
}
