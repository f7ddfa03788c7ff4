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
//! a path given twice) is read once. Each file is hashed while it is read
//! (the digests go into the table's metadata); content seen twice (a copy
//! of a file, a run section repeated in a concatenation) is counted once
//! and said so in [`Dataset::notes`], so copies never pose as repeats.
//! [`setup`] keeps runs of different NCCL setups apart. Jobs' trace files
//! (`DYNCC_TRACE`) are read apart, by [`traces`], into cells on their own
//! time base.

pub mod args;
pub mod csv;
pub mod fold;
pub mod json;
pub mod knobs;
pub mod labels;
mod repeats;
pub(crate) mod run;
pub mod setup;
pub mod text;
pub mod traces;
pub mod tuner;

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context as _;
use serde::Serialize;
use sha2::{Digest as _, Sha256};

use crate::record::{flags, Cell, CellKey, Record, Source};
pub use knobs::Assumptions;

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

/// The smallest time per operation dyncc accepts, in microseconds. Launching
/// a kernel alone costs a few microseconds, and nccl-tests prints times
/// with two decimals (0.01 us resolution), so a row below 0.1 us is a unit
/// mistake or a corrupted file; taken as a measurement it turns into
/// gains of thousands of percent.
pub const MIN_TIME_US: f64 = 0.1;

/// The largest time per operation dyncc accepts, in microseconds (about
/// 17 minutes). Far above any collective nccl-tests runs; larger values
/// (1e300) would make gains non-finite.
pub const MAX_TIME_US: f64 = 1e9;

/// Checks one time per operation, in microseconds.
pub fn check_time(t: f64) -> Result<f64, String> {
    if t.is_finite() && (MIN_TIME_US..=MAX_TIME_US).contains(&t) {
        return Ok(t);
    }
    Err(format!(
        "{} us: expected a time between {MIN_TIME_US} us (below what nccl-tests can measure) \
         and {MAX_TIME_US} us; is the unit microseconds?",
        crate::units::fmt_num(t)
    ))
}

/// A field of the input for an error message: at most [`QUOTE_MAX`] bytes,
/// so a corrupted multi-gigabyte line does not flood the terminal.
pub fn quote(s: &str) -> String {
    if s.len() <= QUOTE_MAX {
        return s.to_string();
    }
    let mut end = QUOTE_MAX;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}... ({} bytes)", &s[..end], s.len())
}

/// See [`quote`].
pub const QUOTE_MAX: usize = 200;

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
        let mut sums = std::collections::BTreeSet::new();
        for f in contributed {
            match digest.get(f) {
                Some(d) if !d.is_empty() => sums.insert(*d),
                _ => return None,
            };
        }
        if sums.is_empty() {
            return None;
        }
        let all = sums.into_iter().collect::<Vec<_>>().join("\n");
        let h = Sha256::digest(all.as_bytes());
        Some(u64::from_be_bytes(h[..8].try_into().ok()?))
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

/// Per-file context: where to send problems, strict or lenient.
pub(crate) struct FileCtx<'a> {
    pub path: Arc<PathBuf>,
    pub opts: &'a IngestOptions,
    pub labels: FileLabels,
    pub skipped: Vec<Skip>,
    pub anomalies: Vec<Anomaly>,
}

impl<'a> FileCtx<'a> {
    pub fn new(path: &Path, opts: &'a IngestOptions) -> Self {
        FileCtx {
            path: Arc::new(path.to_path_buf()),
            opts,
            labels: FileLabels::default(),
            skipped: Vec::new(),
            anomalies: Vec::new(),
        }
    }

    /// A malformed input at `line`: an error when strict, a [`Skip`] when
    /// lenient.
    pub fn bad(&mut self, line: u32, msg: impl Into<String>) -> anyhow::Result<()> {
        let msg = msg.into();
        if self.opts.lenient {
            self.skipped.push(Skip {
                file: (*self.path).clone(),
                line,
                reason: msg,
            });
            Ok(())
        } else {
            anyhow::bail!(
                "{}:{}: {}; fix the input or pass --lenient to skip it",
                self.path.display(),
                line,
                msg
            )
        }
    }

