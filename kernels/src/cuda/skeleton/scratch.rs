//! [`Scratch`]: a growable device buffer for a layer's per-call temporaries.

use std::sync::Arc;

use fp8_linear_cuda::buffer::Element;
use fp8_linear_cuda::{CudaError, DeviceBuffer, Gpu};

/// A growable device scratch buffer, reallocated only when too small.
///
/// Growing allocates, which a stream being captured into a CUDA graph must not do: then
/// [`Scratch::get`] refuses with [`CudaError::Capturing`] instead. Once the layer has been
/// prepared ([`Scratch::keep_retired`]), a buffer that grows keeps its predecessors alive
/// until the layer is dropped, so graphs captured before still address live memory.
pub struct Scratch<T: Element> {
    buf: Option<DeviceBuffer<T>>,
    retired: Vec<DeviceBuffer<T>>,
    keep: bool,
}

impl<T: Element> Default for Scratch<T> {
    fn default() -> Self {
        Scratch {
            buf: None,
            retired: Vec::new(),
            keep: false,
        }
    }
}

impl<T: Element> Scratch<T> {
    /// A buffer of at least `len` elements (its address is stable until it must grow).
    /// Growing while `gpu`'s stream is being captured is [`CudaError::Capturing`]; the fast
    /// path (large enough already) makes no driver call.
    pub fn get(&mut self, gpu: &Arc<Gpu>, len: usize) -> Result<&mut DeviceBuffer<T>, CudaError> {
        let held = self.buf.as_ref().map_or(0, |b| b.len());
        if held < len {
            gpu.refuse_in_capture(|| {
                format!(
                    "allocate {len} x {} of scratch (the layer holds {held})",
                    T::DTYPE
                )
            })?;
            let old = self.buf.take();
            if self.keep {
                self.retired.extend(old);
            } else {
                drop(old); // free first
            }
            self.buf = Some(DeviceBuffer::zeros(gpu, len.next_power_of_two())?);
        }
        Ok(self.buf.as_mut().expect("allocated above"))
    }

    /// From now on a buffer that grows is kept alive (until the scratch is dropped) instead
    /// of being freed: graphs captured with its address stay valid. Set by `prepare`.
    pub fn keep_retired(&mut self) {
        self.keep = true;
    }
}
