//! The weight-read floor of `bench` and `autotune`'s tables (BENCHMARKS.md's `floor%`): the
//! time of reading the layer's N x K FP8 weight bytes once at a device's weight-read rate,
//! over the measured time, at M <= [`FLOOR_MAX_M`] (where a GEMM is bound by that read).

use fp8_linear::{Device, LayerConfig};

/// The largest M the floor is shown for.
pub const FLOOR_MAX_M: usize = 64;

/// An H200's weight-read rate in TB/s: its large device-to-device copy rate, the rate of
/// BENCHMARKS.md's floor% column.
pub const H200_READ_TBS: f64 = 4.3;

/// The weight-read rate assumed for `device` when `--read-tbs` is not given: an H200's, else
/// none (the floor is then not shown).
pub fn default_read_tbs(device: &Device) -> Option<f64> {
    device
        .name
        .to_ascii_lowercase()
        .contains("h200")
        .then_some(H200_READ_TBS)
}

/// Parses `--read-tbs`: a positive, finite number of TB/s.
pub fn parse_read_tbs(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!(
            "--read-tbs must be a positive number of TB/s, found `{s}`"
        )),
    }
}

/// Percent of the weight-read floor that `seconds` per call at `m` rows reaches on `config`
/// at `read_tbs`: None above [`FLOOR_MAX_M`] or without a rate.
pub fn floor_percent(
    config: &LayerConfig,
    m: usize,
    seconds: f64,
    read_tbs: Option<f64>,
) -> Option<f64> {
    let tbs = read_tbs?;
    if m > FLOOR_MAX_M || seconds <= 0.0 {
        return None;
    }
    let floor_s = (config.n * config.k) as f64 / (tbs * 1e12);
    Some(100.0 * floor_s / seconds)
}

#[cfg(test)]
mod tests {
    use super::*;
    use fp8_linear::DType;

    #[test]
    fn the_h200_has_a_default_rate_and_the_cpu_none() {
        let h200 = Device::profile("h200").unwrap();
        assert_eq!(default_read_tbs(&h200), Some(H200_READ_TBS));
        assert_eq!(default_read_tbs(&Device::profile("a100").unwrap()), None);
        assert_eq!(default_read_tbs(&Device::cpu(2)), None);
    }

    #[test]
    fn the_floor_is_the_weight_read_over_the_time_up_to_m_64() {
        let cfg = LayerConfig::block_128(4096, 7168, DType::Bf16, DType::Bf16);
        // 29.36 MB at 4.3 TB/s is 6.83 us: 38 % of the decode kernel's 17.9 us at M = 1.
        let p = floor_percent(&cfg, 1, 17.9e-6, Some(4.3)).unwrap();
        assert!((p - 38.1).abs() < 0.1, "{p}");
        assert_eq!(floor_percent(&cfg, 65, 17.9e-6, Some(4.3)), None);
        assert_eq!(floor_percent(&cfg, 1, 17.9e-6, None), None);
        assert!(parse_read_tbs("4.3").is_ok());
        for bad in ["0", "-1", "x", "inf"] {
            assert!(parse_read_tbs(bad).is_err(), "{bad}");
        }
    }
}
