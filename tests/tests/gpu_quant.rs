//! GPU activation quantization (`ActQuant`) against the test-only oracle
//! (`fp8_linear_tests::oracle`, an f64 statement of the spec that shares no code with any
//! quantizer) and, beside it, against the CPU quantizer, bit for bit (codes and scales):
//! on the hand-derived cases, then on fresh nasty data (outliers, an all-zero group, exact
//! ties, values below the absmax floor, magnitudes over 28 binades): 1x32, 1x64 and 1x128
//! groups (row- and column-major scales), per-token (with and without an upper bound),
//! per-tensor static and dynamic, each dynamic one with f32 and with ue8m0 (power-of-two)
//! scales; f32, f16 and bf16 input; ragged K. Every output buffer (codes with their row
//! padding, scales) is poisoned before each call, so an element the kernel does not write,
//! padding included, shows. Skips without a GPU unless FP8_REQUIRE_CUDA=1.

use std::sync::Arc;

use fp8_linear::cpu::quantize;
use fp8_linear::cuda::interop::cudarc::driver::{LaunchConfig, PushKernelArg};
use fp8_linear::cuda::runtime::ModuleSpec;
use fp8_linear::cuda::runtime::{DeviceBuffer, Gpu};
use fp8_linear::cuda::sources::QUANT_HEADERS;
use fp8_linear::cuda::testing::quant::{group_cut, GroupCut};
use fp8_linear::cuda::{ActQuant, Grouping, ScaleOrder};
use fp8_linear::{DType, ScaleDtype};
use fp8_linear_tests::gpu::{gpu_or_skip, upload_as, AnyBuffer};
use fp8_linear_tests::layers::nasty_activations;
use fp8_linear_tests::oracle::{self, How};

const DTYPES: [DType; 3] = [DType::F32, DType::F16, DType::Bf16];
const SHAPES: [(usize, usize); 6] = [
    (1, 1),
    (3, 127),
    (7, 128),
    (83, 3884),
    (200, 130),
    (16, 7170),
];

/// Poison for the code buffers: the NaN code, which no quantization of finite input gives,
/// so any element (padding included) the kernel leaves unwritten shows.
const CODE_POISON: u8 = 0x7f;

fn device_ptr(b: &AnyBuffer, m: usize, k: usize) -> u64 {
    match b.tensor([m, k]).data {
        fp8_linear::Storage::Device(mem, _) => mem.ptr,
        _ => unreachable!("a device buffer"),
    }
}

fn poisoned_codes(gpu: &Arc<Gpu>, len: usize) -> DeviceBuffer<u8> {
    let mut b = DeviceBuffer::<u8>::zeros(gpu, len).unwrap();
    b.fill_bytes(CODE_POISON).unwrap();
    b
}

fn poisoned_scales(gpu: &Arc<Gpu>, len: usize) -> DeviceBuffer<f32> {
    let mut b = DeviceBuffer::<f32>::zeros(gpu, len).unwrap();
    b.fill_bytes(0xff).unwrap(); // NaN
    b
}

/// Checks codes `[m, ldq]` read back from the GPU: columns `< k` equal `want` (`[m, k]`),
/// the padding columns are 0.
fn check_codes(what: &str, got: &[u8], want: &[u8], x: &[f32], m: usize, k: usize, ldq: usize) {
    for r in 0..m {
        for c in 0..ldq {
            let (g, w) = (got[r * ldq + c], if c < k { want[r * k + c] } else { 0 });
            assert_eq!(
                g,
                w,
                "{what}: code ({r}, {c}) of x = {:e}: got {g:#04x}, want {w:#04x}{}",
                if c < k { x[r * k + c] } else { 0.0 },
                if c >= k { " (row padding)" } else { "" }
            );
        }
    }
}

/// The scale format of a quantization with power-of-two scales or not.
fn fmt(ue8m0: bool) -> ScaleDtype {
    if ue8m0 {
        ScaleDtype::Ue8m0
    } else {
        ScaleDtype::F32
    }
}

