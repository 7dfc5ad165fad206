//! The Marlin kernel's launch plan: the M tile (8-row tiles per warp), the grid (M chunks x
//! weight ranges), the depth of the shared-memory ring and the split-K workspace; and the
//! kernel's tuning (ring depth, blocks per SM).

/// K steps (of 32) per pipeline stage; stripes are padded along K to whole stages.
pub const STAGE_STEPS: usize = 4;

/// Threads per block (8 warps).
pub const THREADS: u32 = 256;

/// Shared-memory ring depth and occupancy of the kernel.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct MarlinPipeline {
    /// Most stages in the ring (2..=8); fewer when shared memory does not hold them.
    pub stages: u32,
    /// Blocks per SM the grid is sized for (1 or 2); fewer when shared memory does not hold
    /// two stages per block.
    pub blocks_per_sm: u32,
    /// The tallest M tile the plan may use (8, 16, 32 or 64 rows): with 32, M = 64 runs as
    /// two 32-row chunks instead of one 64-row chunk.
    pub max_tile_rows: u32,
    /// Two blocks per SM only when each weight range still gets at least this many stages
    /// (0: always the tuning's count). On small layers twice the ranges means twice the cut
    /// stripes, whose hand-off costs more than the second block gains.
    pub min_range_stages: u32,
}

impl Default for MarlinPipeline {
    fn default() -> Self {
        Self::SWEEP[0]
    }
}

impl MarlinPipeline {
    /// The tunings the Marlin bench sweeps (`MARLIN_SWEEP=1`), the default first; the GPU
    /// tests run each of them.
    pub const SWEEP: [MarlinPipeline; 8] = [
        MarlinPipeline::new(3, 2, 64).with_min_range_stages(8),
        MarlinPipeline::new(4, 1, 64),
        MarlinPipeline::new(3, 2, 64),
        MarlinPipeline::new(2, 2, 64),
        MarlinPipeline::new(3, 1, 64),
        MarlinPipeline::new(3, 2, 32),
        // Deeper rings at two blocks per SM (on an H100 or H200 five stages fit at M <= 16,
        // four at 32, three at 64): 4-7 % slower than the default on an H100's large layers
        // at M = 1, not yet measured on an H200 (where two blocks beat one by 7 %).
        MarlinPipeline::new(4, 2, 64).with_min_range_stages(8),
        MarlinPipeline::new(5, 2, 64).with_min_range_stages(8),
    ];

    /// A tuning from its three values (two blocks per SM whatever the layer's size).
    pub const fn new(stages: u32, blocks_per_sm: u32, max_tile_rows: u32) -> Self {
        Self {
            stages,
            blocks_per_sm,
            max_tile_rows,
            min_range_stages: 0,
        }
    }

    /// The tuning with [`min_range_stages`](Self::min_range_stages) set.
    pub const fn with_min_range_stages(self, min_range_stages: u32) -> Self {
        Self {
            min_range_stages,
            ..self
        }
    }

    /// Whether every value is in range.
    pub fn is_valid(&self) -> bool {
        (2..=8).contains(&self.stages)
            && (1..=2).contains(&self.blocks_per_sm)
            && matches!(self.max_tile_rows, 8 | 16 | 32 | 64)
    }
}

/// Bytes of one ring stage for `mt` 8-row tiles: 16 KiB of weights (4 K steps of a
/// 128-channel stripe), 1 KiB of group scales and `mt` x 2 KiB of activations.
pub const fn stage_bytes(mt: usize) -> usize {
    (1024 + 64 + 128 * mt) * 16
}

/// Shared memory the system and the kernel's static variables take per block.
const RESERVED_PER_BLOCK: usize = 1024 + 64;

/// The most dynamic shared memory a launch plan uses on a device whose opt-in limit per block
/// is `smem_optin`: the limit less the kernel's static variables (the driver refuses a
/// dynamic limit that leaves them no room). The kernel functions are loaded with it.
pub const fn max_dynamic_smem(smem_optin: usize) -> usize {
    (smem_optin + 1024).saturating_sub(RESERVED_PER_BLOCK)
}

/// Bytes per activation copy the kernel may use for rows of `k` 16-bit elements starting at
/// device address `ptr`: 16, 8 or 4 (cp.async needs the source aligned to the copy), else 0
/// (element copies).
pub fn x_copy_bytes(k: usize, ptr: u64) -> i32 {
    [16usize, 8, 4]
        .into_iter()
        .find(|&b| (2 * k).is_multiple_of(b) && (ptr as usize).is_multiple_of(b))
        .unwrap_or(0) as i32
}

