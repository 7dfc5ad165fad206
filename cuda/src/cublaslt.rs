//! cuBLASLt for FP8: one handle and a 32 MiB workspace per device (one more per extra stream
//! that runs GEMMs, so GEMMs on different streams never share scratch), RAII wrappers for every
//! descriptor, and an FP8 (e4m3) GEMM with per-tensor, outer-vector (per-row / per-column)
//! or 1x128 / 128x128 block scales.
//!
//! Layout: cuBLASLt is column-major and FP8 needs "TN". The row-major product
//! `out[M, N] = act[M, K] @ weight[N, K]^T` is computed as the column-major
//! `D[N, M] = op(A)[N, K] @ B[K, M]` with A = the weight (transposed), B = the activations.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Arc, Mutex};

use cudarc::cublaslt::result as lt;
use cudarc::cublaslt::sys;
use cudarc::driver::{CudaContext, CudaSlice, CudaStream, DevicePtr};
use fp8_linear_core::DType;

use crate::error::CudaError;
use crate::probe;

/// Bytes of one cuBLASLt workspace (one per device, plus one per extra stream).
pub const WORKSPACE_BYTES: usize = 32 << 20;

/// The device's cuBLASLt handle and workspaces (the default stream's, created with the
/// handle, and one per other stream that runs a GEMM: work on one stream is ordered, so a
/// workspace per stream is never used by two GEMMs at once).
pub struct Lt {
    handle: Handle,
    /// Per raw stream: the workspace and its address (read once, so that a GEMM touches no
    /// cudarc event).
    workspaces: Mutex<HashMap<u64, (CudaSlice<u8>, u64)>>,
    stream: Arc<CudaStream>,
    ctx: Arc<CudaContext>,
}

impl std::fmt::Debug for Lt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lt").finish_non_exhaustive()
    }
}

struct Handle(sys::cublasLtHandle_t);
// SAFETY: cuBLASLt handles may be used from any thread; the workspace is behind a mutex.
unsafe impl Send for Handle {}
unsafe impl Sync for Handle {}
impl Drop for Handle {
    fn drop(&mut self) {
        // SAFETY: created by create_handle, destroyed once.
        let _ = unsafe { lt::destroy_handle(self.0) };
    }
}

/// The version of the loaded cuBLASLt (e.g. 130100 for 13.1.0).
pub fn version() -> Result<usize, CudaError> {
    probe::cublaslt()?;
    // SAFETY: a plain query.
    Ok(unsafe { sys::cublasLtGetVersion() })
}

impl Lt {
    pub(crate) fn new(ctx: Arc<CudaContext>, stream: Arc<CudaStream>) -> Result<Self, CudaError> {
        probe::cublaslt()?;
        ctx.bind_to_thread()
            .map_err(|e| CudaError::driver("binding the context", e))?;
        let handle =
            Handle(lt::create_handle().map_err(|e| CudaError::cublas("cublasLtCreate", e))?);
        let workspace = stream
            .alloc_zeros::<u8>(WORKSPACE_BYTES)
            .map_err(|e| CudaError::driver("allocating the cuBLASLt workspace", e))?;
        // Keyed by the handle's own stream, the one its GEMMs run on.
        let key = stream.cu_stream() as u64;
        let ptr = workspace.device_ptr(&stream).0;
        Ok(Lt {
            handle,
            workspaces: Mutex::new(HashMap::from([(key, (workspace, ptr))])),
            stream,
            ctx,
        })
    }

    /// The workspace of `stream` (raw `CUstream`), allocated on first use: the allocation is
    /// ordered on the handle's stream and waited for, so it is refused with
    /// [`CudaError::Capturing`] while `stream` is being captured. Returns its address.
    fn workspace(&self, stream: u64) -> Result<u64, CudaError> {
        let mut map = self.workspaces.lock().expect("workspace lock poisoned");
        if let Some((_, p)) = map.get(&stream) {
            return Ok(*p);
        }
        self.ctx
            .bind_to_thread()
            .map_err(|e| CudaError::driver("binding the context", e))?;
        // SAFETY: a query on a stream of this context (the caller's GEMM stream).
        let status = unsafe { cudarc::driver::result::stream::is_capturing(stream as _) }
            .map_err(|e| CudaError::driver("querying the stream's capture status", e))?;
        if status != cudarc::driver::sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE {
            return Err(CudaError::Capturing {
                what: "allocate a cuBLASLt workspace for a new stream".into(),
            });
        }
        let buf = self
            .stream
            .alloc_zeros::<u8>(WORKSPACE_BYTES)
            .map_err(|e| {
                CudaError::driver("allocating a cuBLASLt workspace for another stream", e)
            })?;
        // The allocation is ordered on the handle's stream; make it complete before `stream`
        // uses it.
        self.stream
            .synchronize()
            .map_err(|e| CudaError::driver("synchronizing a new workspace", e))?;
        let p = buf.device_ptr(&self.stream).0;
        map.insert(stream, (buf, p));
        Ok(p)
    }