fn check_scale(what: &str, got: f32, want: f32) {
    assert_eq!(
        got.to_bits(),
        want.to_bits(),
        "{what}: got {got:e}, want {want:e}"
    );
}

/// Runs the GPU group quantization (`grouping`) of `x` `[m, k]` (uploaded as `d`) and checks
/// it against the oracle and the CPU quantizer; returns nothing, panics on a difference.
fn check_groups(
    gpu: &Arc<Gpu>,
    q: &ActQuant,
    x: &[f32],
    (m, k): (usize, usize),
    d: DType,
    grouping: Grouping,
) {
    let (xb, exact) = upload_as(gpu, x, d);
    let ptr = device_ptr(&xb, m, k);
    let ldq = k.div_ceil(16) * 16;
    let gs = grouping.cols;
    let g = k.div_ceil(gs);
    let (want_q, want_s) = oracle::quantize_groups_as(&exact, m, k, gs, grouping.ue8m0);
    let (cpu_q, cpu_s) = quantize::per_token_group_fmt(&exact, m, k, gs, fmt(grouping.ue8m0));
    assert_eq!(cpu_q, want_q, "the CPU quantizer differs from the oracle");
    assert_eq!(cpu_s, want_s, "the CPU quantizer differs from the oracle");
    let ld = m.div_ceil(4) * 4 + 4;
    for order in [
        ScaleOrder::RowMajor,
        ScaleOrder::ColMajor,
        ScaleOrder::ColMajorLd(ld),
    ] {
        let codes = poisoned_codes(gpu, m * ldq);
        let scales = poisoned_scales(gpu, ld * g);
        // SAFETY: buffers sized as the call requires, all on the GPU handle's stream.
        unsafe {
            q.groups(
                ptr,
                d,
                (m, k),
                grouping,
                codes.ptr(),
                ldq,
                scales.ptr(),
                order,
                None,
            )
        }
        .unwrap();
        let what = format!("groups {grouping:?} {d} M={m} K={k} {order:?}");
        check_codes(&what, &codes.to_host().unwrap(), &want_q, &exact, m, k, ldq);
        let got_s = scales.to_host().unwrap();
        for r in 0..m {
            for j in 0..g {
                let idx = match order {
                    ScaleOrder::RowMajor => r * g + j,
                    ScaleOrder::ColMajor => j * m + r,
                    ScaleOrder::ColMajorLd(ld) => j * ld + r,
                };
                check_scale(
                    &format!("{what}: scale ({r}, {j})"),
                    got_s[idx],
                    want_s[r * g + j],
                );
            }
        }
    }
}

