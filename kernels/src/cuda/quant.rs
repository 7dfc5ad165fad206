//! GPU activation quantization to e4m3: dynamic per-token-group (1 x G, G a power of two
//! from 8 to 128), per-token and per-tensor (static or dynamic), from f32, f16 or bf16
//! input, with scales row- or column-major. Bit-identical to [`crate::cpu::quantize`]:
//! scale = max(absmax, 1e-10) / 448 in f32, rounded up to a power of two for ue8m0 scales
//! (on the bits, as [`fp8_linear_core::fp8::round_scale_ue8m0`]), q = RNE-saturating e4m3
//! of x / scale (IEEE division).
//!
//! The functions take raw device addresses (from
//! [`DeviceBuffer::ptr`](fp8_linear_cuda::DeviceBuffer::ptr) or a tensor's
//! [`DeviceMemory`](fp8_linear_core::DeviceMemory)) and enqueue on the stream of the GPU
//! handle the kernels were loaded with.

use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaModule, PushKernelArg};
use fp8_linear_core::quant::{GroupShape, ScaleDtype};
use fp8_linear_core::{DType, LayerConfig};
use fp8_linear_cuda::cudarc;
use fp8_linear_cuda::{function, CudaError, Gpu, LoadStats};

use super::skeleton::dtype::{float_slot, FLOAT_NAMES};
use super::skeleton::launch::{blocks, elementwise, grid, launch, per_float, THREADS};
use super::skeleton::scratch::Scratch;
use super::sources;

/// The per-token groups of a block layer's activations: `cols` columns share one scale
/// (the weight block's K width), rounded up to a power of two when `ue8m0`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Grouping {
    /// Columns per group: a power of two from 8 to 128.
    pub cols: usize,
    /// Power-of-two (ue8m0) scales.
    pub ue8m0: bool,
}

impl Grouping {
    /// 1 x 128 groups with f32 scales (128 x 128 block checkpoints).
    pub const G128: Grouping = Grouping {
        cols: 128,
        ue8m0: false,
    };

    /// The grouping of a layer whose activations are quantized per 1 x G group; None for
    /// any other activation key.
    pub fn of(config: &LayerConfig) -> Option<Grouping> {
        match config.activation {
            Some(a) => match a.group {
                GroupShape::Group { cols } => Some(Grouping {
                    cols: cols as usize,
                    ue8m0: a.scale_dtype == ScaleDtype::Ue8m0,
                }),
                _ => None,
            },
            None => None,
        }
    }
}

/// Whether a layer's dynamic activation scales are ue8m0 (rounded up to powers of two).
pub fn ue8m0_activations(config: &LayerConfig) -> bool {
    config
        .activation
        .is_some_and(|a| a.dynamic && a.scale_dtype == ScaleDtype::Ue8m0)
}

/// How the 1 x G group scales `[M, G]` are laid out.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ScaleOrder {
    /// `s[m * G + g]` (the CPU layout).
    RowMajor,
    /// `s[g * M + m]` (M fastest, as cuBLASLt's VEC128 mode wants).
    ColMajor,
    /// `s[g * ld + m]` with `ld >= M` (M fastest, rows padded, e.g. to a multiple of 4).
    ColMajorLd(usize),
}

impl ScaleOrder {
    /// The strides `(per row, per group)` of the scale of `(row, g)` for `m` rows of
    /// `groups` scales; an `ld` below `m` is an error.
    pub fn strides(self, m: usize, groups: usize) -> Result<(i64, i64), CudaError> {
        match self {
            ScaleOrder::RowMajor => Ok((groups as i64, 1)),
            ScaleOrder::ColMajor => Ok((1, m as i64)),
            ScaleOrder::ColMajorLd(ld) if ld >= m => Ok((1, ld as i64)),
            ScaleOrder::ColMajorLd(ld) => Err(CudaError::InvalidArgument(format!(
                "scale leading dimension {ld} < M = {m}"
            ))),
        }
    }
}

