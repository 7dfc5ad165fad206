//! A masked grouped call whose routing lives in device memory: what a CUDA graph of a decode
//! step captures (the counts change between replays, the launch does not).

use crate::error::KernelError;
use crate::grouped::routing::masked_rows;
use crate::tensor::DeviceMemory;

/// The routing of a masked call (the `[E * M_max, K]` input of [`Routing::Masked`](
/// crate::grouped::Routing::Masked)) that the kernel reads from device memory: `counts`
/// holds E `i32` counts (expert `e` owns the first `counts[e]` rows of its slab of `M_max`
/// rows; the kernel clamps each to `0..=M_max`, so no value can make it read or write outside
/// the input and output), `route_weights` optionally one `f32` per input row, multiplied into
/// the output. The host never sees the counts, so `expected_rows` (at most `M_max`) says how
/// many rows per expert to choose the launch for.
#[derive(Copy, Clone, Debug)]
pub struct DeviceMasked {
    /// E `i32` counts in device memory.
    pub counts: DeviceMemory,
    /// `E * M_max` `f32` routing weights in device memory, or none.
    pub route_weights: Option<DeviceMemory>,
    /// The rows per expert the launch is chosen for (1 for decode), at most `M_max`.
    pub expected_rows: usize,
}

impl DeviceMasked {
    /// Checks the routing of a call of `rows` input rows on a layer of `experts` experts:
    /// the rows are a stack of E slabs, the counts hold E `i32`, the routing weights one
    /// `f32` per row, and `expected_rows` is 1 to `M_max`. Returns `M_max`.
    pub fn check(&self, experts: usize, rows: usize) -> Result<usize, KernelError> {
        let m_max = masked_rows(experts, rows)?;
        let bytes = |what: &'static str, m: &DeviceMemory, count: usize| {
            if m.bytes / 4 < count {
                return Err(KernelError::BufferTooSmall {
                    what,
                    needed: count,
                    len: m.bytes / 4,
                });
            }
            if !m.ptr.is_multiple_of(4) {
                return Err(KernelError::Alignment {
                    what,
                    detail: format!("address {:#x} is not 4-byte aligned", m.ptr),
                });
            }
            Ok(())
        };
        bytes("counts", &self.counts, experts)?;
        if let Some(w) = &self.route_weights {
            bytes("routing weights", w, rows)?;
        }
        if self.expected_rows == 0 || self.expected_rows > m_max {
            return Err(KernelError::shape(
                "expected rows",
                format!("1 to M_max = {m_max} rows per expert"),
                self.expected_rows,
            ));
        }
        Ok(m_max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mem(bytes: usize) -> DeviceMemory {
        DeviceMemory {
            ptr: 256,
            bytes,
            ordinal: 0,
        }
    }

    #[test]
    fn checks_name_the_problem() {
        let ok = DeviceMasked {
            counts: mem(16),
            route_weights: Some(mem(4 * 32)),
            expected_rows: 2,
        };
        assert_eq!(ok.check(4, 32).unwrap(), 8);
        let msg = |d: DeviceMasked, e, rows| d.check(e, rows).unwrap_err().to_string();
        assert!(msg(ok, 3, 32).contains("multiple of E"));
        let short = DeviceMasked {
            counts: mem(12),
            ..ok
        };
        assert!(msg(short, 4, 32).contains("counts"));
        let weights = DeviceMasked {
            route_weights: Some(mem(4 * 31)),
            ..ok
        };
        assert!(msg(weights, 4, 32).contains("routing weights"));
        for rows in [0, 9] {
            let e = DeviceMasked {
                expected_rows: rows,
                ..ok
            };
            assert!(msg(e, 4, 32).contains("expected rows"));
        }
        let odd = DeviceMasked {
            counts: DeviceMemory {
                ptr: 258,
                ..mem(16)
            },
            ..ok
        };
        assert!(msg(odd, 4, 32).contains("aligned"));
    }
}