/// Blocks per SM and ring depth for `mt` 8-row tiles: the tuning's, reduced until two
/// stages fit beside `table` more bytes of shared memory per block; `None` when not even one
/// block of two stages fits.
fn ring(
    mt: usize,
    (smem_optin, table): (usize, usize),
    tuning: &MarlinPipeline,
) -> Option<(usize, usize)> {
    let mut bps = tuning.blocks_per_sm.max(1) as usize;
    loop {
        // A block's share of the SM (its opt-in limit plus the system's 1 KiB), less its own
        // reservation: with one block, exactly max_dynamic_smem.
        let budget = ((smem_optin + 1024) / bps).saturating_sub(RESERVED_PER_BLOCK + table);
        let fit = budget / stage_bytes(mt);
        let stages = fit.min(tuning.stages as usize);
        if stages >= 2 {
            return Some((bps, stages));
        }
        if bps == 1 {
            return None;
        }
        bps -= 1;
    }
}

/// The M tile for `m` rows (8-row tiles per warp: 1, 2, 4 or 8, at most the tuning's
/// tallest), with the blocks per SM and ring depth its ring allows beside `table` bytes: the
/// widest tile up to the wanted one whose ring of two stages fits (a 99 KiB GPU holds two
/// stages of 32 rows, not of 64). `None` when two stages of the smallest do not fit.
fn tile(
    m: usize,
    (smem_optin, table): (usize, usize),
    tuning: &MarlinPipeline,
) -> Option<(usize, usize, usize)> {
    let want = match m {
        0..=8 => 1,
        9..=16 => 2,
        17..=32 => 4,
        _ => 8,
    }
    .min((tuning.max_tile_rows as usize / 8).max(1));
    [8, 4, 2, 1]
        .into_iter()
        .filter(|&mt| mt <= want)
        .find_map(|mt| ring(mt, (smem_optin, table), tuning).map(|(b, s)| (mt, b, s)))
}

/// One block per SM instead of the tuning's two when `stages` (the launch's, all chunks)
/// would give each range fewer than the tuning's `min_range_stages`; the (blocks per SM,
/// ring depth) to launch with.
fn fewer_blocks(
    (mt, bps, stages): (usize, usize, usize),
    total: usize,
    (sm_count, smem_optin, table): (usize, usize, usize),
    tuning: &MarlinPipeline,
) -> Option<(usize, usize)> {
    if bps > 1 && total < tuning.min_range_stages as usize * bps * sm_count.max(1) {
        let one = MarlinPipeline {
            blocks_per_sm: 1,
            ..*tuning
        };
        return ring(mt, (smem_optin, table), &one);
    }
    Some((bps, stages))
}

/// Whether `whole` stripes, one block each, fill the waves they take on `slots` block slots
/// to at least 90 % (288 stripes on 264 block slots would leave a second wave of 24 blocks,
/// doubling the time: one wave of equal ranges is better there).
fn fills_waves(whole: usize, slots: usize) -> bool {
    whole * 10 >= whole.div_ceil(slots) * slots * 9
}

/// One launch of the kernel.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct LaunchPlan {
    /// 8-row M tiles per warp (1, 2, 4 or 8).
    pub mt: usize,
    /// M chunks of `8 * mt` rows (grid x).
    pub chunks: usize,
    /// Contiguous weight ranges (grid y), each one block's share of the stages.
    pub ranges: usize,
    /// 128-channel stripes of the weight.
    pub stripes: usize,
    /// Ring depth.
    pub stages: usize,
    /// Dynamic shared memory per block.
    pub smem: usize,
}

impl LaunchPlan {
    /// Plans a launch for `m` rows over `stripes` stripes of `ksteps` K steps (a multiple of
    /// [`STAGE_STEPS`]) on a GPU with `sm_count` SMs and `smem_optin` bytes of shared memory
    /// per block. The weight is cut into one range per resident block (ranges that may end
    /// inside a stripe), unless the M chunks times whole stripes fill the GPU's block slots
    /// in whole waves (to 90 %).
    /// The M tile shrinks when the device's shared memory cannot hold two stages of it;
    /// `None` when it cannot hold two stages of the smallest.
    pub fn new(
        m: usize,
        stripes: usize,
        ksteps: usize,
        sm_count: usize,
        smem_optin: usize,
        tuning: &MarlinPipeline,
    ) -> Option<Self> {
        let (mt, bps, stages) = tile(m, (smem_optin, 0), tuning)?;
        let chunks = m.div_ceil(8 * mt).max(1);
        let stripes = stripes.max(1);
        let total = stripes * (ksteps / STAGE_STEPS).max(1);
        let (bps, stages) = fewer_blocks(
            (mt, bps, stages),
            total * chunks,
            (sm_count, smem_optin, 0),
            tuning,
        )?;
        let target = bps * sm_count.max(1);
        let whole = chunks * stripes;
        let ranges = if fills_waves(whole, target) {
            stripes
        } else {
            target.div_ceil(chunks).min(total)
        };
        Some(LaunchPlan {
            mt,
            chunks,
            ranges,
            stripes,
            stages,
            smem: stages * stage_bytes(mt),
        })
    }

