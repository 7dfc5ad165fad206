//! Grouped (mixture-of-experts) layers: E experts of one shape, the two call forms engines
//! use ([`Routing`]; masked with the counts in device memory, [`DeviceMasked`]), the stacked
//! weights ([`GroupedWeights`]) and the kernel trait
//! ([`Fp8GroupedKernel`]). Grouped kernels are declared with `#[fp8_kernel(kind = Grouped,
//! ...)]`, listed in grouped tables (`fp8_table! { pub T: Cpu, BlockScaled, Grouped = [..] }`)
//! and selected by the same walk as linear ones.

mod call;
mod kernel;
mod on_device;
mod routing;
mod weights;

pub use call::check_grouped_io;
pub use kernel::Fp8GroupedKernel;
pub use on_device::DeviceMasked;
pub use routing::{Routing, RoutingError, Segments};
pub use weights::GroupedWeights;
