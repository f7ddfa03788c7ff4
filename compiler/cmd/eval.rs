//! `dyncc eval`: arguments, run, and the printed score.

use std::path::PathBuf;

use anyhow::{bail, Context};

use crate::cmd::common::{DecideArgs, RunArgs};
use crate::eval::{
    cross_validate, mismatches, read_truth, score_cells, summarise, CvMode, Origin, Score, Scored,
};
use crate::ingest;
use crate::pipeline::CompileOptions;

mod explore_cost;
mod svg;
mod traces;

/// Score a decision table on measurements.
///
/// Per measured cell (collective, size, nodes, ranks) with a default run,
/// compares the time of the table's choice with the best measured setting
/// and with NCCL's default. "captured" is the share of the available gain
/// over the default that the table realised; "regressions" are cells more
/// than 5 % slower than the default.
///
/// With --cv, it instead compiles tables (with the same pipeline and
/// options as `dyncc compile`) from part of the measured node counts and
/// scores them on the rest, the way a user's next job differs from the
/// sweep:
///   nodes   each inner node count left out in turn
///   sparse  every other node count kept, the rest scored
///   upward  the smaller half of the node counts kept, the larger scored
///   all     the three above
/// It tells how far a table can be trusted beyond the sweep. "reachable"
/// is the share of the held-out gain the kept node counts showed beyond
/// the margin: the most any table read off them could capture. Captured
/// far below it: the readings were too noisy to act on (repeats help);
/// reachable itself low: the gains at those counts do not show elsewhere
/// (measure the node counts your jobs run at).
///
/// With --traces, it scores the table on what jobs measured (trace files
/// from DYNCC_TRACE, or directories of them): at each shape (nodes, ranks,
/// collective, size) where jobs ran both NCCL's own choice and the
/// table's setting (in one communicator or across several),
/// t(table)/t(NCCL's choice) from their geometric mean GPU times, +- its
/// standard error under compile's evidence rule (a communicator weighs
/// like one sweep run, whatever its calls); pooled over shapes, weighted by
/// the communicators that measured each. Shapes the table
/// leaves to NCCL count as "default" (ratio 1); shapes where only one side
/// ran are listed as not comparable. A trace is never compared with a sweep.
/// A trace recorded under an earlier table compiled from the same sweep is
/// scored like any other; one of another platform, or of a table compiled
/// from another sweep, is refused unless --foreign-traces.
///
/// Examples:
///   dyncc eval dgx1v.tbl datasets/real/nvidia-dgx1v-allreduce.csv
///   dyncc eval cluster.tbl --traces /shared/traces/
///   dyncc eval --cv nodes datasets/real/nvidia-dgx1v-allreduce.csv
///   dyncc eval --cv all --json datasets/real/nvidia-dgx2v-allreduce.csv
///   dyncc eval --cv upward datasets/real/nvidia-dgx2v-allreduce.csv --svg upward.svg
#[derive(clap::Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct EvalArgs {
    /// The table, then the measurement files or directories
    /// (with --cv, only measurements).
    #[arg(required = true, value_name = "TABLE|PATH")]
    pub paths: Vec<PathBuf>,
    /// Cross-validate instead of scoring a table: nodes, sparse, upward or all.
    #[arg(long, value_name = "MODE", value_parser = ["nodes", "sparse", "upward", "all"])]
    pub cv: Option<String>,
    /// With --cv: how the tables are compiled (as `dyncc compile`).
    #[command(flatten)]
    pub decide: DecideArgs,
    #[command(flatten)]
    pub run: RunArgs,
    /// Keep only records of this platform label or GPU model.
    #[arg(long)]
    pub platform: Option<String>,
    #[command(flatten)]
    pub ingest: ingest::args::IngestArgs,
    /// Score against a simulator's ground truth (`truth.csv` from `dyncc
    /// simulate`: true mean times, noise-free) instead of measurements.
    #[arg(long, value_name = "TRUTH.csv", conflicts_with = "cv")]
    pub truth: Option<PathBuf>,
    /// Score the table on these trace files or directories of them
    /// (DYNCC_TRACE) instead of on sweeps.
    #[arg(long, value_name = "PATH", num_args = 1.., conflicts_with_all = ["cv", "truth"])]
    pub traces: Vec<PathBuf>,
    /// With --traces: use trace files of jobs on another platform than the
    /// table's, or whose table came from another sweep; without it they are
    /// refused.
    #[arg(long, requires = "traces")]
    pub foreign_traces: bool,
    /// With --traces: the sweep the table was compiled from (files or
    /// directories, read as compile reads them). Only its repeats are used:
    /// the spread between its runs is the least spread between
    /// communicators, as in compile; without it, 2 %. Its times are never
    /// set against the traces'.
    #[arg(long, value_name = "PATH", num_args = 1.., requires = "traces")]
    pub sweep: Vec<PathBuf>,
    /// Also list every scored cell.
    #[arg(long)]
    pub cells: bool,
    /// Print the scores as JSON.
    #[arg(long)]
    pub json: bool,
    /// Also draw the scored cells as SVG to FILE: per collective and ranks per node, size x nodes, each cell
    /// coloured by the table's speed against NCCL's default, regressions
    /// (more than 5 % slower) outlined in red; with --cv, the held-out
    /// cells of each mode, as a user's next job meets them.
    #[arg(long, value_name = "FILE", conflicts_with = "traces")]
    pub svg: Option<PathBuf>,
}