    /// Something skipped that is never an error (error-only logs, ...).
    pub fn skip(&mut self, line: u32, msg: impl Into<String>) {
        self.skipped.push(Skip {
            file: (*self.path).clone(),
            line,
            reason: msg.into(),
        });
    }

    pub fn anomaly(&mut self, line: u32, kind: &'static str, detail: impl Into<String>) {
        self.anomalies.push(Anomaly {
            file: (*self.path).clone(),
            line,
            kind,
            detail: detail.into(),
        });
    }

    /// The file's knobs or shape cannot be established. Returns whether to
    /// keep its records (flagged [`UNRESOLVED`], for `inspect`); otherwise an
    /// error when strict, a [`Skip`] when lenient.
    pub fn unresolved(&mut self, line: u32, msg: &str) -> anyhow::Result<bool> {
        if self.opts.keep_unresolved {
            self.anomaly(line, "unresolved", msg);
            return Ok(true);
        }
        self.bad(line, msg)?;
        Ok(false)
    }

    pub fn source(&self, line: u32) -> Source {
        Source {
            file: self.path.clone(),
            line,
        }
    }
}

/// Identity of a file or directory on disk: two paths naming the same one
/// (symlinks, a path given twice) are read once.
type FileId = (u64, u64);

fn file_id(m: &std::fs::Metadata) -> FileId {
    use std::os::unix::fs::MetadataExt as _;
    (m.dev(), m.ino())
}

/// Reads every file under `paths` (files, or directories walked
/// recursively in sorted order, each directory and file once), counts
/// identical content once, then flags warm-up outliers. The records come
/// in the order read.
pub fn read_paths(paths: &[PathBuf], opts: &IngestOptions) -> anyhow::Result<Dataset> {
    let mut ds = read_paths_folded(paths, opts)?;
    ds.unfold();
    Ok(ds)
}

/// [`read_paths`], with the measurements folded as they are read
/// ([`Dataset::folded`]): memory grows with the distinct cells of the
/// input, not its rows. What `compile` reads.
pub fn read_paths_folded(paths: &[PathBuf], opts: &IngestOptions) -> anyhow::Result<Dataset> {
    let mut walk = Walk::default();
    for p in paths {
        let meta = std::fs::metadata(p)
            .with_context(|| format!("{}: cannot read it (does it exist?)", p.display()))?;
        if meta.is_dir() {
            walk.dir(p, &meta)?;
        } else {
            walk.file(p, &meta);
        }
    }
    let files = walk.files;
    let mut ds = Dataset {
        notes: walk.notes,
        ..Default::default()
    };
    let bar = crate::progress::Progress::new(
        opts.progress,
        walk.bytes,
        "{spinner} reading {msg} [{bar:30}] {binary_bytes}/{binary_total_bytes} \
         ({binary_bytes_per_sec}, {eta} left)",
    );
    // Content is one measurement only under the same labels: identical rows
    // under different knobs are kept (and reported: a copy or a mislabel).
    let mut seen_files: HashMap<(String, u64), PathBuf> = HashMap::new();
    let mut seen_sections: HashMap<[u8; 32], (PathBuf, u32, u64)> = HashMap::new();
    // Reading order over all files (records of later files come after).
    let mut base: u64 = 0;
    for (i, f) in files.iter().enumerate() {
        bar.set_message(format!(
            "file {}/{}: {}",
            i + 1,
            files.len(),
            f.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        ));
        let FileRead {
            ds: mut d,
            mut fold,
            sections,
        } = match read_file_sections(f, opts, &bar) {
            Ok(d) => d,
            Err(e) => {
                bar.finish();
                return Err(e);
            }
        };
        let pushed = fold.len() as u64;
        let Some(report) = d.reports.first_mut() else {
            ds.absorb(d);
            continue;
        };
        // The same bytes twice: one measurement, not two repeats.
        if !report.sha256.is_empty() && !fold.is_empty() {
            let id = (report.sha256.clone(), fold.file_keys());
            if let Some(first) = seen_files.get(&id) {
                ds.notes.push(format!(
                    "{} has the same content as {} (sha256 {}): counted once",
                    f.display(),
                    first.display(),
                    &report.sha256[..16]
                ));
                report.duplicate_of = Some(first.clone());
                report.records = 0;
                d.anomalies.clear();
                ds.absorb(d);
                continue;
            }
            seen_files.insert(id, f.clone());
        }
        // A run section repeated (a file concatenated with itself, a log
        // pasted into another): counted once.
        let mut drop: Vec<std::ops::Range<usize>> = Vec::new();
        for sec in sections {
            if sec.records.is_empty() {
                continue;
            }
            match seen_sections.get(&sec.digest) {
                Some((ff, fl, fk)) if *fk != sec.keys => {
                    ds.notes.push(format!(
                        "{}:{}: the same {} rows as {}:{} but labelled differently: kept both; \
                         is one a copy of the other, or mislabelled?",
                        f.display(),
                        sec.line,
                        sec.records.len(),
                        ff.display(),
                        fl
                    ));
                }
                Some((ff, fl, _)) => {
                    ds.notes.push(format!(
                        "{}:{}: the same {} rows as {}:{}: counted once",
                        f.display(),
                        sec.line,
                        sec.records.len(),
                        ff.display(),
                        fl
                    ));
                    drop.push(sec.records);
                }
                None => {
                    seen_sections.insert(sec.digest, (f.clone(), sec.line, sec.keys));
                }
            }
        }
        if !drop.is_empty() {
            fold.drop_ranges(&drop);
            // Rows already counted once (read twice within the section)
            // are not dropped twice.
            report.records = fold.kept();
        }
        let Ok(b) = u32::try_from(base + pushed).map(|_| base as u32) else {
            anyhow::bail!(
                "{}: more than {} measurements in the inputs; compile fewer at a time",
                f.display(),
                u32::MAX
            );
        };
        ds.folded.append(fold.finish(), b);
        base += pushed;
        ds.absorb(d);
    }
    bar.finish();
    if let Some(m) = &opts.manifest {
        ds.notes.extend(m.unused_rows(&files));
    }
    flag_outliers_folded(&mut ds.folded, &mut ds.anomalies);
    Ok(ds)
}

