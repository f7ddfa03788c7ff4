//! `dyncc eval TABLE --traces PATH...`: scores a table on what jobs measured
//! (trace files from `DYNCC_TRACE`), within one trace file only: at each
//! shape (nodes, ranks, collective, size) a job ran both NCCL's own choice
//! and the table's decision, the ratio of their geometric mean GPU times.
//! A trace's kernel time is never set against a sweep's nccl-tests time.

use std::path::{Path, PathBuf};

use anyhow::bail;
use dyncc_tables::{Comm, Decision, Setting, Table};
use serde::Serialize;

use std::collections::BTreeMap;

use crate::decide::{DEFAULT_MARGIN, DEFAULT_NOISE_Z};
use crate::ingest::traces::{self, AtShape, Shape, Side, Verdict};

/// One shape's share of a pooled figure: the log of t(table) / t(NCCL's
/// choice), its variance, the calls the jobs made there, and the weight:
/// the communicators that measured it (a communicator weighs like one
/// sweep run, whatever its calls: one file claiming a billion calls is one
/// communicator).
#[derive(Clone, Copy)]
struct LnRatio {
    ln: f64,
    var: f64,
    calls: u64,
    comms: usize,
}

impl LnRatio {
    /// A shape where the table leaves NCCL alone: ratio 1, no noise.
    fn default_at(calls: u64, comms: usize) -> LnRatio {
        LnRatio {
            ln: 0.0,
            var: 0.0,
            calls,
            comms,
        }
    }
}

/// One compared shape, as printed.
#[derive(Serialize, Clone)]
pub struct Compared {
    /// The first file that measured the shape.
    file: PathBuf,
    /// Files that measured it.
    files: usize,
    nodes: u32,
    ranks: u32,
    collective: &'static str,
    bytes: u64,
    decision: String,
    /// Geometric mean GPU times, us.
    table_us: f64,
    nccl_us: f64,
    table_count: u64,
    nccl_count: u64,
    /// Communicators that ran the table's setting, NCCL's choice, both.
    table_comms: usize,
    nccl_comms: usize,
    paired: usize,
    /// t(table) / t(NCCL's choice).
    ratio: f64,
    /// Standard error of ln(ratio); null when a side ran once.
    se_ln: Option<f64>,
    /// better (wins by compile's rule), worse (slower beyond the noise),
    /// agree, or too little evidence (fewer calls or communicators than
    /// the rule asks; not pooled).
    verdict: &'static str,
}

/// A shape where one side is missing.
#[derive(Serialize)]
pub struct NotComparable {
    file: PathBuf,
    nodes: u32,
    ranks: u32,
    collective: &'static str,
    bytes: u64,
    decision: String,
    why: &'static str,
}

/// Pooled over shapes, weighted by the communicators that measured each.
#[derive(Serialize, Default)]
pub struct Pooled {
    shapes: usize,
    calls: u64,
    geomean: f64,
    se_ln: Option<f64>,
}

/// The whole score.
#[derive(Serialize)]
pub struct TraceScore {
    title: String,
    files: usize,
    compared: Vec<Compared>,
    better: usize,
    worse: usize,
    agree: usize,
    too_little: usize,
    /// Shapes where the table leaves NCCL alone, or forces what NCCL chose
    /// there anyway (ratio 1 by construction).
    default_shapes: usize,
    default_calls: u64,
    not_comparable: Vec<NotComparable>,
    /// Over the compared shapes.
    pooled: Pooled,
    /// Over the compared and the default shapes.
    pooled_with_default: Pooled,
    /// What exploration cost the jobs (`DYNCC_EXPLORE`).
    exploration: super::explore_cost::ExploreCost,
    warnings: Vec<String>,
}

