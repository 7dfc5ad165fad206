//! The host model of the Marlin kernel (`cu/marlin.cu`): the kernel's own source compiled on
//! the CPU (tests/src/host_model.rs) under the address and undefined-behaviour sanitizers
//! (and, for three plans, the thread sanitizer: a race check of the shared-memory barriers).
//! It checks, without a GPU, what the GPU tests check on one: the output against the CPU
//! model of the kernel's arithmetic, every output written, reruns bit-identical whatever the
//! order the blocks run in (the cut-stripe reduction is ordered), the arrival counters back
//! to zero, and no read or write outside a buffer; for the launch plans of small and large
//! GPUs, every M tile, ragged N and K, and every activation copy width. Skips with a printed
//! reason when there is no C++20 compiler.

use fp8_linear::cuda::marlin::plan::{x_copy_bytes, LaunchPlan, MarlinPipeline};
use fp8_linear::cuda::sources::marlin_module;
use fp8_linear::cuda::testing::marlin::emulate;
use fp8_linear::cuda::testing::marlin::repack;
use fp8_linear::{DType, LayerConfig, ScaleDtype};
use fp8_linear_tests::check::{compare, Tolerance};
use fp8_linear_tests::host_model::{le, section, HostModel};
use fp8_linear_tests::layers::{random_activations, random_weight_blocks};
use half::{bf16, f16};

const DRIVER: &str = include_str!("../host_model/marlin_main.cpp");

/// One layer and call on the host model.
struct Case {
    n: usize,
    k: usize,
    /// Weight blocks (rows along N, columns along K).
    blocks: (u32, u32),
    dt: DType,
    m: usize,
    /// SMs of the GPU the plan is made for.
    sms: usize,
    /// Opt-in shared memory per block of that GPU.
    smem: usize,
    tuning: MarlinPipeline,
    /// Elements between the 16-byte aligned buffer start and the activations.
    x_offset: usize,
    bias: bool,
}

const LAUNCHES: usize = 3;

