//! Reading the benches' CSV (`FP8_BENCH_CSV`): `source,gpu,bench,kernel,n,k,m,us`, lines
//! starting with `#` and the header skipped.

use std::fmt;

/// One measured point: a kernel on an `n x k` layer at `m` rows.
#[derive(Clone, Debug, PartialEq)]
pub struct Point {
    /// Where the figure comes from: a run id, or the lab-notes section it was copied from.
    pub source: String,
    /// The GPU's name.
    pub gpu: String,
    /// The bench that measured it (`hopper`, `decode`, `gpu`, `marlin`, `quant`, `peer`).
    pub bench: String,
    /// The kernel's label in that bench (`LtBlk`, `Hopper`, `Decode`, `ReadOnce`, ...).
    pub kernel: String,
    /// Output features of the layer.
    pub n: usize,
    /// Input features of the layer.
    pub k: usize,
    /// Rows of the activations (0 for a point without rows, such as the read-once floor).
    pub m: usize,
    /// Median microseconds of one call.
    pub us: f64,
}

impl Point {
    /// TFLOP/s of the point: `2 m n k` over its time.
    pub fn tflops(&self) -> f64 {
        2.0 * (self.m * self.n * self.k) as f64 / self.us / 1e6
    }
}

/// A line of the CSV that is not a point.
#[derive(Debug, PartialEq)]
pub struct ParseError {
    /// 1-based line number.
    pub line: usize,
    /// What is wrong with it.
    pub reason: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.reason)
    }
}

impl std::error::Error for ParseError {}

/// The header row the benches write.
pub const HEADER: &str = "source,gpu,bench,kernel,n,k,m,us";

/// The points of `text`, in file order.
pub fn parse(text: &str) -> Result<Vec<Point>, ParseError> {
    let mut points = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') || line == HEADER {
            continue;
        }
        let err = |reason: String| ParseError {
            line: i + 1,
            reason,
        };
        let f: Vec<&str> = line.split(',').collect();
        if f.len() != 8 {
            return Err(err(format!("{} fields, expected 8 ({HEADER})", f.len())));
        }
        let int = |s: &str, what: &str| {
            s.trim()
                .parse::<usize>()
                .map_err(|e| err(format!("{what} {s:?}: {e}")))
        };
        let us: f64 = f[7]
            .trim()
            .parse()
            .map_err(|e| err(format!("us {:?}: {e}", f[7])))?;
        if !(us > 0.0 && us.is_finite()) {
            return Err(err(format!("us must be positive, found {us}")));
        }
        points.push(Point {
            source: f[0].trim().to_string(),
            gpu: f[1].trim().to_string(),
            bench: f[2].trim().to_string(),
            kernel: f[3].trim().to_string(),
            n: int(f[4], "n")?,
            k: int(f[5], "k")?,
            m: int(f[6], "m")?,
            us,
        });
    }
    Ok(points)
}
