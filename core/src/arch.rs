//! Compute capabilities and the `arch` a kernel declares.

use std::fmt;

/// A CUDA compute capability as (major, minor). Ordering compares the pair, never the major
/// alone: 8.9 (Ada) is newer than 8.6 (Ampere) and older than 9.0 (Hopper).
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Capability {
    /// Major version (8 for Ampere and Ada, 9 for Hopper).
    pub major: u8,
    /// Minor version.
    pub minor: u8,
}

impl Capability {
    /// Builds a capability from its two parts.
    pub const fn new(major: u8, minor: u8) -> Self {
        Capability { major, minor }
    }

    /// The capability as one number, `major * 10 + minor` (80 for 8.0).
    pub const fn as_number(self) -> u16 {
        self.major as u16 * 10 + self.minor as u16
    }

    /// `self >= other`, usable in `const fn`.
    pub const fn at_least(self, other: Capability) -> bool {
        self.as_number() >= other.as_number()
    }

    /// `self == other`, usable in `const fn`.
    pub const fn same(self, other: Capability) -> bool {
        self.major == other.major && self.minor == other.minor
    }
}

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// The compute capabilities a kernel's code can run on, as declared by `arch = ...`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ArchSpec {
    /// Any device of the kernel's platform (CPU kernels).
    Any,
    /// Exactly this capability (`sm90`), or exactly this capability with its
    /// architecture-specific features (`sm90a`: wgmma, setmaxnreg).
    Exact {
        /// The one capability the code runs on.
        cap: Capability,
        /// Whether the code uses the `a` (architecture-specific) feature set.
        specific: bool,
    },
    /// This capability or newer (`sm89..`).
    AtLeast(Capability),
    /// From `lo` (inclusive) up to `hi` (exclusive): `sm75..sm89`.
    Range {
        /// Lowest capability, inclusive.
        lo: Capability,
        /// First capability that is no longer supported.
        hi: Capability,
    },
}

impl ArchSpec {
    /// Whether a device with capability `cap` (None for devices without one, such as a CPU)
    /// can run code declared with this spec.
    pub const fn matches(self, cap: Option<Capability>) -> bool {
        match (self, cap) {
            (ArchSpec::Any, _) => true,
            (_, None) => false,
            (ArchSpec::Exact { cap: want, .. }, Some(c)) => c.same(want),
            (ArchSpec::AtLeast(lo), Some(c)) => c.at_least(lo),
            (ArchSpec::Range { lo, hi }, Some(c)) => c.at_least(lo) && !c.at_least(hi),
        }
    }

    /// The NVRTC target name for a device of capability `cap` running this code: `sm_90a`
    /// for architecture-specific kernels, `sm_XY` otherwise.
    pub fn nvrtc_target(self, cap: Capability) -> String {
        match self {
            ArchSpec::Exact { specific: true, .. } => format!("sm_{}{}a", cap.major, cap.minor),
            _ => format!("sm_{}{}", cap.major, cap.minor),
        }
    }
}

impl fmt::Display for ArchSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ArchSpec::Any => f.write_str("any"),
            ArchSpec::Exact { cap, specific } => write!(
                f,
                "sm_{}{}{} ({} exactly)",
                cap.major,
                cap.minor,
                if specific { "a" } else { "" },
                cap
            ),
            ArchSpec::AtLeast(c) => write!(f, "sm_{}{} or newer ({}+)", c.major, c.minor, c),
            ArchSpec::Range { lo, hi } => write!(
                f,
                "sm_{}{} up to before sm_{}{} ({} <= cc < {})",
                lo.major, lo.minor, hi.major, hi.minor, lo, hi
            ),
        }
    }
}

/// Parses a compute capability as written in device profiles and options: `sm89`, `sm_89`,
/// `sm90a`, `sm120` (the last digit is the minor). Returns the capability and whether the
/// `a` (architecture-specific) suffix was given; None for anything else, including a major
/// of 0 (`sm00`) and majors past 99 (`sm999` reads as 99.9 and is refused).
pub fn parse_sm(s: &str) -> Option<(Capability, bool)> {
    let lower = s.trim().to_ascii_lowercase();
    let digits = lower.strip_prefix("sm")?.trim_start_matches('_');
    let (digits, specific) = match digits.strip_suffix('a') {
        Some(d) => (d, true),
        None => (digits, false),
    };
    if !(2..=3).contains(&digits.len()) || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let (maj, min) = digits.split_at(digits.len() - 1);
    let (major, minor): (u8, u8) = (maj.parse().ok()?, min.parse().ok()?);
    // Real capabilities: majors 1..=20 so far; refuse what cannot be a GPU.
    if major == 0 || major > 20 {
        return None;
    }
    Some((Capability::new(major, minor), specific))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_compare_pairs_not_majors() {
        let marlin = ArchSpec::Range {
            lo: Capability::new(7, 5),
            hi: Capability::new(8, 9),
        };
        assert!(marlin.matches(Some(Capability::new(8, 0))));
        assert!(marlin.matches(Some(Capability::new(8, 6))));
        assert!(!marlin.matches(Some(Capability::new(8, 9))));
        assert!(!marlin.matches(Some(Capability::new(7, 0))));
        assert!(!marlin.matches(None));
        let ada = ArchSpec::AtLeast(Capability::new(8, 9));
        assert!(!ada.matches(Some(Capability::new(8, 6))));
        assert!(ada.matches(Some(Capability::new(9, 0))));
        let hopper = ArchSpec::Exact {
            cap: Capability::new(9, 0),
            specific: true,
        };
        assert!(hopper.matches(Some(Capability::new(9, 0))));
        assert!(!hopper.matches(Some(Capability::new(10, 0))));
        assert_eq!(hopper.nvrtc_target(Capability::new(9, 0)), "sm_90a");
        assert!(ArchSpec::Any.matches(None));
    }

    #[test]
    fn sm_names_parse_once_here() {
        assert_eq!(parse_sm("sm89"), Some((Capability::new(8, 9), false)));
        assert_eq!(parse_sm("SM_90a"), Some((Capability::new(9, 0), true)));
        assert_eq!(parse_sm("sm120"), Some((Capability::new(12, 0), false)));
        for bad in ["sm", "sm00", "sm999", "smxx", "sm8", "89", "sm8.9"] {
            assert_eq!(parse_sm(bad), None, "{bad}");
        }
    }
}
