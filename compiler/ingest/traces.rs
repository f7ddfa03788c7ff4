//! Trace files (`DYNCC_TRACE`, format in `tables/FORMAT.md`) read as
//! measurements: what jobs ran, who chose it and its GPU time, per
//! communicator shape, collective and size.
//!
//! A trace's kernel time and a sweep's nccl-tests time differ (launch and
//! host overheads), so a trace is never set against a sweep: a setting's
//! gain is read within one trace file (one process of one job), against
//! NCCL's own choice at the same shape in the same file, and pooled over
//! files. Every rank of a collective sees the same collective, so a
//! communicator recorded by several ranks counts once. Points (node count,
//! ranks, collective, size bucket) where jobs measured a gain become
//! [`Cell`]s on the trace [`TimeBase`], which the grids let decide the
//! point alone ([`crate::features`]). Measurements from an older NCCL than
//! the newest that measured the same point are set aside (drift).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use dyncc_tables::trace::Source as Who;
use dyncc_tables::{
    bucket_lower_bound, bucket_upper_bound, size_bucket, Algo, Coll, Proto, Trace, TraceRecord,
};
use serde::Serialize;

use crate::ingest::Skip;
use crate::record::{Cell, CellKey, Collective, Config, Source, State, TimeBase};

/// Whether `p` starts with the trace magic.
pub fn is_trace(p: &Path) -> bool {
    let mut magic = [0u8; 8];
    std::fs::File::open(p)
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut magic))
        .is_ok_and(|()| magic == dyncc_tables::TRACE_MAGIC)
}

/// How deep below a named directory traces are looked for (a directory
/// per job, per node, per day...; the walk is bounded).
const MAX_DEPTH: usize = 8;

/// Takes the trace files out of `paths`: a file named directly that starts
/// with the trace magic or is named `*.trace`, and every entry named
/// `*.trace` below a named directory (one directory per job, or deeper, up
/// to [`MAX_DEPTH`] levels; damaged ones and non-regular files too, which
/// [`read`] names). A directory stays in `paths` only if it holds anything
/// else below it but traces, their temporaries and directories (for the
/// sweep reader), or nothing at all (which the sweep reader names). Sorted
/// per directory.
pub fn split(paths: &mut Vec<PathBuf>) -> Vec<PathBuf> {
    let mut files = Vec::new();
    paths.retain(|p| {
        if p.is_file() {
            // Named `*.trace`: a trace, damaged or not (`read` names it).
            if is_trace(p) || p.extension().is_some_and(|e| e == "trace") {
                files.push(p.clone());
                return false;
            }
            return true;
        }
        if !p.is_dir() {
            // A FIFO or device named `*.trace` is named by `read`.
            if p.extension().is_some_and(|e| e == "trace") {
                files.push(p.clone());
                return false;
            }
            return true;
        }
        let mut here = Vec::new();
        let mut seen = BTreeSet::new();
        let other = walk(p, 0, &mut here, &mut seen);
        let keep = other || here.is_empty();
        files.extend(here);
        keep
    });
    files
}

/// Whether nothing at all lies below `dir` but directories (no trace, no
/// sweep file): said, since a trace directory the jobs never wrote to
/// would otherwise add nothing without a word.
pub fn holds_nothing(dir: &Path) -> bool {
    let mut out = Vec::new();
    dir.is_dir() && !walk(dir, 0, &mut out, &mut BTreeSet::new()) && out.is_empty()
}

/// Adds the `*.trace` entries below `dir` to `out`, sorted per directory;
/// true when anything else but traces, their temporaries and directories
/// lies below it. Each directory is walked once (`seen`, canonical paths:
/// a symbolic link back up does not loop).
fn walk(dir: &Path, depth: usize, out: &mut Vec<PathBuf>, seen: &mut BTreeSet<PathBuf>) -> bool {
    let canon = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    if depth > MAX_DEPTH || !seen.insert(canon) {
        return false;
    }
    let Ok(rd) = std::fs::read_dir(dir) else {
        return true;
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
            subdirs.push(q);
        } else if name.ends_with(".trace") {
            out.push(q);
        } else if !name.ends_with(".trace.tmp") {
            other = true;
        }
    }
    for d in subdirs {
        other |= walk(&d, depth + 1, out, seen);
    }
    other
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
    /// Trace files that do not say which sweep their table came from (an
    /// older plugin or table): used.
    pub sweep_unknown: usize,
}

/// Checks that `traces` come from the sweep's platform (`label`, `gpu`):
/// with `want` (`--platform`), traces of another platform are left out;
/// then a trace of another platform than the sweep's is an error naming
/// the file and `--foreign-traces`, under which it is used and said.
/// Likewise a trace whose table was compiled from another sweep than
/// `sweep` (this compile's fingerprint): its jobs ran decisions this sweep
/// did not make, on a cluster that may have changed since. Traces that do
/// not say their platform or sweep are used and counted.
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
            (None, _) => p.sweep_unknown += 1,
            _ => {}
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
/// per record, a count that fits ([`MAX_COUNT`], and the file's total),
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
                r.algo.name(),
                r.proto.name(),
                r.channels,
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

/// Pooled log GPU times of one side of a comparison.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Side {
    pub count: u64,
    pub sum_ln: f64,
    pub sum_ln2: f64,
}

impl Side {
    pub fn add(&mut self, r: &TraceRecord) {
        self.merge(&Side {
            count: r.count,
            sum_ln: r.sum_ln,
            sum_ln2: r.sum_ln2,
        });
    }

    /// Adds another side's collectives (counts saturate: a file may claim
    /// any count).
    pub fn merge(&mut self, o: &Side) {
        self.count = self.count.saturating_add(o.count);
        self.sum_ln += o.sum_ln;
        self.sum_ln2 += o.sum_ln2;
    }

    pub fn mean_ln(&self) -> f64 {
        self.sum_ln / self.count.max(1) as f64
    }

    /// Variance of the mean of ln(time): the sample variance over the
    /// count; infinite with fewer than two collectives (no spread known).
    pub fn var_of_mean(&self) -> f64 {
        if self.count < 2 {
            return f64::INFINITY;
        }
        let n = self.count as f64;
        self.ss() / (n - 1.0) / n
    }

    /// Sum of squared deviations from the mean (for pooled variances).
    fn ss(&self) -> f64 {
        let n = self.count as f64;
        (self.sum_ln2 - n * self.mean_ln().powi(2)).max(0.0)
    }
}

/// What ran: algorithm, protocol and channels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Setting {
    pub algo: Algo,
    pub proto: Proto,
    pub channels: u8,
}

impl Setting {
    fn of(r: &TraceRecord) -> Setting {
        Setting {
            algo: r.algo,
            proto: r.proto,
            channels: r.channels,
        }
    }

    pub fn name(&self) -> String {
        format!(
            "{}/{}/{}ch",
            self.algo.name(),
            self.proto.name(),
            self.channels
        )
    }
}

/// Where a job measured: the communicator's shape, the collective and the
/// size NCCL passed the tuner.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Shape {
    pub nodes: u32,
    pub ranks: u32,
    pub coll: Coll,
    pub n_bytes: u64,
}

/// A setting other than NCCL's own choice that ran at a shape.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Other {
    pub side: Side,
    /// Collectives the deployed table forced (the others: exploration).
    pub by_table: u64,
}

/// One file's measurements at one shape: NCCL's own choice, and every
/// other setting that ran.
#[derive(Clone, Debug, Default)]
pub struct AtShape {
    pub nccl: Side,
    /// What NCCL ran on its own, with how many collectives each.
    pub nccl_settings: BTreeMap<Setting, u64>,
    pub others: BTreeMap<Setting, Other>,
    /// Collectives no tuner answer could be linked to, or whose setting's
    /// origin cannot be told (not used).
    pub unknown: u64,
}

impl AtShape {
    /// What NCCL ran on its own most often.
    pub fn nccl_choice(&self) -> Option<Setting> {
        self.nccl_settings
            .iter()
            .max_by_key(|(s, n)| (**n, std::cmp::Reverse(**s)))
            .map(|(s, _)| *s)
    }

