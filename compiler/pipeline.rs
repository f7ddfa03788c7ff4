//! The one pipeline, top to bottom: check the ingested records (repeats
//! that disagree, collectives without a default run, mixed platforms),
//! aggregate them into cells, arrange grids ([`features`]), fit the models
//! ([`fit`]), decide ([`decide`]), distil the readable trees ([`distil`]) and
//! emit the table ([`emit`]). `dyncc compile`, every `dyncc eval` mode, the
//! benchmarks and the tests call [`compile_dataset`] with [`CompileOptions`],
//! whose defaults are the command line's.
//!
//! Grids and their candidates' models are fitted on [`CompileOptions::jobs`]
//! threads ([`with_jobs`]); each model is fitted by one thread and results
//! are collected in grid and candidate order, so the table is the same
//! for any number of jobs.
//!
//! [`features`]: crate::features
//! [`fit`]: crate::fit
//! [`decide`]: crate::decide
//! [`distil`]: crate::distil
//! [`emit`]: crate::emit

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use anyhow::bail;
use dyncc_tables::{bucket_lower_bound, size_bucket, Coll, Table, NCCL_ENUM, NUM_BUCKETS};
use rayon::prelude::*;

use crate::decide::{decide, DecideOptions, GridDecisions};
use crate::distil::{distil, tree_features, Sample};
use crate::emit::{self, PlannedContext, PlannedTree};
use crate::features::{build_grids, Grid};
use crate::ingest::fold::{Folded, Group};
use crate::ingest::{self, Dataset};
use crate::record::{Cell, CellKey};
use crate::report::{describe, Inputs, Platform, Report, TableInfo};
use crate::reruns::{Disagreeing, REPEAT_MIN_CELLS, REPEAT_MIN_FACTOR, REPEAT_SD};

/// Deepest distilled tree; deeper ones stop being readable.
const MAX_TREE_DEPTH: usize = 8;

/// Options of a compile. `Default` is what `dyncc compile` does without
/// options.
#[derive(Clone, Debug, Default)]
pub struct CompileOptions {
    pub decide: DecideOptions,
    /// Keep only records of this platform label (or GPU model).
    pub platform: Option<String>,
    /// The command line, recorded in the table.
    pub command: String,
    /// Drop (and report) what the checks refuse instead of failing.
    pub lenient: bool,
    /// Threads to fit on; 0: every available core (`--jobs`).
    pub jobs: usize,
    /// The exploration share F the table carries (`--explore`; `None`:
    /// [`crate::audit::explore::DEFAULT_SHARE`]), checked.
    pub explore: Option<f64>,
    /// Show the fitting's progress on stderr (where it is a terminal and
    /// the fitting takes over a second).
    pub progress: bool,
}

/// Runs `work` on a pool of `jobs` threads (0: every available core); the
/// parallel parts of the pipeline inside it use that pool.
pub fn with_jobs<R: Send>(jobs: usize, work: impl FnOnce() -> R + Send) -> anyhow::Result<R> {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(jobs)
        .thread_name(|i| format!("dyncc-fit-{i}"))
        .build()
        .map_err(|e| anyhow::anyhow!("starting {jobs} fitting threads: {e}; try fewer --jobs"))?;
    Ok(pool.install(work))
}

/// A compiled table and everything that explains it.
pub struct Compiled {
    pub bytes: Vec<u8>,
    pub grids: Vec<Grid>,
    pub decided: Vec<GridDecisions>,
    pub contexts: Vec<PlannedContext>,
    pub report: Report,
}

/// Compiles a sweep already read: the whole pipeline. It consumes the
/// dataset, so a sweep read folded ([`crate::ingest::read_paths_folded`],
/// as `dyncc compile` reads) is never copied.
pub fn compile_dataset(ds: Dataset, opts: &CompileOptions) -> anyhow::Result<Compiled> {
    with_jobs(opts.jobs, || compile_in_pool(ds, opts))?
}

/// The NCCL version a sweep measured with: its newest run's (0: no run
/// says).
pub fn sweep_nccl_version(f: &Folded) -> u32 {
    f.groups
        .iter()
        .filter_map(|g| g.key.run.nccl_version)
        .max()
        .unwrap_or(0)
}

/// Jobs' traces read as measurements against a sweep's cells (measured
/// with NCCL `sweep_nccl`): the cells they add, points of their own, and
/// what the report says of them. One reading for `compile` and `query
/// --data`, so both judge the same evidence by the same bar.
pub fn trace_cells(
    sweep: &[Cell],
    sweep_nccl: u32,
    traces: &[ingest::traces::TraceFile],
    decide: &DecideOptions,
) -> (Vec<Cell>, ingest::traces::TraceNotes) {
    let view = ingest::traces::SweepView::of_cells(sweep, sweep_nccl);
    let bar = ingest::traces::Bar::new(decide.margin, decide.z);
    ingest::traces::cells(traces, &view, bar)
}

