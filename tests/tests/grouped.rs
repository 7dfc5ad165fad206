//! Grouped (mixture-of-experts) layers on the CPU: every layout a dense layer takes, in every
//! call form, against the f64 reference of each expert; and every bad input a typed error
//! naming the problem, never a panic.

use fp8_linear::cpu::{CpuFp8Gemm, CpuGroupedFp8Gemm, CpuGroupedReference};
use fp8_linear::tables::{BUILTIN, GROUPED};
use fp8_linear::{
    DType, DeviceMasked, DeviceMemory, GroupedLinear, GroupedLinearError, GroupedWeights,
    KernelEntry, KernelError, KernelOptions, LayerConfig, LayerKind, Linear, Options, QuantKey,
    Registered, Routing, RoutingError, ScaleDtype, Target, Tensor, TensorMut, Verdict,
};
use fp8_linear_tests::check::{compare, Tolerance};
use fp8_linear_tests::layers::{block_config, random_activations, reference_rows, Experts};

const ENTRIES: [&KernelEntry; 2] = [&CpuGroupedFp8Gemm::ENTRY, &CpuGroupedReference::ENTRY];

fn layer(entry: &'static KernelEntry, config: &LayerConfig, x: &Experts) -> GroupedLinear {
    GroupedLinear::with_entry(
        entry,
        &Target::cpu(),
        config,
        &x.weights(),
        &KernelOptions::none(),
    )
    .unwrap()
}

/// One f32 call of `rows` input rows; the output poisoned with NaN first.
fn call(
    layer: &mut GroupedLinear,
    x: &[f32],
    routing: &Routing<'_>,
    weights: Option<&[f32]>,
) -> Result<Vec<f32>, KernelError> {
    let (n, k) = (layer.config().n, layer.config().k);
    let rows = x.len() / k;
    let mut out = vec![f32::NAN; rows * n];
    layer.forward(
        &Tensor::f32(x, [rows, k]),
        routing,
        weights,
        &mut TensorMut::f32(&mut out, [rows, n]),
    )?;
    Ok(out)
}