    /// Adds another recording's measurements at the same shape.
    pub fn merge(&mut self, o: &AtShape) {
        self.nccl.merge(&o.nccl);
        for (s, n) in &o.nccl_settings {
            let e = self.nccl_settings.entry(*s).or_default();
            *e = e.saturating_add(*n);
        }
        for (s, x) in &o.others {
            let e = self.others.entry(*s).or_default();
            e.side.merge(&x.side);
            e.by_table = e.by_table.saturating_add(x.by_table);
        }
        self.unknown = self.unknown.saturating_add(o.unknown);
    }
}

/// What every recording at one shape (of one NCCL version) says about
/// who ran what: the settings NCCL chose on its own there. A record is
/// read against these facts of all the recordings, not of its own
/// communicator alone: a setting forced in one job that NCCL runs on its
/// own in another is NCCL's choice.
#[derive(Clone, Debug, Default)]
pub struct ShapeFacts {
    nccl: BTreeSet<Setting>,
}

/// [`ShapeFacts`] per shape.
pub type Facts = BTreeMap<Shape, ShapeFacts>;

/// The shape a record of `file` measured, when `keep` admits its
/// communicator.
fn shape_of(file: &TraceFile, r: &TraceRecord) -> Option<Shape> {
    let c = file.comms.get(r.comm as usize)?;
    Some(Shape {
        nodes: c.n_nodes,
        ranks: c.n_ranks,
        coll: r.coll,
        n_bytes: r.n_bytes,
    })
}

/// Adds what `file`'s records (of the communicators `keep` admits) say to
/// `facts`.
pub fn add_facts(facts: &mut Facts, file: &TraceFile, keep: &dyn Fn(usize) -> bool) {
    for r in file.records.iter().filter(|r| keep(r.comm as usize)) {
        let Some(s) = shape_of(file, r) else { continue };
        let f = facts.entry(s).or_default();
        match r.source {
            Who::Nccl | Who::ExploreNccl => {
                f.nccl.insert(Setting::of(r));
            }
            Who::Table | Who::Explore | Who::Unknown => {}
        }
    }
}

/// Splits one file's records (of the communicators `keep` admits) into
/// NCCL's own choice and other settings, per communicator (index into the
/// file's) and shape, read against `facts`. A setting that ran what NCCL
/// runs there on its own is NCCL's choice whoever asked for it: an
/// exploring call that left the choice to NCCL, a forced setting NCCL
/// would have chosen anyway.
pub fn classify_comms(
    file: &TraceFile,
    keep: &dyn Fn(usize) -> bool,
    facts: &Facts,
) -> BTreeMap<(u16, Shape), AtShape> {
    let mut out: BTreeMap<(u16, Shape), AtShape> = BTreeMap::new();
    let none = ShapeFacts::default();
    for r in file.records.iter().filter(|r| keep(r.comm as usize)) {
        let Some(s) = shape_of(file, r) else { continue };
        let f = facts.get(&s).unwrap_or(&none);
        let at = out.entry((r.comm, s)).or_default();
        let ran = Setting::of(r);
        let is_nccl = match r.source {
            Who::Unknown => {
                at.unknown = at.unknown.saturating_add(r.count);
                continue;
            }
            // Exploration left the choice to NCCL: NCCL's own choice ran.
            Who::Nccl | Who::ExploreNccl => true,
            // A setting the table or exploration forced (an exploring call
            // runs a setting wherever the plan lists one, over a force
            // too, so it is never taken for NCCL's choice but where NCCL
            // runs the same on its own).
            Who::Table | Who::Explore => f.nccl.contains(&ran),
        };
        if is_nccl {
            at.nccl.add(r);
            let e = at.nccl_settings.entry(ran).or_default();
            *e = e.saturating_add(r.count);
        } else {
            let o = at.others.entry(ran).or_default();
            o.side.add(r);
            if r.source == Who::Table {
                o.by_table = o.by_table.saturating_add(r.count);
            }
        }
    }
    out
}

/// [`classify_comms`] of one file read on its own, pooled per shape over
/// its communicators.
pub fn classify(file: &TraceFile, keep: &dyn Fn(usize) -> bool) -> BTreeMap<Shape, AtShape> {
    let mut facts = Facts::new();
    add_facts(&mut facts, file, keep);
    let mut out: BTreeMap<Shape, AtShape> = BTreeMap::new();
    for ((_, s), at) in classify_comms(file, keep, &facts) {
        out.entry(s).or_default().merge(&at);
    }
    out
}

/// The key of a point: where a table decides (size on the table's bucket
/// grid, or the sweep's size in that bucket).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PointKey {
    pub coll: Coll,
    pub nodes: u32,
    pub ranks: u32,
    pub n_bytes: u64,
}

impl PointKey {
    /// The key of `config`'s cell at this point (jobs run in the baseline
    /// call state).
    fn cell_key(&self, config: Config) -> CellKey {
        CellKey {
            collective: Collective::from_coll(self.coll),
            nbytes: self.n_bytes,
            nranks: self.ranks,
            nnodes: self.nodes,
            state: State::BASELINE,
            config,
        }
    }
}

/// What the sweep holds that trace points are placed against.
#[derive(Clone, Debug, Default)]
pub struct SweepView {
    /// Configurations measured, per (collective, ranks per node).
    pub configs: BTreeMap<(Coll, u32), BTreeSet<Config>>,
    /// Sizes measured per collective (a trace's size snaps to the sweep's
    /// size in the same bucket, so both are one point).
    pub sizes: BTreeMap<Coll, BTreeSet<u64>>,
    /// Points the sweep measured (any configuration).
    pub points: BTreeSet<PointKey>,
    /// The newest NCCL version the sweep names (0: none named).
    pub nccl_version: u32,
    /// The sweep's ln(time) and repeats per (point, configuration): what a
    /// trace's gain is set against where both measured a point.
    pub times: BTreeMap<(PointKey, Config), (f64, u32)>,
}

impl SweepView {
    pub fn of_cells(cells: &[Cell], nccl_version: u32) -> SweepView {
        let mut v = SweepView {
            nccl_version,
            ..Default::default()
        };
        for c in cells {
            let k = &c.key;
            let Some(coll) = k.collective.tunable() else {
                continue;
            };
            if k.nnodes == 0 || k.nranks % k.nnodes != 0 || k.state != State::BASELINE {
                continue;
            }
            v.configs
                .entry((coll, k.nranks / k.nnodes))
                .or_default()
                .insert(k.config);
            v.sizes.entry(coll).or_default().insert(k.nbytes);
            let p = PointKey {
                coll,
                nodes: k.nnodes,
                ranks: k.nranks,
                n_bytes: k.nbytes,
            };
            v.points.insert(p);
            if c.time_us.is_finite() && c.time_us > 0.0 {
                v.times.insert((p, k.config), (c.time_us.ln(), c.n));
            }
        }
        v
    }

    /// Whether the sweep measured `key`'s collective at its node count and
    /// ranks (at any size).
    pub fn measured_count(&self, key: PointKey) -> bool {
        let at = |n_bytes| PointKey { n_bytes, ..key };
        self.points.range(at(0)..=at(u64::MAX)).next().is_some()
    }

    /// The size a trace's `n_bytes` stands at: the sweep's size in the
    /// same table bucket when it measured one, else the bucket's lower
    /// bound (a table decides per bucket).
    pub fn snap(&self, coll: Coll, n_bytes: u64) -> u64 {
        let b = size_bucket(n_bytes);
        self.sizes
            .get(&coll)
            .and_then(|s| {
                s.range(bucket_lower_bound(b)..=bucket_upper_bound(b))
                    .next()
            })
            .copied()
            .unwrap_or_else(|| bucket_lower_bound(b))
    }

