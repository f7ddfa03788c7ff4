//! Ingest: read sweep measurements (nccl-tests text and JSON, tuner CSV) from
//! files and directory trees into one normalised [`Dataset`].

pub mod cli;

use std::path::{Path, PathBuf};

use crate::record::{Cell, Record};

/// How to read.
#[derive(Clone, Debug, Default)]
pub struct IngestOptions {
    /// Skip (and report) what cannot be read instead of failing.
    pub lenient: bool,
    /// `--assume KEY=VALUE`: knobs or facts (NCCL_ALGO, NCCL_PROTO,
    /// NCCL_MIN_NCHANNELS, nodes, ...) to use where a file does not say.
    pub assume: Vec<(String, String)>,
    /// Show a progress bar on stderr (hidden when stderr is not a terminal).
    pub progress: bool,
}

/// Something that could not be read.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Skip {
    pub file: PathBuf,
    pub line: u32,
    pub reason: String,
}

/// Everything read from a set of paths.
#[derive(Clone, Debug, Default)]
pub struct Dataset {
    pub records: Vec<Record>,
    pub files: usize,
    pub rows: usize,
    pub skipped: Vec<Skip>,
}

/// Reads every file under `paths`.
pub fn read_paths(_paths: &[PathBuf], _opts: &IngestOptions) -> anyhow::Result<Dataset> {
    anyhow::bail!("ingest is not implemented yet")
}

/// Reads one file.
pub fn read_file(_path: &Path, _opts: &IngestOptions) -> anyhow::Result<Dataset> {
    anyhow::bail!("ingest is not implemented yet")
}

/// Aggregates the trusted records into cells (median of repeats).
pub fn aggregate(_records: &[Record]) -> Vec<Cell> {
    Vec::new()
}
