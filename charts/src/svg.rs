//! A minimal SVG writer: the elements the charts use, with text and attributes escaped.

use std::fmt::Write;

/// `s` with the five XML special characters escaped.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
    out
}

/// An SVG document being written.
pub struct Svg {
    body: String,
    width: f64,
    height: f64,
}

impl Svg {
    /// An empty document of `width x height` pixels.
    pub fn new(width: f64, height: f64) -> Self {
        Svg {
            body: String::new(),
            width,
            height,
        }
    }

    /// Opens a group with these `(name, value)` attributes; close it with [`Svg::end_group`].
    pub fn group(&mut self, attrs: &[(&str, &str)]) {
        self.body.push_str("<g");
        for (k, v) in attrs {
            let _ = write!(self.body, " {k}=\"{}\"", escape(v));
        }
        self.body.push_str(">\n");
    }

    /// Closes the last open group.
    pub fn end_group(&mut self) {
        self.body.push_str("</g>\n");
    }

    /// A straight line; `dash` draws it dashed.
    pub fn line(&mut self, (x1, y1): (f64, f64), (x2, y2): (f64, f64), color: &str, dash: bool) {
        let _ = writeln!(
            self.body,
            "<line x1=\"{x1:.1}\" y1=\"{y1:.1}\" x2=\"{x2:.1}\" y2=\"{y2:.1}\" stroke=\"{}\" \
             stroke-width=\"{}\"{}/>",
            escape(color),
            if dash { 1.2 } else { 0.6 },
            if dash {
                " stroke-dasharray=\"5 3\""
            } else {
                ""
            }
        );
    }

    /// A polyline through `points`, with a dot at each.
    pub fn series(&mut self, points: &[(f64, f64)], color: &str) {
        let pts: Vec<String> = points
            .iter()
            .map(|(x, y)| format!("{x:.1},{y:.1}"))
            .collect();
        let _ = writeln!(
            self.body,
            "<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"1.8\"/>",
            pts.join(" "),
            escape(color)
        );
        for (x, y) in points {
            let _ = writeln!(
                self.body,
                "<circle cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"2.4\" fill=\"{}\"/>",
                escape(color)
            );
        }
    }

    /// Text at `(x, y)`; `anchor` is `start`, `middle` or `end`.
    pub fn text(&mut self, (x, y): (f64, f64), s: &str, size: f64, anchor: &str) {
        let _ = writeln!(
            self.body,
            "<text x=\"{x:.1}\" y=\"{y:.1}\" font-size=\"{size}\" text-anchor=\"{anchor}\">{}</text>",
            escape(s)
        );
    }

    /// A rectangle outline.
    pub fn rect(&mut self, (x, y): (f64, f64), (w, h): (f64, f64), stroke: &str) {
        let _ = writeln!(
            self.body,
            "<rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{w:.1}\" height=\"{h:.1}\" fill=\"none\" \
             stroke=\"{}\"/>",
            escape(stroke)
        );
    }

    /// The finished document.
    pub fn finish(self) -> String {
        format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" \
             width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" font-family=\"sans-serif\">\n\
             <rect width=\"{w}\" height=\"{h}\" fill=\"white\"/>\n{}</svg>\n",
            self.body,
            w = self.width,
            h = self.height
        )
    }
}