    /// The configuration a setting that ran stands for: the sweep's with
    /// that channel count, else the sweep's that left channels to NCCL
    /// (NCCL picks the same count at the same shape), else the setting
    /// with its channel count forced.
    fn config_of(&self, coll: Coll, ppn: u32, s: Setting) -> Config {
        let forced = Config {
            algo: Some(s.algo),
            proto: Some(s.proto),
            channels: (s.channels > 0).then_some(s.channels as u32),
        };
        let auto = Config {
            channels: None,
            ..forced
        };
        match self.configs.get(&(coll, ppn)) {
            Some(c) if c.contains(&forced) => forced,
            Some(c) if c.contains(&auto) => auto,
            _ => forced,
        }
    }
}

/// What the deployed table did at a point, from the traces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Deployed {
    /// It left the calls to NCCL.
    Nccl,
    /// It forced this configuration.
    Forced(Config),
}

/// The rule a traced comparison meets before it decides a point (compile)
/// or scores a table (`eval --traces`): one definition, [`evidence`] and
/// [`judge`]. A trace is evidence, never an order:
///
/// - each side (NCCL's choice, the setting) holds at least [`MIN_CALLS`]
///   calls;
/// - the gain is read within each communicator that ran both sides, with
///   the noise of its own calls' spread plus a job-to-job floor
///   ([`GAIN_SD_FLOOR`], or the spread of the gains between communicators
///   where it is larger), and across communicators that ran one side each
///   (per-communicator geometric means; the noise from the spread between
///   communicators of a side, pooled over the sides, never below
///   [`BETWEEN_SD_FLOOR`]), needing [`MIN_COMMS_ACROSS`] communicators in
///   all; both pooled by inverse variance; its sd is never below
///   [`SD_FLOOR`], whatever the counts;
/// - a setting wins where its gain clears the margin by `z` sds, falls
///   short where it misses the margin by `z` sds, loses where it is slower
///   than NCCL's choice by `z` sds; at a point the sweep measured, `z` is
///   at least [`Z_SWEPT`].
pub mod rule {
    /// Fewest calls on each side of a comparison.
    /// Defined by the tables crate, which the plugin reads too: it stops
    /// recording a shape once each side has this many.
    pub const MIN_CALLS: u64 = dyncc_tables::trace::MIN_CALLS_PER_SIDE;
    /// Fewest communicators (both sides together, at least one each) where
    /// sides are paired across communicators.
    pub const MIN_COMMS_ACROSS: usize = 3;
    /// Least job-to-job sd of one communicator's gain (ln).
    pub const GAIN_SD_FLOOR: f64 = 0.02;
    /// Least sd of one communicator's geometric mean time between
    /// communicators at one shape (ln).
    pub const BETWEEN_SD_FLOOR: f64 = 0.03;
    /// Least sd of any traced gain (ln), however many calls and
    /// communicators.
    pub const SD_FLOOR: f64 = 0.01;
    /// Least `z` at a point the sweep measured too.
    pub const Z_SWEPT: f64 = 2.0;
}

/// What a comparison of one setting with NCCL's choice at one point rests
/// on: the gain (ln t(NCCL's choice) / t(setting)), its sd, and the counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Evidence {
    pub ln_gain: f64,
    pub sd: f64,
    /// Calls of NCCL's choice, and of the setting.
    pub nccl_calls: u64,
    pub calls: u64,
    /// Communicators that ran NCCL's choice, and the setting.
    pub nccl_comms: usize,
    pub comms: usize,
    /// Communicators that ran both (compared within themselves).
    pub paired: usize,
}

/// How a comparison stands against the rule ([`rule`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Faster than NCCL's choice past the margin and `z` sds.
    Wins,
    /// Short of the margin by `z` sds (not worth forcing), not slower.
    Short,
    /// Slower than NCCL's choice by `z` sds.
    Loses,
    /// Within the noise.
    Unclear,
    /// Fewer calls or communicators than the rule asks.
    TooLittle,
}

impl Verdict {
    /// Whether the evidence decides (either way).
    pub fn decides(self) -> bool {
        matches!(self, Verdict::Wins | Verdict::Short | Verdict::Loses)
    }
}

/// The bar a comparison is judged against: the margin (ln) and `z`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bar {
    pub ln_margin: f64,
    pub z: f64,
}

impl Bar {
    /// Compile's bar for `--margin` (a fraction) and `--noise-z`.
    pub fn new(margin: f64, z: f64) -> Bar {
        Bar {
            ln_margin: (1.0 + margin).ln(),
            z,
        }
    }

    /// The stricter bar at a point the sweep measured too.
    pub fn swept(self) -> Bar {
        Bar {
            z: self.z.max(rule::Z_SWEPT),
            ..self
        }
    }
}

/// The rule, applied: see [`rule`].
pub fn judge(e: &Evidence, bar: Bar) -> Verdict {
    let across = e.nccl_comms + e.comms - 2 * e.paired;
    if e.nccl_calls < rule::MIN_CALLS
        || e.calls < rule::MIN_CALLS
        || (e.paired == 0 && across < rule::MIN_COMMS_ACROSS)
        || !(e.ln_gain.is_finite() && e.sd.is_finite())
    {
        return Verdict::TooLittle;
    }
    let sd = e.sd.max(rule::SD_FLOOR);
    if e.ln_gain - bar.z * sd > bar.ln_margin {
        Verdict::Wins
    } else if e.ln_gain + bar.z * sd < 0.0 {
        Verdict::Loses
    } else if e.ln_gain + bar.z * sd < bar.ln_margin {
        Verdict::Short
    } else {
        Verdict::Unclear
    }
}

/// The evidence of one setting against NCCL's choice from its
/// communicators' measurements, `(NCCL's choice, the setting)` per
/// communicator (either side may be empty), with `var_call` the variance
/// of one call's ln(time) (the traces' own spread). `None` where no
/// communicator ran either side.
pub fn evidence(per_comm: &[(Side, Side)], var_call: f64) -> Option<Evidence> {
    let mut e = Evidence::default();
    for (n, s) in per_comm {
        e.nccl_calls = e.nccl_calls.saturating_add(n.count);
        e.calls = e.calls.saturating_add(s.count);
        e.nccl_comms += usize::from(n.count > 0);
        e.comms += usize::from(s.count > 0);
        e.paired += usize::from(n.count > 0 && s.count > 0);
    }
    if e.nccl_comms == 0 || e.comms == 0 {
        return None;
    }
    let var_call = if var_call.is_finite() {
        var_call.max(0.0)
    } else {
        0.05f64.powi(2)
    };
    // Within communicators: a gain each, with its calls' noise and the
    // job-to-job spread of gains (observed, never below the floor).
    let within: Vec<(f64, f64)> = per_comm
        .iter()
        .filter(|(n, s)| n.count > 0 && s.count > 0)
        .map(|(n, s)| {
            (
                n.mean_ln() - s.mean_ln(),
                var_call * (1.0 / n.count as f64 + 1.0 / s.count as f64),
            )
        })
        .collect();
    let mut parts: Vec<(f64, f64)> = Vec::new();
    if !within.is_empty() {
        let k = within.len() as f64;
        let mut tau2 = rule::GAIN_SD_FLOOR.powi(2);
        if within.len() >= 2 {
            let mean = within.iter().map(|w| w.0).sum::<f64>() / k;
            let s2 = within.iter().map(|w| (w.0 - mean).powi(2)).sum::<f64>() / (k - 1.0);
            let noise = within.iter().map(|w| w.1).sum::<f64>() / k;
            tau2 = tau2.max(s2 - noise);
        }
        let (mut wsum, mut wg) = (0.0, 0.0);
        for (g, v) in &within {
            let w = 1.0 / (v + tau2);
            wsum += w;
            wg += w * g;
        }
        parts.push((wg / wsum, 1.0 / wsum));
    }
    // Across communicators that ran one side each: per-communicator
    // geometric means, the spread between communicators of a side pooled
    // over both sides.
    let one = |pick: &dyn Fn(&(Side, Side)) -> Option<f64>| -> Vec<f64> {
        per_comm.iter().filter_map(pick).collect()
    };
    let a = one(&|(n, s)| (n.count > 0 && s.count == 0).then(|| n.mean_ln()));
    let b = one(&|(n, s)| (s.count > 0 && n.count == 0).then(|| s.mean_ln()));
    if !a.is_empty() && !b.is_empty() && a.len() + b.len() >= rule::MIN_COMMS_ACROSS {
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
        let ss = |v: &[f64]| {
            let m = mean(v);
            v.iter().map(|x| (x - m).powi(2)).sum::<f64>()
        };
        let dof = (a.len() + b.len() - 2) as f64;
        let s2 = ((ss(&a) + ss(&b)) / dof).max(rule::BETWEEN_SD_FLOOR.powi(2));
        parts.push((
            mean(&a) - mean(&b),
            s2 * (1.0 / a.len() as f64 + 1.0 / b.len() as f64),
        ));
    }
    if parts.is_empty() {
        // Too few communicators to pair across, none that ran both: the
        // counts say so ([`judge`]).
        e.ln_gain = f64::NAN;
        e.sd = f64::INFINITY;
        return Some(e);
    }
    let wsum: f64 = parts.iter().map(|p| 1.0 / p.1.max(1e-300)).sum();
    e.ln_gain = parts.iter().map(|p| p.0 / p.1.max(1e-300)).sum::<f64>() / wsum;
    e.sd = (1.0 / wsum).sqrt().max(rule::SD_FLOOR);
    Some(e)
}

