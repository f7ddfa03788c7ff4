//! Scoring: a table on measurements, in-sample or on held-out node counts
//! (cross-validation through the one compile pipeline). Per cell (collective, size, nodes, ranks): the time of the
//! table's choice over the best measured setting (NCCL's default
//! included), the same for the default, the share of the available gain
//! captured, and how often the table is more than 5 % slower than the
//! default.

use anyhow::{bail, Context};
use dyncc_tables::{Comm, Table};
use rayon::prelude::*;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::ingest::fold::Folded;
use crate::ingest::Dataset;
use crate::nodes::{self, Widen};
use crate::pipeline::{compile_in_pool, with_jobs, CompileOptions, Compiled};
use crate::record::{Cell, Collective, Config, State};

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
    /// Cross-validation only: t(default) / t(the fastest setting the kept
    /// node counts showed beyond the margin here), 1 when none did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub visible: Option<f64>,
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
    /// Cross-validation only: the share of the available gain the kept
    /// node counts showed (see `reachable`), the bound on `captured` of
    /// any table read off them at this margin.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reachable: Option<f64>,
    /// The same, per node count.
    pub by_nodes: BTreeMap<u32, Summary>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct Summary {
    pub cells: usize,
    pub table_geomean: f64,
    pub default_geomean: f64,
    pub captured: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reachable: Option<f64>,
    pub regressions: usize,
}

type GroupKey = (Collective, u32, u32, u64);

/// Measured time of every setting at one cell.
type Times = HashMap<Config, f64>;
/// The cells to score, by (collective, nodes, ranks, size).
type Groups = BTreeMap<GroupKey, Times>;

/// Scores every cell group that has a default run.
pub fn score_cells(table: &Table, cells: &[Cell]) -> (Score, Vec<Scored>) {
    score_groups(table, &group(cells), &|_, _| None)
}

/// What machine measurements come from, as far as they say: platform
/// labels, GPU models, ranks per node.
#[derive(Debug, Default)]
pub struct Origin {
    pub platforms: BTreeSet<String>,
    pub gpus: BTreeSet<String>,
    pub ppn: BTreeSet<u32>,
}

impl Origin {
    /// Of folded measurements.
    pub fn of_folded(data: &Folded) -> Origin {
        let mut o = Origin::default();
        for g in &data.groups {
            if let Some(p) = g.key.run.platform.as_deref().filter(|p| !p.is_empty()) {
                o.platforms.insert(p.to_string());
            }
            if let Some(p) = g.key.run.gpu.as_deref().filter(|p| !p.is_empty()) {
                o.gpus.insert(p.to_string());
            }
            o.add_shape(g.key.run.nranks, g.key.run.nnodes);
        }
        o
    }

    /// Of cells (a ground truth: shapes only).
    pub fn of_cells(cells: &[Cell]) -> Origin {
        let mut o = Origin::default();
        for c in cells {
            o.add_shape(c.key.nranks, c.key.nnodes);
        }
        o
    }

    fn add_shape(&mut self, ranks: u32, nodes: u32) {
        if nodes > 0 && ranks.is_multiple_of(nodes) {
            self.ppn.insert(ranks / nodes);
        }
    }
}

/// Why `table` may not fit measurements of `origin`: another platform or
/// GPU than the table's metadata names, or ranks per node that no context
/// covers (the table leaves NCCL alone there, so those cells score 0 %).
/// One sentence each, for warnings; scores across machines say little
/// about the table.
pub fn mismatches(table: &Table, origin: &Origin) -> Vec<String> {
    let mut out = Vec::new();
    let differs = |what: &str, key: &str, data: &BTreeSet<String>| {
        let t = table.meta(key).filter(|t| !t.is_empty())?;
        if data.is_empty() || data.iter().any(|d| d.eq_ignore_ascii_case(t)) {
            return None;
        }
        let d: Vec<&str> = data.iter().map(String::as_str).collect();
        Some(format!(
            "the table was compiled for {what} {t}, the measurements are of {what} {}: a table fits \
             the machine it was swept on, so these scores compare different machines",
            d.join(", ")
        ))
    };
    out.extend(differs("platform", "platform", &origin.platforms));
    out.extend(differs("GPU", "gpu", &origin.gpus));
    let spans: Vec<(u32, u32)> = table.contexts().map(|c| c.spec().ppn).collect();
    let uncovered: Vec<String> = origin
        .ppn
        .iter()
        .filter(|&&p| !spans.iter().any(|&(lo, hi)| (lo..=hi).contains(&p)))
        .map(u32::to_string)
        .collect();
    if !spans.is_empty() && !uncovered.is_empty() {
        let mut covered: Vec<String> = spans
            .iter()
            .map(|&(lo, hi)| crate::audit::text::fmt_span(lo, hi))
            .collect();
        covered.dedup();
        covered.sort();
        covered.dedup();
        out.push(format!(
            "no context of the table covers {} ranks per node, which the measurements have (it \
             covers {}): it leaves NCCL alone there, so those cells score 0 %",
            uncovered.join(", "),
            covered.join(", ")
        ));
    }
    out
}

