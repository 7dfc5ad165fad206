//! The Marlin kernel's launch plan: how many 8-row M tiles each warp takes, the grid
//! (M chunks x N stripes x K splits), and the split-K workspace; and the kernel's tuning
//! (pipeline depth and blocks per SM of each variant).

/// Pipeline depth (K steps of a warp in flight) and occupancy (128-thread blocks per SM the
/// compiler must fit, which caps registers) of the three kernel variants, for 1, 2 and 4
/// 8-row M tiles per warp.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct MarlinPipeline {
    /// K steps in flight per warp, per variant (1..=4).
    pub depth: [u32; 3],
    /// Blocks per SM, per variant (1..=8); also the grid the plan aims for.
    pub min_blocks: [u32; 3],
}

impl Default for MarlinPipeline {
    fn default() -> Self {
        // From a sweep on an H200 (BENCHMARKS.md): decode (1 M tile) wants more resident
        // warps over deeper per-warp pipelines; 4 M tiles want 3 blocks per SM, which
        // leaves registers for one step in flight only.
        Self::SWEEP[0]
    }
}

impl MarlinPipeline {
    /// The tunings the H200 sweep measured (`MARLIN_SWEEP=1` in the Marlin bench), the
    /// default first; the GPU tests run each of them.
    pub const SWEEP: [MarlinPipeline; 5] = [
        MarlinPipeline {
            depth: [2, 3, 1],
            min_blocks: [6, 3, 3],
        },
        MarlinPipeline {
            depth: [2, 2, 2],
            min_blocks: [6, 4, 3],
        },
        MarlinPipeline {
            depth: [2, 2, 1],
            min_blocks: [5, 4, 3],
        },
        MarlinPipeline {
            depth: [3, 2, 2],
            min_blocks: [6, 4, 3],
        },
        MarlinPipeline {
            depth: [2, 3, 2],
            min_blocks: [6, 3, 2],
        },
    ];

    /// Whether every value is in range.
    pub fn is_valid(&self) -> bool {
        self.depth.iter().all(|d| (1..=4).contains(d))
            && self.min_blocks.iter().all(|b| (1..=8).contains(b))
    }

    /// The NVRTC defines that select this tuning in `cu/marlin.cu`.
    pub fn defines(&self) -> Vec<String> {
        let mut v = Vec::new();
        for (i, mt) in [1, 2, 4].iter().enumerate() {
            v.push(format!("-DMARLIN_D{mt}={}", self.depth[i]));
            v.push(format!("-DMARLIN_B{mt}={}", self.min_blocks[i]));
        }
        v
    }
}

/// Minimum K steps (of 32) per split, so each of the 4 warps has at least 2.
pub const MIN_STEPS_PER_SPLIT: usize = 8;

/// One launch of the kernel.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct LaunchPlan {
    /// 8-row M tiles per warp (1, 2 or 4).
    pub mt: usize,
    /// M chunks of `8 * mt` rows (grid x).
    pub chunks: usize,
    /// 64-channel N stripes (grid y).
    pub stripes: usize,
    /// K splits (grid z); 1 means no workspace.
    pub splits: usize,
    /// K steps per split.
    pub steps_per_split: usize,
}

impl LaunchPlan {
    /// Plans a launch for `m` rows, `stripes` N stripes and `ksteps` K steps on a GPU with
    /// `sm_count` SMs: the M tile grows with M; K is split when the (chunk, stripe) tiles
    /// alone would not fill the GPU's resident blocks (`tuning.min_blocks` per SM).
    pub fn new(
        m: usize,
        stripes: usize,
        ksteps: usize,
        sm_count: usize,
        tuning: &MarlinPipeline,
    ) -> Self {
        let mt = if m <= 8 {
            1
        } else if m <= 16 {
            2
        } else {
            4
        };
        let chunks = m.div_ceil(8 * mt).max(1);
        let tiles = chunks * stripes.max(1);
        let variant = match mt {
            1 => 0,
            2 => 1,
            _ => 2,
        };
        let target = tuning.min_blocks[variant].max(1) as usize * sm_count.max(1);
        // Nearest: about one resident wave of blocks.
        let want = ((target + tiles / 2) / tiles).max(1);
        let splits = want.min((ksteps / MIN_STEPS_PER_SPLIT).max(1)).max(1);
        let steps_per_split = ksteps.div_ceil(splits).max(1);
        let splits = ksteps.div_ceil(steps_per_split).max(1);
        LaunchPlan {
            mt,
            chunks,
            stripes,
            splits,
            steps_per_split,
        }
    }

    /// Index of the kernel variant (0, 1, 2 for mt = 1, 2, 4).
    pub fn variant(&self) -> usize {
        match self.mt {
            1 => 0,
            2 => 1,
            _ => 2,
        }
    }

    /// (chunk, stripe) tiles, one arrival counter each.
    pub fn tiles(&self) -> usize {
        self.chunks * self.stripes
    }

    /// f32 elements of the split-K workspace (0 without a split).
    pub fn workspace_floats(&self) -> usize {
        if self.splits > 1 {
            self.tiles() * self.splits * 16 * self.mt * 32
        } else {
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_cover_k_exactly_and_fill_the_gpu() {
        for &(m, stripes, ksteps) in &[
            (1, 64, 128),
            (16, 64, 224),
            (33, 112, 512),
            (1024, 64, 128),
            (1, 1, 1),
            (7, 2, 9),
        ] {
            let p = LaunchPlan::new(m, stripes, ksteps, 132, &MarlinPipeline::default());
            assert!(p.splits * p.steps_per_split >= ksteps);
            assert!((p.splits - 1) * p.steps_per_split < ksteps, "{p:?}");
            assert!(p.chunks * 8 * p.mt >= m);
            if p.splits > 1 {
                assert!(p.steps_per_split >= MIN_STEPS_PER_SPLIT.min(ksteps));
            }
        }
        assert_eq!(
            LaunchPlan::new(1, 64, 128, 132, &MarlinPipeline::default()).mt,
            1
        );
        assert_eq!(
            LaunchPlan::new(16, 64, 128, 132, &MarlinPipeline::default()).mt,
            2
        );
        assert_eq!(
            LaunchPlan::new(1024, 64, 128, 132, &MarlinPipeline::default()).splits,
            1
        );
        assert!(LaunchPlan::new(1, 64, 128, 132, &MarlinPipeline::default()).splits > 1);
        assert!(MarlinPipeline::default().is_valid());
        assert!(!MarlinPipeline {
            depth: [0, 3, 2],
            ..MarlinPipeline::default()
        }
        .is_valid());
        assert_eq!(MarlinPipeline::default().defines().len(), 6);
    }
}
