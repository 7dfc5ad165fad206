//! Loading kernel modules: from the per-context memory cache, else the disk cache, else a
//! fresh NVRTC compile (which is then stored on disk) — a cubin for the device's exact arch,
//! or PTX for an older compute capability the caller asks for ([`Gpu::module_for`]).

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use cudarc::driver::CudaModule;
use cudarc::nvrtc::Ptx;
use fp8_linear_core::Capability;

use crate::cache::{self, CacheKey};
use crate::context::Gpu;
use crate::error::CudaError;
use crate::nvrtc::{self, Output};

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

    /// Adds NVRTC options.
    pub fn with_options(mut self, o: impl IntoIterator<Item = String>) -> Self {
        self.options.extend(o);
        self
    }

    /// Compiles for the arch-specific target (`sm_90a`) instead of `sm_90`.
    pub fn arch_specific(mut self) -> Self {
        self.arch_specific = true;
        self
    }

    /// Every NVRTC option of the module besides the target: the base options every module
    /// gets, then its own.
    pub fn nvrtc_options(&self) -> Vec<String> {
        let mut options: Vec<String> = BASE_OPTIONS.iter().map(|s| s.to_string()).collect();
        options.extend(self.options.iter().cloned());
        options
    }

    /// Compiles the module to a cubin for `arch` (`sm_89`, `sm_90a`) without a device.
    pub fn compile_cubin(&self, arch: &str) -> Result<Vec<u8>, CudaError> {
        self.compile(arch, Output::Cubin)
    }

    fn compile(&self, arch: &str, output: Output) -> Result<Vec<u8>, CudaError> {
        let incs = if self.needs_headers {
            nvrtc::cuda_include_dirs()
        } else {
            Vec::new()
        };
        let inc_refs: Vec<&Path> = incs.iter().map(|p| p.as_path()).collect();
        nvrtc::compile(
            self.name,
            self.source,
            arch,
            &self.nvrtc_options(),
            &inc_refs,
            output,
        )
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

    /// Loads a module for the device's exact arch: memory cache, then disk cache, then
    /// NVRTC. Returns the module and how it was obtained.
    pub fn module(&self, spec: &ModuleSpec) -> Result<(Arc<CudaModule>, LoadStats), CudaError> {
        self.load(spec, self.target(spec), Output::Cubin)
    }

    /// Loads a module compiled for `target`, an older compute capability than the device's
    /// (8.0 on an H200, to run the code an A100 runs): NVRTC emits PTX for `compute_XY` and
    /// the driver compiles it for the device at load; cached like cubins. `None`, or the
    /// device's own capability, is [`Gpu::module`]. A newer capability than the device's is
    /// [`CudaError::IncompatibleTarget`].
    pub fn module_for(
        &self,
        spec: &ModuleSpec,
        target: Option<Capability>,
    ) -> Result<(Arc<CudaModule>, LoadStats), CudaError> {
        let device = self.capability();
        match target {
            Some(cap) if cap != device => {
                if !device.at_least(cap) {
                    return Err(CudaError::IncompatibleTarget {
                        target: cap,
                        device,
                    });
                }
                let arch = format!("compute_{}{}", cap.major, cap.minor);
                self.load(spec, arch, Output::Ptx)
            }
            _ => self.module(spec),
        }
    }

    fn load(
        &self,
        spec: &ModuleSpec,
        arch: String,
        output: Output,
    ) -> Result<(Arc<CudaModule>, LoadStats), CudaError> {
        let t0 = Instant::now();
        let nvrtc_ver = nvrtc::version()?;
        let key = CacheKey::new(
            spec.name,
            spec.source,
            &arch,
            &spec.nvrtc_options(),
            nvrtc_ver,
        );
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
                match self.load_image(bytes, output) {
                    Ok(m) => {
                        self.remember(key, &m);
                        return Ok((m, stats(LoadSource::Disk)));
                    }
                    // A damaged or stale file: drop it and compile afresh.
                    Err(_) => cache::remove(dir, &key),
                }
            }
        }
        let image = spec.compile(&arch, output)?;
        if let Some(dir) = &dir {
            // The cache is an optimisation: failing to write it is not an error.
            let _ = cache::store(dir, &key, &image);
        }
        let m = self
            .load_image(image, output)
            .map_err(|e| e.within(format_args!("loading module {} for {arch}", spec.name)))?;
        self.remember(key, &m);
        Ok((m, stats(LoadSource::Compiled)))
    }

    /// Loads a cubin, or NUL-terminated PTX (the driver reads PTX up to its NUL).
    fn load_image(&self, mut image: Vec<u8>, output: Output) -> Result<Arc<CudaModule>, CudaError> {
        if output == Output::Ptx && image.last() != Some(&0) {
            image.push(0);
        }
        self.context()
            .load_module(Ptx::from_binary(image))
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
        self.modules()
            .lock()
            .expect("module cache poisoned")
            .clear();
    }
}