/// Variance of one call's ln(time), pooled over `sides`; 5 % squared when
/// none ran twice.
pub fn var_call<'a>(sides: impl Iterator<Item = &'a Side>) -> f64 {
    let (mut ss, mut dof) = (0.0, 0.0);
    for s in sides {
        ss += s.ss();
        dof += s.count.saturating_sub(1) as f64;
    }
    if dof > 0.0 && (ss / dof).is_finite() {
        ss / dof
    } else {
        0.05f64.powi(2)
    }
}

/// One point jobs measured a gain at, as compiled.
#[derive(Clone, Debug, Serialize)]
pub struct TracedPoint {
    pub collective: &'static str,
    pub nodes: u32,
    pub ranks: u32,
    pub bytes: u64,
    /// Whether the sweep measured this point too (the traces decide it now).
    pub replaced_sweep: bool,
    /// What the table that ran in the jobs did here.
    #[serde(skip)]
    pub deployed: Deployed,
    pub deployed_name: String,
    /// NCCL's own choice here (what it ran most often).
    pub nccl_choice: Option<String>,
    /// Per setting that met the rule: its gain over NCCL's choice and the
    /// counts behind it.
    pub settings: Vec<TracedGain>,
    /// NCCL version the measurements come from.
    pub nccl_version: u32,
    #[serde(skip)]
    pub key: PointKey,
}

/// A setting's gain at a traced point.
#[derive(Clone, Debug, Serialize)]
pub struct TracedGain {
    pub config: String,
    /// t(NCCL's choice) / t(setting), from the same jobs.
    pub gain: f64,
    /// Calls of the setting.
    pub count: u64,
    #[serde(flatten)]
    pub evidence: Evidence,
    pub verdict: Verdict,
}

impl TracedGain {
    /// `tree/ll +12.0 % +-2.1 %, 10 vs 490 calls, 1 communicator (paired)`.
    pub fn describe(&self) -> String {
        format!(
            "{} {:+.1} %{}",
            self.config,
            (self.gain - 1.0) * 100.0,
            counts(&self.evidence)
        )
    }
}

/// ` +-2.1 %, 10 vs 490 calls, 3 vs 5 communicators (1 paired)`: the
/// counts behind a traced comparison.
pub fn counts(e: &Evidence) -> String {
    let sd = if e.sd.is_finite() {
        format!(" +-{:.1} %", e.sd * 100.0)
    } else {
        String::new()
    };
    let comms = if e.paired == e.comms && e.paired == e.nccl_comms {
        format!(
            "{} communicator{} running both",
            e.paired,
            if e.paired == 1 { "" } else { "s" }
        )
    } else {
        format!(
            "{} vs {} communicators ({} running both)",
            e.comms, e.nccl_comms, e.paired
        )
    };
    format!("{sd}, {} vs {} calls, {comms}", e.calls, e.nccl_calls)
}

/// A setting jobs measured at a point whose evidence did not meet the rule
/// (it decides nothing), or where the sweep and the jobs disagree.
#[derive(Clone, Debug, Serialize)]
pub struct Finding {
    pub collective: &'static str,
    pub nodes: u32,
    pub ranks: u32,
    pub bytes: u64,
    pub config: String,
    /// The jobs' gain (t(NCCL's choice) / t(setting)) and counts.
    pub gain: f64,
    #[serde(flatten)]
    pub evidence: Evidence,
    pub verdict: Verdict,
    /// The sweep's gain at the point and its runs, where it measured it.
    pub sweep_gain: Option<f64>,
    pub sweep_runs: Option<u32>,
    /// Who decides the point: `jobs` or `sweep` (or `nccl` where neither
    /// measured enough).
    pub decides: &'static str,
}

impl Finding {
    /// One line for the report.
    pub fn describe(&self) -> String {
        let sweep = match (self.sweep_gain, self.sweep_runs) {
            (Some(g), Some(n)) => format!(
                "; the sweep measured {:+.1} % ({n} run{})",
                (g - 1.0) * 100.0,
                if n == 1 { "" } else { "s" }
            ),
            _ => String::new(),
        };
        format!(
            "{} {} nodes x {} ranks {} {}: jobs {:+.1} %{} ({}){sweep}: the {} decide{}",
            self.collective,
            self.nodes,
            self.ranks,
            crate::units::fmt_bytes(self.bytes),
            self.config,
            (self.gain - 1.0) * 100.0,
            counts(&self.evidence),
            match self.verdict {
                Verdict::TooLittle => "too few calls or communicators",
                Verdict::Unclear => "within the noise",
                Verdict::Wins => "wins",
                Verdict::Short => "short of the margin",
                Verdict::Loses => "loses",
            },
            self.decides,
            if self.decides == "jobs" { "" } else { "s" }
        )
    }
}

/// What reading the traces found, before any decision (the report's
/// figures of the traces themselves).
#[derive(Clone, Debug, Default, Serialize)]
pub struct TraceCounts {
    pub files: usize,
    pub communicators: usize,
    /// Communicators recorded by more than one rank: counted once.
    pub duplicate_ranks: usize,
    pub collectives: u64,
    /// Collectives no tuner answer could be linked to (not used).
    pub unknown: u64,
    /// Points where only one side ran in every communicator and too few
    /// communicators ran to pair across them: nothing to compare.
    pub one_sided_shapes: usize,
    /// Points set aside because a newer NCCL measured them (the sweep's or
    /// other traces').
    pub older_nccl_points: usize,
    /// Drift between NCCL versions, described.
    pub drift: Vec<String>,
    /// Points of communicators whose ranks are not a multiple of their
    /// nodes (not used: a table decides per ranks per node), per shape:
    /// how many points, and a file that holds one.
    pub uneven: BTreeMap<String, (usize, String)>,
    /// Where the traces came from, against the sweep's platform.
    pub provenance: Provenance,
    /// Settings measured whose evidence fell short of the rule (too few
    /// calls or communicators, or within the noise): they decide nothing.
    pub short_of_evidence: Vec<Finding>,
    /// Points the sweep measured where the jobs' gain and the sweep's
    /// disagree (one past the margin, the other not), whoever decides.
    pub disagree_with_sweep: Vec<Finding>,
}

/// What the traces held and the points they measured.
#[derive(Clone, Debug, Default, Serialize)]
pub struct TraceNotes {
    #[serde(flatten)]
    pub read: TraceCounts,
    pub points: Vec<TracedPoint>,
}