/// [`compile_dataset`] on the pool the caller runs in (cross-validation
/// compiles its folds on one pool).
pub(crate) fn compile_in_pool(mut ds: Dataset, opts: &CompileOptions) -> anyhow::Result<Compiled> {
    let mut f = ds.take_folded();
    check_repeats(&mut f, &mut ds.skipped, opts.lenient)?;
    check_default_runs(&mut f, &mut ds.skipped, opts.lenient)?;
    if f.is_empty() {
        bail!(
            "no measurements to compile; expected nccl-tests logs (text or JSON) or a tuner CSV \
             (`dyncc inspect PATH` shows what each file held)"
        );
    }
    let mut platform = select_platform(&mut f, opts.platform.as_deref())?;
    let sweep = ds.sweep_fingerprint_of(
        f.groups
            .iter()
            .filter(|g| !g.samples.is_empty())
            .map(|g| g.key.file.as_path()),
    );
    platform.sweep = sweep.map(|s| format!("{s:016x}"));
    // Traces of the sweep's platform and sweep only, unless told otherwise.
    let provenance = ingest::traces::check_provenance(
        &mut ds.traces,
        platform.label.as_deref(),
        platform.gpu.as_deref(),
        sweep,
        opts.platform.as_deref(),
        ds.foreign_traces,
    )?;
    let mut cells = f.cells();
    // Jobs' traces join as points of their own (`ingest::traces`).
    let traced = (!ds.traces.is_empty()).then(|| {
        let (more, mut notes) =
            trace_cells(&cells, sweep_nccl_version(&f), &ds.traces, &opts.decide);
        cells.extend(more);
        notes.read.provenance = provenance;
        notes
    });
    let inputs = ds.input_digests_of(
        f.groups
            .iter()
            .filter(|g| !g.samples.is_empty())
            .map(|g| g.key.file.as_path()),
    );
    let counted = Inputs {
        files: ds.files,
        rows: ds.rows,
        records: f.len(),
        untrusted: f
            .groups
            .iter()
            .filter(|g| g.key.flags != 0)
            .map(|g| g.samples.len())
            .sum(),
        skipped: ds.skipped.len(),
        cells: cells.iter().filter(|c| c.base.is_time()).count(),
    };
    // The measurements are in the cells now: their groups go before the
    // fitting, which holds the grids.
    drop(f);
    let mut c = compile_cells(cells, &platform, opts, &inputs)?;
    if let Some(notes) = traced {
        c.report.traces = Some(crate::report::TraceChanges::new(
            notes, &c.grids, &c.decided,
        ));
    }
    c.report.inputs = counted;
    c.report.skipped = ds.skipped;
    c.report.notes.extend(ds.notes);
    Ok(c)
}

