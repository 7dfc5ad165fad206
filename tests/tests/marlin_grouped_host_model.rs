//! The host model of the grouped Marlin kernel (`cu/marlin.cu` built with
//! `-DMARLIN_GROUPED`: E experts' repacked weights stacked, the rows cut into items of one M
//! tile of one expert, the items' weight stages cut into ranges): the dense model's driver
//! (`marlin_main.cpp`) under the address and undefined-behaviour sanitizers and, for the
//! masked call whose blocks scan the counts in shared memory, the thread sanitizer. Each call
//! is planned by the kernel's own `GroupedPlan` for a small GPU, so ranges cut stripes across
//! items and experts; it checks the item table of contiguous offsets (an empty expert,
//! padding rows past the last) and of runs of ids visiting an expert twice, segments taller
//! than a tile (several items each), masked counts on the device (a negative one and one above
//! M_max clamped, an expert without rows), whole-stripe plans without cuts, every activation
//! copy width, f16 and bf16, bias and routing weights, against the CPU model of the kernel's
//! arithmetic per expert; rows no item covers are left as they were, reruns in other block
//! orders are bit-identical and the arrival counters are back to zero.

use fp8_linear::cuda::marlin::plan::{x_copy_bytes, GroupedPlan, GroupedWork, MarlinPipeline};
use fp8_linear::cuda::sources::marlin_grouped_module;
use fp8_linear::cuda::testing::marlin::emulate;
use fp8_linear::cuda::testing::marlin::repack::{self, MarlinWeights};
use fp8_linear::{DType, LayerConfig};
use fp8_linear_tests::check::{compare_rows, Tolerance};
use fp8_linear_tests::grouped_model::{assert_uncovered_untouched, masked_segments};
use fp8_linear_tests::host_model::{
    encode_input, le, model_outputs, run_picked, section, HostModel,
};
use fp8_linear_tests::layers::{random_activations, random_block_weight};

const DRIVER: &str = include_str!("../host_model/marlin_main.cpp");
const LAUNCHES: usize = 3;

/// One grouped call: `experts` experts of N x K over M rows, routed by `segs` (expert, first
/// row, rows), or masked with the kernel reading `counts` (clamped to 0..M / E) on the device
/// and planned for `expected` rows each; planned for `sms` SMs.
struct Call {
    experts: usize,
    m: usize,
    n: usize,
    k: usize,
    dt: DType,
    segs: &'static [(usize, usize, usize)],
    counts: Option<&'static [i32]>,
    expected: usize,
    sms: usize,
    /// Elements between the 16-byte aligned buffer start and the activations.
    x_offset: usize,
    bias: bool,
    route_weights: bool,
}

const BASE: Call = Call {
    experts: 3,
    m: 40,
    n: 200,
    k: 3884,
    dt: DType::Bf16,
    segs: &[],
    counts: None,
    expected: 1,
    sms: 3,
    x_offset: 0,
    bias: true,
    route_weights: true,
};

/// The calls, one module (the grouped source) for all.
const CALLS: [Call; 5] = [
    // Offsets [0, 12, 12, 21, 30] of 40 rows: expert 1 empty, rows 30.. padding; 8-byte
    // copies (K = 3884); 186 stages in 8 ranges, two going from one expert's last stripe
    // into the next one's first.
    Call {
        experts: 4,
        segs: &[(0, 0, 12), (1, 12, 0), (2, 12, 9), (3, 21, 9)],
        sms: 4,
        ..BASE
    },
    // Masked, M_max = 16, counts on the device: a negative one, one above M_max; planned for
    // 8 rows, so expert 2's 16 rows are two items; element copies of misaligned activations;
    // 50 stages in 6 ranges, most of them crossing from one item into the next.
    Call {
        experts: 4,
        m: 64,
        n: 136,
        k: 520,
        dt: DType::F16,
        counts: Some(&[5, -1, 40, 9]),
        expected: 8,
        x_offset: 1,
        bias: false,
        ..BASE
    },
    // Runs of ids: expert 1, expert 0 over two 64-row items, expert 1 again; one SM, so the
    // six items' stripes fill its two block slots in whole waves: no cut.
    Call {
        experts: 2,
        m: 160,
        n: 128,
        k: 256,
        segs: &[(1, 0, 5), (0, 5, 70), (1, 80, 20)],
        sms: 1,
        route_weights: false,
        ..BASE
    },
    // Masked with every count at M_max = 16 (one 16-row item each), 4-byte copies, many
    // ranges per stripe.
    Call {
        experts: 2,
        m: 32,
        n: 100,
        k: 390,
        counts: Some(&[16, 16]),
        expected: 16,
        sms: 40,
        x_offset: 2,
        ..BASE
    },
    // Masked with no rows at all: every block leaves at once, nothing is written.
    Call {
        experts: 2,
        m: 16,
        n: 64,
        k: 128,
        counts: Some(&[0, -3]),
        expected: 4,
        ..BASE
    },
];

