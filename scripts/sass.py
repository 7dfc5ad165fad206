#!/usr/bin/env python3
"""The machine code of a kernel module without a GPU or a CUDA toolkit.

Compiles CUDA C sources with NVRTC (the pip wheel's libnvrtc) for an sm_XY target, prints
ptxas's register and spill lines, and, when nvdisasm is given, disassembles the cubin and
counts chosen instructions per kernel (SASS_OUT=FILE also writes the whole disassembly).

    pip download --no-deps nvidia-cuda-nvrtc nvidia-cuda-nvdisasm -d /tmp/w   # then unzip both
    NVRTC=/tmp/w/nvidia/cu13/lib/libnvrtc.so.13 NVDISASM=/tmp/w/nvidia/cu13/bin/nvdisasm \\
      scripts/sass.py kernels/src/cuda/cu/ptx.cuh,kernels/src/cuda/cu/quant.cuh,kernels/src/cuda/cu/epilogue.cuh,kernels/src/cuda/cu/block_gemm.cu sm_89 \\
      -DMT=4 -DSTAGES=4

Prints, per kernel, the counts of QMMA, HMMA, F2FP, LDSM, LDGSTS, BAR and LDL/STL.
"""
import ctypes, os, re, subprocess, sys, tempfile

COUNTED = ["QGMMA", "WARPGROUP.DEPBAR", "QMMA", "HMMA", "F2FP", "LDSM", "LDGSTS", "BAR", "LDL|STL"]


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    files, arch, defines = sys.argv[1].split(","), sys.argv[2], sys.argv[3:]
    lib = ctypes.CDLL(os.environ.get("NVRTC", "libnvrtc.so.13"))
    src = "\n".join(open(f).read() for f in files).encode()
    prog = ctypes.c_void_p()
    assert lib.nvrtcCreateProgram(ctypes.byref(prog), src, b"m.cu", 0, None, None) == 0
    opts = [f"--gpu-architecture={arch}", "--std=c++17", "-default-device",
            "--ptxas-options=-v"] + defines
    arr = (ctypes.c_char_p * len(opts))(*[o.encode() for o in opts])
    rc = lib.nvrtcCompileProgram(prog, len(opts), arr)
    n = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
    log = ctypes.create_string_buffer(n.value)
    lib.nvrtcGetProgramLog(prog, log)
    for line in log.value.decode().splitlines():
        if re.search(r"Compiling entry|registers|spill|error|warning|Performance|wgmma", line):
            print(line.strip())
    if rc != 0:
        sys.exit(f"NVRTC failed ({rc})")
    nvdisasm = os.environ.get("NVDISASM")
    if not nvdisasm:
        return
    lib.nvrtcGetCUBINSize(prog, ctypes.byref(n))
    cubin = ctypes.create_string_buffer(n.value)
    lib.nvrtcGetCUBIN(prog, cubin)
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin.raw)
        f.flush()
        sass = subprocess.run([nvdisasm, "-c", "-sf", f.name], capture_output=True,
                              text=True, check=True).stdout
    if os.environ.get("SASS_OUT"):
        with open(os.environ["SASS_OUT"], "w") as out:
            out.write(sass)
    parts = re.split(r"\n\s*\.text\.(\S+):", sass)
    for name, body in zip(parts[1::2], parts[2::2]):
        code = [l for l in body.splitlines() if re.search(r"/\*[0-9a-f]{4,}\*/", l)]
        counts = " ".join(f"{c} {sum(1 for l in code if re.search(c, l))}" for c in COUNTED)
        print(f"{name}: {len(code)} instructions; {counts}")


if __name__ == "__main__":
    main()
