//! `#[fp8_kernel]` registers a type: on a function it is an error.
use fp8_linear::fp8_kernel;

#[fp8_kernel(platform = Cpu, priority = 1)]
pub fn k() {}

fn main() {}