    /// Makes the workspace of `stream` (raw `CUstream`) ready, outside a capture, so that
    /// GEMMs on it allocate nothing.
    pub fn reserve_workspace(&self, stream: u64) -> Result<(), CudaError> {
        self.workspace(stream).map(|_| ())
    }
}

/// How one operand's FP8 values are scaled.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ScaleMode {
    /// One f32 scale for the whole operand.
    Scalar,
    /// One f32 per row of the row-major operand (per token / per output channel).
    OuterVec,
    /// One f32 per 1 x 128 group (activations): `[M, ceil(K/128)]` with M the fast index.
    Vec128,
    /// One f32 per 128 x 128 block (weights): `[ceil(N/128), ceil(K/128)]` row-major with the
    /// K-block count rounded up to a multiple of 4.
    Blk128x128,
}

impl ScaleMode {
    fn raw(self) -> sys::cublasLtMatmulMatrixScale_t {
        use sys::cublasLtMatmulMatrixScale_t as S;
        match self {
            ScaleMode::Scalar => S::CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F,
            ScaleMode::OuterVec => S::CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F,
            ScaleMode::Vec128 => S::CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F,
            ScaleMode::Blk128x128 => S::CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F,
        }
    }
}

/// The shape of an FP8 GEMM: `out[m, n] = act[m, k] @ weight[n, k]^T`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Fp8GemmShape {
    /// Rows of the activations / output.
    pub m: usize,
    /// Output features.
    pub n: usize,
    /// Reduction length (a multiple of 16).
    pub k: usize,
    /// Row stride of the weight, bytes (>= k, multiple of 16).
    pub ld_weight: usize,
    /// Row stride of the activations, bytes (>= k, multiple of 16).
    pub ld_act: usize,
    /// Output dtype (bf16, f16 or f32); the output is contiguous `[m, n]`.
    pub out: DType,
    /// Weight scale mode.
    pub weight_scale: ScaleMode,
    /// Activation scale mode.
    pub act_scale: ScaleMode,
}

struct Desc(sys::cublasLtMatmulDesc_t);
impl Drop for Desc {
    fn drop(&mut self) {
        // SAFETY: created once, destroyed once.
        let _ = unsafe { lt::destroy_matmul_desc(self.0) };
    }
}
struct Layout(sys::cublasLtMatrixLayout_t);
impl Drop for Layout {
    fn drop(&mut self) {
        // SAFETY: created once, destroyed once.
        let _ = unsafe { lt::destroy_matrix_layout(self.0) };
    }
}
struct Pref(sys::cublasLtMatmulPreference_t);
impl Drop for Pref {
    fn drop(&mut self) {
        // SAFETY: created once, destroyed once.
        let _ = unsafe { lt::destroy_matmul_pref(self.0) };
    }
}

/// A planned FP8 GEMM (descriptors and the heuristic's algorithm), reusable for every call
/// of the same shape.
pub struct Fp8GemmPlan {
    shape: Fp8GemmShape,
    desc: Desc,
    a: Layout,
    b: Layout,
    d: Layout,
    algo: sys::cublasLtMatmulAlgo_t,
    lt: Arc<Lt>,
}

// SAFETY: the descriptors are plain host objects owned by the plan; cuBLASLt allows their use
// from any thread as long as calls on one plan do not race (the plan is used through &mut).
unsafe impl Send for Fp8GemmPlan {}

fn set_desc<T>(
    d: &Desc,
    attr: sys::cublasLtMatmulDescAttributes_t,
    v: &T,
    what: &str,
) -> Result<(), CudaError> {
    // SAFETY: v points to a live T of the size passed.
    unsafe {
        lt::set_matmul_desc_attribute(
            d.0,
            attr,
            v as *const T as *const c_void,
            std::mem::size_of::<T>(),
        )
    }
    .map_err(|e| CudaError::cublas(format!("setting {what}"), e))
}

fn out_type(d: DType) -> Result<sys::cudaDataType, CudaError> {
    Ok(match d {
        DType::Bf16 => sys::cudaDataType::CUDA_R_16BF,
        DType::F16 => sys::cudaDataType::CUDA_R_16F,
        DType::F32 => sys::cudaDataType::CUDA_R_32F,
        DType::F8E4m3 => {
            return Err(CudaError::InvalidArgument(
                "FP8 output is not supported".into(),
            ))
        }
    })
}