/// The cells traces contribute, and what the report says of them; `bar` is
/// compile's (`--margin`, `--noise-z`).
pub fn cells(files: &[TraceFile], sweep: &SweepView, bar: Bar) -> (Vec<Cell>, TraceNotes) {
    let mut notes = TraceNotes::default();
    notes.read.files = files.len();
    let readings = Readings::new(files, &mut notes.read);
    // Per point, per communicator (file, index): sizes in one bucket are
    // one point, so one communicator's shapes there pool.
    let mut by_point: BTreeMap<PointKey, BTreeMap<(usize, u16), AtShape>> = BTreeMap::new();
    for fi in 0..files.len() {
        for ((ci, s), at) in readings.classify(fi) {
            let others = at
                .others
                .values()
                .fold(0u64, |n, o| n.saturating_add(o.side.count));
            let all = at.nccl.count.saturating_add(others);
            notes.read.collectives = notes
                .read
                .collectives
                .saturating_add(all.saturating_add(at.unknown));
            notes.read.unknown = notes.read.unknown.saturating_add(at.unknown);
            if all == 0 {
                continue;
            }
            let key = PointKey {
                coll: s.coll,
                nodes: s.nodes,
                ranks: s.ranks,
                n_bytes: sweep.snap(s.coll, s.n_bytes),
            };
            by_point
                .entry(key)
                .or_default()
                .entry((fi, ci))
                .or_default()
                .merge(&at);
        }
    }
    let mut out = Vec::new();
    // Points both measured, per (traces' NCCL, sweep's NCCL) that differ.
    let mut versus_sweep: BTreeMap<(u32, u32), usize> = BTreeMap::new();
    for (key, parts) in by_point {
        let mut parts: Vec<Part> = parts
            .into_iter()
            .map(|((file, _), at)| Part { file, at })
            .collect();
        // Drift: the newest NCCL that measured the point decides it.
        let newest = parts
            .iter()
            .map(|p| files[p.file].nccl_version)
            .max()
            .unwrap_or(0);
        let choices = |v: u32, parts: &[Part]| -> BTreeSet<Setting> {
            parts
                .iter()
                .filter(|p| files[p.file].nccl_version == v)
                .filter_map(|p| p.at.nccl_choice())
                .collect()
        };
        let older: BTreeSet<u32> = parts
            .iter()
            .map(|p| files[p.file].nccl_version)
            .filter(|&v| v != newest)
            .collect();
        for &v in &older {
            let (was, now) = (choices(v, &parts), choices(newest, &parts));
            if was != now && !was.is_empty() && !now.is_empty() {
                notes.read.drift.push(format!(
                    "{} at {} nodes x {} ranks, {}: NCCL {} chose {}, NCCL {} chooses {}; \
                     the newer decides",
                    key.coll.name(),
                    key.nodes,
                    key.ranks,
                    crate::units::fmt_bytes(key.n_bytes),
                    version(v),
                    names(&was),
                    version(newest),
                    names(&now)
                ));
            }
        }
        // Only points with something to compare count as set aside.
        let comparable = |parts: &[Part]| {
            parts.iter().any(|p| p.at.nccl.count > 0)
                && parts.iter().any(|p| !p.at.others.is_empty())
        };
        if !older.is_empty() {
            if comparable(&parts) {
                notes.read.older_nccl_points += 1;
            }
            parts.retain(|p| files[p.file].nccl_version == newest);
        }
        let replaced = sweep.points.contains(&key);
        if replaced && sweep.nccl_version != 0 && newest != 0 && sweep.nccl_version != newest {
            *versus_sweep
                .entry((newest, sweep.nccl_version))
                .or_default() += 1;
            if sweep.nccl_version > newest {
                // Once per point (older traces may have counted it).
                if older.is_empty() && comparable(&parts) {
                    notes.read.older_nccl_points += 1;
                }
                continue;
            }
        }
        let ppn = key.ranks / key.nodes.max(1);
        if key.nodes == 0 || key.ranks % key.nodes != 0 {
            // The table decides per ranks per node: a communicator whose
            // ranks do not divide evenly over its nodes has no place in
            // it. Named, not dropped in silence.
            let e = notes
                .read
                .uneven
                .entry(format!("{} nodes x {} ranks", key.nodes, key.ranks))
                .or_insert_with(|| (0, files[parts[0].file].path.display().to_string()));
            e.0 += 1;
            continue;
        }
        out.extend(nccl_ran(files, &parts, key, ppn, sweep));
        let bar = if replaced { bar.swept() } else { bar };
        if let Some((cells, point)) = point_cells(
            files,
            &parts,
            key,
            ppn,
            replaced,
            newest,
            sweep,
            bar,
            &mut notes.read,
        ) {
            out.extend(cells);
            notes.points.push(point);
        }
    }
    for ((traced, swept), n) in versus_sweep {
        notes.read.drift.push(format!(
            "{n} point(s) measured by the sweep with NCCL {} and by jobs with NCCL {}: the {} \
             measurements decide them",
            version(swept),
            version(traced),
            if traced > swept { "jobs'" } else { "sweep's" }
        ));
    }
    (out, notes)
}

/// How a set of trace files is read, as compile and `eval --traces` both
/// read it: each communicator once (the lowest rank's recording), and who
/// ran what from the facts of every recording of the same NCCL.
pub struct Readings<'a> {
    files: &'a [TraceFile],
    owner: BTreeMap<u64, (u32, usize, usize)>,
    facts: BTreeMap<u32, Facts>,
}

