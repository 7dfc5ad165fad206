//! TMA tensor maps (`cuTensorMapEncodeTiled`) for 2-D e4m3 operands, passed to kernels by
//! value as a `__grid_constant__` parameter.

use cudarc::driver::sys::{
    CUtensorMap, CUtensorMapDataType, CUtensorMapFloatOOBfill, CUtensorMapInterleave,
    CUtensorMapL2promotion, CUtensorMapSwizzle,
};
use cudarc::driver::{DeviceRepr, DriverError};

use crate::error::CudaError;

/// A 128-byte tensor map, laid out as the kernel's `TmaDesc` parameter expects.
#[repr(C, align(128))]
#[derive(Copy, Clone)]
pub struct TensorMap(CUtensorMap);

// SAFETY: a plain 128-byte, 64-byte-aligned C struct that the driver copies into the
// kernel's parameter space; the kernel declares the same size.
unsafe impl DeviceRepr for TensorMap {}

impl TensorMap {
    /// A map over a row-major `[rows, cols]` byte matrix at device address `ptr` with row
    /// stride `ld` bytes, loaded in boxes of `box_rows` x `box_cols` bytes with the 128-byte
    /// swizzle; out-of-bounds elements read as zero.
    ///
    /// Requirements checked here: `ptr` 16-byte aligned, `ld` a multiple of 16 and at least
    /// `cols`, `box_cols` <= 128 (one swizzle span), `box_rows` <= 256; outside them
    /// [`CudaError::InvalidArgument`]. A failed encode is [`CudaError::Driver`] with the
    /// driver's code.
    pub fn e4m3_2d(
        ptr: u64,
        rows: usize,
        cols: usize,
        ld: usize,
        box_rows: u32,
        box_cols: u32,
    ) -> Result<Self, CudaError> {
        if !ptr.is_multiple_of(16)
            || !ld.is_multiple_of(16)
            || ld < cols
            || rows == 0
            || cols == 0
            || box_cols == 0
            || box_cols > 128
            || box_rows == 0
            || box_rows > 256
            || rows as u64 >= 1 << 32
            || ld as u64 >= 1 << 40
        {
            return Err(CudaError::InvalidArgument(format!(
                "tensor map out of TMA limits: ptr {ptr:#x}, [{rows}, {cols}] ld {ld}, box \
                 {box_rows}x{box_cols}"
            )));
        }
        let dims: [u64; 2] = [cols as u64, rows as u64];
        let strides: [u64; 1] = [ld as u64];
        let boxes: [u32; 2] = [box_cols, box_rows];
        let elem: [u32; 2] = [1, 1];
        // SAFETY: all-zero bytes are a valid (opaque) CUtensorMap to be overwritten.
        let mut map: CUtensorMap = unsafe { std::mem::zeroed() };
        // SAFETY: pointers to live local arrays of the sizes the rank (2) implies; the
        // driver only reads them and writes `map`. `ptr` is not dereferenced here.
        unsafe {
            cudarc::driver::sys::cuTensorMapEncodeTiled(
                &mut map,
                CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_UINT8,
                2,
                ptr as *mut std::ffi::c_void,
                dims.as_ptr(),
                strides.as_ptr(),
                boxes.as_ptr(),
                elem.as_ptr(),
                CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
                CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B,
                CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
            )
        }
        .result()
        .map_err(|e: DriverError| {
            CudaError::driver(
                format!(
                    "cuTensorMapEncodeTiled([{rows}, {cols}] ld {ld}, box {box_rows}x{box_cols})"
                ),
                e,
            )
        })?;
        Ok(TensorMap(map))
    }
}
