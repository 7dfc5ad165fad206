//! One safetensors file, memory-mapped (or held in memory for tests and fuzzing), with its
//! header parsed by the `safetensors` crate and its errors mapped to ours.

use std::fs::File;
use std::ops::Range;
use std::path::{Path, PathBuf};

use memmap2::Mmap;
use safetensors::{Dtype, SafeTensorError, SafeTensors};

use crate::error::CheckpointError;

/// Where a shard's bytes live.
enum Bytes {
    /// A read-only memory map of the file: pages are read on first touch, never copied.
    Mapped(Mmap),
    /// Bytes held in memory (small checkpoints built in tests).
    Owned(Vec<u8>),
}

/// One tensor as a shard's header describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    /// Element type.
    pub dtype: Dtype,
    /// Shape (any rank; 0-d scalars have `[]`).
    pub shape: Vec<usize>,
    /// Byte range in the file (absolute, header included).
    pub range: Range<usize>,
}

impl TensorInfo {
    /// Number of elements.
    pub fn elements(&self) -> usize {
        self.shape.iter().product()
    }
}

/// A parsed safetensors file.
pub struct Shard {
    path: PathBuf,
    bytes: Bytes,
    tensors: Vec<(String, TensorInfo)>,
}

impl std::fmt::Debug for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shard")
            .field("path", &self.path)
            .field("tensors", &self.tensors.len())
            .finish()
    }
}

impl Shard {
    /// Maps a file and parses its header. The file must not be modified while mapped.
    pub fn open(path: &Path) -> Result<Self, CheckpointError> {
        let file = File::open(path).map_err(|e| CheckpointError::io("open", path, e))?;
        // SAFETY: the map is read-only and private to this process; like every reader of
        // memory-mapped model files we rely on nobody truncating or rewriting the file while
        // it is open (a rewritten file could change the bytes under us, never our memory
        // safety beyond the values read; a truncated one raises SIGBUS).
        let map = unsafe { Mmap::map(&file) }.map_err(|e| CheckpointError::io("map", path, e))?;
        Self::parse(path.to_path_buf(), Bytes::Mapped(map))
    }

    /// Parses a file's bytes held in memory; `path` names it in errors.
    pub fn from_bytes(path: impl Into<PathBuf>, bytes: Vec<u8>) -> Result<Self, CheckpointError> {
        Self::parse(path.into(), Bytes::Owned(bytes))
    }

    fn parse(path: PathBuf, bytes: Bytes) -> Result<Self, CheckpointError> {
        let buf: &[u8] = match &bytes {
            Bytes::Mapped(m) => m,
            Bytes::Owned(v) => v,
        };
        let (n, meta) = SafeTensors::read_metadata(buf).map_err(|e| map_error(&path, buf, e))?;
        let base = 8 + n;
        let mut tensors: Vec<(String, TensorInfo)> = meta
            .tensors()
            .into_iter()
            .map(|(name, info)| {
                let (s, e) = info.data_offsets;
                (
                    name,
                    TensorInfo {
                        dtype: info.dtype,
                        shape: info.shape.clone(),
                        range: base + s..base + e,
                    },
                )
            })
            .collect();
        tensors.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(Shard {
            path,
            bytes,
            tensors,
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Every tensor, sorted by name.
    pub fn tensors(&self) -> &[(String, TensorInfo)] {
        &self.tensors
    }

    /// The bytes of a tensor of this shard (a view into the map, no copy).
    pub fn data(&self, info: &TensorInfo) -> &[u8] {
        let buf: &[u8] = match &self.bytes {
            Bytes::Mapped(m) => m,
            Bytes::Owned(v) => v,
        };
        // The range was validated against the file length when the header was parsed.
        &buf[info.range.clone()]
    }
}

/// Turns a safetensors error into ours: a file shorter than its header claims is
/// `Truncated` (naming the first tensor cut off), anything else a `Header` error.
fn map_error(path: &Path, buf: &[u8], e: SafeTensorError) -> CheckpointError {
    let file = path.to_path_buf();
    match e {
        SafeTensorError::HeaderTooSmall => CheckpointError::Truncated {
            file,
            detail: format!(
                "{} bytes, shorter than the 8-byte header length prefix",
                buf.len()
            ),
        },
        SafeTensorError::InvalidHeaderLength => {
            let claimed = buf
                .get(..8)
                .and_then(|b| <[u8; 8]>::try_from(b).ok())
                .map(u64::from_le_bytes)
                .unwrap_or(0);
            CheckpointError::Truncated {
                file,
                detail: format!(
                    "the header length prefix says {claimed} bytes of JSON, but the file has only {} bytes after the prefix",
                    buf.len().saturating_sub(8)
                ),
            }
        }
        SafeTensorError::MetadataIncompleteBuffer => incomplete(file, buf),
        other => CheckpointError::Header {
            file,
            detail: other.to_string(),
        },
    }
}

/// The header parsed but its offsets do not end at the end of the file: find out whether
/// data is missing (and which tensor is cut off) or the file has trailing bytes.
fn incomplete(file: PathBuf, buf: &[u8]) -> CheckpointError {
    let n = buf
        .get(..8)
        .and_then(|b| <[u8; 8]>::try_from(b).ok())
        .map(u64::from_le_bytes)
        .unwrap_or(0) as usize;
    let data_len = buf.len().saturating_sub(8 + n);
    let header = buf.get(8..8 + n).unwrap_or_default();
    let mut ends: Vec<(usize, String)> = match serde_json::from_slice::<serde_json::Value>(header) {
        Ok(serde_json::Value::Object(m)) => m
            .iter()
            .filter(|(k, _)| k.as_str() != "__metadata__")
            .filter_map(|(k, v)| {
                let end = v.get("data_offsets")?.get(1)?.as_u64()? as usize;
                Some((end, k.clone()))
            })
            .collect(),
        _ => Vec::new(),
    };
    ends.sort();
    let needed = ends.last().map_or(0, |e| e.0);
    if needed > data_len {
        let cut = ends
            .iter()
            .find(|(end, _)| *end > data_len)
            .map(|(end, name)| {
                format!("tensor `{name}` ends at data byte {end}, but the file holds only {data_len} bytes of tensor data")
            })
            .unwrap_or_default();
        CheckpointError::Truncated {
            file,
            detail: format!(
                "the header describes {needed} bytes of tensor data, the file holds {data_len}; {cut}"
            ),
        }
    } else {
        CheckpointError::Header {
            file,
            detail: format!(
                "the tensors cover {needed} bytes of data, but the file holds {data_len} (trailing bytes)"
            ),
        }
    }
}
