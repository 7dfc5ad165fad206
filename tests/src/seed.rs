//! Seeded randomness for the tests: every random draw of a test goes through [`rng`], whose
//! generator is seeded once per test thread (libtest runs each test on its own thread,
//! named after the test) and says its seed on first use:
//!
//! ```text
//! seed of every_cuda_entry_matches_the_reference: FP8_TEST_SEED=1234567 replays it
//! ```
//!
//! The line is printed with `eprintln!`, so libtest shows it with the output of a failing
//! test (and with `--nocapture`). `FP8_TEST_SEED=<n>` (decimal or `0x` hex) seeds every test
//! thread with `n` instead of a fresh random seed, which replays the draws of the test that
//! printed it (run it alone or among others: each test's draws depend only on its seed).

use std::cell::RefCell;

use rand::rngs::StdRng;
use rand::{Rng, RngCore, SeedableRng};

thread_local! {
    static STATE: RefCell<Option<(u64, StdRng)>> = const { RefCell::new(None) };
}

/// The seed `FP8_TEST_SEED` asks for, if any.
///
/// # Panics
/// When the variable is set but is not a number: a replay must not silently use another
/// seed.
pub fn seed_from_env() -> Option<u64> {
    let v = std::env::var("FP8_TEST_SEED").ok()?;
    let v = v.trim();
    if v.is_empty() {
        return None;
    }
    let parsed = match v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => v.parse(),
    };
    Some(parsed.unwrap_or_else(|e| panic!("FP8_TEST_SEED={v} is not a u64: {e}")))
}

fn with_state<R>(f: impl FnOnce(&mut (u64, StdRng)) -> R) -> R {
    STATE.with(|s| {
        let mut s = s.borrow_mut();
        let state = s.get_or_insert_with(|| {
            let seed = seed_from_env().unwrap_or_else(|| rand::rng().random());
            let thread = std::thread::current();
            let test = thread.name().unwrap_or("this test");
            eprintln!("seed of {test}: FP8_TEST_SEED={seed} replays it");
            (seed, StdRng::seed_from_u64(seed))
        });
        f(state)
    })
}

/// This test thread's seed (seeding and printing it first, if no draw has yet).
pub fn seed() -> u64 {
    with_state(|s| s.0)
}

/// The test thread's seeded generator: a handle that draws from it (`rand::Rng` methods
/// work on it as on any generator).
pub fn rng() -> TestRng {
    TestRng(())
}

/// A handle to the calling thread's seeded generator (see [`rng`]).
#[derive(Debug)]
pub struct TestRng(());

impl RngCore for TestRng {
    fn next_u32(&mut self) -> u32 {
        with_state(|s| s.1.next_u32())
    }
    fn next_u64(&mut self) -> u64 {
        with_state(|s| s.1.next_u64())
    }
    fn fill_bytes(&mut self, dst: &mut [u8]) {
        with_state(|s| s.1.fill_bytes(dst))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_draws() {
        let seed = seed();
        let a: Vec<u32> = (0..8).map(|_| rng().random()).collect();
        let mut again = StdRng::seed_from_u64(seed);
        let b: Vec<u32> = (0..8).map(|_| again.random()).collect();
        assert_eq!(a, b, "seed {seed}");
    }
}
