//! The CPU activation quantizers against the test-only oracle (`fp8_linear_tests::oracle`,
//! an f64 statement of the spec that calls none of them), bit for bit: the quantizer the
//! fast kernels run (`fp8_linear::cpu::quantize`, on `fp8_linear::fp8`'s encoder) and the
//! reference's own (`fp8_linear::cpu::reference::quantize_*`, what `CpuReference` runs).
//! First on the hand-derived cases (codes and scales worked out in the oracle's comments),
//! then the encoders on every tie of the grid and its neighbours, then every quantization
//! (1 x G groups with ragged tails, per token with and without an upper bound, per tensor
//! static and dynamic) on fresh nasty data. The GPU quantizer is checked against the same
//! oracle in gpu_quant.rs.

use fp8_linear::cpu::{quantize, reference};
use fp8_linear::fp8::f32_to_e4m3;
use fp8_linear_tests::layers::{finite_code, nasty_activations, random_activations};
use fp8_linear_tests::oracle::{self, How};
use fp8_linear_tests::seed::rng;
use rand::Rng;

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// The first index where two code vectors differ, with both codes and the input.
fn first_diff(x: &[f32], got: &[u8], want: &[u8]) -> Option<String> {
    got.iter().zip(want).position(|(a, b)| a != b).map(|i| {
        format!(
            "index {i}: x = {:e}, got {:#04x}, oracle {:#04x}",
            x[i], got[i], want[i]
        )
    })
}

/// Both CPU quantizers of `how` on `x` `[m, k]`: (name, codes, scales).
fn cpu_quantizers(
    x: &[f32],
    m: usize,
    k: usize,
    how: How,
) -> Vec<(&'static str, Vec<u8>, Vec<f32>)> {
    match how {
        How::Groups(g) => {
            let (q, s) = quantize::per_token_group(x, m, k, g);
            let (rq, rs) = reference::quantize_groups(x, m, k, g);
            vec![("cpu::quantize", q, s), ("cpu::reference", rq, rs)]
        }
        How::PerToken(ub) => {
            let mut q = vec![0u8; m * k];
            let mut s = vec![0f32; m];
            quantize::per_token_into(x, k, ub, &mut q, &mut s);
            let (rq, rs) = reference::quantize_per_token(x, m, k, ub);
            vec![("cpu::quantize", q, s), ("cpu::reference", rq, rs)]
        }
        How::PerTensor(fixed) => {
            let mut q = vec![0u8; m * k];
            let s = quantize::per_tensor_into(x, fixed, &mut q);
            let (rq, rs) = reference::quantize_per_tensor(x, fixed);
            vec![
                ("cpu::quantize", q, vec![s]),
                ("cpu::reference", rq, vec![rs]),
            ]
        }
    }
}

fn oracle_of(x: &[f32], m: usize, k: usize, how: How) -> (Vec<u8>, Vec<f32>) {
    match how {
        How::Groups(g) => oracle::quantize_groups(x, m, k, g),
        How::PerToken(ub) => oracle::quantize_per_token(x, m, k, ub),
        How::PerTensor(s) => {
            let (q, s) = oracle::quantize_per_tensor(x, s);
            (q, vec![s])
        }
    }
}

/// Every CPU quantizer equals the oracle on `x`.
fn check_all(what: &str, x: &[f32], m: usize, k: usize, how: How) {
    let (want_q, want_s) = oracle_of(x, m, k, how);
    for (name, q, s) in cpu_quantizers(x, m, k, how) {
        if let Some(d) = first_diff(x, &q, &want_q) {
            panic!("{name} {what} {how:?} M={m} K={k}: codes differ from the oracle at {d}");
        }
        assert_eq!(
            bits(&s),
            bits(&want_s),
            "{name} {what} {how:?} M={m} K={k}: scales differ from the oracle"
        );
    }
}

#[test]
fn hand_derived_cases_hold_for_every_cpu_quantizer() {
    let cases = oracle::hand_derived_cases();
    for c in &cases {
        for (name, q, s) in cpu_quantizers(&c.x, c.m, c.k, c.how) {
            assert_eq!(q, c.codes, "{name}: {}: codes", c.what);
            assert_eq!(bits(&s), bits(&c.scales), "{name}: {}: scales", c.what);
        }
    }
    assert!(cases.len() >= 6);
}

#[test]
fn encoders_agree_on_every_tie_its_neighbours_and_every_code() {
    let grid = oracle::magnitudes();
    let mut xs: Vec<f32> = vec![0.0, 448.0, 449.0, 463.9, 464.0, 480.0, 1e9, f32::MAX, 1e-45];
    for w in grid.windows(2) {
        let mid = ((w[0] + w[1]) / 2.0) as f32; // exact: 5 significant bits
        xs.extend([w[0] as f32, mid, mid.next_down(), mid.next_up()]);
    }
    let mut rng = rng();
    for _ in 0..100_000 {
        let v: f32 = rng.random_range(0.5f32..1.0) * 2f32.powi(rng.random_range(-30..10));
        xs.push(v);
    }
    for x in xs {
        for v in [x, -x] {
            let want = oracle::encode(v);
            assert_eq!(f32_to_e4m3(v), want, "fp8::f32_to_e4m3({v:e})");
            assert_eq!(
                reference::encode_e4m3(v),
                want,
                "reference::encode_e4m3({v:e})"
            );
        }
    }
    // Decoding: the oracle's grid, the reference's decoder and the core table agree.
    for i in 0..254u8 {
        let c = finite_code(i);
        let v = oracle::value(c).expect("a finite code");
        assert_eq!(
            reference::e4m3_f64(c).to_bits(),
            v.to_bits(),
            "code {c:#04x}"
        );
        assert_eq!(
            f64::from(fp8_linear::fp8::e4m3_to_f32(c)).to_bits(),
            v.to_bits(),
            "code {c:#04x}"
        );
        assert_eq!(oracle::encode(v as f32), c, "code {c:#04x} round trip");
    }
}

#[test]
fn every_quantization_matches_the_oracle_on_nasty_data() {
    for (m, k) in [
        (1, 1),
        (3, 127),
        (5, 128),
        (7, 130),
        (4, 300),
        (9, 1000),
        (2, 3884),
    ] {
        let x = nasty_activations(m, k);
        for g in [128, 64, 100, 1] {
            check_all("groups", &x, m, k, How::Groups(g));
        }
        // Bounds that clip most rows, some, none, and one below the absmax floor.
        for ub in [None, Some(3.0), Some(1e-3), Some(1e6), Some(1e-12)] {
            check_all("per-token", &x, m, k, How::PerToken(ub));
        }
        for s in [None, Some(0.0123), Some(1e-6), Some(30.0)] {
            check_all("per-tensor", &x, m, k, How::PerTensor(s));
        }
    }
    // The usual activations too (outliers of 30x).
    let (m, k) = (16, 1030);
    let x = random_activations(m, k);
    check_all("groups", &x, m, k, How::Groups(128));
    check_all("per-token", &x, m, k, How::PerToken(Some(2.0)));
    check_all("per-tensor", &x, m, k, How::PerTensor(None));
}
