//! Row ranges of tensor views: the rows of one expert, or of one segment of a grouped call,
//! as a view of their own over the same buffer (host slice, or device address).

use std::ops::Range;

use crate::error::KernelError;
use crate::tensor::{DeviceMemory, Storage, StorageMut, Tensor, TensorMut};

/// Checks `rows` against a view's rows and returns the element offset of its first row.
fn row_offset(
    what: &'static str,
    shape: [usize; 2],
    strides: [usize; 2],
    rows: &Range<usize>,
) -> Result<usize, KernelError> {
    if rows.start > rows.end || rows.end > shape[0] {
        return Err(KernelError::shape(
            what,
            format!(
                "rows {}..{} inside [{}, {}]",
                rows.start, rows.end, shape[0], shape[1]
            ),
            format!("{:?}", shape),
        ));
    }
    Ok(rows.start * strides[0])
}

/// The device memory from element `offset` of `dtype` on.
fn device_from(mem: DeviceMemory, size: usize, offset: usize) -> DeviceMemory {
    let skip = (offset * size).min(mem.bytes);
    DeviceMemory {
        ptr: mem.ptr + skip as u64,
        bytes: mem.bytes - skip,
        ordinal: mem.ordinal,
    }
}

impl<'a> Tensor<'a> {
    /// The view of rows `rows` (same columns and strides, same buffer). A range outside the
    /// view is [`KernelError::Shape`]; a buffer shorter than the view is
    /// [`KernelError::BufferTooSmall`].
    pub fn rows(&self, what: &'static str, rows: Range<usize>) -> Result<Tensor<'a>, KernelError> {
        self.check_bounds(what)?;
        let off = row_offset(what, self.shape, self.strides, &rows)?;
        // The view's buffer backs every row, so `off` is inside it unless the range is empty
        // at the end (then the sub-view holds no element).
        let data = match self.data {
            Storage::F32(s) => Storage::F32(&s[off.min(s.len())..]),
            Storage::F16(s) => Storage::F16(&s[off.min(s.len())..]),
            Storage::Bf16(s) => Storage::Bf16(&s[off.min(s.len())..]),
            Storage::F8E4m3(s) => Storage::F8E4m3(&s[off.min(s.len())..]),
            Storage::Device(m, d) => Storage::Device(device_from(m, d.size_bytes(), off), d),
        };
        Ok(Tensor {
            data,
            shape: [rows.len(), self.shape[1]],
            strides: self.strides,
        })
    }
}

impl TensorMut<'_> {
    /// The writable view of rows `rows`, borrowing this one (same rules as
    /// [`Tensor::rows`]).
    pub fn rows_mut(
        &mut self,
        what: &'static str,
        rows: Range<usize>,
    ) -> Result<TensorMut<'_>, KernelError> {
        let (shape, strides) = (self.shape, self.strides);
        let off = row_offset(what, shape, strides, &rows)?;
        let needed = view_span(shape, strides);
        if needed > self.data.len() {
            return Err(KernelError::BufferTooSmall {
                what,
                needed,
                len: self.data.len(),
            });
        }
        let data = match &mut self.data {
            StorageMut::F32(s) => StorageMut::F32(&mut s[off.min(needed)..]),
            StorageMut::F16(s) => StorageMut::F16(&mut s[off.min(needed)..]),
            StorageMut::Bf16(s) => StorageMut::Bf16(&mut s[off.min(needed)..]),
            StorageMut::F8E4m3(s) => StorageMut::F8E4m3(&mut s[off.min(needed)..]),
            StorageMut::Device(m, d) => {
                StorageMut::Device(device_from(*m, d.size_bytes(), off), *d)
            }
        };
        Ok(TensorMut {
            data,
            shape: [rows.len(), shape[1]],
            strides,
        })
    }
}

/// Elements a view reaches (saturating: an overflowing view is refused by the buffer check).
fn view_span(shape: [usize; 2], strides: [usize; 2]) -> usize {
    if shape[0] == 0 || shape[1] == 0 {
        return 0;
    }
    (shape[0] - 1)
        .saturating_mul(strides[0])
        .saturating_add((shape[1] - 1).saturating_mul(strides[1]))
        .saturating_add(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_views_share_the_buffer() {
        let v: Vec<f32> = (0..12).map(|i| i as f32).collect();
        let t = Tensor::f32(&v, [4, 3]);
        let r = t.rows("x", 1..3).unwrap();
        assert_eq!(r.shape, [2, 3]);
        let Storage::F32(s) = r.data else { panic!() };
        assert_eq!(s[0], 3.0);
        assert!(t.rows("x", 3..5).is_err());
        assert_eq!(t.rows("x", 4..4).unwrap().shape, [0, 3]);
        let mut w = vec![0f32; 12];
        let mut o = TensorMut::f32(&mut w, [4, 3]);
        let mut r = o.rows_mut("y", 2..4).unwrap();
        if let StorageMut::F32(s) = &mut r.data {
            s[0] = 7.0;
        }
        assert_eq!(w[6], 7.0);
        let mut short = vec![0f32; 5];
        let mut o = TensorMut::f32(&mut short, [4, 3]);
        assert!(matches!(
            o.rows_mut("y", 0..1),
            Err(KernelError::BufferTooSmall { .. })
        ));
    }
}