/// The files to read, each once.
#[derive(Default)]
struct Walk {
    files: Vec<PathBuf>,
    /// Their bytes, for progress.
    bytes: u64,
    seen: HashSet<FileId>,
    notes: Vec<String>,
}

impl Walk {
    fn file(&mut self, p: &Path, meta: &std::fs::Metadata) {
        if self.seen.insert(file_id(meta)) {
            self.files.push(p.to_path_buf());
            if meta.is_file() {
                self.bytes += meta.len();
            }
        } else {
            self.notes.push(format!(
                "{}: the same file as one already read (given twice, or reached through a \
                 symlink): read once",
                p.display()
            ));
        }
    }

    fn dir(&mut self, dir: &Path, meta: &std::fs::Metadata) -> anyhow::Result<()> {
        // A directory reached again (a symlink loop, or two paths into one
        // tree) would be walked again, and again: read each one once.
        if !self.seen.insert(file_id(meta)) {
            self.notes.push(format!(
                "{}: a directory already read (a symlink loop, or given twice): read once",
                dir.display()
            ));
            return Ok(());
        }
        let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
            .with_context(|| format!("{}: cannot list directory", dir.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .collect();
        entries.sort();
        for p in entries {
            let name = p
                .file_name()
                .map(|n| n.to_string_lossy())
                .unwrap_or_default();
            if name.starts_with('.') {
                continue;
            }
            // A dangling symlink is left to `read_file`, which reports it.
            match std::fs::metadata(&p) {
                Ok(m) if m.is_dir() => self.dir(&p, &m)?,
                Ok(m) => self.file(&p, &m),
                Err(_) => self.files.push(p),
            }
        }
        Ok(())
    }
}

/// Hashes what passes through it: each input is hashed while it is read,
/// never read a second time for its digest. It also counts what it read as
/// progress. Past [`HASH_ON_A_THREAD`] bytes the hashing moves to a thread
/// of its own, off the thread that reads and folds a large sweep.
struct Hashing<R> {
    inner: R,
    hasher: Hasher,
    progress: crate::progress::Progress,
}

/// Bytes of a file hashed where it is read; the rest is handed to a thread.
const HASH_ON_A_THREAD: u64 = 16 << 20;

enum Hasher {
    Here {
        sha: Sha256,
        bytes: u64,
    },
    /// Blocks in reading order to a thread, which gives back the hash.
    Thread {
        blocks: std::sync::mpsc::SyncSender<Vec<u8>>,
        done: std::thread::JoinHandle<Sha256>,
    },
}

impl<R> Hashing<R> {
    fn new(inner: R, progress: &crate::progress::Progress) -> Self {
        Hashing {
            inner,
            hasher: Hasher::Here {
                sha: Sha256::new(),
                bytes: 0,
            },
            progress: progress.clone(),
        }
    }

    /// The sha256 of everything read, in hex.
    fn digest(self) -> String {
        let sha = match self.hasher {
            Hasher::Here { sha, .. } => sha,
            Hasher::Thread { blocks, done } => {
                drop(blocks);
                match done.join() {
                    Ok(sha) => sha,
                    // The thread only hashes; should it have died, say so
                    // in the digest rather than record a wrong one.
                    Err(_) => return "unknown".into(),
                }
            }
        };
        format!("{:x}", sha.finalize())
    }

    fn update(&mut self, block: &[u8]) {
        match &mut self.hasher {
            Hasher::Here { sha, bytes } => {
                sha.update(block);
                *bytes += block.len() as u64;
                if *bytes > HASH_ON_A_THREAD {
                    let mut sha = std::mem::take(sha);
                    let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<u8>>(64);
                    let done = std::thread::spawn(move || {
                        for b in rx {
                            sha.update(&b);
                        }
                        sha
                    });
                    self.hasher = Hasher::Thread { blocks: tx, done };
                }
            }
            Hasher::Thread { blocks, .. } => {
                // A thread that ended early (it cannot) leaves the digest
                // to `digest`'s join.
                let _ = blocks.send(block.to_vec());
            }
        }
    }
}

impl<R: Read> Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.update(&buf[..n]);
        self.progress.inc(n as u64);
        Ok(n)
    }
}

