//! The host model of the grouped Hopper GEMM (`cu/hopper_gemm.cu` built with
//! `-DHOPPER_GROUPED`: E stacked experts, the rows cut into (expert, first row, rows)
//! segments): the same source and driver as the dense host model (`hopper_host_model.rs`),
//! under the address and undefined-behaviour sanitizers and, for one call, the thread
//! sanitizer. It checks the persistent walk over every segment's tiles (a few CTAs, several
//! units each, in another block order per launch), segments of every call form (contiguous
//! offsets with an empty expert and padding rows past the last offset, masked slabs with
//! empty and one-row experts, runs of expert ids that visit one expert twice), segments that
//! start inside a tile and end inside the next, masked counts read on the device (a negative
//! one and one above M_max clamped), the segment table in shared memory and, past its 256
//! segments, the walk over the counts in global memory, each expert's weight rows, weight
//! scales and bias found in the stacks, the routing weights multiplied after the bias, tall
//! and narrow, aligned and unaligned tiles, the staged and the direct epilogue, against the
//! f64 reference of each segment on its expert; rows no segment covers are left as they were.

use fp8_linear::cuda::sources::hopper_grouped_module;
use fp8_linear::DType;
use fp8_linear_tests::grouped_model::{masked_segments, GroupedData};
use fp8_linear_tests::host_model::{
    float_index, gemm_input, le, model_outputs, padded_rows, run_picked, section, HostModel,
};

const DRIVER: &str = include_str!("../host_model/hopper_gemm_main.cpp");
const LAUNCHES: usize = 2;

/// One grouped call: `experts` experts of N x K over M rows cut into `segs` (expert, first
/// row, rows), or masked with the kernel reading `counts` (clamped to 0..M / E) on the
/// device, on `bm` x `bn` tiles, `ctas` persistent CTAs.
struct Call {
    experts: usize,
    m: usize,
    n: usize,
    k: usize,
    tile: (usize, usize),
    segs: &'static [(usize, usize, usize)],
    counts: Option<&'static [i32]>,
    bias: bool,
    route_weights: bool,
    ctas: usize,
}

/// Counts of 260 experts with slabs of 2 rows: rows for experts 3, 200 and 259 (past the
/// segment table's 256 entries), none for the others.
const MANY_EXPERTS: [i32; 260] = {
    let mut c = [0; 260];
    c[3] = 1;
    c[200] = 2;
    c[259] = 1;
    c
};

/// One module (weight blocks, output dtype) and its calls.
struct Module {
    block: (usize, usize),
    output: DType,
    calls: &'static [Call],
}

const MODULES: [Module; 2] = [
    Module {
        block: (128, 128),
        output: DType::Bf16,
        calls: &[
            // Offsets [0, 70, 70, 270] of 300 rows: expert 1 empty, rows 270.. padding;
            // expert 2's rows start inside a 64-row tile.
            Call {
                experts: 3,
                m: 300,
                n: 200,
                k: 700,
                tile: (64, 64),
                counts: None,
                segs: &[(0, 0, 70), (1, 70, 0), (2, 70, 200)],
                bias: true,
                route_weights: true,
                ctas: 3,
            },
            // Masked, M_max = 40: counts [40, 0, 13, 1] (a full slab, an empty one, a
            // partial one, one row).
            Call {
                experts: 4,
                m: 160,
                n: 264,
                k: 500,
                tile: (128, 128),
                counts: None,
                segs: &[(0, 0, 40), (1, 40, 0), (2, 80, 13), (3, 120, 1)],
                bias: false,
                route_weights: true,
                ctas: 4,
            },
            // Runs of expert ids: expert 1 twice, expert 0 between; 256-row tiles.
            Call {
                experts: 2,
                m: 130,
                n: 136,
                k: 600,
                tile: (256, 128),
                counts: None,
                segs: &[(1, 0, 5), (0, 5, 90), (1, 95, 35)],
                bias: true,
                route_weights: false,
                ctas: 2,
            },
            // Masked with the counts on the device, M_max = 40: a full slab, a negative count
            // and one above M_max (clamped to 0 and 40), one row.
            Call {
                experts: 4,
                m: 160,
                n: 264,
                k: 500,
                tile: (64, 128),
                counts: Some(&[40, -3, 99, 1]),
                segs: &[],
                bias: true,
                route_weights: true,
                ctas: 3,
            },
            // Masked on the device over 19 experts, M_max = 4: rows in three of the walk's
            // chunks of 8 experts (3, 9, 18), empty experts between them, two CTAs that
            // each pass several.
            Call {
                experts: 19,
                m: 76,
                n: 80,
                k: 200,
                tile: (64, 32),
                counts: Some(&[0, 0, 0, 2, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 1]),
                segs: &[],
                bias: true,
                route_weights: true,
                ctas: 2,
            },
            // Ten segments (two empty), the tenth in the walk's second chunk.
            Call {
                experts: 10,
                m: 40,
                n: 48,
                k: 160,
                tile: (64, 16),
                counts: None,
                segs: &[
                    (9, 0, 3),
                    (8, 3, 0),
                    (7, 3, 5),
                    (6, 8, 4),
                    (5, 12, 0),
                    (4, 12, 7),
                    (3, 19, 6),
                    (2, 25, 2),
                    (1, 27, 9),
                    (0, 36, 4),
                ],
                bias: false,
                route_weights: false,
                ctas: 4,
            },
            // Masked on the device over more experts than the kernel's segment table holds
            // (256): the walk reads the counts in global memory.
            Call {
                experts: 260,
                m: 520,
                n: 128,
                k: 128,
                tile: (64, 16),
                counts: Some(&MANY_EXPERTS),
                segs: &[],
                bias: false,
                route_weights: true,
                ctas: 3,
            },
            // 144 columns (two scale rows), rows of 600 bytes: the direct stores.
            Call {
                experts: 2,
                m: 50,
                n: 300,
                k: 300,
                tile: (64, 144),
                counts: None,
                segs: &[(1, 3, 20), (0, 30, 17)],
                bias: true,
                route_weights: true,
                ctas: 3,
            },
        ],
    },
    Module {
        block: (64, 64),
        output: DType::F32,
        calls: &[Call {
            experts: 3,
            m: 90,
            n: 72,
            k: 330,
            tile: (64, 32),
            counts: None,
            segs: &[(2, 0, 33), (0, 33, 57)],
            bias: true,
            route_weights: true,
            ctas: 3,
        }],
    },
];

