//! A comma after the family announces the layer kind.
use fp8_linear::fp8_table;

fp8_table! {
    pub MY_TABLE: Cpu, BlockScaled, = [];
}

fn main() {}
