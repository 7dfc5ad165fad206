//! GPU activation quantization to e4m3: dynamic per-token-group (1 x 128), per-token and
//! per-tensor (static or dynamic), from f32, f16 or bf16 input, with scales row- or
//! column-major. Bit-identical to [`crate::cpu::quantize`]: scale = max(absmax, 1e-10) / 448
//! in f32, q = RNE-saturating e4m3 of x / scale (IEEE division).
//!
//! The functions take raw device addresses (from
//! [`DeviceBuffer::ptr`](fp8_linear_cuda::DeviceBuffer::ptr) or a tensor's
//! [`DeviceMemory`](fp8_linear_core::DeviceMemory)) and enqueue on the given stream.

use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaModule, LaunchConfig, PushKernelArg};
use fp8_linear_core::DType;
use fp8_linear_cuda::cudarc;
use fp8_linear_cuda::{CudaError, Gpu, LoadStats};

use super::common::Scratch;
use super::sources;

/// How the 1 x 128 group scales `[M, G]` are laid out.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ScaleOrder {
    /// `s[m * G + g]` (the CPU layout).
    RowMajor,
    /// `s[g * M + m]` (M fastest, as cuBLASLt's VEC128 mode wants).
    ColMajor,
    /// `s[g * ld + m]` with `ld >= M` (M fastest, rows padded, e.g. to a multiple of 4).
    ColMajorLd(usize),
}

/// The quantization kernels, loaded on one GPU.
pub struct ActQuant {
    gpu: Arc<Gpu>,
    _module: Arc<CudaModule>,
    group128: [CudaFunction; 3],
    rows: [CudaFunction; 3],
    absmax: [CudaFunction; 3],
    tensor: [CudaFunction; 3],
    pad_rows: CudaFunction,
    stats: LoadStats,
}

fn idx(d: DType) -> Result<usize, CudaError> {
    match d {
        DType::F32 => Ok(0),
        DType::F16 => Ok(1),
        DType::Bf16 => Ok(2),
        DType::F8E4m3 => Err(CudaError::InvalidArgument(
            "activation quantization takes f32, f16 or bf16 input".into(),
        )),
    }
}

fn i32_of(what: &str, v: usize) -> Result<i32, CudaError> {
    i32::try_from(v).map_err(|_| CudaError::InvalidArgument(format!("{what} = {v} exceeds i32")))
}

impl ActQuant {
    /// Loads (compiles or reads from the cache) the quantization module on `gpu`.
    pub fn new(gpu: &Arc<Gpu>) -> Result<Self, CudaError> {
        let (module, stats) = gpu.module(&sources::quant_module())?;
        let f = |name: String| {
            module
                .load_function(&name)
                .map_err(|e| CudaError::driver(format!("loading function {name}"), e))
        };
        let each = |prefix: &str| -> Result<[CudaFunction; 3], CudaError> {
            Ok([
                f(format!("{prefix}_f32"))?,
                f(format!("{prefix}_f16"))?,
                f(format!("{prefix}_bf16"))?,
            ])
        };
        Ok(ActQuant {
            gpu: gpu.clone(),
            group128: each("quant_group128")?,
            rows: each("quant_rows")?,
            absmax: each("absmax")?,
            tensor: each("quant_tensor")?,
            pad_rows: f("pad_rows_u8".into())?,
            _module: module,
            stats,
        })
    }

    /// How the module was loaded (memory, disk cache, or compiled).
    pub fn load_stats(&self) -> LoadStats {
        self.stats
    }