fn run_call(model: &HostModel, _: &(), c: &Call, tag: &str) {
    let (m, n, k, e) = (c.m, c.n, c.k, c.experts);
    let cfg = LayerConfig::block_128(n, k, c.dt, c.dt);
    let experts: Vec<MarlinWeights> = (0..e)
        .map(|_| {
            let (codes, ws) = random_block_weight(n, k, 6);
            repack::prepare(&cfg, &codes, &ws).unwrap()
        })
        .collect();
    // The stack as the kernel's device copy lays it out: expert e's stages, group scales and
    // channel scales after those of experts 0..e-1.
    let mut stack = experts[0].clone();
    for x in &experts[1..] {
        stack.weight.extend_from_slice(&x.weight);
        stack.group_scales.extend_from_slice(&x.group_scales);
        stack.channel.extend_from_slice(&x.channel);
    }
    let (xbytes, exact) = encode_input(&random_activations(m, k), c.dt);
    let bias: Vec<f32> = (0..e * n).map(|j| (j % 7) as f32 * 0.25 - 0.75).collect();
    let rw: Vec<f32> = (0..m).map(|r| 0.25 + (r % 5) as f32 * 0.375).collect();
    let m_max = c.counts.map_or(0, |_| m / e);
    let segs = c
        .counts
        .map_or_else(|| c.segs.to_vec(), |counts| masked_segments(counts, m_max));
    let rows: Vec<usize> = segs.iter().map(|s| s.2).filter(|&r| r > 0).collect();
    let work = match c.counts {
        Some(_) => GroupedWork::Masked {
            experts: e,
            m_max,
            expected: c.expected,
        },
        None => GroupedWork::Routed(&rows),
    };
    let tuning = MarlinPipeline::default().with_min_range_stages(0);
    let ksteps = stack.ksteps();
    let p = GroupedPlan::new(work, (stack.stripes(), ksteps), (c.sms, 232_448), &tuning).unwrap();
    let bm = 8 * p.mt;
    let items: Vec<i32> = if c.counts.is_some() {
        Vec::new()
    } else {
        segs.iter()
            .flat_map(|&(x, r0, len)| {
                (0..len)
                    .step_by(bm)
                    .flat_map(move |t| [x, r0 + t, bm.min(len - t)].map(|v| v as i32))
            })
            .collect()
    };
    let spg = stack.steps_per_group;
    let spg_shift = if spg.is_power_of_two() {
        spg.trailing_zeros() as i32
    } else {
        -1
    };
    let x_vec = x_copy_bytes(k, 2 * c.x_offset as u64);
    let params: Vec<i32> = [m, n, k, ksteps, spg, stack.groups]
        .map(|v| v as i32)
        .into_iter()
        .chain([spg_shift])
        .chain([p.stripes, p.stages].map(|v| v as i32))
        .chain([x_vec])
        .chain(
            [
                p.mt,
                usize::from(c.dt == DType::Bf16),
                1,
                p.ranges,
                c.x_offset,
                LAUNCHES,
                usize::from(c.bias),
                e,
                items.len() / 3,
                m_max,
                p.counters(),
            ]
            .map(|v| v as i32),
        )
        .collect();
    let mut input = Vec::new();
    section(&mut input, &le(&params, |v| v.to_le_bytes()));
    section(&mut input, &stack.weight);
    section(&mut input, &stack.group_scale_bytes());
    section(&mut input, &le(&stack.channel, |v| v.to_le_bytes()));
    section(&mut input, &le(&bias, |v| v.to_le_bytes()));
    let mut xb = vec![0u8; 2 * c.x_offset];
    xb.extend(xbytes);
    section(&mut input, &xb);
    section(&mut input, &le(&items, |v| v.to_le_bytes()));
    section(
        &mut input,
        &le(c.counts.unwrap_or(&[]), |v| v.to_le_bytes()),
    );
    let rw_in: &[f32] = if c.route_weights { &rw } else { &[] };
    section(&mut input, &le(rw_in, |v| v.to_le_bytes()));
    let what = format!(
        "grouped {} E={e} M={m} N={n} K={k} segments {segs:?} plan {p:?} x_vec {} bias {} \
         routing weights {}",
        c.dt, x_vec, c.bias, c.route_weights
    );
    let outs = model_outputs(model, &input, tag, &what, LAUNCHES, (m, n), c.dt, true);
    let out = &outs[0];
    for &(x, r0, len) in segs.iter().filter(|s| s.2 > 0) {
        let mut want = emulate(&experts[x], &exact[r0 * k..(r0 + len) * k], len);
        for (i, v) in want.iter_mut().enumerate() {
            if c.bias {
                *v += f64::from(bias[x * n + i % n]);
            }
            if c.route_weights {
                *v *= f64::from(rw[r0 + i / n]);
            }
        }
        let ids: Vec<usize> = (r0..r0 + len).collect();
        let got = &out[r0 * n..(r0 + len) * n];
        let cmp = compare_rows(got, &want, n, &ids, Tolerance::cpu(c.dt).with(4e-3, 1e-4));
        let seg = format!("{what}: segment ({x}, {r0}, {len})");
        eprintln!("host model {seg}: {}", cmp.summary());
        cmp.assert_ok(&seg);
    }
    assert_uncovered_untouched(out, (m, n), &segs, &what);
}

/// Runs the calls `pick` picks under `sanitizers`.
fn run_calls(sanitizers: &str, tag: &str, pick: Option<usize>) {
    run_picked(
        (DRIVER, sanitizers, tag),
        &[()],
        &[(0, pick)],
        |_| marlin_grouped_module(),
        |_| &CALLS,
        run_call,
    );
}

/// Every call under the address and undefined-behaviour sanitizers.
#[test]
fn the_grouped_marlin_kernel_runs_on_the_host_model() {
    run_calls("address,undefined", "marlin-grouped-asan", None);
}

/// The masked call (the blocks' scan of the counts in shared memory, ranges cutting stripes)
/// under the thread sanitizer.
#[test]
fn the_grouped_marlin_kernel_has_no_shared_memory_race() {
    run_calls("thread", "marlin-grouped-tsan", Some(1));
}