/// Reads one file, detecting its format from its name and first bytes.
pub fn read_file(path: &Path, opts: &IngestOptions) -> anyhow::Result<Dataset> {
    read_file_sections(path, opts, &crate::progress::Progress::hidden()).map(FileRead::into_dataset)
}

/// One file read: what it gave (without its measurements), its
/// measurements folded, and its run sections.
struct FileRead {
    ds: Dataset,
    fold: fold::FoldBuilder,
    sections: Vec<Section>,
}

impl FileRead {
    fn into_dataset(self) -> Dataset {
        let mut ds = self.ds;
        ds.records = self.fold.finish().into_records();
        ds
    }
}

fn read_file_sections(
    path: &Path,
    opts: &IngestOptions,
    progress: &crate::progress::Progress,
) -> anyhow::Result<FileRead> {
    let unreadable = |msg: String| -> anyhow::Result<FileRead> {
        let mut ctx = FileCtx::new(path, opts);
        ctx.bad(0, msg)?;
        Ok(FileRead {
            ds: Dataset {
                skipped: ctx.skipped,
                ..Default::default()
            },
            fold: Default::default(),
            sections: Vec::new(),
        })
    };
    // Opening a FIFO blocks until some writer appears (forever, for a stale
    // `mkfifo`), and devices never end: only regular files are read, through
    // the one bounded reader every command uses.
    let file = match crate::input::open_sweep(path) {
        Ok(f) => f,
        Err(msg) => return unreadable(msg),
    };
    let mut rd = BufReader::with_capacity(1 << 16, Hashing::new(file, progress));
    let head = match rd.fill_buf() {
        Ok(h) => h.to_vec(),
        Err(e) => return unreadable(format!("cannot read the file: {e}")),
    };
    let format = detect(path, &head);
    let mut read = read_format(path, &mut rd, format, opts)?;
    if format != Format::Other {
        // A reader may stop early (a corrupted tail): the digest still
        // covers the whole file.
        let drained = std::io::copy(&mut rd, &mut std::io::sink());
        if let (Ok(_), Some(rep)) = (drained, read.ds.reports.first_mut()) {
            rep.sha256 = rd.into_inner().digest();
        }
    }
    Ok(read)
}

