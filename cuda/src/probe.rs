//! Probes for the CUDA libraries before any cudarc call (cudarc panics on first use of a
//! library it cannot load; these turn absence into an error value).
//!
//! With the `linked` feature the libraries are linked at build time (a process that started
//! has them), so only the driver's initialization is checked.

use std::sync::OnceLock;

use crate::error::CudaError;

/// The file names the loader tried, each once, in the order tried.
#[cfg(not(feature = "linked"))]
fn searched(lib: &str) -> String {
    let mut names: Vec<String> = Vec::new();
    for n in cudarc::get_lib_name_candidates(lib) {
        if !names.contains(&n) {
            names.push(n);
        }
    }
    names.join(", ")
}

/// Whether the driver library can be loaded (always, when linked).
#[cfg(not(feature = "linked"))]
fn driver_present() -> Result<(), CudaError> {
    // SAFETY: only tries to dlopen the library by its candidate names.
    if unsafe { cudarc::driver::sys::is_culib_present() } {
        Ok(())
    } else {
        Err(CudaError::NoDriver {
            detail: format!("libcuda not found (searched for {})", searched("cuda")),
        })
    }
}

#[cfg(feature = "linked")]
fn driver_present() -> Result<(), CudaError> {
    Ok(())
}

/// Checks that the CUDA driver library can be loaded and initialized.
pub fn driver() -> Result<(), CudaError> {
    static DRIVER: OnceLock<Result<(), CudaError>> = OnceLock::new();
    DRIVER
        .get_or_init(|| {
            driver_present()?;
            cudarc::driver::result::init().map_err(|error| CudaError::Init { error })
        })
        .clone()
}

/// Checks that NVRTC can be loaded.
pub fn nvrtc() -> Result<(), CudaError> {
    #[cfg(not(feature = "linked"))]
    {
        static NVRTC: OnceLock<bool> = OnceLock::new();
        // SAFETY: only tries to dlopen the library by its candidate names.
        if !*NVRTC.get_or_init(|| unsafe { cudarc::nvrtc::sys::is_culib_present() }) {
            return Err(CudaError::MissingLibrary {
                lib: "nvrtc",
                searched: searched("nvrtc"),
            });
        }
    }
    Ok(())
}

/// Checks that cuBLASLt can be loaded.
pub fn cublaslt() -> Result<(), CudaError> {
    #[cfg(not(feature = "linked"))]
    {
        static LT: OnceLock<bool> = OnceLock::new();
        // SAFETY: only tries to dlopen the library by its candidate names.
        if !*LT.get_or_init(|| unsafe { cudarc::cublaslt::sys::is_culib_present() }) {
            return Err(CudaError::MissingLibrary {
                lib: "cublasLt",
                searched: searched("cublasLt"),
            });
        }
    }
    Ok(())
}
