//! `fp8-linear-charts CSV OUT_DIR`: draws BENCHMARKS.md's charts from the benches' CSV.
//! Defaults: `docs/charts/h200-sample.csv` and `docs/charts` (run from the repository root).

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "-h" || a == "--help") || args.len() > 2 {
        println!("usage: fp8-linear-charts [CSV [OUT_DIR]]  (default: docs/charts/h200-sample.csv docs/charts)");
        return if args.len() > 2 {
            ExitCode::from(2)
        } else {
            ExitCode::SUCCESS
        };
    }
    let input = PathBuf::from(
        args.first()
            .map_or("docs/charts/h200-sample.csv", String::as_str),
    );
    let out = PathBuf::from(args.get(1).map_or("docs/charts", String::as_str));
    match fp8_linear_charts::write_all(&input, &out) {
        Ok(files) => {
            for f in files {
                println!("wrote {}", f.display());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("fp8-linear-charts: {e}");
            ExitCode::FAILURE
        }
    }
}
