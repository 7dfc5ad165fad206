//! Extending a CPU table into a CUDA one: an error at the base table's path.
use fp8_linear::fp8_table;

fp8_table! {
    pub MY_TABLE: Cuda, BlockScaled = fp8_linear::tables::CPU_BLOCK + [];
}

fn main() {}