/// Per-token and per-tensor GPU quantization of `x` against the oracle (and the CPU).
fn check_scaled(gpu: &Arc<Gpu>, q: &ActQuant, x: &[f32], m: usize, k: usize, d: DType) {
    let (xb, exact) = upload_as(gpu, x, d);
    let ptr = device_ptr(&xb, m, k);
    let ldq = k.div_ceil(16) * 16;
    let amax = DeviceBuffer::<f32>::zeros(gpu, 1).unwrap();
    // Per token, with and without an upper bound that clips some rows (and one below the
    // absmax floor, which clips every row).
    for (ub, pow2) in [
        (None, false),
        (Some(3.0f32), false),
        (Some(1e-12), false),
        (None, true),
        (Some(3.0f32), true),
    ] {
        let codes = poisoned_codes(gpu, m * ldq);
        let scales = poisoned_scales(gpu, m);
        let ub_buf = ub.map(|u| DeviceBuffer::from_host(gpu, &[u]).unwrap());
        // SAFETY: buffers sized as required, all on the GPU handle's stream.
        unsafe {
            q.per_token(
                ptr,
                d,
                m,
                k,
                codes.ptr(),
                ldq,
                scales.ptr(),
                ub_buf.as_ref().map(|b| b.ptr()),
                pow2,
            )
        }
        .unwrap();
        let (want_q, want_s) = oracle::quantize_per_token_as(&exact, m, k, ub, pow2);
        let mut cpu_q = vec![0u8; m * k];
        let mut cpu_s = vec![0f32; m];
        quantize::per_token_fmt_into(&exact, k, ub, fmt(pow2), &mut cpu_q, &mut cpu_s);
        assert_eq!(cpu_q, want_q, "the CPU quantizer differs from the oracle");
        assert_eq!(cpu_s, want_s, "the CPU quantizer differs from the oracle");
        let what = format!("per-token ub={ub:?} ue8m0={pow2} {d} M={m} K={k}");
        check_codes(&what, &codes.to_host().unwrap(), &want_q, &exact, m, k, ldq);
        for (r, s) in scales.to_host().unwrap().iter().enumerate() {
            check_scale(&format!("{what}: scale of row {r}"), *s, want_s[r]);
        }
    }
    // Per tensor: dynamic, then static.
    for (fixed, pow2) in [(None, false), (Some(0.0123f32), false), (None, true)] {
        let codes = poisoned_codes(gpu, m * ldq);
        let scales = poisoned_scales(gpu, m);
        let one = poisoned_scales(gpu, 1);
        let fixed_buf = fixed.map(|s| DeviceBuffer::from_host(gpu, &[s]).unwrap());
        // SAFETY: as above.
        unsafe {
            q.per_tensor(
                ptr,
                d,
                m,
                k,
                codes.ptr(),
                ldq,
                fixed_buf.as_ref().map(|b| b.ptr()),
                amax.ptr(),
                Some(scales.ptr()),
                Some(one.ptr()),
                pow2,
            )
        }
        .unwrap();
        let (want_q, want_s) = oracle::quantize_per_tensor_as(&exact, fixed, pow2);
        let mut cpu_q = vec![0u8; m * k];
        let cpu_s = quantize::per_tensor_fmt_into(&exact, fixed, fmt(pow2), &mut cpu_q);
        assert_eq!(cpu_q, want_q, "the CPU quantizer differs from the oracle");
        assert_eq!(cpu_s.to_bits(), want_s.to_bits());
        let what = format!("per-tensor {fixed:?} ue8m0={pow2} {d} M={m} K={k}");
        check_codes(&what, &codes.to_host().unwrap(), &want_q, &exact, m, k, ldq);
        for (r, s) in scales.to_host().unwrap().iter().enumerate() {
            check_scale(&format!("{what}: scale of row {r}"), *s, want_s);
        }
        check_scale(
            &format!("{what}: the one scale"),
            one.to_host().unwrap()[0],
            want_s,
        );
    }
}