    /// Index of the kernel variant (0, 1, 2, 3 for mt = 1, 2, 4, 8).
    pub fn variant(&self) -> usize {
        self.mt.trailing_zeros() as usize
    }

    /// Whether ranges may cut stripes (then the workspace and the counters are used).
    pub fn cuts_stripes(&self) -> bool {
        self.ranges != self.stripes
    }

    /// f32 elements of the split-K workspace: two pieces per range and chunk (0 when no
    /// stripe is cut).
    pub fn workspace_floats(&self) -> usize {
        if self.cuts_stripes() {
            self.chunks * self.ranges * 2 * super::repack::STRIPE * 8 * self.mt
        } else {
            0
        }
    }

    /// Arrival counters: one per (chunk, stripe) when stripes are cut.
    pub fn counters(&self) -> usize {
        if self.cuts_stripes() {
            self.chunks * self.stripes
        } else {
            0
        }
    }
}

/// What a grouped launch runs over: the items of `tile_rows`-row tiles, from the host's
/// segments or from masked counts on the device.
#[derive(Copy, Clone, Debug)]
pub enum GroupedWork<'a> {
    /// The rows of each non-empty segment of a routing the host knows.
    Routed(&'a [usize]),
    /// E slabs of `m_max` rows whose counts only the device knows, `expected` rows each.
    Masked {
        /// Experts (E).
        experts: usize,
        /// Rows per slab.
        m_max: usize,
        /// The rows per expert to plan for.
        expected: usize,
    },
}

impl GroupedWork<'_> {
    /// The rows the M tile is chosen for: the tallest segment (so that each expert's weight
    /// is read once per call whenever it fits one tile), or the expected rows.
    fn tile_rows(&self) -> usize {
        match *self {
            GroupedWork::Routed(rows) => rows.iter().copied().max().unwrap_or(1),
            GroupedWork::Masked { expected, .. } => expected,
        }
    }

    /// (items expected, most items) of `bm`-row items.
    fn items(&self, bm: usize) -> (usize, usize) {
        match *self {
            GroupedWork::Routed(rows) => {
                let n = rows.iter().map(|r| r.div_ceil(bm)).sum();
                (n, n)
            }
            GroupedWork::Masked {
                experts,
                m_max,
                expected,
            } => (
                experts * expected.div_ceil(bm),
                experts * m_max.div_ceil(bm),
            ),
        }
    }

    /// Bytes of shared memory each block of a masked launch builds its table of the counts
    /// in (`2 E + 1` items and offsets, 8 warp sums), 0 for a routed one.
    pub fn table_bytes(&self) -> usize {
        match *self {
            GroupedWork::Routed(_) => 0,
            GroupedWork::Masked { experts, .. } => ((2 * experts + 9) * 4).next_multiple_of(16),
        }
    }
}

/// One launch of the grouped kernel (`marlin_grouped_*`): items of at most `8 * mt` rows of
/// one expert, each a pass over its expert's weight, whose stages, laid end to end, are cut
/// into equal ranges (the kernel uses at most one range per stage).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct GroupedPlan {
    /// 8-row M tiles per warp (1, 2, 4 or 8).
    pub mt: usize,
    /// Ranges (grid y).
    pub ranges: usize,
    /// Ring depth.
    pub stages: usize,
    /// Dynamic shared memory per block: the ring, then a masked launch's table.
    pub smem: usize,
    /// Whether ranges may cut stripes (then the workspace and the counters are used).
    pub cuts: bool,
    /// The most items a call of the plan can have.
    pub max_items: usize,
    /// Stripes per expert.
    pub stripes: usize,
}