fn run_call(model: &HostModel, module: &Module, c: &Call, tag: &str) {
    let (m, n, k, e) = (c.m, c.n, c.k, c.experts);
    let (rows, cols) = module.block;
    let ldk = k.div_ceil(16) * 16;
    let (kbs, nbs) = (k.div_ceil(cols), n.div_ceil(rows));
    let d = GroupedData::random((m, n, k, e), module.block);
    // The scale stack's rows padded to ldbs, as a layer's copy may have them.
    let ldbs = kbs + 1;
    let mut bs = vec![0f32; e * nbs * ldbs];
    for r in 0..e * nbs {
        bs[r * ldbs..r * ldbs + kbs].copy_from_slice(&d.w_scales[r * kbs..(r + 1) * kbs]);
    }
    let (bm, bn) = c.tile;
    // The segments the kernel computes: the triples, or the clamped device counts.
    let m_max = c.counts.map_or(0, |_| m / e);
    let segs = c
        .counts
        .map_or_else(|| c.segs.to_vec(), |counts| masked_segments(counts, m_max));
    let units: usize = segs.iter().map(|s| s.2.div_ceil(bm) * n.div_ceil(bn)).sum();
    let params = [
        m,
        n,
        k,
        ldk,
        ldbs,
        bm,
        bn,
        1,
        k.div_ceil(128),
        c.ctas.min(units),
        usize::from(c.bias),
        LAUNCHES,
        e,
        segs.len(),
        usize::from(c.route_weights),
        m_max,
    ];
    let mut input = gemm_input(
        &params,
        (&padded_rows(&d.a, m, k, ldk), &d.a_scales_m_fastest()),
        (&padded_rows(&d.w, e * n, k, ldk), &bs),
        &d.bias,
    );
    let triples: Vec<i32> = c
        .segs
        .iter()
        .flat_map(|&(x, r0, len)| [x as i32, r0 as i32, len as i32])
        .collect();
    section(&mut input, &le(&triples, |v| v.to_le_bytes()));
    section(&mut input, &le(&d.rw, |v| v.to_le_bytes()));
    section(
        &mut input,
        &le(c.counts.unwrap_or(&[]), |v| v.to_le_bytes()),
    );
    let what = format!(
        "grouped {rows}x{cols} blocks -> {}: E={e} M={m} N={n} K={k} tile {bm}x{bn} \
         segments {segs:?} bias {} routing weights {}",
        module.output, c.bias, c.route_weights
    );
    let outs = model_outputs(
        model,
        &input,
        tag,
        &what,
        LAUNCHES,
        (m, n),
        module.output,
        true,
    );
    let flags = (c.bias, c.route_weights, module.output);
    d.check(&outs[0], &segs, flags, &what);
}

/// Runs the calls of `pick` (module, call or all) under `sanitizers`.
fn run_modules(sanitizers: &str, tag: &str, pick: &[(usize, Option<usize>)]) {
    run_picked(
        (DRIVER, sanitizers, tag),
        &MODULES,
        pick,
        |m| hopper_grouped_module(m.block, float_index(m.output)),
        |m| m.calls,
        run_call,
    );
}

/// Every module and call under the address and undefined-behaviour sanitizers.
#[test]
fn the_grouped_hopper_kernel_runs_on_the_host_model() {
    run_modules(
        "address,undefined",
        "hopper-grouped-asan",
        &[(0, None), (1, None)],
    );
}

/// The masked call (empty and one-row experts, two-set loop) under the thread sanitizer.
#[test]
fn the_grouped_hopper_kernel_has_no_shared_memory_race() {
    run_modules("thread", "hopper-grouped-tsan", &[(0, Some(1))]);
}
