//! The CLI's outcomes: one typed error with a kind, and the exit code of each kind, the
//! same in every subcommand (the table is in the crate docs and in `--help`).

use std::fmt;
use std::process::ExitCode;

use serde_json::{json, Value};

/// What went wrong, by the exit code it maps to.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// A kernel ran, but its output failed the check against the f64 reference (or held a
    /// NaN: an unwritten element). Exit code 1.
    CheckFailed,
    /// Bad arguments or input: an unknown name, a value out of range, sizes that overflow or
    /// do not fit in memory, an invalid checkpoint or autotune file. Exit code 2.
    BadInput,
    /// No kernel can run a layer on the device. Exit code 3.
    NoKernel,
    /// The device or a kernel failed at run time (a GPU that cannot be opened, a kernel that
    /// fails to build or launch, a file that cannot be written). Exit code 4.
    Runtime,
}

impl Kind {
    /// The process exit code of this outcome.
    pub const fn code(self) -> u8 {
        match self {
            Kind::CheckFailed => 1,
            Kind::BadInput => 2,
            Kind::NoKernel => 3,
            Kind::Runtime => 4,
        }
    }

    /// The name in a JSON error object (`{"error": {"kind": ..}}`).
    pub const fn name(self) -> &'static str {
        match self {
            Kind::CheckFailed => "check_failed",
            Kind::BadInput => "bad_input",
            Kind::NoKernel => "no_kernel",
            Kind::Runtime => "runtime",
        }
    }

    /// The exit code.
    pub fn exit(self) -> ExitCode {
        ExitCode::from(self.code())
    }
}

/// The exit-code table, as `--help` prints it.
pub const EXIT_CODES: &str = "\
Exit codes (the same in every subcommand):
  0  success
  1  a check failed: a kernel's output is off the f64 reference, or holds a NaN
  2  bad arguments or input (unknown names, out-of-range or oversized values, an invalid
     checkpoint or autotune file)
  3  no kernel can run a layer on the device
  4  device or runtime error (GPU not usable, kernel build or launch failed, write failed)
When a report has several outcomes, the highest code wins. With --json, an error is a JSON
object on stdout: {\"error\": {\"kind\": \"bad_input\", \"code\": 2, \"message\": \"...\"}}.";

/// An error of the CLI: its kind (which decides the exit code) and the message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CliError {
    /// The kind.
    pub kind: Kind,
    /// What went wrong, in words.
    pub message: String,
}

impl CliError {
    /// An error of `kind`.
    pub fn new(kind: Kind, message: impl Into<String>) -> Self {
        CliError {
            kind,
            message: message.into(),
        }
    }

    /// Bad arguments or input (exit code 2).
    pub fn bad_input(message: impl Into<String>) -> Self {
        Self::new(Kind::BadInput, message)
    }

    /// No kernel fits (exit code 3).
    pub fn no_kernel(message: impl Into<String>) -> Self {
        Self::new(Kind::NoKernel, message)
    }

    /// Device or runtime error (exit code 4).
    pub fn runtime(message: impl Into<String>) -> Self {
        Self::new(Kind::Runtime, message)
    }

    /// The JSON error object printed on stdout under `--json`.
    pub fn json(&self) -> Value {
        json!({"error": {
            "kind": self.kind.name(),
            "code": self.kind.code(),
            "message": self.message,
        }})
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for CliError {}

/// Closes over a kind, for `map_err`: `.map_err(as_kind(Kind::Runtime))`.
pub fn as_kind<E: fmt::Display>(kind: Kind) -> impl Fn(E) -> CliError {
    move |e| CliError::new(kind, e.to_string())
}

/// The kind of a selection failure: no kernel (no table, no kernel of the backend, every
/// candidate rejected).
pub fn select_error(e: fp8_linear::SelectError) -> CliError {
    CliError::no_kernel(e.to_string())
}

/// The kind of an error reading a checkpoint: bad input (the checkpoint is the caller's
/// input, whether it is missing, unreadable or malformed).
pub fn checkpoint_error(e: fp8_linear_checkpoint::CheckpointError) -> CliError {
    CliError::bad_input(e.to_string())
}

/// The outcome of a finished report, from the outcomes of its parts: the highest code
/// wins; None is success.
pub fn worst(kinds: impl IntoIterator<Item = Kind>) -> Option<Kind> {
    kinds.into_iter().max()
}

/// The exit code of an outcome (None: success).
pub fn exit_code(outcome: Option<Kind>) -> ExitCode {
    outcome.map_or(ExitCode::SUCCESS, Kind::exit)
}