/// Compiles aggregated cells: the pure core. The cells are freed once
/// arranged into grids, before the fitting.
pub fn compile_cells(
    cells: Vec<Cell>,
    platform: &Platform,
    opts: &CompileOptions,
    inputs: &str,
) -> anyhow::Result<Compiled> {
    let (grids, notes) = build_grids(&cells);
    drop(cells);
    if grids.is_empty() {
        bail!(
            "no measurements of a collective NCCL lets a tuner decide (broadcast, reduce, allgather, \
             reducescatter, allreduce) in the input: nothing to compile"
        );
    }
    // A context gated on one state does not let its calls fall through to
    // another's (tables/FORMAT.md): one state per communicator. Grids come
    // sorted by (collective, ppn, state).
    if let Some(w) = grids
        .windows(2)
        .find(|w| (w[0].coll, w[0].ppn) == (w[1].coll, w[1].ppn))
    {
        bail!(
            "{} at {} ranks per node was measured in two call states ({}; {}); a table decides \
             for one: pick it with --setup (e.g. --setup regBuff=1)",
            w[0].coll.name(),
            w[0].ppn,
            w[0].state,
            w[1].state
        );
    }
    // Models done of all candidates', with an ETA (see `progress`).
    let progress = crate::progress::Progress::new(
        opts.progress,
        grids.iter().map(|g| g.configs.len() as u64 - 1).sum(),
        "{spinner} fitting [{bar:30}] {pos}/{len} models, ETA {eta}",
    );
    let done = || progress.inc(1);
    let decided: Vec<GridDecisions> = grids
        .par_iter()
        .map(|g| decide(g, &opts.decide, &done))
        .collect();
    progress.finish();
    let contexts = emit::plan(&grids, &decided, opts.decide.extrapolate);
    let trees = distil_all(&grids, &contexts, opts.decide.extrapolate);

    let mut report = Report {
        platform: platform.clone(),
        ..Default::default()
    };
    describe(
        &mut report,
        &grids,
        &decided,
        &contexts,
        &notes,
        &opts.decide,
    );
    for t in &trees {
        report
            .trees
            .insert(t.coll.name().to_string(), t.fidelity.clone());
    }
    let coverage_text = report
        .coverage
        .iter()
        .map(crate::report::Coverage::meta_text)
        .collect::<Vec<_>>()
        .join("; ");
    let mut meta: Vec<(&str, String)> = vec![
        ("dyncc_version", env!("CARGO_PKG_VERSION").to_string()),
        ("command", opts.command.clone()),
        ("inputs", inputs.to_string()),
        ("platform", platform.label.clone().unwrap_or_default()),
        ("gpu", platform.gpu.clone().unwrap_or_default()),
        (
            "gpus_per_node",
            platform
                .gpus_per_node
                .map(|g| g.to_string())
                .unwrap_or_default(),
        ),
        ("nccl_enum", NCCL_ENUM.to_string()),
        ("coverage", coverage_text),
        ("margin", format!("{}", opts.decide.margin)),
        // `query --data SWEEP TRACES` judges jobs' traces by the table's
        // own bar (margin and noise_z), not compile's defaults.
        ("noise_z", format!("{}", opts.decide.z)),
        ("extrapolate", format!("{}", opts.decide.extrapolate)),
        ("node_reach", format!("{}", opts.decide.node_reach)),
        // The plugin explores at this share alone (`DYNCC_EXPLORE` only
        // switches it on), so every rank holding the table explores alike.
        (
            dyncc_tables::META_EXPLORE,
            format!(
                "{}",
                opts.explore.unwrap_or(crate::audit::explore::DEFAULT_SHARE)
            ),
        ),
    ];
    // Read by the plugin and `verify`/`explain`; absent when unknown.
    if let Some(v) = &platform.nccl_version {
        meta.push(("nccl_version", v.clone()));
    }
    if let Some(s) = &platform.sweep {
        meta.push((dyncc_tables::META_SWEEP, s.clone()));
    }
    let bytes = emit::build(&contexts, &trees, &meta, opts.decide.extrapolate)?;
    let table = Table::from_bytes(&bytes)
        .map_err(|e| anyhow::anyhow!("internal error: emitted table does not load: {e}"))?;
    report.table = TableInfo {
        path: None,
        bytes: bytes.len(),
        digest: format!("{:016x}", table.digest()),
        contexts: table.context_count(),
        plan_cells: crate::audit::explore::counts(&table)
            .values()
            .map(|c| c.cells)
            .sum(),
        plan_candidates: table.plan_len() as u32,
    };
    Ok(Compiled {
        bytes,
        grids,
        decided,
        contexts,
        report,
    })
}

/// One table serves one cluster type: refuse to blend platforms silently.
/// Keeps the measurements of the platform chosen (all when there is one).
fn select_platform(f: &mut Folded, want: Option<&str>) -> anyhow::Result<Platform> {
    let label = |g: &Group| -> Option<String> {
        g.key
            .run
            .platform
            .as_deref()
            .or(g.key.run.gpu.as_deref())
            .map(str::to_string)
    };
    match want {
        Some(w) => {
            let seen: BTreeSet<String> = f.groups.iter().filter_map(label).collect();
            f.retain(|g| g.is_platform(w));
            if f.is_empty() {
                bail!(
                    "no records of platform `{w}`; the inputs hold: {}",
                    seen.into_iter().collect::<Vec<_>>().join(", ")
                );
            }
        }
        None => {
            let mut counts: BTreeMap<String, usize> = BTreeMap::new();
            for g in &f.groups {
                if let Some(l) = label(g) {
                    *counts.entry(l).or_default() += g.samples.len();
                }
            }
            if counts.len() > 1 {
                let list: Vec<String> = counts
                    .iter()
                    .map(|(k, v)| format!("{k} ({v} records)"))
                    .collect();
                bail!(
                    "the inputs mix platforms: {}. A table serves one cluster type: compile each \
                     separately, or pick one with --platform LABEL",
                    list.join(", ")
                );
            }
        }
    }
    let most = |v: &dyn Fn(&Group) -> Option<String>| -> Option<String> {
        let mut m: BTreeMap<String, usize> = BTreeMap::new();
        for g in &f.groups {
            if let Some(v) = v(g) {
                *m.entry(v).or_default() += g.samples.len();
            }
        }
        m.into_iter()
            .max_by_key(|(_, records)| *records)
            .map(|(value, _)| value)
    };
    Ok(Platform {
        label: most(&|g| g.key.run.platform.as_deref().map(str::to_string)),
        gpu: most(&|g| g.key.run.gpu.as_deref().map(str::to_string)),
        gpus_per_node: most(&|g| {
            let c = &g.key.run;
            (c.nnodes > 0 && c.nranks % c.nnodes == 0)
                .then(|| format!("{:010}", c.nranks / c.nnodes))
        })
        .and_then(|s| s.parse().ok()),
        nccl_version: ingest::setup::nccl_versions_folded(f),
        // Filled by the caller, which holds the files' digests.
        sweep: None,
    })
}

