//! Ingest: read sweep measurements (nccl-tests text logs of every era,
//! nccl-tests `-J` JSON, NCCL's tuner-example CSV, NVIDIA's raw
//! `data/<nodes>.csv`) from files and directory trees into one normalised
//! [`Dataset`], say what could not be read, and aggregate repeats into
//! [`Cell`]s.
//!
//! Strictness: with `IngestOptions::lenient == false` (what `dyncc compile`
//! uses by default) a malformed data row, a bad CSV value, an unreadable file
//! or a file whose knobs cannot be established is an error naming
//! `file:line`, what was expected, and what to do. With `lenient` the same
//! things become [`Skip`]s. Launcher noise, NCCL INFO lines, comments and
//! files that are not sweeps at all are never errors.
//!
//! Knobs (which NCCL_ALGO / NCCL_PROTO / channel count a run used) are not
//! in nccl-tests text output. See [`knobs`] for where they come from and the
//! rule for ordinary default-only logs (`--assume default`), [`labels`] for
//! a user's manifest and file-name patterns, and `run` for the one place
//! every reader labels a run with what its input shows and the user states
//! (a new reader is a parser plus a call to it).
//!
//! The walk is bounded: a directory or file reached twice (symlink loops,
//! a path given twice) is read once, and a link to a directory outside the
//! directory named is not followed but named as skipped. Each file is hashed while it is read
//! (the digests go into the table's metadata); content seen twice (a copy
//! of a file, a run section repeated in a concatenation) is counted once
//! and said so in [`Dataset::notes`], so copies never pose as repeats.
//! [`setup`] keeps runs of different NCCL setups apart. Jobs' trace files
//! (`DYNCC_TRACE`) are read apart, by [`traces`], into cells on their own
//! time base.
//!
//! The submodules, in the order the data goes through them:
//!
//! - [`args`]: the reading options the commands share, as one clap struct;
//! - `walk`: the files under the paths given, each file and directory
//!   once, each read in turn;
//! - `copies`: content seen twice (a file's bytes, a run section) counted
//!   once;
//! - `read`: one file: opened, its format found, its labels looked up and
//!   handed to the reader of its format;
//! - `digest`: each file's sha256, computed while it is read;
//! - `detect`: a file's format, from its name and first bytes;
//! - `groups`: `NCCL_TESTS_SPLIT` runs, counted per communicator;
//! - `timing`: how nccl-tests timed a run (`-C`, `-z`, `-G`): a setup of its own;
//! - `file`: what a format reader works with: the file's context (labels,
//!   strict or lenient, where problems go) and what it gives back;
//! - [`text`], [`json`], [`tuner`], [`csv`]: the format readers;
//! - `check`: checks the readers share (a time's bounds, a field quoted
//!   in a message);
//! - [`labels`], [`knobs`], `run`: what the user states about a file,
//!   which knobs a run used, and the one place a run is labelled;
//! - `repeats`: rows read twice within a CSV file, counted once;
//! - [`fold`]: measurements folded as they are read;
//! - `outliers`: warm-up artefacts flagged, after the last file;
//! - [`setup`]: runs of different NCCL setups kept apart;
//! - `aggregate`: the trusted measurements into cells;
//! - [`traces`]: jobs' trace files, read apart.
//!
//! [`Cell`]: crate::record::Cell

mod aggregate;
pub mod args;
mod check;
mod copies;
pub mod csv;
mod detect;
mod digest;
mod file;
pub mod fold;
mod groups;
pub mod json;
pub mod knobs;
pub mod labels;
mod outliers;
mod read;
mod repeats;
pub(crate) mod run;
pub mod setup;
pub mod text;
mod timing;
pub mod traces;
pub mod tuner;
pub(crate) mod walk;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context as _;
use serde::Serialize;
use sha2::{Digest as _, Sha256};

use crate::record::{flags, Record};

