//! Finding trace files among the paths compile and eval are given, reading
//! them through the bounded reader, checking every record the format's own
//! validation cannot, and checking where they came from against the sweep
//! (platform, and the sweep the jobs' table was compiled from).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use dyncc_tables::{Trace, TraceRecord};
use serde::Serialize;

use crate::ingest::Skip;

/// Whether `p` starts with the trace magic.
pub fn is_trace(p: &Path) -> bool {
    let mut magic = [0u8; 8];
    std::fs::File::open(p)
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut magic))
        .is_ok_and(|()| magic == dyncc_tables::TRACE_MAGIC)
}

/// What the walk found below the paths: the trace files, and the
/// directory links it did not follow out of the tree and directories it
/// could not list (named, so a trace passed over is never silent).
#[derive(Debug, Default)]
pub struct Found {
    pub files: Vec<PathBuf>,
    pub skipped: Vec<Skip>,
}

/// Takes the trace files out of `paths`: a file named directly that starts
/// with the trace magic or is named `*.trace`, and every entry named
/// `*.trace` below a named directory (one directory per job, or deeper, at
/// any depth; damaged ones and non-regular files too, which [`read`]
/// names). A directory stays in `paths` only if it holds anything else
/// below it but traces, their temporaries and directories (for the sweep
/// reader), or nothing at all (which the sweep reader names). Sorted per
/// directory. The walk stays in each directory named: a link to a
/// directory outside it is not followed but returned as skipped.
pub fn find(paths: &mut Vec<PathBuf>) -> Found {
    let mut found = Found::default();
    paths.retain(|p| {
        if p.is_file() {
            // Named `*.trace`: a trace, damaged or not (`read` names it).
            if is_trace(p) || p.extension().is_some_and(|e| e == "trace") {
                found.files.push(p.clone());
                return false;
            }
            return true;
        }
        if !p.is_dir() {
            // A FIFO or device named `*.trace` is named by `read`.
            if p.extension().is_some_and(|e| e == "trace") {
                found.files.push(p.clone());
                return false;
            }
            return true;
        }
        let mut w = TreeWalk::new(p);
        let other = w.walk(p);
        let keep = other || w.out.is_empty();
        found.files.extend(w.out);
        found.skipped.extend(w.skipped);
        keep
    });
    found
}

/// [`find`]'s trace files alone, for a caller that only asks whether any
/// trace is among the paths.
pub fn split(paths: &mut Vec<PathBuf>) -> Vec<PathBuf> {
    find(paths).files
}

/// Whether nothing at all lies below `dir` but directories (no trace, no
/// sweep file, no link left unfollowed): said, since a trace directory the
/// jobs never wrote to would otherwise add nothing without a word.
pub fn holds_nothing(dir: &Path) -> bool {
    if !dir.is_dir() {
        return false;
    }
    let mut w = TreeWalk::new(dir);
    !w.walk(dir) && w.out.is_empty() && w.skipped.is_empty()
}

/// One walk below a named directory.
struct TreeWalk {
    /// The named directory, canonical: links leading out of it are not
    /// followed.
    root: PathBuf,
    out: Vec<PathBuf>,
    /// Each directory once (device and inode: a link back up, or a bind
    /// mount, does not loop).
    seen: BTreeSet<(u64, u64)>,
    skipped: Vec<Skip>,
}