fn run_case(model: &HostModel, c: &Case, tag: &str) {
    let cfg = LayerConfig::block(c.n, c.k, c.blocks, ScaleDtype::F32, c.dt, c.dt);
    let (rows, cols) = (c.blocks.0 as usize, c.blocks.1 as usize);
    let (codes, ws) = random_weight_blocks(c.n, c.k, (rows, cols), 6);
    let mw = repack::prepare(&cfg, &codes, &ws).unwrap();
    let bf = c.dt == DType::Bf16;
    let x = random_activations(c.m, c.k);
    let bits: Vec<u16> = x
        .iter()
        .map(|v| {
            if bf {
                bf16::from_f32(*v).to_bits()
            } else {
                f16::from_f32(*v).to_bits()
            }
        })
        .collect();
    let exact: Vec<f32> = bits
        .iter()
        .map(|b| repack::half_bits_to_f32(*b, bf))
        .collect();
    let bias: Vec<f32> = (0..c.n).map(|j| (j % 7) as f32 * 0.25 - 0.75).collect();
    let ksteps = mw.ksteps();
    let p = LaunchPlan::new(c.m, mw.stripes(), ksteps, c.sms, c.smem, &c.tuning).unwrap();
    let spg = mw.steps_per_group;
    let params: Vec<i32> = vec![
        c.m as i32,
        c.n as i32,
        c.k as i32,
        ksteps as i32,
        spg as i32,
        mw.groups as i32,
        if spg.is_power_of_two() {
            spg.trailing_zeros() as i32
        } else {
            -1
        },
        p.stripes as i32,
        p.stages as i32,
        x_copy_bytes(c.k, 2 * c.x_offset as u64),
        p.mt as i32,
        i32::from(bf),
        p.chunks as i32,
        p.ranges as i32,
        c.x_offset as i32,
        LAUNCHES as i32,
        i32::from(c.bias),
    ];
    let mut input = Vec::new();
    section(&mut input, &le(&params, |v| v.to_le_bytes()));
    section(&mut input, &mw.weight);
    section(&mut input, &mw.group_scale_bytes());
    section(&mut input, &le(&mw.channel, |v| v.to_le_bytes()));
    section(&mut input, &le(&bias, |v| v.to_le_bytes()));
    let mut xb = vec![0u8; 2 * c.x_offset];
    xb.extend(le(&bits, |v| v.to_le_bytes()));
    section(&mut input, &xb);
    let what = format!(
        "N={} K={} {} M={} plan {p:?} x_vec {} bias {}",
        c.n, c.k, c.dt, c.m, params[9], c.bias
    );
    let raw = model
        .run(&input, tag)
        .unwrap_or_else(|e| panic!("{what}: the host model failed: {e}"));
    let (m, n) = (c.m, c.n);
    assert_eq!(raw.len(), LAUNCHES * m * n * 2, "{what}");
    let launch = |l: usize| -> Vec<u16> {
        raw[l * m * n * 2..(l + 1) * m * n * 2]
            .chunks(2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
            .collect()
    };
    let first = launch(0);
    for l in 1..LAUNCHES {
        assert!(
            first == launch(l),
            "{what}: launch {l} (another block order) differs from launch 0"
        );
    }
    let got: Vec<f32> = first
        .iter()
        .map(|b| repack::half_bits_to_f32(*b, bf))
        .collect();
    let mut model = emulate(&mw, &exact, m);
    if c.bias {
        for (i, v) in model.iter_mut().enumerate() {
            *v += bias[i % n] as f64;
        }
    }
    let cmp = compare(&got, &model, n, Tolerance::cpu(c.dt).with(4e-3, 1e-4));
    eprintln!("host model {what}: {}", cmp.summary());
    cmp.assert_ok(&what);
}

/// The launch plans the host model runs: every M tile, cut and whole stripes, 2-5 stage
/// rings, ragged N and K, every activation copy width, f16 and bf16, bias, 128x128 and
/// 16-row weight blocks.
fn cases() -> Vec<Case> {
    let h200 = (132, 232_448);
    let base = Case {
        n: 128,
        k: 512,
        blocks: (128, 128),
        dt: DType::Bf16,
        m: 1,
        sms: 3,
        smem: h200.1,
        // Two blocks per SM even on these small layers: more ranges, more cut stripes.
        tuning: MarlinPipeline::default().with_min_range_stages(0),
        x_offset: 0,
        bias: false,
    };
    let sweep = MarlinPipeline::SWEEP;
    vec![
        // Ranges that cut stripes, one stage each, the ring deeper than the range.
        Case { ..base },
        // Ragged K (8-byte rows) and N, two M tiles, a 2-stage ring.
        Case {
            n: 200,
            k: 3884,
            m: 9,
            sms: 5,
            tuning: sweep[3],
            bias: true,
            ..base
        },
        // f16, 64-row tile with 40 rows, element copies of misaligned activations.
        Case {
            n: 200,
            k: 3884,
            dt: DType::F16,
            m: 40,
            sms: 5,
            x_offset: 1,
            ..base
        },
        // Two 64-row chunks, odd K, whole stripes per block (no cuts).
        Case {
            n: 1100,
            k: 389,
            m: 70,
            sms: 7,
            x_offset: 2,
            ..base
        },
        // 4-byte copies, 32-row tile, an sm_86-sized shared memory.
        Case {
            n: 300,
            k: 390,
            m: 30,
            sms: 6,
            smem: 101_376,
            x_offset: 2,
            tuning: sweep[1],
            ..base
        },
        // Four chunks whose ranges cut stripes, 3-stage ring, bias.
        Case {
            n: 128,
            k: 512,
            m: 200,
            sms: 50,
            tuning: sweep[4],
            bias: true,
            ..base
        },
        // Many ranges per stripe (the H200's SM count on a small layer), f16.
        Case {
            n: 64,
            k: 2048,
            dt: DType::F16,
            m: 4,
            sms: h200.0,
            ..base
        },
        // An A100 (108 SMs, 163 KiB): the 64-row tile at two blocks per SM in a ring of two
        // stages, every range one stage of a 2-stripe layer.
        Case {
            n: 256,
            k: 1024,
            m: 64,
            sms: 108,
            smem: 166_912,
            bias: true,
            ..base
        },
        // 16-row weight blocks (every 16-channel tile its own group scales), 48 rows of the
        // 64-row tile, f16, bias.
        Case {
            n: 256,
            k: 1000,
            blocks: (16, 64),
            dt: DType::F16,
            m: 48,
            sms: 4,
            bias: true,
            ..base
        },
        // 16-row weight blocks, the 32-row tile with 20 rows, ragged N.
        Case {
            n: 200,
            k: 512,
            blocks: (16, 128),
            m: 20,
            sms: 4,
            ..base
        },
    ]
}

/// Runs `cases` (indices into [`cases`]) on the host model built with `sanitizers`.
fn run_on_host_model(sanitizers: &str, tag: &str, pick: &[usize]) {
    let Some(model) = HostModel::build(tag, DRIVER, &marlin_module(), sanitizers) else {
        return;
    };
    let all = cases();
    for &i in pick {
        run_case(&model, &all[i], &format!("case{i}"));
    }
}

/// Every case under the address and undefined-behaviour sanitizers: the numerics, the
/// block-order independence, the counters and every access in bounds.
#[test]
fn the_marlin_kernel_source_runs_on_the_host_model() {
    run_on_host_model(
        "address,undefined",
        "marlin-asan",
        &[0, 1, 2, 3, 4, 5, 6, 7, 8, 9],
    );
}

/// The cut-stripe plans under the thread sanitizer: a shared-memory read or write that no
/// barrier orders after the other threads' writes is reported (a missing `__syncthreads`).
/// Three of the plans: under this sanitizer the seven take 182 s here, against 38 s.
#[test]
fn the_marlin_kernel_has_no_shared_memory_race() {
    run_on_host_model("thread", "marlin-tsan", &[0, 1, 6]);
}