/// Reads `rd` (the content of `path`) as `format`.
pub fn read_with_format<R: BufRead>(
    path: &Path,
    rd: R,
    format: Format,
    opts: &IngestOptions,
) -> anyhow::Result<Dataset> {
    read_format(path, rd, format, opts).map(FileRead::into_dataset)
}

fn read_format<R: BufRead>(
    path: &Path,
    rd: R,
    format: Format,
    opts: &IngestOptions,
) -> anyhow::Result<FileRead> {
    let mut ctx = FileCtx::new(path, opts);
    let mut ds = Dataset::default();
    let nothing = |ds: Dataset| FileRead {
        ds,
        fold: Default::default(),
        sections: Vec::new(),
    };
    if format == Format::Other {
        ds.ignored.push(path.to_path_buf());
        return Ok(nothing(ds));
    }
    if let Some(m) = &opts.manifest {
        match m.labels_for(path) {
            Ok(l) => ctx.labels.manifest = l,
            Err(e) => {
                ctx.bad(0, format!("{e:#}"))?;
                ds.skipped = ctx.skipped;
                return Ok(nothing(ds));
            }
        }
    }
    for p in &opts.name_patterns {
        match p.labels_for(path) {
            Ok(Some(l)) => {
                ctx.labels.pattern = Some(l);
                break;
            }
            Ok(None) => {}
            Err(e) => {
                ctx.labels.pattern_error = Some(e);
                break;
            }
        }
    }
    let res = match format {
        Format::NcclTestsText => text::read(&mut ctx, rd),
        Format::TunerCsv => tuner::read_tuner(&mut ctx, rd),
        Format::NvidiaRawCsv => csv::read_nvidia_raw(&mut ctx, rd),
        Format::NcclTestsJson => json::read(&mut ctx, rd),
        Format::Other => unreachable!("returned above"),
    };
    let out = match res {
        Ok(o) => o,
        Err(e) if opts.lenient && is_io(&e) => {
            ctx.skip(0, format!("cannot read the file: {e:#}"));
            FileOutput::empty(format)
        }
        Err(e) if is_io(&e) => {
            return Err(e.context(format!(
                "{}: cannot read the file; pass --lenient to skip it",
                path.display()
            )))
        }
        Err(e) => return Err(e),
    };
    ds.files = 1;
    ds.rows = out.report.rows;
    ds.bytes = out.bytes;
    let mut report = out.report;
    report.file = path.to_path_buf();
    report.records = out.records.len() - out.counted_once;
    ds.reports.push(report);
    ds.skipped = ctx.skipped;
    ds.anomalies = ctx.anomalies;
    ds.notes = out.notes;
    Ok(FileRead {
        ds,
        fold: out.records,
        sections: out.sections,
    })
}

fn is_io(e: &anyhow::Error) -> bool {
    e.chain()
        .any(|c| c.downcast_ref::<std::io::Error>().is_some())
}

/// What a format reader returns for one file.
pub(crate) struct FileOutput {
    /// The file's records, folded as they are pushed.
    pub records: fold::FoldBuilder,
    pub report: FileReport,
    pub bytes: u64,
    /// Run sections whose content is checked against every other's.
    pub sections: Vec<Section>,
    /// What the reader says about the file as a whole (rows counted once).
    pub notes: Vec<String>,
    /// Records pushed and then dropped as the same rows read twice.
    pub counted_once: usize,
}

/// One run section of a file: its data rows' digest and its records.
pub(crate) struct Section {
    pub line: u32,
    pub digest: [u8; 32],
    /// The section's records, by order pushed.
    pub records: std::ops::Range<usize>,
    /// What its records were labelled as (collective, size, shape, knobs,
    /// placement, in order).
    pub keys: u64,
}