/// One scored scenario, as printed.
struct Scenario {
    title: String,
    mode: Option<CvMode>,
    score: Score,
    cells: Vec<Scored>,
}

pub fn run(a: EvalArgs) -> anyhow::Result<i32> {
    if !a.traces.is_empty() {
        return run_traces(&a);
    }
    // Sweeps and traces are scored apart: a trace among the measurements
    // would be passed over by the sweep reader, and the score read as if
    // it counted.
    let traces = crate::ingest::traces::split(&mut a.paths.clone());
    if let Some(first) = traces.first() {
        bail!(
            "{} trace file(s) among the measurements ({}{}): `dyncc eval` scores a table on \
             sweeps; score it on jobs' traces with `dyncc eval TABLE --traces DIR`, and give \
             traces to `dyncc compile SWEEP DIR` to learn from them",
            traces.len(),
            first.display(),
            if traces.len() > 1 { ", ..." } else { "" }
        );
    }
    let scenarios: Vec<Scenario> = if let Some(cv) = &a.cv {
        let modes: Vec<CvMode> = match cv.as_str() {
            "nodes" => vec![CvMode::Nodes],
            "sparse" => vec![CvMode::Sparse],
            "upward" => vec![CvMode::Upward],
            _ => CvMode::ALL.to_vec(),
        };
        let opts = CompileOptions {
            decide: a.decide.options()?,
            platform: a.platform.clone(),
            command: String::new(),
            lenient: a.ingest.lenient,
            jobs: a.run.jobs()?,
            // One bar of folds done (`cross_validate`); folds compile
            // side by side, so their own fitting bars stay hidden.
            progress: !a.json && !a.ingest.quiet,
            explore: None,
        };
        let ds = a.ingest.read_sweep(&a.paths, !a.json && !a.ingest.quiet)?;
        let mut out = Vec::new();
        for mode in modes {
            let cv = cross_validate(&ds, &opts, mode)?;
            let folds: Vec<String> = cv
                .folds
                .iter()
                .map(|f| format!("{:?} -> {:?}", f.train, f.test))
                .collect();
            out.push(Scenario {
                title: format!(
                    "--cv {}: {} (kept -> scored: {})",
                    mode.name(),
                    mode.describe(),
                    folds.join("; ")
                ),
                mode: Some(mode),
                score: cv.score,
                cells: cv.cells,
            });
        }
        out
    } else {
        let table_path = &a.paths[0];
        let bytes = crate::audit::files::read_table(table_path)?;
        let table = crate::audit::files::open(table_path, &bytes)?;
        let warn = |origin: &Origin| {
            for m in mismatches(&table, origin) {
                eprintln!("warning: {}: {m}", table_path.display());
            }
        };
        let (score, cells, title) = if let Some(truth) = &a.truth {
            let truth_cells = read_truth(truth)?;
            warn(&Origin::of_cells(&truth_cells));
            let (s, c) = score_cells(&table, &truth_cells);
            let t = format!(
                "{} on the ground truth {}",
                table_path.display(),
                truth.display()
            );
            (s, c, t)
        } else {
            if a.paths.len() < 2 {
                bail!(
                    "dyncc eval TABLE PATH...: give the table and at least one measurement file or \
                     directory (or --cv MODE PATH... to cross-validate)"
                );
            }
            let mut folded = a
                .ingest
                .read_sweep(&a.paths[1..], !a.json && !a.ingest.quiet)?
                .take_folded();
            if let Some(p) = &a.platform {
                folded.retain(|g| g.is_platform(p));
            }
            warn(&Origin::of_folded(&folded));
            let (s, c) = score_cells(&table, &folded.cells());
            let t = format!("{} on the given measurements", table_path.display());
            (s, c, t)
        };
        vec![Scenario {
            title,
            mode: None,
            score,
            cells,
        }]
    };
    for s in &scenarios {
        if s.score.cells == 0 {
            bail!(
                "{}: no cell could be scored: scoring needs cells with a default run \
                 (algorithm=default) and the table's choice measured ({} cells lacked a default \
                 run, {} lacked the table's choice)",
                s.title,
                s.score.no_default,
                s.score.unscorable
            );
        }
    }
    if let Some(out) = &a.svg {
        if crate::atomic::names_stdout(out) {
            bail!("--svg -: the scores go to standard output; give the picture a file, e.g. --svg eval.svg");
        }
        crate::atomic::check_output(out, a.paths.iter().map(|p| p.as_path()), "svg")?;
        let parts: Vec<(&str, &[Scored])> = scenarios
            .iter()
            .map(|s| (s.title.as_str(), &s.cells[..]))
            .collect();
        let text = svg::render(&parts);
        crate::audit::files::write_output_or_stdout(out, text.as_bytes(), 0o644)?;
        eprintln!("wrote {} ({} bytes)", out.display(), text.len());
    }
    if a.json {
        let v: Vec<serde_json::Value> = scenarios
            .iter()
            .map(|s| {
                let mut v = serde_json::to_value(&s.score)?;
                v["title"] = s.title.clone().into();
                if let Some(m) = s.mode {
                    v["cv"] = m.name().into();
                }
                if a.cells {
                    v["scored"] = serde_json::to_value(&s.cells)?;
                }
                Ok(v)
            })
            .collect::<anyhow::Result<_>>()?;
        // One scenario prints as one object (as before --cv all existed).
        let out = if v.len() == 1 {
            v.into_iter().next().unwrap_or_default()
        } else {
            let mut pooled = Score::default();
            let all: Vec<Scored> = scenarios.iter().flat_map(|s| s.cells.clone()).collect();
            summarise(&mut pooled, &all);
            serde_json::json!({ "scenarios": v, "pooled": pooled })
        };
        println!("{}", crate::output::pretty(&out)?);
        return Ok(0);
    }
    for (i, s) in scenarios.iter().enumerate() {
        if i > 0 {
            println!();
        }
        print_score(&s.title, &s.score, a.cells.then_some(&s.cells[..]));
    }
    if scenarios.len() > 1 {
        println!("\nsummary (captured share of the gain available over NCCL's default, and the share the kept node counts showed; regressions = cells > 5 % slower than it):");
        for s in &scenarios {
            println!(
                "  {:<8} {:>5} cells  captured {:>6.1} % (reachable {:>5.1} %)  regressions {:>4.1} %  table {:.4} vs default {:.4}",
                s.mode.map(|m| m.name()).unwrap_or(""),
                s.score.cells,
                100.0 * s.score.captured,
                100.0 * s.score.reachable.unwrap_or(0.0),
                100.0 * s.score.regression_share,
                s.score.table.geomean,
                s.score.default.geomean
            );
        }
    }
    Ok(0)
}