/// The trace files among `paths` (files as given; directories: the trace
/// files below them, a directory per job or deeper). A directory without
/// any is an error.
fn trace_files(paths: &[PathBuf]) -> anyhow::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            let traces::Found {
                files: here,
                skipped,
            } = traces::find(&mut vec![p.clone()]);
            for s in &skipped {
                eprintln!("warning: skipped {}: {}", s.file.display(), s.reason);
            }
            if here.is_empty() {
                bail!(
                    "{}: no *.trace files in or below this directory; give the directory \
                     DYNCC_TRACE named, or one above such directories (the plugin writes \
                     dyncc-HOST-PID-NONCE.trace there at exit)",
                    p.display()
                );
            }
            out.extend(here);
        } else {
            out.push(p.clone());
        }
    }
    Ok(out)
}

/// Whether a setting that ran is decision `d`'s (its channel count too
/// when `d` forces one).
fn runs(r: &Setting, d: Decision) -> bool {
    d.setting().is_some_and(|s| s.ran_as(r))
}

/// Pools `items` into one geometric mean, weighted by communicators.
fn pool<'a>(items: impl Iterator<Item = &'a LnRatio> + Clone) -> Pooled {
    let w: f64 = items.clone().map(|i| i.comms as f64).sum();
    if w == 0.0 {
        return Pooled::default();
    }
    let mean = items.clone().map(|i| i.ln * i.comms as f64).sum::<f64>() / w;
    let var = items
        .clone()
        .map(|i| (i.comms as f64 / w).powi(2) * i.var)
        .sum::<f64>();
    Pooled {
        shapes: items.clone().count(),
        calls: items.map(|i| i.calls).sum(),
        geomean: mean.exp(),
        se_ln: var.is_finite().then(|| var.sqrt()),
    }
}

/// Where the traces scored may come from: as `dyncc compile` checks them
/// against its sweep, `eval --traces` checks them against the table's
/// platform, GPU and sweep ([`traces::check_provenance`]).
pub struct TraceFilter<'a> {
    /// Keep only traces of this platform label or GPU (`--platform`).
    pub platform: Option<&'a str>,
    /// Use traces of another platform or sweep (`--foreign-traces`).
    pub foreign_ok: bool,
    /// Skip damaged traces (`--lenient`).
    pub lenient: bool,
    /// The sweep the table was compiled from (`--sweep`): its repeats set
    /// the least spread between communicators, as compile's do; without
    /// it, the rule's default (one run's sd of 2 %).
    pub sweep: Option<&'a traces::SweepView>,
}