impl FileOutput {
    pub fn empty(format: Format) -> Self {
        FileOutput {
            records: Default::default(),
            report: FileReport {
                file: PathBuf::new(),
                format,
                sha256: String::new(),
                duplicate_of: None,
                rows: 0,
                records: 0,
                zero_size_rows: 0,
                knobs: String::new(),
                resolved: true,
            },
            bytes: 0,
            sections: Vec::new(),
            notes: Vec::new(),
            counted_once: 0,
        }
    }

    /// Drops the records of `ranges` (reading order): rows read twice.
    pub fn count_once(&mut self, ranges: &[std::ops::Range<usize>]) {
        self.records.drop_ranges(ranges);
        self.counted_once += ranges.iter().map(|r| r.len()).sum::<usize>();
    }

    /// Ends a run section starting at `line` with data rows of `digest`:
    /// the records pushed since the previous one.
    pub fn end_section(&mut self, line: u32, digest: [u8; 32]) {
        let (records, keys) = self.records.end_section();
        self.sections.push(Section {
            line,
            digest,
            records,
            keys,
        });
    }
}

/// Guesses the format from the file name and the first bytes.
pub fn detect(path: &Path, head: &[u8]) -> Format {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default();
    let first = head
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .map(|i| head[i]);
    if first == Some(b'{')
        && (name.contains(".json")
            || head.windows(9).any(|w| w == b"\"results\"")
            || head.windows(9).any(|w| w == b"\"version\""))
    {
        return Format::NcclTestsJson;
    }
    let first_line = head.split(|&b| b == b'\n').next().unwrap_or(b"");
    let fl = String::from_utf8_lossy(first_line).to_ascii_lowercase();
    // `dyncc simulate`'s ground truth (true mean times) lives beside the
    // sweep; it is not a measurement (`dyncc eval --truth` reads it).
    if fl.contains("true_us") {
        return Format::Other;
    }
    if fl.contains("collective")
        && fl.contains("size_bytes")
        && fl.contains("algorithm")
        && fl.contains("protocol")
    {
        return Format::TunerCsv;
    }
    // A .csv meant as a tuner CSV whose header misses columns: read it as
    // one, so the error lists what is missing instead of ignoring the file.
    // (Other CSVs about collectives, e.g. issue facts, name no algorithm.)
    if name.ends_with(".csv")
        && fl.contains("collective")
        && (fl.contains("algorithm") || fl.contains("protocol"))
    {
        return Format::TunerCsv;
    }
    if name.ends_with(".csv") && csv::looks_like_nvidia_raw(&name, head) {
        return Format::NvidiaRawCsv;
    }
    if name.ends_with(".md")
        || name.ends_with(".tsv")
        || name.ends_with(".csv")
        || name.ends_with(".py")
        || name.ends_with(".sh")
    {
        return Format::Other;
    }
    if text::looks_like_nccl_tests(head) || text::looks_like_launch_log(&name) {
        return Format::NcclTestsText;
    }
    Format::Other
}

/// Flags warm-up artefacts: a sample more than [`OUTLIER_FACTOR`] times
/// the median of the same configuration at the adjacent sizes in the same
/// file AND (when the size has other samples there, e.g. the other
/// placement) more than that factor times their median.
pub fn flag_outliers(ds: &mut Dataset) {
    let rows = !ds.records.is_empty();
    let mut f = ds.take_folded();
    flag_outliers_folded(&mut f, &mut ds.anomalies);
    if rows {
        ds.records = f.into_records();
    } else {
        ds.folded = f;
    }
}

