//! A table entry names one concrete kernel: generic kernel types are rejected.
use fp8_linear::fp8_kernel;

#[fp8_kernel(platform = Cpu, priority = 1)]
pub struct K<T>(T);

fn main() {}