/// The shapes the distilled trees must reproduce, which are the shapes the
/// plugin answers from this table: every size bucket it decides (inside the
/// measured sizes, or all when extrapolating) at every node count it
/// decides (each count of a range), for the grid's ranks per node.
fn distil_all(grids: &[Grid], contexts: &[PlannedContext], extrapolate: bool) -> Vec<PlannedTree> {
    // The planned contexts hold every anchor's size buckets already; those
    // for other ranks per node (extrapolating) repeat a grid's, so only the
    // grids' own are used.
    let own: Vec<(&Grid, &PlannedContext)> = contexts
        .iter()
        .filter_map(|c| {
            let g = grids
                .iter()
                .find(|g| g.coll == c.coll && c.ppn == (g.ppn, g.ppn))?;
            Some((g, c))
        })
        .collect();
    let size_range = |g: &Grid| {
        if extrapolate {
            (0, NUM_BUCKETS - 1)
        } else {
            (
                size_bucket(g.sizes[0]) as usize,
                size_bucket(*g.sizes.last().unwrap_or(&0)) as usize,
            )
        }
    };
    // Decisions are constant over a range of node counts, so the trees are
    // fitted on each range's ends (where a split between ranges falls) and
    // then checked on every node count of it, without holding those.
    let mut by_coll: BTreeMap<Coll, Vec<Sample>> = BTreeMap::new();
    for (g, c) in &own {
        let s = by_coll.entry(g.coll).or_default();
        let (lo, hi) = size_range(g);
        let (first, last) = c.nodes;
        let mut ends = vec![first];
        if last != u32::MAX && last != first {
            ends.push(last);
        }
        // Each end stands for half the node counts of its range.
        let count = emit::range_samples(c.nodes).len() as f64 / ends.len() as f64;
        for n in ends {
            for (k, bd) in c.buckets.iter().enumerate().take(hi + 1).skip(lo) {
                s.push(Sample {
                    count,
                    x: tree_features(bucket_lower_bound(k as u8), n, g.ppn),
                    decision: bd.decision,
                    basis: bd.basis,
                    gain: bd.gain as f64,
                });
            }
        }
    }
    by_coll
        .into_iter()
        .map(|(coll, s)| {
            let (t, mut f) = distil(&s, MAX_TREE_DEPTH);
            let (mut points, mut disagree, mut wrong, mut total) = (0, 0, 0.0, 0.0);
            for (g, c) in own.iter().filter(|(g, _)| g.coll == coll) {
                let (lo, hi) = size_range(g);
                for n in emit::range_samples(c.nodes) {
                    for (k, bd) in c.buckets.iter().enumerate().take(hi + 1).skip(lo) {
                        let x = tree_features(bucket_lower_bound(k as u8), n, g.ppn);
                        let w = crate::distil::weight_of(bd.gain as f64);
                        let miss = t.leaf(&x).decision != bd.decision;
                        points += 1;
                        disagree += usize::from(miss);
                        total += w;
                        if miss {
                            wrong += w;
                        }
                    }
                }
            }
            f.points = points;
            f.disagree = disagree;
            f.weighted_disagree = if total > 0.0 { wrong / total } else { 0.0 };
            PlannedTree {
                coll,
                tree: t,
                fidelity: f,
            }
        })
        .collect()
}

/// A collective measured only with forced settings has nothing to compare
/// against (the gain is over NCCL's own choice), so nothing of it could be
/// compiled. Strict: an error naming its first file. Lenient: its records
/// are dropped and listed as skipped.
fn check_default_runs(
    f: &mut Folded,
    skipped: &mut Vec<ingest::Skip>,
    lenient: bool,
) -> anyhow::Result<()> {
    /// Per collective: its records, whether one is a default run, and the
    /// first place one was read.
    #[derive(Default)]
    struct Seen {
        n: usize,
        has_default: bool,
        first: Option<FirstRead>,
    }
    /// Where a record was read, and in which order.
    #[derive(Default)]
    struct FirstRead {
        seq: u32,
        file: PathBuf,
        line: u32,
    }
    let mut seen: BTreeMap<&'static str, Seen> = BTreeMap::new();
    for g in &f.groups {
        let Some(s) = g.first() else { continue };
        // NCCL never asks a tuner about point-to-point collectives
        // (alltoall, sendrecv, ...): no run of them is needed, and the
        // report's note says they were read and not used.
        if g.collective().tunable().is_none() {
            continue;
        }
        let e = seen.entry(g.collective().name()).or_default();
        e.n += g.samples.len();
        e.has_default |= g.is_default();
        if e.first.as_ref().is_none_or(|f| s.seq < f.seq) {
            e.first = Some(FirstRead {
                seq: s.seq,
                file: (*g.key.file).clone(),
                line: s.line,
            });
        }
    }
    for (coll, e) in seen {
        if e.has_default {
            continue;
        }
        let FirstRead { file, line, .. } = e.first.unwrap_or_default();
        let n = e.n;
        let why = format!(
            "{coll}: {n} measurements, none with NCCL's own choice (a run without NCCL_ALGO, \
             NCCL_PROTO or channel settings); expected a default run of {coll} to compare \
             the forced settings against"
        );
        if !lenient {
            bail!(
                "{}:{line}: {why}; add one, or pass --lenient to compile the other collectives",
                file.display()
            );
        }
        f.retain(|g| g.collective().name() != coll);
        skipped.push(ingest::Skip {
            file,
            line,
            reason: format!("{why}; dropped {coll}"),
        });
    }
    Ok(())
}

