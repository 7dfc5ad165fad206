//! Progress bars for long work, on stderr and only when stderr is a terminal (never under
//! `--json`), so piped and captured output stays clean.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressStyle};

/// A bar of `len` steps of `unit` (hidden when `quiet` or stderr is not a terminal).
pub fn bar(len: u64, unit: &str, quiet: bool) -> ProgressBar {
    if quiet || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let b = ProgressBar::new(len);
    let template = format!("{{spinner}} [{{bar:30}}] {{pos}}/{{len}} {unit} {{elapsed}} {{msg}}");
    if let Ok(style) = ProgressStyle::with_template(&template) {
        b.set_style(style.progress_chars("=> "));
    }
    b.enable_steady_tick(std::time::Duration::from_millis(200));
    b
}
