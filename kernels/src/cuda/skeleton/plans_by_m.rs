//! [`PlansByM`]: a layer's launch plans kept by M, so that a repeated M is planned once.

use std::collections::HashMap;

/// Most M values whose plans are kept per layer beyond the pinned ones (all of those are
/// dropped when full).
const MAX_PLANS: usize = 64;

/// A layer's plans by M: made on first use of an M ([`PlansByM::get_or_make`]); those for
/// M up to [`PlansByM::pin_up_to`] are never dropped, beyond that at most 64 others are kept
/// (all of them dropped when a new one would exceed that).
#[derive(Debug)]
pub struct PlansByM<P> {
    plans: HashMap<usize, P>,
    pinned: usize,
}

impl<P> Default for PlansByM<P> {
    fn default() -> Self {
        PlansByM {
            plans: HashMap::new(),
            pinned: 0,
        }
    }
}

impl<P> PlansByM<P> {
    /// Keeps the plans of every M up to `m` from now on (`prepare`).
    pub fn pin_up_to(&mut self, m: usize) {
        self.pinned = self.pinned.max(m);
    }

    /// The plan for `m` rows, made by `make` unless kept already (an error from `make`
    /// keeps nothing).
    pub fn get_or_make<E>(
        &mut self,
        m: usize,
        make: impl FnOnce() -> Result<P, E>,
    ) -> Result<&mut P, E> {
        if !self.plans.contains_key(&m) {
            let plan = make()?;
            if self.plans.len() >= MAX_PLANS + self.pinned {
                let pinned = self.pinned;
                self.plans.retain(|&k, _| k <= pinned);
            }
            self.plans.insert(m, plan);
        }
        Ok(self.plans.get_mut(&m).expect("kept above"))
    }

    /// How many plans are kept.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.plans.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_once_per_m_and_keeps_the_pinned_when_full() {
        let mut plans = PlansByM::<usize>::default();
        let made = std::cell::Cell::new(0);
        let make = |m: usize| {
            made.set(made.get() + 1);
            Ok::<usize, ()>(m * 10)
        };
        assert_eq!(*plans.get_or_make(3, || make(3)).unwrap(), 30);
        assert_eq!(*plans.get_or_make(3, || make(3)).unwrap(), 30);
        assert_eq!(made.get(), 1);
        // An error keeps nothing.
        assert!(plans.get_or_make(5, || Err::<usize, ()>(())).is_err());
        assert_eq!(plans.len(), 1);
        // Pinned up to 4: M = 1..=4, then 64 others fill it; one more drops the others only.
        plans.pin_up_to(4);
        for m in (1..=4).chain(100..164) {
            plans.get_or_make(m, || make(m)).unwrap();
        }
        assert_eq!(plans.len(), 68);
        plans.get_or_make(1000, || make(1000)).unwrap();
        assert_eq!(plans.len(), 5);
        let before = made.get();
        for m in 1..=4 {
            plans.get_or_make(m, || make(m)).unwrap();
        }
        assert_eq!(made.get(), before, "the pinned plans were kept");
    }
}
