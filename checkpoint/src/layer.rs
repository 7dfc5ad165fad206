//! A quantized linear layer found in a checkpoint, and its tensors ready for a kernel.

use fp8_linear_core::{LayerConfig, LayerWeights, Tensor};

/// One FP8 linear layer of a checkpoint: the config it implies and its tensor names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuantLayer {
    /// Module name (`model.layers.0.self_attn.q_proj`).
    pub name: String,
    /// The layer config the checkpoint implies (weight and activation keys, N, K, dtypes).
    pub config: LayerConfig,
    /// Name of the FP8 weight tensor `[N, K]`.
    pub weight: String,
    /// Name of the weight scale tensor (`*.weight_scale_inv` or `*.weight_scale`).
    pub weight_scale: String,
    /// Shape of the weight scale as kernels see it (`[ceil(N/Bn), ceil(K/Bk)]`, `[N, 1]`,
    /// `[1, 1]`).
    pub scale_shape: [usize; 2],
    /// Name of the static input scale, for static activation schemes.
    pub input_scale: Option<String>,
    /// Name of the bias, when the layer has one.
    pub bias: Option<String>,
}

impl QuantLayer {
    /// Bytes of the FP8 weight (`N * K`).
    pub fn weight_bytes(&self) -> usize {
        self.config.n * self.config.k
    }

    /// Bytes of the weight scales once widened to f32.
    pub fn scale_bytes(&self) -> usize {
        self.scale_shape[0] * self.scale_shape[1] * 4
    }
}

/// A layer's tensors: the FP8 weight as a zero-copy view into the mapped file, scales
/// (and bias) copied into owned f32 (they are small, and mapped f32 data may be unaligned).
#[derive(Clone, Debug)]
pub struct LayerTensors<'a> {
    /// FP8 e4m3 weight codes `[N, K]`, row-major, borrowed from the shard.
    pub weight: &'a [u8],
    /// `[N, K]`.
    pub shape: [usize; 2],
    /// Weight scales, row-major in `scale_shape`.
    pub scales: Vec<f32>,
    /// Shape of `scales`.
    pub scale_shape: [usize; 2],
    /// The static input scale.
    pub input_scale: Option<[f32; 1]>,
    /// The bias `[N]`.
    pub bias: Option<Vec<f32>>,
}

impl LayerTensors<'_> {
    /// The tensors as kernels take them.
    pub fn view(&self) -> LayerWeights<'_> {
        LayerWeights {
            weight: Tensor::fp8(self.weight, self.shape),
            weight_scale: Tensor::f32(&self.scales, self.scale_shape),
            input_scale: self.input_scale.as_ref().map(|s| Tensor::f32(s, [1, 1])),
            input_scale_ub: None,
            bias: self
                .bias
                .as_deref()
                .map(|b| Tensor::f32(b, [1, self.shape[0]])),
        }
    }
}
