//! The charts: per shape class, TFLOP/s against M per kernel (log-log, with the weight-read
//! floor, the measured read-once floor and the FP8 peak drawn in), and at decode (M <= 64)
//! the percent of the weight-read floor per kernel. One panel per layer shape.

use std::collections::BTreeMap;

use crate::csv::Point;
use crate::svg::Svg;

/// A family of layer shapes drawn in one chart.
pub struct ShapeClass {
    /// Its title.
    pub name: &'static str,
    /// The file names' stem (`<stem>-tflops.svg`, `<stem>-decode.svg`).
    pub stem: &'static str,
    /// Its (N, K) shapes, one panel each.
    pub shapes: &'static [(usize, usize)],
}

/// The shape classes of BENCHMARKS.md: the six DeepSeek-V3 layers of the prefill benches and
/// the two Llama-3-8B layers of the decode bench.
pub const CLASSES: [ShapeClass; 2] = [
    ShapeClass {
        name: "DeepSeek-V3 layers",
        stem: "deepseek-v3",
        // The benches' `DEEPSEEK_SHAPES`, in their order (the panels' order).
        #[rustfmt::skip]
        shapes: &[
            (4096, 7168), (7168, 2048), (2112, 7168),
            (24576, 1536), (7168, 16384), (18432, 7168),
        ],
    },
    ShapeClass {
        name: "Llama-3-8B layers",
        stem: "llama-3",
        shapes: &[(4096, 4096), (14336, 4096)],
    },
];

/// The weight-read rate of the floors, bytes per microsecond: an H200's device copy
/// (4.3 TB/s), the rate the benches' floor% columns use.
pub const READ_BYTES_PER_US: f64 = 4.3e6;
/// The FP8 dense tensor-core peak drawn in the TFLOP/s charts (H200 datasheet).
pub const FP8_PEAK_TFLOPS: f64 = 1979.0;
/// The largest M of the decode charts.
pub const DECODE_MAX_M: usize = 64;

/// Which chart to draw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// TFLOP/s against M, every M measured.
    Tflops,
    /// Percent of the weight-read floor against M, M <= [`DECODE_MAX_M`].
    Decode,
}

impl Kind {
    /// The file name's suffix.
    pub fn suffix(self) -> &'static str {
        match self {
            Kind::Tflops => "tflops",
            Kind::Decode => "decode",
        }
    }
}

/// The short label of a kernel: the benches' labels as they are, the registry names of the
/// `gpu` bench shortened to them.
pub fn label(kernel: &str) -> &str {
    match kernel {
        "CublasLtBlockFp8" => "LtBlk",
        "HopperBlockFp8" => "Hopper",
        "DecodeBlockFp8" => "Decode",
        "PortableBlockFp8" => "Portable",
        "MarlinFp8" => "Marlin",
        other => other,
    }
}

/// The legend's name of a series: the label, with what sets a kernel apart.
fn legend_name(kernel: &str) -> &str {
    match kernel {
        "DeepGEMM" => "DeepGEMM (peer, GEMM only)",
        "Marlin" => "Marlin (W8A16)",
        "Decode" => "Decode (M <= 16)",
        other => other,
    }
}

/// The colour of a series.
fn color(kernel: &str, index: usize) -> &'static str {
    const OTHERS: [&str; 6] = [
        "#17becf", "#bcbd22", "#e377c2", "#7f7f7f", "#aec7e8", "#98df8a",
    ];
    match kernel {
        "LtBlk" => "#1f77b4",
        "Hopper" => "#d62728",
        "Decode" => "#2ca02c",
        "Marlin" => "#9467bd",
        "Portable" => "#8c564b",
        "DeepGEMM" => "#ff7f0e",
        _ => OTHERS[index % OTHERS.len()],
    }
}

/// Whether a kernel is drawn as a series: not the read-once floor (a floor line), not a
/// bench's variant of a kernel (a label with a `-`: graph replays `Decode-g`, forced options
/// `Hopper-s1`, `Hopper-128`, `Dec-s4`), not the quantization bench's rows.
fn is_series(kernel: &str) -> bool {
    !(kernel == "ReadOnce" || kernel.contains('-') || kernel == "ActQuant" || kernel == "Copy")
}

/// The points of one shape: the series (kernel -> M -> us; a later row of the same kernel
/// and M replaces an earlier one) and the read-once floor.
#[derive(Default)]
struct ShapeData {
    series: BTreeMap<String, BTreeMap<usize, f64>>,
    read_once: Option<f64>,
}

fn shape_data(points: &[Point], (n, k): (usize, usize), kind: Kind) -> ShapeData {
    let mut d = ShapeData::default();
    for p in points.iter().filter(|p| (p.n, p.k) == (n, k)) {
        if p.kernel == "ReadOnce" {
            d.read_once = Some(p.us);
        } else if is_series(&p.kernel) && p.m > 0 && (kind == Kind::Tflops || p.m <= DECODE_MAX_M) {
            d.series
                .entry(label(&p.kernel).to_string())
                .or_default()
                .insert(p.m, p.us);
        }
    }
    d
}

