//! The host model of the grouped portable GEMM (`cu/block_gemm.cu` built with
//! `-DBLOCK_GROUPED`: E stacked experts, one grid row per row tile of an expert's rows):
//! the dense model's driver (`portable_host_model.rs`), under the address and
//! undefined-behaviour sanitizers and, for one call, the thread sanitizer. It checks the row
//! tiles of every call form (contiguous offsets with an empty expert and padding rows past the
//! last, runs of expert ids visiting an expert twice, masked counts read on the device with a
//! negative one and one above M_max clamped and the tiles past a count leaving at once),
//! tiles ending inside their last 16-row slab, each expert's weights, scales and bias found in
//! the stacks, the routing weights multiplied after the bias, each tile height and 32-row
//! weight blocks, against each segment's f64 reference; rows no tile covers are left as they
//! were, and reruns in other block orders are bit-identical.

use fp8_linear::cuda::sources::block_grouped_module;
use fp8_linear::DType;
use fp8_linear_tests::grouped_model::{masked_segments, GroupedData};
use fp8_linear_tests::host_model::{
    float_index, gemm_input, le, model_outputs, padded_rows, run_picked, section, HostModel,
};

const DRIVER: &str = include_str!("../host_model/block_gemm_main.cpp");
const LAUNCHES: usize = 2;

/// One module (tile height, stages, weight block rows) and its calls.
struct Module {
    mt: u32,
    stages: u32,
    block_rows: usize,
    calls: &'static [Call],
}

/// One grouped call: `experts` experts of N x K over M rows, routed by `segs` (expert, first
/// row, rows), or masked with the kernel reading `counts` (clamped to 0..M / E) on the device.
struct Call {
    experts: usize,
    m: usize,
    n: usize,
    k: usize,
    segs: &'static [(usize, usize, usize)],
    counts: Option<&'static [i32]>,
    out: DType,
    bias: bool,
    route_weights: bool,
}

const MODULES: [Module; 4] = [
    Module {
        mt: 1,
        stages: 4,
        block_rows: 128,
        // Offsets [0, 40, 40, 90] of 100 rows: expert 1 empty, rows 90.. padding.
        calls: &[Call {
            experts: 3,
            m: 100,
            n: 200,
            k: 300,
            segs: &[(0, 0, 40), (1, 40, 0), (2, 40, 50)],
            counts: None,
            out: DType::Bf16,
            bias: true,
            route_weights: true,
        }],
    },
    Module {
        mt: 2,
        stages: 3,
        block_rows: 128,
        // Masked, M_max = 32, counts on the device: a negative one, one above M_max.
        calls: &[Call {
            experts: 4,
            m: 128,
            n: 136,
            k: 520,
            segs: &[],
            counts: Some(&[20, -1, 64, 5]),
            out: DType::F16,
            bias: false,
            route_weights: true,
        }],
    },
    Module {
        mt: 4,
        stages: 2,
        block_rows: 128,
        // Runs of ids: expert 1, expert 0 over two tiles, expert 1 again.
        calls: &[Call {
            experts: 2,
            m: 160,
            n: 260,
            k: 256,
            segs: &[(1, 0, 5), (0, 5, 130), (1, 135, 20)],
            counts: None,
            out: DType::F32,
            bias: true,
            route_weights: false,
        }],
    },
    Module {
        mt: 1,
        stages: 4,
        block_rows: 32,
        calls: &[Call {
            experts: 2,
            m: 40,
            n: 100,
            k: 384,
            segs: &[(1, 0, 17), (0, 20, 20)],
            counts: None,
            out: DType::Bf16,
            bias: true,
            route_weights: true,
        }],
    },
];

fn run_call(model: &HostModel, module: &Module, c: &Call, tag: &str) {
    let (m, n, k, e) = (c.m, c.n, c.k, c.experts);
    let block = (module.block_rows, 128);
    let kp = k.div_ceil(16) * 16;
    let bm = 32 * module.mt as usize;
    let d = GroupedData::random((m, n, k, e), block);
    // Grid rows: one per row tile of each segment, or E slabs of `tps` tiles (masked).
    let m_max = c.counts.map_or(0, |_| m / e);
    let tps = m_max.div_ceil(bm);
    let segs = c
        .counts
        .map_or_else(|| c.segs.to_vec(), |counts| masked_segments(counts, m_max));
    let tiles: Vec<i32> = c
        .segs
        .iter()
        .flat_map(|&(x, r0, len)| {
            (0..len.div_ceil(bm)).flat_map(move |t| [x, r0 + t * bm, r0 + len].map(|v| v as i32))
        })
        .collect();
    let gm = if c.counts.is_some() {
        e * tps
    } else {
        tiles.len() / 3
    };
    let params = [
        m,
        n,
        k,
        kp,
        n.div_ceil(128),
        gm,
        1,
        k.div_ceil(128),
        float_index(c.out),
        usize::from(c.bias),
        LAUNCHES,
        e,
        usize::from(c.route_weights),
        tps,
        m_max,
    ];
    let mut input = gemm_input(
        &params,
        (&padded_rows(&d.a, m, k, kp), &d.a_scales),
        (&padded_rows(&d.w, e * n, k, kp), &d.w_scales),
        &d.bias,
    );
    section(&mut input, &le(&tiles, |v| v.to_le_bytes()));
    section(&mut input, &le(&d.rw, |v| v.to_le_bytes()));
    section(
        &mut input,
        &le(c.counts.unwrap_or(&[]), |v| v.to_le_bytes()),
    );
    let what = format!(
        "grouped MT={} stages={} block {}x128 -> {}: E={e} M={m} N={n} K={k} segments {segs:?} \
         bias {} routing weights {}",
        module.mt, module.stages, module.block_rows, c.out, c.bias, c.route_weights
    );
    let outs = model_outputs(model, &input, tag, &what, LAUNCHES, (m, n), c.out, true);
    d.check(&outs[0], &segs, (c.bias, c.route_weights, c.out), &what);
}

/// Runs the calls of `pick` (module, call or all) under `sanitizers`.
fn run_modules(sanitizers: &str, tag: &str, pick: &[(usize, Option<usize>)]) {
    run_picked(
        (DRIVER, sanitizers, tag),
        &MODULES,
        pick,
        |m| block_grouped_module(m.mt, m.stages, 1, (m.block_rows, 128)),
        |m| m.calls,
        run_call,
    );
}

/// Every module and call under the address and undefined-behaviour sanitizers.
#[test]
fn the_grouped_portable_kernel_runs_on_the_host_model() {
    run_modules(
        "address,undefined",
        "portable-grouped-asan",
        &[(0, None), (1, None), (2, None), (3, None)],
    );
}

/// The masked call (tiles leaving at once past a count) under the thread sanitizer.
#[test]
fn the_grouped_portable_kernel_has_no_shared_memory_race() {
    run_modules("thread", "portable-grouped-tsan", &[(1, None)]);
}
