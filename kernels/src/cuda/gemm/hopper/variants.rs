//! The tiles of the Hopper kernel: which (rows, columns, cluster) variants the source has,
//! for which weight blocks, and their shared memory.

/// (BM, BN, cluster size, math warpgroups, pipeline stages); the kernel of each is
/// `hopper_gemm_bm{BM}_n{BN}` (`c2` appended for clusters of two), and the list must match
/// the `HOPPER_KERNEL` lines of the source. BM 64: one math warpgroup, 16 stages at 16 and 32
/// columns down to 8 at 128 and 144; BM 128: two, 8 stages at 64 columns down to 6; BM 192:
/// three, 5 stages of 40 KiB, 160 registers per math thread; BM 256: two warpgroups of two
/// 64-row waves each, 4 stages of 48 KiB (the tall ones never split, only where
/// [`has_tall_tile`]); the widths 96, 112 and 144 only over 128-row weight blocks
/// ([`has_width`]); clusters of two CTAs sharing the weight tile (multicast: each CTA loads
/// half of it for both) only where the build options ask for them. On the H200 the
/// clusters cut the kernel's L2 traffic (48 % of L2 throughput against 56 %, 4096x7168 at
/// M = 4096) but not its time (within 2 %; docs/perf-log.md, "GPU: Hopper kernel, issue 12").
pub(super) const VARIANTS: [(usize, usize, usize, u32, u32); 16] = [
    (64, 16, 1, 1, 16),
    (64, 32, 1, 1, 16),
    (64, 64, 1, 1, 12),
    (64, 96, 1, 1, 10),
    (64, 112, 1, 1, 9),
    (64, 128, 1, 1, 8),
    (64, 144, 1, 1, 8),
    (128, 64, 1, 2, 8),
    (128, 96, 1, 2, 7),
    (128, 112, 1, 2, 6),
    (128, 128, 1, 2, 6),
    (128, 128, 2, 2, 6),
    (128, 144, 1, 2, 6),
    (192, 128, 1, 3, 5),
    (256, 128, 1, 2, 4),
    (256, 128, 2, 2, 4),
];

/// The widths the source has (every one exists at some height).
pub(super) const WIDTHS: [usize; 7] = [16, 32, 64, 96, 112, 128, 144];

/// The weight scale rows a `bn`-column tile spans for `r`-row weight blocks: `bn / r` when
/// `r` divides `bn`, one when `bn` divides `r`, else two (the widths of [`has_width`]);
/// `Cols::NSB` in the source.
pub(super) fn scale_rows(bn: usize, r: usize) -> usize {
    if bn.is_multiple_of(r) {
        bn / r
    } else if r.is_multiple_of(bn) {
        1
    } else {
        2
    }
}

/// Whether the kernel has `bn`-column tiles for weight blocks `block` (rows along N, columns
/// along K): 16, 32, 64 and 128 (each holds whole scale rows of 32, 64 or 128 or sits inside
/// one), and over 128-row blocks also 96, 112 and 144 (a tile of those spans at most two
/// scale rows; the source compiles them under the same rule).
pub(super) fn has_width(bn: usize, block: (usize, usize)) -> bool {
    match bn {
        96 | 112 | 144 => block.0 == 128,
        _ => WIDTHS.contains(&bn),
    }
}

/// Shared memory of one math warp's epilogue staging buffer: 8 rows of 64 bytes of output
/// (`EPI_BYTES` in the source), through which the tile leaves as 16-byte row pieces.
const EPI_WARP_BYTES: usize = 8 * 64;

/// Dynamic shared memory of a variant of `bm` x `bn` tiles, `math_wgs` math warpgroups and
/// `stages` stages for weight blocks `block` (rows along N, columns along K): per stage the A
/// and B tiles, the scales of the stage (for each of the 128 / C scale blocks of a K tile,
/// `bm` activation scales and the tile's weight scale rows, f32, rounded up to 16 bytes) and
/// two mbarriers; after the stages, each math warp's epilogue buffer, then (`grouped`) the
/// segment table; 1 KiB covers the 1024-byte alignment of the swizzled tiles (`Sc` and the
/// layout in the source).
pub(super) fn smem_bytes(
    (bm, bn, math_wgs): (usize, usize, u32),
    stages: u32,
    block: (usize, usize),
    grouped: bool,
) -> u32 {
    let subs = 128 / block.1;
    let scales = (subs * (bm + scale_rows(bn, block.0)) * 4).div_ceil(16) * 16;
    let stage = bm * 128 + bn * 128 + scales + 16;
    let epilogue = 4 * math_wgs as usize * EPI_WARP_BYTES;
    let table = if grouped { SEGMENT_TABLE_BYTES } else { 0 };
    1024 + stages * stage as u32 + (epilogue + table) as u32
}

/// The grouped kernels' segment table: `SEG_TAB` (256) entries of four i32 (the units up
/// to the segment, its expert, first row and rows); launches with more segments walk them
/// in global memory.
const SEGMENT_TABLE_BYTES: usize = 256 * 16;

/// Whether the tall tiles (192 and 256 rows) exist for weight blocks `block` (rows along N,
/// columns along K): their registers leave room for the scales of at most two scale blocks
/// per 128-long K tile (C >= 64; the source compiles them under the same rule).
pub(super) fn has_tall_tile(block: (usize, usize)) -> bool {
    block.1 >= 64
}

/// Whether variant `v` of [`VARIANTS`] exists for weight blocks `block`.
pub(super) fn has_variant(v: &(usize, usize, usize, u32, u32), block: (usize, usize)) -> bool {
    (v.0 <= 128 || has_tall_tile(block)) && has_width(v.1, block)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_variant_fits_hopper_shared_memory() {
        // 227 KiB per block (H100 / H200 opt-in), for every weight block the kernel takes;
        // the tall tiles and the unaligned widths only where they exist.
        for block in [
            (32, 32),
            (64, 64),
            (128, 128),
            (128, 32),
            (32, 128),
            (64, 128),
        ] {
            for v in &VARIANTS {
                if !has_variant(v, block) {
                    continue;
                }
                for grouped in [false, true] {
                    let smem = smem_bytes((v.0, v.1, v.3), v.4, block, grouped);
                    assert!(
                        smem <= 232_448,
                        "{v:?} {block:?} (grouped {grouped}): {smem}"
                    );
                }
            }
        }
        // 128x128 blocks, 128 x 128 tiles: 6 stages of 32 KiB tiles, 516 B of scales
        // (rounded to 528) and 16 B of barriers each; 8 math warps' epilogue buffers.
        assert_eq!(
            smem_bytes((128, 128, 2), 6, (128, 128), false),
            1024 + 6 * (32768 + 528 + 16) + 8 * 512
        );
        assert_eq!(
            smem_bytes((128, 128, 2), 6, (128, 128), true),
            1024 + 6 * (32768 + 528 + 16) + 8 * 512 + 4096
        );
        // 144 columns over 128-row blocks span two scale rows; 16 columns sit in one.
        assert_eq!(scale_rows(144, 128), 2);
        assert_eq!(scale_rows(16, 128), 1);
        assert_eq!(scale_rows(128, 32), 4);
        assert!(has_width(96, (128, 128)) && !has_width(96, (64, 128)));
        assert!(!has_width(96, (32, 32)) && has_width(16, (32, 32)));
        assert!(has_width(32, (64, 64)) && !has_width(48, (128, 128)));
    }
}
