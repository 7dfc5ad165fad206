//! Random FP8 layers for tests: fresh data every run, quantized the way checkpoints are.

use fp8_linear::cpu::quantize;
use fp8_linear::fp8::f32_to_e4m3;
use rand::Rng;

/// A random 128x128 block-quantized weight `[n, k]`: FP8 codes and block scales
/// `[ceil(n/128), ceil(k/128)]`, with scales spread over `spread` binades.
pub fn random_block_weight(n: usize, k: usize, spread: i32) -> (Vec<u8>, Vec<f32>) {
    let mut rng = rand::rng();
    let (nb, kb) = (n.div_ceil(128), k.div_ceil(128));
    let scales: Vec<f32> = (0..nb * kb)
        .map(|_| 2f32.powi(rng.random_range(-spread..=spread)) * rng.random_range(0.5..1.0) / 448.0)
        .collect();
    let codes: Vec<u8> = (0..n * k)
        .map(|_| f32_to_e4m3(rng.random_range(-448.0f32..448.0)))
        .collect();
    (codes, scales)
}

/// Random activations `[m, k]` with a few outliers, as f32.
pub fn random_activations(m: usize, k: usize) -> Vec<f32> {
    let mut rng = rand::rng();
    (0..m * k)
        .map(|_| {
            let v: f32 = rng.random_range(-1.0..1.0);
            if rng.random_range(0..100) == 0 {
                v * 30.0
            } else {
                v
            }
        })
        .collect()
}

/// The activations quantized per 1x128 group: codes and scales `[m, ceil(k/128)]`.
pub fn quantize_groups(x: &[f32], m: usize, k: usize) -> (Vec<u8>, Vec<f32>) {
    quantize::per_token_group(x, m, k, 128)
}