impl TreeWalk {
    fn new(root: &Path) -> TreeWalk {
        TreeWalk {
            root: std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf()),
            out: Vec::new(),
            seen: BTreeSet::new(),
            skipped: Vec::new(),
        }
    }

    /// Adds the `*.trace` entries below `dir` to `out`, sorted per
    /// directory; true when anything else but traces, their temporaries
    /// and directories lies below it. No depth limit: without links out of
    /// the tree, the recursion is as deep as paths can be.
    fn walk(&mut self, dir: &Path) -> bool {
        use std::os::unix::fs::MetadataExt as _;
        let Ok(meta) = std::fs::metadata(dir) else {
            return true;
        };
        if !self.seen.insert((meta.dev(), meta.ino())) {
            return false;
        }
        let rd = match std::fs::read_dir(dir) {
            Ok(rd) => rd,
            Err(e) => {
                self.skipped.push(Skip {
                    file: dir.to_path_buf(),
                    line: 0,
                    reason: format!(
                        "cannot list this directory ({e}): traces below it not read; fix its \
                         permissions or leave it out"
                    ),
                });
                return false;
            }
        };
        let mut entries: Vec<_> = rd.flatten().map(|e| e.path()).collect();
        entries.sort();
        let mut other = false;
        let mut subdirs = Vec::new();
        for q in entries {
            let name = q
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            if q.is_dir() {
                match crate::ingest::walk::outside_link(&q, &self.root) {
                    Some(skip) => self.skipped.push(skip),
                    None => subdirs.push(q),
                }
            } else if name.ends_with(".trace") {
                self.out.push(q);
            } else if !name.ends_with(".trace.tmp") {
                other = true;
            }
        }
        for d in subdirs {
            other |= self.walk(&d);
        }
        other
    }
}

/// One communicator a trace file recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Comm {
    pub comm_id: u64,
    pub n_nodes: u32,
    pub n_ranks: u32,
    /// The rank that recorded it.
    pub rank: u32,
}

/// One trace file, read and checked.
#[derive(Clone, Debug)]
pub struct TraceFile {
    pub path: Arc<PathBuf>,
    /// `ncclGetVersion`'s code; 0 when unknown.
    pub nccl_version: u32,
    pub table_digest: Option<u64>,
    /// The platform label and GPU of the table that ran (empty: no table,
    /// or a trace written before the format recorded them).
    pub platform: String,
    pub gpu: String,
    /// The fingerprint of the sweep the table that ran was compiled from
    /// (`None`: no table, a table or trace that does not record it).
    pub sweep: Option<u64>,
    pub comms: Vec<Comm>,
    pub records: Vec<TraceRecord>,
    /// Calls the recording rank's tuner answered per (communicator,
    /// collective, size bucket) (major 3; empty before): where the plugin
    /// stopped recording, more ran than the records hold.
    pub shapes: Vec<dyncc_tables::TraceShape>,
}

impl TraceFile {
    /// `platform` (GPU), or `(platform unknown)`.
    pub fn platform_name(&self) -> String {
        match (self.platform.is_empty(), self.gpu.is_empty()) {
            (true, true) => "(platform unknown)".into(),
            (false, true) => self.platform.clone(),
            (true, false) => self.gpu.clone(),
            (false, false) => format!("{} ({})", self.platform, self.gpu),
        }
    }

    /// Whether the trace names `label` as its platform or GPU.
    fn is_platform(&self, label: &str) -> bool {
        self.platform.eq_ignore_ascii_case(label) || self.gpu.eq_ignore_ascii_case(label)
    }
}

/// Where traces came from, against the sweep: what compile refused,
/// filtered or used with `--foreign-traces`.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Provenance {
    /// Trace files of another platform used under `--foreign-traces`.
    pub foreign_used: Vec<String>,
    /// Trace files of another platform than `--platform` names (left out).
    pub other_platform: usize,
    /// Trace files that do not say their platform (written without a
    /// table, or before the format recorded it): used.
    pub platform_unknown: usize,
    /// Trace files of jobs whose table was compiled from another sweep
    /// than this compile's, used under `--foreign-traces`.
    pub other_sweep_used: Vec<String>,
    /// Trace files that do not say which table and sweep they ran (no
    /// table, an older plugin or table, trace majors 1-2), used under
    /// `--foreign-traces`; without it they are refused.
    pub unproven_used: Vec<String>,
}