/// The three cuts of the group quantization kernel (`quant_groups_cCuU` in `cu/quant.cu`):
/// C chunks of 8 values per thread, U units per thread.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum GroupCut {
    /// c1u1: 8 values per thread, the most threads (the fastest below about 2M elements).
    Narrow,
    /// c2u1: 16 values per thread, streamed loads (to about 40M elements).
    Wide,
    /// c2u2: 32 values per thread (above; 16-bit input only).
    Deep,
}

impl GroupCut {
    fn index(self) -> usize {
        self as usize
    }

    /// (chunks of 8 values, units) per thread: C and U of `quant_groups_cCuU`.
    pub fn per_thread(self) -> (usize, usize) {
        match self {
            GroupCut::Narrow => (1, 1),
            GroupCut::Wide => (2, 1),
            GroupCut::Deep => (2, 2),
        }
    }
}

/// One launch of the group quantization kernel: its cut, threads per unit (log2), units per
/// row, block size and grid.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct GroupLaunch {
    /// The kernel.
    pub cut: GroupCut,
    /// log2 of the threads that share a span of columns.
    pub lg_lanes: u32,
    /// Threads per row.
    pub units: usize,
    /// Threads per block.
    pub threads: u32,
    /// Blocks: x over a row's units, y over rows (looped past 65535).
    pub grid: (u32, u32, u32),
}

/// The rows of a masked grouped call that hold tokens: expert `e`'s first `counts[e]` rows of
/// its slab of `slab` rows (each count clamped to `0..=slab`). The group quantization skips
/// the others (their codes and scales are left as they are: no GEMM row that is stored reads
/// them), so a decode call over mostly empty slabs reads and quantizes only its routed rows.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct RoutedRows {
    /// Device address of the i32 counts, one per slab.
    pub counts: u64,
    /// Rows per slab (`M_max`), at least 1.
    pub slab: usize,
}

/// Elements below which the narrow cut is the fastest, and above which the deep one is
/// (measured on the H200, bf16, K = 2048, 7168, 16384, M = 1..16384).
const NARROW_BELOW: usize = 1 << 21;
const DEEP_ABOVE: usize = 40 << 20;

/// The cut of the group quantization for `[m, k]` of `dtype`: by size (the deep cut is
/// for 16-bit input only).
pub fn group_cut(m: usize, k: usize, dtype: DType) -> GroupCut {
    let n = m.saturating_mul(k);
    if n < NARROW_BELOW {
        GroupCut::Narrow
    } else if n <= DEEP_ABOVE || matches!(dtype, DType::F32) {
        GroupCut::Wide
    } else {
        GroupCut::Deep
    }
}

/// How to launch `cut` on `m` rows of `ldq` codes, groups of `group` columns (a power of two
/// from 8 to 128): the threads per span of columns (G / 8 for one chunk per thread,
/// max(G, 16) / 16 for two), the units (threads) per row covering ceil(ldq / span) spans, and
/// the block of 1 to 8 warps that wastes the fewest threads (the most warps among equals).
pub fn group_launch(
    cut: GroupCut,
    m: usize,
    ldq: usize,
    group: usize,
) -> Result<GroupLaunch, CudaError> {
    let (chunks, per_thread) = cut.per_thread();
    let lanes = if chunks == 1 {
        group / 8
    } else {
        group.max(16) / 16
    };
    let span = chunks * 8 * lanes;
    let units = ldq.div_ceil(span) * lanes;
    i32_of("units per row", units)?;
    let (mut warps, mut waste) = (8usize, usize::MAX);
    for w in (1..=8usize).rev() {
        let per = w * 32 * per_thread;
        let left = units.div_ceil(per) * per - units;
        if left < waste {
            (warps, waste) = (w, left);
        }
    }
    let per_block = warps * 32 * per_thread;
    let gx = u32::try_from(units.div_ceil(per_block))
        .map_err(|_| CudaError::InvalidArgument("too many groups per row".into()))?;
    Ok(GroupLaunch {
        cut,
        lg_lanes: lanes.trailing_zeros(),
        units,
        threads: (warps * 32) as u32,
        grid: (gx, m.clamp(1, 65535) as u32, 1),
    })
}

