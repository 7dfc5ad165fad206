//! Machine-readable bench output: with `FP8_BENCH_CSV=path` set, the GPU benches that feed
//! BENCHMARKS.md (gpu, hopper, decode, marlin, quant) append one row per measured point to
//! that file, the header first when the file is new or empty. The columns are those of
//! `docs/charts/h200-sample.csv`, which the chart generator (`cargo run -p
//! fp8-linear-charts`) reads: `source,gpu,bench,kernel,n,k,m,us` (`m = 0` for a point that
//! has no rows, like the read-once floor; `us` the median microseconds of one call).
//! Without the variable nothing is written; a file that cannot be opened is reported once
//! and the bench goes on.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::time::{SystemTime, UNIX_EPOCH};

/// The header row of the CSV.
pub const HEADER: &str = "source,gpu,bench,kernel,n,k,m,us";

/// Where a bench appends its CSV rows, or nothing when `FP8_BENCH_CSV` is not set.
pub struct CsvSink {
    file: Option<File>,
    source: String,
    gpu: String,
    bench: &'static str,
}

/// `s` with the characters that would break a CSV field (commas, quotes, newlines) replaced.
fn field(s: &str) -> String {
    s.replace([',', '"', '\n', '\r'], ";")
}

impl CsvSink {
    /// Opens `$FP8_BENCH_CSV` for appending (none when unset) for `bench` on the GPU named
    /// `gpu`; the rows' source is `run-<unix seconds>` of this call.
    pub fn from_env(bench: &'static str, gpu: &str) -> Self {
        let secs = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let file = std::env::var_os("FP8_BENCH_CSV").and_then(|path| {
            let opened = OpenOptions::new().create(true).append(true).open(&path);
            match opened {
                Ok(mut f) => {
                    let empty = f.metadata().map(|m| m.len() == 0).unwrap_or(true);
                    if empty {
                        writeln!(f, "{HEADER}").ok()?;
                    }
                    Some(f)
                }
                Err(e) => {
                    println!("FP8_BENCH_CSV={}: not written: {e}", path.to_string_lossy());
                    None
                }
            }
        });
        CsvSink {
            file,
            source: format!("run-{secs}"),
            gpu: field(gpu),
            bench,
        }
    }

    /// Appends the row of `kernel` on an `n x k` layer at `m` rows: `us` microseconds per
    /// call (nothing for a NaN, a point that was not measured).
    pub fn row(&mut self, kernel: &str, (n, k, m): (usize, usize, usize), us: f64) {
        let Some(f) = self.file.as_mut() else {
            return;
        };
        if us.is_nan() {
            return;
        }
        let line = format!(
            "{},{},{},{},{n},{k},{m},{us:.3}",
            self.source,
            self.gpu,
            self.bench,
            field(kernel)
        );
        if let Err(e) = writeln!(f, "{line}") {
            println!("FP8_BENCH_CSV: row not written: {e}");
            self.file = None;
        }
    }
}