/// The sweep's own noise: the sd of ln(time) of one measurement, estimated
/// as [`crate::fit::noise`] does per grid, over the whole sweep. Repeats
/// within one file (one run) measure it directly (range / d_n); without
/// them it comes from the roughness of each run's curve over neighbouring
/// sizes (second differences: variance 6 s^2, lower quartile against
/// bends). Either is within a run, so a run that is uniformly slower (a
/// degraded node) cannot hide itself by raising the noise.
pub fn sweep_noise(f: &Folded) -> f64 {
    use crate::fit::{repeat_variance, sigma_from_curves};
    use std::collections::HashMap;
    let trusted = |g: &&Group| g.key.flags == 0 && !g.samples.is_empty();
    let mut rep: Vec<f64> = Vec::new();
    // Per run curve (file, run, placement, type): ln of the median time per
    // size.
    type Curve<'a> = (&'a PathBuf, &'a crate::record::Run, bool, Option<&'a str>);
    let mut curves: HashMap<Curve<'_>, BTreeMap<u64, f64>> = HashMap::new();
    for g in f.groups.iter().filter(trusted) {
        let mut t: Vec<f64> = g
            .samples
            .iter()
            .map(|s| s.time_us)
            .filter(|t| t.is_finite() && *t > 0.0)
            .collect();
        let Some(med) = crate::stats::median(&mut t) else {
            continue;
        };
        if t.len() >= 2 {
            rep.push(repeat_variance(
                (t[t.len() - 1] / t[0]).ln(),
                t.len() as u32,
            ));
        }
        curves
            .entry((
                g.key.file.as_ref(),
                &g.key.run,
                g.key.in_place,
                g.key.dtype.as_deref(),
            ))
            .or_default()
            .insert(g.key.nbytes, med.ln());
    }
    sigma_from_curves(&mut rep, curves.values())
}

/// Compares repeats of each cell, inside each file ([`crate::reruns`]) and
/// across files: when two runs of the same collective, shape, size and
/// setting on the same platform disagree by more than the sweep's own noise
/// allows ([`REPEAT_SD`], [`sweep_noise`]), the median would silently blend
/// a broken run into the decision. Strict: an error naming both places.
/// Lenient: the cell's records are dropped and listed as skipped, so no
/// decision is built on them.
fn check_repeats(
    f: &mut Folded,
    skipped: &mut Vec<ingest::Skip>,
    lenient: bool,
) -> anyhow::Result<()> {
    // Inside files first: a broken rerun in one file would also raise the
    // noise the comparison across files allows (its repeats measure it).
    let found = crate::reruns::in_file(f);
    if lenient {
        found.keep_out(f, skipped);
    } else {
        refuse(&found.bad, "keep out the run off the others")?;
    }
    let bad = across_files(f);
    if !lenient {
        refuse(&bad, "drop the cell")?;
    }
    keep_out(bad, f, skipped);
    Ok(())
}

/// Fails naming the first cell whose repeats disagree, if any; `lenient`
/// says what `--lenient` would do instead.
fn refuse(bad: &[Disagreeing], lenient: &str) -> anyhow::Result<()> {
    let Some(first) = bad.first() else {
        return Ok(());
    };
    bail!(
        "{}{}; remove the bad run, or pass --lenient to {lenient}",
        first.what,
        if bad.len() > 1 {
            format!(" (and {} more such cells)", bad.len() - 1)
        } else {
            String::new()
        }
    )
}

