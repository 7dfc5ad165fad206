//! Draws the charts of BENCHMARKS.md (SVG, no dependencies) from the CSV rows the GPU benches
//! append with `FP8_BENCH_CSV=path` (`docs/charts/h200-sample.csv` is the checked-in sample):
//! `cargo run -p fp8-linear-charts -- docs/charts/h200-sample.csv docs/charts`.
//!
//! [`csv`] reads the rows, [`chart`] lays out one chart per shape class and kind, [`svg`]
//! writes the elements; [`write_all`] writes every chart that has points.

#![warn(missing_docs)]

pub mod chart;
pub mod csv;
pub mod svg;

use std::path::{Path, PathBuf};

/// Parses the CSV at `input` and writes `<stem>-tflops.svg` and `<stem>-decode.svg` of every
/// shape class with points into `out_dir` (created if missing); returns the files written.
pub fn write_all(input: &Path, out_dir: &Path) -> Result<Vec<PathBuf>, String> {
    let text = std::fs::read_to_string(input).map_err(|e| format!("{}: {e}", input.display()))?;
    let points = csv::parse(&text).map_err(|e| format!("{}: {e}", input.display()))?;
    std::fs::create_dir_all(out_dir).map_err(|e| format!("{}: {e}", out_dir.display()))?;
    let mut written = Vec::new();
    for class in &chart::CLASSES {
        for kind in [chart::Kind::Tflops, chart::Kind::Decode] {
            let Some(svg) = chart::chart(&points, class, kind) else {
                continue;
            };
            let path = out_dir.join(format!("{}-{}.svg", class.stem, kind.suffix()));
            std::fs::write(&path, svg).map_err(|e| format!("{}: {e}", path.display()))?;
            written.push(path);
        }
    }
    if written.is_empty() {
        return Err(format!("{}: no point of any shape class", input.display()));
    }
    Ok(written)
}