/// The alignment (bytes) of given pre-quantized codes and scales that the GEMMs read in
/// place: cuBLASLt plans assume 256-byte aligned operands (the alignment of the scratch they
/// were planned with), the other kernels 16.
pub const PASS_ALIGN: u64 = 256;

/// The quantization kernels, loaded on one GPU.
pub struct ActQuant {
    gpu: Arc<Gpu>,
    _module: Arc<CudaModule>,
    /// Per cut (GroupCut::index), per input dtype; the deep cut has no f32 kernel.
    groups: [[Option<CudaFunction>; 3]; 3],
    rows: [CudaFunction; 3],
    absmax: [CudaFunction; 3],
    tensor: [CudaFunction; 3],
    pad_rows: CudaFunction,
    silu_mul: [CudaFunction; 3],
    place_scales: CudaFunction,
    stats: LoadStats,
}

/// The index of the input dtype into the function arrays.
fn input_index(d: DType) -> Result<usize, CudaError> {
    float_slot(d).ok_or_else(|| {
        CudaError::InvalidArgument("activation quantization takes f32, f16 or bf16 input".into())
    })
}

fn i32_of(what: &str, v: usize) -> Result<i32, CudaError> {
    i32::try_from(v).map_err(|_| CudaError::InvalidArgument(format!("{what} = {v} exceeds i32")))
}

/// The checks every quantization of `[m, k]` into rows of `ldq` codes starts with: returns
/// the function index of `dtype` and M, K, ldq as the kernels' 32-bit integers.
/// Whether the device helper `load8` may read rows of `k` elements of `dtype` at `x` with
/// 16-byte loads (8 elements of 16-bit input, or 2 x 4 of f32): every row start aligned.
pub(crate) fn vector_loads(x: u64, dtype: DType, k: usize) -> bool {
    let per_16_bytes = if matches!(dtype, DType::F32) { 4 } else { 8 };
    x.is_multiple_of(16) && k.is_multiple_of(per_16_bytes)
}

fn quant_dims(
    what: &str,
    dtype: DType,
    m: usize,
    k: usize,
    ldq: usize,
) -> Result<(usize, i32, i32, i32), CudaError> {
    let t = input_index(dtype)?;
    if ldq < k || m == 0 || k == 0 {
        return Err(CudaError::InvalidArgument(format!(
            "{what} quantization m={m} k={k} ldq={ldq}"
        )));
    }
    Ok((t, i32_of("M", m)?, i32_of("K", k)?, i32_of("ldq", ldq)?))
}

impl ActQuant {
    /// Loads (compiles or reads from the cache) the quantization module on `gpu`.
    pub fn new(gpu: &Arc<Gpu>) -> Result<Self, CudaError> {
        let (module, stats) = gpu.module(&sources::quant_module())?;
        Ok(ActQuant {
            gpu: gpu.clone(),
            groups: {
                let all = |name: &str| -> Result<[Option<CudaFunction>; 3], CudaError> {
                    Ok(per_float(&module, name, None)?.map(Some))
                };
                let [_, f16, bf16] = FLOAT_NAMES.map(|d| format!("quant_groups_c2u2_{d}"));
                [
                    all("quant_groups_c1u1")?,
                    all("quant_groups_c2u1")?,
                    [
                        None,
                        Some(function(&module, &f16)?),
                        Some(function(&module, &bf16)?),
                    ],
                ]
            },
            rows: per_float(&module, "quant_rows", None)?,
            absmax: per_float(&module, "absmax", None)?,
            tensor: per_float(&module, "quant_tensor", None)?,
            pad_rows: function(&module, "pad_rows_u8")?,
            silu_mul: per_float(&module, "silu_mul", None)?,
            place_scales: function(&module, "place_scales")?,
            _module: module,
            stats,
        })
    }

    /// How the module was loaded (memory, disk cache, or compiled).
    pub fn load_stats(&self) -> LoadStats {
        self.stats
    }

