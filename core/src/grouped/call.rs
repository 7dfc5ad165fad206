//! The checks of one grouped call, before a kernel sees it.

use crate::config::LayerConfig;
use crate::error::KernelError;
use crate::grouped::{Routing, RoutingError};
use crate::tensor::{Tensor, TensorMut};
use crate::validate::check_io;

/// Checks a grouped call on a layer of `experts` experts of `config`: the input `[rows, K]`
/// and output `[rows, N]` as a linear layer's (dtypes, contiguity, buffers), the routing
/// against the experts and rows ([`Routing::check`]), and one routing weight per row when
/// given. Returns the rows.
pub fn check_grouped_io(
    config: &LayerConfig,
    experts: usize,
    input: &Tensor<'_>,
    routing: &Routing<'_>,
    route_weights: Option<&[f32]>,
    output: &TensorMut<'_>,
) -> Result<usize, KernelError> {
    let rows = check_io(config, input, output)?;
    routing.check(experts, rows)?;
    if let Some(w) = route_weights {
        if w.len() != rows {
            return Err(RoutingError::RowCount {
                what: "routing weights",
                rows,
                got: w.len(),
            }
            .into());
        }
    }
    Ok(rows)
}