const PANEL_W: f64 = 390.0;
const PANEL_H: f64 = 280.0;
const LEFT: f64 = 52.0;
const RIGHT: f64 = 12.0;
const TOP: f64 = 26.0;
const BOTTOM: f64 = 38.0;

/// The plotting area of a panel whose top-left corner is `(x0, y0)`: left, top, width, height.
fn area(x0: f64, y0: f64) -> (f64, f64, f64, f64) {
    (
        x0 + LEFT,
        y0 + TOP,
        PANEL_W - LEFT - RIGHT,
        PANEL_H - TOP - BOTTOM,
    )
}

/// Maps M and a value to panel coordinates.
struct Axes {
    area: (f64, f64, f64, f64),
    m_range: (f64, f64),
    y_range: (f64, f64),
    log_y: bool,
}

impl Axes {
    fn x(&self, m: f64) -> f64 {
        let (l, _, w, _) = self.area;
        let (a, b) = (self.m_range.0.log2(), self.m_range.1.log2());
        l + w * (m.log2() - a) / (b - a).max(1e-9)
    }
    fn y(&self, v: f64) -> f64 {
        let (_, t, _, h) = self.area;
        let (a, b) = self.y_range;
        let f = if self.log_y {
            (v.max(a).log10() - a.log10()) / (b.log10() - a.log10())
        } else {
            (v.clamp(a, b) - a) / (b - a)
        };
        t + h * (1.0 - f)
    }
}

/// The value a chart plots for a point of `us` on shape `(n, k)` at `m` rows.
fn value(kind: Kind, (n, k): (usize, usize), m: usize, us: f64) -> f64 {
    match kind {
        Kind::Tflops => 2.0 * (m * n * k) as f64 / us / 1e6,
        Kind::Decode => 100.0 * (n * k) as f64 / READ_BYTES_PER_US / us,
    }
}

/// The SVG of `kind` for `class` from `points` (all GPUs' points are taken; the benches
/// write one GPU per file), or None when no point of the class is in `points`.
pub fn chart(points: &[Point], class: &ShapeClass, kind: Kind) -> Option<String> {
    let data: Vec<ShapeData> = class
        .shapes
        .iter()
        .map(|&s| shape_data(points, s, kind))
        .collect();
    let ms: Vec<usize> = data
        .iter()
        .flat_map(|d| d.series.values().flat_map(|s| s.keys().copied()))
        .collect();
    let (&m_min, &m_max) = (ms.iter().min()?, ms.iter().max()?);
    let mut kernels: Vec<&str> = data
        .iter()
        .flat_map(|d| d.series.keys().map(String::as_str))
        .collect();
    kernels.sort();
    kernels.dedup();
    let cols = class.shapes.len().min(3);
    let rows = class.shapes.len().div_ceil(cols);
    let width = PANEL_W * cols as f64;
    // Legend: the series (solid, with a dot), then the floors (dashed), wrapped to the width.
    let floors: &[(&str, &str)] = match kind {
        Kind::Tflops => &[
            ("#555555", "weight read at 4.3 TB/s"),
            ("#2ca02c", "read-once (measured)"),
            ("#000000", "FP8 peak 1979"),
        ],
        Kind::Decode => &[
            ("#555555", "100 % = weight read at 4.3 TB/s"),
            ("#2ca02c", "read-once (measured)"),
        ],
    };
    let items: Vec<(&str, &str, bool)> = kernels
        .iter()
        .enumerate()
        .map(|(i, k)| (color(k, i), legend_name(k), false))
        .chain(floors.iter().map(|&(c, name)| (c, name, true)))
        .collect();
    let mut placed = Vec::with_capacity(items.len());
    let (mut x, mut y) = (10.0, 40.0);
    for (c, name, dashed) in items {
        let w = 34.0 + 6.5 * name.len() as f64;
        if x + w > width && x > 10.0 {
            (x, y) = (10.0, y + 16.0);
        }
        placed.push((x, y, c, name, dashed));
        x += w;
    }
    let head = y + 22.0;
    let mut svg = Svg::new(width, head + PANEL_H * rows as f64);
    let gpu = points.first().map_or("", |p| p.gpu.as_str());
    let title = match kind {
        Kind::Tflops => format!(
            "{}: TFLOP/s against M on {gpu} (bf16 in and out, activation quantization included)",
            class.name
        ),
        Kind::Decode => format!(
            "{}: percent of the weight-read floor (N*K bytes at 4.3 TB/s) at M <= {DECODE_MAX_M} \
             on {gpu}",
            class.name
        ),
    };
    svg.text((10.0, 20.0), &title, 14.0, "start");
    for (x, y, c, name, dashed) in placed {
        svg.line((x, y), (x + 18.0, y), c, dashed);
        if !dashed {
            svg.series(&[(x + 9.0, y)], c);
        }
        svg.text((x + 22.0, y + 4.0), name, 11.0, "start");
    }
    for (i, (&shape, d)) in class.shapes.iter().zip(&data).enumerate() {
        let (x0, y0) = (
            PANEL_W * (i % cols) as f64,
            head + PANEL_H * (i / cols) as f64,
        );
        panel(&mut svg, (x0, y0), shape, d, kind, (m_min, m_max), &kernels);
    }
    Some(svg.finish())
}

