//! CUDA driver layer (filled by the CUDA backend work).
