//! `dyncc inspect`: read sweep files and summarise what they hold, what was
//! skipped and why, and what looks suspicious. Always lenient: it reports
//! problems instead of failing on them. Trace files the plugin writes
//! (`DYNCC_TRACE`) are recognised by their magic and summarised apart
//! (`traces`).

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Serialize;

use crate::ingest::args::IngestArgs;
use crate::ingest::fold::GroupKey;
use crate::ingest::{Dataset, Skip, UNRESOLVED};
use crate::record::flags;

/// Read sweep files and summarise what they hold.
///
/// Reads nccl-tests text logs (any era, srun/OpenMPI prefixes, NCCL INFO
/// noise), nccl-tests -J JSON, tuner-schema CSV and NVIDIA `data/<nodes>.csv`,
/// from files or whole directory trees. Shows, per file, where each knob
/// (NCCL_ALGO, NCCL_PROTO, channels) came from; rows whose knobs cannot be
/// established are counted and reported as "knobs unknown". Ends with the
/// command to run next. Always lenient: problems are reported, not fatal.
/// The labelling options are the same as `compile`'s and `eval`'s.
///
/// Examples:
///   dyncc inspect logs/ --assume default
///   dyncc inspect run.log --assume NCCL_ALGO=Ring --assume NCCL_PROTO=LL128 --json
///   dyncc inspect sweep/ --name-pattern '{coll}_n{nodes}_{algo}_{proto}.r{repeat}.log'
///   dyncc inspect sweep/ --manifest sweep/manifest.csv
///   dyncc inspect /shared/traces/        # trace files from DYNCC_TRACE
#[derive(clap::Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct InspectArgs {
    /// Files or directories to read.
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
    /// Print a JSON object instead of the human summary.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub ingest: IngestArgs,
}

#[derive(Serialize)]
struct Summary {
    files: usize,
    rows: usize,
    records: usize,
    bytes: u64,
    zero_size_rows: usize,
    skipped: Vec<Skip>,
    ignored_files: Vec<PathBuf>,
    collectives: BTreeMap<String, usize>,
    algorithms: BTreeMap<String, usize>,
    protocols: BTreeMap<String, usize>,
    channels: BTreeMap<String, usize>,
    nodes: Vec<u32>,
    ranks: Vec<u32>,
    gpus: BTreeMap<String, usize>,
    nccl_versions: Vec<String>,
    coverage: Vec<Coverage>,
    anomalies: BTreeMap<String, usize>,
    anomaly_list: Vec<crate::ingest::Anomaly>,
    warmup_outliers: usize,
    wrong_data: usize,
    knob_ignored: usize,
    unresolved_records: usize,
    cells: usize,
    per_file: Vec<crate::ingest::FileReport>,
    /// Content counted once, paths read once, unused manifest rows, setups.
    notes: Vec<String>,
    /// The setups (NCCL version, other NCCL_* variables) and their records.
    setups: BTreeMap<String, usize>,
    /// What to run next.
    next: String,
}

/// (collective, nodes, ranks, configuration).
type CovKey = (String, u32, u32, String);

#[derive(Serialize, PartialEq, Eq, PartialOrd, Ord)]
struct Coverage {
    collective: String,
    nodes: u32,
    ranks: u32,
    config: String,
    sizes: usize,
    records: usize,
}

fn label<T>(k: &GroupKey, v: Option<T>, name: impl Fn(T) -> String) -> String {
    if k.flags & UNRESOLVED != 0 {
        "unknown".into()
    } else {
        v.map(name).unwrap_or_else(|| "default".into())
    }
}

