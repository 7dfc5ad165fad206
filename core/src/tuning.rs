//! Measured, shape-aware selection: a small file of autotune winners per (device, layer
//! family, N, K, M bucket) that [`Table::plan_tuned`](crate::Table::plan_tuned) (and
//! `select_tuned`) consult before the static priority order.
//!
//! The file is plain text, one winner per line, seven tab-separated fields: device key
//! (`NVIDIA H200 sm_90`), family (`block-scaled`), N, K, M bucket (a power of two), kernel
//! name, seconds per call. Lines starting with `#` are comments.

use std::cmp::Ordering;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::config::{Family, LayerConfig};
use crate::device::Device;

/// Environment variable naming the autotune file (default: the user's cache dir).
pub const ENV_TUNING: &str = "FP8_LINEAR_TUNING";

const HEADER: &str = "# fp8-linear autotune v1";

/// The M bucket a row count falls in: the next power of two (1, 2, 4, ... ).
pub fn m_bucket(m: usize) -> usize {
    m.max(1).next_power_of_two()
}

/// The identity of a device in the file: its name and capability (`NVIDIA H200 sm_90`), or
/// the name alone for devices without one.
pub fn device_key(device: &Device) -> String {
    match device.capability {
        Some(c) => format!("{} sm_{}{}", device.name, c.major, c.minor),
        None => format!("{} {}", device.name, device.platform),
    }
}

/// One measured winner.
#[derive(Clone, Debug, PartialEq)]
pub struct Winner {
    /// [`device_key`] of the device it was measured on.
    pub device: String,
    /// Layer family.
    pub family: Family,
    /// Output features.
    pub n: usize,
    /// Input features.
    pub k: usize,
    /// [`m_bucket`] of the measured M.
    pub m_bucket: usize,
    /// The fastest kernel's name.
    pub kernel: String,
    /// Its time per call, seconds.
    pub seconds: f64,
}

impl Winner {
    fn cmp_key(&self, device: &str, family: Family, n: usize, k: usize, mb: usize) -> Ordering {
        self.device
            .as_str()
            .cmp(device)
            .then((self.family as u8).cmp(&(family as u8)))
            .then(self.n.cmp(&n))
            .then(self.k.cmp(&k))
            .then(self.m_bucket.cmp(&mb))
    }
}

/// Why an autotune file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum TuningError {
    /// The file could not be read or written.
    #[error("autotune file {path}: {error}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        error: std::io::Error,
    },
    /// A line is malformed.
    #[error("autotune file line {line}: {detail}")]
    Parse {
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        detail: String,
    },
}

/// A set of measured winners, sorted for allocation-free lookup.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TuningFile {
    winners: Vec<Winner>,
}

impl TuningFile {
    /// No measurements.
    pub fn new() -> Self {
        TuningFile::default()
    }

    /// The default file: `$FP8_LINEAR_TUNING`, else `$XDG_CACHE_HOME/fp8-linear/autotune.tsv`,
    /// else `~/.cache/fp8-linear/autotune.tsv`.
    pub fn default_path() -> Option<PathBuf> {
        if let Some(p) = std::env::var_os(ENV_TUNING) {
            return Some(PathBuf::from(p));
        }
        let base = std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
        Some(base.join("fp8-linear").join("autotune.tsv"))
    }

    /// Reads a file; a missing file is an empty tuning.
    pub fn load(path: &Path) -> Result<Self, TuningError> {
        match std::fs::read_to_string(path) {
            Ok(text) => TuningFile::parse(&text),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(TuningFile::new()),
            Err(error) => Err(TuningError::Io {
                path: path.to_path_buf(),
                error,
            }),
        }
    }

    /// Parses the text format.
    pub fn parse(text: &str) -> Result<Self, TuningError> {
        let mut t = TuningFile::new();
        for (i, line) in text.lines().enumerate() {
            let line_no = i + 1;
            if line.trim().is_empty() || line.starts_with('#') {
                continue;
            }
            let err = |detail: String| TuningError::Parse {
                line: line_no,
                detail,
            };
            let f: Vec<&str> = line.split('\t').collect();
            if f.len() != 7 {
                return Err(err(format!(
                    "expected 7 tab-separated fields, found {}",
                    f.len()
                )));
            }
            let family = Family::ALL
                .into_iter()
                .find(|fam| fam.name() == f[1])
                .ok_or_else(|| err(format!("unknown family `{}`", f[1])))?;
            let num = |s: &str, what: &str| {
                s.parse::<usize>()
                    .map_err(|_| err(format!("{what} `{s}` is not a number")))
            };
            let seconds: f64 = f[6]
                .parse()
                .map_err(|_| err(format!("seconds `{}` is not a number", f[6])))?;
            t.insert(Winner {
                device: f[0].to_string(),
                family,
                n: num(f[2], "n")?,
                k: num(f[3], "k")?,
                m_bucket: m_bucket(num(f[4], "m_bucket")?),
                kernel: f[5].to_string(),
                seconds,
            });
        }
        Ok(t)
    }

