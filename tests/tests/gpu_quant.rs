//! GPU activation quantization is bit-identical to the CPU's (codes and scales) on fresh
//! random data with outliers, zeros, tiny and huge values: 1x128 groups (row- and
//! column-major scales), per-token (with and without an upper bound), per-tensor static and
//! dynamic; f32, f16 and bf16 input; ragged K. Skips without a GPU unless FP8_REQUIRE_CUDA=1.

use fp8_linear::cpu::quantize;
use fp8_linear::cuda::runtime::DeviceBuffer;
use fp8_linear::cuda::{ActQuant, ScaleOrder};
use fp8_linear::DType;
use fp8_linear_tests::gpu::{gpu_or_skip, upload_as};
use rand::Rng;

/// Random activations with the awkward cases mixed in: a zero group, values near the e4m3
/// subnormal range after scaling, outliers (all finite in f16, whose max is 65504).
fn nasty(m: usize, k: usize) -> Vec<f32> {
    let mut rng = rand::rng();
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
        x[k..k + 128].iter_mut().for_each(|v| *v = 0.0); // an all-zero group in row 1
    }
    x
}

const DTYPES: [DType; 3] = [DType::F32, DType::F16, DType::Bf16];
const SHAPES: [(usize, usize); 6] = [
    (1, 1),
    (3, 127),
    (7, 128),
    (83, 3884),
    (200, 130),
    (16, 7170),
];

#[test]
fn group128_bit_exact() {
    let Some(gpu) = gpu_or_skip("group128_bit_exact") else {
        return;
    };
    let q = ActQuant::new(&gpu).unwrap();
    for d in DTYPES {
        for (m, k) in SHAPES {
            for order in [
                ScaleOrder::RowMajor,
                ScaleOrder::ColMajor,
                ScaleOrder::ColMajorLd(m.div_ceil(4) * 4 + 4),
            ] {
                let x = nasty(m, k);
                let (xb, exact) = upload_as(&gpu, &x, d);
                let ldq = k.div_ceil(16) * 16;
                let g = k.div_ceil(128);
                let mut codes = DeviceBuffer::<u8>::zeros(&gpu, m * ldq).unwrap();
                codes.fill_bytes(0xaa).unwrap();
                let scales = DeviceBuffer::<f32>::zeros(&gpu, (m.div_ceil(4) * 4 + 4) * g).unwrap();
                let xm = xb.tensor([m, k]);
                let ptr = match xm.data {
                    fp8_linear::Storage::Device(mem, _) => mem.ptr,
                    _ => unreachable!(),
                };
                // SAFETY: buffers sized as the call requires, all on the GPU handle's stream.
                unsafe { q.group128(ptr, d, m, k, codes.ptr(), ldq, scales.ptr(), order) }.unwrap();
                let got_q = codes.to_host().unwrap();
                let got_s = scales.to_host().unwrap();
                let (want_q, want_s) = quantize::per_token_group(&exact, m, k, 128);
                for r in 0..m {
                    for c in 0..ldq {
                        let want = if c < k { want_q[r * k + c] } else { 0 };
                        assert_eq!(
                            got_q[r * ldq + c],
                            want,
                            "{d} M={m} K={k} {order:?}: code ({r}, {c}) of x = {:e}",
                            if c < k { exact[r * k + c] } else { 0.0 }
                        );
                    }
                    for j in 0..g {
                        let idx = match order {
                            ScaleOrder::RowMajor => r * g + j,
                            ScaleOrder::ColMajor => j * m + r,
                            ScaleOrder::ColMajorLd(ld) => j * ld + r,
                        };
                        assert_eq!(
                            got_s[idx].to_bits(),
                            want_s[r * g + j].to_bits(),
                            "{d} scale ({r}, {j})"
                        );
                    }
                }
            }
        }
    }
    eprintln!(
        "group128: bit-exact for f32/f16/bf16 input, {} shapes, both scale orders",
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
            let x = nasty(m, k);
            let (xb, exact) = upload_as(&gpu, &x, d);
            let ptr = match xb.tensor([m, k]).data {
                fp8_linear::Storage::Device(mem, _) => mem.ptr,
                _ => unreachable!(),
            };
            let ldq = k.div_ceil(16) * 16;
            let codes = DeviceBuffer::<u8>::zeros(&gpu, m * ldq).unwrap();
            let scales = DeviceBuffer::<f32>::zeros(&gpu, m).unwrap();
            let one = DeviceBuffer::<f32>::zeros(&gpu, 1).unwrap();
            let amax = DeviceBuffer::<f32>::zeros(&gpu, 1).unwrap();
            let check = |what: &str, want_q: &[u8], want_s: &[f32]| {
                let got_q = codes.to_host().unwrap();
                for r in 0..m {
                    for c in 0..k {
                        assert_eq!(
                            got_q[r * ldq + c],
                            want_q[r * k + c],
                            "{what} {d} M={m} K={k} ({r},{c})"
                        );
                    }
                    for c in k..ldq {
                        assert_eq!(got_q[r * ldq + c], 0, "{what}: padding ({r},{c})");
                    }
                }
                let got_s = scales.to_host().unwrap();
                for r in 0..m {
                    let want = want_s[if want_s.len() == 1 { 0 } else { r }];
                    assert_eq!(
                        got_s[r].to_bits(),
                        want.to_bits(),
                        "{what} {d} scale of row {r}"
                    );
                }
            };
            // Per token, with and without an upper bound that clips some rows.
            for ub in [None, Some(3.0f32)] {
                let ub_buf = ub.map(|u| DeviceBuffer::from_host(&gpu, &[u]).unwrap());
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
                    )
                }
                .unwrap();
                let mut want_q = vec![0u8; m * k];
                let mut want_s = vec![0f32; m];
                quantize::per_token_into(&exact, k, ub, &mut want_q, &mut want_s);
                check("per-token", &want_q, &want_s);
            }
            // Per tensor: dynamic, then static.
            for fixed in [None, Some(0.0123f32)] {
                let fixed_buf = fixed.map(|s| DeviceBuffer::from_host(&gpu, &[s]).unwrap());
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
                    )
                }
                .unwrap();
                let mut want_q = vec![0u8; m * k];
                let s = quantize::per_tensor_into(&exact, fixed, &mut want_q);
                check("per-tensor", &want_q, &[s]);
                assert_eq!(one.to_host().unwrap()[0].to_bits(), s.to_bits());
            }
        }
    }
    eprintln!("per-token (with and without ub) and per-tensor (static, dynamic): bit-exact");
}
