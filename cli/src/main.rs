//! `fp8-linear`: explain kernel selection, run layers, plan and run checkpoints.

fn main() {}