#[test]
fn hand_derived_cases_on_the_gpu() {
    let Some(gpu) = gpu_or_skip("hand_derived_cases_on_the_gpu") else {
        return;
    };
    let q = ActQuant::new(&gpu).unwrap();
    // f32 input holds every case exactly (the oracle's cases are f32 values).
    for c in oracle::hand_derived_cases() {
        let (xb, exact) = upload_as(&gpu, &c.x, DType::F32);
        assert_eq!(exact, c.x);
        let ptr = device_ptr(&xb, c.m, c.k);
        let ldq = c.k.div_ceil(16) * 16;
        let codes = poisoned_codes(&gpu, c.m * ldq);
        let scales = poisoned_scales(&gpu, c.scales.len().max(c.m));
        let amax = DeviceBuffer::<f32>::zeros(&gpu, 1).unwrap();
        let one = poisoned_scales(&gpu, 1);
        let (cm, ck) = (c.m, c.k);
        // SAFETY: buffers sized as each call requires, on the GPU handle's stream.
        unsafe {
            match c.how {
                How::Groups(g) => q.groups(
                    ptr,
                    DType::F32,
                    (cm, ck),
                    Grouping {
                        cols: g,
                        ue8m0: false,
                    },
                    codes.ptr(),
                    ldq,
                    scales.ptr(),
                    ScaleOrder::RowMajor,
                    None,
                ),
                How::PerToken(ub) => {
                    let ub_buf = ub.map(|u| DeviceBuffer::from_host(&gpu, &[u]).unwrap());
                    let r = q.per_token(
                        ptr,
                        DType::F32,
                        cm,
                        ck,
                        codes.ptr(),
                        ldq,
                        scales.ptr(),
                        ub_buf.as_ref().map(|b| b.ptr()),
                        false,
                    );
                    gpu.synchronize().unwrap();
                    r
                }
                How::PerTensor(s) => {
                    let s_buf = s.map(|s| DeviceBuffer::from_host(&gpu, &[s]).unwrap());
                    let r = q.per_tensor(
                        ptr,
                        DType::F32,
                        cm,
                        ck,
                        codes.ptr(),
                        ldq,
                        s_buf.as_ref().map(|b| b.ptr()),
                        amax.ptr(),
                        None,
                        Some(one.ptr()),
                        false,
                    );
                    gpu.synchronize().unwrap();
                    r
                }
            }
        }
        .unwrap_or_else(|e| panic!("{}: {e}", c.what));
        check_codes(
            c.what,
            &codes.to_host().unwrap(),
            &c.codes,
            &c.x,
            cm,
            ck,
            ldq,
        );
        let got_s = match c.how {
            How::PerTensor(_) => one.to_host().unwrap(),
            _ => scales.to_host().unwrap()[..c.scales.len()].to_vec(),
        };
        for (g, w) in got_s.iter().zip(&c.scales) {
            check_scale(c.what, *g, *w);
        }
    }
}

#[test]
fn groups_bit_exact() {
    let Some(gpu) = gpu_or_skip("groups_bit_exact") else {
        return;
    };
    let q = ActQuant::new(&gpu).unwrap();
    for cols in [32, 64, 128] {
        for ue8m0 in [false, true] {
            for d in DTYPES {
                for (m, k) in SHAPES {
                    let x = nasty_activations(m, k);
                    check_groups(&gpu, &q, &x, (m, k), d, Grouping { cols, ue8m0 });
                }
            }
        }
    }
    eprintln!(
        "groups of 32, 64, 128 with f32 and ue8m0 scales: bit-exact with the oracle for \
         f32/f16/bf16 input, {} shapes, every scale order",
        SHAPES.len()
    );
}

#[test]
fn per_token_and_per_tensor_bit_exact() {
    let Some(gpu) = gpu_or_skip("per_token_and_per_tensor_bit_exact") else {
        return;
    };
    let q = ActQuant::new(&gpu).unwrap();
    for d in DTYPES {
        for (m, k) in SHAPES {
            check_scaled(&gpu, &q, &nasty_activations(m, k), m, k, d);
        }
    }
    eprintln!("per-token (with and without ub) and per-tensor (static, dynamic): bit-exact");
}

