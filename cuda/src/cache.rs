//! The on-disk cache of compiled modules: one cubin (or PTX) per (source hash, arch, options, NVRTC
//! version), in `$FP8_LINEAR_CACHE_DIR`, `$XDG_CACHE_HOME/fp8-linear` or
//! `~/.cache/fp8-linear`. Writers write a temporary file and rename it into place, so
//! concurrent first use from several threads or processes never exposes a partial file.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::CudaError;

/// The cache directory (not created here).
pub fn cache_dir() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("FP8_LINEAR_CACHE_DIR").filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(d));
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(d).join("fp8-linear"));
    }
    std::env::var_os("HOME")
        .filter(|d| !d.is_empty())
        .map(|h| PathBuf::from(h).join(".cache").join("fp8-linear"))
}

/// 64-bit FNV-1a, stable across builds and platforms (unlike std's hasher).
pub fn fnv1a64(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for &b in *p {
            h ^= b as u64;
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        // separator so ("ab","c") and ("a","bc") differ
        h ^= 0xff;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The cache key of a module: a hash of source, arch, options and NVRTC version, plus a
/// readable file name.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CacheKey {
    /// The hash.
    pub hash: u64,
    /// The file name (`<module>-<arch>-<hash>.cubin`, or `.ptx` for a virtual `compute_XY`
    /// arch).
    pub file_name: String,
}

impl CacheKey {
    /// Builds the key.
    pub fn new(
        module: &str,
        source: &str,
        arch: &str,
        options: &[String],
        nvrtc: (i32, i32),
    ) -> Self {
        let ver = format!("{}.{}", nvrtc.0, nvrtc.1);
        let opts = options.join("\u{1f}");
        let hash = fnv1a64(&[
            source.as_bytes(),
            arch.as_bytes(),
            opts.as_bytes(),
            ver.as_bytes(),
        ]);
        let safe: String = module
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '_' {
                    c
                } else {
                    '-'
                }
            })
            .collect();
        let ext = if arch.starts_with("compute_") {
            "ptx"
        } else {
            "cubin"
        };
        CacheKey {
            hash,
            file_name: format!("{safe}-{arch}-{hash:016x}.{ext}"),
        }
    }
}

/// Reads a cached cubin, if present.
pub fn load(dir: &Path, key: &CacheKey) -> Option<Vec<u8>> {
    std::fs::read(dir.join(&key.file_name))
        .ok()
        .filter(|b| !b.is_empty())
}

/// Stores a cubin: write a unique temporary file in the same directory, then rename it over
/// the final name (atomic on POSIX file systems).
pub fn store(dir: &Path, key: &CacheKey, cubin: &[u8]) -> Result<PathBuf, CudaError> {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let io = |path: &Path, e: std::io::Error| CudaError::Cache {
        path: path.to_path_buf(),
        detail: e.to_string(),
    };
    std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
    let final_path = dir.join(&key.file_name);
    let tmp = dir.join(format!(
        ".{}.{}.{}.tmp",
        key.file_name,
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(cubin)?;
        f.sync_all()?;
        Ok(())
    };
    if let Err(e) = write() {
        let _ = std::fs::remove_file(&tmp);
        return Err(io(&tmp, e));
    }
    std::fs::rename(&tmp, &final_path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        io(&final_path, e)
    })?;
    Ok(final_path)
}

/// Removes a cache entry (used when a cached file fails to load).
pub fn remove(dir: &Path, key: &CacheKey) {
    let _ = std::fs::remove_file(dir.join(&key.file_name));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_change_with_every_part() {
        let a = CacheKey::new("m", "src", "sm_90", &[], (13, 0));
        assert_ne!(a, CacheKey::new("m", "src2", "sm_90", &[], (13, 0)));
        assert_ne!(a, CacheKey::new("m", "src", "sm_90a", &[], (13, 0)));
        assert_ne!(
            a,
            CacheKey::new("m", "src", "sm_90", &["-DX".into()], (13, 0))
        );
        assert_ne!(a, CacheKey::new("m", "src", "sm_90", &[], (13, 1)));
        assert_eq!(a, CacheKey::new("m", "src", "sm_90", &[], (13, 0)));
        assert!(a.file_name.starts_with("m-sm_90-"));
        assert!(a.file_name.ends_with(".cubin"));
        let ptx = CacheKey::new("m", "src", "compute_80", &[], (13, 0));
        assert!(ptx.file_name.ends_with(".ptx"), "{}", ptx.file_name);
    }

    #[test]
    fn store_then_load_round_trips_under_concurrency() {
        let dir =
            std::env::temp_dir().join(format!("fp8-linear-cache-test-{}", std::process::id()));
        let key = CacheKey::new("t", "x", "sm_80", &[], (1, 0));
        let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| store(&dir, &key, &data).unwrap());
            }
        });
        assert_eq!(load(&dir, &key).unwrap(), data);
        let leftovers = std::fs::read_dir(&dir)
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .ends_with(".tmp")
            })
            .count();
        assert_eq!(leftovers, 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