impl<'a> Readings<'a> {
    /// Reads `files`, counting their communicators into `read`.
    pub fn new(files: &'a [TraceFile], read: &mut TraceCounts) -> Readings<'a> {
        let mut r = Readings {
            files,
            owner: owners(files, read),
            facts: BTreeMap::new(),
        };
        let mut facts: BTreeMap<u32, Facts> = BTreeMap::new();
        for (fi, f) in files.iter().enumerate() {
            add_facts(facts.entry(f.nccl_version).or_default(), f, &|ci| {
                r.keeps(fi, ci)
            });
        }
        r.facts = facts;
        r
    }

    /// Whether communicator `ci` of file `fi` is the recording used.
    pub fn keeps(&self, fi: usize, ci: usize) -> bool {
        self.files[fi]
            .comms
            .get(ci)
            .and_then(|c| self.owner.get(&c.comm_id))
            .is_some_and(|&(_, of, oc)| of == fi && oc == ci)
    }

    /// [`classify_comms`] of file `fi`.
    pub fn classify(&self, fi: usize) -> BTreeMap<(u16, Shape), AtShape> {
        let f = &self.files[fi];
        let none = Facts::new();
        let facts = self.facts.get(&f.nccl_version).unwrap_or(&none);
        classify_comms(f, &|ci| self.keeps(fi, ci), facts)
    }
}

/// One recording per communicator: the lowest rank's, as (rank, file,
/// communicator index) per communicator id; counts the communicators.
fn owners(files: &[TraceFile], read: &mut TraceCounts) -> BTreeMap<u64, (u32, usize, usize)> {
    let mut owner: BTreeMap<u64, (u32, usize, usize)> = BTreeMap::new();
    for (fi, f) in files.iter().enumerate() {
        for (ci, c) in f.comms.iter().enumerate() {
            read.communicators += 1;
            match owner.get(&c.comm_id) {
                Some(&(rank, _, _)) if rank <= c.rank => read.duplicate_ranks += 1,
                Some(_) => {
                    read.duplicate_ranks += 1;
                    owner.insert(c.comm_id, (c.rank, fi, ci));
                }
                None => {
                    owner.insert(c.comm_id, (c.rank, fi, ci));
                }
            }
        }
    }
    read.communicators -= read.duplicate_ranks;
    owner
}

/// One communicator's measurements at one shape inside a point.
struct Part {
    file: usize,
    at: AtShape,
}

/// At a count the sweep never measured, the mark of the configuration NCCL
/// ran on its own at `key` (one setting in every communicator that let it
/// choose, standing for a configuration the sweep measured): forcing it
/// there runs what NCCL runs anyway, so the plan does not list it. Jobs
/// that only let NCCL choose measure no gain, but they do say this.
fn nccl_ran(
    files: &[TraceFile],
    parts: &[Part],
    key: PointKey,
    ppn: u32,
    sweep: &SweepView,
) -> Option<Cell> {
    // An NCCL older than the sweep's may choose otherwise than the one the
    // table is for (`parts` hold the newest NCCL that traced the point).
    let version = files[parts.first()?.file].nccl_version;
    if sweep.measured_count(key) || (version != 0 && sweep.nccl_version > version) {
        return None;
    }
    let mut ran = parts
        .iter()
        .flat_map(|p| p.at.nccl_settings.iter())
        .filter(|(_, n)| **n > 0);
    let (&first, &n) = ran.next()?;
    let mut calls = n;
    for (&s, &n) in ran {
        if s != first {
            return None;
        }
        calls = calls.saturating_add(n);
    }
    if calls < rule::MIN_CALLS {
        return None;
    }
    let config = sweep.config_of(key.coll, ppn, first);
    let known = sweep
        .configs
        .get(&(key.coll, ppn))
        .is_some_and(|c| c.contains(&config));
    (known && !config.is_default()).then(|| Cell {
        key: key.cell_key(config),
        time_us: 0.0,
        n: 0,
        spread: 0.0,
        source: Source {
            file: files[parts[0].file].path.clone(),
            line: 0,
        },
        base: TimeBase::NcclRan,
    })
}

/// Judges a point's settings against NCCL's choice ([`evidence`],
/// [`judge`]) and turns those whose evidence decides into cells: NCCL's
/// choice at its geometric mean GPU time over communicators, each setting
/// at that time over its gain. The cells carry the evidence's sd so that
/// the decision reads exactly it: the point's noise figure is the largest
/// sd, NCCL's choice counts as exact, and each setting's count is what
/// brings the noise down to its own sd.
#[allow(clippy::too_many_arguments)]
fn point_cells(
    files: &[TraceFile],
    parts: &[Part],
    key: PointKey,
    ppn: u32,
    replaced: bool,
    version: u32,
    sweep: &SweepView,
    bar: Bar,
    read: &mut TraceCounts,
) -> Option<(Vec<Cell>, TracedPoint)> {
    let var1 =
        var_call(parts.iter().flat_map(|p| {
            std::iter::once(&p.at.nccl).chain(p.at.others.values().map(|o| &o.side))
        }));
    let mut nccl_settings: BTreeMap<Setting, u64> = BTreeMap::new();
    // Per configuration and communicator: the setting's side, and whether
    // the deployed table forced it.
    let mut per_cfg: BTreeMap<Config, (Vec<Side>, u64)> = BTreeMap::new();
    for (i, p) in parts.iter().enumerate() {
        for (s, n) in &p.at.nccl_settings {
            let e = nccl_settings.entry(*s).or_default();
            *e = e.saturating_add(*n);
        }
        for (s, o) in &p.at.others {
            let cfg = sweep.config_of(key.coll, ppn, *s);
            let e = per_cfg
                .entry(cfg)
                .or_insert_with(|| (vec![Side::default(); parts.len()], 0));
            e.0[i].merge(&o.side);
            e.1 = e.1.saturating_add(o.by_table);
        }
    }
    let nccl_comms: Vec<&Side> = parts.iter().map(|p| &p.at.nccl).collect();
    let with_nccl: Vec<f64> = nccl_comms
        .iter()
        .filter(|s| s.count > 0)
        .map(|s| s.mean_ln())
        .collect();
    if with_nccl.is_empty() || per_cfg.is_empty() {
        read.one_sided_shapes += 1;
        return None;
    }
    // NCCL's choice: the geometric mean over communicators (ns).
    let nccl_ln = with_nccl.iter().sum::<f64>() / with_nccl.len() as f64;
    // A file may hold any finite sums: a point whose figures are not times
    // (infinite, zero, NaN) is no measurement.
    let t_ok = |ln_ns: f64| ln_ns.is_finite() && ln_ns.exp().is_normal();
    if !t_ok(nccl_ln) {
        return None;
    }
    let sweep_ln = |cfg: &Config| sweep.times.get(&(key, *cfg)).copied();
    let sweep_default = sweep_ln(&Config::DEFAULT);
    // Per admitted setting: whether the sweep measured it worth forcing.
    let mut admitted: Vec<(Config, Evidence, bool)> = Vec::new();
    let mut disagreements = Vec::new();
    let mut any_comparable = false;
    for (cfg, (sides, _)) in &per_cfg {
        let pairs: Vec<(Side, Side)> = nccl_comms
            .iter()
            .zip(sides)
            .map(|(n, s)| (**n, *s))
            .filter(|(n, s)| n.count > 0 || s.count > 0)
            .collect();
        let Some(e) = evidence(&pairs, var1) else {
            continue;
        };
        let comparable = e.paired > 0 || e.nccl_comms + e.comms >= rule::MIN_COMMS_ACROSS;
        any_comparable |= comparable;
        let verdict = if t_ok(nccl_ln - e.ln_gain) || !e.ln_gain.is_finite() {
            judge(&e, bar)
        } else {
            Verdict::TooLittle
        };
        let sweep_gain = match (sweep_default, sweep_ln(cfg)) {
            (Some((d, _)), Some((m, n))) => Some((d - m, n)),
            _ => None,
        };
        // The sweep and the jobs disagree where one says the setting is
        // worth forcing and the other not.
        let disagree = sweep_gain.is_some_and(|(g, _)| {
            e.ln_gain.is_finite() && (g > bar.ln_margin) != (e.ln_gain > bar.ln_margin)
        });
        let decides = verdict.decides() && e.sd.max(rule::SD_FLOOR) <= crate::fit::MAX_SIGMA;
        let finding = || Finding {
            collective: key.coll.name(),
            nodes: key.nodes,
            ranks: key.ranks,
            bytes: key.n_bytes,
            config: cfg.to_string(),
            gain: e.ln_gain.exp(),
            evidence: e,
            verdict,
            sweep_gain: sweep_gain.map(|(g, _)| g.exp()),
            sweep_runs: sweep_gain.map(|(_, n)| n),
            decides: if decides {
                "jobs"
            } else if replaced {
                "sweep"
            } else {
                "table"
            },
        };
        if disagree {
            disagreements.push(finding());
        }
        if decides {
            let sweep_forces = sweep_gain.is_some_and(|(g, _)| g > bar.ln_margin);
            admitted.push((*cfg, e, sweep_forces));
        } else if comparable {
            read.short_of_evidence.push(finding());
        }
    }
    if !any_comparable {
        read.one_sided_shapes += 1;
    }
    // What the deployed table did here: the setting it forced on most
    // calls, if any.
    let deployed = per_cfg
        .iter()
        .filter(|(_, (_, by_table))| *by_table > 0)
        .max_by_key(|(_, (_, by_table))| *by_table)
        .map_or(Deployed::Nccl, |(cfg, _)| Deployed::Forced(*cfg));
    // The jobs decide the point (in place of the sweep or a reading of
    // it) only where their evidence speaks to the decision: a setting that
    // wins, the deployed table's forced setting (confirmed or not), or one
    // the sweep measured worth forcing here. Evidence against settings
    // nobody would force changes nothing, and must not take the point from
    // what the sweep says of the others.
    //
    // At a node count the sweep never measured, every admitted comparison
    // speaks: the decision there sets what the jobs measured against the
    // sweep's reading of the settings they did not (`crate::decide`), so
    // a setting measured losing no longer stands on a reading, and one
    // nobody tried keeps its reading.
    let speaks = (!sweep.measured_count(key) && !admitted.is_empty())
        || admitted.iter().any(|(cfg, e, sweep_forces)| {
            judge(e, bar) == Verdict::Wins || deployed == Deployed::Forced(*cfg) || *sweep_forces
        });
    for mut f in disagreements {
        if f.decides == "jobs" && !speaks {
            f.decides = if replaced { "sweep" } else { "table" };
        }
        read.disagree_with_sweep.push(f);
    }
    if !speaks {
        return None;
    }
    let first = &files[parts[0].file].path;
    let source = Source {
        file: first.clone(),
        line: 0,
    };
    let sd_point = admitted
        .iter()
        .map(|a| a.1.sd.max(rule::SD_FLOOR))
        .fold(0.0f64, f64::max)
        .clamp(crate::fit::MIN_SIGMA, crate::fit::MAX_SIGMA);
    let base = TimeBase::Trace { sd_ln: sd_point };
    // NCCL's choice counts as exact: the setting's count carries the sd.
    const EXACT: u32 = 1 << 24;
    // ns -> us.
    let t_nccl = nccl_ln.exp() / 1e3;
    let mut cells = vec![Cell {
        key: key.cell_key(Config::DEFAULT),
        time_us: t_nccl,
        n: EXACT,
        spread: 0.0,
        source: source.clone(),
        base,
    }];
    let mut settings = Vec::new();
    for (cfg, e, _) in &admitted {
        let sd = e.sd.max(rule::SD_FLOOR);
        // sd_point^2 / n >= sd^2: the decision's noise is never below it.
        let n = ((sd_point / sd).powi(2).floor() as u32).clamp(1, EXACT);
        cells.push(Cell {
            key: key.cell_key(*cfg),
            time_us: t_nccl / e.ln_gain.exp(),
            n,
            spread: 0.0,
            source: source.clone(),
            base,
        });
        settings.push(TracedGain {
            config: cfg.to_string(),
            gain: e.ln_gain.exp(),
            count: e.calls,
            evidence: *e,
            verdict: judge(e, bar),
        });
    }
    let nccl_choice = nccl_settings
        .iter()
        .max_by_key(|(s, n)| (**n, std::cmp::Reverse(**s)))
        .map(|(s, _)| s.name());
    let point = TracedPoint {
        collective: key.coll.name(),
        nodes: key.nodes,
        ranks: key.ranks,
        bytes: key.n_bytes,
        replaced_sweep: replaced,
        deployed,
        deployed_name: match deployed {
            Deployed::Nccl => "default".into(),
            Deployed::Forced(c) => c.to_string(),
        },
        nccl_choice,
        settings,
        nccl_version: version,
        key,
    };
    Some((cells, point))
}

fn version(code: u32) -> String {
    if code == 0 {
        "(version unknown)".into()
    } else {
        format!("{}.{}.{}", code / 10000, code % 10000 / 100, code % 100)
    }
}

fn names(s: &BTreeSet<Setting>) -> String {
    s.iter().map(Setting::name).collect::<Vec<_>>().join(" or ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(
        comm: u16,
        bytes: u64,
        ran: (Algo, Proto),
        source: Who,
        count: u64,
        ns: f64,
    ) -> TraceRecord {
        let ln = ns.ln();
        TraceRecord {
            comm,
            coll: Coll::AllReduce,
            n_bytes: bytes,
            algo: ran.0,
            proto: ran.1,
            channels: 4,
            source,
            count,
            sum_ln: count as f64 * ln,
            sum_ln2: count as f64 * ln * ln + (count as f64 - 1.0) * 0.02f64.powi(2),
            min_ns: ns as u64,
            max_ns: ns as u64,
        }
    }

    fn file(records: Vec<TraceRecord>) -> TraceFile {
        TraceFile {
            path: Arc::new("a.trace".into()),
            nccl_version: 23007,
            table_digest: None,
            platform: String::new(),
            gpu: String::new(),
            sweep: None,
            shapes: Vec::new(),
            comms: vec![Comm {
                comm_id: 1,
                n_nodes: 4,
                n_ranks: 32,
                rank: 0,
            }],
            records,
        }
    }

    const RING: (Algo, Proto) = (Algo::Ring, Proto::Simple);
    const TREE: (Algo, Proto) = (Algo::Tree, Proto::LL);

    #[test]
    fn an_exploring_call_where_the_table_forced_another_setting_is_nccls_choice() {
        // The table forced Tree/LL; exploration left the choice to NCCL,
        // which ran Ring/Simple.
        let f = file(vec![
            rec(0, 4096, TREE, Who::Table, 90, 1000.0),
            rec(0, 4096, RING, Who::ExploreNccl, 10, 900.0),
        ]);
        let m = classify(&f, &|_| true);
        let at = m.values().next().unwrap();
        assert_eq!(at.nccl.count, 10);
        assert_eq!(at.nccl_choice().map(|s| s.algo), Some(Algo::Ring));
        assert_eq!(at.others.len(), 1);
        assert_eq!(at.others.values().next().unwrap().by_table, 90);
    }

    /// A table's plan may try a setting where the table forces another:
    /// such an exploring call ran that setting, not NCCL's choice. It was
    /// taken for NCCL's choice (the only probe at a forced cell before the
    /// plan), so a job that tried Ring/Simple/4 over a forced Tree/LL made
    /// the compiler compare Tree/LL against it as if against NCCL.
    #[test]
    fn a_planned_setting_explored_where_the_table_forced_another_is_not_nccls_choice() {
        let f = file(vec![
            rec(0, 4096, TREE, Who::Table, 90, 1000.0),
            rec(0, 4096, RING, Who::Explore, 10, 900.0),
        ]);
        let at = classify(&f, &|_| true).into_values().next().unwrap();
        assert_eq!(at.nccl.count, 0, "{:?}", at.nccl_settings);
        assert_eq!(at.others.len(), 2);
        assert_eq!(at.unknown, 0);
    }

    #[test]
    fn a_forced_setting_nccl_runs_on_its_own_is_nccls_choice() {
        // The table left the call to NCCL (Ring/Simple); exploration forced
        // Tree/LL, and another call's forced Ring/Simple is what NCCL ran.
        let f = file(vec![
            rec(0, 4096, RING, Who::Nccl, 80, 1000.0),
            rec(0, 4096, RING, Who::Explore, 5, 1000.0),
            rec(0, 4096, TREE, Who::Explore, 5, 800.0),
        ]);
        let at = classify(&f, &|_| true).into_values().next().unwrap();
        assert_eq!(at.nccl.count, 85);
        assert_eq!(at.others.len(), 1);
        assert_eq!(at.others.keys().next().unwrap().algo, Algo::Tree);
    }

    #[test]
    fn a_gain_is_read_within_each_file_and_pooled() {
        // Two jobs at one point on different time scales (10x apart): Tree
        // wins by 25 % in each; a comparison across files would say 8x.
        let mut a = file(vec![
            rec(0, 4096, RING, Who::Nccl, 100, 1000.0),
            rec(0, 4096, TREE, Who::Explore, 100, 800.0),
        ]);
        let b = TraceFile {
            comms: vec![Comm {
                comm_id: 2,
                ..a.comms[0]
            }],
            records: vec![
                rec(0, 4096, RING, Who::Nccl, 100, 10000.0),
                rec(0, 4096, TREE, Who::Explore, 100, 8000.0),
            ],
            ..a.clone()
        };
        a.path = Arc::new("b.trace".into());
        let (cells, notes) = cells(&[a, b], &SweepView::default(), Bar::new(0.03, 0.5));
        assert_eq!(notes.points.len(), 1);
        assert!((notes.points[0].settings[0].gain - 1.25).abs() < 1e-9);
        let t = |cfg: &Config| cells.iter().find(|c| c.key.config == *cfg).unwrap().time_us;
        let tree = Config {
            algo: Some(Algo::Tree),
            proto: Some(Proto::LL),
            channels: Some(4),
        };
        assert!((t(&Config::DEFAULT) / t(&tree) - 1.25).abs() < 1e-9);
        assert!(cells
            .iter()
            .all(|c| matches!(c.base, TimeBase::Trace { .. })));
    }

    #[test]
    fn a_size_joins_the_sweeps_size_in_its_bucket_and_a_setting_the_sweeps_config() {
        let mut v = SweepView::default();
        v.sizes.entry(Coll::AllReduce).or_default().insert(4096);
        let auto = Config {
            algo: Some(Algo::Tree),
            proto: Some(Proto::LL),
            channels: None,
        };
        v.configs
            .entry((Coll::AllReduce, 8))
            .or_default()
            .insert(auto);
        // 4096..5119 is one bucket; 6000 is the next.
        assert_eq!(v.snap(Coll::AllReduce, 5000), 4096);
        assert_eq!(
            v.snap(Coll::AllReduce, 6000),
            bucket_lower_bound(size_bucket(6000))
        );
        let ran = Setting {
            algo: Algo::Tree,
            proto: Proto::LL,
            channels: 12,
        };
        assert_eq!(v.config_of(Coll::AllReduce, 8, ran), auto);
        assert_eq!(
            v.config_of(Coll::AllReduce, 4, ran).channels,
            Some(12),
            "no sweep config at 4 ranks per node: the channels that ran"
        );
    }

    /// Jobs that let NCCL choose at a count the sweep skipped measure no
    /// gain, but say what NCCL runs there: a mark the plan reads (forcing
    /// it would run the same). Only one setting in every communicator, one
    /// the sweep measured, over enough calls, by an NCCL no older than the
    /// sweep's, and never at a count the sweep measured.
    #[test]
    fn what_nccl_ran_alone_at_a_skipped_count_is_marked_and_nothing_else() {
        let auto = |(algo, proto): (Algo, Proto)| Config {
            algo: Some(algo),
            proto: Some(proto),
            channels: None,
        };
        let mut v = SweepView::default();
        for b in [4096u64, 8192, 16384] {
            v.sizes.entry(Coll::AllReduce).or_default().insert(b);
            v.points.insert(PointKey {
                coll: Coll::AllReduce,
                nodes: 2,
                ranks: 16,
                n_bytes: b,
            });
        }
        v.configs.entry((Coll::AllReduce, 8)).or_default().extend([
            Config::DEFAULT,
            auto(RING),
            auto(TREE),
        ]);
        let mut f = file(vec![
            // 4096 at 4 nodes: NCCL ran Ring/Simple in both communicators.
            rec(0, 4096, RING, Who::Nccl, 100, 1000.0),
            rec(1, 4096, RING, Who::Nccl, 100, 1000.0),
            // 8192 at 4 nodes: the two communicators' NCCL ran differently.
            rec(0, 8192, RING, Who::Nccl, 100, 1000.0),
            rec(1, 8192, TREE, Who::Nccl, 100, 1000.0),
            // 4096 at 2 nodes, a count the sweep measured.
            rec(2, 4096, RING, Who::Nccl, 100, 1000.0),
            // 16384 at 4 nodes: fewer calls than any evidence needs.
            rec(0, 16384, RING, Who::Nccl, rule::MIN_CALLS - 1, 1000.0),
        ]);
        let comm = f.comms[0];
        f.comms = vec![
            comm,
            Comm { comm_id: 2, ..comm },
            Comm {
                comm_id: 3,
                n_nodes: 2,
                n_ranks: 16,
                ..comm
            },
        ];
        let (cells, notes) = cells(std::slice::from_ref(&f), &v, Bar::new(0.03, 0.5));
        assert!(notes.points.is_empty(), "nothing compared: no point");
        let marks: Vec<_> = cells
            .iter()
            .map(|c| (c.key.nnodes, c.key.nbytes, c.key.config, c.base))
            .collect();
        assert_eq!(marks, vec![(4, 4096, auto(RING), TimeBase::NcclRan)]);
        // Traces of an NCCL older than the sweep's say nothing of what the
        // table's NCCL runs.
        v.nccl_version = f.nccl_version + 1;
        let (older, _) = super::cells(&[f], &v, Bar::new(0.03, 0.5));
        assert!(older.is_empty(), "{older:?}");
    }

    #[test]
    fn a_trace_claiming_absurd_counts_and_sums_is_no_measurement_and_no_panic() {
        let mut big = rec(0, 4096, RING, Who::Nccl, u64::MAX, 1000.0);
        big.sum_ln = 1e300;
        let f = file(vec![
            big,
            rec(0, 4096, RING, Who::Nccl, u64::MAX, 1000.0),
            rec(0, 4096, TREE, Who::Explore, u64::MAX, 800.0),
            rec(0, 8192, RING, Who::Nccl, u64::MAX, 1000.0),
            rec(0, 8192, TREE, Who::Explore, 10, 800.0),
        ]);
        let (cells, notes) = cells(&[f], &SweepView::default(), Bar::new(0.03, 0.5));
        assert_eq!(notes.read.collectives, u64::MAX);
        // 4096: an infinite mean is no time; 8192: a plain comparison.
        assert_eq!(notes.points.len(), 1);
        assert_eq!(notes.points[0].bytes, 8192);
        assert!(cells
            .iter()
            .all(|c| c.time_us.is_finite() && c.time_us > 0.0));
    }

    #[test]
    fn a_neighbours_setting_explored_where_other_calls_were_forced_is_not_nccls_choice() {
        // One shape, two call states (e.g. registered buffers and not): the
        // table forced Tree/LL on some calls, left the others to NCCL
        // (Ring/Simple), and exploration ran a neighbour's Ring/LL on those.
        const RING_LL: (Algo, Proto) = (Algo::Ring, Proto::LL);
        let f = file(vec![
            rec(0, 4096, TREE, Who::Table, 100, 1000.0),
            rec(0, 4096, RING, Who::Nccl, 390, 1000.0),
            rec(0, 4096, RING_LL, Who::Explore, 10, 700.0),
        ]);
        let at = classify(&f, &|_| true).into_values().next().unwrap();
        assert_eq!(at.nccl_choice().map(|s| s.proto), Some(Proto::Simple));
        assert!(
            !at.nccl_settings.keys().any(|s| s.proto == Proto::LL),
            "Ring/LL ran as NCCL's choice: {:?}",
            at.nccl_settings
        );
        assert_eq!(at.nccl.count, 390);
        // An exploring call that forced a setting is that setting.
        assert_eq!(at.unknown, 0);
        assert!(at
            .others
            .keys()
            .any(|s| s.proto == Proto::LL && s.algo == Algo::Ring));
    }

    fn side(count: u64, ln: f64, sd: f64) -> Side {
        Side {
            count,
            sum_ln: count as f64 * ln,
            sum_ln2: count as f64 * ln * ln + (count as f64 - 1.0) * sd * sd,
        }
    }

    #[test]
    fn the_noise_floor_is_never_divided_away() {
        // A million calls a side, no spread, one communicator.
        let big = [(side(1_000_000, 7.0, 0.0), side(1_000_000, 6.9, 0.0))];
        let e = evidence(&big, var_call(big.iter().flat_map(|p| [&p.0, &p.1]))).unwrap();
        assert!(e.sd >= rule::GAIN_SD_FLOOR * 0.999, "{e:?}");
        // A hundred communicators each side, across: never below SD_FLOOR.
        let mut many = vec![(side(100, 7.0, 0.0), Side::default()); 100];
        many.extend(vec![(Side::default(), side(100, 6.99, 0.0)); 100]);
        let e = evidence(&many, 0.0).unwrap();
        assert!(e.sd >= rule::SD_FLOOR, "{e:?}");
        assert_eq!((e.nccl_comms, e.comms, e.paired), (100, 100, 0));
        assert_eq!(judge(&e, Bar::new(0.03, 0.5)), Verdict::Short);
    }

    #[test]
    fn pairing_across_communicators_needs_enough_of_them() {
        let two = [
            (side(500, 7.0, 0.02), Side::default()),
            (Side::default(), side(500, 6.0, 0.02)),
        ];
        let e = evidence(&two, 0.02f64.powi(2)).unwrap();
        assert_eq!(judge(&e, Bar::new(0.03, 0.5)), Verdict::TooLittle);
        let three = [two[0], two[0], two[1]];
        let e = evidence(&three, 0.02f64.powi(2)).unwrap();
        assert!((e.ln_gain - 1.0).abs() < 1e-9, "{e:?}");
        assert_eq!(judge(&e, Bar::new(0.03, 0.5)), Verdict::Wins);
    }
}