/// Summarises a sweep read folded: every count is over the records a group
/// stands for, never a record held per row.
fn summarise(ds: &Dataset) -> Summary {
    let mut s = Summary {
        files: ds.files,
        rows: ds.rows,
        records: ds.measurements(),
        bytes: ds.bytes,
        zero_size_rows: ds.reports.iter().map(|r| r.zero_size_rows).sum(),
        skipped: ds.skipped.clone(),
        ignored_files: ds.ignored.clone(),
        collectives: BTreeMap::new(),
        algorithms: BTreeMap::new(),
        protocols: BTreeMap::new(),
        channels: BTreeMap::new(),
        nodes: Vec::new(),
        ranks: Vec::new(),
        gpus: BTreeMap::new(),
        nccl_versions: Vec::new(),
        coverage: Vec::new(),
        anomalies: BTreeMap::new(),
        anomaly_list: ds.anomalies.clone(),
        warmup_outliers: ds.count_flag(flags::WARMUP_OUTLIER),
        wrong_data: ds.count_flag(flags::WRONG_DATA),
        knob_ignored: ds.count_flag(flags::KNOB_IGNORED),
        unresolved_records: ds.count_flag(UNRESOLVED),
        cells: 0,
        per_file: ds.reports.clone(),
        notes: ds.notes.clone(),
        setups: BTreeMap::new(),
        next: String::new(),
    };
    let mut cov: BTreeMap<CovKey, (std::collections::BTreeSet<u64>, usize)> = BTreeMap::new();
    for g in &ds.folded.groups {
        let (k, n) = (&g.key, g.samples.len());
        if n == 0 {
            continue;
        }
        let c = &k.run;
        *s.collectives
            .entry(c.collective.name().to_string())
            .or_default() += n;
        *s.algorithms
            .entry(label(k, c.config.algo, |a| a.name().to_string()))
            .or_default() += n;
        *s.protocols
            .entry(label(k, c.config.proto, |p| p.name().to_string()))
            .or_default() += n;
        *s.channels
            .entry(label(k, c.config.channels, |c| c.to_string()))
            .or_default() += n;
        *s.gpus
            .entry(k.run.gpu.as_deref().unwrap_or("unknown").to_string())
            .or_default() += n;
        if c.nnodes > 0 {
            s.nodes.push(c.nnodes);
        }
        if c.nranks > 0 {
            s.ranks.push(c.nranks);
        }
        if let Some(v) = k.run.nccl_version {
            s.nccl_versions
                .push(crate::ingest::setup::version_string(v));
        }
        let setup = crate::ingest::setup::describe(&k.run);
        *s.setups.entry(setup).or_default() += n;
        let config = if k.flags & UNRESOLVED != 0 {
            "unknown".to_string()
        } else {
            c.config.to_string()
        };
        let e = cov
            .entry((c.collective.name().to_string(), c.nnodes, c.nranks, config))
            .or_default();
        e.0.insert(k.nbytes);
        e.1 += n;
    }
    for v in [&mut s.nodes, &mut s.ranks] {
        v.sort_unstable();
        v.dedup();
    }
    s.nccl_versions.sort();
    s.nccl_versions.dedup();
    s.coverage = cov
        .into_iter()
        .map(
            |((collective, nodes, ranks, config), (sizes, records))| Coverage {
                collective,
                nodes,
                ranks,
                config,
                sizes: sizes.len(),
                records,
            },
        )
        .collect();
    for a in &ds.anomalies {
        *s.anomalies.entry(a.kind.to_string()).or_default() += 1;
    }
    let cells = ds.folded.cells();
    s.cells = cells.len();
    // Runs off the trend of their neighbouring node counts (the check
    // compile makes), so they are seen before a table leans on them.
    s.notes.extend(crate::nodes::off_trend_notes(&cells));
    s
}

pub fn run(mut args: InspectArgs) -> anyhow::Result<i32> {
    let crate::ingest::traces::Found {
        files: found,
        skipped,
    } = crate::ingest::traces::find(&mut args.paths);
    // What the walk left unfollowed below a directory of traces alone; the
    // sweep reader names what lies below the directories it reads.
    for s in skipped
        .iter()
        .filter(|s| !args.paths.iter().any(|p| s.file.starts_with(p)))
    {
        eprintln!("warning: skipped {}: {}", s.file.display(), s.reason);
    }
    if !found.is_empty() {
        let bad = traces::print(&found, args.json);
        if args.paths.is_empty() {
            return Ok(if bad { 2 } else { 0 });
        }
    }
    // indicatif draws only when stderr is a terminal.
    let mut opts = args.ingest.options(true, true)?;
    opts.lenient = true;
    let mut ds = crate::ingest::read_paths_folded(&args.paths, &opts)?;
    // What compile would keep: only the setup asked for (mixed setups
    // without a choice are reported, not refused).
    if args.ingest.setup.is_some() || args.ingest.pool_setups {
        crate::ingest::setup::select_setup(&mut ds, &args.ingest.setup_choice()?)?;
    }
    let mut s = summarise(&ds);
    s.next = next_command(&args, &s);
    let s = s;
    if args.json {
        let mut j = crate::output::pretty(&s)?;
        j.push('\n');
        let _ = std::io::Write::write_all(&mut std::io::stdout().lock(), j.as_bytes());
    } else {
        print_human(&s);
    }
    if ds.rows == 0 {
        eprintln!(
            "error: no measurements found in {} file(s) ({} skipped, {} not sweep files); dyncc \
             reads nccl-tests text/JSON output and tuner-schema CSV",
            ds.files,
            ds.skipped.len(),
            ds.ignored.len()
        );
        return Ok(2);
    }
    Ok(0)
}

