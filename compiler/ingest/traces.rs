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

use anyhow::Context as _;
use dyncc_tables::trace::Source as Who;
use dyncc_tables::{
    bucket_lower_bound, bucket_upper_bound, size_bucket, Algo, Coll, Proto, Trace, TraceRecord,
};
use serde::Serialize;

use crate::record::{Cell, CellKey, Collective, Config, Source, State, TimeBase};

/// Whether `p` starts with the trace magic.
pub fn is_trace(p: &Path) -> bool {
    let mut magic = [0u8; 8];
    std::fs::File::open(p)
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut magic))
        .is_ok_and(|()| magic == dyncc_tables::TRACE_MAGIC)
}

/// Takes the trace files out of `paths`: a file named directly that starts
/// with the trace magic or is named `*.trace`, and the `*.trace` files
/// (damaged ones too, which [`read`] names) directly in a named
/// directory (which stays in `paths` only if it holds anything else but
/// traces and their temporaries). Sorted per directory.
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
        let Ok(rd) = std::fs::read_dir(p) else {
            return true;
        };
        let mut other = false;
        let mut here = Vec::new();
        for e in rd.flatten() {
            let q = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if q.is_file() && name.ends_with(".trace") {
                here.push(q);
            } else if !name.ends_with(".trace.tmp") {
                other = true;
            }
        }
        here.sort();
        let keep = other || here.is_empty();
        files.extend(here);
        keep
    });
    files
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
    pub comms: Vec<Comm>,
    pub records: Vec<TraceRecord>,
}

/// Reads trace files through the bounded reader. Errors name the file and
/// what to do.
pub fn read(files: &[PathBuf]) -> anyhow::Result<Vec<TraceFile>> {
    // A file named twice (directly and through its directory) is read once.
    let mut seen = BTreeSet::new();
    files
        .iter()
        .filter(|f| seen.insert(std::fs::canonicalize(f).unwrap_or_else(|_| f.to_path_buf())))
        .map(|f| {
            let bytes = crate::input::read(f, &crate::input::TRACE)?;
            let t = Trace::from_bytes(&bytes).map_err(|e| {
                anyhow::anyhow!(
                    "{}: not a valid dyncc trace file: {e}; leave it out (the plugin writes a \
                     trace whole, so this one was damaged or is not a trace)",
                    f.display()
                )
            })?;
            Ok(TraceFile {
                path: Arc::new(f.clone()),
                nccl_version: t.head().nccl_version,
                table_digest: t.head().table_digest,
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
            })
        })
        .collect::<anyhow::Result<Vec<_>>>()
        .context("reading trace files")
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
}

