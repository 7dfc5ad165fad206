//! Mixture-of-experts layers of a checkpoint: the experts of one projection
//! (`model.layers.L.mlp.experts.E.{gate,up,down}_proj`, as Qwen3-MoE and DeepSeek-V3 name
//! them) found by name and grouped into one layer of E experts; shared experts
//! (`mlp.shared_experts.*`, `mlp.shared_expert.*`) and everything else stay dense.

use fp8_linear_core::{GroupedWeights, LayerConfig, LayerWeights, Tensor};

use crate::checkpoint::Checkpoint;
use crate::discover::natural_cmp;
use crate::error::CheckpointError;
use crate::layer::QuantLayer;

/// The experts of one projection: E dense layers of one config, as one grouped layer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExpertGroup {
    /// The group's name: the experts' module name without the expert index
    /// (`model.layers.0.mlp.experts.gate_proj`).
    pub name: String,
    /// One expert's layer config (every expert has it).
    pub config: LayerConfig,
    /// The experts, expert 0 first.
    pub experts: Vec<QuantLayer>,
}

/// `(group name, expert index)` of an expert's module name: a segment `experts` followed by
/// a number, with something after it (`a.experts.3.gate_proj` -> `a.experts.gate_proj`, 3).
fn expert_of(module: &str) -> Option<(String, usize)> {
    let parts: Vec<&str> = module.split('.').collect();
    let i = parts.iter().position(|p| *p == "experts")?;
    let index = parts.get(i + 1)?.parse::<usize>().ok()?;
    if i + 2 >= parts.len() {
        return None;
    }
    let mut name: Vec<&str> = parts[..=i].to_vec();
    name.extend(&parts[i + 2..]);
    Some((name.join("."), index))
}

/// Splits the discovered layers into the dense ones and the expert groups (in natural name
/// order). Every group must hold experts `0..E`, each once, all of one config; anything else
/// is [`CheckpointError::Experts`] naming the group.
pub(crate) fn group_experts(
    layers: Vec<QuantLayer>,
) -> Result<(Vec<QuantLayer>, Vec<ExpertGroup>), CheckpointError> {
    let mut dense = Vec::new();
    let mut found: Vec<(String, Vec<(usize, QuantLayer)>)> = Vec::new();
    for layer in layers {
        match expert_of(&layer.name) {
            None => dense.push(layer),
            Some((group, index)) => match found.iter_mut().find(|(g, _)| *g == group) {
                Some((_, members)) => members.push((index, layer)),
                None => found.push((group, vec![(index, layer)])),
            },
        }
    }
    let mut groups = Vec::with_capacity(found.len());
    for (name, mut members) in found {
        members.sort_by_key(|(i, _)| *i);
        let bad = |detail: String| CheckpointError::Experts {
            group: name.clone(),
            detail,
        };
        for (want, (got, _)) in members.iter().enumerate() {
            if *got != want {
                return Err(bad(format!(
                    "experts must be numbered 0..{} without gaps or repeats; expert {want} is \
                     missing or doubled (found {got} in its place)",
                    members.len()
                )));
            }
        }
        let first = &members[0].1;
        if let Some((i, odd)) = members
            .iter()
            .find(|(_, l)| l.config != first.config || l.scale_shape != first.scale_shape)
        {
            return Err(bad(format!(
                "expert {i} is {} but expert 0 is {}: every expert of a projection has one shape \
                 and quantization",
                odd.config, first.config
            )));
        }
        groups.push(ExpertGroup {
            config: first.config,
            name,
            experts: members.into_iter().map(|(_, l)| l).collect(),
        });
    }
    groups.sort_by(|a, b| natural_cmp(&a.name, &b.name));
    Ok((dense, groups))
}

/// The tensors of an expert group, stacked (each expert's rows after the previous one's):
/// the FP8 codes `[E * N, K]`, the scales `[E * rows, cols]`, the static input scales
/// `[E, 1]` and biases `[E, N]` when the experts have them. Owned: experts are separate
/// tensors in the file, so stacking copies them.
#[derive(Clone, Debug)]
pub struct GroupedTensors {
    /// The experts.
    pub experts: usize,
    /// FP8 codes `[E * N, K]`.
    pub weight: Vec<u8>,
    /// `[E * N, K]`.
    pub shape: [usize; 2],
    /// Scales `[E * rows, cols]`.
    pub scales: Vec<f32>,
    /// Shape of `scales`.
    pub scale_shape: [usize; 2],
    /// Static input scales `[E, 1]`.
    pub input_scale: Option<Vec<f32>>,
    /// Biases `[E, N]`.
    pub bias: Option<Vec<f32>>,
}

impl GroupedTensors {
    /// The tensors as grouped kernels take them.
    pub fn view(&self) -> GroupedWeights<'_> {
        let (e, n) = (self.experts, self.shape[0] / self.experts.max(1));
        GroupedWeights::new(
            e,
            LayerWeights {
                weight: Tensor::fp8(&self.weight, self.shape),
                weight_scale: Tensor::f32(&self.scales, self.scale_shape),
                input_scale: self.input_scale.as_deref().map(|s| Tensor::f32(s, [e, 1])),
                input_scale_ub: None,
                bias: self.bias.as_deref().map(|b| Tensor::f32(b, [e, n])),
            },
        )
    }
}

impl Checkpoint {
    /// The tensors of every expert of `group`, stacked ([`GroupedTensors`]).
    pub fn grouped_tensors(&self, group: &ExpertGroup) -> Result<GroupedTensors, CheckpointError> {
        let e = group.experts.len();
        let (n, k) = (group.config.n, group.config.k);
        let [sr, sc] = group.experts[0].scale_shape;
        let mut out = GroupedTensors {
            experts: e,
            weight: Vec::with_capacity(e * n * k),
            shape: [e * n, k],
            scales: Vec::with_capacity(e * sr * sc),
            scale_shape: [e * sr, sc],
            input_scale: None,
            bias: None,
        };
        for layer in &group.experts {
            let t = self.layer_tensors(layer)?;
            out.weight.extend_from_slice(t.weight);
            out.scales.extend_from_slice(&t.scales);
            if let Some(s) = t.input_scale {
                out.input_scale.get_or_insert_with(Vec::new).extend(s);
            }
            if let Some(b) = t.bias {
                out.bias.get_or_insert_with(Vec::new).extend(b);
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn experts_are_found_by_name() {
        assert_eq!(
            expert_of("model.layers.3.mlp.experts.17.down_proj"),
            Some(("model.layers.3.mlp.experts.down_proj".into(), 17))
        );
        assert_eq!(
            expert_of("model.layers.3.mlp.shared_experts.down_proj"),
            None
        );
        assert_eq!(expert_of("model.layers.3.mlp.experts.gate_proj"), None);
        assert_eq!(expert_of("model.layers.3.mlp.experts.2"), None);
        assert_eq!(expert_of("model.layers.0.mlp.down_proj"), None);
    }
}