/// The cells whose repeats from different files disagree, one each.
fn across_files(f: &Folded) -> Vec<Disagreeing> {
    use std::collections::HashMap;
    use std::path::Path;
    /// Repeats are measurements of one cell on one platform and GPU, in one
    /// setup: setups pooled with `--pool-setups` may differ by design.
    type RepeatKey<'a> = (CellKey, Option<&'a str>, Option<&'a str>, Setup<'a>);
    type Setup<'a> = (Option<&'a str>, Option<u32>);
    fn repeat_key(g: &Group) -> RepeatKey<'_> {
        (
            g.key.cell(),
            g.key.run.platform.as_deref(),
            g.key.run.gpu.as_deref(),
            (g.key.run.env.as_deref(), g.key.run.nccl_version),
        )
    }
    /// A cell's first file, and whether another file measured it too.
    struct FirstFile<'a> {
        file: &'a Path,
        repeated_elsewhere: bool,
    }
    /// A cell's times in one file, and the first line they were read at.
    struct InFile {
        times: Vec<f64>,
        line: u32,
    }
    /// A cell's median time in one file.
    struct FileMedian<'a> {
        file: &'a Path,
        median: f64,
        line: u32,
    }
    type PerFile<'a> = BTreeMap<&'a Path, InFile>;
    // Repeats are compared across files: with one file there is nothing to
    // compare (and a million cells of one file would pay for hashing each).
    let mut files = f.groups.iter().map(|g| g.key.file.as_path());
    if let Some(first) = files.next() {
        if files.all(|p| p == first) {
            return Vec::new();
        }
    }
    let sigma = sweep_noise(f);
    let limit = (REPEAT_SD * std::f64::consts::SQRT_2 * sigma).max(REPEAT_MIN_FACTOR.ln());
    let trusted = |g: &&Group| g.key.flags == 0 && !g.samples.is_empty();
    // Only cells measured in two files or more are compared: their times
    // are the only ones copied (a single file of repeats copies none).
    let mut first_file: HashMap<RepeatKey<'_>, FirstFile<'_>> = HashMap::new();
    for g in f.groups.iter().filter(trusted) {
        let e = first_file.entry(repeat_key(g)).or_insert(FirstFile {
            file: g.key.file.as_path(),
            repeated_elsewhere: false,
        });
        e.repeated_elsewhere |= e.file != g.key.file.as_path();
    }
    let mut groups: HashMap<RepeatKey<'_>, PerFile<'_>> = HashMap::new();
    for g in f.groups.iter().filter(trusted) {
        let k = repeat_key(g);
        if !first_file.get(&k).is_some_and(|e| e.repeated_elsewhere) {
            continue;
        }
        let line = g.samples.iter().map(|s| s.line).min().unwrap_or(0);
        let e = groups
            .entry(k)
            .or_default()
            .entry(g.key.file.as_path())
            .or_insert(InFile {
                times: Vec::new(),
                line,
            });
        e.times.extend(g.samples.iter().map(|s| s.time_us));
        e.line = e.line.min(line);
    }
    /// A cell whose repeats disagree: its group, what to say, and the two
    /// files.
    struct Bad {
        key: CellKey,
        platform: Option<String>,
        what: String,
        pair: (PathBuf, PathBuf),
    }
    let mut bad: Vec<Bad> = Vec::new();
    for ((key, platform, gpu, _), files) in &groups {
        if files.len() < 2 {
            continue;
        }
        let med = |v: &[f64]| crate::stats::median(&mut v.to_vec()).unwrap_or(f64::NAN);
        let meds: Vec<FileMedian> = files
            .iter()
            .map(|(file, f)| FileMedian {
                file,
                median: med(&f.times),
                line: f.line,
            })
            .collect();
        let lo = meds
            .iter()
            .min_by(|a, b| a.median.total_cmp(&b.median))
            .unwrap();
        let hi = meds
            .iter()
            .max_by(|a, b| a.median.total_cmp(&b.median))
            .unwrap();
        if (hi.median / lo.median).ln() > limit {
            let what = format!(
                "{}:{}: {} {} ranks on {} node(s), {} bytes, {}: {:.2} us here but {:.2} us at {}:{} \
                 ({:.1}x apart); expected repeats of one measurement to agree within {:.2}x \
                 (the larger of {REPEAT_SD} sd of the sweep's own noise, {:.1} %, and \
                 {REPEAT_MIN_FACTOR}x between jobs) (was one run on a degraded \
                 node, or sharing the links with another job?)",
                hi.file.display(),
                hi.line,
                key.collective.name(),
                key.nranks,
                key.nnodes,
                key.nbytes,
                key.config,
                hi.median,
                lo.median,
                lo.file.display(),
                lo.line,
                hi.median / lo.median,
                limit.exp(),
                sigma * 100.0,
            );
            bad.push(Bad {
                key: *key,
                platform: platform.or(*gpu).map(String::from),
                what,
                pair: (hi.file.to_path_buf(), lo.file.to_path_buf()),
            });
        }
    }
    // One cell far off is a warm-up artefact (the first size of a run often
    // is); a broken run is off at many sizes against the same other run.
    let mut pairs: BTreeMap<(PathBuf, PathBuf), usize> = BTreeMap::new();
    for b in &bad {
        *pairs.entry(b.pair.clone()).or_default() += 1;
    }
    bad.retain(|b| pairs[&b.pair] >= REPEAT_MIN_CELLS);
    bad.sort_by(|a, b| a.what.cmp(&b.what));
    bad.into_iter()
        .map(|b| Disagreeing {
            key: b.key,
            platform: b.platform,
            what: b.what,
        })
        .collect()
}

