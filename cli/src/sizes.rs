//! Size arguments and the memory they need, checked before anything is allocated.
//!
//! Every size product (`M x K`, `N x K`, `M x N`, their bytes, their sum) is computed with
//! checked arithmetic; an overflow, or a total above the memory this machine has available,
//! is a [`Kind::BadInput`](crate::error::Kind::BadInput) error that names the sizes and the
//! bytes, instead of a `capacity overflow` panic or an aborted allocation. The available
//! memory is `MemAvailable` of `/proc/meminfo` on Linux; where that cannot be read, a
//! fixed cap of [`FALLBACK_CAP_BYTES`] (16 GiB). Big buffers are then made with
//! [`Vec::try_reserve_exact`] ([`try_filled`], [`try_collect`]), so an allocation that still
//! fails is an error too, never an abort.

use std::fmt::Write as _;

use fp8_linear::LayerConfig;

use crate::error::CliError;

/// The memory cap where `/proc/meminfo` cannot be read: 16 GiB.
pub const FALLBACK_CAP_BYTES: u64 = 16 << 30;

/// The most timed calls `--iters` accepts.
pub const MAX_ITERS: usize = 100_000;

/// The most decoder layers `gen-checkpoint --layers` writes.
pub const MAX_GEN_LAYERS: usize = 1024;

/// Bytes per weight element held while a layer runs on the CPU: the CLI's FP8 codes (1), the
/// kernel's copy (1) and its f32 (fast kernel) or f64 (reference kernel) dequantized
/// weight (8 at most).
const WEIGHT_ELEM_BYTES: u64 = 1 + 1 + 8;
/// Bytes per activation element: the CLI's f32 input (4) and its 16-bit copy (2), the
/// kernel's f32 copy (4), FP8 codes (1) and dequantized f32 / f64 values (8 at most).
const ACT_ELEM_BYTES: u64 = 4 + 2 + 4 + 1 + 8;
/// Bytes per output element: the CLI's f32 output (4) and the kernel's 16-bit output (2),
/// the kernel's f32 accumulator (4).
const OUT_ELEM_BYTES: u64 = 4 + 2 + 4;

/// Where the memory limit came from, and how much it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryLimit {
    /// Bytes available.
    pub bytes: u64,
    /// Where the figure comes from.
    pub source: &'static str,
}

/// The memory this process may use: `MemAvailable` on Linux, else [`FALLBACK_CAP_BYTES`].
pub fn available_memory() -> MemoryLimit {
    let from_proc = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| parse_meminfo(&s));
    match from_proc {
        Some(bytes) => MemoryLimit {
            bytes,
            source: "MemAvailable in /proc/meminfo",
        },
        None => MemoryLimit {
            bytes: FALLBACK_CAP_BYTES,
            source: "the CLI's fixed cap where /proc/meminfo cannot be read",
        },
    }
}

/// `MemAvailable` of a `/proc/meminfo` text, in bytes.
fn parse_meminfo(s: &str) -> Option<u64> {
    let line = s.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kb.checked_mul(1024)
}

/// Decimal bytes with the exact count: `28.67 GB (28672000000 bytes)`.
pub fn bytes_exact(b: u64) -> String {
    format!("{} ({b} bytes)", crate::plan::bytes(b as usize))
}

/// `a * b`, or an error naming the product.
fn mul(a: u64, b: u64, what: &dyn Fn() -> String) -> Result<u64, CliError> {
    a.checked_mul(b).ok_or_else(|| {
        CliError::bad_input(format!(
            "{}: the size product {a} x {b} overflows 64 bits; no buffer that large can exist",
            what()
        ))
    })
}

fn add(a: u64, b: u64, what: &dyn Fn() -> String) -> Result<u64, CliError> {
    a.checked_add(b).ok_or_else(|| {
        CliError::bad_input(format!(
            "{}: the bytes needed ({a} + {b}) overflow 64 bits",
            what()
        ))
    })
}

