//! [`plan_tile`]: the tile (rows, columns) and K split of a call, from a cost model of the
//! H200 fitted on a sweep of every tile.

/// The constants of [`plan_tile`]'s cost model of the H200, in microseconds and bytes: fitted
/// on an H200 sweep of every tile with and without K splits at M = 1..4096 on the six
/// DeepSeek-V3 shapes (docs/perf-log.md, "issue 30"), where the model's choice measured within
/// 1.1x of the best tile on every point (within 2 % on 34 of 42).
mod cost {
    /// Tile bytes one SM takes in per microsecond (about 28 bytes per cycle at 1.75 GHz).
    pub const INGEST: f64 = 49_000.0;
    /// Multiply-adds one SM runs per microsecond (80 % of 4096 per cycle).
    pub const MACS: f64 = 5.7e6;
    /// The weight stream from HBM, bytes per microsecond.
    pub const HBM: f64 = 3.5e6;
    /// Shortest K block of a 128-column tile (the wgmma, barrier and promotion latency of one
    /// stage); a narrower tile's is shorter, down to half of it.
    pub const MIN_KB: f64 = 0.45;
    /// Per work unit: pipeline fill, epilogue.
    pub const UNIT: f64 = 3.0;
    /// A split call's extra kernel (the in-order sum) ...
    pub const SPLIT: f64 = 4.0;
    /// ... and its partials, written and read, bytes per microsecond.
    pub const PARTIALS: f64 = 3e6;
    /// Tiles without the two accumulator sets (more than 128 rows or columns) promote after
    /// their MMAs: 30 % longer per K block ...
    pub const SERIAL: f64 = 1.3;
    /// ... but the 256-row tile, two 64-row waves per warpgroup over one weight tile, gains
    /// back 15 % of it.
    pub const TWO_WAVES: f64 = 0.85;
}

/// A launch shape: tile rows and columns, K splits and K blocks per split.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct TileChoice {
    /// Tile rows (64, 128, 192 or 256).
    pub bm: usize,
    /// Tile columns (16 to 144).
    pub bn: usize,
    /// K splits (1: none).
    pub splits: usize,
    /// 128-long K blocks per split.
    pub kb_per_split: usize,
}

/// Modelled time in microseconds of `m` x `n` x `k` on `sms` SMs with `bm` x `bn` tiles and
/// K in `splits` parts (see [`plan_tile`]); None where the split count leaves a split empty.
pub fn tile_cost(
    m: usize,
    n: usize,
    k: usize,
    sms: usize,
    bm: usize,
    bn: usize,
    splits: usize,
) -> Option<(f64, TileChoice)> {
    let sms = sms.max(1);
    let kb = k.div_ceil(128).max(1);
    let per = kb.div_ceil(splits.max(1));
    let s_eff = kb.div_ceil(per);
    if s_eff != splits {
        return None;
    }
    let (num_m, num_n) = (m.div_ceil(bm), n.div_ceil(bn));
    let serial = match (bm, bn) {
        (256, _) => cost::SERIAL * cost::TWO_WAVES,
        _ if bm > 128 || bn > 128 => cost::SERIAL,
        _ => 1.0,
    };
    // Rows past M are zero-filled by TMA, not read; the MMAs run on the whole tile.
    let bytes = ((m.min(bm) + bn) * 128) as f64;
    let macs = (bm * bn * 128) as f64;
    let min_kb = cost::MIN_KB * (0.5 + 0.5 * bn as f64 / 128.0);
    let t_sm = (bytes / cost::INGEST).max(macs / cost::MACS).max(min_kb) * serial;
    // A wave of `active` CTAs. Units are walked n-block outer, m inner, split innermost: it
    // reads about active / (num_m * splits) distinct weight tiles per K block, each once.
    let wave = |active: usize| {
        let weight = (active.div_ceil(num_m * s_eff) * s_eff * bn * 128) as f64;
        per as f64 * t_sm.max(weight / cost::HBM) + cost::UNIT
    };
    // Every full wave costs the same, the last one runs the rest: in closed form (a loop over
    // the waves cost the host up to 0.3 ms per call at M = 4096 over all candidate tiles and
    // splits, more than the GEMM itself on the H200).
    let units = num_m * num_n * s_eff;
    let mut t = (units / sms) as f64 * wave(sms);
    if !units.is_multiple_of(sms) {
        t += wave(units % sms);
    }
    if s_eff > 1 {
        t += cost::SPLIT + (s_eff * m * n * 8) as f64 / cost::PARTIALS;
    }
    let choice = TileChoice {
        bm,
        bn,
        splits: s_eff,
        kb_per_split: per,
    };
    Some((t, choice))
}