/// Scores `table` (read from `table_path`) on the trace files under
/// `paths`. Errors name the file: unreadable, not a valid trace (with
/// `lenient`, such a file is skipped and warned about), or of another
/// platform or sweep than the table's (unless `foreign_ok`).
pub fn score(
    table_path: &Path,
    table: &Table<'_>,
    paths: &[PathBuf],
    filter: &TraceFilter<'_>,
) -> anyhow::Result<TraceScore> {
    let lenient = filter.lenient;
    let files = trace_files(paths)?;
    let digest = table.digest();
    let mut warnings = Vec::new();
    let mut compared = Vec::new();
    let mut not_comparable = Vec::new();
    // Per compared shape, and per shape the table leaves to NCCL.
    let mut ratios: Vec<LnRatio> = Vec::new();
    let mut defaults: Vec<LnRatio> = Vec::new();
    let (mut read, skipped) = traces::read(&files, lenient)?;
    let meta = |k| table.meta(k).filter(|v| !v.is_empty());
    let pv = traces::check_provenance(
        &mut read,
        meta("platform"),
        meta("gpu"),
        table.sweep_fingerprint(),
        filter.platform,
        filter.foreign_ok,
    )
    .map_err(|e| {
        e.context(format!(
            "scoring {} on jobs' traces (the table's platform and sweep against theirs)",
            table_path.display()
        ))
    })?;
    for f in pv.unproven_used.iter() {
        warnings.push(format!(
            "used {f}: it does not say which table and sweep its job ran (--foreign-traces)"
        ));
    }
    for f in pv.foreign_used.iter().chain(&pv.other_sweep_used) {
        warnings.push(format!(
            "used {f}: another platform or sweep than the table's (--foreign-traces)"
        ));
    }
    if pv.other_platform > 0 {
        warnings.push(format!(
            "left out {} trace file(s) of another platform than --platform names",
            pv.other_platform
        ));
    }
    for s in &skipped {
        warnings.push(format!(
            "skipped {} (--lenient): {}",
            s.file.display(),
            s.reason
        ));
    }
    for tf in &read {
        match tf.table_digest {
            Some(d) if d == digest => {}
            d => {
                warnings.push(format!(
                "{}: the job ran {}, not {} (digest {digest:016x}); its times still measure the \
                 settings that ran",
                tf.path.display(),
                d.map_or("without a table".into(), |d| format!("table digest {d:016x}")),
                table_path.display()
            ))
            }
        }
    }
    // Who ran what, per communicator and shape: the one reading of a trace
    // (`ingest::traces`), each communicator once.
    let mut by_shape: BTreeMap<(u32, Shape), Vec<(usize, AtShape)>> = BTreeMap::new();
    let readings = traces::Readings::new(&read, &mut traces::TraceCounts::default());
    for (fi, tf) in read.iter().enumerate() {
        for ((_, s), at) in readings.classify(fi) {
            by_shape
                .entry((tf.nccl_version, s))
                .or_default()
                .push((fi, at));
        }
    }
    let bar = traces::Bar::new(DEFAULT_MARGIN, DEFAULT_NOISE_Z);
    for (
        (
            _,
            Shape {
                nodes,
                ranks,
                coll,
                n_bytes,
            },
        ),
        comms,
    ) in by_shape
    {
        let file = read[comms[0].0].path.as_ref().clone();
        let d = table
            .lookup(
                coll as u32,
                &Comm::new(u64::from(ranks), u64::from(nodes)),
                n_bytes,
                1,
                0,
            )
            .decision;
        let mut all = AtShape::default();
        for (_, at) in &comms {
            all.merge(at);
        }
        let calls = all
            .others
            .values()
            .fold(all.nccl.count.saturating_add(all.unknown), |n, o| {
                n.saturating_add(o.side.count)
            });
        if d == Decision::Default {
            defaults.push(LnRatio::default_at(calls, comms.len()));
            continue;
        }
        // Per communicator: NCCL's choice and the table's setting.
        let pairs: Vec<(Side, Side)> = comms
            .iter()
            .map(|(_, at)| {
                let mut mine = Side::default();
                for (s, o) in &at.others {
                    if runs(s, d) {
                        mine.merge(&o.side);
                    }
                }
                (at.nccl, mine)
            })
            .collect();
        let (mine, nccl) = pairs.iter().fold((0u64, 0u64), |(m, n), p| {
            (m.saturating_add(p.1.count), n.saturating_add(p.0.count))
        });
        // NCCL chose the table's setting itself: nothing to gain or
        // lose there, as where the table leaves NCCL alone.
        let nccl_runs_it = all.nccl_settings.keys().all(|s| runs(s, d));
        if mine == 0 && nccl > 0 && nccl_runs_it {
            defaults.push(LnRatio::default_at(calls, comms.len()));
            continue;
        }
        let why = match (mine, nccl) {
            (0, 0) => Some("neither the table's setting nor NCCL's choice was measured"),
            (0, _) => Some("the table's setting was not measured there (NCCL's choice was)"),
            (_, 0) => Some("NCCL's choice was not measured (only the table's setting ran)"),
            _ => None,
        };
        let var1 = traces::var_call(pairs.iter().flat_map(|p| [&p.0, &p.1]));
        // One run's spread: the sweep's where given, as compile reads it.
        let run_sd = filter.sweep.map_or(traces::rule::RUN_SD_DEFAULT, |v| {
            v.run_sd(coll, ranks / nodes.max(1))
        });
        let e = traces::evidence(&pairs, var1, run_sd);
        let why = why.or_else(|| {
            e.is_some_and(|e| {
                e.paired == 0 && e.nccl_comms + e.comms < traces::rule::MIN_COMMS_ACROSS
            })
            .then_some(
                "no communicator ran both sides, and too few ran one side each to compare \
                 across them",
            )
        });
        let (Some(e), None) = (e, why) else {
            not_comparable.push(NotComparable {
                file,
                nodes,
                ranks,
                collective: coll.name(),
                bytes: n_bytes,
                decision: d.to_string(),
                why: why.unwrap_or("nothing measured"),
            });
            continue;
        };
        // The rule compile decides by (`ingest::traces::judge`).
        let verdict = match traces::judge(&e, bar) {
            Verdict::Wins => "better",
            Verdict::Loses => "worse",
            Verdict::Short | Verdict::Unclear => "agree",
            Verdict::TooLittle => "too little evidence",
        };
        let ln = -e.ln_gain;
        let var = e.sd * e.sd;
        // NCCL's choice: the geometric mean over its communicators.
        let means: Vec<f64> = pairs
            .iter()
            .filter(|p| p.0.count > 0)
            .map(|p| p.0.mean_ln())
            .collect();
        let nccl_ln = means.iter().sum::<f64>() / means.len().max(1) as f64;
        if verdict != "too little evidence" {
            ratios.push(LnRatio {
                ln,
                var,
                calls,
                comms: e.paired + (e.nccl_comms - e.paired).min(e.comms - e.paired),
            });
        }
        compared.push(Compared {
            file,
            files: comms
                .iter()
                .map(|c| c.0)
                .collect::<std::collections::BTreeSet<_>>()
                .len(),
            nodes,
            ranks,
            collective: coll.name(),
            bytes: n_bytes,
            decision: d.to_string(),
            table_us: (nccl_ln + ln).exp() / 1e3,
            nccl_us: nccl_ln.exp() / 1e3,
            table_count: e.calls,
            nccl_count: e.nccl_calls,
            table_comms: e.comms,
            nccl_comms: e.nccl_comms,
            paired: e.paired,
            ratio: ln.exp(),
            se_ln: e.sd.is_finite().then_some(e.sd),
            verdict,
        });
    }
    let count = |v: &str| compared.iter().filter(|c| c.verdict == v).count();
    Ok(TraceScore {
        title: format!(
            "{} on the traces ({} files; the table's setting against NCCL's choice at the same \
             shape, within each communicator that ran both and across those that ran one; judged \
             by compile's rule at its default margin and noise z; {})",
            table_path.display(),
            files.len(),
            match filter.sweep {
                Some(_) => "the least spread between communicators from the sweep's repeats",
                None => "no --sweep: the least spread between communicators is the rule's 2 %",
            }
        ),
        files: files.len(),
        better: count("better"),
        worse: count("worse"),
        agree: count("agree"),
        too_little: count("too little evidence"),
        pooled: pool(ratios.iter()),
        pooled_with_default: pool(ratios.iter().chain(&defaults)),
        compared,
        default_shapes: defaults.len(),
        default_calls: defaults.iter().map(|d| d.calls).sum(),
        not_comparable,
        exploration: super::explore_cost::explore_cost(&read),
        warnings,
    })
}