    /// The text format.
    pub fn to_text(&self) -> String {
        let mut s = format!("{HEADER}\n# device\tfamily\tn\tk\tm_bucket\tkernel\tseconds\n");
        for w in &self.winners {
            let _ = writeln!(
                s,
                "{}\t{}\t{}\t{}\t{}\t{}\t{:e}",
                w.device,
                w.family.name(),
                w.n,
                w.k,
                w.m_bucket,
                w.kernel,
                w.seconds
            );
        }
        s
    }

    /// Writes the file (creating its folder), atomically.
    pub fn save(&self, path: &Path) -> Result<(), TuningError> {
        let io = |error| TuningError::Io {
            path: path.to_path_buf(),
            error,
        };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        std::fs::write(&tmp, self.to_text()).map_err(io)?;
        std::fs::rename(&tmp, path).map_err(io)
    }

    /// Adds or replaces a winner.
    pub fn insert(&mut self, w: Winner) {
        let pos = self
            .winners
            .binary_search_by(|x| x.cmp_key(&w.device, w.family, w.n, w.k, w.m_bucket));
        match pos {
            Ok(i) => self.winners[i] = w,
            Err(i) => self.winners.insert(i, w),
        }
    }

    /// Records a measurement for a layer on a device at `m` rows.
    pub fn record(
        &mut self,
        device: &Device,
        config: &LayerConfig,
        m: usize,
        kernel: &str,
        seconds: f64,
    ) {
        self.insert(Winner {
            device: device_key(device),
            family: config.family(),
            n: config.n,
            k: config.k,
            m_bucket: m_bucket(m),
            kernel: kernel.to_string(),
            seconds,
        });
    }

    /// The measured winner for a layer at `m` rows on a device whose [`device_key`] is
    /// `device_key`. Allocation-free.
    pub fn winner(&self, device_key: &str, config: &LayerConfig, m: usize) -> Option<&Winner> {
        let mb = m_bucket(m);
        self.winners
            .binary_search_by(|x| x.cmp_key(device_key, config.family(), config.n, config.k, mb))
            .ok()
            .map(|i| &self.winners[i])
    }

    /// All winners, sorted.
    pub fn winners(&self) -> &[Winner] {
        &self.winners
    }

    /// Whether there are no measurements.
    pub fn is_empty(&self) -> bool {
        self.winners.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DType;

    #[test]
    fn roundtrip_and_lookup() {
        let dev = Device::cuda_profile("NVIDIA H200", crate::Capability::new(9, 0), 132);
        let cfg = LayerConfig::block_128(4096, 7168, DType::Bf16, DType::Bf16);
        let mut t = TuningFile::new();
        t.record(&dev, &cfg, 16, "PortableBlockFp8", 2.5e-5);
        t.record(&dev, &cfg, 4096, "CublasLtBlockFp8", 1.1e-3);
        t.record(&dev, &cfg, 13, "Other", 3e-5); // same bucket as 16: replaces
        let back = TuningFile::parse(&t.to_text()).unwrap();
        assert_eq!(back, t);
        let key = device_key(&dev);
        assert_eq!(back.winner(&key, &cfg, 9).unwrap().kernel, "Other");
        assert_eq!(
            back.winner(&key, &cfg, 3000).unwrap().kernel,
            "CublasLtBlockFp8"
        );
        assert!(back.winner(&key, &cfg, 64).is_none());
        assert!(back.winner("other device", &cfg, 16).is_none());
    }

    #[test]
    fn malformed_lines_name_the_line() {
        let e = TuningFile::parse("# c\nx\tblock-scaled\t1\t2\n").unwrap_err();
        assert!(e.to_string().contains("line 2"), "{e}");
        let e = TuningFile::parse("d\tblocky\t1\t2\t4\tK\t1e-3\n").unwrap_err();
        assert!(e.to_string().contains("unknown family"), "{e}");
        let e = TuningFile::parse("d\tscaled\t1\tx\t4\tK\t1e-3\n").unwrap_err();
        assert!(e.to_string().contains("k `x`"), "{e}");
    }
}
