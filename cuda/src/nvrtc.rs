//! NVRTC compilation to a cubin for the device's exact arch, and CUDA include-dir discovery
//! for sources that need headers.

use std::ffi::{c_char, CString};
use std::path::{Path, PathBuf};

use cudarc::nvrtc::result::NvrtcError;
use cudarc::nvrtc::{result, sys};

use crate::error::CudaError;
use crate::probe;

/// NVRTC's version as (major, minor).
pub fn version() -> Result<(i32, i32), CudaError> {
    probe::nvrtc()?;
    let (mut major, mut minor) = (0, 0);
    // SAFETY: both pointers are valid for writes.
    unsafe { sys::nvrtcVersion(&mut major, &mut minor) }
        .result()
        .map_err(|error| CudaError::NvrtcVersion { error })?;
    Ok((major, minor))
}

/// The CUDA include directories to pass to NVRTC for sources that include CUDA headers
/// (`cuda_fp8.h`): `$CUDA_HOME/include`, `$CUDA_PATH/include`, `/usr/local/cuda/include`,
/// each with its `include/cccl` (CUDA 13) when present. Only existing directories are
/// returned, the first root that has `cuda_fp8.h` or `cuda_runtime.h` first.
pub fn cuda_include_dirs() -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = Vec::new();
    for var in ["CUDA_HOME", "CUDA_PATH", "CUDA_ROOT"] {
        if let Some(v) = std::env::var_os(var) {
            roots.push(PathBuf::from(v));
        }
    }
    roots.push(PathBuf::from("/usr/local/cuda"));
    let mut dirs = Vec::new();
    for root in roots {
        let inc = root.join("include");
        if inc.join("cuda_fp8.h").is_file() || inc.join("cuda_runtime.h").is_file() {
            let cccl = inc.join("cccl");
            if !dirs.contains(&inc) {
                dirs.push(inc);
            }
            if cccl.is_dir() && !dirs.contains(&cccl) {
                dirs.push(cccl);
            }
        }
    }
    dirs
}

/// Owns an `nvrtcProgram` and destroys it on drop.
struct Program(sys::nvrtcProgram);

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: the program was created by create_program and is destroyed once.
        let _ = unsafe { result::destroy_program(self.0) };
    }
}

fn log_of(prog: &Program) -> String {
    // SAFETY: prog is a live program.
    match unsafe { result::get_program_log(prog.0) } {
        Ok(raw) => {
            let bytes: Vec<u8> = raw
                .iter()
                .take_while(|c| **c != 0)
                .map(|c| *c as u8)
                .collect();
            String::from_utf8_lossy(&bytes).trim().to_string()
        }
        Err(e) => format!("(no log: nvrtcGetProgramLog returned {:?})", e.0),
    }
}

/// What NVRTC is asked to produce.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Output {
    /// Machine code for a real target (`sm_90a`, `sm_89`).
    Cubin,
    /// PTX for a virtual target (`compute_80`), NUL-terminated, compiled for the device by
    /// the driver at load.
    Ptx,
}

/// Compiles `source` for `arch` (`sm_90a`, `sm_89`) with the extra `options`, returning the
/// cubin. The error carries the module name, the arch and NVRTC's log.
pub fn compile_cubin(
    module: &str,
    source: &str,
    arch: &str,
    options: &[String],
    include_dirs: &[&Path],
) -> Result<Vec<u8>, CudaError> {
    compile(module, source, arch, options, include_dirs, Output::Cubin)
}

/// Compiles `source` to `output` for `arch` (a real target for a cubin, a virtual
/// `compute_XY` target for PTX) with the extra `options`. The error carries the module name,
/// the arch, the failed call and NVRTC's log.
pub fn compile(
    module: &str,
    source: &str,
    arch: &str,
    options: &[String],
    include_dirs: &[&Path],
    output: Output,
) -> Result<Vec<u8>, CudaError> {
    probe::nvrtc()?;
    let err = |call: &'static str, error: NvrtcError, log: String| CudaError::Nvrtc {
        module: module.to_string(),
        arch: arch.to_string(),
        call,
        error,
        log,
    };
    let invalid = |what: &str| CudaError::InvalidArgument(format!("NVRTC module {module}: {what}"));
    let src = CString::new(source).map_err(|_| invalid("the source holds a NUL byte"))?;
    let name =
        CString::new(format!("{module}.cu")).map_err(|_| invalid("the name holds a NUL byte"))?;
    let prog = Program(
        result::create_program(&src, Some(&name))
            .map_err(|e| err("nvrtcCreateProgram", e, String::new()))?,
    );
    let mut opts: Vec<String> = vec![format!("--gpu-architecture={arch}")];
    opts.extend(options.iter().cloned());
    for d in include_dirs {
        opts.push(format!("--include-path={}", d.display()));
    }
    if opts.iter().any(|o| o.contains('\0')) {
        return Err(invalid("an option holds a NUL byte"));
    }
    // SAFETY: prog is live; options hold no NUL bytes (checked above).
    if let Err(e) = unsafe { result::compile_program(prog.0, &opts) } {
        return Err(err("nvrtcCompileProgram", e, log_of(&prog)));
    }
    let (size_call, get_call) = match output {
        Output::Cubin => ("nvrtcGetCUBINSize", "nvrtcGetCUBIN"),
        Output::Ptx => ("nvrtcGetPTXSize", "nvrtcGetPTX"),
    };
    let mut size = 0usize;
    // SAFETY: prog compiled successfully; size is valid for writes.
    unsafe {
        match output {
            Output::Cubin => sys::nvrtcGetCUBINSize(prog.0, &mut size),
            Output::Ptx => sys::nvrtcGetPTXSize(prog.0, &mut size),
        }
    }
    .result()
    .map_err(|e| err(size_call, e, log_of(&prog)))?;
    if size == 0 {
        return Err(invalid(&format!(
            "NVRTC produced no {output:?} for {arch} (a virtual compute_XY target gives PTX only)"
        )));
    }
    let mut code = vec![0u8; size];
    // SAFETY: the buffer holds `size` bytes, as NVRTC reported.
    unsafe {
        let p = code.as_mut_ptr() as *mut c_char;
        match output {
            Output::Cubin => sys::nvrtcGetCUBIN(prog.0, p),
            Output::Ptx => sys::nvrtcGetPTX(prog.0, p),
        }
    }
    .result()
    .map_err(|e| err(get_call, e, log_of(&prog)))?;
    Ok(code)
}
