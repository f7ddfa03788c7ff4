//! `dyncc compile`: the whole pipeline, top to bottom. Ingest the sweeps,
//! arrange them into grids (features), fit the models, decide, distil the
//! readable trees, emit the table, and say what it does and why.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use anyhow::{bail, Context};
use dyncc_tables::{bucket_lower_bound, bucket_upper_bound, Basis, Coll, Decision, Table};
use serde::Serialize;

use crate::decide::{decide, DecideOptions, GridDecisions, Why};
use crate::distil::{distil, tree_features, Fidelity, Leaf, Sample};
use crate::emit::{self, PlannedContext};
use crate::features::{build_grids, Grid, GridNotes};
use crate::fit::fit;
use crate::ingest::{self, Dataset};
use crate::record::{Cell, Record};
use crate::tree::FlatTree;
use crate::units::{fmt_bytes, fmt_gain};

/// Deepest distilled tree; deeper ones stop being readable.
const MAX_TREE_DEPTH: usize = 8;

/// Options of a compile.
#[derive(Clone, Debug, Default)]
pub struct CompileOptions {
    pub decide: DecideOptions,
    /// Keep only records of this platform label (or GPU model).
    pub platform: Option<String>,
    /// The command line, recorded in the table.
    pub command: String,
}

/// A compiled table and everything that explains it.
pub struct Compiled {
    pub bytes: Vec<u8>,
    pub grids: Vec<Grid>,
    pub decided: Vec<GridDecisions>,
    pub contexts: Vec<PlannedContext>,
    pub report: Report,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct Report {
    pub inputs: Inputs,
    pub platform: Platform,
    pub coverage: Vec<Coverage>,
    pub forced: Vec<Forced>,
    /// Per collective: measured points left to NCCL, by reason.
    pub left_alone: BTreeMap<String, BTreeMap<String, usize>>,
    pub outside: Vec<String>,
    pub trees: BTreeMap<String, Fidelity>,
    pub notes: Vec<String>,
    /// What `--lenient` skipped (file, line, why), so nothing is dropped silently.
    pub skipped: Vec<ingest::Skip>,
    pub table: TableInfo,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct Inputs {
    pub files: usize,
    pub rows: usize,
    pub records: usize,
    pub untrusted: usize,
    pub skipped: usize,
    pub cells: usize,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct Platform {
    pub label: Option<String>,
    pub gpu: Option<String>,
    pub gpus_per_node: Option<u32>,
    /// The sweep's NCCL versions (`2.18.3,2.19.1`), when the inputs show them.
    pub nccl_version: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Coverage {
    pub collective: String,
    pub ppn: u32,
    pub nodes: Vec<u32>,
    pub min_bytes: u64,
    pub max_bytes: u64,
    pub configs: Vec<String>,
    pub cells: usize,
}

#[derive(Clone, Debug, Serialize)]
pub struct Forced {
    pub collective: String,
    pub nodes: (u32, u32),
    pub ppn: (u32, u32),
    pub from_bytes: u64,
    pub to_bytes: u64,
    pub algorithm: String,
    pub protocol: String,
    pub channels: u8,
    /// Smallest expected speedup over the run (t_default / t_choice).
    pub gain: f64,
    pub basis: String,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct TableInfo {
    pub path: Option<PathBuf>,
    pub bytes: usize,
    pub digest: String,
    pub contexts: u32,
}

/// Compiles records already read.
pub fn compile_dataset(ds: &Dataset, opts: &CompileOptions) -> anyhow::Result<Compiled> {
    let (records, platform) = select_platform(&ds.records, opts.platform.as_deref())?;
    let cells = ingest::aggregate(&records);
    let mut c = compile_cells(&cells, &platform, opts, &ds.input_digests(&records))?;
    c.report.inputs = Inputs {
        files: ds.files,
        rows: ds.rows,
        records: records.len(),
        untrusted: records.iter().filter(|r| r.flags != 0).count(),
        skipped: ds.skipped.len(),
        cells: cells.len(),
    };
    c.report.skipped = ds.skipped.clone();
    c.report.notes.extend(ds.notes.iter().cloned());
    Ok(c)
}

/// Compiles aggregated cells: the pure core, also used by cross-validation.
pub fn compile_cells(
    cells: &[Cell],
    platform: &Platform,
    opts: &CompileOptions,
    inputs: &str,
) -> anyhow::Result<Compiled> {
    let (grids, notes) = build_grids(cells);
    if grids.is_empty() {
        bail!(
            "no measurements of a collective NCCL lets a tuner decide (broadcast, reduce, allgather, \
             reducescatter, allreduce) in the input: nothing to compile"
        );
    }
    let decided: Vec<GridDecisions> = grids
        .iter()
        .map(|g| decide(g, &fit(g), &opts.decide))
        .collect();
    let contexts = emit::plan(&grids, &decided, opts.decide.extrapolate);
    let trees = distil_all(&grids, &decided, opts.decide.extrapolate);

    let mut report = Report {
        platform: platform.clone(),
        ..Default::default()
    };
    describe(&mut report, &grids, &decided, &contexts, &notes, opts);
    for (coll, _, fid) in &trees {
        report.trees.insert(coll.name().to_string(), fid.clone());
    }
    let coverage_text = report
        .coverage
        .iter()
        .map(|c| {
            format!(
                "{} ppn {} nodes {:?} {}..{}",
                c.collective,
                c.ppn,
                c.nodes,
                fmt_bytes(c.min_bytes),
                fmt_bytes(c.max_bytes)
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    let mut meta: Vec<(&str, String)> = vec![
        ("dyncc_version", env!("CARGO_PKG_VERSION").to_string()),
        ("command", opts.command.clone()),
        ("inputs", inputs.to_string()),
        ("platform", platform.label.clone().unwrap_or_default()),
        ("gpu", platform.gpu.clone().unwrap_or_default()),
        ("gpus_per_node", platform.gpus_per_node.map(|g| g.to_string()).unwrap_or_default()),
        (
            "nccl_enum",
            "algo:tree=0,ring=1,collnet_direct=2,collnet_chain=3,nvls=4,nvls_tree=5,pat=6;proto:ll=0,ll128=1,simple=2"
                .to_string(),
        ),
        ("coverage", coverage_text),
        ("margin", format!("{}", opts.decide.margin)),
        ("extrapolate", format!("{}", opts.decide.extrapolate)),
    ];
    // Read by the plugin and `verify`/`explain`; absent when unknown.
    if let Some(v) = &platform.nccl_version {
        meta.push(("nccl_version", v.clone()));
    }
    let tree_list: Vec<(Coll, FlatTree<Leaf>)> =
        trees.into_iter().map(|(c, t, _)| (c, t)).collect();
    let bytes = emit::build(&contexts, &tree_list, &meta, opts.decide.extrapolate)?;
    let table = Table::from_bytes(&bytes)
        .map_err(|e| anyhow::anyhow!("internal error: emitted table does not load: {e}"))?;
    report.table = TableInfo {
        path: None,
        bytes: bytes.len(),
        digest: format!("{:016x}", table.digest()),
        contexts: table.context_count(),
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
fn select_platform(
    records: &[Record],
    want: Option<&str>,
) -> anyhow::Result<(Vec<Record>, Platform)> {
    let label = |r: &Record| -> Option<String> {
        r.platform
            .as_deref()
            .or(r.gpu.as_deref())
            .map(str::to_string)
    };
    let selected: Vec<Record> = match want {
        Some(w) => {
            let v: Vec<Record> = records
                .iter()
                .filter(|r| r.is_platform(w))
                .cloned()
                .collect();
            if v.is_empty() {
                let seen: BTreeSet<String> = records.iter().filter_map(label).collect();
                bail!(
                    "no records of platform `{w}`; the inputs hold: {}",
                    seen.into_iter().collect::<Vec<_>>().join(", ")
                );
            }
            v
        }
        None => {
            let mut counts: BTreeMap<String, usize> = BTreeMap::new();
            for r in records {
                if let Some(l) = label(r) {
                    *counts.entry(l).or_default() += 1;
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
            records.to_vec()
        }
    };
    let most = |f: &dyn Fn(&Record) -> Option<String>| -> Option<String> {
        let mut m: BTreeMap<String, usize> = BTreeMap::new();
        for r in &selected {
            if let Some(v) = f(r) {
                *m.entry(v).or_default() += 1;
            }
        }
        m.into_iter().max_by_key(|e| e.1).map(|e| e.0)
    };
    let platform = Platform {
        label: most(&|r| r.platform.as_deref().map(str::to_string)),
        gpu: most(&|r| r.gpu.as_deref().map(str::to_string)),
        gpus_per_node: most(&|r| {
            (r.nnodes > 0 && r.nranks % r.nnodes == 0)
                .then(|| format!("{:010}", r.nranks / r.nnodes))
        })
        .and_then(|s| s.parse().ok()),
        nccl_version: ingest::setup::nccl_versions(&selected),
    };
    Ok((selected, platform))
}

/// The grid points the distilled trees must reproduce: every bucket of
/// every node-count anchor, within the measured sizes.
fn distil_all(
    grids: &[Grid],
    decided: &[GridDecisions],
    extrapolate: bool,
) -> Vec<(Coll, FlatTree<Leaf>, Fidelity)> {
    let mut by_coll: BTreeMap<Coll, Vec<Sample>> = BTreeMap::new();
    for (g, d) in grids.iter().zip(decided) {
        let s = by_coll.entry(g.coll).or_default();
        for a in &d.anchors {
            let b = crate::decide::buckets(g, a, extrapolate);
            let (lo, hi) = (
                dyncc_tables::size_bucket(g.sizes[0]) as usize,
                dyncc_tables::size_bucket(*g.sizes.last().unwrap_or(&0)) as usize,
            );
            for (k, (decision, basis, gain)) in b.iter().enumerate().take(hi + 1).skip(lo) {
                s.push(Sample {
                    x: tree_features(bucket_lower_bound(k as u8), a.nodes, g.ppn),
                    decision: *decision,
                    basis: *basis,
                    gain: *gain as f64,
                });
            }
        }
    }
    by_coll
        .into_iter()
        .map(|(c, s)| {
            let (t, f) = distil(&s, MAX_TREE_DEPTH);
            (c, t, f)
        })
        .collect()
}

fn describe(
    r: &mut Report,
    grids: &[Grid],
    decided: &[GridDecisions],
    contexts: &[PlannedContext],
    notes: &GridNotes,
    opts: &CompileOptions,
) {
    for g in grids {
        r.coverage.push(Coverage {
            collective: g.coll.name().into(),
            ppn: g.ppn,
            nodes: g.nodes.clone(),
            min_bytes: g.sizes[0],
            max_bytes: *g.sizes.last().unwrap_or(&0),
            configs: g.configs.iter().map(|c| c.to_string()).collect(),
            cells: g.measured(),
        });
    }
    for (g, d) in grids.iter().zip(decided) {
        let e = r.left_alone.entry(g.coll.name().into()).or_default();
        for a in d.anchors.iter().filter(|a| a.measured) {
            for c in &a.per_size {
                if c.why != Why::Forced {
                    let k = serde_json::to_value(c.why)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_string));
                    *e.entry(k.unwrap_or_default()).or_default() += 1;
                }
            }
        }
    }
    for c in contexts {
        let mut k = 0;
        while k < c.buckets.len() {
            let (d, basis, _) = c.buckets[k];
            let mut j = k;
            let mut gain = f64::INFINITY;
            // One region per decision: the table splits it further by
            // basis, the report names the best basis inside it.
            let mut basis = basis;
            while j < c.buckets.len() && c.buckets[j].0 == d {
                gain = gain.min(c.buckets[j].2 as f64);
                basis = basis.min(c.buckets[j].1);
                j += 1;
            }
            if let Decision::Force {
                algo,
                proto,
                channels,
            } = d
            {
                r.forced.push(Forced {
                    collective: c.coll.name().into(),
                    nodes: c.nodes,
                    ppn: c.ppn,
                    from_bytes: bucket_lower_bound(k as u8),
                    to_bytes: bucket_upper_bound((j - 1) as u8),
                    algorithm: algo.name().into(),
                    protocol: proto.name().into(),
                    channels,
                    gain,
                    basis: basis_name(basis).into(),
                });
            }
            k = j;
        }
    }
    if !opts.decide.extrapolate {
        let colls: BTreeSet<&str> = grids.iter().map(|g| g.coll.name()).collect();
        for coll in colls {
            let gs: Vec<&Grid> = grids.iter().filter(|g| g.coll.name() == coll).collect();
            let lo = gs.iter().map(|g| g.sizes[0]).min().unwrap_or(0);
            let hi = gs
                .iter()
                .filter_map(|g| g.sizes.last().copied())
                .max()
                .unwrap_or(0);
            let nlo = gs.iter().map(|g| g.nodes[0]).min().unwrap_or(0);
            let nhi = gs
                .iter()
                .filter_map(|g| g.nodes.last().copied())
                .max()
                .unwrap_or(0);
            let ppns: Vec<String> = gs.iter().map(|g| g.ppn.to_string()).collect();
            r.outside.push(format!(
                "{coll}: sizes outside {}..{}, node counts outside {nlo}..{nhi}, and ranks per node other than {} are left to NCCL (--extrapolate extends the edges)",
                fmt_bytes(lo),
                fmt_bytes(hi),
                ppns.join("/")
            ));
        }
    }
    if notes.untunable > 0 {
        r.notes.push(format!(
            "{} cells of collectives NCCL never asks a tuner about (alltoall, sendrecv, ...) were read and not used",
            notes.untunable
        ));
    }
    if notes.uneven > 0 {
        r.notes.push(format!(
            "{} cells whose ranks are not a multiple of their nodes were not used",
            notes.uneven
        ));
    }
    if notes.partial_cells > 0 {
        r.notes.push(format!(
            "{} cells ran under settings a table cannot force ({}): they need both an algorithm and a protocol",
            notes.partial_cells,
            notes.partial_configs.iter().cloned().collect::<Vec<_>>().join(", ")
        ));
    }
}

pub fn basis_name(b: Basis) -> &'static str {
    match b {
        Basis::Measured => "measured",
        Basis::Interpolated => "interpolated",
        Basis::Extrapolated => "extrapolated",
    }
}

/// Human-readable report.
pub fn print_report(r: &Report) {
    let i = &r.inputs;
    println!(
        "read {} file(s): {} rows, {} records ({} flagged, not fitted), {} cells; {} skipped",
        i.files, i.rows, i.records, i.untrusted, i.cells, i.skipped
    );
    const SHOWN: usize = 50;
    for s in r.skipped.iter().take(SHOWN) {
        println!("  skipped {}:{}: {}", s.file.display(), s.line, s.reason);
    }
    if r.skipped.len() > SHOWN {
        println!(
            "  ... and {} more (--json lists them all)",
            r.skipped.len() - SHOWN
        );
    }
    let p = &r.platform;
    println!(
        "platform: {}{}{}",
        p.label.as_deref().unwrap_or("unnamed"),
        p.gpu
            .as_deref()
            .map(|g| format!(", {g}"))
            .unwrap_or_default(),
        p.gpus_per_node
            .map(|g| format!(", {g} GPUs per node"))
            .unwrap_or_default()
            + &p.nccl_version
                .as_deref()
                .map(|v| format!(", NCCL {v}"))
                .unwrap_or_default()
    );
    println!("\ncoverage:");
    for c in &r.coverage {
        println!(
            "  {:<14} {:>3} ranks/node  nodes {:<22} sizes {}..{}  {} configurations, {} cells",
            c.collective,
            c.ppn,
            c.nodes
                .iter()
                .map(|n| n.to_string())
                .collect::<Vec<_>>()
                .join(","),
            fmt_bytes(c.min_bytes),
            fmt_bytes(c.max_bytes),
            c.configs.len(),
            c.cells
        );
    }
    println!("\nforces (expected gain over NCCL's default):");
    if r.forced.is_empty() {
        if r.coverage.iter().all(|c| c.configs.len() <= 1) {
            println!(
                "  nothing: only NCCL's default was measured, so there is nothing to compare it with; \
                 sweep NCCL_ALGO/NCCL_PROTO settings too (`dyncc plan` writes such a sweep)"
            );
        } else {
            println!("  nothing: NCCL's own choices are best or within noise everywhere measured");
        }
    }
    for f in &r.forced {
        let nodes = if f.nodes.0 == f.nodes.1 {
            format!("{}", f.nodes.0)
        } else if f.nodes.1 == u32::MAX {
            format!("{}+", f.nodes.0)
        } else {
            format!("{}-{}", f.nodes.0, f.nodes.1)
        };
        let ppn = if f.ppn.1 == u32::MAX {
            "any".to_string()
        } else {
            f.ppn.0.to_string()
        };
        let ch = if f.channels > 0 {
            format!("/{}ch", f.channels)
        } else {
            String::new()
        };
        println!(
            "  {:<14} nodes {:<7} ppn {:<4} {:>9} .. <{:<9} {:>20}  {:>8}  {}",
            f.collective,
            nodes,
            ppn,
            fmt_bytes(f.from_bytes),
            fmt_bytes(f.to_bytes.saturating_add(1)),
            format!("{}/{}{}", f.algorithm, f.protocol, ch),
            fmt_gain(f.gain),
            f.basis
        );
    }
    println!("\nleaves NCCL alone (measured points):");
    for (coll, why) in &r.left_alone {
        let parts: Vec<String> = why
            .iter()
            .map(|(k, v)| format!("{v} {}", k.replace('_', " ")))
            .collect();
        println!(
            "  {:<14} {}",
            coll,
            if parts.is_empty() {
                "none".into()
            } else {
                parts.join(", ")
            }
        );
    }
    for o in &r.outside {
        println!("  {o}");
    }
    for n in &r.notes {
        println!("note: {n}");
    }
    println!("\nexplain trees:");
    for (coll, f) in &r.trees {
        println!(
            "  {:<14} {} leaves, depth {}, reproduces {:.1} % of {} grid points",
            coll,
            f.leaves,
            f.depth,
            100.0 * (1.0 - f.disagree as f64 / f.points.max(1) as f64),
            f.points
        );
    }
    let t = &r.table;
    println!(
        "\n{} ({} bytes, {} contexts, digest {})",
        t.path
            .as_ref()
            .map(|p| format!("wrote {}", p.display()))
            .unwrap_or_else(|| "table".into()),
        t.bytes,
        t.contexts,
        t.digest
    );
}

/// Compile NCCL sweep measurements into a decision table.
///
/// Reads nccl-tests logs (text or -J JSON) and tuner CSVs from files or
/// directories, fits a model per candidate setting, and writes a table that
/// forces a setting only where the measurements say it beats NCCL's own
/// choice by more than the noise and --margin. It prints where it forces
/// what, the expected gain, and where it leaves NCCL alone and why.
///
/// Example:
///   dyncc compile datasets/real/nvidia-dgx1v-allreduce.csv -o dgx1v.tbl
#[derive(clap::Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct CompileArgs {
    /// Sweep files or directories (nccl-tests text or JSON logs, tuner CSV).
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
    /// Where to write the table (written atomically; nothing is written on error).
    #[arg(short, long)]
    pub output: PathBuf,
    /// Force a setting only when its expected gain over NCCL's default
    /// exceeds this fraction on top of the measurement noise (0.03 = 3 %).
    #[arg(long, default_value_t = 0.03)]
    pub margin: f64,
    /// Measurement-noise standard deviations a gain must clear.
    #[arg(long, default_value_t = 0.5)]
    pub noise_z: f64,
    /// Extend decisions beyond the measured sizes, node counts and ranks per node.
    #[arg(long)]
    pub extrapolate: bool,
    /// Compile only records of this platform label or GPU model.
    #[arg(long)]
    pub platform: Option<String>,
    #[command(flatten)]
    pub ingest: ingest::args::IngestArgs,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// A collective measured only with forced settings has nothing to compare
/// against (the gain is over NCCL's own choice), so nothing of it could be
/// compiled. Strict: an error naming its first file. Lenient: its records
/// are dropped and listed as skipped.
pub fn check_default_runs(ds: &mut Dataset, lenient: bool) -> anyhow::Result<()> {
    /// Records, whether one is a default run, and the first place seen.
    type Seen = (usize, bool, Option<(PathBuf, u32)>);
    let mut seen: BTreeMap<&'static str, Seen> = BTreeMap::new();
    for r in &ds.records {
        let e = seen.entry(r.collective.name()).or_insert((0, false, None));
        e.0 += 1;
        e.1 |= r.algo.is_none() && r.proto.is_none() && r.channels.is_none();
        if e.2.is_none() {
            e.2 = Some(((*r.source.file).clone(), r.source.line));
        }
    }
    for (coll, (n, has_default, first)) in seen {
        if has_default {
            continue;
        }
        let (file, line) = first.unwrap_or_default();
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
        ds.records.retain(|r| r.collective.name() != coll);
        ds.skipped.push(ingest::Skip {
            file,
            line,
            reason: format!("{why}; dropped {coll}"),
        });
    }
    Ok(())
}

/// Repeats of one measurement from different runs (files) whose medians
/// differ by more than this factor are not noise: one run was broken.
pub const REPEAT_FACTOR: f64 = 10.0;

/// ... at this many cells between the same two files (fewer is a warm-up
/// artefact, not a broken run).
pub const REPEAT_MIN_CELLS: usize = 3;

/// Compares repeats of each cell across files: when two runs of the same
/// collective, shape, size and setting on the same platform disagree by more
/// than [`REPEAT_FACTOR`], the median would silently blend a broken run into
/// the decision. Strict: an error naming both places. Lenient: the cell's
/// records are dropped and listed as skipped.
pub fn check_repeats(ds: &mut Dataset, lenient: bool) -> anyhow::Result<()> {
    use std::collections::HashMap;
    type Group<'a> = (crate::record::CellKey, Option<&'a str>, Option<&'a str>);
    /// Per file: the group's times there and its first line.
    type PerFile<'a> = BTreeMap<&'a std::path::Path, (Vec<f64>, u32)>;
    // Per group, per file: (times, first line).
    let mut groups: HashMap<Group<'_>, PerFile<'_>> = HashMap::new();
    for r in &ds.records {
        if r.flags != 0 {
            continue;
        }
        let g = (r.key(), r.platform.as_deref(), r.gpu.as_deref());
        let e = groups
            .entry(g)
            .or_default()
            .entry(r.source.file.as_path())
            .or_insert((Vec::new(), r.source.line));
        e.0.push(r.time_us);
        e.1 = e.1.min(r.source.line);
    }
    type Bad = (
        crate::record::CellKey,
        Option<String>,
        String,
        (PathBuf, PathBuf),
    );
    let mut bad: Vec<Bad> = Vec::new();
    for ((key, platform, gpu), files) in &groups {
        if files.len() < 2 {
            continue;
        }
        let med = |v: &[f64]| {
            let mut v = v.to_vec();
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let meds: Vec<(&std::path::Path, f64, u32)> =
            files.iter().map(|(f, (t, l))| (*f, med(t), *l)).collect();
        let lo = meds.iter().min_by(|a, b| a.1.total_cmp(&b.1)).unwrap();
        let hi = meds.iter().max_by(|a, b| a.1.total_cmp(&b.1)).unwrap();
        if hi.1 > lo.1 * REPEAT_FACTOR {
            let what = format!(
                "{}:{}: {} {} ranks on {} node(s), {} bytes, {}: {:.2} us here but {:.2} us at {}:{} \
                 ({:.0}x apart); expected repeats of one measurement to agree within {REPEAT_FACTOR}x \
                 (was one run on a broken node or other hardware?)",
                hi.0.display(),
                hi.2,
                key.collective.name(),
                key.nranks,
                key.nnodes,
                key.nbytes,
                key.config,
                hi.1,
                lo.1,
                lo.0.display(),
                lo.2,
                hi.1 / lo.1,
            );
            let pair = (hi.0.to_path_buf(), lo.0.to_path_buf());
            bad.push((*key, platform.or(*gpu).map(String::from), what, pair));
        }
    }
    // One cell far off is a warm-up artefact (the first size of a run often
    // is); a broken run is off at many sizes against the same other run.
    let mut pairs: BTreeMap<(PathBuf, PathBuf), usize> = BTreeMap::new();
    for b in &bad {
        *pairs.entry(b.3.clone()).or_default() += 1;
    }
    bad.retain(|b| pairs[&b.3] >= REPEAT_MIN_CELLS);
    let mut bad: Vec<_> = bad.into_iter().map(|(k, p, w, _)| (k, p, w)).collect();
    if bad.is_empty() {
        return Ok(());
    }
    bad.sort_by(|a, b| a.2.cmp(&b.2));
    if !lenient {
        bail!(
            "{}{}; remove the bad run, or pass --lenient to drop the cell",
            bad[0].2,
            if bad.len() > 1 {
                format!(" (and {} more such cells)", bad.len() - 1)
            } else {
                String::new()
            }
        );
    }
    let drop: BTreeSet<String> = bad.iter().map(|(k, p, _)| format!("{k:?}{p:?}")).collect();
    ds.records.retain(|r| {
        let p = r.platform.as_deref().or(r.gpu.as_deref()).map(String::from);
        !drop.contains(&format!("{:?}{p:?}", r.key()))
    });
    for (_, _, what) in bad {
        let (place, reason) = what.split_once(": ").unwrap_or(("", &what));
        let (file, line) = place.rsplit_once(':').unwrap_or((place, "0"));
        ds.skipped.push(ingest::Skip {
            file: file.into(),
            line: line.parse().unwrap_or(0),
            reason: format!("{reason}; dropped the cell"),
        });
    }
    Ok(())
}

pub fn run(a: CompileArgs) -> anyhow::Result<i32> {
    if !(a.margin.is_finite() && (0.0..1.0).contains(&a.margin)) {
        bail!(
            "--margin {}: expected a fraction between 0 and 1, e.g. 0.03 for 3 %",
            a.margin
        );
    }
    if !(a.noise_z.is_finite() && a.noise_z >= 0.0) {
        bail!("--noise-z {}: expected a non-negative number", a.noise_z);
    }
    let ingest_opts = a.ingest.options(!a.json, false)?;
    let mut ds = ingest::read_paths(&a.paths, &ingest_opts)?;
    ingest::setup::select_setup(&mut ds, &a.ingest.setup_choice()?)?;
    check_repeats(&mut ds, a.ingest.lenient)?;
    check_default_runs(&mut ds, a.ingest.lenient)?;
    if ds.records.is_empty() {
        bail!(
            "no measurements found in {}; expected nccl-tests logs (text or JSON) or a tuner CSV \
             (`dyncc inspect PATH` shows what each file held)",
            a.paths
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let opts = CompileOptions {
        decide: DecideOptions {
            margin: a.margin,
            z: a.noise_z,
            extrapolate: a.extrapolate,
        },
        platform: a.platform.clone(),
        command: std::env::args().collect::<Vec<_>>().join(" "),
    };
    let mut c = compile_dataset(&ds, &opts)?;
    crate::atomic::write_atomic(&a.output, &c.bytes)
        .with_context(|| format!("writing the table to {}", a.output.display()))?;
    c.report.table.path = Some(a.output.clone());
    if a.json {
        println!("{}", serde_json::to_string_pretty(&c.report)?);
    } else {
        print_report(&c.report);
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::features::tests::{cell, cfg};
    use crate::record::{Algo, Collective, Config, Proto};
    use dyncc_tables::{size_bucket, NUM_BUCKETS};

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
            let c = compile_cells(&sweep(), &Platform::default(), &opts, "").unwrap();
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
                    let spec = t.specialise(ranks, nodes as u64);
                    for b in 0..NUM_BUCKETS {
                        let bytes = bucket_lower_bound(b as u8);
                        if size_bucket(bytes) as usize != b {
                            continue; // buckets 4..=7 hold no size
                        }
                        let want = first.buckets[b].0;
                        let got = t
                            .lookup(pc.coll as u32, ranks, nodes as u64, bytes, 1, 0)
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
            &sweep(),
            &Platform::default(),
            &CompileOptions::default(),
            "",
        )
        .unwrap();
        let t = Table::from_bytes(&c.bytes).unwrap();
        let d = |coll: Coll, nodes: u64, bytes: u64| {
            t.lookup(coll as u32, nodes * 8, nodes, bytes, 1, 0)
                .decision
        };
        let tree_ll = Decision::Force {
            algo: Algo::Tree,
            proto: Proto::LL,
            channels: 0,
        };
        let ring_simple = Decision::Force {
            algo: Algo::Ring,
            proto: Proto::Simple,
            channels: 0,
        };
        assert_eq!(d(Coll::AllReduce, 2, 1024), tree_ll);
        assert_eq!(d(Coll::AllReduce, 2, 1 << 20), Decision::Default);
        assert_eq!(d(Coll::AllReduce, 16, 1 << 26), ring_simple);
        assert_eq!(d(Coll::AllReduce, 2, 1 << 26), Decision::Default);
        // 8 nodes was never measured: interpolated between 4 and 16.
        assert_eq!(d(Coll::AllReduce, 8, 1 << 26), ring_simple);
        assert_eq!(
            t.lookup(Coll::AllReduce as u32, 64, 8, 1 << 26, 1, 0).basis,
            Some(Basis::Interpolated)
        );
        // Outside the hull: 32 nodes, 4 ranks per node, 1 GiB.
        assert_eq!(d(Coll::AllReduce, 32, 1024), Decision::Default);
        assert_eq!(
            t.lookup(Coll::AllReduce as u32, 8, 2, 1024, 1, 0).decision,
            Decision::Default
        );
        assert_eq!(d(Coll::AllReduce, 2, 1 << 30), Decision::Default);
        assert_eq!(
            d(Coll::AllGather, 2, 1024),
            Decision::Force {
                algo: Algo::Ring,
                proto: Proto::LL,
                channels: 0
            }
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
            collective: Collective::AllReduce,
            nbytes: 8,
            nranks: 8,
            nnodes: 1,
            gpu: None,
            nccl_version: None,
            platform: Some(p.into()),
            algo: None,
            proto: None,
            channels: None,
            time_us: 1.0,
            in_place: false,
            dtype: None,
            pipe_ops: 1,
            reg_buff: false,
            source: a.source.clone(),
            flags: 0,
            env: None,
        };
        let recs = vec![rec("DGX-1V"), rec("DGX-2V")];
        let e = select_platform(&recs, None).err().unwrap().to_string();
        assert!(
            e.contains("mix platforms") && e.contains("--platform"),
            "{e}"
        );
        let (v, p) = select_platform(&recs, Some("dgx-2v")).unwrap();
        assert_eq!(v.len(), 1);
        assert_eq!(p.label.as_deref(), Some("DGX-2V"));
    }
}
