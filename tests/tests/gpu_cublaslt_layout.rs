//! Which scale layouts cuBLASLt's block-scaled FP8 GEMM reads (sm_90): the GEMM is run
//! directly with the activation (VEC128) and weight (BLK128x128) scales arranged every
//! plausible way, on a layer with N != K, block counts that are not multiples of 4 and
//! scales that differ in every block (so every permutation of them is a different GEMM),
//! against the f64 reference. The layout the kernel uses must pass the kernel's bounds, and
//! every other layout must fail them: a check that a wrong layout also passed would show
//! nothing. The table of all candidates is printed. Skips without a GPU unless
//! FP8_REQUIRE_CUDA=1, and visibly on a GPU other than sm_90 (a failure under
//! FP8_REQUIRE_CUDA=1 unless FP8_ALLOW_ARCH_SKIPS allows it).

use fp8_linear::cpu::reference;
use fp8_linear::cuda::cublaslt_block::{blk128_weight_scales, ACT_SCALE_ORDER};
use fp8_linear::cuda::runtime::cublaslt::{Fp8GemmPlan, Fp8GemmShape, ScaleMode};
use fp8_linear::cuda::runtime::DeviceBuffer;
use fp8_linear::cuda::{CublasLtBlockFp8, ScaleOrder};
use fp8_linear::{DType, LayerConfig, Registered};
use fp8_linear_tests::check::{compare, Tolerance};
use fp8_linear_tests::gpu::gpu_for_entry_or_skip;
use fp8_linear_tests::layers::{quantize_groups, random_activations, random_codes};

fn pad_rows(v: &[u8], rows: usize, cols: usize, ld: usize) -> Vec<u8> {
    let mut out = vec![0u8; rows * ld];
    for r in 0..rows {
        out[r * ld..r * ld + cols].copy_from_slice(&v[r * cols..(r + 1) * cols]);
    }
    out
}

/// Weight block scales `[nb, kb]` that differ in every block, within a factor of 8 of each
/// other (so no block dominates the output and a misplaced one shows everywhere it is
/// read): `2^((i * kb + j) % 3 - 1) * (1 + 0.07 * (i * kb + j)) / 448`.
fn distinct_block_scales(nb: usize, kb: usize) -> Vec<f32> {
    (0..nb * kb)
        .map(|b| 2f32.powi((b % 3) as i32 - 1) * (1.0 + 0.07 * b as f32) / 448.0)
        .collect()
}