/// The scorable cells by (collective, nodes, ranks, size): settings a
/// table can name, with a usable time.
fn group(cells: &[Cell]) -> Groups {
    let mut groups = Groups::new();
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
    groups
}

/// Scores `groups`; `visible` gives a cell's [`Scored::visible`].
fn score_groups(
    table: &Table,
    groups: &Groups,
    visible: &dyn Fn(&GroupKey, &Times) -> Option<f64>,
) -> (Score, Vec<Scored>) {
    let mut score = Score::default();
    let mut out = Vec::new();
    for (key, m) in groups {
        let &(coll, nnodes, nranks, nbytes) = key;
        let Some(&t_def) = m.get(&Config::DEFAULT) else {
            score.no_default += 1;
            continue;
        };
        let Some(nccl) = coll.tunable() else { continue };
        let d = table
            .lookup(
                nccl as u32,
                &Comm::new(nranks as u64, nnodes as u64),
                nbytes,
                1,
                0,
            )
            .decision;
        let cfg = Config::from(d);
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
            visible: visible(key, m),
        });
    }
    summarise(&mut score, &out);
    (score, out)
}

/// What the kept node counts of a cross-validation showed at a scored
/// cell: t(default) / t(the fastest measured setting whose gain, read off
/// the kept counts as the compile reads it, clears the margin there), 1
/// when none does. Pooled, it bounds what any table read off those counts
/// could capture: a low figure means the gains at the scored counts do
/// not show at the measured ones (measure those counts), a high one above
/// `captured` that the readings were too uncertain to act on.
fn visible_at(compiled: &Compiled, margin: f64, key: &GroupKey, m: &Times) -> Option<f64> {
    let &(coll, nnodes, nranks, nbytes) = key;
    let t_def = *m.get(&Config::DEFAULT)?;
    let lm = (1.0 + margin).ln();
    let ppn = nranks / nnodes.max(1);
    let mut best = t_def;
    let gi = compiled.grids.iter().position(|g| {
        Some(g.coll) == coll.tunable() && g.ppn == ppn && nranks % nnodes.max(1) == 0
    });
    if let (Some(gi), true) = (gi, nnodes >= 2) {
        let (grid, decided) = (&compiled.grids[gi], &compiled.decided[gi]);
        // Read where the compile decided the range holding this count.
        let at = decided
            .anchors
            .iter()
            .find(|a| !a.measured && (a.span.0..=a.span.1).contains(&nnodes))
            .map(|a| a.at);
        if let (Ok(si), Some(at)) = (grid.sizes.binary_search(&nbytes), at) {
            let none = Widen::none(grid);
            for (c, cfg) in grid.configs.iter().enumerate().skip(1) {
                let Some(&t) = m.get(cfg) else { continue };
                let shows = nodes::read(
                    grid,
                    &none,
                    decided.model.align,
                    at,
                    si,
                    c,
                    None,
                    nodes::Neighbours::Any,
                )
                .filter(|r| decided.model.sd(si, r).is_some())
                .is_some_and(|r| r.gain > lm);
                if shows && t < best {
                    best = t;
                }
            }
        }
    }
    Some(t_def / best)
}

