//! A CPU model of the Marlin kernel's arithmetic, mma by mma, for testing the repack and the
//! scale conversion without a GPU: it reads the repacked weight and the converted scales
//! exactly as the lanes of `cu/marlin.cu` do, applies the bit trick and the 16-bit scale
//! multiply with the same rounding, builds each m16n8k16 operand from the lanes' fragments by
//! the PTX fragment layout, and accumulates in f64 (the tensor cores accumulate in f32).

use half::{bf16, f16};

use super::repack::{bit_trick, half_bits_to_f32, MarlinWeights, STEP, STRIPE, TILES};

fn round16(v: f32, bf16_out: bool) -> f32 {
    if bf16_out {
        bf16::from_f32(v).to_f32()
    } else {
        f16::from_f32(v).to_f32()
    }
}

fn bits16(v: f32, bf16_out: bool) -> u16 {
    if bf16_out {
        bf16::from_f32(v).to_bits()
    } else {
        f16::from_f32(v).to_bits()
    }
}

/// `mul2` of the kernel: two 16-bit products, each rounded once to the 16-bit type.
fn mul2(a: u32, b: u32, bf16_out: bool) -> [f32; 2] {
    let h = |w: u32, i: u32| half_bits_to_f32((w >> (16 * i)) as u16, bf16_out);
    [
        round16(h(a, 0) * h(b, 0), bf16_out),
        round16(h(a, 1) * h(b, 1), bf16_out),
    ]
}

#[allow(clippy::needless_range_loop)]
/// Runs the kernel's arithmetic for activations `x` (`[m, k]` row-major f32, rounded to the
/// weights' 16-bit dtype first, as the GPU receives them). Returns `[m, n]` before bias.
pub fn emulate(w: &MarlinWeights, x: &[f32], m: usize) -> Vec<f64> {
    let (n, k, bf) = (w.n, w.k, w.bf16);
    let ksteps = w.ksteps();
    let xbits: Vec<u16> = x[..m * k].iter().map(|v| bits16(*v, bf)).collect();
    let mut out = vec![0f64; m * n];
    let mtiles = m.div_ceil(8);
    for stripe in 0..w.stripes() {
        for step in 0..ksteps {
            // K padding past the last group reads the last group's scale (zero codes).
            let grp = (step / w.steps_per_group).min(w.groups - 1);
            for tile in 0..TILES {
                for s in 0..2 {
                    // A operand: 16 channels x 16 mma positions.
                    let mut a = [[0f32; 16]; 16];
                    for lane in 0..32 {
                        let (g, t) = (lane / 4, lane % 4);
                        let base = (((stripe * ksteps + step) * TILES + tile) * 32 + lane) * 16;
                        let word = |i: usize| {
                            u32::from_le_bytes(
                                w.weight[base + 4 * i..base + 4 * i + 4].try_into().unwrap(),
                            )
                        };
                        let sidx = ((stripe * w.groups + grp) * TILES + tile) * 16 + g * 2;
                        let (slo, shi) =
                            (w.group_scales[sidx] as u32, w.group_scales[sidx + 1] as u32);
                        let (slo, shi) = (slo | slo << 16, shi | shi << 16);
                        let (qa, qb) = (word(2 * s), word(2 * s + 1));
                        let a0 = mul2(bit_trick(qa, bf).0, slo, bf);
                        let a2 = mul2(bit_trick(qa, bf).1, slo, bf);
                        let a1 = mul2(bit_trick(qb, bf).0, shi, bf);
                        let a3 = mul2(bit_trick(qb, bf).1, shi, bf);
                        for i in 0..2 {
                            a[g][2 * t + i] = a0[i];
                            a[g + 8][2 * t + i] = a1[i];
                            a[g][2 * t + 8 + i] = a2[i];
                            a[g + 8][2 * t + 8 + i] = a3[i];
                        }
                    }
                    for mt in 0..mtiles {
                        // B operand: 16 mma positions x 8 rows of M.
                        let mut b = [[0f32; 8]; 16];
                        for lane in 0..32 {
                            let (g, t) = (lane / 4, lane % 4);
                            let row = mt * 8 + g;
                            let kk = step * STEP + 8 * t + 4 * s;
                            let e = |i: usize| -> f32 {
                                if row < m && kk + i < k {
                                    half_bits_to_f32(xbits[row * k + kk + i], bf)
                                } else {
                                    0.0
                                }
                            };
                            b[2 * t][g] = e(0);
                            b[2 * t + 1][g] = e(1);
                            b[2 * t + 8][g] = e(2);
                            b[2 * t + 9][g] = e(3);
                        }
                        for (i, arow) in a.iter().enumerate() {
                            let col = stripe * STRIPE + tile * 16 + i;
                            if col >= n {
                                continue;
                            }
                            for j in 0..8 {
                                let row = mt * 8 + j;
                                if row >= m {
                                    continue;
                                }
                                let dot: f64 =
                                    (0..16).map(|p| arow[p] as f64 * b[p][j] as f64).sum();
                                out[row * n + col] += dot;
                            }
                        }
                    }
                }
            }
        }
    }
    for row in 0..m {
        for col in 0..n {
            out[row * n + col] *= w.channel[col] as f64;
        }
    }
    out
}
