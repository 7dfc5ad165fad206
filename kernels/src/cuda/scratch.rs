//! [`Scratch`]: a growable device buffer for a layer's per-call temporaries.

use std::sync::Arc;

use fp8_linear_cuda::buffer::Element;
use fp8_linear_cuda::{CudaError, DeviceBuffer, Gpu};

/// A growable device scratch buffer, reallocated only when too small.
pub struct Scratch<T: Element> {
    buf: Option<DeviceBuffer<T>>,
}

impl<T: Element> Default for Scratch<T> {
    fn default() -> Self {
        Scratch { buf: None }
    }
}

impl<T: Element> Scratch<T> {
    /// A buffer of at least `len` elements (its address is stable until it must grow).
    pub fn get(&mut self, gpu: &Arc<Gpu>, len: usize) -> Result<&mut DeviceBuffer<T>, CudaError> {
        let grow = match &self.buf {
            Some(b) => b.len() < len,
            None => true,
        };
        if grow {
            self.buf = None; // free first
            self.buf = Some(DeviceBuffer::zeros(gpu, len.next_power_of_two())?);
        }
        Ok(self.buf.as_mut().expect("allocated above"))
    }
}