/// `eval TABLE --traces PATH...`.
fn run_traces(a: &EvalArgs) -> anyhow::Result<i32> {
    let [table_path] = &a.paths[..] else {
        bail!(
            "dyncc eval TABLE --traces PATH...: give only the table before --traces (the traces \
             are scored on their own, never with a sweep's times)"
        );
    };
    let bytes = crate::audit::files::read_table(table_path)?;
    let table = crate::audit::files::open(table_path, &bytes)?;
    let view = if a.sweep.is_empty() {
        None
    } else {
        let (cells, nccl, _) =
            crate::audit::traced::read_sweep(&a.sweep, &a.ingest).context("reading --sweep")?;
        Some(crate::ingest::traces::SweepView::of_cells(&cells, nccl))
    };
    let filter = traces::TraceFilter {
        platform: a.platform.as_deref(),
        foreign_ok: a.foreign_traces,
        lenient: a.ingest.lenient,
        sweep: view.as_ref(),
    };
    let score = traces::score(table_path, &table, &a.traces, &filter)?;
    for w in score.warnings() {
        eprintln!("warning: {w}");
    }
    if score.is_empty() {
        bail!(
            "{}: no shape of the traces could be scored: it needs shapes where the table leaves \
             NCCL alone, or where the job ran both NCCL's choice and the table's setting; run \
             the jobs with DYNCC_EXPLORE to measure both. Shapes with one side only:\n{}",
            table_path.display(),
            score.not_comparable_lines(5)
        );
    }
    if a.json {
        println!("{}", crate::output::pretty(&score)?);
    } else {
        score.print();
    }
    Ok(0)
}

