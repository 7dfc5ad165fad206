//! Typed device buffers that hand out core's opaque [`DeviceMemory`] views.

use std::sync::Arc;

use cudarc::driver::{CudaSlice, DevicePtr, DeviceRepr, ValidAsZeroBits};
use fp8_linear_core::{DType, DeviceMemory, Tensor, TensorMut};
use half::{bf16, f16};

use crate::context::Gpu;
use crate::error::CudaError;

/// An element type that lives in device buffers, with its core dtype.
pub trait Element: DeviceRepr + ValidAsZeroBits + Copy + Default + Unpin {
    /// The dtype of tensors over buffers of this element.
    const DTYPE: DType;
}

impl Element for f32 {
    const DTYPE: DType = DType::F32;
}
impl Element for f16 {
    const DTYPE: DType = DType::F16;
}
impl Element for bf16 {
    const DTYPE: DType = DType::Bf16;
}
/// FP8 e4m3 codes are stored as raw bytes.
impl Element for u8 {
    const DTYPE: DType = DType::F8E4m3;
}

/// A device allocation of `len` elements of `T` on one GPU, freed on drop.
///
/// Its address is read once, when it is made: [`DeviceBuffer::ptr`] and the tensor views
/// touch no cudarc event (in a context with cudarc's event tracking on and several streams,
/// reading a slice's address waits on and records events, which a stream being captured into
/// a CUDA graph must not do). Work on the buffer is ordered by the stream of its GPU handle,
/// like every kernel launch of this crate.
pub struct DeviceBuffer<T: Element> {
    slice: CudaSlice<T>,
    ptr: u64,
    gpu: Arc<Gpu>,
}

/// The address of a new slice (its creation's events, if any, recorded on `gpu`'s stream).
fn address<T>(slice: &CudaSlice<T>, gpu: &Gpu) -> u64 {
    slice.device_ptr(gpu.stream()).0
}

impl<T: Element> std::fmt::Debug for DeviceBuffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceBuffer")
            .field("len", &self.slice.len())
            .field("dtype", &T::DTYPE)
            .field("ordinal", &self.gpu.ordinal())
            .finish()
    }
}

impl<T: Element> DeviceBuffer<T> {
    /// A zero-filled buffer of `len` elements (at least one element is allocated).
    pub fn zeros(gpu: &Arc<Gpu>, len: usize) -> Result<Self, CudaError> {
        let slice = gpu
            .stream()
            .alloc_zeros::<T>(len.max(1))
            .map_err(|e| CudaError::driver(format!("allocating {len} x {}", T::DTYPE), e))?;
        Ok(DeviceBuffer {
            ptr: address(&slice, gpu),
            slice,
            gpu: gpu.clone(),
        })
    }

    /// A buffer holding a copy of `data`.
    pub fn from_host(gpu: &Arc<Gpu>, data: &[T]) -> Result<Self, CudaError> {
        if data.is_empty() {
            return Self::zeros(gpu, 0);
        }
        let slice = gpu.stream().clone_htod(data).map_err(|e| {
            CudaError::driver(format!("uploading {} x {}", data.len(), T::DTYPE), e)
        })?;
        Ok(DeviceBuffer {
            ptr: address(&slice, gpu),
            slice,
            gpu: gpu.clone(),
        })
    }

    /// Copies the buffer back to the host (synchronizes the stream).
    pub fn to_host(&self) -> Result<Vec<T>, CudaError> {
        self.gpu
            .stream()
            .clone_dtoh(&self.slice)
            .map_err(|e| CudaError::driver("downloading a buffer", e))
    }

    /// Overwrites the start of the buffer with `data`.
    pub fn upload(&mut self, data: &[T]) -> Result<(), CudaError> {
        self.upload_at(0, data)
    }

    /// Overwrites elements `offset..offset + data.len()` of the buffer with `data` (say one
    /// expert's part of a stack, uploaded as it is made).
    pub fn upload_at(&mut self, offset: usize, data: &[T]) -> Result<(), CudaError> {
        let end = offset.checked_add(data.len());
        if end.is_none_or(|end| end > self.slice.len()) {
            return Err(CudaError::InvalidArgument(format!(
                "upload of {} elements at {offset} into a buffer of {}",
                data.len(),
                self.slice.len()
            )));
        }
        let mut view = self.slice.slice_mut(offset..offset + data.len());
        self.gpu
            .stream()
            .memcpy_htod(data, &mut view)
            .map_err(|e| CudaError::driver("uploading into a buffer", e))
    }

    /// Fills the buffer with a byte pattern (e.g. 0xff to poison outputs in tests).
    pub fn fill_bytes(&mut self, byte: u8) -> Result<(), CudaError> {
        let n = self.slice.num_bytes();
        // SAFETY: ptr covers n bytes of this live allocation; ordered on the buffer's stream.
        unsafe { self.gpu.memset_async(self.ptr, byte, n) }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.slice.len()
    }

    /// Whether the buffer is empty (never: at least one element is allocated).
    pub fn is_empty(&self) -> bool {
        self.slice.len() == 0
    }

    /// The raw device address (read when the buffer was made; no event is touched).
    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    /// The GPU the buffer lives on.
    pub fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }

    /// The opaque handle core's tensors hold.
    pub fn memory(&self) -> DeviceMemory {
        DeviceMemory {
            ptr: self.ptr(),
            bytes: self.slice.num_bytes(),
            ordinal: self.gpu.ordinal(),
        }
    }

    /// A contiguous read-only tensor view `[rows, cols]` over the buffer.
    pub fn tensor(&self, shape: [usize; 2]) -> Tensor<'_> {
        Tensor::device(self.memory(), T::DTYPE, shape)
    }

    /// A contiguous writable tensor view `[rows, cols]` over the buffer.
    pub fn tensor_mut(&mut self, shape: [usize; 2]) -> TensorMut<'_> {
        TensorMut::device(self.memory(), T::DTYPE, shape)
    }

    /// The underlying cudarc slice.
    pub fn slice(&self) -> &CudaSlice<T> {
        &self.slice
    }
}
