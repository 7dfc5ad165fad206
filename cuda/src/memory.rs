//! Fills and copies on raw device addresses (kernel scratch, tensors handed in by the
//! caller), ordered on the GPU handle's stream unless said otherwise.

use cudarc::driver::DeviceRepr;

use crate::context::Gpu;
use crate::error::CudaError;

impl Gpu {
    /// Sets `bytes` bytes at `ptr` to `byte`, enqueued on this handle's stream.
    ///
    /// # Safety
    /// `ptr` must address `bytes` bytes of live device memory of this GPU, not in use by
    /// other work that is not ordered with this stream.
    pub unsafe fn memset_async(&self, ptr: u64, byte: u8, bytes: usize) -> Result<(), CudaError> {
        // SAFETY: the caller vouches for the range; the stream belongs to this context.
        unsafe {
            cudarc::driver::result::memset_d8_async(ptr, byte, bytes, self.stream().cu_stream())
        }
        .map_err(|e| CudaError::driver(format!("clearing {bytes} B of device memory"), e))
    }

    /// Copies `bytes` bytes from `src` to `dst` (device to device), enqueued on this handle's
    /// stream.
    ///
    /// # Safety
    /// Both must address `bytes` bytes of live device memory of this GPU, ready on this
    /// stream; the ranges must not overlap.
    pub unsafe fn copy_async(&self, dst: u64, src: u64, bytes: usize) -> Result<(), CudaError> {
        // SAFETY: the caller vouches for both ranges; the stream belongs to this context.
        unsafe {
            cudarc::driver::result::memcpy_dtod_async(dst, src, bytes, self.stream().cu_stream())
        }
        .map_err(|e| CudaError::driver(format!("copying {bytes} B device to device"), e))
    }

    /// Copies `dst.len()` elements from device address `src` into `dst`, synchronously (the
    /// copy is not ordered after this handle's stream: synchronize first when a producer may
    /// still be writing).
    ///
    /// # Safety
    /// `src` must address at least `dst.len()` elements of `T` of live device memory of this
    /// GPU.
    pub unsafe fn copy_to_host<T: DeviceRepr>(
        &self,
        src: u64,
        dst: &mut [T],
    ) -> Result<(), CudaError> {
        self.context()
            .bind_to_thread()
            .map_err(|e| CudaError::driver("binding the context", e))?;
        let bytes = std::mem::size_of_val(dst);
        // SAFETY: the caller vouches for the source; dst is a live host slice of that size.
        unsafe { cudarc::driver::result::memcpy_dtoh_sync(dst, src) }
            .map_err(|e| CudaError::driver(format!("copying {bytes} B device to host"), e))
    }
}
