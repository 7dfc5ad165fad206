//! Devices, real (from a driver) or named profiles, so plans can be made for any GPU anywhere.

use std::borrow::Cow;
use std::fmt;

use crate::arch::{parse_sm, Capability};
use crate::platform::Platform;

/// A device a kernel may run on: its platform, compute capability, name and size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Device {
    /// Platform of the device.
    pub platform: Platform,
    /// Compute capability (None on platforms without one, such as the CPU).
    pub capability: Option<Capability>,
    /// Human-readable name ("NVIDIA H200", "profile a100").
    pub name: Cow<'static, str>,
    /// Streaming multiprocessors of a GPU (0 for a CPU).
    pub sm_count: u32,
    /// Logical cores of a CPU (0 for a GPU).
    pub cpu_cores: u32,
    /// Device memory in bytes (0 when unknown).
    pub memory_bytes: u64,
    /// Driver ordinal of a real device; None for a profile.
    pub ordinal: Option<u32>,
}

/// Error for a profile name that is not known.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown device profile `{name}`; known profiles: {known}, or smXY (e.g. sm89)")]
pub struct UnknownProfile {
    /// The name that was asked for.
    pub name: String,
    /// The known profile names, comma separated.
    pub known: String,
}

const GIB: u64 = 1 << 30;

/// (name, marketing name, major, minor, SMs, memory GiB)
const PROFILES: [(&str, &str, u8, u8, u32, u64); 12] = [
    ("v100", "Tesla V100", 7, 0, 80, 32),
    ("t4", "Tesla T4", 7, 5, 40, 16),
    ("a100", "A100", 8, 0, 108, 80),
    ("a10", "A10", 8, 6, 72, 24),
    ("rtx3090", "GeForce RTX 3090", 8, 6, 82, 24),
    ("l4", "L4", 8, 9, 58, 24),
    ("l40s", "L40S", 8, 9, 142, 48),
    ("rtx4090", "GeForce RTX 4090", 8, 9, 128, 24),
    ("h100", "H100 SXM", 9, 0, 132, 80),
    ("h200", "H200 SXM", 9, 0, 132, 141),
    ("b200", "B200", 10, 0, 148, 180),
    ("rtx5090", "GeForce RTX 5090", 12, 0, 170, 32),
];

impl Device {
    /// Whether this is a profile (a description with no hardware behind it): a CUDA device
    /// without a driver ordinal. Kernels can be selected for a profile, never built.
    pub fn is_profile(&self) -> bool {
        self.platform != Platform::Cpu && self.ordinal.is_none()
    }

    /// The names accepted by [`Device::profile`], besides `smXY`.
    pub fn profile_names() -> Vec<&'static str> {
        let mut v: Vec<&'static str> = PROFILES.iter().map(|p| p.0).collect();
        v.push("cpu");
        v
    }

    /// A CPU device with `cores` logical cores.
    pub fn cpu(cores: u32) -> Self {
        Device {
            platform: Platform::Cpu,
            capability: None,
            name: Cow::Borrowed("cpu"),
            sm_count: 0,
            cpu_cores: cores,
            memory_bytes: 0,
            ordinal: None,
        }
    }

    /// The host CPU, with the number of cores the OS reports.
    pub fn host_cpu() -> Self {
        let cores = std::thread::available_parallelism()
            .map(|n| n.get() as u32)
            .unwrap_or(1);
        Device::cpu(cores)
    }

    /// A CUDA device profile with the given capability (used for `smXY` profiles).
    pub fn cuda_profile(
        name: impl Into<Cow<'static, str>>,
        cap: Capability,
        sm_count: u32,
    ) -> Self {
        Device {
            platform: Platform::Cuda,
            capability: Some(cap),
            name: name.into(),
            sm_count,
            cpu_cores: 0,
            memory_bytes: 0,
            ordinal: None,
        }
    }

    /// A named device profile: `v100`, `t4`, `a100`, `a10`, `l4`, `l40s`, `h100`, `h200`,
    /// `b200`, `rtx3090`, `rtx4090`, `rtx5090`, `cpu`, or `smXY` / `smXYa` for any capability
    /// (`sm89`, `sm120`). Case-insensitive.
    pub fn profile(name: &str) -> Result<Device, UnknownProfile> {
        let lower = name.trim().to_ascii_lowercase();
        if lower == "cpu" {
            return Ok(Device::host_cpu());
        }
        if let Some(p) = PROFILES.iter().find(|p| p.0 == lower) {
            return Ok(Device {
                platform: Platform::Cuda,
                capability: Some(Capability::new(p.2, p.3)),
                name: Cow::Owned(format!("{} (profile {})", p.1, p.0)),
                sm_count: p.4,
                cpu_cores: 0,
                memory_bytes: p.5 * GIB,
                ordinal: None,
            });
        }
        if let Some((cap, specific)) = parse_sm(&lower) {
            let a = if specific { "a" } else { "" };
            return Ok(Device::cuda_profile(
                format!("sm_{}{}{a} (profile)", cap.major, cap.minor),
                cap,
                100,
            ));
        }
        Err(UnknownProfile {
            name: name.to_string(),
            known: Device::profile_names().join(", "),
        })
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.capability {
            Some(c) => write!(
                f,
                "{} [{} sm_{}{}, {} SMs]",
                self.name, self.platform, c.major, c.minor, self.sm_count
            ),
            None => write!(
                f,
                "{} [{}, {} cores]",
                self.name, self.platform, self.cpu_cores
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profiles_resolve() {
        assert_eq!(
            Device::profile("A100").unwrap().capability,
            Some(Capability::new(8, 0))
        );
        assert_eq!(
            Device::profile("sm89").unwrap().capability,
            Some(Capability::new(8, 9))
        );
        assert_eq!(
            Device::profile("sm_120").unwrap().capability,
            Some(Capability::new(12, 0))
        );
        assert_eq!(Device::profile("cpu").unwrap().platform, Platform::Cpu);
        let err = Device::profile("a200").unwrap_err();
        assert!(err.to_string().contains("a100"), "{err}");
        assert!(Device::profile("sm").is_err());
        assert!(Device::profile("smxx").is_err());
        assert!(Device::profile("sm999").is_err());
        assert!(Device::profile("sm00").is_err());
        assert!(Device::profile("sm90a").unwrap().name.contains("sm_90a"));
        assert!(Device::profile("a100").unwrap().is_profile());
        assert!(!Device::host_cpu().is_profile());
    }
}
