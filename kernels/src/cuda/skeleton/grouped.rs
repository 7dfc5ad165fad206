//! What the grouped (mixture-of-experts) CUDA kernels share on the host: the stacked experts
//! as one tall block layer, a call's checks and device memory for either call form, its
//! routing's non-empty segments, and their upload with the routing weights in one copy.

use std::sync::Arc;

use fp8_linear_core::grouped::{check_grouped_io, DeviceMasked, GroupedWeights, Routing};
use fp8_linear_core::validate::check_io;
use fp8_linear_core::{
    DeviceMemory, KernelError, LayerConfig, LayerWeights, Tensor, TensorMut, Unsupported,
};
use fp8_linear_cuda::Gpu;

use super::block::{weight_block, ActLayout, BlockLayer, BlockWeights, ROWS_16_ROW_MAJOR};
use super::device_io::{check_row_count, device_io, same_device};
use super::error::{be, be_at};
use super::scratch::Scratch;
use crate::cuda::quant::RoutedRows;

/// Grouped layers whose experts' weight scale rows stack into one tall layer's: N a
/// multiple of the weight block's rows.
pub fn stackable(config: &LayerConfig) -> Result<(), Unsupported> {
    let rows = weight_block(config).0;
    if rows == 0 || !config.n.is_multiple_of(rows) {
        return Err(Unsupported::new(
            "N must be a multiple of the weight block's rows (each expert's scale rows start a \
             block)",
        ));
    }
    Ok(())
}

/// The stack as one layer of `E * N` rows: the same codes and scales (N a multiple of the
/// block rows, [`stackable`], so the experts' scale rows stack into the tall layer's), the
/// `[E, N]` bias viewed as `[1, E * N]`.
pub fn as_one_layer<'a>(
    config: &LayerConfig,
    w: &GroupedWeights<'a>,
) -> Result<(LayerConfig, LayerWeights<'a>), KernelError> {
    let rows = w
        .experts
        .checked_mul(config.n)
        .filter(|&r| r <= i32::MAX as usize - 256)
        .ok_or_else(|| {
            KernelError::shape(
                "weight",
                "[E * N, K] with E * N below 2^31 - 256",
                format!("{} experts of N = {}", w.experts, config.n),
            )
        })?;
    let tall = LayerConfig { n: rows, ..*config };
    let s = &w.stacked;
    let mut one = LayerWeights::new(s.weight, s.weight_scale);
    if let Some(b) = s.bias {
        b.check_contiguous("bias")?;
        one = one.with_bias(Tensor {
            data: b.data,
            shape: [1, rows],
            strides: [rows, 1],
        });
    }
    Ok((tall, one))
}

/// The experts' weights on `gpu` as one tall block layer ([`as_one_layer`], rows padded to
/// 16 bytes, row-major block scales) behind the activation quantization of one expert's
/// layer (`config`, its K groups) in `act` order; also the scale rows' stride in floats.
pub fn stacked_block(
    kernel: &'static str,
    gpu: &Arc<Gpu>,
    config: &LayerConfig,
    weights: &GroupedWeights<'_>,
    act: ActLayout,
) -> Result<(BlockLayer, usize), KernelError> {
    weights.check(config)?;
    let (tall, one) = as_one_layer(config, weights)?;
    let copy = BlockWeights::get(kernel, gpu, &tall, &one, ROWS_16_ROW_MAJOR, None)?;
    let ldbs = copy.scale_ld(&tall);
    Ok((
        BlockLayer::with_weights(kernel, gpu, config, copy, act)?,
        ldbs,
    ))
}

/// A grouped call's rows and device memory: `(m, input, output)`.
pub type GroupedIo = (usize, DeviceMemory, DeviceMemory);