/// [`flag_outliers`] on folded measurements: flagged samples move to a
/// group flagged [`flags::WARMUP_OUTLIER`]; one anomaly each, in reading
/// order.
pub fn flag_outliers_folded(f: &mut fold::Folded, anomalies: &mut Vec<Anomaly>) {
    // Group by cell key without size; sizes sorted within.
    // Warm-up artefacts are a property of one run: compare a sample with its
    // own file's neighbours and repeats, never with other runs or hardware
    // that happen to share a cell key.
    let mut families: HashMap<(CellKey, &Path, Option<&str>), Vec<usize>> = HashMap::new();
    for (gi, g) in f.groups.iter().enumerate() {
        if g.key.flags & (UNRESOLVED | flags::WRONG_DATA) != 0 || g.samples.is_empty() {
            continue;
        }
        let mut k = g.key.cell();
        k.nbytes = 0;
        families
            .entry((k, g.key.file.as_path(), g.key.run.gpu.as_deref()))
            .or_default()
            .push(gi);
    }
    /// A sample found off: its group, its index there, the neighbours' median.
    struct Off {
        group: usize,
        sample: usize,
        nmed: f64,
    }
    let mut off: Vec<Off> = Vec::new();
    let groups = &f.groups;
    for (_, mut members) in families {
        members.sort_by_key(|&gi| groups[gi].key.nbytes);
        // Per size, the groups there.
        let mut by_size: Vec<&[usize]> = Vec::new();
        let mut rest = &members[..];
        while let Some(&first) = rest.first() {
            let s = groups[first].key.nbytes;
            let n = rest
                .iter()
                .take_while(|&&gi| groups[gi].key.nbytes == s)
                .count();
            by_size.push(&rest[..n]);
            rest = &rest[n..];
        }
        // Each size's times sorted once (unstable is the same order: equal
        // is equal bits); a median of two neighbours then merges two runs.
        let sorted: Vec<Vec<f64>> = by_size
            .iter()
            .map(|gs| {
                let mut v: Vec<f64> = gs
                    .iter()
                    .flat_map(|&gi| groups[gi].samples.times())
                    .collect();
                v.sort_unstable_by(f64::total_cmp);
                v
            })
            .collect();
        for (j, here) in by_size.iter().enumerate() {
            let mut neigh: Vec<f64> = Vec::new();
            if j > 0 {
                neigh.extend(&sorted[j - 1]);
            }
            if j + 1 < by_size.len() {
                neigh.extend(&sorted[j + 1]);
            }
            let Some(nmed) = crate::stats::median(&mut neigh) else {
                continue;
            };
            for &gi in here.iter() {
                for (si, s) in groups[gi].samples.iter().enumerate() {
                    if s.time_us <= OUTLIER_FACTOR * nmed {
                        continue;
                    }
                    let mut others: Vec<f64> = here
                        .iter()
                        .flat_map(|&o| {
                            groups[o]
                                .samples
                                .iter()
                                .enumerate()
                                .filter(move |&(oi, _)| (o, oi) != (gi, si))
                                .map(|(_, x)| x.time_us)
                        })
                        .collect();
                    let off_repeats = match crate::stats::median(&mut others) {
                        Some(m) => s.time_us > OUTLIER_FACTOR * m,
                        None => true,
                    };
                    if off_repeats {
                        off.push(Off {
                            group: gi,
                            sample: si,
                            nmed,
                        });
                    }
                }
            }
        }
    }
    if off.is_empty() {
        return;
    }
    off.sort_unstable_by_key(|o| f.groups[o.group].samples.get(o.sample).seq);
    for o in &off {
        let g = &f.groups[o.group];
        let s = g.samples.get(o.sample);
        anomalies.push(Anomaly {
            file: (*g.key.file).clone(),
            line: s.line,
            kind: "warmup-outlier",
            detail: format!(
                "{} {} B {}: {:.1} us is more than {}x the {:.1} us at adjacent sizes; kept out of fitting",
                g.key.run.collective.name(),
                g.key.nbytes,
                if g.key.in_place { "in-place" } else { "out-of-place" },
                s.time_us,
                OUTLIER_FACTOR,
                o.nmed
            ),
        });
    }
    // Move each flagged sample into its group's flagged twin.
    let mut moved: HashMap<usize, Vec<usize>> = HashMap::new();
    for o in &off {
        moved.entry(o.group).or_default().push(o.sample);
    }
    // Flagged groups already there (flagged before, e.g. read twice).
    let mut twins: HashMap<fold::GroupKey, usize> = f
        .groups
        .iter()
        .enumerate()
        .filter(|(_, g)| g.key.flags & flags::WARMUP_OUTLIER != 0)
        .map(|(i, g)| (g.key.clone(), i))
        .collect();
    for (gi, mut idx) in moved {
        idx.sort_unstable();
        let mut key = f.groups[gi].key.clone();
        key.flags |= flags::WARMUP_OUTLIER;
        let samples = &mut f.groups[gi].samples;
        let mut taken = Vec::with_capacity(idx.len());
        for &si in idx.iter().rev() {
            taken.push(samples.remove(si));
        }
        let at = match twins.get(&key) {
            Some(&t) => t,
            None => {
                f.groups.push(fold::Group {
                    key: key.clone(),
                    samples: Default::default(),
                });
                twins.insert(key, f.groups.len() - 1);
                f.groups.len() - 1
            }
        };
        f.groups[at].samples.extend(taken);
        f.groups[at].samples.sort_by_seq();
    }
    f.groups.retain(|g| !g.samples.is_empty());
}

