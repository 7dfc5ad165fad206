//! Tensor-parallel runs for the tests: a layer split into shards the way engines split it
//! (`fp8_linear::tensor_parallel`), each shard's host weights cut from the whole layer's,
//! each shard run by a caller-supplied forward (on the CPU, or on the GPU of its rank), and
//! the outputs put together on the host (columns for a column split, a sum for a row
//! split), next to the same gathering of each shard's own f64 reference.

use fp8_linear::tensor_parallel::{shard, Shard, Split};
use fp8_linear::GroupShape;

use crate::layers::{reference_rows, HostLayer};

/// One shard's run: its plan and the kernel that ran it.
pub struct ShardRun {
    /// The shard.
    pub shard: Shard,
    /// The kernel that ran it.
    pub kernel: &'static str,
}

/// What the shards gave, put together as the whole layer's output `[m, n]`.
pub struct Sharded {
    /// The shards' outputs, gathered.
    pub out: Vec<f32>,
    /// Each shard's f64 reference (its own layer on its own activations), gathered: what a
    /// tensor-parallel run computes exactly (a row shard quantizes its own activations).
    pub reference: Vec<f64>,
    /// The shard runs, by rank.
    pub runs: Vec<ShardRun>,
}

/// A forward: handed the shard's rank, its layer (config and host weights) and its
/// activations `[m, K_shard]` (f32 values), it returns the output `[m, N_shard]` as f32 and
/// the name of the kernel that ran it.
pub type Forward<'f> =
    dyn FnMut(usize, &HostLayer, &[f32]) -> Result<(Vec<f32>, &'static str), String> + 'f;

/// Runs `layer` split `tp` ways along `split` on the activations `x` `[m, k]`, each shard
/// through `forward` (see [`Sharded`]).
pub fn run_sharded(
    layer: &HostLayer,
    x: &[f32],
    m: usize,
    split: Split,
    tp: usize,
    forward: &mut Forward<'_>,
) -> Result<Sharded, String> {
    let c = &layer.config;
    let shards = shard(c, split, tp).map_err(|e| e.to_string())?;
    let mut out = vec![0f32; m * c.n];
    let mut reference = vec![0f64; m * c.n];
    let mut runs = Vec::with_capacity(tp);
    let rows: Vec<usize> = (0..m).collect();
    for s in shards {
        let w = s
            .weights(c, &layer.codes, &layer.scales, layer.bias.as_deref())
            .map_err(|e| e.to_string())?;
        let part_layer = HostLayer {
            config: w.config,
            codes: w.codes,
            scales: w.scales,
            input_scale: layer.input_scale,
            bias: w.bias,
        };
        let xs = s.input(x, m, c.k).map_err(|e| e.to_string())?;
        let what = |e: String| format!("rank {} ({}): {e}", s.rank, s.config);
        let (part, kernel) = forward(s.rank, &part_layer, &xs).map_err(what)?;
        let want = reference_rows(&s.config, &part_layer, &xs, m, &rows)
            .map_err(|e| what(e.to_string()))?;
        s.gather(&part, m, &mut out, c.n)
            .map_err(|e| e.to_string())?;
        s.gather(&want, m, &mut reference, c.n)
            .map_err(|e| e.to_string())?;
        runs.push(ShardRun { shard: s, kernel });
    }
    Ok(Sharded {
        out,
        reference,
        runs,
    })
}

impl Sharded {
    /// The fraction of each row's activations the row shards quantize differently from the
    /// whole layer: the groups a shard boundary cuts (one per shard that starts inside a
    /// group) over the groups of a row; every activation of a dynamic per-token or
    /// per-tensor layer (each shard's own scale); nothing for a column split or a static
    /// scale. The gathered output differs from the whole layer's by about the FP8
    /// quantization noise (~3e-2) times its square root.
    pub fn requantized(&self, whole: &fp8_linear::LayerConfig, split: Split) -> f64 {
        if split == Split::Column {
            return 0.0;
        }
        match whole.activation.map(|a| (a.group, a.dynamic)) {
            Some((GroupShape::Group { cols }, _)) => {
                let cut = self.runs.iter().filter(|r| r.shard.lead_pad > 0).count();
                cut as f64 / whole.k.div_ceil(cols as usize) as f64
            }
            Some((_, true)) => 1.0,
            _ => 0.0,
        }
    }
}