/// Splits one file's records (of the communicators `keep` admits) into
/// NCCL's own choice and other settings, per shape. A setting that ran
/// what NCCL runs there on its own is NCCL's choice whoever asked for it:
/// an exploring call that left the choice to NCCL, a forced setting NCCL
/// would have chosen anyway.
pub fn classify(file: &TraceFile, keep: &dyn Fn(usize) -> bool) -> BTreeMap<Shape, AtShape> {
    let mut out: BTreeMap<Shape, AtShape> = BTreeMap::new();
    let shape = |r: &TraceRecord| {
        let c = file.comms.get(r.comm as usize)?;
        keep(r.comm as usize).then_some(Shape {
            nodes: c.n_nodes,
            ranks: c.n_ranks,
            coll: r.coll,
            n_bytes: r.n_bytes,
        })
    };
    // NCCL's own choices first: they say what a forced record means.
    let mut left_to_nccl: BTreeSet<Shape> = BTreeSet::new();
    for r in &file.records {
        let Some(s) = shape(r) else { continue };
        let at = out.entry(s).or_default();
        match r.source {
            Who::Nccl => {
                left_to_nccl.insert(s);
                at.nccl.add(r);
                let e = at.nccl_settings.entry(Setting::of(r)).or_default();
                *e = e.saturating_add(r.count);
            }
            Who::Unknown => at.unknown = at.unknown.saturating_add(r.count),
            Who::Table | Who::Explore => {}
        }
    }
    // The settings the table forced, per shape.
    let mut forced: BTreeMap<Shape, BTreeSet<Setting>> = BTreeMap::new();
    for r in file.records.iter().filter(|r| r.source == Who::Table) {
        if let Some(s) = shape(r) {
            forced.entry(s).or_default().insert(Setting::of(r));
        }
    }
    for r in &file.records {
        let Some(s) = shape(r) else { continue };
        if !matches!(r.source, Who::Table | Who::Explore) {
            continue;
        }
        let at = out.entry(s).or_default();
        let table_ran = forced
            .get(&s)
            .is_some_and(|f| f.iter().any(|&x| x != Setting::of(r)));
        // An exploring call at a shape where the table forced another
        // setting ran NCCL's own choice (the only probe there), unless
        // the table also left calls there to NCCL (another call state):
        // those calls may have explored a neighbour's setting, and the
        // record cannot tell which, so it is not used.
        let inferred = r.source == Who::Explore && table_ran;
        if inferred && left_to_nccl.contains(&s) && !at.nccl_settings.contains_key(&Setting::of(r))
        {
            at.unknown += r.count;
            continue;
        }
        let is_nccl = at.nccl_settings.contains_key(&Setting::of(r)) || inferred;
        if is_nccl {
            at.nccl.add(r);
            let e = at.nccl_settings.entry(Setting::of(r)).or_default();
            *e = e.saturating_add(r.count);
        } else {
            let o = at.others.entry(Setting::of(r)).or_default();
            o.side.add(r);
            if r.source == Who::Table {
                o.by_table = o.by_table.saturating_add(r.count);
            }
        }
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
            v.points.insert(PointKey {
                coll,
                nodes: k.nnodes,
                ranks: k.nranks,
                n_bytes: k.nbytes,
            });
        }
        v
    }

    /// The size a trace's `n_bytes` stands at: the sweep's size in the
    /// same table bucket when it measured one, else the bucket's lower
    /// bound (a table decides per bucket).
    fn snap(&self, coll: Coll, n_bytes: u64) -> u64 {
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
    /// Per measured setting: its gain over NCCL's choice and collectives.
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
    /// t(NCCL's choice) / t(setting), within the same jobs.
    pub gain: f64,
    pub count: u64,
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
    /// Shapes where only one side ran (NCCL's choice alone, or only the
    /// table's forced setting): nothing to compare within the job.
    pub one_sided_shapes: usize,
    /// Points set aside because a newer NCCL measured them (the sweep's or
    /// other traces').
    pub older_nccl_points: usize,
    /// Drift between NCCL versions, described.
    pub drift: Vec<String>,
}

/// What the traces held and the points they measured.
#[derive(Clone, Debug, Default, Serialize)]
pub struct TraceNotes {
    #[serde(flatten)]
    pub read: TraceCounts,
    pub points: Vec<TracedPoint>,
}