    /// Dynamic 1 x 128 group quantization of `x` `[m, k]` (`dtype`) into codes `q`
    /// `[m, ldq]` (`ldq >= k`; columns `k..ldq` are zeroed) and f32 scales `s`
    /// (`m * ceil(k/128)`, in `order`).
    ///
    /// # Safety
    /// The pointers must address live device memory of this GPU of the sizes above, ready on
    /// the GPU handle's stream (every launch is enqueued there).
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn group128(
        &self,
        x: u64,
        dtype: DType,
        m: usize,
        k: usize,
        q: u64,
        ldq: usize,
        s: u64,
        order: ScaleOrder,
    ) -> Result<(), CudaError> {
        let t = idx(dtype)?;
        if ldq < k || m == 0 || k == 0 {
            return Err(CudaError::InvalidArgument(format!(
                "group quantization m={m} k={k} ldq={ldq}"
            )));
        }
        let groups = k.div_ceil(128);
        let (s_row, s_col): (i64, i64) = match order {
            ScaleOrder::RowMajor => (groups as i64, 1),
            ScaleOrder::ColMajor => (1, m as i64),
            ScaleOrder::ColMajorLd(ld) if ld >= m => (1, ld as i64),
            ScaleOrder::ColMajorLd(ld) => {
                return Err(CudaError::InvalidArgument(format!(
                    "scale leading dimension {ld} < M = {m}"
                )))
            }
        };
        // 16-byte loads: 8 elements of 16-bit input, or 2 x 4 of f32.
        let vec: i32 =
            (x.is_multiple_of(16) && k.is_multiple_of(if t == 0 { 4 } else { 8 })) as i32;
        let threads = (m as u64) * groups as u64 * 16;
        let blocks = u32::try_from(threads.div_ceil(256))
            .map_err(|_| CudaError::InvalidArgument("too many groups".into()))?;
        let (mi, ki, ldqi) = (i32_of("M", m)?, i32_of("K", k)?, i32_of("ldq", ldq)?);
        let st = self.gpu.stream();
        let mut b = st.launch_builder(&self.group128[t]);
        b.arg(&x)
            .arg(&q)
            .arg(&s)
            .arg(&mi)
            .arg(&ki)
            .arg(&ldqi)
            .arg(&s_row)
            .arg(&s_col)
            .arg(&vec);
        b.launch(LaunchConfig {
            grid_dim: (blocks, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        })
        .map_err(|e| CudaError::driver("launching quant_group128", e))?;
        Ok(())
    }

    /// Dynamic per-token quantization: one scale per row into `s` (`m` floats), clamped to
    /// `ub / 448` when `ub` (device address of one f32) is given.
    ///
    /// # Safety
    /// As for [`ActQuant::group128`].
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn per_token(
        &self,
        x: u64,
        dtype: DType,
        m: usize,
        k: usize,
        q: u64,
        ldq: usize,
        s: u64,
        ub: Option<u64>,
    ) -> Result<(), CudaError> {
        let t = idx(dtype)?;
        if ldq < k || m == 0 || k == 0 {
            return Err(CudaError::InvalidArgument(format!(
                "per-token quantization m={m} k={k} ldq={ldq}"
            )));
        }
        let (mi, ki, ldqi) = (i32_of("M", m)?, i32_of("K", k)?, i32_of("ldq", ldq)?);
        let ub = ub.unwrap_or(0);
        let st = self.gpu.stream();
        let mut b = st.launch_builder(&self.rows[t]);
        b.arg(&x)
            .arg(&q)
            .arg(&s)
            .arg(&mi)
            .arg(&ki)
            .arg(&ldqi)
            .arg(&ub);
        b.launch(LaunchConfig {
            grid_dim: (m.min(65535) as u32, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        })
        .map_err(|e| CudaError::driver("launching quant_rows", e))?;
        Ok(())
    }

    /// Per-tensor quantization with one scale: the static scale at device address
    /// `static_scale`, or (when None) the dynamic scale from the tensor's absmax, computed
    /// in `amax_scratch` (device address of one u32). The scale is also written to every
    /// entry of `s_rows` (`m` floats) and to `s_one` (one float) when given.
    ///
    /// # Safety
    /// As for [`ActQuant::group128`].
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn per_tensor(
        &self,
        x: u64,
        dtype: DType,
        m: usize,
        k: usize,
        q: u64,
        ldq: usize,
        static_scale: Option<u64>,
        amax_scratch: u64,
        s_rows: Option<u64>,
        s_one: Option<u64>,
    ) -> Result<(), CudaError> {
        let t = idx(dtype)?;
        if ldq < k || m == 0 || k == 0 {
            return Err(CudaError::InvalidArgument(format!(
                "per-tensor quantization m={m} k={k} ldq={ldq}"
            )));
        }
        let (mi, ki, ldqi) = (i32_of("M", m)?, i32_of("K", k)?, i32_of("ldq", ldq)?);
        let st = self.gpu.stream();
        let amax = match static_scale {
            Some(_) => 0u64,
            None => {
                cudarc::driver::result::memset_d8_async(amax_scratch, 0, 4, st.cu_stream())
                    .map_err(|e| CudaError::driver("clearing the absmax", e))?;
                let n = (m * k) as i64;
                let blocks = ((m * k).div_ceil(256 * 8)).clamp(1, 4096) as u32;
                let mut b = st.launch_builder(&self.absmax[t]);
                b.arg(&x).arg(&n).arg(&amax_scratch);
                b.launch(LaunchConfig {
                    grid_dim: (blocks, 1, 1),
                    block_dim: (256, 1, 1),
                    shared_mem_bytes: 0,
                })
                .map_err(|e| CudaError::driver("launching absmax", e))?;
                amax_scratch
            }
        };
        let scale = static_scale.unwrap_or(0);
        let s_rows = s_rows.unwrap_or(0);
        let s_one = s_one.unwrap_or(0);
        let gx = (ldq.div_ceil(256 * 4)).clamp(1, 64) as u32;
        let gy = m.min(65535) as u32;
        let mut b = st.launch_builder(&self.tensor[t]);
        b.arg(&x)
            .arg(&q)
            .arg(&mi)
            .arg(&ki)
            .arg(&ldqi)
            .arg(&scale)
            .arg(&amax)
            .arg(&s_rows)
            .arg(&s_one);
        b.launch(LaunchConfig {
            grid_dim: (gx, gy, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        })
        .map_err(|e| CudaError::driver("launching quant_tensor", e))?;
        Ok(())
    }

    /// Copies `rows` rows of `cols` bytes from `src` into rows of `ld` bytes at `dst`,
    /// zero-filling columns `cols..ld`.
    ///
    /// # Safety
    /// As for [`ActQuant::group128`]; `src` holds `rows * cols` bytes, `dst` `rows * ld`.
    pub unsafe fn pad_rows(
        &self,
        src: u64,
        dst: u64,
        rows: usize,
        cols: usize,
        ld: usize,
    ) -> Result<(), CudaError> {
        if ld < cols {
            return Err(CudaError::InvalidArgument(format!(
                "pad_rows ld {ld} < cols {cols}"
            )));
        }
        let (r, c, l) = (
            i32_of("rows", rows)?,
            i32_of("cols", cols)?,
            i32_of("ld", ld)?,
        );
        let st = self.gpu.stream();
        let mut b = st.launch_builder(&self.pad_rows);
        b.arg(&src).arg(&dst).arg(&r).arg(&c).arg(&l);
        b.launch(LaunchConfig {
            grid_dim: (
                (ld.div_ceil(256)).clamp(1, 64) as u32,
                rows.clamp(1, 65535) as u32,
                1,
            ),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        })
        .map_err(|e| CudaError::driver("launching pad_rows_u8", e))?;
        Ok(())
    }
}

/// A layer's device scratch for its quantized activations: FP8 codes with a padded row
/// stride and the 1 x 128 group scales, grown on demand and reused across calls.
#[derive(Default)]
pub struct GroupQuantBuffers {
    codes: Scratch<u8>,
    scales: Scratch<f32>,
}

impl GroupQuantBuffers {
    /// Quantizes `m` rows of the input `x` (`[m, k]` of `dtype`) per 1 x 128 group into
    /// buffers sized for `rows >= m` rows (rows past `m` are left as they are): codes with row
    /// stride `ldk >= k`, scales in `order`. Returns the codes' and the scales' addresses.
    ///
    /// # Safety
    /// `x` must hold `m * k` elements of `dtype` on `gpu`, ready on the stream of `quant`'s
    /// GPU handle.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn quantize(
        &mut self,
        quant: &ActQuant,
        gpu: &Arc<Gpu>,
        x: u64,
        dtype: DType,
        (m, k, rows, ldk): (usize, usize, usize, usize),
        order: ScaleOrder,
    ) -> Result<(u64, u64), CudaError> {
        if rows < m {
            return Err(CudaError::InvalidArgument(format!(
                "quantization buffers for {rows} rows cannot hold {m}"
            )));
        }
        let q = self.codes.get(gpu, rows * ldk)?.ptr();
        let s = self.scales.get(gpu, rows * k.div_ceil(128))?.ptr();
        // SAFETY: the caller vouches for x and the stream; q holds rows * ldk >= m * ldk
        // bytes and s rows * ceil(k / 128) floats on the same GPU (group128 checks ldk >= k).
        unsafe { quant.group128(x, dtype, m, k, q, ldk, s, order)? };
        Ok((q, s))
    }
}
