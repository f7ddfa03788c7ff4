//! `dyncc eval`: score a table on measurements, in-sample or on held-out
//! node counts. Per cell (collective, size, nodes, ranks): the time of the
//! table's choice over the best measured setting (NCCL's default
//! included), the same for the default, the share of the available gain
//! captured, and how often the table is more than 5 % slower than the
//! default.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use anyhow::{bail, Context};
use dyncc_tables::{Decision, Table};
use serde::Serialize;

use crate::compile::{compile_dataset, CompileOptions};
use crate::decide::DecideOptions;
use crate::ingest::{self, Dataset};
use crate::record::{Cell, Collective, Config};

/// A cell more than this much slower than NCCL's default is a regression.
pub const REGRESSION: f64 = 1.05;

/// One scored cell.
#[derive(Clone, Debug, Serialize)]
pub struct Scored {
    pub collective: String,
    pub nbytes: u64,
    pub nnodes: u32,
    pub nranks: u32,
    pub choice: String,
    /// t(table's choice) / t(best measured).
    pub table: f64,
    /// t(default) / t(best measured).
    pub default: f64,
    /// t(table's choice) / t(default).
    pub vs_default: f64,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct Stats {
    pub geomean: f64,
    pub p95: f64,
    pub max: f64,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct Score {
    pub cells: usize,
    /// Cells where the table chose a setting that was not measured there.
    pub unscorable: usize,
    /// Cells without a default run (no baseline).
    pub no_default: usize,
    pub table: Stats,
    pub default: Stats,
    /// Share of the available gain over the default the table captured
    /// (sum of log gains achieved / sum of log gains available).
    pub captured: f64,
    /// Cells where the table forced something.
    pub forced: usize,
    pub regressions: usize,
    pub regression_share: f64,
    /// The same, per node count.
    pub by_nodes: BTreeMap<u32, Summary>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct Summary {
    pub cells: usize,
    pub table_geomean: f64,
    pub default_geomean: f64,
    pub captured: f64,
    pub regressions: usize,
}

type GroupKey = (Collective, u32, u32, u64);

/// Scores every cell group that has a default run.
pub fn score_cells(table: &Table, cells: &[Cell]) -> (Score, Vec<Scored>) {
    let mut groups: BTreeMap<GroupKey, HashMap<Config, f64>> = BTreeMap::new();
    for c in cells {
        if c.key.collective.tunable().is_none() || !(c.time_us > 0.0 && c.time_us.is_finite()) {
            continue;
        }
        let cfg = c.key.config;
        if !cfg.is_default() && (cfg.algo.is_none() || cfg.proto.is_none()) {
            continue;
        }
        groups
            .entry((c.key.collective, c.key.nnodes, c.key.nranks, c.key.nbytes))
            .or_default()
            .insert(cfg, c.time_us);
    }
    let mut score = Score::default();
    let mut out = Vec::new();
    for ((coll, nnodes, nranks, nbytes), m) in groups {
        let Some(&t_def) = m.get(&Config::DEFAULT) else {
            score.no_default += 1;
            continue;
        };
        let Some(nccl) = coll.tunable() else { continue };
        let d = table
            .lookup(nccl as u32, nranks as u64, nnodes as u64, nbytes, 1, 0)
            .decision;
        let cfg = match d {
            Decision::Default => Config::DEFAULT,
            Decision::Force {
                algo,
                proto,
                channels,
            } => Config {
                algo: Some(algo),
                proto: Some(proto),
                channels: (channels > 0).then_some(channels as u32),
            },
        };
        let Some(&t) = m.get(&cfg) else {
            score.unscorable += 1;
            continue;
        };
        let best = m.values().copied().fold(f64::INFINITY, f64::min);
        out.push(Scored {
            collective: coll.name().into(),
            nbytes,
            nnodes,
            nranks,
            choice: cfg.to_string(),
            table: t / best,
            default: t_def / best,
            vs_default: t / t_def,
        });
    }
    summarise(&mut score, &out);
    (score, out)
}

/// Fills the statistics of `score` from scored cells.
pub fn summarise(score: &mut Score, cells: &[Scored]) {
    score.cells = cells.len();
    score.table = stats(cells.iter().map(|c| c.table));
    score.default = stats(cells.iter().map(|c| c.default));
    score.captured = captured(cells.iter());
    score.forced = cells.iter().filter(|c| c.choice != "default").count();
    score.regressions = cells.iter().filter(|c| c.vs_default > REGRESSION).count();
    score.regression_share = if cells.is_empty() {
        0.0
    } else {
        score.regressions as f64 / cells.len() as f64
    };
    let mut by: BTreeMap<u32, Vec<&Scored>> = BTreeMap::new();
    for c in cells {
        by.entry(c.nnodes).or_default().push(c);
    }
    score.by_nodes = by
        .into_iter()
        .map(|(n, v)| {
            (
                n,
                Summary {
                    cells: v.len(),
                    table_geomean: stats(v.iter().map(|c| c.table)).geomean,
                    default_geomean: stats(v.iter().map(|c| c.default)).geomean,
                    captured: captured(v.iter().copied()),
                    regressions: v.iter().filter(|c| c.vs_default > REGRESSION).count(),
                },
            )
        })
        .collect();
}

fn captured<'a>(cells: impl Iterator<Item = &'a Scored>) -> f64 {
    let (mut got, mut avail) = (0.0, 0.0);
    for c in cells {
        got += (c.default / c.table).ln();
        avail += c.default.ln();
    }
    if avail > 0.0 {
        got / avail
    } else {
        0.0
    }
}

fn stats(v: impl Iterator<Item = f64>) -> Stats {
    let mut v: Vec<f64> = v.collect();
    if v.is_empty() {
        return Stats::default();
    }
    v.sort_by(f64::total_cmp);
    let geomean = (v.iter().map(|x| x.ln()).sum::<f64>() / v.len() as f64).exp();
    let p95 = v[((v.len() as f64 * 0.95).ceil() as usize).clamp(1, v.len()) - 1];
    Stats {
        geomean,
        p95,
        max: *v.last().unwrap_or(&1.0),
    }
}

/// Reads a simulator ground-truth CSV (`collective, nodes, ranks,
/// size_bytes, algorithm, protocol, channels, true_us`) into cells.
pub fn read_truth(path: &std::path::Path) -> anyhow::Result<Vec<Cell>> {
    use crate::record::{Algo, CellKey, Proto, Source};
    let mut rd =
        csv::Reader::from_path(path).with_context(|| format!("opening {}", path.display()))?;
    let h = rd
        .headers()
        .with_context(|| format!("{}:1: reading the header", path.display()))?
        .clone();
    let col = |n: &str| {
        h.iter().position(|x| x == n).with_context(|| {
            format!("{}:1: no `{n}` column: expected the ground truth written by `dyncc simulate` (truth.csv)", path.display())
        })
    };
    let (cc, cn, cr, cs, ca, cp, ch, ct) = (
        col("collective")?,
        col("nodes")?,
        col("ranks")?,
        col("size_bytes")?,
        col("algorithm")?,
        col("protocol")?,
        col("channels")?,
        col("true_us")?,
    );
    let file = std::sync::Arc::new(path.to_path_buf());
    let mut out = Vec::new();
    for (i, row) in rd.records().enumerate() {
        let line = i as u32 + 2;
        let row = row.with_context(|| format!("{}:{line}: malformed CSV row", path.display()))?;
        let bad = |what: &str| anyhow::anyhow!("{}:{line}: expected {what}", path.display());
        let get = |c: usize| row.get(c).unwrap_or("").trim();
        let collective = Collective::parse(get(cc)).ok_or_else(|| bad("a collective name"))?;
        let num = |c: usize, what: &str| get(c).parse::<u64>().map_err(|_| bad(what));
        let (algo, proto) = match (get(ca), get(cp)) {
            ("default", _) | (_, "default") => (None, None),
            (x, y) => (
                Some(Algo::parse(x).ok_or_else(|| bad("an algorithm name"))?),
                Some(Proto::parse(y).ok_or_else(|| bad("a protocol name"))?),
            ),
        };
        let channels = match get(ch).parse::<i64>() {
            Ok(c) if c > 0 => Some(c as u32),
            Ok(_) => None,
            Err(_) => return Err(bad("an integer channel count (-1 for NCCL's choice)")),
        };
        let t: f64 = get(ct).parse().map_err(|_| bad("a time in true_us"))?;
        out.push(Cell {
            key: CellKey {
                collective,
                nbytes: num(cs, "a size in bytes")?,
                nranks: num(cr, "a rank count")? as u32,
                nnodes: num(cn, "a node count")? as u32,
                config: Config {
                    algo,
                    proto,
                    channels,
                },
            },
            time_us: t,
            n: 1,
            spread: 0.0,
            source: Source {
                file: file.clone(),
                line,
            },
        });
    }
    Ok(out)
}

/// Leave-one-node-count-out: for every interior node count, compile on the
/// others and score the held-out one.
pub fn cross_validate_nodes(
    ds: &Dataset,
    opts: &CompileOptions,
) -> anyhow::Result<(Score, Vec<Scored>, Vec<u32>)> {
    let mut nodes: Vec<u32> = ds.records.iter().map(|r| r.nnodes).collect();
    nodes.sort_unstable();
    nodes.dedup();
    if nodes.len() < 3 {
        bail!(
            "--cv nodes needs at least three node counts (it holds out each interior one); the inputs have {}",
            nodes.len()
        );
    }
    let interior = nodes[1..nodes.len() - 1].to_vec();
    let mut all = Vec::new();
    for &k in &interior {
        let train = Dataset {
            records: ds
                .records
                .iter()
                .filter(|r| r.nnodes != k)
                .cloned()
                .collect(),
            ..Default::default()
        };
        let test: Vec<_> = ds
            .records
            .iter()
            .filter(|r| r.nnodes == k)
            .cloned()
            .collect();
        let c = compile_dataset(&train, opts)
            .with_context(|| format!("compiling without {k} nodes"))?;
        let table = Table::from_bytes(&c.bytes).map_err(|e| anyhow::anyhow!("{e}"))?;
        let (_, scored) = score_cells(&table, &ingest::aggregate(&test));
        all.extend(scored);
    }
    let mut score = Score::default();
    summarise(&mut score, &all);
    Ok((score, all, interior))
}

/// Score a decision table on measurements.
///
/// Per measured cell (collective, size, nodes, ranks) with a default run,
/// compares the time of the table's choice with the best measured setting
/// and with NCCL's default. With --cv nodes, it instead holds out each
/// interior node count in turn, compiles a table from the rest, and scores
/// the held-out count: how a table does on a job shape it never saw.
///
/// Examples:
///   dyncc eval dgx1v.tbl datasets/real/nvidia-dgx1v-allreduce.csv
///   dyncc eval --cv nodes datasets/real/nvidia-dgx1v-allreduce.csv
#[derive(clap::Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct EvalArgs {
    /// The table, then the measurement files or directories
    /// (with --cv, only measurements).
    #[arg(required = true, value_name = "TABLE|PATH")]
    pub paths: Vec<PathBuf>,
    /// Cross-validate instead: `nodes` = leave one node count out.
    #[arg(long, value_parser = ["nodes"])]
    pub cv: Option<String>,
    /// With --cv: the compile margin (see `dyncc compile --help`).
    #[arg(long, default_value_t = 0.03)]
    pub margin: f64,
    /// With --cv: noise standard deviations a gain must clear.
    #[arg(long, default_value_t = 0.5)]
    pub noise_z: f64,
    /// Keep only records of this platform label or GPU model.
    #[arg(long)]
    pub platform: Option<String>,
    #[command(flatten)]
    pub ingest: ingest::args::IngestArgs,
    /// Score against a simulator's ground truth (`truth.csv` from `dyncc
    /// simulate`: true mean times, noise-free) instead of measurements.
    #[arg(long, value_name = "TRUTH.csv", conflicts_with = "cv")]
    pub truth: Option<PathBuf>,
    /// Also list every scored cell.
    #[arg(long)]
    pub cells: bool,
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: EvalArgs) -> anyhow::Result<i32> {
    let ingest_opts = a.ingest.options(!a.json, false)?;
    let setup = a.ingest.setup_choice()?;
    let (score, scored, title) = if a.cv.is_some() {
        let mut ds = ingest::read_paths(&a.paths, &ingest_opts)?;
        ingest::setup::select_setup(&mut ds, &setup)?;
        let opts = CompileOptions {
            decide: DecideOptions {
                margin: a.margin,
                z: a.noise_z,
                extrapolate: false,
            },
            platform: a.platform.clone(),
            command: String::new(),
        };
        let (s, c, held) = cross_validate_nodes(&ds, &opts)?;
        let held: Vec<String> = held.iter().map(|n| n.to_string()).collect();
        (
            s,
            c,
            format!(
                "leave-one-node-count-out cross-validation (held out: {})",
                held.join(", ")
            ),
        )
    } else if let Some(truth) = &a.truth {
        let bytes = std::fs::read(&a.paths[0])
            .with_context(|| format!("reading table {}", a.paths[0].display()))?;
        let table = Table::from_bytes(&bytes)
            .map_err(|e| anyhow::anyhow!("{}: {e}", a.paths[0].display()))?;
        let (s, c) = score_cells(&table, &read_truth(truth)?);
        (
            s,
            c,
            format!(
                "{} on the ground truth {}",
                a.paths[0].display(),
                truth.display()
            ),
        )
    } else {
        if a.paths.len() < 2 {
            bail!("dyncc eval TABLE PATH...: give the table and at least one measurement file or directory");
        }
        let bytes = std::fs::read(&a.paths[0])
            .with_context(|| format!("reading table {}", a.paths[0].display()))?;
        let table = Table::from_bytes(&bytes)
            .map_err(|e| anyhow::anyhow!("{}: {e}", a.paths[0].display()))?;
        let mut ds = ingest::read_paths(&a.paths[1..], &ingest_opts)?;
        ingest::setup::select_setup(&mut ds, &setup)?;
        let mut records = ds.records;
        if let Some(p) = &a.platform {
            records.retain(|r| r.is_platform(p));
        }
        let (s, c) = score_cells(&table, &ingest::aggregate(&records));
        (
            s,
            c,
            format!("{} on the given measurements", a.paths[0].display()),
        )
    };
    if score.cells == 0 {
        bail!(
            "no cell could be scored: scoring needs cells with a default run (algorithm=default) and the \
             table's choice measured ({} cells lacked a default run, {} lacked the table's choice)",
            score.no_default,
            score.unscorable
        );
    }
    if a.json {
        let mut v = serde_json::to_value(&score)?;
        if a.cells {
            v["scored"] = serde_json::to_value(&scored)?;
        }
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(0);
    }
    println!("{title}\n");
    println!(
        "{:<14} {:>6} {:>9} {:>7} {:>7} {:>9} {:>13}",
        "", "cells", "geomean", "p95", "max", "captured", "regressions"
    );
    println!(
        "{:<14} {:>6} {:>9.4} {:>7.3} {:>7.3} {:>8.1}% {:>6} ({:.1}%)",
        "dyncc table",
        score.cells,
        score.table.geomean,
        score.table.p95,
        score.table.max,
        100.0 * score.captured,
        score.regressions,
        100.0 * score.regression_share
    );
    println!(
        "{:<14} {:>6} {:>9.4} {:>7.3} {:>7.3} {:>9} {:>13}",
        "NCCL default",
        score.cells,
        score.default.geomean,
        score.default.p95,
        score.default.max,
        "-",
        "-"
    );
    println!("\n(times over the best measured setting per cell; regressions: > 5 % slower than the default)");
    println!(
        "\n{:>6} {:>6} {:>9} {:>9} {:>9} {:>11}",
        "nodes", "cells", "table", "default", "captured", "regressions"
    );
    for (n, s) in &score.by_nodes {
        println!(
            "{:>6} {:>6} {:>9.4} {:>9.4} {:>8.1}% {:>11}",
            n,
            s.cells,
            s.table_geomean,
            s.default_geomean,
            100.0 * s.captured,
            s.regressions
        );
    }
    if score.unscorable + score.no_default > 0 {
        println!(
            "\nnot scored: {} cells without a default run, {} where the table's choice was not measured",
            score.no_default, score.unscorable
        );
    }
    if a.cells {
        println!();
        for c in &scored {
            println!(
                "{:<14} {:>10} nodes {:>3} ranks {:>5}  {:<20} table {:.3} default {:.3}",
                c.collective, c.nbytes, c.nnodes, c.nranks, c.choice, c.table, c.default
            );
        }
    }
    Ok(0)
}
