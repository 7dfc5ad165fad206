//! Tensor views for host and device memory, shared by CPU and GPU kernels.
//!
//! A view is a dtype, a 2-D shape, strides in elements, and a buffer that is either host
//! memory or a device allocation. Device memory is an opaque handle here: the `cuda` crate
//! owns the allocations and hands out [`DeviceMemory`] for them.

use half::{bf16, f16};

use crate::dtype::DType;
use crate::error::KernelError;
use crate::param::LayerParam;

/// Device memory as an opaque handle: a raw device address, its size and the device
/// ordinal. The allocation's owner keeps it alive. Work on it is ordered on the stream of
/// the layer it is handed to (the stream the layer was built with): the caller makes sure
/// the memory is ready on that stream.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct DeviceMemory {
    /// Device address of the first element.
    pub ptr: u64,
    /// Size of the allocation from `ptr`, in bytes.
    pub bytes: usize,
    /// CUDA device ordinal.
    pub ordinal: u32,
}

/// Read-only element storage.
#[derive(Copy, Clone, Debug)]
pub enum Storage<'a> {
    /// Host f32.
    F32(&'a [f32]),
    /// Host f16.
    F16(&'a [f16]),
    /// Host bf16.
    Bf16(&'a [bf16]),
    /// Host e4m3fn bytes.
    F8E4m3(&'a [u8]),
    /// Device memory holding elements of the given dtype.
    Device(DeviceMemory, DType),
}

/// Writable element storage.
#[derive(Debug)]
pub enum StorageMut<'a> {
    /// Host f32.
    F32(&'a mut [f32]),
    /// Host f16.
    F16(&'a mut [f16]),
    /// Host bf16.
    Bf16(&'a mut [bf16]),
    /// Host e4m3fn bytes.
    F8E4m3(&'a mut [u8]),
    /// Device memory holding elements of the given dtype.
    Device(DeviceMemory, DType),
}

impl Storage<'_> {
    /// Element type.
    pub fn dtype(&self) -> DType {
        match self {
            Storage::F32(_) => DType::F32,
            Storage::F16(_) => DType::F16,
            Storage::Bf16(_) => DType::Bf16,
            Storage::F8E4m3(_) => DType::F8E4m3,
            Storage::Device(_, d) => *d,
        }
    }

    /// Number of elements the buffer holds.
    pub fn len(&self) -> usize {
        match self {
            Storage::F32(s) => s.len(),
            Storage::F16(s) => s.len(),
            Storage::Bf16(s) => s.len(),
            Storage::F8E4m3(s) => s.len(),
            Storage::Device(m, d) => m.bytes / d.size_bytes(),
        }
    }

    /// Whether the buffer holds no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl StorageMut<'_> {
    /// Element type.
    pub fn dtype(&self) -> DType {
        match self {
            StorageMut::F32(_) => DType::F32,
            StorageMut::F16(_) => DType::F16,
            StorageMut::Bf16(_) => DType::Bf16,
            StorageMut::F8E4m3(_) => DType::F8E4m3,
            StorageMut::Device(_, d) => *d,
        }
    }

    /// Number of elements the buffer holds.
    pub fn len(&self) -> usize {
        match self {
            StorageMut::F32(s) => s.len(),
            StorageMut::F16(s) => s.len(),
            StorageMut::Bf16(s) => s.len(),
            StorageMut::F8E4m3(s) => s.len(),
            StorageMut::Device(m, d) => m.bytes / d.size_bytes(),
        }
    }

    /// Whether the buffer holds no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A read-only 2-D tensor view.
#[derive(Copy, Clone, Debug)]
pub struct Tensor<'a> {
    /// The elements.
    pub data: Storage<'a>,
    /// `[rows, cols]`.
    pub shape: [usize; 2],
    /// Strides in elements, `[row stride, col stride]`.
    pub strides: [usize; 2],
}

/// A writable 2-D tensor view.
#[derive(Debug)]
pub struct TensorMut<'a> {
    /// The elements.
    pub data: StorageMut<'a>,
    /// `[rows, cols]`.
    pub shape: [usize; 2],
    /// Strides in elements, `[row stride, col stride]`.
    pub strides: [usize; 2],
}

/// Elements a view with this shape and these strides reaches (0 for an empty shape); None
/// when that count does not fit in a `usize`.
fn span(shape: [usize; 2], strides: [usize; 2]) -> Option<usize> {
    if shape[0] == 0 || shape[1] == 0 {
        Some(0)
    } else {
        (shape[0] - 1)
            .checked_mul(strides[0])?
            .checked_add((shape[1] - 1).checked_mul(strides[1])?)?
            .checked_add(1)
    }
}

macro_rules! host_ctor {
    ($name:ident, $mutname:ident, $t:ty, $var:ident) => {
        impl<'a> Tensor<'a> {
            #[doc = concat!("A contiguous row-major view of host `", stringify!($t), "` data.")]
            pub fn $name(data: &'a [$t], shape: [usize; 2]) -> Self {
                Tensor {
                    data: Storage::$var(data),
                    shape,
                    strides: [shape[1], 1],
                }
            }
        }
        impl<'a> TensorMut<'a> {
            #[doc = concat!("A contiguous row-major view of mutable host `", stringify!($t), "` data.")]
            pub fn $mutname(data: &'a mut [$t], shape: [usize; 2]) -> Self {
                TensorMut {
                    data: StorageMut::$var(data),
                    shape,
                    strides: [shape[1], 1],
                }
            }
        }
    };
}

host_ctor!(f32, f32, f32, F32);
host_ctor!(f16, f16, f16, F16);
host_ctor!(bf16, bf16, bf16, Bf16);
host_ctor!(fp8, fp8, u8, F8E4m3);

impl<'a> Tensor<'a> {
    /// A contiguous view of device memory.
    pub fn device(mem: DeviceMemory, dtype: DType, shape: [usize; 2]) -> Self {
        Tensor {
            data: Storage::Device(mem, dtype),
            shape,
            strides: [shape[1], 1],
        }
    }

    /// Element type.
    pub fn dtype(&self) -> DType {
        self.data.dtype()
    }

    /// Whether the view is contiguous row-major.
    pub fn is_contiguous(&self) -> bool {
        self.strides == [self.shape[1], 1] || self.shape[0] <= 1 && self.strides[1] == 1
    }

    /// Checks that the view is contiguous row-major and its buffer holds every element it
    /// reaches.
    pub fn check_contiguous(&self, what: &'static str) -> Result<(), KernelError> {
        check_layout(what, self.shape, self.strides, self.data.len(), true)
    }

    /// Checks the shape against `expected`.
    pub fn check_shape(&self, what: &'static str, expected: [usize; 2]) -> Result<(), KernelError> {
        if self.shape != expected {
            return Err(KernelError::shape(
                what,
                format!("{expected:?}"),
                format!("{:?}", self.shape),
            ));
        }
        Ok(())
    }

    /// Checks that the buffer holds every element the shape and strides reach.
    pub fn check_bounds(&self, what: &'static str) -> Result<(), KernelError> {
        check_layout(what, self.shape, self.strides, self.data.len(), false)
    }
}

impl<'a> TensorMut<'a> {
    /// A contiguous view of writable device memory.
    pub fn device(mem: DeviceMemory, dtype: DType, shape: [usize; 2]) -> Self {
        TensorMut {
            data: StorageMut::Device(mem, dtype),
            shape,
            strides: [shape[1], 1],
        }
    }

    /// Element type.
    pub fn dtype(&self) -> DType {
        self.data.dtype()
    }

    /// Checks that the view is contiguous row-major and its buffer is long enough.
    pub fn check_contiguous(&self, what: &'static str) -> Result<(), KernelError> {
        check_layout(what, self.shape, self.strides, self.data.len(), true)
    }

    /// Checks the shape against `expected`.
    pub fn check_shape(&self, what: &'static str, expected: [usize; 2]) -> Result<(), KernelError> {
        if self.shape != expected {
            return Err(KernelError::shape(
                what,
                format!("{expected:?}"),
                format!("{:?}", self.shape),
            ));
        }
        Ok(())
    }
}

fn check_layout(
    what: &'static str,
    shape: [usize; 2],
    strides: [usize; 2],
    len: usize,
    contiguous: bool,
) -> Result<(), KernelError> {
    if contiguous
        && shape[0] > 0
        && shape[1] > 0
        && strides != [shape[1], 1]
        && !(shape[0] == 1 && strides[1] == 1)
    {
        return Err(KernelError::NonContiguous {
            what,
            cols: shape[1],
            strides,
        });
    }
    let Some(needed) = span(shape, strides) else {
        return Err(KernelError::TooLarge {
            what,
            detail: format!(
                "shape {shape:?} with strides {strides:?} spans more than 2^64 elements"
            ),
        });
    };
    if needed > len {
        return Err(KernelError::BufferTooSmall { what, needed, len });
    }
    Ok(())
}

/// The tensors of one linear layer, by the parameter names kernels declare in `params`.
#[derive(Copy, Clone, Debug)]
pub struct LayerWeights<'a> {
    /// FP8 weight `[N, K]`.
    pub weight: Tensor<'a>,
    /// Weight scales, shaped per the weight quant key (`[ceil(N/128), ceil(K/128)]` for
    /// blocks, `[N, 1]` per channel, `[1, 1]` per tensor).
    pub weight_scale: Tensor<'a>,
    /// Static activation scale `[1, 1]` (static activation keys only).
    pub input_scale: Option<Tensor<'a>>,
    /// Upper bound for dynamic per-token activation scales `[1, 1]`.
    pub input_scale_ub: Option<Tensor<'a>>,
    /// Optional bias `[1, N]`.
    pub bias: Option<Tensor<'a>>,
}

impl<'a> LayerWeights<'a> {
    /// The weight and its scales, without input scales or bias.
    pub fn new(weight: Tensor<'a>, weight_scale: Tensor<'a>) -> Self {
        LayerWeights {
            weight,
            weight_scale,
            input_scale: None,
            input_scale_ub: None,
            bias: None,
        }
    }

    /// With a static input scale `[1, 1]`.
    pub fn with_input_scale(mut self, t: Tensor<'a>) -> Self {
        self.input_scale = Some(t);
        self
    }

    /// With an upper bound for dynamic per-token scales `[1, 1]`.
    pub fn with_input_scale_ub(mut self, t: Tensor<'a>) -> Self {
        self.input_scale_ub = Some(t);
        self
    }

    /// With a bias `[1, N]`.
    pub fn with_bias(mut self, t: Tensor<'a>) -> Self {
        self.bias = Some(t);
        self
    }

    /// The tensor of a layer parameter, if present.
    pub fn get(&self, param: LayerParam) -> Option<Tensor<'a>> {
        match param {
            LayerParam::Weight => Some(self.weight),
            LayerParam::WeightScale => Some(self.weight_scale),
            LayerParam::InputScale => self.input_scale,
            LayerParam::InputScaleUb => self.input_scale_ub,
            LayerParam::Bias => self.bias,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_checks() {
        let v = vec![0f32; 10];
        let t = Tensor::f32(&v, [2, 5]);
        assert!(t.check_contiguous("x").is_ok());
        let short = Tensor::f32(&v[..9], [2, 5]);
        assert!(matches!(
            short.check_contiguous("x"),
            Err(KernelError::BufferTooSmall {
                needed: 10,
                len: 9,
                ..
            })
        ));
        let strided = Tensor {
            strides: [1, 2],
            ..t
        };
        assert!(matches!(
            strided.check_contiguous("x"),
            Err(KernelError::NonContiguous { .. })
        ));
        assert!(t.check_shape("x", [5, 2]).is_err());
        let huge = Tensor::f32(&v, [usize::MAX / 2, usize::MAX / 2]);
        assert!(matches!(
            huge.check_contiguous("x"),
            Err(KernelError::TooLarge { what: "x", .. })
        ));
    }
}