impl Fp8GemmPlan {
    /// Creates the descriptors and asks the heuristic for an algorithm. The scale pointers
    /// (device addresses) are set before the query: cuBLASLt rejects vector and block scale
    /// modes without them; [`Fp8GemmPlan::run`] may pass others later. An unsupported
    /// combination (scale modes on this GPU, alignment) is a `Cublas` error naming it.
    pub fn new(
        lt: &Arc<Lt>,
        shape: Fp8GemmShape,
        weight_scales: u64,
        act_scales: u64,
    ) -> Result<Self, CudaError> {
        use sys::cublasLtMatmulDescAttributes_t as A;
        let s = shape;
        if !s.k.is_multiple_of(16)
            || !s.ld_weight.is_multiple_of(16)
            || !s.ld_act.is_multiple_of(16)
            || s.m == 0
            || s.n == 0
        {
            return Err(CudaError::InvalidArgument(format!(
                "cuBLASLt FP8 needs K and leading dimensions that are multiples of 16 and non-empty M, N: {s:?}"
            )));
        }
        let ctx = format!(
            "FP8 GEMM M={} N={} K={} weight scales {:?}, activation scales {:?}, {} out",
            s.m, s.n, s.k, s.weight_scale, s.act_scale, s.out
        );
        let desc = Desc(
            lt::create_matmul_desc(
                sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                sys::cudaDataType::CUDA_R_32F,
            )
            .map_err(|e| CudaError::cublas(format!("create desc for {ctx}"), e))?,
        );
        let trans: i32 = 1; // CUBLAS_OP_T
        let no_trans: i32 = 0;
        set_desc(&desc, A::CUBLASLT_MATMUL_DESC_TRANSA, &trans, "TRANSA")?;
        set_desc(&desc, A::CUBLASLT_MATMUL_DESC_TRANSB, &no_trans, "TRANSB")?;
        let (wm, am) = (s.weight_scale.raw(), s.act_scale.raw());
        set_desc(
            &desc,
            A::CUBLASLT_MATMUL_DESC_A_SCALE_MODE,
            &wm,
            "A scale mode",
        )?;
        set_desc(
            &desc,
            A::CUBLASLT_MATMUL_DESC_B_SCALE_MODE,
            &am,
            "B scale mode",
        )?;
        set_desc(
            &desc,
            A::CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
            &weight_scales,
            "A scale pointer",
        )?;
        set_desc(
            &desc,
            A::CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
            &act_scales,
            "B scale pointer",
        )?;
        let e4m3 = sys::cudaDataType::CUDA_R_8F_E4M3;
        let mk = |t, rows: usize, cols: usize, ld: usize, what: &str| {
            lt::create_matrix_layout(t, rows as u64, cols as u64, ld as i64)
                .map(Layout)
                .map_err(|e| CudaError::cublas(format!("{what} layout for {ctx}"), e))
        };
        let a = mk(e4m3, s.k, s.n, s.ld_weight, "weight")?;
        let b = mk(e4m3, s.k, s.m, s.ld_act, "activation")?;
        let d = mk(out_type(s.out)?, s.n, s.m, s.n, "output")?;
        let pref =
            Pref(lt::create_matmul_pref().map_err(|e| CudaError::cublas("create preference", e))?);
        let ws = WORKSPACE_BYTES as u64;
        // SAFETY: ws is a live u64.
        unsafe {
            lt::set_matmul_pref_attribute(
                pref.0,
                sys::cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                &ws as *const u64 as *const c_void,
                8,
            )
        }
        .map_err(|e| CudaError::cublas("setting the workspace preference", e))?;
        // SAFETY: every descriptor is live.
        let heur = unsafe {
            lt::get_matmul_algo_heuristic(lt.handle.0, desc.0, a.0, b.0, d.0, d.0, pref.0)
        }
        .map_err(|e| CudaError::cublas(format!("no algorithm for {ctx}"), e))?;
        Ok(Fp8GemmPlan {
            shape,
            desc,
            a,
            b,
            d,
            algo: heur.algo,
            lt: lt.clone(),
        })
    }

    /// The shape this plan was made for.
    pub fn shape(&self) -> &Fp8GemmShape {
        &self.shape
    }

    /// Runs the GEMM on `stream` (raw `CUstream`, 0 for the default stream). Host work only
    /// besides the enqueued GEMM (no allocation, no synchronization) once `stream` has its
    /// workspace (the handle's own stream has it from the start; see
    /// [`Lt::reserve_workspace`]); a stream without one that is being captured is
    /// [`CudaError::Capturing`].
    ///
    /// # Safety
    /// Every pointer must address device memory of the plan's context large enough for the
    /// shape and scale modes, and stay valid until the work on `stream` completes.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn run(
        &mut self,
        weight: u64,
        weight_scales: u64,
        act: u64,
        act_scales: u64,
        out: u64,
        stream: u64,
    ) -> Result<(), CudaError> {
        use sys::cublasLtMatmulDescAttributes_t as A;
        set_desc(
            &self.desc,
            A::CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
            &weight_scales,
            "A scale pointer",
        )?;
        set_desc(
            &self.desc,
            A::CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
            &act_scales,
            "B scale pointer",
        )?;
        let alpha = 1f32;
        let beta = 0f32;
        let ws_ptr = self.lt.workspace(stream)?;
        lt::matmul(
            self.lt.handle.0,
            self.desc.0,
            &alpha as *const f32 as *const c_void,
            &beta as *const f32 as *const c_void,
            weight as *const c_void,
            self.a.0,
            act as *const c_void,
            self.b.0,
            out as *const c_void,
            self.d.0,
            out as *mut c_void,
            self.d.0,
            &self.algo,
            ws_ptr as *mut c_void,
            WORKSPACE_BYTES,
            stream as sys::cudaStream_t,
        )
        .map_err(|e| CudaError::cublas("cublasLtMatmul", e))
    }
}