/// Draws one shape's panel at `(x0, y0)`.
fn panel(
    svg: &mut Svg,
    (x0, y0): (f64, f64),
    (n, k): (usize, usize),
    d: &ShapeData,
    kind: Kind,
    (m_min, m_max): (usize, usize),
    kernels: &[&str],
) {
    let ax = Axes {
        area: area(x0, y0),
        m_range: (m_min as f64, m_max as f64),
        y_range: match kind {
            Kind::Tflops => (0.5, 3000.0),
            Kind::Decode => (0.0, 100.0),
        },
        log_y: kind == Kind::Tflops,
    };
    let (l, t, w, h) = ax.area;
    svg.group(&[("class", "panel"), ("data-shape", &format!("{n}x{k}"))]);
    svg.rect((l, t), (w, h), "#999999");
    svg.text(
        (l + w / 2.0, y0 + 16.0),
        &format!("N x K = {n} x {k}"),
        12.0,
        "middle",
    );
    // Axes: M at powers of 4 (and the ends), values at decades or every 20 %.
    let mut m = 1usize;
    while m <= m_max {
        if m >= m_min {
            let x = ax.x(m as f64);
            svg.line((x, t + h), (x, t + h + 4.0), "#999999", false);
            svg.text((x, t + h + 16.0), &m.to_string(), 10.0, "middle");
        }
        m *= if kind == Kind::Decode { 2 } else { 4 };
    }
    svg.text((l + w / 2.0, t + h + 31.0), "M (rows)", 10.0, "middle");
    let ticks: &[f64] = match kind {
        Kind::Tflops => &[1.0, 10.0, 100.0, 1000.0],
        Kind::Decode => &[0.0, 20.0, 40.0, 60.0, 80.0, 100.0],
    };
    for &v in ticks {
        let y = ax.y(v);
        svg.line((l, y), (l + w, y), "#e6e6e6", false);
        let s = match kind {
            Kind::Tflops => format!("{v}"),
            Kind::Decode => format!("{v} %"),
        };
        svg.text((l - 4.0, y + 3.0), &s, 10.0, "end");
    }
    svg.text(
        (x0 + 4.0, t - 6.0),
        if kind == Kind::Tflops {
            "TFLOP/s"
        } else {
            "% of floor"
        },
        10.0,
        "start",
    );
    // Floors.
    let (ma, mb) = (m_min as f64, m_max as f64);
    match kind {
        Kind::Tflops => {
            // 2 M N K / (N K / rate): 8.6 TFLOP/s per row at 4.3 TB/s, up to the peak.
            let per_row = 2.0 * READ_BYTES_PER_US / 1e6;
            let m_cross = (FP8_PEAK_TFLOPS / per_row).min(mb);
            svg.group(&[("class", "floor"), ("data-floor", "weight-read")]);
            svg.line(
                (ax.x(ma), ax.y(per_row * ma)),
                (ax.x(m_cross), ax.y(per_row * m_cross)),
                "#555555",
                true,
            );
            svg.end_group();
            if let Some(ro) = d.read_once {
                let tf = |m: f64| 2.0 * m * (n * k) as f64 / ro / 1e6;
                let m_cross = (FP8_PEAK_TFLOPS / tf(1.0)).min(mb);
                svg.group(&[("class", "floor"), ("data-floor", "read-once")]);
                svg.line(
                    (ax.x(ma), ax.y(tf(ma))),
                    (ax.x(m_cross), ax.y(tf(m_cross))),
                    "#2ca02c",
                    true,
                );
                svg.end_group();
            }
            svg.group(&[("class", "floor"), ("data-floor", "fp8-peak")]);
            let y = ax.y(FP8_PEAK_TFLOPS);
            svg.line((ax.x(ma), y), (ax.x(mb), y), "#000000", true);
            svg.end_group();
        }
        Kind::Decode => {
            svg.group(&[("class", "floor"), ("data-floor", "weight-read")]);
            let y = ax.y(100.0);
            svg.line((ax.x(ma), y), (ax.x(mb), y), "#555555", true);
            svg.end_group();
            if let Some(ro) = d.read_once {
                svg.group(&[("class", "floor"), ("data-floor", "read-once")]);
                let y = ax.y(value(kind, (n, k), 1, ro));
                svg.line((ax.x(ma), y), (ax.x(mb), y), "#2ca02c", true);
                svg.end_group();
            }
        }
    }
    // Series, in the legend's order and colours.
    for (i, kname) in kernels.iter().enumerate() {
        let Some(s) = d.series.get(*kname) else {
            continue;
        };
        let pts: Vec<(f64, f64)> = s
            .iter()
            .map(|(&m, &us)| (ax.x(m as f64), ax.y(value(kind, (n, k), m, us))))
            .collect();
        svg.group(&[("class", "series"), ("data-kernel", kname)]);
        svg.series(&pts, color(kname, i));
        svg.end_group();
    }
    svg.end_group();
}
