//! [`RowRange`]: the rows (M) of a call a kernel serves, declared with
//! `#[fp8_kernel(rows = 1..=16)]` (default: every M), and the ranges of a layer's plan.

use std::fmt;

/// An inclusive range of row counts `first..=last`, never empty, `first >= 1`. `last` is
/// `usize::MAX` for a range without an upper bound (printed `first..`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct RowRange {
    first: usize,
    last: usize,
}

impl RowRange {
    /// Every M (`1..`).
    pub const ALL: RowRange = RowRange {
        first: 1,
        last: usize::MAX,
    };

    /// `first..=last`. Panics (at compile time in a `const`) when the range is empty or
    /// starts at 0; the attribute refuses both with a spanned error before this is reached.
    pub const fn new(first: usize, last: usize) -> Self {
        assert!(
            first >= 1 && first <= last,
            "a row range starts at 1 and is not empty"
        );
        RowRange { first, last }
    }

    /// `first..`: every M from `first` on.
    pub const fn from(first: usize) -> Self {
        RowRange::new(first, usize::MAX)
    }

    /// The first M of the range.
    pub const fn first(&self) -> usize {
        self.first
    }

    /// The last M of the range (`usize::MAX` when unbounded).
    pub const fn last(&self) -> usize {
        self.last
    }

    /// Whether the range has no upper bound.
    pub const fn is_unbounded(&self) -> bool {
        self.last == usize::MAX
    }

    /// Whether `m` rows are in the range.
    pub const fn contains(&self, m: usize) -> bool {
        self.first <= m && m <= self.last
    }

    /// Whether every row of `inner` is in this range (`const`, for the tables' checks).
    pub const fn covers(&self, inner: &RowRange) -> bool {
        self.first <= inner.first && inner.last <= self.last
    }

    /// Whether both ranges hold the same rows (`==` in a `const` context).
    pub const fn same(&self, other: &RowRange) -> bool {
        self.first == other.first && self.last == other.last
    }

    /// The rows both ranges hold, if any.
    pub const fn intersect(&self, other: &RowRange) -> Option<RowRange> {
        let first = if self.first > other.first {
            self.first
        } else {
            other.first
        };
        let last = if self.last < other.last {
            self.last
        } else {
            other.last
        };
        if first <= last {
            Some(RowRange { first, last })
        } else {
            None
        }
    }
}

impl Default for RowRange {
    fn default() -> Self {
        RowRange::ALL
    }
}

impl fmt::Display for RowRange {
    /// `1..=16`, `17..`, or `M = 1` for a single row count.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_unbounded() {
            write!(f, "{}..", self.first)
        } else if self.first == self.last {
            write!(f, "{}", self.first)
        } else {
            write!(f, "{}..={}", self.first, self.last)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contains_intersects_and_prints() {
        let r = RowRange::new(2, 16);
        assert!(r.contains(2) && r.contains(16) && !r.contains(1) && !r.contains(17));
        assert_eq!(r.to_string(), "2..=16");
        assert_eq!(RowRange::from(17).to_string(), "17..");
        assert_eq!(RowRange::new(1, 1).to_string(), "1");
        assert_eq!(r.intersect(&RowRange::from(8)), Some(RowRange::new(8, 16)));
        assert_eq!(r.intersect(&RowRange::new(17, 20)), None);
        assert!(RowRange::ALL.contains(usize::MAX) && RowRange::ALL.is_unbounded());
    }

    #[test]
    #[should_panic(expected = "not empty")]
    fn an_inverted_range_is_refused() {
        let _ = RowRange::new(5, 4);
    }
}
