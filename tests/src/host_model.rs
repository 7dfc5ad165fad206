//! Host models of the CUDA kernels: a kernel's own CUDA C source, compiled with the
//! machine's C++20 compiler against `tests/host_model/` (the CUDA environment on a CPU: a
//! thread per CUDA thread, barriers, warp collectives by their PTX layouts, cp.async that
//! lands at its `wait_group`; the PTX wrappers of `cu/ptx.cuh`, which it keeps under
//! `#ifndef FP8_HOST_MODEL`, replaced by the C++ ones of `ptx.h`) under sanitizers, and run
//! on the CPU. The kernels' indexing, bounds, fragment layouts, pipelines and barriers are
//! then tested by `cargo test` on a machine without a GPU.

use std::path::PathBuf;
use std::process::Command;

use fp8_linear::cuda::runtime::ModuleSpec;
use fp8_linear::DType;
use half::{bf16, f16};
use rand::{Rng, SeedableRng};

const FILES: [(&str, &str); 2] = [
    ("cuda.h", include_str!("../host_model/cuda.h")),
    ("ptx.h", include_str!("../host_model/ptx.h")),
];

/// A kernel source for the host: its dynamic shared memory array (`extern __shared__ ...
/// T name[];`) becomes a pointer to the host model's, its static `__shared__` variables
/// function statics (the blocks run one at a time).
pub fn host_source(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    for line in source.lines() {
        let t = line.trim();
        if t.starts_with("extern __shared__") && t.ends_with("[];") {
            let words: Vec<&str> = t.trim_end_matches("[];").split_whitespace().collect();
            let (ty, name) = match words.as_slice() {
                [.., ty, name] => (*ty, *name),
                _ => ("u8", "smem"),
            };
            out.push_str(&format!(
                "    {ty}* {name} = reinterpret_cast<{ty}*>(host_smem);\n"
            ));
        } else {
            out.push_str(&line.replace("__shared__", "static"));
            out.push('\n');
        }
    }
    out
}

/// A compiled host model (its folder is removed on drop).
pub struct HostModel {
    dir: PathBuf,
    exe: PathBuf,
}