impl TraceScore {
    /// Whether nothing could be scored (no shape compared or left to NCCL).
    pub fn is_empty(&self) -> bool {
        self.compared.is_empty() && self.default_shapes == 0
    }

    /// Shapes where only one side ran, one line each (the first `max`).
    pub fn not_comparable_lines(&self, max: usize) -> String {
        let mut out: Vec<String> = self
            .not_comparable
            .iter()
            .take(max)
            .map(|n| {
                format!(
                    "  {}: {} nodes {} ranks {} {} bytes, table {}: {}",
                    n.file.display(),
                    n.nodes,
                    n.ranks,
                    n.collective,
                    n.bytes,
                    n.decision,
                    n.why
                )
            })
            .collect();
        if self.not_comparable.len() > max {
            out.push(format!(
                "  ... and {} more",
                self.not_comparable.len() - max
            ));
        }
        out.join("\n")
    }

    /// The warnings, for stderr.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Prints the score for people.
    pub fn print(&self) {
        println!("{}\n", self.title);
        if !self.compared.is_empty() {
            println!(
                "{:>5} {:>5} {:<14} {:>12} {:<20} {:>10} {:>10} {:>7} {:>8} {:>13} {:>9} {:<7} file",
                "nodes",
                "ranks",
                "collective",
                "bytes",
                "decision",
                "table us",
                "nccl us",
                "ratio",
                "+-se ln",
                "calls t/n",
                "comms t/n",
                "verdict"
            );
        }
        for c in &self.compared {
            println!(
                "{:>5} {:>5} {:<14} {:>12} {:<20} {:>10.2} {:>10.2} {:>7.4} {:>8} {:>13} {:>9} {:<7} {}{}",
                c.nodes,
                c.ranks,
                c.collective,
                c.bytes,
                c.decision,
                c.table_us,
                c.nccl_us,
                c.ratio,
                c.se_ln.map_or("-".into(), |s| format!("{s:.4}")),
                format!("{}/{}", c.table_count, c.nccl_count),
                format!("{}/{}", c.table_comms, c.nccl_comms),
                c.verdict,
                c.file.display(),
                if c.files > 1 {
                    format!(" (+{} more)", c.files - 1)
                } else {
                    String::new()
                }
            );
        }
        let se = |p: &Pooled| {
            p.se_ln
                .map_or(String::new(), |s| format!(" (+-{s:.4} in ln)"))
        };
        if self.compared.is_empty() {
            println!("compared no shape: none where the job ran both NCCL's choice and the table's setting");
        } else {
            println!(
                "\ncompared {} shapes ({} calls): geomean t(table)/t(NCCL's choice) {:.4}{}; \
                 better {}, worse {}, agree {}, too little evidence {} (not pooled)",
                self.pooled.shapes,
                self.pooled.calls,
                self.pooled.geomean,
                se(&self.pooled),
                self.better,
                self.worse,
                self.agree,
                self.too_little
            );
        }
        println!(
            "default: {} shapes ({} calls) where the table leaves NCCL alone or forces what NCCL chose (ratio 1); with them {:.4}{}",
            self.default_shapes,
            self.default_calls,
            self.pooled_with_default.geomean,
            se(&self.pooled_with_default)
        );
        println!("(geometric means weighted by the communicators that measured each shape)");
        let x = &self.exploration;
        if x.explored_calls > 0 {
            println!(
                "exploration cost the jobs {:+.3} % of their traced GPU time ({} explored calls, \
                 {:+.1} us over the table's answer at the same shapes, of {:.1} us{})",
                100.0 * x.share,
                x.explored_calls,
                x.extra_us,
                x.total_us,
                if x.unpriced_calls > 0 {
                    format!(
                        "; {} explored calls at shapes where no job ran the answer, not priced",
                        x.unpriced_calls
                    )
                } else {
                    String::new()
                }
            );
        } else {
            println!("exploration: no explored call in the traces");
        }
        if !self.not_comparable.is_empty() {
            println!("\nnot comparable ({} shapes):", self.not_comparable.len());
            for n in &self.not_comparable {
                println!(
                    "  {} nodes {} ranks {} {} bytes, table {}: {} ({})",
                    n.nodes,
                    n.ranks,
                    n.collective,
                    n.bytes,
                    n.decision,
                    n.why,
                    n.file.display()
                );
            }
        }
    }
}