/// The command to run next: label what is unlabelled, pick a setup, or
/// compile with the same options.
fn next_command(args: &InspectArgs, s: &Summary) -> String {
    let q = |p: &PathBuf| {
        let p = p.display().to_string();
        if p.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-=./,:+@".contains(&b))
        {
            p
        } else {
            format!("'{}'", p.replace('\'', "'\\''"))
        }
    };
    let paths: Vec<String> = args.paths.iter().map(q).collect();
    let mut words = args.ingest.to_words();
    if args.ingest.lenient {
        words.push("--lenient".into());
    }
    let base = |cmd: &str, extra: &str| {
        let mut w = vec![format!("dyncc {cmd}")];
        w.extend(paths.iter().cloned());
        w.extend(words.iter().cloned());
        if !extra.is_empty() {
            w.push(extra.to_string());
        }
        w.join(" ")
    };
    if s.rows == 0 {
        return "nothing to compile: dyncc reads nccl-tests text/JSON output and tuner-schema CSV"
            .into();
    }
    if s.per_file.iter().any(|f| !f.resolved) {
        return format!(
            "label the files whose knobs are unknown (see above), then check again: `{}` if \
             NCCL chose in those runs, or --name-pattern / --manifest (`dyncc inspect --help`)",
            base("inspect", "--assume default")
        );
    }
    let known_envs = s
        .setups
        .keys()
        .filter(|k| !k.ends_with("environment not shown"))
        .count();
    if (s.nccl_versions.len() > 1 || known_envs > 1)
        && args.ingest.setup.is_none()
        && !args.ingest.pool_setups
    {
        return format!(
            "the files mix setups (see above): `{}` names the --setup that picks each one; or \
             add --pool-setups if they may be pooled",
            base("compile", "-o cluster.tbl")
        );
    }
    base("compile", "-o cluster.tbl")
}