/// The launch shape for `m` rows of an `n` x `k` layer on `sms` SMs among `tiles` (the
/// (rows, columns) the layer has), at most `max_splits` K splits (<= 16): the least modelled
/// time ([`tile_cost`]: per wave of persistent CTAs, each K block takes the longest of its
/// tile bytes at the measured per-SM ingest rate, its MMAs, a latency floor and the wave's
/// weight stream from HBM; a unit adds a fixed cost, a split the epilogue kernel and its
/// partials), the first of those within 3 % in the order: no split before splits, 64 rows
/// only up to 64 rows, wider tiles first. Splits only for tiles of up to 128 rows (the
/// taller ones' registers hold no reduction).
pub fn plan_tile(
    m: usize,
    n: usize,
    k: usize,
    sms: usize,
    tiles: &[(usize, usize)],
    max_splits: usize,
) -> TileChoice {
    let mut order: Vec<(usize, usize)> = tiles
        .iter()
        .copied()
        .filter(|&(bm, _)| m > 64 || bm == 64)
        .collect();
    if order.is_empty() {
        order = tiles.to_vec();
    }
    order.sort_by_key(|&(bm, bn)| (std::cmp::Reverse(bn), bm));
    order.dedup();
    let kb = k.div_ceil(128).max(1);
    let mut best: Option<(f64, TileChoice)> = None;
    let max_s = max_splits.clamp(1, 16).min(kb);
    for s in 1..=max_s {
        for &(bm, bn) in &order {
            if s > 1 && bm > 128 {
                continue;
            }
            let Some(c) = tile_cost(m, n, k, sms, bm, bn, s) else {
                continue;
            };
            if best.is_none_or(|b| c.0 < b.0 * 0.97) {
                best = Some(c);
            }
        }
    }
    best.map_or(
        TileChoice {
            bm: 128,
            bn: 128,
            splits: 1,
            kb_per_split: kb,
        },
        |b| b.1,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cuda::hopper::variants::{has_variant, VARIANTS};

    /// The (N, K) of the six DeepSeek-V3 linear layers (the Hopper bench's shapes).
    const DEEPSEEK_V3: [(usize, usize); 6] = [
        (4096, 7168),
        (7168, 2048),
        (2112, 7168),
        (24576, 1536),
        (7168, 16384),
        (18432, 7168),
    ];

    /// The (rows, columns) a 128x128-block layer has.
    fn all_tiles() -> Vec<(usize, usize)> {
        VARIANTS
            .iter()
            .filter(|v| v.2 == 1 && has_variant(v, (128, 128)))
            .map(|v| (v.0, v.1))
            .collect()
    }

    #[test]
    fn tiles_fill_the_gpu_and_follow_the_measured_best() {
        let tiles = all_tiles();
        let plan = |m: usize, n: usize, k: usize| plan_tile(m, n, k, 132, &tiles, 16);
        // The six DeepSeek-V3 shapes at M = 64 and 128: the units fill at least 84 % of
        // their last wave of 132 SMs (84 %: 112 of 132).
        for (n, k) in DEEPSEEK_V3 {
            for m in [64, 128] {
                let t = plan(m, n, k);
                let units = m.div_ceil(t.bm) * n.div_ceil(t.bn) * t.splits;
                let waves = units.div_ceil(132);
                let fill = units as f64 / (waves * 132) as f64;
                assert!(fill >= 0.84, "{n}x{k} M={m}: {t:?}, {units} units");
            }
        }
        // The choices the H200 sweep backs (each the measured best or within 4 % of it):
        // (M, N, K) -> (rows, columns, splits).
        for ((m, n, k), want) in [
            ((64, 4096, 7168), (64, 64, 2)),
            ((128, 4096, 7168), (64, 64, 1)),
            ((512, 4096, 7168), (128, 128, 1)),
            ((4096, 4096, 7168), (256, 128, 1)),
            ((1, 7168, 2048), (64, 64, 1)),
            ((64, 18432, 7168), (64, 144, 1)),
            ((128, 18432, 7168), (128, 144, 1)),
            ((64, 24576, 1536), (64, 96, 1)),
            ((4096, 2112, 7168), (192, 128, 1)),
            ((16, 7168, 16384), (64, 128, 2)),
        ] {
            let t = plan(m, n, k);
            assert_eq!((t.bm, t.bn, t.splits), want, "M={m} {n}x{k}");
        }
        // Every plan covers K: splits x K blocks per split >= K blocks, no empty split.
        for (m, n, k) in [(1, 4096, 7168), (16, 7, 16384), (300, 1000, 200), (1, 1, 1)] {
            let t = plan(m, n, k);
            let kb = k.div_ceil(128);
            assert!(t.splits * t.kb_per_split >= kb, "{t:?}");
            assert!((t.splits - 1) * t.kb_per_split < kb, "{t:?}");
            assert!(tiles.contains(&(t.bm, t.bn)), "{t:?}");
            if t.bm > 128 {
                assert_eq!(t.splits, 1);
            }
        }
        // The cap holds; a single K block never splits.
        assert_eq!(plan_tile(1, 128, 7168, 132, &[(64, 128)], 1).splits, 1);
        assert_eq!(plan_tile(1, 128, 128, 132, &[(64, 128)], 16).splits, 1);
        // With 128-column tiles only (a layer whose options fix the width), a small M still
        // splits K to fill the GPU.
        assert!(plan_tile(1, 4096, 7168, 132, &[(64, 128)], 16).splits >= 3);
        // Up to 64 rows, 64-row tiles only.
        assert_eq!(plan(64, 24576, 1536).bm, 64);
    }
}