impl GroupedPlan {
    /// Plans a grouped launch of `work` over experts of `stripes` stripes of `ksteps` K
    /// steps on a GPU of `sm_count` SMs and `smem_optin` bytes of shared memory per block:
    /// whole stripes per block when a routed call's items have enough of them to fill the
    /// GPU's block slots in whole waves (to 90 %), else one range per resident block. `None`
    /// when the shared memory cannot hold two stages of the smallest tile beside the table.
    pub fn new(
        work: GroupedWork<'_>,
        (stripes, ksteps): (usize, usize),
        (sm_count, smem_optin): (usize, usize),
        tuning: &MarlinPipeline,
    ) -> Option<Self> {
        let table = work.table_bytes();
        let (mt, bps, stages) = tile(work.tile_rows(), (smem_optin, table), tuning)?;
        let (items, max_items) = work.items(8 * mt);
        let stripes = stripes.max(1);
        let total = items * stripes * (ksteps / STAGE_STEPS).max(1);
        let (bps, stages) = fewer_blocks(
            (mt, bps, stages),
            total,
            (sm_count, smem_optin, table),
            tuning,
        )?;
        let slots = bps * sm_count.max(1);
        let whole = items * stripes;
        let routed = matches!(work, GroupedWork::Routed(_));
        let (ranges, cuts) = if routed && whole <= 65535 && fills_waves(whole, slots) {
            (whole.max(1), false)
        } else if routed {
            (slots.min(total.max(1)).min(65535), true)
        } else {
            // The device's counts may give more stages than expected: every slot.
            (slots.min(65535), true)
        };
        Some(GroupedPlan {
            mt,
            ranges,
            stages,
            smem: stages * stage_bytes(mt) + table,
            cuts,
            max_items,
            stripes,
        })
    }

    /// f32 elements of the split-K workspace: two pieces per range (0 without cuts).
    pub fn workspace_floats(&self) -> usize {
        if self.cuts {
            self.ranges * 2 * super::repack::STRIPE * 8 * self.mt
        } else {
            0
        }
    }