/// Drops the cells whose repeats from different files disagree (every
/// file's measurements of them: which run is right is unknown) and lists
/// each as skipped.
fn keep_out(bad: Vec<Disagreeing>, f: &mut Folded, skipped: &mut Vec<ingest::Skip>) {
    if bad.is_empty() {
        return;
    }
    let drop: BTreeSet<(CellKey, Option<String>)> =
        bad.iter().map(|b| (b.key, b.platform.clone())).collect();
    f.retain(|g| {
        let p = g
            .key
            .run
            .platform
            .as_deref()
            .or(g.key.run.gpu.as_deref())
            .map(String::from);
        !drop.contains(&(g.key.cell(), p))
    });
    for b in bad {
        let (place, reason) = b.what.split_once(": ").unwrap_or(("", &b.what));
        let (file, line) = place.rsplit_once(':').unwrap_or((place, "0"));
        skipped.push(ingest::Skip {
            file: file.into(),
            line: line.parse().unwrap_or(0),
            reason: format!("{reason}; dropped the cell"),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decide::DecideOptions;
    use crate::features::tests::{cell, cfg};
    use crate::record::{Collective, Config, Record};
    use dyncc_tables::Comm;
    use dyncc_tables::{Algo, Basis, Decision, Proto, Setting};

    fn sweep() -> Vec<Cell> {
        let mut v = Vec::new();
        for n in [1u32, 2, 4, 16] {
            for k in 3..=28 {
                let b = 1u64 << k;
                let t = 10.0 + b as f64 / 1e4;
                v.push(cell(Collective::AllReduce, n, 8, b, Config::DEFAULT, t));
                let tl = if b < 65536 { t * 0.8 } else { t * 1.5 };
                v.push(cell(
                    Collective::AllReduce,
                    n,
                    8,
                    b,
                    cfg(Algo::Tree, Proto::LL),
                    tl,
                ));
                let rs = if b > 1 << 22 && n >= 4 {
                    t * 0.7
                } else {
                    t * 1.1
                };
                v.push(cell(
                    Collective::AllReduce,
                    n,
                    8,
                    b,
                    cfg(Algo::Ring, Proto::Simple),
                    rs,
                ));
                v.push(cell(Collective::AllGather, n, 8, b, Config::DEFAULT, t));
                v.push(cell(
                    Collective::AllGather,
                    n,
                    8,
                    b,
                    cfg(Algo::Ring, Proto::LL),
                    tl,
                ));
            }
        }
        v
    }

    /// Cells of one communicator in two call states would compile into two
    /// contexts where the first shadows the other (gated contexts do not
    /// fall through): refused, naming the way to pick one.
    #[test]
    fn two_call_states_of_one_communicator_are_refused() {
        let mut cells = sweep();
        let registered: Vec<Cell> = cells
            .iter()
            .map(|c| {
                let mut c = c.clone();
                c.key.state.reg_buff = true;
                c
            })
            .collect();
        cells.extend(registered);
        let Err(e) = compile_cells(cells, &Platform::default(), &CompileOptions::default(), "")
        else {
            panic!("two states of one communicator compiled into one table");
        };
        let e = e.to_string();
        assert!(
            e.contains("two call states") && e.contains("--setup"),
            "{e}"
        );
    }

    /// The table carries the exploration share the plugin explores at
    /// (`--explore`, default 0.02), so the digest covers it.
    #[test]
    fn the_table_carries_the_exploration_share() {
        let share = |explore: Option<f64>| {
            let opts = CompileOptions {
                explore,
                ..Default::default()
            };
            let c = compile_cells(sweep(), &Platform::default(), &opts, "").unwrap();
            let t = Table::from_bytes(&c.bytes).unwrap();
            (
                t.meta(dyncc_tables::META_EXPLORE).map(str::to_string),
                t.digest(),
            )
        };
        let (default, d0) = share(None);
        let (five, d5) = share(Some(0.05));
        assert_eq!(default.as_deref(), Some("0.02"));
        assert_eq!(five.as_deref(), Some("0.05"));
        assert_ne!(d0, d5);
    }

    #[test]
    fn table_and_in_memory_decisions_agree_at_every_grid_point() {
        for extrapolate in [false, true] {
            let opts = CompileOptions {
                decide: DecideOptions {
                    extrapolate,
                    ..Default::default()
                },
                ..Default::default()
            };
            let c = compile_cells(sweep(), &Platform::default(), &opts, "").unwrap();
            let t = Table::from_bytes(&c.bytes).unwrap();
            // Every planned context, at every bucket, for node counts at both
            // ends of its range: the first matching planned context is what
            // the table must answer.
            for pc in &c.contexts {
                for nodes in [pc.nodes.0, pc.nodes.1.min(1 << 20)] {
                    let ranks = nodes as u64 * pc.ppn.0 as u64;
                    let first = c
                        .contexts
                        .iter()
                        .find(|x| {
                            x.coll == pc.coll
                                && (x.nodes.0..=x.nodes.1).contains(&nodes)
                                && (x.ppn.0..=x.ppn.1).contains(&pc.ppn.0)
                        })
                        .unwrap();
                    let spec = t.specialise(&Comm::new(ranks, nodes as u64));
                    for b in 0..NUM_BUCKETS {
                        let bytes = bucket_lower_bound(b as u8);
                        if size_bucket(bytes) as usize != b {
                            continue; // buckets 4..=7 hold no size
                        }
                        let want = first.buckets[b].decision;
                        let got = t
                            .lookup(pc.coll as u32, &Comm::new(ranks, nodes as u64), bytes, 1, 0)
                            .decision;
                        assert_eq!(got, want, "{:?} nodes {nodes} bucket {b}", pc.coll);
                        assert_eq!(spec.decide(pc.coll as u32, bytes, 1, 0), want);
                    }
                }
            }
        }
    }

    #[test]
    fn compiles_the_expected_decisions() {
        let c = compile_cells(
            sweep(),
            &Platform::default(),
            &CompileOptions::default(),
            "",
        )
        .unwrap();
        let t = Table::from_bytes(&c.bytes).unwrap();
        let d = |coll: Coll, nodes: u64, bytes: u64| {
            t.lookup(coll as u32, &Comm::new(nodes * 8, nodes), bytes, 1, 0)
                .decision
        };
        let tree_ll = Decision::Force(Setting::new(Algo::Tree, Proto::LL));
        let ring_simple = Decision::Force(Setting::new(Algo::Ring, Proto::Simple));
        assert_eq!(d(Coll::AllReduce, 2, 1024), tree_ll);
        assert_eq!(d(Coll::AllReduce, 2, 1 << 20), Decision::Default);
        assert_eq!(d(Coll::AllReduce, 16, 1 << 26), ring_simple);
        assert_eq!(d(Coll::AllReduce, 2, 1 << 26), Decision::Default);
        // 8 nodes was never measured: interpolated between 4 and 16.
        assert_eq!(d(Coll::AllReduce, 8, 1 << 26), ring_simple);
        assert_eq!(
            t.lookup(Coll::AllReduce as u32, &Comm::new(64, 8), 1 << 26, 1, 0)
                .basis,
            Some(Basis::Interpolated)
        );
        // Within the node reach (8x beyond 16): extrapolated; beyond it, and
        // at 4 ranks per node or 1 GiB, NCCL decides.
        assert_eq!(d(Coll::AllReduce, 32, 1024), tree_ll);
        assert_eq!(
            t.lookup(Coll::AllReduce as u32, &Comm::new(256, 32), 1024, 1, 0)
                .basis,
            Some(Basis::Extrapolated)
        );
        assert_eq!(d(Coll::AllReduce, 256, 1024), Decision::Default);
        assert_eq!(
            t.lookup(Coll::AllReduce as u32, &Comm::new(8, 2), 1024, 1, 0)
                .decision,
            Decision::Default
        );
        assert_eq!(d(Coll::AllReduce, 2, 1 << 30), Decision::Default);
        assert_eq!(
            d(Coll::AllGather, 2, 1024),
            Decision::Force(Setting::new(Algo::Ring, Proto::LL))
        );
        // Never measured: broadcast.
        assert_eq!(d(Coll::Broadcast, 2, 1024), Decision::Default);
        assert!(t.tree(Coll::AllReduce).is_some());
        assert!(c.report.trees["allreduce"].disagree == 0);
    }

    #[test]
    fn mixed_platforms_are_refused_unless_one_is_picked() {
        let a = crate::features::tests::cell(Collective::AllReduce, 1, 8, 8, Config::DEFAULT, 1.0);
        let rec = |p: &str| Record {
            run: crate::record::Run {
                platform: Some(p.into()),
                ..crate::record::Run::example()
            },
            measurement: crate::record::Measurement {
                nbytes: 8,
                time_us: 1.0,
                in_place: false,
                dtype: None,
                source: a.source.clone(),
                flags: 0,
            },
        };
        let recs = vec![rec("DGX-1V"), rec("DGX-2V")];
        let e = select_platform(&mut Folded::from_records(recs.clone()), None)
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("mix platforms") && e.contains("--platform"),
            "{e}"
        );
        let mut v = Folded::from_records(recs);
        let p = select_platform(&mut v, Some("dgx-2v")).unwrap();
        assert_eq!(v.len(), 1);
        assert_eq!(p.label.as_deref(), Some("DGX-2V"));
    }
}