/// Fills the statistics of `score` from scored cells.
pub fn summarise(score: &mut Score, cells: &[Scored]) {
    score.cells = cells.len();
    score.table = stats(cells.iter().map(|c| c.table));
    score.default = stats(cells.iter().map(|c| c.default));
    score.captured = captured(cells.iter());
    score.reachable = reachable(cells.iter());
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
                    reachable: reachable(v.iter().copied()),
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

/// The pooled share of the available gain the kept node counts showed
/// ([`visible_at`]); `None` outside cross-validation.
fn reachable<'a>(cells: impl Iterator<Item = &'a Scored>) -> Option<f64> {
    let (mut shown, mut avail, mut any) = (0.0, 0.0, false);
    for c in cells {
        any = true;
        shown += c.visible?.ln();
        avail += c.default.ln();
    }
    any.then_some(if avail > 0.0 { shown / avail } else { 0.0 })
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
    let mut rd = csv::Reader::from_reader(crate::input::open(path, &crate::input::TRUTH)?);
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
    // A sweep that varies the chunk writes its column; others have none.
    let ck = h.iter().position(|x| x == "chunk");
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
        let chunk = match (ck, proto) {
            (Some(c), Some(p)) => {
                // The bytes the plugin answered: on the protocol's grain.
                let b = num(c, "a chunk in bytes (0 for NCCL's)")?;
                let k = p.chunk_at_most(b);
                if k.bytes() as u64 != b {
                    return Err(bad("a chunk the protocol runs as set (on its grain), or 0"));
                }
                k
            }
            _ => dyncc_tables::Chunk::NCCL,
        };
        out.push(Cell {
            key: CellKey {
                collective,
                nbytes: num(cs, "a size in bytes")?,
                nranks: num(cr, "a rank count")? as u32,
                nnodes: num(cn, "a node count")? as u32,
                // `dyncc simulate` measures the baseline state only.
                state: State::BASELINE,
                config: Config {
                    algo,
                    proto,
                    channels,
                    chunk,
                },
            },
            time_us: t,
            n: 1,
            spread: 0.0,
            source: Source {
                file: file.clone(),
                line,
            },
            base: crate::record::TimeBase::Sweep,
        });
    }
    Ok(out)
}

/// How a user's next job differs from the sweep.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum CvMode {
    /// Each inner node count left out in turn, scored on it.
    Nodes,
    /// Every other measured node count kept, the rest scored.
    Sparse,
    /// The smaller half of the node counts kept, the larger scored.
    Upward,
}

impl CvMode {
    pub const ALL: [CvMode; 3] = [CvMode::Nodes, CvMode::Sparse, CvMode::Upward];

    pub fn name(self) -> &'static str {
        match self {
            CvMode::Nodes => "nodes",
            CvMode::Sparse => "sparse",
            CvMode::Upward => "upward",
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            CvMode::Nodes => "each inner node count left out",
            CvMode::Sparse => "every other node count kept, the rest scored",
            CvMode::Upward => "the smaller half of the node counts kept, the larger scored",
        }
    }
}

/// One compile of a cross-validation: the node counts it kept and scored.
#[derive(Clone, Debug, Serialize)]
pub struct Fold {
    pub train: Vec<u32>,
    pub test: Vec<u32>,
}

/// The folds of `mode` over the measured node counts (sorted, distinct).
pub fn folds(nodes: &[u32], mode: CvMode) -> anyhow::Result<Vec<Fold>> {
    let need = match mode {
        CvMode::Nodes | CvMode::Sparse => 3,
        CvMode::Upward => 2,
    };
    if nodes.len() < need {
        bail!(
            "--cv {} needs at least {need} measured node counts; the inputs have {} ({}); sweep more \
             node counts (`dyncc plan --nodes ...`)",
            mode.name(),
            nodes.len(),
            nodes.iter().map(|n| n.to_string()).collect::<Vec<_>>().join(", ")
        );
    }
    let split = |keep: &dyn Fn(usize) -> bool| Fold {
        train: (0..nodes.len())
            .filter(|&i| keep(i))
            .map(|i| nodes[i])
            .collect(),
        test: (0..nodes.len())
            .filter(|&i| !keep(i))
            .map(|i| nodes[i])
            .collect(),
    };
    Ok(match mode {
        CvMode::Nodes => (1..nodes.len() - 1).map(|k| split(&|i| i != k)).collect(),
        CvMode::Sparse => vec![split(&|i| i % 2 == 0)],
        CvMode::Upward => {
            let half = nodes.len().div_ceil(2);
            vec![split(&|i| i < half)]
        }
    })
}