fn map_line(m: &BTreeMap<String, usize>) -> String {
    m.iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn print_human(s: &Summary) {
    use std::fmt::Write as _;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "{} sweep files, {} rows ({} zero-size), {} records, {} cells; {} other files ignored",
        s.files,
        s.rows,
        s.zero_size_rows,
        s.records,
        s.cells,
        s.ignored_files.len()
    );
    let _ = writeln!(o, "collectives: {}", map_line(&s.collectives));
    let _ = writeln!(o, "algorithms:  {}", map_line(&s.algorithms));
    let _ = writeln!(o, "protocols:   {}", map_line(&s.protocols));
    let _ = writeln!(o, "channels:    {}", map_line(&s.channels));
    let _ = writeln!(
        o,
        "nodes:       {}",
        s.nodes
            .iter()
            .map(|n| n.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let _ = writeln!(o, "gpus:        {}", map_line(&s.gpus));
    if !s.nccl_versions.is_empty() {
        let _ = writeln!(o, "nccl:        {}", s.nccl_versions.join(", "));
    }
    let _ = writeln!(o, "\ncoverage (collective x nodes x configuration):");
    let _ = writeln!(
        o,
        "  {:<14} {:>6} {:>6}  {:<22} {:>6} {:>8}",
        "collective", "nodes", "ranks", "config", "sizes", "records"
    );
    // A shape no file or label gave is 0 in the records: shown as `?`.
    let count = |n: u32| {
        if n == 0 {
            "?".to_string()
        } else {
            n.to_string()
        }
    };
    for c in &s.coverage {
        let _ = writeln!(
            o,
            "  {:<14} {:>6} {:>6}  {:<22} {:>6} {:>8}",
            c.collective,
            count(c.nodes),
            count(c.ranks),
            c.config,
            c.sizes,
            c.records
        );
    }
    if !s.setups.is_empty() {
        let _ = writeln!(o, "setups:      {}", map_line(&s.setups));
    }
    let _ = writeln!(o, "\nknobs per file (where each came from):");
    const FILES_SHOWN: usize = 40;
    for f in s.per_file.iter().take(FILES_SHOWN) {
        // What is unknown, and the remedy, is said once: below.
        let knobs = if !f.resolved {
            "not established (see below)"
        } else if f.knobs.is_empty() {
            "-"
        } else {
            &f.knobs
        };
        let _ = writeln!(
            o,
            "  {}: {}{}",
            f.file.display(),
            knobs,
            f.duplicate_of
                .as_ref()
                .map(|d| format!(" [same content as {}: counted once]", d.display()))
                .unwrap_or_default()
        );
    }
    if s.per_file.len() > FILES_SHOWN {
        let _ = writeln!(
            o,
            "  ... and {} more (--json lists them all)",
            s.per_file.len() - FILES_SHOWN
        );
    }
    if !s.notes.is_empty() {
        let _ = writeln!(o, "\nnotes:");
        for n in &s.notes {
            let _ = writeln!(o, "  {n}");
        }
    }
    let unresolved: Vec<_> = s.per_file.iter().filter(|f| !f.resolved).collect();
    if !unresolved.is_empty() {
        let _ = writeln!(
            o,
            "\nknobs or shape unknown in {} file(s) (rows counted, not usable for compile):",
            unresolved.len()
        );
        // Files with the same problem share its one statement (a folder of
        // unlabelled logs gets the remedy once, not once per file).
        let mut reasons: Vec<(&str, Vec<&crate::ingest::FileReport>)> = Vec::new();
        for f in &unresolved {
            match reasons.iter_mut().find(|(r, _)| *r == f.knobs) {
                Some((_, files)) => files.push(f),
                None => reasons.push((&f.knobs, vec![f])),
            }
        }
        for (reason, files) in &reasons {
            let _ = writeln!(o, "  {reason}:");
            for f in files.iter().take(20) {
                let _ = writeln!(o, "    {} ({} rows)", f.file.display(), f.rows);
            }
            if files.len() > 20 {
                let _ = writeln!(
                    o,
                    "    ... and {} more (--json lists them all)",
                    files.len() - 20
                );
            }
        }
    }
    if !s.skipped.is_empty() {
        let _ = writeln!(o, "\nskipped ({}):", s.skipped.len());
        for k in s.skipped.iter().take(30) {
            let _ = writeln!(o, "  {}:{}: {}", k.file.display(), k.line, k.reason);
        }
        if s.skipped.len() > 30 {
            let _ = writeln!(o, "  ... and {} more (see --json)", s.skipped.len() - 30);
        }
    }
    if !s.anomalies.is_empty() {
        let _ = writeln!(o, "\nanomalies: {}", map_line(&s.anomalies));
        for a in s
            .anomaly_list
            .iter()
            .filter(|a| a.kind != "unresolved")
            .take(15)
        {
            let _ = writeln!(
                o,
                "  {}:{}: {}: {}",
                a.file.display(),
                a.line,
                a.kind,
                a.detail
            );
        }
    }
    let _ = writeln!(o,
        "\nwarm-up outliers {}, wrong-data records {}, knob-ignored records {}, unresolved records {}",
        s.warmup_outliers, s.wrong_data, s.knob_ignored, s.unresolved_records
    );
    let _ = writeln!(o, "\nnext: {}", s.next);
    // A closed pipe (`| head`) is not an error worth a panic.
    let _ = std::io::Write::write_all(&mut std::io::stdout().lock(), o.as_bytes());
}

/// Trace files (`DYNCC_TRACE`, format in `tables/FORMAT.md`): found among
/// the paths and summarised per file.
mod traces {
    use std::path::{Path, PathBuf};

    use dyncc_tables::Trace;

    /// Prints a summary per file (JSON lines with `json`); true when a
    /// file was not a valid trace (said on stderr with what to do).
    pub fn print(files: &[PathBuf], json: bool) -> bool {
        let mut bad = false;
        for f in files {
            let bytes = match crate::input::read(f, &crate::input::TRACE) {
                Ok(b) => b,
                Err(e) => {
                    eprintln!("error: {e:#}");
                    bad = true;
                    continue;
                }
            };
            // Every record checked as compile checks it: a mean outside
            // [min, max] would print as a time no collective took.
            let t = Trace::from_bytes(&bytes)
                .map_err(|e| e.to_string())
                .and_then(|t| {
                    crate::ingest::traces::check_records(&t)?;
                    Ok(t)
                });
            match t {
                Ok(t) if json => println!("{}", to_json(f, &t)),
                Ok(t) => print_human(f, &t),
                Err(e) => {
                    eprintln!(
                        "error: {}: not a valid dyncc trace file: {e}; skip it (a trace is \
                         written whole by the plugin, so this one was damaged or is not a trace)",
                        f.display()
                    );
                    bad = true;
                }
            }
        }
        bad
    }

    fn version(code: u32) -> String {
        if code == 0 {
            "unknown".into()
        } else {
            format!("{}.{}.{}", code / 10000, code % 10000 / 100, code % 100)
        }
    }

    fn print_human(f: &Path, t: &Trace<'_>) {
        let h = t.head();
        let total: u64 = t.records().map(|r| r.count).sum();
        println!(
            "trace {}: host {} pid {} job {} NCCL {} profiler v{} table {} platform {} sweep {}; {} \
             collectives in {} cells; dropped {} (table full) {} (pool full), {} untimed",
            f.display(),
            h.host,
            h.pid,
            if h.job_id.is_empty() {
                "none"
            } else {
                h.job_id
            },
            version(h.nccl_version),
            h.profiler_abi,
            h.table_digest
                .map(|d| format!("{d:016x}"))
                .unwrap_or_else(|| "none".into()),
            match (h.platform, h.gpu) {
                ("", "") => "unknown".to_string(),
                (p, "") | ("", p) => p.to_string(),
                (p, g) => format!("{p} ({g})"),
            },
            h.sweep
                .map(|d| format!("{d:016x}"))
                .unwrap_or_else(|| "unknown".into()),
            total,
            t.n_records(),
            h.dropped_table_full,
            h.dropped_pool_full,
            h.untimed
        );
        let comms: Vec<_> = t.comms().collect();
        for (i, c) in comms.iter().enumerate() {
            let tags: Vec<String> = t
                .tags()
                .filter(|g| g.comm as usize == i)
                .map(|g| format!("{:#x}", g.tag))
                .collect();
            println!(
                "  comm {i}: {:#018x} {:?} {} nodes {} ranks (rank {} recorded){}",
                c.comm_id,
                c.name,
                c.n_nodes,
                c.n_ranks,
                c.rank,
                if tags.is_empty() {
                    String::new()
                } else {
                    format!(" tags {}", tags.join(","))
                }
            );
        }
        let o = t.other_paths();
        if o.symmetric > 0 || o.copy_engine > 0 {
            println!(
                "  paths the tuner cannot choose (not records, never read as an algorithm and \
                 protocol): {} collectives ran as a symmetric kernel, {} on the copy engines",
                o.symmetric, o.copy_engine
            );
        }
        let variants: Vec<String> = t
            .variants()
            .map(|v| format!("{} {}", v.name(), v.count))
            .collect();
        if !variants.is_empty() {
            println!("  symmetric kernel variants: {}", variants.join(", "));
        }
        println!(
            "  comm collective bytes algo proto channels chosen-by count geomean-us min-us max-us"
        );
        for r in t.records() {
            println!(
                "  {} {} {} {} {} {} {} {} {:.2} {:.2} {:.2}",
                r.comm,
                r.coll.name(),
                r.n_bytes,
                r.setting.algo.name(),
                r.setting.proto.name(),
                r.setting.channels,
                r.source.name(),
                r.count,
                r.geomean_ns() / 1e3,
                r.min_ns as f64 / 1e3,
                r.max_ns as f64 / 1e3
            );
        }
        let shapes = recorded_shares(t);
        if !shapes.is_empty() {
            println!(
                "  shapes (calls the tuner answered; the plugin stops recording a shape once it \
                 has the evidence; symmetric and copy-engine: its collectives NCCL ran on a path \
                 the tuner cannot force): comm collective sizes calls recorded symmetric \
                 copy-engine"
            );
            for s in &shapes {
                println!(
                    "  {} {} {}..<{} {} {} {} {}",
                    s.comm,
                    s.coll,
                    s.from_bytes,
                    s.to_bytes,
                    s.calls,
                    s.recorded,
                    s.symmetric,
                    s.copy_engine
                );
            }
        }
    }

    /// Per shape of a major-3 trace: calls answered, collectives recorded
    /// (the records of its communicator and collective whose size falls in
    /// its bucket), and those that ran as a symmetric kernel or on the copy
    /// engines (minor 3; 0 in older files).
    #[derive(serde::Serialize)]
    struct ShapeShare {
        comm: u16,
        coll: &'static str,
        from_bytes: u64,
        to_bytes: u64,
        calls: u64,
        recorded: u64,
        symmetric: u16,
        copy_engine: u16,
    }

    fn recorded_shares(t: &Trace<'_>) -> Vec<ShapeShare> {
        t.shapes()
            .map(|s| ShapeShare {
                comm: s.comm,
                coll: s.coll.name(),
                from_bytes: dyncc_tables::bucket_lower_bound(s.bucket),
                to_bytes: dyncc_tables::bucket_lower_bound(s.bucket.saturating_add(1)),
                calls: s.calls,
                recorded: t
                    .records()
                    .filter(|r| {
                        r.comm == s.comm
                            && r.coll == s.coll
                            && dyncc_tables::size_bucket(r.n_bytes) == s.bucket
                    })
                    .map(|r| r.count)
                    .sum(),
                symmetric: s.symmetric,
                copy_engine: s.copy_engine,
            })
            .collect()
    }

    fn to_json(f: &Path, t: &Trace<'_>) -> serde_json::Value {
        let h = t.head();
        serde_json::json!({
            "trace": f.display().to_string(),
            "host": h.host,
            "pid": h.pid,
            "job_id": h.job_id,
            "nccl_version": version(h.nccl_version),
            "profiler_abi": h.profiler_abi,
            "table_digest": h.table_digest.map(|d| format!("{d:016x}")),
            "platform": h.platform,
            "gpu": h.gpu,
            "sweep": h.sweep.map(|d| format!("{d:016x}")),
            "dropped_table_full": h.dropped_table_full,
            "dropped_pool_full": h.dropped_pool_full,
            "untimed": h.untimed,
            "symmetric_kernel_collectives": t.other_paths().symmetric,
            "copy_engine_collectives": t.other_paths().copy_engine,
            "symmetric_kernel_variants": t.variants().map(|v| serde_json::json!({
                "name": v.name(),
                "collectives": v.count,
            })).collect::<Vec<_>>(),
            "comms": t.comms().enumerate().map(|(i, c)| serde_json::json!({
                "comm_id": format!("{:#018x}", c.comm_id),
                "name": c.name,
                "nodes": c.n_nodes,
                "ranks": c.n_ranks,
                "rank": c.rank,
                "tags": t.tags().filter(|g| g.comm as usize == i)
                    .map(|g| format!("{:#x}", g.tag)).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
            "records": t.records().map(|r| serde_json::json!({
                "comm": r.comm,
                "collective": r.coll.name(),
                "bytes": r.n_bytes,
                "algo": r.setting.algo.name(),
                "proto": r.setting.proto.name(),
                "channels": r.setting.channels,
                "chosen_by": r.source.name(),
                "count": r.count,
                "sum_ln_ns": r.sum_ln,
                "sum_ln2_ns": r.sum_ln2,
                "min_ns": r.min_ns,
                "max_ns": r.max_ns,
            })).collect::<Vec<_>>(),
            "shapes": recorded_shares(t),
        })
    }
}