/// What running one layer at some M costs in host memory, in bytes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Footprint {
    /// Weights: codes, scales, the kernel's copies.
    pub weights: u64,
    /// Activations, summed over the Ms whose inputs are kept, plus the largest working set.
    pub activations: u64,
    /// Outputs at the largest M.
    pub outputs: u64,
}

impl Footprint {
    /// The sum.
    pub fn total(&self) -> u64 {
        // Each part is checked below the u64 range; their sum was checked when made.
        self.weights + self.activations + self.outputs
    }
}

fn u(x: usize) -> u64 {
    x as u64
}

/// The memory a layer of `config` needs when run at each M of `ms` (the inputs of every M
/// are kept, as `bench` does; one output and one working set at a time), or the error that
/// names the sizes when a product overflows. `what` names the command or layer.
pub fn layer_footprint(
    what: &str,
    config: &LayerConfig,
    ms: &[usize],
) -> Result<Footprint, CliError> {
    let (n, k) = (u(config.n), u(config.k));
    let mmax = ms.iter().copied().max().unwrap_or(0);
    let label = |m: usize| move || format!("{what}: layer N={n} K={k} at M={m}");
    let nk = mul(n, k, &label(mmax))?;
    let [sr, sc] = config.weight_scale_shape();
    let scales = mul(u(sr), u(sc), &label(mmax))?;
    let weights = add(
        mul(nk, WEIGHT_ELEM_BYTES, &label(mmax))?,
        mul(scales, 2 * 4, &label(mmax))?,
        &label(mmax),
    )?;
    let mut kept = 0u64;
    for &m in ms {
        let mk = mul(u(m), k, &label(m))?;
        kept = add(kept, mul(mk, 4, &label(m))?, &label(m))?;
    }
    let mk = mul(u(mmax), k, &label(mmax))?;
    let work = mul(mk, ACT_ELEM_BYTES, &label(mmax))?;
    let activations = add(kept, work, &label(mmax))?;
    let mn = mul(u(mmax), n, &label(mmax))?;
    let outputs = mul(mn, OUT_ELEM_BYTES, &label(mmax))?;
    let total = add(
        add(weights, activations, &label(mmax))?,
        outputs,
        &label(mmax),
    )?;
    // The whole must also be addressable by this process.
    if usize::try_from(total).is_err() {
        return Err(CliError::bad_input(format!(
            "{}: needs {total} bytes, more than this machine's address space",
            label(mmax)()
        )));
    }
    Ok(Footprint {
        weights,
        activations,
        outputs,
    })
}

/// Refuses a footprint above `limit`, naming the bytes of each part.
pub fn check_fits(what: &str, f: &Footprint, limit: &MemoryLimit) -> Result<(), CliError> {
    if f.total() <= limit.bytes {
        return Ok(());
    }
    let mut s = format!(
        "{what} needs about {} of host memory (weights {}, activations {}, outputs {}), more than the {} available ({})",
        bytes_exact(f.total()),
        crate::plan::bytes(f.weights as usize),
        crate::plan::bytes(f.activations as usize),
        crate::plan::bytes(f.outputs as usize),
        bytes_exact(limit.bytes),
        limit.source
    );
    let _ = write!(s, "; use a smaller M, N or K");
    Err(CliError::bad_input(s))
}

/// [`layer_footprint`] and [`check_fits`] against this machine's available memory, with a
/// label such as `run: layer N=4096 K=7168 at M=16`.
pub fn check_layer(what: &str, config: &LayerConfig, ms: &[usize]) -> Result<Footprint, CliError> {
    let f = layer_footprint(what, config, ms)?;
    let n = config.n;
    let k = config.k;
    let mmax = ms.iter().copied().max().unwrap_or(0);
    check_fits(
        &format!("{what}: layer N={n} K={k} at M={mmax}"),
        &f,
        &available_memory(),
    )?;
    Ok(f)
}

/// A vector of `len` copies of `v`, reserved with `try_reserve_exact` so a failed
/// allocation is an error naming `what` and the bytes, not an abort.
pub fn try_filled<T: Clone>(what: &str, len: usize, v: T) -> Result<Vec<T>, CliError> {
    let mut out = reserve::<T>(what, len)?;
    out.resize(len, v);
    Ok(out)
}