/// A cross-validation's result: every fold's cells, pooled.
#[derive(Clone, Debug, Serialize)]
pub struct CrossValidation {
    pub mode: CvMode,
    pub folds: Vec<Fold>,
    pub score: Score,
    #[serde(skip)]
    pub cells: Vec<Scored>,
}

/// Compiles a table from each fold's kept node counts with the one
/// pipeline and the given options, and scores it on the counts left out.
pub fn cross_validate(
    ds: &Dataset,
    opts: &CompileOptions,
    mode: CvMode,
) -> anyhow::Result<CrossValidation> {
    // Folds are cut from the folded measurements (one group per distinct
    // cell and source), never a record per row: a sweep of many repeats
    // costs its distinct cells, as in `dyncc compile`.
    let from_records;
    let folded = if ds.records.is_empty() {
        &ds.folded
    } else {
        from_records = Folded::from_records(ds.records.iter().cloned());
        &from_records
    };
    let of_nodes = |keep: &[u32]| Folded {
        groups: folded
            .groups
            .iter()
            .filter(|g| keep.contains(&g.key.run.nnodes))
            .cloned()
            .collect(),
    };
    let mut nodes: Vec<u32> = folded.groups.iter().map(|g| g.key.run.nnodes).collect();
    nodes.sort_unstable();
    nodes.dedup();
    let folds = folds(&nodes, mode)?;
    // One bar of folds done; folds compile side by side, so each fold's
    // own fitting bar would garble it.
    let progress = crate::progress::Progress::new(
        opts.progress,
        folds.len() as u64,
        &format!(
            "{{spinner}} cross-validating (--cv {}) [{{bar:30}}] {{pos}}/{{len}} folds, ETA {{eta}}",
            mode.name()
        ),
    );
    let opts = &CompileOptions {
        progress: false,
        ..opts.clone()
    };
    // Folds compile in parallel on one pool (their grids and models too);
    // each fold's cells are collected in fold order, as one by one.
    let score_fold = |f: &Fold| -> anyhow::Result<Vec<Scored>> {
        let train = Dataset {
            folded: of_nodes(&f.train),
            ..Default::default()
        };
        let mut test = of_nodes(&f.test);
        let c = compile_in_pool(train, opts).with_context(|| {
            format!(
                "compiling from node counts {:?} (--cv {})",
                f.train,
                mode.name()
            )
        })?;
        let table = Table::from_bytes(&c.bytes).map_err(|e| anyhow::anyhow!("{e}"))?;
        if let Some(p) = &opts.platform {
            test.retain(|g| g.is_platform(p));
        }
        let margin = opts.decide.margin;
        let (_, scored) = score_groups(&table, &group(&test.cells()), &|k, m| {
            visible_at(&c, margin, k, m)
        });
        progress.inc(1);
        Ok(scored)
    };
    let per_fold: Vec<anyhow::Result<Vec<Scored>>> =
        with_jobs(opts.jobs, || folds.par_iter().map(score_fold).collect())?;
    progress.finish();
    let mut all = Vec::new();
    // The first failing fold's error in fold order, whatever the threads' order.
    for scored in per_fold {
        all.extend(scored?);
    }
    let mut score = Score::default();
    summarise(&mut score, &all);
    Ok(CrossValidation {
        mode,
        folds,
        score,
        cells: all,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A table of one machine scored on another's measurements said
    /// nothing about it.
    #[test]
    fn mismatched_platform_and_ranks_per_node_are_named() {
        let bytes = crate::audit::testutil::sample();
        let t = Table::from_bytes(&bytes).unwrap();
        let origin = |platform: &str, ppn: &[u32]| Origin {
            platforms: [platform.to_string()].into_iter().collect(),
            gpus: BTreeSet::new(),
            ppn: ppn.iter().copied().collect(),
        };
        assert!(mismatches(&t, &origin("Test-Rig", &[8])).is_empty());
        let m = mismatches(&t, &origin("other-rig", &[4, 8, 16]));
        assert_eq!(m.len(), 2, "{m:?}");
        assert!(m[0].contains("platform test-rig, the measurements are of platform other-rig"));
        assert!(m[1].contains("covers 4, 16 ranks per node"), "{}", m[1]);
    }
}