/// The cells traces contribute, and what the report says of them.
pub fn cells(files: &[TraceFile], sweep: &SweepView) -> (Vec<Cell>, TraceNotes) {
    let mut notes = TraceNotes::default();
    notes.read.files = files.len();
    // One recording per communicator: the lowest rank's.
    let mut owner: BTreeMap<u64, (u32, usize, usize)> = BTreeMap::new();
    for (fi, f) in files.iter().enumerate() {
        for (ci, c) in f.comms.iter().enumerate() {
            notes.read.communicators += 1;
            match owner.get(&c.comm_id) {
                Some(&(rank, _, _)) if rank <= c.rank => notes.read.duplicate_ranks += 1,
                Some(_) => {
                    notes.read.duplicate_ranks += 1;
                    owner.insert(c.comm_id, (c.rank, fi, ci));
                }
                None => {
                    owner.insert(c.comm_id, (c.rank, fi, ci));
                }
            }
        }
    }
    notes.read.communicators -= notes.read.duplicate_ranks;
    let mut by_point: BTreeMap<PointKey, Vec<Part>> = BTreeMap::new();
    for (fi, f) in files.iter().enumerate() {
        let keep = |ci: usize| {
            f.comms
                .get(ci)
                .and_then(|c| owner.get(&c.comm_id))
                .is_some_and(|&(_, of, oc)| of == fi && oc == ci)
        };
        for (s, at) in classify(f, &keep) {
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
            if at.nccl.count == 0 || at.others.is_empty() {
                if all > 0 {
                    notes.read.one_sided_shapes += 1;
                }
                continue;
            }
            let key = PointKey {
                coll: s.coll,
                nodes: s.nodes,
                ranks: s.ranks,
                n_bytes: sweep.snap(s.coll, s.n_bytes),
            };
            by_point.entry(key).or_default().push(Part { file: fi, at });
        }
    }
    let mut out = Vec::new();
    // Points both measured, per (traces' NCCL, sweep's NCCL) that differ.
    let mut versus_sweep: BTreeMap<(u32, u32), usize> = BTreeMap::new();
    for (key, mut parts) in by_point {
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
        if !older.is_empty() {
            notes.read.older_nccl_points += 1;
            parts.retain(|p| files[p.file].nccl_version == newest);
        }
        let replaced = sweep.points.contains(&key);
        if replaced && sweep.nccl_version != 0 && newest != 0 && sweep.nccl_version != newest {
            *versus_sweep
                .entry((newest, sweep.nccl_version))
                .or_default() += 1;
            if sweep.nccl_version > newest {
                // Once per point (older traces may have counted it).
                if older.is_empty() {
                    notes.read.older_nccl_points += 1;
                }
                continue;
            }
        }
        let ppn = key.ranks / key.nodes.max(1);
        if key.nodes == 0 || key.ranks % key.nodes != 0 {
            continue;
        }
        if let Some((cells, point)) = point_cells(files, &parts, key, ppn, replaced, newest, sweep)
        {
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

/// One file's measurements at one shape inside a point.
struct Part {
    file: usize,
    at: AtShape,
}

/// Pools a point's parts into its cells: NCCL's choice at the pooled
/// geometric mean GPU time, each setting at that time over its gain
/// measured within the same files.
#[allow(clippy::too_many_arguments)]
fn point_cells(
    files: &[TraceFile],
    parts: &[Part],
    key: PointKey,
    ppn: u32,
    replaced: bool,
    version: u32,
    sweep: &SweepView,
) -> Option<(Vec<Cell>, TracedPoint)> {
    // Within-side variance of one collective's ln(time), pooled over
    // every side of every part.
    let (mut ss, mut dof) = (0.0, 0.0);
    for p in parts {
        for s in std::iter::once(&p.at.nccl).chain(p.at.others.values().map(|o| &o.side)) {
            ss += s.ss();
            dof += s.count.saturating_sub(1) as f64;
        }
    }
    let var1 = if dof > 0.0 { ss / dof } else { 0.05f64.powi(2) };
    let mut nccl = Side::default();
    let mut nccl_settings: BTreeMap<Setting, u64> = BTreeMap::new();
    // Per configuration: inverse-variance weighted gain, collectives,
    // and whether the deployed table forced it.
    #[derive(Default)]
    struct Pool {
        wsum: f64,
        wgain: f64,
        count: u64,
        by_table: u64,
    }
    let mut pools: BTreeMap<Config, Pool> = BTreeMap::new();
    for p in parts {
        nccl.merge(&p.at.nccl);
        for (s, n) in &p.at.nccl_settings {
            let e = nccl_settings.entry(*s).or_default();
            *e = e.saturating_add(*n);
        }
        for (s, o) in &p.at.others {
            let cfg = sweep.config_of(key.coll, ppn, *s);
            let v = var1 * (1.0 / p.at.nccl.count as f64 + 1.0 / o.side.count as f64);
            let w = 1.0 / v.max(1e-12);
            let e = pools.entry(cfg).or_default();
            e.wsum += w;
            e.wgain += w * (p.at.nccl.mean_ln() - o.side.mean_ln());
            e.count = e.count.saturating_add(o.side.count);
            e.by_table = e.by_table.saturating_add(o.by_table);
        }
    }
    if nccl.count == 0 || pools.is_empty() {
        return None;
    }
    // A file may hold any finite sums: a point whose figures are not times
    // (infinite, zero, NaN) is no measurement.
    let t_ok = |ln_ns: f64| ln_ns.is_finite() && ln_ns.exp().is_normal();
    if !t_ok(nccl.mean_ln())
        || !var1.is_finite()
        || pools
            .values()
            .any(|p| !t_ok(nccl.mean_ln() - p.wgain / p.wsum))
    {
        return None;
    }
    let first = &files[parts[0].file].path;
    let source = Source {
        file: first.clone(),
        line: 0,
    };
    let base = TimeBase::Trace { sd_ln: var1.sqrt() };
    let collective = Collective::from_coll(key.coll);
    let cell_key = |config: Config| CellKey {
        collective,
        nbytes: key.n_bytes,
        nranks: key.ranks,
        nnodes: key.nodes,
        state: State::BASELINE,
        config,
    };
    let count = |n: u64| n.min(u32::MAX as u64) as u32;
    // ns -> us.
    let t_nccl = nccl.mean_ln().exp() / 1e3;
    let mut cells = vec![Cell {
        key: cell_key(Config::DEFAULT),
        time_us: t_nccl,
        n: count(nccl.count),
        spread: 0.0,
        source: source.clone(),
        base,
    }];
    let mut settings = Vec::new();
    let mut deployed = Deployed::Nccl;
    let mut most_forced = 0;
    for (cfg, p) in &pools {
        let gain = p.wgain / p.wsum;
        cells.push(Cell {
            key: cell_key(*cfg),
            time_us: t_nccl / gain.exp(),
            n: count(p.count),
            spread: 0.0,
            source: source.clone(),
            base,
        });
        settings.push(TracedGain {
            config: cfg.to_string(),
            gain: gain.exp(),
            count: p.count,
        });
        if p.by_table > most_forced {
            most_forced = p.by_table;
            deployed = Deployed::Forced(*cfg);
        }
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
        // The table forced Tree/LL; exploration ran NCCL's own Ring/Simple.
        let f = file(vec![
            rec(0, 4096, TREE, Who::Table, 90, 1000.0),
            rec(0, 4096, RING, Who::Explore, 10, 900.0),
        ]);
        let m = classify(&f, &|_| true);
        let at = m.values().next().unwrap();
        assert_eq!(at.nccl.count, 10);
        assert_eq!(at.nccl_choice().map(|s| s.algo), Some(Algo::Ring));
        assert_eq!(at.others.len(), 1);
        assert_eq!(at.others.values().next().unwrap().by_table, 90);
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
        let (cells, notes) = cells(&[a, b], &SweepView::default());
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

    #[test]
    fn a_trace_claiming_absurd_counts_and_sums_is_no_measurement_and_no_panic() {
        let mut big = rec(0, 4096, RING, Who::Nccl, u64::MAX, 1000.0);
        big.sum_ln = 1e300;
        let f = file(vec![
            big,
            rec(0, 4096, RING, Who::Nccl, u64::MAX, 1000.0),
            rec(0, 4096, TREE, Who::Explore, u64::MAX, 800.0),
            rec(0, 8192, RING, Who::Nccl, u64::MAX, 1000.0),
            rec(0, 8192, TREE, Who::Explore, 3, 800.0),
        ]);
        let (cells, notes) = cells(&[f], &SweepView::default());
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
        assert_eq!(
            at.unknown, 10,
            "which setting it was cannot be told: not used"
        );
    }
}