/// Checks a [`Routing`] call of a layer of `experts` experts of `config` on `gpu`
/// ([`check_grouped_io`], then the tensors as device memory of the GPU, rows in 32 bits).
pub fn routed_io(
    (kernel, config, gpu, experts): (&'static str, &LayerConfig, &Gpu, usize),
    input: &Tensor<'_>,
    (routing, route_weights): (&Routing<'_>, Option<&[f32]>),
    output: &TensorMut<'_>,
) -> Result<GroupedIo, KernelError> {
    check_grouped_io(config, experts, input, routing, route_weights, output)?;
    let io = device_io(kernel, config, gpu, input, output)?;
    check_row_count(input, io.0, config.n)?;
    Ok(io)
}

/// Checks a [`DeviceMasked`] call like [`routed_io`] (the routing by
/// [`DeviceMasked::check`], its buffers on `gpu`); also returns its routed rows (the counts
/// over slabs of `M_max` rows).
pub fn masked_io(
    (kernel, config, gpu, experts): (&'static str, &LayerConfig, &Gpu, usize),
    input: &Tensor<'_>,
    routing: &DeviceMasked,
    output: &TensorMut<'_>,
) -> Result<(GroupedIo, RoutedRows), KernelError> {
    let m = check_io(config, input, output)?;
    let m_max = routing.check(experts, m)?;
    let io = device_io(kernel, config, gpu, input, output)?;
    check_row_count(input, io.0, config.n)?;
    same_device("counts", &routing.counts, gpu)?;
    if let Some(w) = &routing.route_weights {
        same_device("routing weights", w, gpu)?;
    }
    let rows = RoutedRows {
        counts: routing.counts.ptr,
        slab: m_max,
    };
    Ok((io, rows))
}

/// The routing's non-empty segments, `(expert, first row, rows)`, in row order (call after
/// the routing was checked for `experts` and `m` rows).
pub fn segments<'r>(
    routing: &'r Routing<'_>,
    experts: usize,
    m: usize,
) -> impl Iterator<Item = (usize, usize, usize)> + 'r {
    routing
        .segments(experts, m)
        .filter(|(_, r)| !r.is_empty())
        .map(|(e, r)| (e, r.start, r.len()))
}

/// A call's routing table on its way to the device: `words` (the kernel's table, filled by
/// the caller), a masked routing's counts, then the routing weights, in one host-to-device
/// copy.
#[derive(Default)]
pub struct RoutingUpload {
    /// The table the kernel reads (i32 words).
    pub words: Vec<i32>,
    bytes: Vec<u8>,
    dev: Scratch<u8>,
}

/// Where [`RoutingUpload::upload`] put a call's routing on the device.
#[derive(Copy, Clone, Debug)]
pub struct Uploaded {
    /// The kernel's table (`words`).
    pub table: u64,
    /// The routing weights (0 for none).
    pub rw: u64,
    /// A masked routing's rows (its counts, uploaded after the table), for the quantization.
    pub routed: Option<RoutedRows>,
}

impl RoutingUpload {
    /// Uploads `words`, then a masked `routing`'s counts (as i32), then, from a 16-byte
    /// boundary, `route_weights` (the call's `m` rows) in one copy from host memory, which a
    /// stream being captured into a CUDA graph refuses (use a [`DeviceMasked`] call there).
    /// Call after the routing was checked for `experts` and `m` rows.
    pub fn upload(
        &mut self,
        kernel: &'static str,
        gpu: &Arc<Gpu>,
        (routing, experts): (&Routing<'_>, usize),
        route_weights: Option<&[f32]>,
        m: usize,
    ) -> Result<Uploaded, KernelError> {
        gpu.refuse_in_capture(|| {
            format!(
                "upload a grouped call's routing from host memory ({kernel} captures a masked \
                 call with its counts on the device: GroupedLinear::forward_masked_on_device)"
            )
        })
        .map_err(be(kernel))?;
        let bytes = &mut self.bytes;
        bytes.clear();
        bytes.extend(self.words.iter().flat_map(|v| v.to_ne_bytes()));
        let counts_at = bytes.len();
        let slab = match routing {
            // (Checked: every count is at most the slab, whose rows fit in i32.)
            Routing::Masked(counts) => {
                bytes.extend(counts.iter().flat_map(|&c| (c as i32).to_ne_bytes()));
                Some(m / experts.max(1))
            }
            _ => None,
        };
        let rw_at = bytes.len().next_multiple_of(16);
        if let Some(w) = route_weights {
            bytes.resize(rw_at, 0);
            bytes.extend(w.iter().flat_map(|v| v.to_ne_bytes()));
        }
        let dev = self.dev.get(gpu, bytes.len()).map_err(be_at(kernel, m))?;
        dev.upload(bytes).map_err(be(kernel))?;
        let at = dev.ptr();
        Ok(Uploaded {
            table: at,
            rw: route_weights.map_or(0, |_| at + rw_at as u64),
            routed: slab.filter(|&s| s > 0).map(|slab| RoutedRows {
                counts: at + counts_at as u64,
                slab,
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fp8_linear_core::DType;

    #[test]
    fn takes_whole_blocks_of_rows_only() {
        let ok = LayerConfig::block_128(2048, 7168, DType::Bf16, DType::Bf16);
        assert!(stackable(&ok).is_ok());
        let ragged = LayerConfig::block_128(2000, 7168, DType::Bf16, DType::Bf16);
        let e = stackable(&ragged).unwrap_err();
        assert!(
            e.to_string().contains("multiple of the weight block"),
            "{e}"
        );
    }

    #[test]
    fn a_stack_too_tall_for_32_bits_is_an_error() {
        let c = LayerConfig::block_128(1 << 20, 128, DType::Bf16, DType::Bf16);
        let (codes, scales) = ([0u8; 128], [1f32; 1]);
        let w = GroupedWeights::new(
            4096,
            LayerWeights::new(Tensor::fp8(&codes, [1, 128]), Tensor::f32(&scales, [1, 1])),
        );
        let e = as_one_layer(&c, &w).unwrap_err().to_string();
        assert!(e.contains("2^31"), "{e}");
    }

    #[test]
    fn segments_skip_empty_experts() {
        let offsets = [0, 3, 3, 7];
        let r = Routing::Offsets(&offsets);
        r.check(3, 8).unwrap();
        let s: Vec<_> = segments(&r, 3, 8).collect();
        assert_eq!(s, [(0, 0, 3), (2, 3, 4)]);
    }
}