/// Checks that `traces` come from the sweep's platform (`label`, `gpu`):
/// with `want` (`--platform`), traces of another platform are left out;
/// then a trace of another platform than the sweep's is an error naming
/// the file and `--foreign-traces`, under which it is used and said.
/// Likewise a trace whose table was compiled from another sweep than
/// `sweep` (this compile's fingerprint): its jobs ran decisions this sweep
/// did not make, on a cluster that may have changed since. A trace must
/// carry its table's digest and sweep fingerprint: one that does not (a
/// job without a table, an older plugin or table, trace majors 1-2) is
/// refused likewise, and used and listed under `--foreign-traces`. Traces
/// that do not say their platform are counted.
pub fn check_provenance(
    traces: &mut Vec<TraceFile>,
    label: Option<&str>,
    gpu: Option<&str>,
    sweep: Option<u64>,
    want: Option<&str>,
    foreign_ok: bool,
) -> anyhow::Result<Provenance> {
    let mut p = Provenance::default();
    let known = |t: &TraceFile| !(t.platform.is_empty() && t.gpu.is_empty());
    if let Some(w) = want {
        let before = traces.len();
        traces.retain(|t| !known(t) || t.is_platform(w));
        p.other_platform = before - traces.len();
    }
    for t in traces.iter() {
        match (t.sweep, sweep) {
            (Some(theirs), Some(ours)) if theirs != ours => {
                if !foreign_ok {
                    anyhow::bail!(
                        "{}: a trace of jobs that ran a table compiled from another sweep \
                         (fingerprint {theirs:016x}; this compile's sweep is {ours:016x}): the \
                         sweep files changed, or the jobs ran another cluster's table. Compile \
                         with the sweep that table came from (`dyncc verify TABLE` shows its \
                         inputs), leave the trace out, or give --foreign-traces to use it (the \
                         report then says so)",
                        t.path.display()
                    );
                }
                p.other_sweep_used
                    .push(format!("{} (sweep {theirs:016x})", t.path.display()));
            }
            _ => {}
        }
        // The sweep fingerprint is checked where there is one to check it
        // against (a table from before fingerprints, in `eval`, has none).
        if (sweep.is_some() && t.sweep.is_none()) || t.table_digest.is_none() {
            if !foreign_ok {
                anyhow::bail!(
                    "{}: a trace that does not say which table and sweep its job ran ({}): its \
                     settings and who chose them cannot be checked against this sweep. Jobs \
                     record both when they run a table compiled by this dyncc (`DYNCC_TABLE`); \
                     leave the trace out, or give --foreign-traces to use it (the report then \
                     lists it)",
                    t.path.display(),
                    match (t.table_digest, t.sweep) {
                        (None, _) => "no table digest: the job ran without a table, or an older plugin wrote it",
                        _ => "no sweep fingerprint: its table came from an older dyncc",
                    }
                );
            }
            p.unproven_used.push(t.path.display().to_string());
        }
        if !known(t) {
            p.platform_unknown += 1;
            continue;
        }
        // The table's platform is the sweep's label (else its GPU).
        let same = match (label, gpu) {
            (Some(l), _) if !t.platform.is_empty() => t.platform.eq_ignore_ascii_case(l),
            (_, Some(g)) if !t.gpu.is_empty() => t.gpu.eq_ignore_ascii_case(g),
            (None, None) => true,
            _ => false,
        };
        if same {
            continue;
        }
        if !foreign_ok {
            anyhow::bail!(
                "{}: a trace of jobs on platform {}, not the sweep's ({}): another cluster's \
                 times would decide this one's table; leave it out, pick traces with \
                 --platform, or give --foreign-traces to use it (the report then says so)",
                t.path.display(),
                t.platform_name(),
                [label, gpu]
                    .into_iter()
                    .flatten()
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        p.foreign_used
            .push(format!("{} ({})", t.path.display(), t.platform_name()));
    }
    Ok(p)
}

/// Reads trace files through the bounded reader and checks every record
/// ([`check_records`]). A file that fails is refused with an error that
/// names it, the record and what was expected; with `lenient`, skipped and
/// returned as a [`Skip`] instead (as sweep files are).
pub fn read(files: &[PathBuf], lenient: bool) -> anyhow::Result<(Vec<TraceFile>, Vec<Skip>)> {
    // A file named twice (directly and through its directory) is read once.
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    let mut skipped = Vec::new();
    for f in files
        .iter()
        .filter(|f| seen.insert(std::fs::canonicalize(f).unwrap_or_else(|_| f.to_path_buf())))
    {
        match read_one(f) {
            Ok(t) => out.push(t),
            Err(e) if lenient => skipped.push(Skip {
                file: f.clone(),
                line: 0,
                reason: format!("{e:#}"),
            }),
            Err(e) => {
                return Err(e.context(
                    "reading trace files (--lenient skips a damaged trace and reports it)",
                ))
            }
        }
    }
    Ok((out, skipped))
}

/// One trace file, read and checked.
fn read_one(f: &Path) -> anyhow::Result<TraceFile> {
    let bytes = crate::input::read(f, &crate::input::TRACE)?;
    let t = Trace::from_bytes(&bytes).map_err(|e| {
        anyhow::anyhow!(
            "{}: not a valid dyncc trace file: {e}; leave it out (the plugin writes a trace \
             whole, so this one was damaged or is not a trace)",
            f.display()
        )
    })?;
    check_records(&t).map_err(|e| {
        anyhow::anyhow!(
            "{}: not a valid dyncc trace file: {e}; leave it out (its checksum holds, so it \
             was written so, not damaged in a copy)",
            f.display()
        )
    })?;
    Ok(TraceFile {
        path: Arc::new(f.to_path_buf()),
        nccl_version: t.head().nccl_version,
        table_digest: t.head().table_digest,
        platform: t.head().platform.to_owned(),
        gpu: t.head().gpu.to_owned(),
        sweep: t.head().sweep,
        comms: t
            .comms()
            .map(|c| Comm {
                comm_id: c.comm_id,
                n_nodes: c.n_nodes,
                n_ranks: c.n_ranks,
                rank: c.rank,
            })
            .collect(),
        records: t.records().collect(),
        shapes: t.shapes().collect(),
    })
}

/// Most collectives one record may claim: 2^50 (a process making a
/// collective every nanosecond for thirteen days); beyond, the sums of
/// ln(time) lose the precision the mean and spread are read with.
const MAX_COUNT: u64 = 1 << 50;

/// Checks what the format's own validation cannot (it has no logarithm):
/// per record, a count that fits (`MAX_COUNT`, and the file's total),
/// finite sums, the mean of ln(time) within [ln min, ln max], and a spread
/// no wider than that range. Says which record and what was expected.
pub fn check_records(t: &Trace<'_>) -> Result<(), String> {
    let mut total = 0u64;
    for (i, r) in t.records().enumerate() {
        let what = |e: String| {
            format!(
                "record {i} ({} {} B, {}/{}/{}ch, chosen by {}, {} calls): {e}",
                r.coll.name(),
                r.n_bytes,
                r.setting.algo.name(),
                r.setting.proto.name(),
                r.setting.channels,
                r.source.name(),
                r.count
            )
        };
        if r.count == 0 || r.count > MAX_COUNT {
            return Err(what(format!("expected a count from 1 to {MAX_COUNT}")));
        }
        total = total
            .checked_add(r.count)
            .filter(|&n| n <= MAX_COUNT)
            .ok_or_else(|| {
                what(format!(
                    "expected the file's counts to total at most {MAX_COUNT}"
                ))
            })?;
        if !(r.sum_ln.is_finite() && r.sum_ln2.is_finite()) {
            return Err(what("expected finite sums of ln(time)".into()));
        }
        let n = r.count as f64;
        let mean = r.sum_ln / n;
        // Minimum and maximum are whole nanoseconds: 1 ns either way.
        let (lo, hi) = (
            (r.min_ns as f64 - 1.0).max(0.5).ln(),
            (r.max_ns as f64 + 1.0).ln(),
        );
        // Rounding of n additions of ln(ns) (about 20 each).
        let tol = 1e-9 * (1.0 + mean.abs());
        if !(lo - tol..=hi + tol).contains(&mean) {
            return Err(what(format!(
                "expected the geometric mean ({:.3} us from the sums) within [min, max] \
                 ([{:.3}, {:.3}] us)",
                mean.exp() / 1e3,
                r.min_ns as f64 / 1e3,
                r.max_ns as f64 / 1e3
            )));
        }
        let var = r.sum_ln2 / n - mean * mean;
        let vtol = 1e-9 * (1.0 + r.sum_ln2.abs() / n);
        if var < -vtol || var > (hi - lo).powi(2) + vtol {
            return Err(what(format!(
                "expected a spread of ln(time) (variance {var:.3e}) from 0 to the square of \
                 ln(max / min) ({:.3e})",
                (hi - lo).powi(2)
            )));
        }
    }
    Ok(())
}