    /// Dynamic 1 x G group quantization (`grouping`) of `x` `[m, k]` (`dtype`) into codes
    /// `q` `[m, ldq]` (`ldq >= k`; columns `k..ldq` are zeroed) and f32 scales `s`
    /// (`m * ceil(k/G)`, in `order`); with `routed`, only its rows.
    ///
    /// # Safety
    /// The pointers must address live device memory of this GPU of the sizes above, ready on
    /// the GPU handle's stream (every launch is enqueued there); `routed`'s counts hold
    /// `ceil(m / slab)` i32.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn groups(
        &self,
        x: u64,
        dtype: DType,
        (m, k): (usize, usize),
        grouping: Grouping,
        q: u64,
        ldq: usize,
        s: u64,
        order: ScaleOrder,
        routed: Option<RoutedRows>,
    ) -> Result<(), CudaError> {
        let (t, mi, ki, ldqi) = quant_dims("group", dtype, m, k, ldq)?;
        let (counts, slab) = match routed {
            None => (0u64, 0i32),
            Some(r) => match i32::try_from(r.slab) {
                Ok(slab) if slab > 0 => (r.counts, slab),
                _ => {
                    return Err(CudaError::InvalidArgument(format!(
                        "masked slabs of {} rows (1 to 2^31 - 1)",
                        r.slab
                    )))
                }
            },
        };
        let g = grouping.cols;
        if !(8..=128).contains(&g) || !g.is_power_of_two() {
            return Err(CudaError::InvalidArgument(format!(
                "activation groups of {g} columns (the GPU quantizes groups of 8, 16, 32, 64 or 128)"
            )));
        }
        let groups = k.div_ceil(g);
        let (s_row, s_col) = order.strides(m, groups)?;
        let shape = group_launch(group_cut(m, k, dtype), m, ldq, g)?;
        let vec = vector_loads(x, dtype, k) as i32
            | (((q.is_multiple_of(8) && ldq.is_multiple_of(8)) as i32) << 1);
        let f = self.groups[shape.cut.index()][t].as_ref().ok_or_else(|| {
            CudaError::InvalidArgument(format!(
                "no {:?} group quantization kernel for {dtype:?}",
                shape.cut
            ))
        })?;
        let (gi, groups_i, units) = (g as i32, groups as i32, shape.units as i32);
        let (lg, ue) = (shape.lg_lanes as i32, grouping.ue8m0 as i32);
        let mut b = self.gpu.stream().launch_builder(f);
        b.arg(&x)
            .arg(&q)
            .arg(&s)
            .arg(&mi)
            .arg(&ki)
            .arg(&ldqi)
            .arg(&s_row)
            .arg(&s_col)
            .arg(&gi)
            .arg(&groups_i)
            .arg(&units)
            .arg(&lg)
            .arg(&vec)
            .arg(&ue)
            .arg(&counts)
            .arg(&slab);
        // SAFETY: the caller vouches for the buffers; the arguments match `quant_groups`;
        // the grid covers `units` threads per row and every row.
        unsafe { launch(b, grid(shape.grid, shape.threads, 0), "quant_groups") }
    }

    /// Dynamic per-token quantization: one scale per row into `s` (`m` floats), clamped to
    /// `ub / 448` when `ub` (device address of one f32) is given, then rounded up to a power
    /// of two when `ue8m0`.
    ///
    /// # Safety
    /// As for [`ActQuant::groups`].
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
        ue8m0: bool,
    ) -> Result<(), CudaError> {
        let (t, mi, ki, ldqi) = quant_dims("per-token", dtype, m, k, ldq)?;
        let ub = ub.unwrap_or(0);
        let ue = ue8m0 as i32;
        let mut b = self.gpu.stream().launch_builder(&self.rows[t]);
        b.arg(&x)
            .arg(&q)
            .arg(&s)
            .arg(&mi)
            .arg(&ki)
            .arg(&ldqi)
            .arg(&ub)
            .arg(&ue);
        // SAFETY: the caller vouches for the buffers; the arguments match `quant_rows`.
        unsafe { launch(b, blocks((m.min(65535) as u32, 1, 1)), "quant_rows") }
    }

    /// Per-tensor quantization with one scale: the static scale at device address
    /// `static_scale`, or (when None) the dynamic scale from the tensor's absmax, computed
    /// in `amax_scratch` (device address of one u32) and rounded up to a power of two when
    /// `ue8m0`. The scale is also written to every entry of `s_rows` (`m` floats) and to
    /// `s_one` (one float) when given.
    ///
    /// # Safety
    /// As for [`ActQuant::groups`].
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
        ue8m0: bool,
    ) -> Result<(), CudaError> {
        let (t, mi, ki, ldqi) = quant_dims("per-tensor", dtype, m, k, ldq)?;
        let st = self.gpu.stream();
        let amax = match static_scale {
            Some(_) => 0u64,
            None => {
                // SAFETY: the caller vouches for the one u32 at amax_scratch.
                unsafe { self.gpu.memset_async(amax_scratch, 0, 4) }
                    .map_err(|e| e.within("clearing the absmax"))?;
                let n = (m * k) as i64;
                let grid = ((m * k).div_ceil(THREADS as usize * 8)).clamp(1, 4096) as u32;
                let mut b = st.launch_builder(&self.absmax[t]);
                b.arg(&x).arg(&n).arg(&amax_scratch);
                // SAFETY: x holds m * k elements (the caller); the arguments match `absmax`.
                unsafe { launch(b, blocks((grid, 1, 1)), "absmax")? };
                amax_scratch
            }
        };
        let scale = static_scale.unwrap_or(0);
        let s_rows = s_rows.unwrap_or(0);
        let s_one = s_one.unwrap_or(0);
        let ue = ue8m0 as i32;
        let gx = (ldq.div_ceil(THREADS as usize * 4)).clamp(1, 64) as u32;
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
            .arg(&s_one)
            .arg(&ue);
        // SAFETY: the caller vouches for the buffers; the arguments match `quant_tensor`.
        unsafe { launch(b, blocks((gx, gy, 1)), "quant_tensor") }
    }

    /// SiLU-and-multiply (`cu/quant.cu`'s `silu_mul`, bit-identical to
    /// [`crate::cpu::silu::silu_mul`]): `h` (`[m, k]` f32) = SiLU(gate) * up of `x`
    /// (`[m, 2k]` of `dtype`, gate first).
    ///
    /// # Safety
    /// As for [`ActQuant::groups`]; `x` holds `m * 2k` elements, `h` `m * k` floats.
    pub unsafe fn silu_mul(
        &self,
        x: u64,
        dtype: DType,
        (m, k): (usize, usize),
        h: u64,
    ) -> Result<(), CudaError> {
        let (t, mi, ki, _) = quant_dims("SiLU-and-multiply", dtype, m, k, k)?;
        i32_of("2K", 2 * k)?;
        let mut b = self.gpu.stream().launch_builder(&self.silu_mul[t]);
        b.arg(&x).arg(&h).arg(&mi).arg(&ki);
        // SAFETY: the caller vouches for the buffers; the arguments match `silu_mul`.
        unsafe { launch(b, elementwise(m * k), "silu_mul") }
    }

    /// Pre-quantized codes (`[m, k]` at `src`) as a GEMM reads them: `rows >= m` rows with
    /// row stride `ldk`. Returns `src` itself when it already is that (`rows == m`,
    /// `ldk == k`, aligned to [`PASS_ALIGN`]), else copies it into `dst` (`rows * ldk` bytes; columns
    /// `k..ldk` zeroed, rows past `m` left as they are) and returns `dst`.
    ///
    /// # Safety
    /// As for [`ActQuant::groups`]; `src` holds `m * k` bytes, `dst` `rows * ldk`.
    pub unsafe fn given_codes(
        &self,
        src: u64,
        (m, k): (usize, usize),
        (rows, ldk): (usize, usize),
        dst: u64,
    ) -> Result<u64, CudaError> {
        if rows == m && ldk == k && src.is_multiple_of(PASS_ALIGN) {
            return Ok(src);
        }
        // SAFETY: the caller vouches for both buffers (m <= rows rows are copied).
        unsafe { self.pad_rows(src, dst, m, k, ldk)? };
        Ok(dst)
    }

    /// Pre-quantized scales (`m` rows of `groups`, row-major at `src`; one row for every row
    /// when `broadcast`) in a GEMM's `order`: `src` itself when it already is that (and
    /// aligned to [`PASS_ALIGN`]), else placed into `dst` ([`ActQuant::place_scales`]) and `dst`.
    ///
    /// # Safety
    /// As for [`ActQuant::place_scales`].
    pub unsafe fn given_scales(
        &self,
        src: u64,
        (m, groups, broadcast): (usize, usize, bool),
        dst: u64,
        order: ScaleOrder,
    ) -> Result<u64, CudaError> {
        let column = groups == 1 || m == 1;
        let same = match order {
            ScaleOrder::RowMajor => true,
            ScaleOrder::ColMajor => column,
            ScaleOrder::ColMajorLd(ld) => column && ld == m,
        };
        if same && !broadcast && src.is_multiple_of(PASS_ALIGN) {
            return Ok(src);
        }
        // SAFETY: the caller vouches for both buffers.
        unsafe { self.place_scales(src, (m, groups, broadcast), dst, order)? };
        Ok(dst)
    }

    /// Copies the f32 scales of pre-quantized activations, `m` rows of `groups` at `src`
    /// (row-major; with `broadcast`, one row read for every row), into `dst` in `order`.
    ///
    /// # Safety
    /// As for [`ActQuant::groups`]; `src` holds `groups` floats (broadcast) or `m * groups`,
    /// `dst` the `m` rows of `groups` in `order`.
    pub unsafe fn place_scales(
        &self,
        src: u64,
        (m, groups, broadcast): (usize, usize, bool),
        dst: u64,
        order: ScaleOrder,
    ) -> Result<(), CudaError> {
        let (d_row, d_col) = order.strides(m, groups)?;
        let (mi, gi) = (i32_of("M", m)?, i32_of("groups", groups)?);
        let s_row = if broadcast { 0i64 } else { groups as i64 };
        let mut b = self.gpu.stream().launch_builder(&self.place_scales);
        b.arg(&src)
            .arg(&dst)
            .arg(&mi)
            .arg(&gi)
            .arg(&s_row)
            .arg(&d_row)
            .arg(&d_col);
        // SAFETY: the caller vouches for both buffers; the arguments match `place_scales`.
        unsafe { launch(b, elementwise(m * groups), "place_scales") }
    }

    /// Copies `rows` rows of `cols` bytes from `src` into rows of `ld` bytes at `dst`,
    /// zero-filling columns `cols..ld`.
    ///
    /// # Safety
    /// As for [`ActQuant::groups`]; `src` holds `rows * cols` bytes, `dst` `rows * ld`.
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
        let mut b = self.gpu.stream().launch_builder(&self.pad_rows);
        b.arg(&src).arg(&dst).arg(&r).arg(&c).arg(&l);
        let grid = (
            (ld.div_ceil(THREADS as usize)).clamp(1, 64) as u32,
            rows.clamp(1, 65535) as u32,
            1,
        );
        // SAFETY: the caller vouches for both buffers; the arguments match `pad_rows_u8`.
        unsafe { launch(b, blocks(grid), "pad_rows_u8") }
    }
}

