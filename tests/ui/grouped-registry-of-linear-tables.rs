//! `Registry::grouped` takes grouped tables only: a linear one fails to compile.
use fp8_linear::Registry;

static MINE: Registry = Registry::grouped(&[&fp8_linear::tables::CPU_BLOCK]);

fn main() {
    let _ = MINE.kind();
}