// Every item keeps one path, `ingest::X`, whichever submodule holds it:
// the crate and the library's users (benchmarks, tests, examples) name it so.
pub use aggregate::aggregate;
pub use check::{check_time, quote, MAX_TIME_US, MIN_TIME_US, QUOTE_MAX};
pub use detect::detect;
pub(crate) use file::{read_all, FileCtx, FileOutput, Section};
pub use knobs::Assumptions;
pub use outliers::{flag_outliers, flag_outliers_folded, OUTLIER_FACTOR};
pub use read::{read_file, read_with_format};
pub use walk::{read_paths, read_paths_folded};

/// Record flag (in addition to [`crate::record::flags`]): the file's knobs
/// or shape (ranks/nodes/collective) could not be established. Only ever
/// produced when [`IngestOptions::keep_unresolved`] is set (`dyncc
/// inspect`); never aggregated.
pub const UNRESOLVED: u8 = 8;

/// Flags that keep a record out of [`aggregate`].
pub const UNTRUSTED: u8 =
    flags::WARMUP_OUTLIER | flags::WRONG_DATA | flags::KNOB_IGNORED | UNRESOLVED;

/// How to read.
#[derive(Clone, Debug, Default)]
pub struct IngestOptions {
    /// Skip (and report) what cannot be read instead of failing.
    pub lenient: bool,
    /// `--assume KEY=VALUE`: knobs or facts (NCCL_ALGO, NCCL_PROTO,
    /// NCCL_MIN_NCHANNELS, nodes, ...) to use where a file does not say.
    /// The bare word `default` means every knob was NCCL's own choice.
    pub assume: Vec<(String, String)>,
    /// Show files and bytes read on stderr (see [`crate::progress`]: only on
    /// a terminal, only when reading takes a while).
    pub progress: bool,
    /// Keep rows whose knobs or shape cannot be established as records
    /// flagged [`UNRESOLVED`] (for `inspect`, which reports them) instead of
    /// failing or skipping the file.
    pub keep_unresolved: bool,
    /// `--manifest`: labels per path or glob.
    pub manifest: Option<Arc<labels::Manifest>>,
    /// `--name-pattern`: labels read from file names (first match wins).
    pub name_patterns: Vec<labels::NamePattern>,
}

/// What a user's labels say about one file.
#[derive(Clone, Debug, Default)]
pub(crate) struct FileLabels {
    pub manifest: Option<Assumptions>,
    pub pattern: Option<Assumptions>,
    /// A name pattern matched but read a bad value.
    pub pattern_error: Option<String>,
}

impl FileLabels {
    /// The label sets that apply, most specific first.
    pub fn sets(&self) -> Vec<&Assumptions> {
        self.manifest.iter().chain(self.pattern.iter()).collect()
    }
}

impl IngestOptions {
    /// Parses `KEY=VALUE` (or `default`) strings as given to `--assume`.
    pub fn parse_assume(items: &[String]) -> anyhow::Result<Vec<(String, String)>> {
        let mut out = Vec::new();
        for it in items {
            for part in it.split_whitespace() {
                if part.eq_ignore_ascii_case("default") {
                    out.push(("default".to_string(), "1".to_string()));
                    continue;
                }
                let (k, v) = part.split_once('=').with_context(|| {
                    format!(
                        "--assume {part:?}: expected KEY=VALUE (e.g. NCCL_ALGO=Ring, nodes=2, \
                         coll=allreduce) or the word `default`"
                    )
                })?;
                out.push((k.trim().to_string(), v.trim().to_string()));
            }
        }
        // Validate now so a typo is reported before any file is read.
        Assumptions::from_pairs(&out).map_err(|e| anyhow::anyhow!("--assume: {e}"))?;
        Ok(out)
    }
}

/// Something that could not be read.
#[derive(Clone, Debug, Serialize)]
pub struct Skip {
    pub file: PathBuf,
    /// 1-based line; 0 for the whole file.
    pub line: u32,
    pub reason: String,
}

/// Something read but suspicious (interleaved jobs, knob ignored by NCCL,
/// warm-up outliers, wrong data, ...).
#[derive(Clone, Debug, Serialize)]
pub struct Anomaly {
    pub file: PathBuf,
    pub line: u32,
    pub kind: &'static str,
    pub detail: String,
}