/// How far off its neighbours a sample must be to count as a warm-up artefact.
pub const OUTLIER_FACTOR: f64 = 10.0;

/// Aggregates the trusted records into cells (median of repeats; both
/// placements count). Records flagged warm-up outlier, wrong data, knob
/// ignored or unresolved are left out. Cells come sorted by key.
pub fn aggregate(records: &[Record]) -> Vec<Cell> {
    fold::Folded::from_records(records.iter().cloned()).cells()
}

/// Reads all of `rd` into a buffer, counting bytes (for small formats).
pub(crate) fn read_all<R: Read>(mut rd: R) -> std::io::Result<Vec<u8>> {
    let mut v = Vec::new();
    rd.read_to_end(&mut v)?;
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Config, Measurement, Run};

    fn rec(nbytes: u64, t: f64, in_place: bool) -> Record {
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

    #[test]
    fn aggregate_takes_median_of_both_placements_and_drops_flagged() {
        let mut rs = vec![rec(8, 10.0, false), rec(8, 12.0, true), rec(8, 11.0, false)];
        let mut bad = rec(8, 1000.0, true);
        bad.measurement.flags = flags::WRONG_DATA;
        rs.push(bad);
        let cells = aggregate(&rs);
        assert_eq!(cells.len(), 1);
        assert_eq!(cells[0].n, 3);
        assert_eq!(cells[0].time_us, 11.0);
        assert!((cells[0].spread - 2.0 / 11.0).abs() < 1e-12);
        assert_eq!(cells[0].key.config, Config::DEFAULT);
    }

    /// A K80 run and an H100 run of the same shape once flagged every K80
    /// row as a warm-up artefact: runs are judged only against themselves.
    #[test]
    fn warmup_outliers_are_not_judged_against_other_runs() {
        let other = |n, t, f: &str| {
            let mut r = rec(n, t, false);
            r.measurement.source.file = Arc::new(PathBuf::from(f));
            r
        };
        let mut ds = Dataset {
            records: vec![
                other(8, 10.0, "h100.log"),
                other(16, 10.0, "h100.log"),
                other(32, 10.0, "h100.log"),
                other(16, 900.0, "k80.log"),
            ],
            ..Default::default()
        };
        flag_outliers(&mut ds);
        assert!(ds.records.iter().all(|r| r.measurement.flags == 0));
    }

    #[test]
    fn warmup_outlier_is_flagged_only_when_off_neighbours_and_repeats() {
        let mut ds = Dataset {
            records: vec![
                rec(8, 500.0, false), // warm-up artefact
                rec(8, 10.0, true),
                rec(16, 10.5, false),
                rec(16, 10.4, true),
                rec(32, 11.0, false),
                rec(32, 11.2, true),
            ],
            ..Default::default()
        };
        flag_outliers(&mut ds);
        assert_eq!(ds.records[0].measurement.flags, flags::WARMUP_OUTLIER);
        assert!(ds.records[1..].iter().all(|r| r.measurement.flags == 0));
        assert_eq!(ds.anomalies.len(), 1);
        // A genuine cliff seen by both placements is not an outlier.
        let mut ds = Dataset {
            records: vec![
                rec(8, 10.0, false),
                rec(16, 500.0, false),
                rec(16, 510.0, true),
            ],
            ..Default::default()
        };
        flag_outliers(&mut ds);
        assert!(ds.records.iter().all(|r| r.measurement.flags == 0));
    }
}