#[test]
fn every_layout_and_form_matches_each_experts_reference() {
    let (n, k) = (200, 300); // ragged against every block
    let f32s = (DType::F32, DType::F32);
    let configs = [
        LayerConfig::block_128(n, k, DType::F32, DType::F32),
        block_config((64, 64), (ScaleDtype::F32, ScaleDtype::F32), (n, k), f32s),
        LayerConfig {
            bias: true,
            ..LayerConfig::per_tensor_static(n, k, DType::F32, DType::F32)
        },
        LayerConfig::per_token_per_channel(n, k, DType::F32, DType::F32),
        LayerConfig::weight_only(QuantKey::WEIGHT_BLOCK_128, n, k, DType::F32),
    ];
    let counts = [3usize, 0, 5];
    let offsets = [0usize, 3, 3, 8];
    let m = 8;
    for config in configs {
        let experts = Experts::random(&config, counts.len());
        let x = random_activations(m, k);
        let w: Vec<f32> = (0..m).map(|i| 0.25 + i as f32 / 8.0).collect();
        // Each expert's rows through its own f64 reference, times the routing weight.
        let mut want = Vec::with_capacity(m * n);
        for (e, l) in experts.layers.iter().enumerate() {
            let rows: Vec<usize> = (offsets[e]..offsets[e + 1]).collect();
            let mine = &x[offsets[e] * k..offsets[e + 1] * k];
            let r = reference_rows(
                &config,
                l,
                mine,
                rows.len(),
                &(0..rows.len()).collect::<Vec<_>>(),
            )
            .unwrap();
            want.extend(
                r.chunks(n)
                    .zip(&w[offsets[e]..])
                    .flat_map(|(row, &wr)| row.iter().map(move |v| v * f64::from(wr))),
            );
        }
        for entry in ENTRIES {
            let mut g = layer(entry, &config, &experts);
            let what = format!("{} on {config}", entry.name);
            let by_offsets = call(&mut g, &x, &Routing::Offsets(&offsets), Some(&w)).unwrap();
            compare(&by_offsets, &want, n, Tolerance::cpu(DType::F32)).assert_ok(&what);

            // Expert ids: expert 2's rows first, a padding row between, expert 0 last.
            let order: [Option<usize>; 9] = [
                Some(3),
                Some(4),
                Some(5),
                Some(6),
                Some(7),
                None,
                Some(0),
                Some(1),
                Some(2),
            ];
            let ids: Vec<i32> = order
                .iter()
                .map(|r| r.map_or(-1, |r| if r < 3 { 0 } else { 2 }))
                .collect();
            let xi: Vec<f32> = order
                .iter()
                .flat_map(|r| r.map_or(vec![0.0; k], |r| x[r * k..(r + 1) * k].to_vec()))
                .collect();
            let wi: Vec<f32> = order.iter().map(|r| r.map_or(0.0, |r| w[r])).collect();
            let by_ids = call(&mut g, &xi, &Routing::ExpertIds(&ids), Some(&wi)).unwrap();
            for (i, r) in order.iter().enumerate() {
                let got = &by_ids[i * n..(i + 1) * n];
                match r {
                    Some(r) => assert_eq!(
                        got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                        by_offsets[r * n..(r + 1) * n]
                            .iter()
                            .map(|v| v.to_bits())
                            .collect::<Vec<_>>(),
                        "{what}: expert-ids row {i}"
                    ),
                    None => assert!(
                        got.iter().all(|v| v.is_nan()),
                        "{what}: padding row written"
                    ),
                }
            }

            // Masked: [E * M_max, K] with M_max = 5.
            let m_max = 5;
            let mut xm = vec![0f32; counts.len() * m_max * k];
            let mut wm = vec![0f32; counts.len() * m_max];
            for e in 0..counts.len() {
                for r in 0..counts[e] {
                    let src = offsets[e] + r;
                    let dst = e * m_max + r;
                    xm[dst * k..(dst + 1) * k].copy_from_slice(&x[src * k..(src + 1) * k]);
                    wm[dst] = w[src];
                }
            }
            let masked = call(&mut g, &xm, &Routing::Masked(&counts), Some(&wm)).unwrap();
            for e in 0..counts.len() {
                for r in 0..m_max {
                    let got = &masked[(e * m_max + r) * n..(e * m_max + r + 1) * n];
                    if r < counts[e] {
                        let src = offsets[e] + r;
                        assert_eq!(got, &by_offsets[src * n..(src + 1) * n], "{what}: masked");
                    } else {
                        assert!(
                            got.iter().all(|v| v.is_nan()),
                            "{what}: masked row past count"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn without_routing_weights_an_expert_is_its_dense_layer() {
    let config = LayerConfig::block_128(130, 260, DType::Bf16, DType::Bf16);
    let experts = Experts::random(&config, 2);
    let x: Vec<half::bf16> = random_activations(4, 260)
        .into_iter()
        .map(half::bf16::from_f32)
        .collect();
    let mut g = GroupedLinear::new(
        &Target::cpu(),
        &config,
        &experts.weights(),
        &Options::none(),
    )
    .unwrap();
    assert_eq!(g.plan().to_string(), "M = 1..: CpuGroupedFp8Gemm");
    let mut y = vec![half::bf16::ZERO; 4 * 130];
    g.forward(
        &Tensor::bf16(&x, [4, 260]),
        &Routing::Offsets(&[0, 1, 4]),
        None,
        &mut TensorMut::bf16(&mut y, [4, 130]),
    )
    .unwrap();
    let mut dense = Linear::with_entry(
        &CpuFp8Gemm::ENTRY,
        &Target::cpu(),
        &config,
        &experts.layers[1].weights(),
        &KernelOptions::none(),
    )
    .unwrap();
    let mut yd = vec![half::bf16::ZERO; 3 * 130];
    dense
        .forward(
            &Tensor::bf16(&x[260..], [3, 260]),
            &mut TensorMut::bf16(&mut yd, [3, 130]),
        )
        .unwrap();
    assert_eq!(&y[130..], &yd[..], "expert 1 is its own dense layer");
}

#[test]
fn grouped_tables_are_planned_like_linear_ones() {
    let cpu = fp8_linear::Device::profile("cpu").unwrap();
    let cfg = LayerConfig::block_128(7168, 2048, DType::Bf16, DType::Bf16);
    let e = GROUPED
        .explain(&cpu, &cfg, &fp8_linear::Overrides::none())
        .unwrap();
    let names: Vec<&str> = e.candidates.iter().map(|c| c.entry.name).collect();
    assert_eq!(names, ["CpuGroupedFp8Gemm", "CpuGroupedReference"]);
    assert_eq!(GROUPED.kind(), LayerKind::Grouped);
    assert_eq!(BUILTIN.kind(), LayerKind::Linear);
    assert!(GROUPED
        .tables()
        .iter()
        .all(|t| t.entries.iter().all(|e| e.kind() == LayerKind::Grouped)));
    let forced = fp8_linear::Overrides::none().force("CpuGroupedReference");
    let plan = GROUPED.plan(&cpu, &cfg, &forced).unwrap();
    assert_eq!(plan.to_string(), "M = 1..: CpuGroupedReference (forced)");
    // On GPUs, the grouped CUDA tables: the Hopper grouped kernel on sm_90, then the
    // portable one (sm_89+); Marlin's W8A16 on Ampere (sm_80 up to before sm_89).
    for (device, kernels) in [
        ("h200", &["HopperGroupedFp8", "PortableGroupedFp8"][..]),
        ("a100", &["MarlinGroupedFp8"][..]),
        ("l40s", &["PortableGroupedFp8"][..]),
    ] {
        let d = fp8_linear::Device::profile(device).unwrap();
        let e = GROUPED
            .explain(&d, &cfg, &fp8_linear::Overrides::none())
            .unwrap();
        let fits: Vec<&str> = e
            .candidates
            .iter()
            .filter(|c| matches!(c.verdict, Verdict::Chosen | Verdict::Eligible))
            .map(|c| c.entry.name)
            .collect();
        assert_eq!(fits, kernels, "{device}");
    }
    // Per-channel experts on an sm_90 GPU: only Marlin (sm_80..sm_89) takes them there.
    let h200 = fp8_linear::Device::profile("h200").unwrap();
    let channel = LayerConfig::per_token_per_channel(7168, 2048, DType::Bf16, DType::Bf16);
    let err = GROUPED
        .plan(&h200, &channel, &fp8_linear::Overrides::none())
        .unwrap_err();
    assert!(err.to_string().contains("MarlinGroupedFp8"), "{err}");
}

/// The layer of the bad-input tests: 3 experts of 200 x 300, f32.
fn bad_input_layer(entry: &'static KernelEntry) -> GroupedLinear {
    let config = LayerConfig::block_128(200, 300, DType::F32, DType::F32);
    layer(entry, &config, &Experts::random(&config, 3))
}

fn routing_error(
    g: &mut GroupedLinear,
    rows: usize,
    routing: Routing<'_>,
    w: Option<&[f32]>,
) -> RoutingError {
    let x = vec![0.5f32; rows * 300];
    match call(g, &x, &routing, w) {
        Err(KernelError::Routing(e)) => e,
        other => panic!("expected a routing error, got {other:?}"),
    }
}

#[test]
fn bad_routing_is_a_typed_error_naming_the_problem() {
    for entry in ENTRIES {
        let mut g = bad_input_layer(entry);
        let e = routing_error(&mut g, 6, Routing::Offsets(&[0, 4, 2, 6]), None);
        assert_eq!(
            e,
            RoutingError::OffsetsOutOfOrder {
                expert: 1,
                start: 4,
                end: 2
            }
        );
        let e = routing_error(&mut g, 6, Routing::Offsets(&[0, 2, 4, 7]), None);
        assert_eq!(e.to_string(), "offset 3 is 7, past the input's 6 rows");
        let e = routing_error(&mut g, 6, Routing::Offsets(&[0, 2, 6]), None);
        assert!(matches!(
            e,
            RoutingError::ExpertCount {
                what: "offsets",
                experts: 3,
                expected: 4,
                got: 3
            }
        ));
        let e = routing_error(&mut g, 6, Routing::Masked(&[1, 3, 0]), None);
        assert_eq!(e.to_string(), "count of expert 1 is 3, above M_max = 2");
        let e = routing_error(&mut g, 6, Routing::Masked(&[1, 1]), None);
        assert!(matches!(
            e,
            RoutingError::ExpertCount {
                what: "counts",
                got: 2,
                ..
            }
        ));
        let e = routing_error(&mut g, 7, Routing::Masked(&[1, 1, 1]), None);
        assert!(matches!(
            e,
            RoutingError::MaskedRows {
                rows: 7,
                experts: 3
            }
        ));
        let e = routing_error(&mut g, 3, Routing::ExpertIds(&[0, 3, -1]), None);
        assert_eq!(
            e.to_string(),
            "expert id 3 of row 1 is out of range: the layer has experts 0..3 (-1 marks a padding row)"
        );
        let e = routing_error(&mut g, 3, Routing::ExpertIds(&[0, -1]), None);
        assert!(matches!(
            e,
            RoutingError::RowCount {
                what: "expert ids",
                rows: 3,
                got: 2
            }
        ));
        let e = routing_error(
            &mut g,
            3,
            Routing::Offsets(&[0, 1, 2, 3]),
            Some(&[1.0, 1.0]),
        );
        assert!(matches!(
            e,
            RoutingError::RowCount {
                what: "routing weights",
                got: 2,
                ..
            }
        ));
    }
}

#[test]
fn bad_shapes_and_kinds_are_typed_errors() {
    let config = LayerConfig::block_128(200, 300, DType::F32, DType::F32);
    let experts = Experts::random(&config, 3);
    // A stack of 3 experts declared as 4.
    let w = experts.weights();
    let four = GroupedWeights::new(4, w.stacked);
    for entry in ENTRIES {
        let err = GroupedLinear::with_entry(
            entry,
            &Target::cpu(),
            &config,
            &four,
            &KernelOptions::none(),
        )
        .unwrap_err();
        assert!(
            matches!(
                &err,
                GroupedLinearError::Kernel(KernelError::Shape { what: "weight", .. })
            ),
            "{err}"
        );
        assert!(err.to_string().contains("for E = 4 experts"), "{err}");
        // Input of the wrong K, output of the wrong rows: shape errors, before any kernel.
        let mut g = layer(entry, &config, &experts);
        let x = vec![0.5f32; 4 * 299];
        let mut out = vec![0f32; 4 * 200];
        let e = g
            .forward(
                &Tensor::f32(&x, [4, 299]),
                &Routing::Offsets(&[0, 1, 2, 4]),
                None,
                &mut TensorMut::f32(&mut out, [4, 200]),
            )
            .unwrap_err();
        assert!(matches!(e, KernelError::Shape { what: "input", .. }), "{e}");
        let x = vec![0.5f32; 4 * 300];
        let e = g
            .forward(
                &Tensor::f32(&x, [4, 300]),
                &Routing::Offsets(&[0, 1, 2, 4]),
                None,
                &mut TensorMut::f32(&mut out[..600], [3, 200]),
            )
            .unwrap_err();
        assert!(
            matches!(e, KernelError::Shape { what: "output", .. }),
            "{e}"
        );
    }
    // A grouped kernel is not a linear one, and the other way round.
    let dense = experts.layers[0].weights();
    let e = Linear::with_entry(
        &CpuGroupedFp8Gemm::ENTRY,
        &Target::cpu(),
        &config,
        &dense,
        &KernelOptions::none(),
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "CpuGroupedFp8Gemm is a grouped kernel; it cannot be built for a linear layer"
    );
    let e = GroupedLinear::with_entry(
        &CpuFp8Gemm::ENTRY,
        &Target::cpu(),
        &config,
        &w,
        &KernelOptions::none(),
    )
    .unwrap_err();
    assert!(matches!(
        e,
        GroupedLinearError::Kernel(KernelError::WrongKind {
            kind: LayerKind::Linear,
            wanted: LayerKind::Grouped,
            ..
        })
    ));
    let e = GroupedLinear::with_registry(&BUILTIN, &Target::cpu(), &config, &w, &Options::none())
        .unwrap_err();
    assert!(
        matches!(e, GroupedLinearError::Kernel(KernelError::WrongKind { .. })),
        "{e}"
    );
    // On a device profile the plan is made but the layer is not built.
    let a100 = Target::profile("a100").unwrap();
    assert!(GroupedLinear::new(&a100, &config, &w, &Options::none()).is_err());
    let _ = <CpuGroupedReference as Registered>::ENTRY.name;
}

/// A masked call with its counts in device memory is checked like any call, then refused by
/// the CPU kernels (they cannot read device counts), never a panic.
#[test]
fn masked_counts_on_the_device_need_a_gpu_kernel() {
    let config = LayerConfig::block_128(128, 256, DType::F32, DType::F32);
    let experts = Experts::random(&config, 2);
    let counts = DeviceMemory {
        ptr: 256,
        bytes: 8,
        ordinal: 0,
    };
    let routing = DeviceMasked {
        counts,
        route_weights: None,
        expected_rows: 1,
    };
    for entry in ENTRIES {
        let mut g = layer(entry, &config, &experts);
        let call = |g: &mut GroupedLinear, rows: usize, routing: &DeviceMasked| {
            let x = vec![0f32; rows * 256];
            let mut y = vec![0f32; rows * 128];
            let e = g
                .forward_masked_on_device(
                    &Tensor::f32(&x, [rows, 256]),
                    routing,
                    &mut TensorMut::f32(&mut y, [rows, 128]),
                )
                .unwrap_err();
            e.to_string()
        };
        let e = call(&mut g, 4, &routing);
        assert!(
            e.contains("GPU kernel that reads them"),
            "{}: {e}",
            entry.name
        );
        let e = call(&mut g, 3, &routing);
        assert!(e.contains("multiple of E"), "{}: {e}", entry.name);
        let short = DeviceMasked {
            counts: DeviceMemory { bytes: 4, ..counts },
            ..routing
        };
        assert!(call(&mut g, 4, &short).contains("counts"), "{}", entry.name);
    }
}