#[test]
fn block_scale_layouts() {
    let Some(gpu) = gpu_for_entry_or_skip("block_scale_layouts", &CublasLtBlockFp8::ENTRY, false)
    else {
        return;
    };
    // M a multiple of 4 (cuBLASLt's requirement); nb = 3, kb = 5: neither a multiple of 4
    let (m, n, k): (usize, usize, usize) = (84, 384, 640);
    assert_ne!(n, k);
    let (nb, kb) = (n.div_ceil(128), k.div_ceil(128));
    let ldk = k.div_ceil(16) * 16;
    let w = random_codes(n * k);
    let ws = distinct_block_scales(nb, kb);
    let x = random_activations(m, k);
    let (aq, as_) = quantize_groups(&x, m, k);
    let want = reference::block_gemm_f64(&aq, &as_, &w, &ws, m, n, k, (128, 128));
    let wd = DeviceBuffer::from_host(&gpu, &pad_rows(&w, n, k, ldk)).unwrap();
    let ad = DeviceBuffer::from_host(&gpu, &pad_rows(&aq, m, k, ldk)).unwrap();
    let r4 = |v: usize| v.div_ceil(4) * 4;
    let tol = Tolerance::for_kernel(
        &CublasLtBlockFp8::ENTRY,
        &LayerConfig::block_128(n, k, DType::Bf16, DType::Bf16),
    );

    let act_layouts: Vec<(&str, Vec<f32>)> = vec![
        ("act [kb][M] (M fastest)", {
            let mut v = vec![0f32; kb * m];
            for i in 0..m {
                for j in 0..kb {
                    v[j * m + i] = as_[i * kb + j];
                }
            }
            v
        }),
        ("act [M][kb] (row-major)", as_.clone()),
    ];
    let w_layouts: Vec<(&str, Vec<f32>)> = vec![
        ("w [nb][kb rounded to 4]", blk128_weight_scales(&ws, nb, kb)),
        ("w [nb][kb]", ws.clone()),
        ("w [kb][nb]", {
            let mut v = vec![0f32; kb * nb];
            for i in 0..nb {
                for j in 0..kb {
                    v[j * nb + i] = ws[i * kb + j];
                }
            }
            v
        }),
        ("w [kb][nb rounded to 4]", {
            let mut v = vec![0f32; kb * r4(nb)];
            for i in 0..nb {
                for j in 0..kb {
                    v[j * r4(nb) + i] = ws[i * kb + j];
                }
            }
            v
        }),
    ];
    // Every weight-scale buffer holds as many floats as the largest layout (the padding
    // NaN), so a layout that reads past its own data reads NaN, not past the allocation.
    let w_len = w_layouts.iter().map(|(_, v)| v.len()).max().unwrap();
    let lt = gpu.cublaslt().unwrap();
    let shape = Fp8GemmShape {
        m,
        n,
        k: ldk,
        ld_weight: ldk,
        ld_act: ldk,
        out: DType::Bf16,
        weight_scale: ScaleMode::Blk128x128,
        act_scale: ScaleMode::Vec128,
    };
    let mut results = Vec::new();
    for (an, a) in &act_layouts {
        for (wn, wv) in &w_layouts {
            let mut padded = wv.clone();
            padded.resize(w_len, f32::NAN);
            let asd = DeviceBuffer::from_host(&gpu, a).unwrap();
            let wsd = DeviceBuffer::from_host(&gpu, &padded).unwrap();
            let mut plan = Fp8GemmPlan::new(&lt, shape, wsd.ptr(), asd.ptr()).unwrap();
            let mut out = DeviceBuffer::<half::bf16>::zeros(&gpu, m * n).unwrap();
            out.fill_bytes(0xff).unwrap();
            // SAFETY: every buffer holds what the shape and scale modes read (the weight
            // scales padded to the largest layout); all on the GPU handle's stream, where
            // the GEMM runs.
            unsafe {
                plan.run(
                    wd.ptr(),
                    wsd.ptr(),
                    ad.ptr(),
                    asd.ptr(),
                    out.ptr(),
                    gpu.raw_stream(),
                )
            }
            .unwrap();
            let got: Vec<f32> = out.to_host().unwrap().iter().map(|v| v.to_f32()).collect();
            let c = compare(&got, &want, n, tol);
            eprintln!(
                "cuBLASLt block scales: {an:<26} {wn:<26} {} -> {}",
                c.summary(),
                if c.ok() { "passes" } else { "fails" }
            );
            results.push((*an, *wn, c));
        }
    }
    let ours_act = match ACT_SCALE_ORDER {
        ScaleOrder::ColMajor | ScaleOrder::ColMajorLd(_) => act_layouts[0].0,
        ScaleOrder::RowMajor => act_layouts[1].0,
    };
    let ours_w = w_layouts[0].0;
    let mut wrong_passed = Vec::new();
    for (a, w, c) in &results {
        if (*a, *w) == (ours_act, ours_w) {
            assert!(
                c.ok(),
                "the layout CublasLtBlockFp8 uses ({a}, {w}) is wrong: {}; see the table above",
                c.summary()
            );
        } else if c.ok() {
            wrong_passed.push(format!("{a}, {w}: {}", c.summary()));
        }
    }
    assert!(
        wrong_passed.is_empty(),
        "wrong scale layouts pass the check, so it cannot tell the right one:\n{}",
        wrong_passed.join("\n")
    );
}
