//! Helpers shared by the integration tests: random FP8 layers, the f64 oracle, GPU skip
//! logic.

pub mod layers;
pub mod gpu;
