//! The `dyncc` binary Cargo built for these tests, and the repository it
//! was built from: one definition for every test file that runs the CLI.

use std::path::PathBuf;
use std::process::{Command, Output};

/// A command running the `dyncc` binary under test.
pub fn dyncc() -> Command {
    Command::new(env!("CARGO_BIN_EXE_dyncc"))
}

/// Runs `dyncc ARGS` to completion (its output captured).
pub fn dyncc_output(args: &[&str]) -> Output {
    dyncc().args(args).output().expect("run dyncc")
}

/// The repository root (datasets/, tests/data/, include/ ...).
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}
