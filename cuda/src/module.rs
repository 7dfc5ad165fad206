//! Loading kernel modules: from the per-context memory cache, else the disk cache, else a
//! fresh NVRTC compile for the device's exact arch (which is then stored on disk).

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use cudarc::driver::CudaModule;
use cudarc::nvrtc::Ptx;

use crate::cache::{self, CacheKey};
use crate::context::Gpu;
use crate::error::CudaError;
use crate::nvrtc;

/// A CUDA C module to compile at run time.
#[derive(Clone, Debug)]
pub struct ModuleSpec {
    /// Name, used in file names and errors.
    pub name: &'static str,
    /// The CUDA C source.
    pub source: &'static str,
    /// Extra NVRTC options (`-DBM=128`).
    pub options: Vec<String>,
    /// Whether the source includes CUDA headers (then the CUDA include dirs are passed).
    pub needs_headers: bool,
    /// Whether to compile for the arch-specific target (`sm_90a`) instead of `sm_90`.
    pub arch_specific: bool,
}

impl ModuleSpec {
    /// A header-free module compiled for the plain `sm_XY` target.
    pub fn new(name: &'static str, source: &'static str) -> Self {
        ModuleSpec {
            name,
            source,
            options: Vec::new(),
            needs_headers: false,
            arch_specific: false,
        }
    }

    /// Adds an NVRTC option.
    pub fn option(mut self, o: impl Into<String>) -> Self {
        self.options.push(o.into());
        self
    }
}

/// Where a module came from.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum LoadSource {
    /// Already loaded in this process.
    Memory,
    /// Read from the disk cache.
    Disk,
    /// Compiled by NVRTC now.
    Compiled,
}

/// How a module load went.
#[derive(Copy, Clone, Debug)]
pub struct LoadStats {
    /// Where it came from.
    pub source: LoadSource,
    /// Wall time of the load (compile + module load), in milliseconds.
    pub millis: f64,
}

/// Whether `FP8_LINEAR_LOG_LOADS=1` asks for a line on stderr per module load from disk or
/// NVRTC.
fn log_loads() -> bool {
    std::env::var("FP8_LINEAR_LOG_LOADS").is_ok_and(|v| v == "1")
}

const BASE_OPTIONS: [&str; 2] = ["--std=c++17", "-default-device"];

impl Gpu {
    /// The NVRTC target for this device and spec (`sm_90`, or `sm_90a` when arch-specific).
    pub fn target(&self, spec: &ModuleSpec) -> String {
        let c = self.capability();
        format!(
            "sm_{}{}{}",
            c.major,
            c.minor,
            if spec.arch_specific { "a" } else { "" }
        )
    }

    /// Loads a module: memory cache, then disk cache, then NVRTC. Returns the module and
    /// how it was obtained.
    pub fn module(&self, spec: &ModuleSpec) -> Result<(Arc<CudaModule>, LoadStats), CudaError> {
        let t0 = Instant::now();
        let arch = self.target(spec);
        let mut options: Vec<String> = BASE_OPTIONS.iter().map(|s| s.to_string()).collect();
        options.extend(spec.options.iter().cloned());
        let nvrtc_ver = nvrtc::version()?;
        let key = CacheKey::new(spec.name, spec.source, &arch, &options, nvrtc_ver);
        let stats = |source| {
            let st = LoadStats {
                source,
                millis: t0.elapsed().as_secs_f64() * 1e3,
            };
            if source != LoadSource::Memory && log_loads() {
                eprintln!(
                    "fp8-linear: module {} for {arch}: {:?} in {:.2} ms",
                    spec.name, st.source, st.millis
                );
            }
            st
        };
        if let Some(m) = self
            .modules()
            .lock()
            .expect("module cache poisoned")
            .get(&key)
        {
            return Ok((m.clone(), stats(LoadSource::Memory)));
        }
        let dir = cache::cache_dir();
        if let Some(dir) = &dir {
            if let Some(bytes) = cache::load(dir, &key) {
                match self.load_cubin(bytes) {
                    Ok(m) => {
                        self.remember(key, &m);
                        return Ok((m, stats(LoadSource::Disk)));
                    }
                    // A damaged or stale file: drop it and compile afresh.
                    Err(_) => cache::remove(dir, &key),
                }
            }
        }
        let incs = if spec.needs_headers {
            nvrtc::cuda_include_dirs()
        } else {
            Vec::new()
        };
        let inc_refs: Vec<&Path> = incs.iter().map(|p| p.as_path()).collect();
        let cubin = nvrtc::compile_cubin(spec.name, spec.source, &arch, &options, &inc_refs)?;
        if let Some(dir) = &dir {
            // The cache is an optimisation: failing to write it is not an error.
            let _ = cache::store(dir, &key, &cubin);
        }
        let m = self.load_cubin(cubin).map_err(|e| match e {
            CudaError::Driver { context, error } => CudaError::Driver {
                context: format!("loading module {} for {arch}: {context}", spec.name),
                error,
            },
            other => other,
        })?;
        self.remember(key, &m);
        Ok((m, stats(LoadSource::Compiled)))
    }

    fn load_cubin(&self, cubin: Vec<u8>) -> Result<Arc<CudaModule>, CudaError> {
        self.context()
            .load_module(Ptx::from_binary(cubin))
            .map_err(|e| CudaError::driver("cuModuleLoadData", e))
    }

    fn remember(&self, key: CacheKey, m: &Arc<CudaModule>) {
        self.modules()
            .lock()
            .expect("module cache poisoned")
            .insert(key, m.clone());
    }

    /// Forgets the in-memory modules (the next load comes from disk); for cache tests and
    /// benchmarks of load time.
    pub fn forget_modules(&self) {
        self.modules().lock().expect("module cache poisoned").clear();
    }
}
