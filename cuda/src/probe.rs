//! Probes for the CUDA libraries before any cudarc call (cudarc panics on first use of a
//! library it cannot load; these turn absence into an error value).

use std::sync::OnceLock;

use crate::error::CudaError;

/// The file names the loader tried, each once, in the order tried.
fn searched(lib: &str) -> String {
    let mut names: Vec<String> = Vec::new();
    for n in cudarc::get_lib_name_candidates(lib) {
        if !names.contains(&n) {
            names.push(n);
        }
    }
    names.join(", ")
}

/// Checks that the CUDA driver library can be loaded and initialized.
pub fn driver() -> Result<(), CudaError> {
    static DRIVER: OnceLock<Result<(), CudaError>> = OnceLock::new();
    DRIVER
        .get_or_init(|| {
            // SAFETY: only tries to dlopen the library by its candidate names.
            if !unsafe { cudarc::driver::sys::is_culib_present() } {
                return Err(CudaError::NoDriver {
                    detail: format!("libcuda not found (searched for {})", searched("cuda")),
                });
            }
            cudarc::driver::result::init().map_err(|error| CudaError::Init { error })
        })
        .clone()
}

/// Checks that NVRTC can be loaded.
pub fn nvrtc() -> Result<(), CudaError> {
    static NVRTC: OnceLock<bool> = OnceLock::new();
    // SAFETY: only tries to dlopen the library by its candidate names.
    if *NVRTC.get_or_init(|| unsafe { cudarc::nvrtc::sys::is_culib_present() }) {
        Ok(())
    } else {
        Err(CudaError::MissingLibrary {
            lib: "nvrtc",
            searched: searched("nvrtc"),
        })
    }
}

/// Checks that cuBLASLt can be loaded.
pub fn cublaslt() -> Result<(), CudaError> {
    static LT: OnceLock<bool> = OnceLock::new();
    // SAFETY: only tries to dlopen the library by its candidate names.
    if *LT.get_or_init(|| unsafe { cudarc::cublaslt::sys::is_culib_present() }) {
        Ok(())
    } else {
        Err(CudaError::MissingLibrary {
            lib: "cublasLt",
            searched: searched("cublasLt"),
        })
    }
}