/// A layer's device scratch for its quantized activations: FP8 codes with a padded row
/// stride and the 1 x G group scales, grown on demand and reused across calls.
#[derive(Default)]
pub struct GroupQuantBuffers {
    codes: Scratch<u8>,
    scales: Scratch<f32>,
}

impl GroupQuantBuffers {
    /// Makes the buffers hold `rows` rows of codes with row stride `ldk` and their
    /// `ceil(k / group)` group scales; returns the codes' and the scales' addresses.
    /// Allocates only when they are too small (refused while `gpu`'s stream is being
    /// captured).
    pub fn reserve(
        &mut self,
        gpu: &Arc<Gpu>,
        rows: usize,
        (k, group): (usize, usize),
        ldk: usize,
    ) -> Result<(u64, u64), CudaError> {
        let q = self.codes.get(gpu, rows * ldk)?.ptr();
        let s = self.scales.get(gpu, rows * k.div_ceil(group.max(1)))?.ptr();
        Ok((q, s))
    }

    /// From now on keeps grown buffers alive until dropped (graphs captured with their
    /// addresses stay valid); `prepare` sets it.
    pub fn keep_retired(&mut self) {
        self.codes.keep_retired();
        self.scales.keep_retired();
    }

    /// Quantizes `m` rows of the input `x` (`[m, k]` of `dtype`) per 1 x G group into
    /// buffers sized for `rows >= m` rows (rows past `m` are left as they are): codes with row
    /// stride `ldk >= k`, scales in `order`; with `routed`, only its rows. Returns the codes'
    /// and the scales' addresses.
    ///
    /// # Safety
    /// `x` must hold `m * k` elements of `dtype` on `gpu`, ready on the stream of `quant`'s
    /// GPU handle; `routed` as for [`ActQuant::groups`].
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn quantize(
        &mut self,
        quant: &ActQuant,
        gpu: &Arc<Gpu>,
        x: u64,
        dtype: DType,
        (m, k, rows, ldk): (usize, usize, usize, usize),
        grouping: Grouping,
        order: ScaleOrder,
        routed: Option<RoutedRows>,
    ) -> Result<(u64, u64), CudaError> {
        if rows < m {
            return Err(CudaError::InvalidArgument(format!(
                "quantization buffers for {rows} rows cannot hold {m}"
            )));
        }
        let (q, s) = self.reserve(gpu, rows, (k, grouping.cols), ldk)?;
        // SAFETY: the caller vouches for x and the stream; q holds rows * ldk >= m * ldk
        // bytes and s rows * ceil(k / G) floats on the same GPU (groups checks ldk >= k).
        unsafe { quant.groups(x, dtype, (m, k), grouping, q, ldk, s, order, routed)? };
        Ok((q, s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cut_follows_the_size_and_f32_never_goes_deep() {
        assert_eq!(group_cut(512, 2048, DType::Bf16), GroupCut::Narrow);
        assert_eq!(group_cut(128, 16384, DType::Bf16), GroupCut::Wide);
        assert_eq!(group_cut(4096, 7168, DType::Bf16), GroupCut::Wide);
        assert_eq!(group_cut(16384, 7168, DType::F16), GroupCut::Deep);
        assert_eq!(group_cut(16384, 7168, DType::F32), GroupCut::Wide);
        assert_eq!(group_cut(usize::MAX, 2, DType::Bf16), GroupCut::Deep);
    }

    #[test]
    fn every_launch_covers_its_rows_without_an_empty_block() {
        for cut in [GroupCut::Narrow, GroupCut::Wide, GroupCut::Deep] {
            let (chunks, per_thread) = cut.per_thread();
            for group in [8usize, 16, 32, 64, 128] {
                for ldq in [16usize, 96, 128, 1008, 2048, 7168, 7184, 16384, 16400] {
                    let l = group_launch(cut, 70_000, ldq, group).unwrap();
                    let lanes = 1usize << l.lg_lanes;
                    let span = chunks * 8 * lanes;
                    assert!(span >= group.max(8 * chunks), "{cut:?} G={group}");
                    assert!(l.units.is_multiple_of(lanes));
                    assert!(l.units / lanes * span >= ldq, "{cut:?} G={group} ldq={ldq}");
                    assert!(l.threads.is_multiple_of(32) && (32..=256).contains(&l.threads));
                    let per_block = l.threads as usize * per_thread;
                    assert!(l.grid.0 as usize * per_block >= l.units);
                    assert!((l.grid.0 as usize - 1) * per_block < l.units);
                    assert_eq!(l.grid.1, 65535, "rows past 65535 loop");
                }
            }
        }
        // K = 7168, 1x128 groups, the wide cut: 56 spans of 8 threads, 2 blocks of 7 warps.
        let l = group_launch(GroupCut::Wide, 4096, 7168, 128).unwrap();
        assert_eq!(
            (l.lg_lanes, l.units, l.threads, l.grid),
            (3, 448, 224, (2, 4096, 1))
        );
    }
}