/// Input formats.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Format {
    NcclTestsText,
    NcclTestsJson,
    TunerCsv,
    NvidiaRawCsv,
    /// Not a sweep file (documentation, unrelated CSV, ...).
    Other,
}

/// What one file gave.
#[derive(Clone, Debug, Serialize)]
pub struct FileReport {
    pub file: PathBuf,
    pub format: Format,
    /// sha256 of the file's bytes, computed while reading it.
    pub sha256: String,
    /// Set when the file's content was already read from this file: its
    /// records are left out (counted once).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duplicate_of: Option<PathBuf>,
    /// Data rows seen (nccl-tests table rows, CSV/JSON rows).
    pub rows: usize,
    /// Records produced (both placements of a nccl-tests row count).
    pub records: usize,
    /// Rows with size 0 (read, counted, no records).
    pub zero_size_rows: usize,
    /// How the knobs were established (`NCCL_ALGO=Ring via # dyncc`,
    /// `default via --assume`, ...), or why they could not be.
    pub knobs: String,
    /// False when the knobs or shape could not be established.
    pub resolved: bool,
}

/// Everything read from a set of paths.
///
/// The measurements are in exactly one of two forms: `records`, one per
/// measurement in the order read ([`read_paths`], for the commands that
/// list them), or `folded` ([`read_paths_folded`], what `compile` reads: a
/// large sweep costs its distinct cells, not its rows).
#[derive(Clone, Debug, Default)]
pub struct Dataset {
    pub records: Vec<Record>,
    pub folded: fold::Folded,
    /// Files that held sweep data (or were meant to: error-only logs count).
    pub files: usize,
    /// Data rows read (nccl-tests table rows, CSV/JSON rows).
    pub rows: usize,
    pub skipped: Vec<Skip>,
    pub reports: Vec<FileReport>,
    pub anomalies: Vec<Anomaly>,
    /// Files looked at but not sweeps (ignored).
    pub ignored: Vec<PathBuf>,
    /// Bytes of input read.
    pub bytes: u64,
    /// What a user should know about the input as a whole (content counted
    /// once, paths read once, manifest rows unused, mixed setups pooled).
    pub notes: Vec<String>,
    /// Trace files of jobs (`DYNCC_TRACE`) given beside the sweep.
    pub traces: Vec<traces::TraceFile>,
    /// Use traces of another platform than the sweep's
    /// (`--foreign-traces`); else they are refused.
    pub foreign_traces: bool,
}