/// The first `len` items of `it` in a vector reserved with `try_reserve_exact`.
pub fn try_collect<T>(
    what: &str,
    len: usize,
    it: impl IntoIterator<Item = T>,
) -> Result<Vec<T>, CliError> {
    let mut out = reserve::<T>(what, len)?;
    out.extend(it.into_iter().take(len));
    Ok(out)
}

fn reserve<T>(what: &str, len: usize) -> Result<Vec<T>, CliError> {
    let mut out = Vec::new();
    out.try_reserve_exact(len).map_err(|e| {
        let bytes = (len as u128) * (std::mem::size_of::<T>() as u128);
        CliError::bad_input(format!(
            "cannot allocate the {what}: {len} elements, {bytes} bytes ({e})"
        ))
    })?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use fp8_linear::DType;
    use rand::Rng;

    #[test]
    fn meminfo_parses() {
        let s = "MemTotal:       32000000 kB\nMemFree: 1 kB\nMemAvailable:   24215120 kB\n";
        assert_eq!(parse_meminfo(s), Some(24215120 * 1024));
        assert_eq!(parse_meminfo("MemTotal: 1 kB\n"), None);
    }

    #[test]
    fn footprints_add_up_and_big_ones_are_refused() {
        let c = LayerConfig::block_128(256, 384, DType::Bf16, DType::Bf16);
        let f = layer_footprint("t", &c, &[4]).unwrap();
        assert_eq!(f.weights, 256 * 384 * 10 + 2 * 3 * 8);
        assert_eq!(f.activations, 4 * 384 * 4 + 4 * 384 * ACT_ELEM_BYTES);
        assert_eq!(f.outputs, 4 * 256 * 10);
        let limit = MemoryLimit {
            bytes: 1000,
            source: "test",
        };
        let e = check_fits("run", &f, &limit).unwrap_err();
        assert!(
            e.message
                .contains("more than the 1.0 KB (1000 bytes) available (test)"),
            "{e}"
        );
        let huge = LayerConfig::block_128(usize::MAX, usize::MAX, DType::Bf16, DType::Bf16);
        let e = layer_footprint("run", &huge, &[1]).unwrap_err();
        assert!(e.message.contains("overflows 64 bits"), "{e}");
    }

    /// The property: for any sizes (0, 1, small, huge, near usize::MAX), the checks return
    /// an answer and never panic; what they accept fits in the memory available.
    #[test]
    fn any_sizes_give_an_answer_not_a_panic() {
        let mut rng = rand::rng();
        let draw = |rng: &mut rand::rngs::ThreadRng| -> usize {
            match rng.random_range(0..8) {
                0 => 0,
                1 => 1,
                2 => rng.random_range(2..512),
                3 => rng.random_range(512..1 << 20),
                4 => rng.random_range(1 << 20..1 << 40),
                5 => usize::MAX - rng.random_range(0..1024),
                6 => 1 << rng.random_range(0..64),
                _ => rng.random::<u64>() as usize,
            }
        };
        let limit = available_memory();
        for _ in 0..20_000 {
            let (n, k) = (draw(&mut rng), draw(&mut rng));
            let ms: Vec<usize> = (0..rng.random_range(1..4))
                .map(|_| draw(&mut rng))
                .collect();
            let c = LayerConfig::block_128(n, k, DType::Bf16, DType::Bf16);
            if let Ok(f) = layer_footprint("p", &c, &ms) {
                if check_fits("p", &f, &limit).is_ok() {
                    assert!(f.total() <= limit.bytes);
                    let mk = ms.iter().max().unwrap().checked_mul(k).unwrap();
                    assert!(mk.checked_mul(4).is_some());
                    assert!(n.checked_mul(k).is_some());
                }
            }
        }
        // A failed reservation is an error, not an abort.
        let e = try_filled::<f32>("test buffer", usize::MAX / 2, 0.0).unwrap_err();
        assert!(e.message.contains("cannot allocate the test buffer"), "{e}");
    }
}
