//! The weights of a grouped layer: every expert's tensors stacked along their rows.

use crate::config::LayerConfig;
use crate::error::KernelError;
use crate::tensor::{LayerWeights, Tensor};

/// The tensors of E experts of one shape, each stacked along its rows: the weight
/// `[E * N, K]` (the `[E, N, K]` codes), its scales `[E * rows, cols]` (the `[E, ceil(N/R),
/// ceil(K/C)]` block scales, `[E * N, 1]` per channel, `[E, 1]` per tensor), and likewise
/// the optional input scales (`[E, 1]`) and bias (`[E, N]`). Expert `e`'s slice of each is
/// a dense layer's [`LayerWeights`] ([`GroupedWeights::expert`]), so every layout a dense
/// layer takes, a grouped one takes.
#[derive(Copy, Clone, Debug)]
pub struct GroupedWeights<'a> {
    /// The number of experts, E >= 1.
    pub experts: usize,
    /// The stacked tensors, each `E` times a dense layer's rows.
    pub stacked: LayerWeights<'a>,
}

impl<'a> GroupedWeights<'a> {
    /// `experts` experts whose tensors are stacked in `stacked`.
    pub fn new(experts: usize, stacked: LayerWeights<'a>) -> Self {
        GroupedWeights { experts, stacked }
    }

    /// Checks that every stacked tensor holds `E` experts' rows (its rows a multiple of E,
    /// at least one per expert) and returns the dense layer's weights of expert `e`.
    /// A wrong expert count or stack is [`KernelError::Shape`], never a panic.
    pub fn expert(&self, e: usize) -> Result<LayerWeights<'a>, KernelError> {
        if self.experts == 0 || e >= self.experts {
            return Err(KernelError::shape(
                "experts",
                format!("an expert in 0..{}", self.experts),
                e,
            ));
        }
        let cut = |what: &'static str, t: Tensor<'a>| -> Result<Tensor<'a>, KernelError> {
            let rows = t.shape[0];
            if rows == 0 || !rows.is_multiple_of(self.experts) {
                return Err(KernelError::shape(
                    what,
                    format!("[E * rows, cols] with E = {} experts", self.experts),
                    format!("{:?}", t.shape),
                ));
            }
            let per = rows / self.experts;
            t.rows(what, e * per..(e + 1) * per)
        };
        let opt = |what, t: Option<Tensor<'a>>| t.map(|t| cut(what, t)).transpose();
        let s = &self.stacked;
        Ok(LayerWeights {
            weight: cut("weight", s.weight)?,
            weight_scale: cut("weight_scale", s.weight_scale)?,
            input_scale: opt("input_scale", s.input_scale)?,
            input_scale_ub: opt("input_scale_ub", s.input_scale_ub)?,
            bias: opt("bias", s.bias)?,
        })
    }

    /// Checks the stack against a layer of `config` per expert: the weight is exactly
    /// `[E * N, K]` and the scales `E` times the config's scale shape.
    pub fn check(&self, config: &LayerConfig) -> Result<(), KernelError> {
        let e = self.experts;
        let expect = |what, t: &Tensor<'_>, [r, c]: [usize; 2]| {
            t.check_shape(what, [e * r, c]).map_err(|_| {
                KernelError::shape(
                    what,
                    format!("[E * {r}, {c}] = [{}, {c}] for E = {e} experts", e * r),
                    format!("{:?}", t.shape),
                )
            })
        };
        if e == 0 {
            return Err(KernelError::shape("experts", "at least 1 expert", 0));
        }
        expect("weight", &self.stacked.weight, [config.n, config.k])?;
        expect(
            "weight_scale",
            &self.stacked.weight_scale,
            config.weight_scale_shape(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;

    #[test]
    fn experts_are_row_slices_of_the_stack() {
        let (e, n, k) = (3, 4, 256);
        let codes: Vec<u8> = (0..e * n * k).map(|i| (i / (n * k)) as u8).collect();
        let scales = vec![1f32; e * 2];
        let w = GroupedWeights::new(
            e,
            LayerWeights::new(
                Tensor::fp8(&codes, [e * n, k]),
                Tensor::f32(&scales, [e, 2]),
            ),
        );
        let cfg = LayerConfig::block_128(n, k, DType::Bf16, DType::Bf16);
        w.check(&cfg).unwrap();
        let two = w.expert(2).unwrap();
        assert_eq!(two.weight.shape, [n, k]);
        let crate::tensor::Storage::F8E4m3(s) = two.weight.data else {
            panic!()
        };
        assert_eq!(s[0], 2);
        assert!(w.expert(3).is_err());
        let wrong = GroupedWeights::new(2, w.stacked);
        assert!(matches!(
            wrong.check(&cfg),
            Err(KernelError::Shape { what: "weight", .. })
        ));
        assert!(GroupedWeights::new(5, w.stacked).expert(0).is_err());
    }
}
