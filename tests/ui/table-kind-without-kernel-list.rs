//! A table's kind must be followed by `=` and the kernel list.
use fp8_linear::fp8_table;

fp8_table! {
    pub MY_TABLE: Cpu, BlockScaled, Grouped [];
}

fn main() {}
