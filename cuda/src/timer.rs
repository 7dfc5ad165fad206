//! CUDA-event timing of work on a stream.

use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaEvent, CudaStream};

use crate::context::Gpu;
use crate::error::CudaError;

/// A pair of timing events: record `start`, enqueue work, record `stop`, read the elapsed
/// device time.
pub struct EventTimer {
    start: CudaEvent,
    end: CudaEvent,
}

impl EventTimer {
    /// Creates the two events on the GPU's context.
    pub fn new(gpu: &Gpu) -> Result<Self, CudaError> {
        let mk = || {
            gpu.context()
                .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
                .map_err(|e| CudaError::driver("creating a timing event", e))
        };
        Ok(EventTimer {
            start: mk()?,
            end: mk()?,
        })
    }

    /// Records the start event on `stream`.
    pub fn start(&self, stream: &CudaStream) -> Result<(), CudaError> {
        self.start
            .record(stream)
            .map_err(|e| CudaError::driver("recording the start event", e))
    }

    /// Records the end event on `stream`, waits for it, and returns the milliseconds since
    /// the start event.
    pub fn stop(&self, stream: &CudaStream) -> Result<f32, CudaError> {
        self.end
            .record(stream)
            .map_err(|e| CudaError::driver("recording the end event", e))?;
        self.end
            .synchronize()
            .map_err(|e| CudaError::driver("waiting for the end event", e))?;
        self.start
            .elapsed_ms(&self.end)
            .map_err(|e| CudaError::driver("reading event time", e))
    }
}