impl HostModel {
    /// Compiles `driver` (a C++ file of `tests/host_model/`) with the kernel module `spec`
    /// (its source and `-D` options, as NVRTC gets them) under `sanitizers` (`-fsanitize=`).
    /// None, after printing why, without a C++20 compiler (`CXX`, else `c++`); panics when
    /// the model does not compile.
    pub fn build(
        tag: &str,
        driver: &str,
        spec: &ModuleSpec,
        sanitizers: &str,
    ) -> Option<HostModel> {
        let dir = std::env::temp_dir().join(format!("fp8-host-model-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("host model folder");
        for (name, text) in FILES {
            std::fs::write(dir.join(name), text).expect("host model header");
        }
        std::fs::write(dir.join("main.cpp"), driver).expect("host model driver");
        std::fs::write(dir.join("kernel.inc"), host_source(spec.source))
            .expect("host model kernel");
        let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
        let exe = dir.join("model");
        let out = Command::new(&cxx)
            .current_dir(&dir)
            .args([
                "-std=c++20",
                "-O1",
                "-g",
                "-pthread",
                "-fno-sanitize-recover=all",
                "-Wno-unknown-pragmas",
                "-DFP8_HOST_MODEL",
                "-DKERNEL_INC=\"kernel.inc\"",
            ])
            .arg(format!("-fsanitize={sanitizers}"))
            .args(&spec.options)
            .arg("main.cpp")
            .arg("-o")
            .arg(&exe)
            .output();
        let out = match out {
            Ok(o) => o,
            Err(e) => {
                eprintln!("skipped: no C++ compiler ({cxx}: {e})");
                return None;
            }
        };
        if !out.status.success() {
            let log = String::from_utf8_lossy(&out.stderr);
            if log.contains("barrier: No such file") || log.contains("c++20") {
                eprintln!("skipped: {cxx} lacks C++20 <barrier>: {log}");
                return None;
            }
            panic!("the host model {tag} does not compile:\n{log}");
        }
        Some(HostModel { dir, exe })
    }

    /// Runs the model on `input` (the driver's sections); its output file, or why it failed.
    pub fn run(&self, input: &[u8], tag: &str) -> Result<Vec<u8>, String> {
        let (inp, outp) = (
            self.dir.join(format!("{tag}.in")),
            self.dir.join(format!("{tag}.out")),
        );
        std::fs::write(&inp, input).map_err(|e| e.to_string())?;
        let r = Command::new(&self.exe)
            .arg(&inp)
            .arg(&outp)
            .output()
            .map_err(|e| e.to_string())?;
        if !r.status.success() {
            return Err(format!(
                "exit {:?}: {}",
                r.status.code(),
                String::from_utf8_lossy(&r.stderr)
            ));
        }
        std::fs::read(&outp).map_err(|e| e.to_string())
    }
}

impl Drop for HostModel {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// For each `(module, call)` of `pick` (indices into `modules`; the call None: all of the
/// module's `calls`), builds the module's host model (`spec` of it, with `driver`, under
/// `sanitizers`, tagged `tag` and its index) once and runs `run(model, module, call, tag)` on
/// its calls; returns early, after printing why, without a C++20 compiler.
#[allow(clippy::type_complexity)]
pub fn run_picked<M, C>(
    (driver, sanitizers, tag): (&str, &str, &str),
    modules: &[M],
    pick: &[(usize, Option<usize>)],
    spec: impl Fn(&M) -> ModuleSpec,
    calls: impl Fn(&M) -> &[C],
    run: impl Fn(&HostModel, &M, &C, &str),
) {
    for &(i, only) in pick {
        let module = &modules[i];
        let Some(model) = HostModel::build(&format!("{tag}{i}"), driver, &spec(module), sanitizers)
        else {
            return;
        };
        for (j, c) in calls(module).iter().enumerate() {
            if only.is_none_or(|o| o == j) {
                run(&model, module, c, &format!("call{j}"));
            }
        }
    }
}

/// Runs `model` on `input` (run `tag`) and returns its outputs: `launches` calls of `m` x `n`
/// elements of dtype `out`, each as f32. Fails the test, naming the call `what`, when the model
/// failed, an output has another size, or (`identical`) a launch (another block order)
/// differs from the first bit for bit.
#[allow(clippy::too_many_arguments)]
pub fn model_outputs(
    model: &HostModel,
    input: &[u8],
    tag: &str,
    what: &str,
    launches: usize,
    (m, n): (usize, usize),
    out: DType,
    identical: bool,
) -> Vec<Vec<f32>> {
    let raw = model
        .run(input, tag)
        .unwrap_or_else(|e| panic!("{what}: the host model failed: {e}"));
    let per = m * n * if out == DType::F32 { 4 } else { 2 };
    assert_eq!(raw.len(), launches * per, "{what}");
    if identical {
        for l in 1..launches {
            assert!(
                raw[..per] == raw[l * per..(l + 1) * per],
                "{what}: launch {l} (another block order) differs from launch 0"
            );
        }
    }
    raw.chunks(per.max(1))
        .take(launches)
        .map(|r| decode_output(r, out))
        .collect()
}

/// The float index of dtype `d` that the kernel modules take (`-DHOPPER_OUT=`, `-DDEC_IN=`...):
/// 0 f32, 1 f16, 2 bf16.
pub fn float_index(d: DType) -> usize {
    match d {
        DType::F32 => 0,
        DType::F16 => 1,
        _ => 2,
    }
}

/// The input of a block GEMM's driver: its parameters (as i32), then the activation codes and
/// scales, the weight codes and scales and the bias (f32 each but the codes).
pub fn gemm_input(
    params: &[usize],
    (a, a_scales): (&[u8], &[f32]),
    (w, w_scales): (&[u8], &[f32]),
    bias: &[f32],
) -> Vec<u8> {
    let mut input = Vec::new();
    section(&mut input, &le(params, |&v| (v as i32).to_le_bytes()));
    section(&mut input, a);
    section(&mut input, &le(a_scales, |v| v.to_le_bytes()));
    section(&mut input, w);
    section(&mut input, &le(w_scales, |v| v.to_le_bytes()));
    section(&mut input, &le(bias, |v| v.to_le_bytes()));
    input
}

/// Appends one input section: its byte count (u64, little-endian), then the bytes.
pub fn section(buf: &mut Vec<u8>, bytes: &[u8]) {
    buf.extend((bytes.len() as u64).to_le_bytes());
    buf.extend(bytes);
}

/// The little-endian bytes of `v`, element by element.
pub fn le<T, const N: usize>(v: &[T], f: impl Fn(&T) -> [u8; N]) -> Vec<u8> {
    v.iter().flat_map(f).collect()
}

/// The bytes of a model's output of dtype `dt` as f32.
pub fn decode_output(raw: &[u8], dt: DType) -> Vec<f32> {
    match dt {
        DType::F32 => raw
            .chunks(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect(),
        DType::F16 => raw
            .chunks(2)
            .map(|b| f16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect(),
        _ => raw
            .chunks(2)
            .map(|b| bf16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect(),
    }
}

/// `x` in float dtype `d` as bytes, and the values a kernel reads from them.
pub fn encode_input(x: &[f32], d: DType) -> (Vec<u8>, Vec<f32>) {
    match d {
        DType::F16 => {
            let h: Vec<f16> = x.iter().map(|v| f16::from_f32(*v)).collect();
            (
                le(&h, |v| v.to_le_bytes()),
                h.iter().map(|v| v.to_f32()).collect(),
            )
        }
        DType::Bf16 => {
            let h: Vec<bf16> = x.iter().map(|v| bf16::from_f32(*v)).collect();
            (
                le(&h, |v| v.to_le_bytes()),
                h.iter().map(|v| v.to_f32()).collect(),
            )
        }
        _ => (le(x, |v| v.to_le_bytes()), x.to_vec()),
    }
}

/// Rows of `cols` FP8 codes padded to a row stride of `ld` with zero codes.
pub fn padded_rows(codes: &[u8], rows: usize, cols: usize, ld: usize) -> Vec<u8> {
    let mut v = vec![0u8; rows * ld];
    for r in 0..rows {
        v[r * ld..r * ld + cols].copy_from_slice(&codes[r * cols..(r + 1) * cols]);
    }
    v
}

/// `count` weight block scales `2^[-3, 3] * [0.5, 1) / 448`, seeded by `seed`.
pub fn random_block_scales(count: usize, seed: u64) -> Vec<f32> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..count)
        .map(|_| 2f32.powi(rng.random_range(-3..=3)) * rng.random_range(0.5f32..1.0) / 448.0)
        .collect()
}

/// The f64 block-scaled reference of FP8 codes `a` [m, k] (1 x C scales `a_scales`) times
/// `w` [n, k] (`block` = R x C blocks `w_scales`), plus `bias` when given.
pub fn block_reference(
    (a, a_scales): (&[u8], &[f32]),
    (w, w_scales): (&[u8], &[f32]),
    (m, n, k): (usize, usize, usize),
    block: (usize, usize),
    bias: Option<&[f32]>,
) -> Vec<f64> {
    let mut want =
        fp8_linear::cpu::reference::block_gemm_f64(a, a_scales, w, w_scales, m, n, k, block);
    if let Some(b) = bias {
        for (i, v) in want.iter_mut().enumerate() {
            *v += b[i % n] as f64;
        }
    }
    want
}

#[cfg(test)]
mod tests {
    use super::host_source;

    #[test]
    fn shared_memory_becomes_the_host_models() {
        let src = "    extern __shared__ __align__(16) u8 dsm[];\n    __shared__ u32 last;\n";
        let host = host_source(src);
        assert!(
            host.contains("u8* dsm = reinterpret_cast<u8*>(host_smem);"),
            "{host}"
        );
        assert!(host.contains("static u32 last;"), "{host}");
        assert!(!host.contains("__shared__"), "{host}");
    }
}