impl Dataset {
    /// `sha256  path` per input file that contributed measurements (digests
    /// recorded while reading); beyond a few files, one combined digest
    /// (over the sorted per-file lines) and the count, so a sweep of
    /// thousands of logs does not bloat the table.
    pub fn input_digests_of<'a>(&self, contributed: impl Iterator<Item = &'a Path>) -> String {
        const LIST_UP_TO: usize = 16;
        let files: std::collections::BTreeSet<&Path> = contributed.collect();
        let digest = self.file_digests();
        let lines: Vec<String> = files
            .iter()
            .map(|f| match digest.get(f) {
                Some(d) if !d.is_empty() => format!("{d}  {}", f.display()),
                _ => format!("unknown  {}", f.display()),
            })
            .collect();
        if lines.len() <= LIST_UP_TO {
            return lines.join("\n");
        }
        let combined = Sha256::digest(lines.join("\n").as_bytes());
        let mut dirs: std::collections::BTreeSet<String> = Default::default();
        for f in &files {
            dirs.insert(
                f.parent()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default(),
            );
        }
        let mut shown: Vec<String> = dirs.into_iter().take(8).collect();
        if files.len() > 8 {
            shown.push("...".into());
        }
        format!(
            "{:x}  {} files (sha256 of their per-file sha256 lines), under: {}",
            combined,
            lines.len(),
            shown.join(", ")
        )
    }

    /// Each file read, by path: the sha256 of its bytes (empty when
    /// unknown).
    fn file_digests(&self) -> HashMap<&Path, &str> {
        self.reports
            .iter()
            .map(|r| (r.file.as_path(), r.sha256.as_str()))
            .collect()
    }

    /// The sweep's fingerprint: the first 8 bytes of the sha256 of the
    /// sorted, distinct sha256 digests of the files that contributed
    /// measurements (contents only: moving or renaming a file keeps it).
    /// The table records it and jobs' traces carry it, so a compile can
    /// tell traces of a table compiled from another sweep. `None` when a
    /// contributing file has no digest (read from a stream).
    pub fn sweep_fingerprint_of<'a>(
        &self,
        contributed: impl Iterator<Item = &'a Path>,
    ) -> Option<u64> {
        let digest = self.file_digests();
        let mut sums = Vec::new();
        for f in contributed {
            match digest.get(f) {
                Some(d) if !d.is_empty() => sums.push(*d),
                _ => return None,
            };
        }
        fingerprint_of_digests(sums)
    }

    fn absorb(&mut self, other: Dataset) {
        // `other.folded` is merged by the caller, which knows the order.
        debug_assert!(other.folded.groups.is_empty());
        self.records.extend(other.records);
        self.files += other.files;
        self.rows += other.rows;
        self.skipped.extend(other.skipped);
        self.reports.extend(other.reports);
        self.anomalies.extend(other.anomalies);
        self.ignored.extend(other.ignored);
        self.bytes += other.bytes;
        self.notes.extend(other.notes);
    }

    /// Number of records with `flag` set.
    pub fn count_flag(&self, flag: u8) -> usize {
        self.records
            .iter()
            .filter(|r| r.measurement.flags & flag != 0)
            .count()
            + self
                .folded
                .groups
                .iter()
                .filter(|g| g.key.flags & flag != 0)
                .map(|g| g.samples.len())
                .sum::<usize>()
    }

    /// Number of measurements, in either form.
    pub fn measurements(&self) -> usize {
        self.records.len() + self.folded.len()
    }

    /// The measurements folded (moved out of `records` when they are there).
    pub fn take_folded(&mut self) -> fold::Folded {
        if self.records.is_empty() {
            std::mem::take(&mut self.folded)
        } else {
            fold::Folded::from_records(std::mem::take(&mut self.records))
        }
    }

    /// The measurements as records, in the order read.
    pub fn unfold(&mut self) {
        if !self.folded.groups.is_empty() {
            let f = std::mem::take(&mut self.folded);
            self.records.extend(f.into_records());
        }
    }
}

/// Records the submodules' tests build their datasets from.
/// A sweep's fingerprint from its files' sha256 digests (hex): the first
/// 8 bytes of the sha256 of the sorted, distinct digests, one per line
/// ([`Dataset::sweep_fingerprint_of`]); `None` for no digest.
pub fn fingerprint_of_digests<'a>(digests: impl IntoIterator<Item = &'a str>) -> Option<u64> {
    let sums: std::collections::BTreeSet<&str> = digests.into_iter().collect();
    if sums.is_empty() {
        return None;
    }
    let all = sums.into_iter().collect::<Vec<_>>().join("\n");
    let h = Sha256::digest(all.as_bytes());
    Some(u64::from_be_bytes(h[..8].try_into().ok()?))
}

/// The fingerprint a compile of exactly these sweep files records (each
/// file contributing measurements), read from the files: what a job's
/// trace carries from the table it ran. For tools and tests that write
/// traces of a table compiled from known files.
pub fn sweep_fingerprint_of_files(paths: &[&Path]) -> std::io::Result<Option<u64>> {
    let mut sums = Vec::new();
    for p in paths {
        sums.push(format!("{:x}", Sha256::digest(std::fs::read(p)?)));
    }
    Ok(fingerprint_of_digests(sums.iter().map(String::as_str)))
}

#[cfg(test)]
mod test_util {
    use std::path::PathBuf;
    use std::sync::Arc;

    use crate::record::{Measurement, Record, Run, Source};

    pub(super) fn rec(nbytes: u64, t: f64, in_place: bool) -> Record {
        Record {
            run: Run::example(),
            measurement: Measurement {
                nbytes,
                time_us: t,
                in_place,
                dtype: None,
                source: Source {
                    file: Arc::new(PathBuf::from("x")),
                    line: 1,
                },
                flags: 0,
            },
        }
    }
}
