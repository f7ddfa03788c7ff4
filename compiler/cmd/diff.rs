//! `dyncc diff`: what changes for jobs when table A is replaced by table B.
//! Both tables are resolved the way the plugin resolves them (first
//! matching context, then the size rule) over every (collective, nodes,
//! ranks per node, size) region either table has a context for, and the
//! regions whose decision differs are listed with the expected effect:
//! its range over every size and node count the region spans (a region
//! can cross several rules of either table, each with its own gain), as
//! compile and query print a region's gain.

use std::path::PathBuf;

use dyncc_tables::{Coll, Decision, Lookup, Table, NUM_BUCKETS};
use serde::Serialize;

use crate::audit::files::{open, read_table};
use crate::audit::names::SettingJson;
use crate::audit::plane::{live_buckets, patches, plane, probes, run_bytes, runs, Patch, Probe};
use crate::audit::text::{fmt_decision, fmt_sizes, fmt_span};
use crate::units::fmt_gain_range;

/// Show where two tables decide differently.
///
/// Lists every region (collective, node range, ranks per node, size
/// range) where a job would get a different decision from NEW than from
/// OLD, with both decisions and the expected effect of the change: the
/// speedup of NEW over OLD by the tables' own gain estimates, as a range
/// ("+4.1 to +5.6 %") when the region spans sizes or node counts whose
/// gains differ. Metadata differences (command line, dates) are shown but
/// do not count. `dyncc plot --diff OLD NEW -o changes.svg` draws the same.
///
/// Exit status: 0 when the decisions are identical, 1 when they differ,
/// 2 when a table is missing, unreadable or not a valid table (or on a
/// usage error), so `dyncc diff old new || deploy` never deploys on error.
///
/// Examples:
///   dyncc diff old.tbl new.tbl
///   dyncc diff old.tbl new.tbl --json | jq '.changes | length'
///   dyncc diff old.tbl new.tbl --data sweep/ traces/   # what jobs measured in each change
#[derive(clap::Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct DiffArgs {
    /// The table jobs use today.
    pub old: PathBuf,
    /// The table that would replace it.
    pub new: PathBuf,
    /// The sweep NEW was compiled from and the jobs' trace files
    /// (DYNCC_TRACE directories) it read: each changed region then names
    /// the points jobs measured in it, the communicators behind them and
    /// their files, read as `dyncc compile` read them (NEW's own bar and
    /// provenance), so a reviewer sees what moved the table.
    #[arg(long, num_args = 1.., value_name = "SWEEP_AND_TRACES")]
    pub data: Vec<PathBuf>,
    /// With --data: use trace files of another platform or sweep than
    /// NEW's (refused without it, as compile refuses them).
    #[arg(long, requires = "data")]
    pub foreign_traces: bool,
    /// How to read and label the --data inputs, as for `dyncc compile`
    /// (always leniently: what cannot be read is counted).
    #[command(flatten)]
    pub ingest: crate::ingest::args::IngestArgs,
    /// Print a JSON object.
    #[arg(long)]
    pub json: bool,
}

