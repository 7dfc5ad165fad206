//! Extending a table with a kernel it already holds: caught by the const check.
use fp8_linear::fp8_table;

fp8_table! {
    pub MY_TABLE: Cpu, BlockScaled = fp8_linear::tables::CPU_BLOCK + [fp8_linear::cpu::CpuReference => 7];
}

fn main() {}