/// (M, K), group columns, input dtypes, the cut the size chooses for 16-bit input.
type CutCase = ((usize, usize), usize, &'static [DType], GroupCut);

/// Sizes that choose each cut of the group kernel, ragged K among them (the other tests'
/// shapes take the narrow cut): bit-exact with the oracle and the CPU, every scale order.
#[test]
fn every_cut_bit_exact_at_the_sizes_that_choose_it() {
    let Some(gpu) = gpu_or_skip("every_cut_bit_exact_at_the_sizes_that_choose_it") else {
        return;
    };
    let q = ActQuant::new(&gpu).unwrap();
    let cases: [CutCase; 6] = [
        ((300, 7168), 128, &DTYPES, GroupCut::Wide),
        (
            (150, 16383),
            128,
            &[DType::Bf16, DType::F32],
            GroupCut::Wide,
        ),
        ((310, 7000), 8, &[DType::Bf16], GroupCut::Wide),
        ((300, 7176), 16, &[DType::F16], GroupCut::Wide),
        (
            (5900, 7168),
            128,
            &[DType::Bf16, DType::F16],
            GroupCut::Deep,
        ),
        ((2600, 16390), 64, &[DType::Bf16], GroupCut::Deep),
    ];
    for ((m, k), cols, dtypes, cut) in cases {
        let x = nasty_activations(m, k);
        for &d in dtypes {
            let want = if d == DType::F32 { GroupCut::Wide } else { cut };
            assert_eq!(group_cut(m, k, d), want, "{d} M={m} K={k}");
            for ue8m0 in [false, true] {
                check_groups(&gpu, &q, &x, (m, k), d, Grouping { cols, ue8m0 });
            }
        }
    }
    eprintln!("the wide and deep cuts: bit-exact with the oracle, ragged K, groups 8 to 128");
}

/// The e4m3 conversion the quantizers run on sm_89 and newer (`e4m3x2` in cu/quant.cuh: the
/// hardware `cvt.rn.satfinite.e4m3x2.f32`) against the software encoder (`f32_to_e4m3`, the
/// CPU's encoder line by line: kernels/src/cuda/sources.rs checks the port) on every one of
/// the 2^32 f32 bit patterns, in both halves of the pair: equal everywhere, NaNs included.
#[test]
fn hardware_e4m3_conversion_equals_the_encoder_on_every_f32() {
    let Some(gpu) = gpu_or_skip("hardware_e4m3_conversion_equals_the_encoder_on_every_f32") else {
        return;
    };
    if gpu
        .device()
        .capability
        .is_some_and(|c| (c.major, c.minor) < (8, 9))
    {
        eprintln!("skipped: no hardware e4m3 conversion before sm_89 (the encoder runs there)");
        return;
    }
    const CHECK: &str = r#"
// out[0]: mismatching patterns (saturating), out[1]: the smallest one.
extern "C" __global__ void e4m3_every_f32(u32* out) {
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
         i < (1ull << 32); i += (unsigned long long)gridDim.x * blockDim.x) {
        const u32 b = (u32)i;
        const float x = __uint_as_float(b), y = __uint_as_float(b ^ 0x80000000u);
        if (e4m3x2(x, y) != ((f32_to_e4m3(x) << 8) | f32_to_e4m3(y))) {
            atomicInc(&out[0], 0xffffffffu);
            atomicMin(&out[1], b);
        }
    }
}
"#;
    // The module's source lives as long as the test (ModuleSpec keeps a 'static str).
    let source: &'static str = Box::leak(format!("{QUANT_HEADERS}\n{CHECK}").into_boxed_str());
    let spec = ModuleSpec::new("e4m3_check", source);
    let (module, _) = gpu.module(&spec).unwrap();
    let f = module.load_function("e4m3_every_f32").unwrap();
    let out = DeviceBuffer::<u8>::from_host(&gpu, &[0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff]).unwrap();
    let op = out.ptr();
    let mut b = gpu.stream().launch_builder(&f);
    b.arg(&op);
    let cfg = LaunchConfig {
        grid_dim: (gpu.device().sm_count.max(1) * 16, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: the kernel takes one device pointer to two u32, which `out` holds.
    unsafe { b.launch(cfg) }.unwrap();
    let r = out.to_host().unwrap();
    let word = |i: usize| u32::from_le_bytes([r[i], r[i + 1], r[i + 2], r[i + 3]]);
    let (n, at) = (word(0), word(4));
    assert_eq!(
        n,
        0,
        "{n} f32 bit patterns convert differently, the first {at:#010x} ({:e})",
        f32::from_bits(at)
    );
    eprintln!("hardware e4m3 conversion = the encoder on all 2^32 f32 (both pair halves)");
}