fn print_score(title: &str, score: &Score, cells: Option<&[Scored]>) {
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
    if let Some(r) = score.reachable {
        println!(
            "(reachable {:.1}%: the share of the available gain the kept node counts showed beyond the margin,\n \
             the most a table read off them could capture; where it is low, measure those counts)",
            100.0 * r
        );
    }
    let reach = |r: Option<f64>| r.map_or(String::new(), |r| format!("{:>9.1}%", 100.0 * r));
    println!(
        "\n{:>6} {:>6} {:>9} {:>9} {:>9}{} {:>11}",
        "nodes",
        "cells",
        "table",
        "default",
        "captured",
        if score.reachable.is_some() {
            format!(" {:>9}", "reachable")
        } else {
            String::new()
        },
        "regressions"
    );
    for (n, s) in &score.by_nodes {
        println!(
            "{:>6} {:>6} {:>9.4} {:>9.4} {:>8.1}%{} {:>11}",
            n,
            s.cells,
            s.table_geomean,
            s.default_geomean,
            100.0 * s.captured,
            s.reachable
                .map_or(String::new(), |_| format!(" {}", reach(s.reachable))),
            s.regressions
        );
    }
    if score.unscorable + score.no_default > 0 {
        println!(
            "\nnot scored: {} cells without a default run, {} where the table's choice was not measured",
            score.no_default, score.unscorable
        );
    }
    if let Some(cells) = cells {
        println!();
        for c in cells {
            println!(
                "{:<14} {:>10} nodes {:>3} ranks {:>5}  {:<20} table {:.3} default {:.3}",
                c.collective, c.nbytes, c.nnodes, c.nranks, c.choice, c.table, c.default
            );
        }
    }
}
