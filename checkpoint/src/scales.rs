//! Small float tensors (scales, biases) copied out of a shard into owned `f32`: mapped f32
//! data need not be 4-byte aligned, and bf16 / f16 / e8m0 scales are widened.

use safetensors::Dtype;

use crate::error::CheckpointError;
use crate::quant_config::ScaleFormat;

/// The dtypes accepted for scales and biases.
pub const FLOAT_DTYPES: &str = "F32, BF16 or F16 (F8_E8M0 for scales)";

/// Decodes little-endian elements of a float dtype into f32. `tensor` names the tensor in
/// errors.
pub fn decode(
    tensor: &str,
    dtype: Dtype,
    bytes: &[u8],
    allow_e8m0: bool,
) -> Result<Vec<f32>, CheckpointError> {
    let out = match dtype {
        Dtype::F32 => bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
        Dtype::BF16 => bytes
            .chunks_exact(2)
            .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
        Dtype::F16 => bytes
            .chunks_exact(2)
            .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
        // e8m0: a biased power-of-two exponent; 0xff is NaN.
        Dtype::F8_E8M0 if allow_e8m0 => bytes
            .iter()
            .map(|&b| {
                if b == 0xff {
                    f32::NAN
                } else {
                    2f32.powi(b as i32 - 127)
                }
            })
            .collect(),
        other => {
            return Err(CheckpointError::DType {
                tensor: tensor.to_string(),
                expected: FLOAT_DTYPES.into(),
                got: other.to_string(),
            })
        }
    };
    Ok(out)
}

/// Checks that every scale is finite and non-negative, and a power of two for ue8m0.
pub fn check(tensor: &str, scales: &[f32], format: ScaleFormat) -> Result<(), CheckpointError> {
    if let Some((index, &value)) = scales
        .iter()
        .enumerate()
        .find(|(_, v)| !v.is_finite() || **v < 0.0)
    {
        return Err(CheckpointError::BadScale {
            tensor: tensor.to_string(),
            index,
            value,
        });
    }
    if format == ScaleFormat::Ue8m0 {
        if let Some((index, &value)) = scales.iter().enumerate().find(|(_, v)| {
            let bits = v.to_bits();
            // A positive normal power of two has an all-zero mantissa.
            **v == 0.0 || bits & 0x007f_ffff != 0 || (bits >> 23) & 0xff == 0
        }) {
            return Err(CheckpointError::NotPowerOfTwo {
                tensor: tensor.to_string(),
                index,
                value,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_and_checks() {
        let mut b = Vec::new();
        for v in [0.5f32, 2.0, 0.25] {
            b.extend(v.to_le_bytes());
        }
        // Unaligned start: decode must not care.
        let mut shifted = vec![0u8];
        shifted.extend(&b);
        let s = decode("s", Dtype::F32, &shifted[1..], false).unwrap();
        assert_eq!(s, vec![0.5, 2.0, 0.25]);
        assert!(check("s", &s, ScaleFormat::Ue8m0).is_ok());
        assert!(matches!(
            check("s", &[0.5, 0.3], ScaleFormat::Ue8m0),
            Err(CheckpointError::NotPowerOfTwo { index: 1, .. })
        ));
        assert!(matches!(
            check("s", &[0.5, f32::NAN], ScaleFormat::F32),
            Err(CheckpointError::BadScale { index: 1, .. })
        ));
        assert_eq!(
            decode("e", Dtype::F8_E8M0, &[127, 120], true).unwrap(),
            vec![1.0, 2f32.powi(-7)]
        );
        assert!(decode("e", Dtype::F8_E8M0, &[127], false).is_err());
        assert!(matches!(
            decode("i", Dtype::I32, &[0; 4], true),
            Err(CheckpointError::DType { .. })
        ));
    }
}