    /// Arrival counters: one per item and stripe (0 without cuts).
    pub fn counters(&self) -> usize {
        if self.cuts {
            self.max_items * self.stripes
        } else {
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const H200_SMEM: usize = 232_448;

    /// Model of the kernel's range split: range b starts at stage b * total / ranges.
    fn starts(total: usize, ranges: usize) -> Vec<usize> {
        (0..=ranges).map(|b| b * total / ranges).collect()
    }

    #[test]
    fn plans_fill_the_gpu_and_cover_every_stage() {
        let t = MarlinPipeline::default();
        for &(m, stripes, ksteps) in &[
            (1, 64, 128),
            (16, 64, 224),
            (33, 112, 512),
            (64, 288, 224),
            (1024, 64, 128),
            (1, 1, 8),
            (7, 2, 16),
        ] {
            let p = LaunchPlan::new(m, stripes, ksteps, 132, H200_SMEM, &t).unwrap();
            assert!(p.chunks * 8 * p.mt >= m, "{p:?}");
            assert!((2..=8).contains(&p.stages), "{p:?}");
            assert!(p.smem <= max_dynamic_smem(H200_SMEM), "{p:?}");
            let total = stripes * ksteps / STAGE_STEPS;
            assert!(p.ranges >= 1 && p.ranges <= total.max(stripes), "{p:?}");
            // every range non-empty, so every stripe piece has an owner
            let s = starts(total, p.ranges);
            assert!(s.windows(2).all(|w| w[1] > w[0]), "{p:?}");
            if !p.cuts_stripes() {
                assert!(s.iter().all(|v| v % (ksteps / STAGE_STEPS) == 0), "{p:?}");
                assert_eq!(p.workspace_floats(), 0);
            }
        }
        // 2048 stages on 264 block slots would be 7.8 per range: one block per SM.
        let small = LaunchPlan::new(1, 64, 128, 132, H200_SMEM, &t).unwrap();
        assert_eq!((small.mt, small.ranges, small.stages), (1, 132, 3));
        let always_two = t.with_min_range_stages(0);
        let two = LaunchPlan::new(1, 64, 128, 132, H200_SMEM, &always_two).unwrap();
        assert_eq!((two.mt, two.ranges), (1, 264));
        // 7168 stages (7168 x 16384): 27 per range at two blocks per SM.
        let large = LaunchPlan::new(1, 56, 512, 132, H200_SMEM, &t).unwrap();
        assert_eq!(large.ranges, 264, "{large:?}");
        assert_eq!(
            LaunchPlan::new(16, 64, 128, 132, H200_SMEM, &t).unwrap().mt,
            2
        );
        assert_eq!(
            LaunchPlan::new(64, 64, 128, 132, H200_SMEM, &t).unwrap().mt,
            8
        );
        let big = LaunchPlan::new(4096, 64, 128, 132, H200_SMEM, &t).unwrap();
        assert!(!big.cuts_stripes() && big.chunks == 64, "{big:?}");
        // 288 whole stripes on 264 block slots would take two waves: one wave of ranges.
        let ragged = LaunchPlan::new(16, 288, 224, 132, H200_SMEM, &t).unwrap();
        assert_eq!(
            (ragged.ranges, ragged.cuts_stripes()),
            (264, true),
            "{ragged:?}"
        );
        // 4 chunks of 64 rows x 112 stripes on 264 slots: 85 % of two waves, so ranges.
        let wide = LaunchPlan::new(256, 112, 512, 132, H200_SMEM, &t).unwrap();
        assert_eq!((wide.chunks, wide.ranges), (4, 66), "{wide:?}");
    }

    #[test]
    fn shared_memory_limits_the_ring() {
        let t = MarlinPipeline::default();
        // A 64 KiB budget per block holds two stages of the 32-row tile, not of the 64-row
        // one: M = 64 runs as two 32-row chunks.
        let p = LaunchPlan::new(64, 64, 128, 84, 65_536, &t).unwrap();
        assert_eq!((p.mt, p.chunks, p.stages), (4, 2, 2), "{p:?}");
        assert!(p.smem <= max_dynamic_smem(65_536));
        // An sm_86-class budget (99 KiB) holds two stages of 64 rows for one block per SM; a
        // 163 KiB A100 two stages for each of two blocks.
        let ga = LaunchPlan::new(64, 64, 128, 84, 101_376, &t).unwrap();
        assert_eq!((ga.mt, ga.stages, ga.ranges), (8, 2, 84), "{ga:?}");
        let a100 = LaunchPlan::new(64, 64, 128, 108, 166_912, &t).unwrap();
        assert_eq!((a100.mt, a100.stages, a100.ranges), (8, 2, 216), "{a100:?}");
        assert!(LaunchPlan::new(1, 64, 128, 84, 30_000, &t).is_none());
        assert!(MarlinPipeline::default().is_valid());
        assert!(!MarlinPipeline::new(8, 2, 24).is_valid());
        // At most 32-row tiles: M = 64 is two chunks at two blocks per SM.
        let two = LaunchPlan::new(64, 64, 128, 132, H200_SMEM, &MarlinPipeline::new(8, 2, 32));
        let two = two.unwrap();
        assert_eq!((two.mt, two.chunks, two.ranges), (4, 2, 132), "{two:?}");
        assert!(!MarlinPipeline {
            stages: 1,
            ..MarlinPipeline::default()
        }
        .is_valid());
    }

    #[test]
    fn grouped_plans_read_each_expert_once_and_fill_the_gpu() {
        let t = MarlinPipeline::default();
        let h200 = (132, H200_SMEM);
        // DeepSeek-V3 down (7168 x 2048: 56 stripes, 64 K steps), masked decode, 8 experts of
        // 16 rows: one 16-row item per expert, one range per block slot, cuts.
        let masked = GroupedWork::Masked {
            experts: 8,
            m_max: 16,
            expected: 16,
        };
        let p = GroupedPlan::new(masked, (56, 64), h200, &t).unwrap();
        assert_eq!((p.mt, p.ranges, p.max_items), (2, 264, 8), "{p:?}");
        assert!(p.cuts && p.counters() == 8 * 56, "{p:?}");
        assert_eq!(p.smem, p.stages * stage_bytes(2) + masked.table_bytes());
        assert_eq!(masked.table_bytes(), 112);
        // A routed call of segments up to 40 rows: 64-row items, one per segment.
        let rows = [40, 3, 17];
        let r = GroupedPlan::new(GroupedWork::Routed(&rows), (56, 64), h200, &t).unwrap();
        assert_eq!((r.mt, r.max_items), (8, 3), "{r:?}");
        // Prefill: 8 experts x 4096 rows in 64-row items, 512 x 16 whole stripes fill 32
        // waves of 264 slots to 97 %: no cuts, no workspace.
        let big = [4096; 8];
        let w = GroupedPlan::new(GroupedWork::Routed(&big), (16, 224), h200, &t).unwrap();
        assert_eq!(
            (w.ranges, w.cuts, w.workspace_floats()),
            (8192, false, 0),
            "{w:?}"
        );
        // A table of a million experts leaves no room for the ring.
        let huge = GroupedWork::Masked {
            experts: 1 << 20,
            m_max: 1,
            expected: 1,
        };
        assert!(GroupedPlan::new(huge, (1, 4), h200, &t).is_none());
    }
}
