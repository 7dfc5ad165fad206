//! Which scale layouts cuBLASLt's block-scaled FP8 GEMM reads (sm_90): the GEMM is run
//! directly with the activation (VEC128) and weight (BLK128x128) scales arranged every
//! plausible way, on a layer with N != K, block counts that are not multiples of 4 and
//! non-uniform scales, against the f64 reference. The layout the kernel uses must be the one
//! that matches; the table of all candidates is printed. Skips without a GPU unless
//! FP8_REQUIRE_CUDA=1.

use fp8_linear::cpu::reference;
use fp8_linear::cuda::cublaslt_block::{blk128_weight_scales, ACT_SCALE_ORDER};
use fp8_linear::cuda::runtime::cublaslt::{Fp8GemmPlan, Fp8GemmShape, ScaleMode};
use fp8_linear::cuda::runtime::DeviceBuffer;
use fp8_linear::cuda::ScaleOrder;
use fp8_linear::DType;
use fp8_linear_tests::gpu::gpu_or_skip;
use fp8_linear_tests::layers::{quantize_groups, random_activations, random_block_weight};
use half::bf16;

fn pad_rows(v: &[u8], rows: usize, cols: usize, ld: usize) -> Vec<u8> {
    let mut out = vec![0u8; rows * ld];
    for r in 0..rows {
        out[r * ld..r * ld + cols].copy_from_slice(&v[r * cols..(r + 1) * cols]);
    }
    out
}

#[test]
fn block_scale_layouts() {
    let Some(gpu) = gpu_or_skip("block_scale_layouts") else {
        return;
    };
    if (gpu.capability().major, gpu.capability().minor) != (9, 0) {
        eprintln!(
            "cuBLASLt block scales are sm_90 only; this GPU is {}",
            gpu.capability()
        );
        return;
    }
    // M a multiple of 4 (cuBLASLt's requirement); nb = 3, kb = 5: neither a multiple of 4
    let (m, n, k): (usize, usize, usize) = (84, 384, 640);
    let (nb, kb) = (n.div_ceil(128), k.div_ceil(128));
    let ldk = k.div_ceil(16) * 16;
    let (w, ws) = random_block_weight(n, k, 5);
    let x = random_activations(m, k);
    let (aq, as_) = quantize_groups(&x, m, k);
    let want = reference::block_gemm_f64(&aq, &as_, &w, &ws, m, n, k, (128, 128));
    let wd = DeviceBuffer::from_host(&gpu, &pad_rows(&w, n, k, ldk)).unwrap();
    let ad = DeviceBuffer::from_host(&gpu, &pad_rows(&aq, m, k, ldk)).unwrap();
    let r4 = |v: usize| v.div_ceil(4) * 4;

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
    let mut errs = Vec::new();
    for (an, a) in &act_layouts {
        for (wn, wv) in &w_layouts {
            let asd = DeviceBuffer::from_host(&gpu, a).unwrap();
            let wsd = DeviceBuffer::from_host(&gpu, wv).unwrap();
            let mut plan = Fp8GemmPlan::new(&lt, shape, wsd.ptr(), asd.ptr()).unwrap();
            let mut out = DeviceBuffer::<bf16>::zeros(&gpu, m * n).unwrap();
            out.fill_bytes(0xff).unwrap();
            // SAFETY: every buffer holds what the shape and scale modes read (padded
            // variants hold more); all on the GPU handle's stream, where the GEMM runs.
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
            let err = reference::rel_frobenius(&got, &want);
            eprintln!("cuBLASLt block scales: {an:<26} {wn:<26} rel err {err:.3e}");
            errs.push((*an, *wn, err));
        }
    }
    let ours_act = match ACT_SCALE_ORDER {
        ScaleOrder::ColMajor | ScaleOrder::ColMajorLd(_) => act_layouts[0].0,
        ScaleOrder::RowMajor => act_layouts[1].0,
    };
    let ours = errs
        .iter()
        .find(|(a, w, _)| *a == ours_act && *w == w_layouts[0].0)
        .unwrap()
        .2;
    assert!(
        ours < 1e-2,
        "the layout CublasLtBlockFp8 uses is wrong: rel err {ours}; see the table above"
    );
}