/// What jobs' traces measured inside a changed region (`--data`).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct RegionTraces {
    /// Points (node count, ranks, size) jobs measured in the region that
    /// decided a setting's fate there.
    pub points: usize,
    /// The most communicators behind one of those points.
    pub communicators: usize,
    /// The trace files behind them, sorted.
    pub files: Vec<String>,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Side {
    #[serde(flatten)]
    pub setting: SettingJson,
    /// Smallest expected gain over NCCL's default in the region.
    pub expected_gain: f32,
    /// Largest expected gain over NCCL's default in the region.
    pub expected_gain_max: f32,
    pub basis: Option<&'static str>,
    pub context: Option<u32>,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Change {
    pub collective: &'static str,
    pub nodes: (u32, u32),
    pub ppn: (u32, u32),
    pub from_bytes: u64,
    pub to_bytes: u64,
    pub num_pipe_ops: i32,
    pub reg_buff: i32,
    pub old: Side,
    pub new: Side,
    /// Expected speedup of NEW over OLD in the region (geometric mean over
    /// its cells, one per size bucket and node range, of gain_new /
    /// gain_old; > 1 is faster).
    pub expected_effect: f64,
    /// The smallest and largest speedup of any cell of the region: the
    /// region can span rules of either table with different gains.
    pub expected_effect_min: f64,
    pub expected_effect_max: f64,
    /// How many cells the geometric mean is over, so that merging node
    /// ranges weighs each cell once.
    #[serde(skip)]
    cells: u32,
    /// With `--data`: what jobs measured in the region (`None` where they
    /// measured nothing there, or without `--data`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub traces: Option<RegionTraces>,
}

impl Change {
    /// The effect as printed: one figure, or the range over the region.
    pub fn effect_text(&self) -> String {
        fmt_gain_range(self.expected_effect_min, self.expected_effect_max)
    }

    /// Folds the same change at the next node range into this one.
    fn absorb(&mut self, y: &Change) {
        self.nodes.1 = y.nodes.1;
        for (x, y) in [(&mut self.old, &y.old), (&mut self.new, &y.new)] {
            x.expected_gain = x.expected_gain.min(y.expected_gain);
            x.expected_gain_max = x.expected_gain_max.max(y.expected_gain_max);
        }
        let (n, m) = (self.cells as f64, y.cells as f64);
        if n + m > 0.0 {
            self.expected_effect =
                ((self.expected_effect.ln() * n + y.expected_effect.ln() * m) / (n + m)).exp();
        }
        self.cells += y.cells;
        self.expected_effect_min = self.expected_effect_min.min(y.expected_effect_min);
        self.expected_effect_max = self.expected_effect_max.max(y.expected_effect_max);
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct MetaChange {
    pub key: String,
    pub old: Option<String>,
    pub new: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct DiffJson {
    pub old: String,
    pub new: String,
    pub old_digest: String,
    pub new_digest: String,
    pub identical_decisions: bool,
    pub changes: Vec<Change>,
    /// Shapes one table has a context for and the other has none: covered
    /// or no longer covered (the plugin's init line names the difference),
    /// whether or not any decision changes with it.
    pub coverage: Vec<CoverageChange>,
    pub metadata: Vec<MetaChange>,
}

/// A context of one table whose shapes no context of the other matches.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct CoverageChange {
    pub collective: &'static str,
    pub nodes: (u32, u32),
    pub ppn: (u32, u32),
    /// "new" (covered only by NEW) or "old" (no longer covered).
    pub only_in: &'static str,
}

/// The contexts of each table that no context of the other overlaps.
pub fn coverage_changes(a: &Table, b: &Table) -> Vec<CoverageChange> {
    let only = |x: &Table, y: &Table, only_in: &'static str| -> Vec<CoverageChange> {
        x.contexts()
            .map(|c| c.spec())
            .filter(|s| {
                !y.contexts().map(|c| c.spec()).any(|o| {
                    o.coll == s.coll
                        && o.nodes.0 <= s.nodes.1
                        && s.nodes.0 <= o.nodes.1
                        && o.ppn.0 <= s.ppn.1
                        && s.ppn.0 <= o.ppn.1
                })
            })
            .map(|s| CoverageChange {
                collective: s.coll.name(),
                nodes: s.nodes,
                ppn: s.ppn,
                only_in,
            })
            .collect()
    };
    let mut v = only(b, a, "new");
    v.extend(only(a, b, "old"));
    v
}

fn side(row: &[Lookup; NUM_BUCKETS], r: (u8, u8)) -> Side {
    let l = row[r.0 as usize];
    let gains: Vec<f32> = live_buckets()
        .filter(|b| (r.0..=r.1).contains(b))
        .map(|b| row[b as usize].gain)
        .collect();
    Side {
        setting: SettingJson::of(l.decision),
        expected_gain: gains.iter().copied().fold(f32::INFINITY, f32::min),
        expected_gain_max: gains.iter().copied().fold(f32::NEG_INFINITY, f32::max),
        basis: l.basis.map(dyncc_tables::Basis::name),
        context: l.context,
    }
}

fn decision_of(s: &Side) -> String {
    fmt_decision(s.setting.decision())
}

/// The changed regions of one patch under one probe.
fn patch_changes(a: &Table, b: &Table, p: &Patch, probe: Probe) -> Vec<Change> {
    let (ra, rb) = (plane(a, p, probe), plane(b, p, probe));
    let pair: Box<[(Decision, Decision); NUM_BUCKETS]> = {
        let mut v = Box::new([(Decision::Default, Decision::Default); NUM_BUCKETS]);
        for i in 0..NUM_BUCKETS {
            v[i] = (ra[i].decision, rb[i].decision);
        }
        v
    };
    runs(&pair, |x, y| x == y)
        .into_iter()
        .filter(|r| pair[r.0 as usize].0 != pair[r.0 as usize].1)
        .map(|r| {
            let (lo, hi) = run_bytes(r);
            let effects: Vec<f64> = live_buckets()
                .filter(|k| (r.0..=r.1).contains(k))
                .map(|k| rb[k as usize].gain as f64 / ra[k as usize].gain as f64)
                .collect();
            let log_sum: f64 = effects.iter().map(|e| e.ln()).sum();
            Change {
                collective: p.coll.name(),
                nodes: p.nodes,
                ppn: p.ppn,
                from_bytes: lo,
                to_bytes: hi,
                num_pipe_ops: probe.pipe_ops,
                reg_buff: probe.reg_buff,
                old: side(&ra, r),
                new: side(&rb, r),
                expected_effect: (log_sum / effects.len().max(1) as f64).exp(),
                expected_effect_min: effects.iter().copied().fold(f64::INFINITY, f64::min),
                expected_effect_max: effects.iter().copied().fold(f64::NEG_INFINITY, f64::max),
                cells: effects.len() as u32,
                traces: None,
            }
        })
        .collect()
}

/// Every region where `a` and `b` decide differently, adjacent node
/// ranges with the same changes merged.
pub fn diff(a: &Table, b: &Table) -> Vec<Change> {
    let mut out: Vec<Change> = Vec::new();
    for probe in probes(&[a, b]) {
        for coll in Coll::ALL.iter().rev().copied() {
            // (patch, its changes) in (ppn, nodes) order.
            let mut prev: Option<(Patch, Vec<Change>)> = None;
            for p in patches(&[a, b], coll) {
                let ch = patch_changes(a, b, &p, probe);
                let same_as_prev = |q: &(Patch, Vec<Change>)| {
                    q.0.ppn == p.ppn
                        && q.0.nodes.1.checked_add(1) == Some(p.nodes.0)
                        && q.1.len() == ch.len()
                        && q.1.iter().zip(&ch).all(|(x, y)| {
                            (
                                x.from_bytes,
                                x.to_bytes,
                                decision_of(&x.old),
                                decision_of(&x.new),
                            ) == (
                                y.from_bytes,
                                y.to_bytes,
                                decision_of(&y.old),
                                decision_of(&y.new),
                            )
                        })
                };
                match prev.as_mut() {
                    Some(q) if same_as_prev(q) => {
                        q.0.nodes.1 = p.nodes.1;
                        for (x, y) in q.1.iter_mut().zip(&ch) {
                            x.absorb(y);
                        }
                    }
                    _ => {
                        if let Some((_, c)) = prev.take() {
                            out.extend(c);
                        }
                        prev = Some((p, ch));
                    }
                }
            }
            if let Some((_, c)) = prev {
                out.extend(c);
            }
        }
    }
    // A probe other than the plain call only adds what the plain call did not show.
    let plain: Vec<Change> = out
        .iter()
        .filter(|c| c.num_pipe_ops == 1 && c.reg_buff == 0)
        .cloned()
        .collect();
    out.retain(|c| {
        (c.num_pipe_ops == 1 && c.reg_buff == 0)
            || !plain.iter().any(|p| {
                p.collective == c.collective
                    && p.nodes == c.nodes
                    && p.ppn == c.ppn
                    && p.from_bytes == c.from_bytes
                    && p.to_bytes == c.to_bytes
                    && p.old == c.old
                    && p.new == c.new
            })
    });
    out
}

pub fn meta_changes(a: &Table, b: &Table) -> Vec<MetaChange> {
    let mut keys: Vec<&str> = a
        .meta_entries()
        .map(|e| e.0)
        .chain(b.meta_entries().map(|e| e.0))
        .collect();
    keys.sort_unstable();
    keys.dedup();
    keys.into_iter()
        .filter(|k| a.meta(k) != b.meta(k))
        .map(|k| MetaChange {
            key: k.to_string(),
            old: a.meta(k).map(str::to_string),
            new: b.meta(k).map(str::to_string),
        })
        .collect()
}

/// The points jobs measured inside change `c`'s region.
fn region_traces(t: &crate::audit::traced::Traced, c: &Change) -> Option<RegionTraces> {
    let inside: Vec<_> = t
        .points()
        .filter(|p| {
            let ppn = p.ranks / p.nodes.max(1);
            p.collective == c.collective
                && (c.nodes.0..=c.nodes.1).contains(&p.nodes)
                && (c.ppn.0..=c.ppn.1).contains(&ppn)
                && (c.from_bytes..=c.to_bytes).contains(&p.bytes)
        })
        .collect();
    if inside.is_empty() {
        return None;
    }
    let mut files: Vec<String> = inside
        .iter()
        .flat_map(|p| p.files.iter().cloned())
        .collect();
    files.sort();
    files.dedup();
    Some(RegionTraces {
        points: inside.len(),
        communicators: inside.iter().map(|p| p.communicators).max().unwrap_or(0),
        files,
    })
}

fn print_human(j: &DiffJson) {
    println!(
        "old {} (digest {})\nnew {} (digest {})",
        j.old, j.old_digest, j.new, j.new_digest
    );
    if j.changes.is_empty() {
        println!("\nno differences: every call gets the same decision from both tables");
    } else {
        println!(
            "\n{} region{} decide differently (effect = expected speedup of new over old):",
            j.changes.len(),
            if j.changes.len() == 1 { "" } else { "s" }
        );
        println!(
            "  {:<14} {:>7} {:>5}  {:<28} {:<22}    {:<22} {:>15}",
            "collective", "nodes", "ppn", "sizes", "old", "new", "effect"
        );
        for c in &j.changes {
            let gate = if c.num_pipe_ops != 1 || c.reg_buff != 0 {
                format!("  (numPipeOps {}, regBuff {})", c.num_pipe_ops, c.reg_buff)
            } else {
                String::new()
            };
            println!(
                "  {:<14} {:>7} {:>5}  {:<28} {:<22} -> {:<22} {:>15}{gate}",
                c.collective,
                fmt_span(c.nodes.0, c.nodes.1),
                fmt_span(c.ppn.0, c.ppn.1),
                fmt_sizes(c.from_bytes, c.to_bytes),
                decision_of(&c.old),
                decision_of(&c.new),
                c.effect_text()
            );
            if let Some(t) = &c.traces {
                const SHOWN: usize = 3;
                let more = t.files.len().saturating_sub(SHOWN);
                println!(
                    "      jobs measured {} point{} here (up to {} communicator{} each): {}{}",
                    t.points,
                    if t.points == 1 { "" } else { "s" },
                    t.communicators,
                    if t.communicators == 1 { "" } else { "s" },
                    t.files
                        .iter()
                        .take(SHOWN)
                        .cloned()
                        .collect::<Vec<_>>()
                        .join(", "),
                    if more > 0 {
                        format!(" and {more} more")
                    } else {
                        String::new()
                    }
                );
            }
        }
    }
    if !j.coverage.is_empty() {
        println!("\ncoverage that differs (shapes one table has a context for; decisions as listed above):");
        for c in &j.coverage {
            println!(
                "  {:<14} nodes {:>7} ppn {:>5}  {}",
                c.collective,
                fmt_span(c.nodes.0, c.nodes.1),
                fmt_span(c.ppn.0, c.ppn.1),
                if c.only_in == "new" {
                    "covered only by new"
                } else {
                    "covered only by old"
                }
            );
        }
    }
    if !j.metadata.is_empty() {
        println!("\nmetadata that differs (does not affect decisions):");
        for m in &j.metadata {
            let short = |v: &Option<String>| match v {
                None => "(absent)".to_string(),
                Some(s) if s.lines().count() <= 1 => s.clone(),
                Some(s) => format!(
                    "{} ... ({} lines)",
                    s.lines().next().unwrap_or(""),
                    s.lines().count()
                ),
            };
            println!("  {:<14} {} -> {}", m.key, short(&m.old), short(&m.new));
        }
    }
}

pub fn run(a: DiffArgs) -> anyhow::Result<i32> {
    let (ba, bb) = (read_table(&a.old)?, read_table(&a.new)?);
    let (ta, tb) = (open(&a.old, &ba)?, open(&a.new, &bb)?);
    let mut changes = diff(&ta, &tb);
    if !a.data.is_empty() {
        let data =
            crate::audit::traced::read_data(&tb, &a.new, &a.data, &a.ingest, a.foreign_traces)?;
        let Some(traced) = data.traced else {
            anyhow::bail!(
                "--data holds no trace file NEW could have read: give the sweep NEW was compiled \
                 from and the jobs' DYNCC_TRACE directories, e.g. `--data SWEEP_DIR TRACE_DIR`"
            );
        };
        for c in &mut changes {
            c.traces = region_traces(&traced, c);
        }
    }
    let j = DiffJson {
        old: a.old.display().to_string(),
        new: a.new.display().to_string(),
        old_digest: format!("{:016x}", ta.digest()),
        new_digest: format!("{:016x}", tb.digest()),
        identical_decisions: changes.is_empty(),
        changes,
        coverage: coverage_changes(&ta, &tb),
        metadata: meta_changes(&ta, &tb),
    };
    if a.json {
        println!("{}", crate::output::pretty(&j)?);
    } else {
        print_human(&j);
    }
    Ok(if j.identical_decisions { 0 } else { 1 })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::testutil;
    use dyncc_tables::*;

    #[test]
    fn identical_tables_have_no_changes() {
        let b = testutil::sample();
        let t = Table::from_bytes(&b).unwrap();
        assert!(diff(&t, &t).is_empty());
    }

    #[test]
    fn a_changed_rule_is_one_region_with_its_effect() {
        let b = testutil::sample();
        let old = Table::from_bytes(&b).unwrap();
        // new: the same except 4 nodes forces ring/simple (gain 1.2) from 1 MiB.
        let mut nb = TableBuilder::new();
        for c in old.contexts() {
            let mut rules: Vec<Rule> = c.rules().collect();
            if c.spec().nodes == (4, 4) {
                rules[1].decision = testutil::force(Algo::Ring, Proto::Simple, 0);
                rules[1].gain = 1.2;
            }
            nb.context(c.spec(), &rules).unwrap();
        }
        let nbytes = nb.build().unwrap();
        let new = Table::from_bytes(&nbytes).unwrap();
        let d = diff(&old, &new);
        assert_eq!(d.len(), 1, "{d:?}");
        let c = &d[0];
        assert_eq!(
            (c.collective, c.nodes, c.ppn, c.from_bytes, c.to_bytes),
            ("allreduce", (4, 4), (8, 8), 1 << 20, u64::MAX)
        );
        assert_eq!(
            (
                c.old.setting.algorithm,
                c.old.setting.protocol,
                c.old.setting.channels
            ),
            ("ring", "ll128", 16)
        );
        assert_eq!(
            (c.new.setting.algorithm, c.new.setting.protocol),
            ("ring", "simple")
        );
        assert!(
            (c.expected_effect - 1.2 / 1.12).abs() < 1e-3,
            "{}",
            c.expected_effect
        );
        // Dropping a context: its forced region now goes to NCCL.
        let mut nb = TableBuilder::new();
        for c in old.contexts().filter(|c| c.spec().nodes != (2, 2)) {
            nb.context(c.spec(), &c.rules().collect::<Vec<_>>())
                .unwrap();
        }
        let nbytes = nb.build().unwrap();
        let new = Table::from_bytes(&nbytes).unwrap();
        let d = diff(&old, &new);
        assert_eq!(d.len(), 1, "{d:?}");
        assert_eq!(d[0].nodes, (2, 2));
        assert_eq!(d[0].new.setting.algorithm, "default");
        assert_eq!(d[0].new.context, None);
        // ... and the shape is covered only by the old table.
        assert_eq!(
            coverage_changes(&old, &new),
            [CoverageChange {
                collective: "allreduce",
                nodes: (2, 2),
                ppn: (8, 8),
                only_in: "old",
            }]
        );
        assert!(coverage_changes(&old, &old).is_empty());
    }
}
