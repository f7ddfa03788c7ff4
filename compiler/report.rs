//! What a compile did and why: inputs, platform, coverage, every forced
//! region with its expected gain and basis, what was left to NCCL, and the
//! explain trees' fidelity. `dyncc compile` prints it (or its JSON).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use dyncc_tables::{bucket_lower_bound, bucket_upper_bound, BucketDecision, Decision};
use serde::Serialize;

pub use crate::audit::coverage::{measured_sizes, MeasuredSizes};
use crate::audit::evidence::{Evidence, Ground};
use crate::audit::names::SettingJson;
use crate::decide::{DecideOptions, GridDecisions, Why};
use crate::distil::Fidelity;
use crate::emit::PlannedContext;
use crate::features::{Grid, GridNotes};
use crate::ingest;
use crate::units::fmt_bytes;

#[derive(Clone, Debug, Default, Serialize)]
pub struct Report {
    pub inputs: Inputs,
    pub platform: Platform,
    pub coverage: Vec<Coverage>,
    pub forced: Vec<Forced>,
    /// Per collective: measured points left to NCCL, by reason.
    pub left_alone: BTreeMap<String, BTreeMap<String, usize>>,
    pub outside: Vec<String>,
    /// Per grid: which node counts are decided, and how.
    pub reach: Vec<String>,
    pub trees: BTreeMap<String, Fidelity>,
    pub notes: Vec<String>,
    /// What `--lenient` skipped (file, line, why), so nothing is dropped silently.
    pub skipped: Vec<ingest::Skip>,
    pub table: TableInfo,
    /// What jobs' traces changed, when traces were given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub traces: Option<TraceChanges>,
    /// Forced size buckets left to NCCL because jobs saw NCCL run a
    /// symmetric kernel or a copy-engine method in most of its own calls
    /// there ([`crate::emit::leave_other_paths`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub other_paths: Vec<OtherPathJson>,
}

/// A forced size bucket left to NCCL where NCCL mostly runs a path the
/// tuner cannot choose.
#[derive(Clone, Debug, Serialize)]
pub struct OtherPathJson {
    pub collective: String,
    /// The context's node counts, and the count the jobs ran at.
    pub nodes: (u32, u32),
    pub traced_nodes: u32,
    pub ppn: u32,
    pub from_bytes: u64,
    pub to_bytes: u64,
    /// The force it would have been.
    pub was: SettingJson,
    /// NCCL's own calls there that ran a symmetric kernel or on the copy
    /// engines, and those that ran a classic (algorithm, protocol).
    pub other_path_calls: u64,
    pub classic_calls: u64,
    /// Communicators that saw NCCL mostly run that path (each weighs one,
    /// whatever its calls), and those that saw it mostly run a classic pair.
    pub communicators: u32,
    pub classic_communicators: u32,
    /// A trace file that saw it.
    pub file: String,
}

impl OtherPathJson {
    /// The report's line.
    pub fn text(&self) -> String {
        format!(
            "{} at {} nodes x {} ranks per node, {} .. <{}: in {} of {} communicators NCCL ran a \
             symmetric kernel or a copy-engine method in most of its own calls ({} of {} calls; \
             {}); left to NCCL instead of {} (forcing a classic pair displaces that path; only \
             the sweep's measurement at this point may force one)",
            self.collective,
            self.traced_nodes,
            self.ppn,
            fmt_bytes(self.from_bytes),
            fmt_bytes(self.to_bytes.saturating_add(1)),
            self.communicators,
            self.communicators
                .saturating_add(self.classic_communicators),
            self.other_path_calls,
            self.other_path_calls.saturating_add(self.classic_calls),
            self.file,
            self.was
        )
    }
}

/// What became of a point jobs measured, against the table that ran there.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TraceOutcome {
    /// The deployed table forced a setting; the jobs bore it out.
    Confirmed,
    /// The deployed table forced a setting that lost (or did not win by the
    /// noise and margin) in the jobs: NCCL decides again.
    Reverted,
    /// The deployed table forced a setting; another one won.
    Changed,
    /// The deployed table left NCCL alone; a setting the jobs explored won.
    New,
    /// NCCL's choice, as before.
    Unchanged,
}

/// A traced point with what the new table does there.
#[derive(Clone, Debug, Serialize)]
pub struct TracedDecision {
    #[serde(flatten)]
    pub point: ingest::traces::TracedPoint,
    /// The new table's decision here.
    pub decision: String,
    pub outcome: TraceOutcome,
}

/// What jobs' traces changed: the figures of reading them, and per point
/// the outcome.
#[derive(Clone, Debug, Serialize)]
pub struct TraceChanges {
    #[serde(flatten)]
    pub read: ingest::traces::TraceCounts,
    /// Points of counts the sweep skipped where jobs that let NCCL choose
    /// saw it run one setting, at a count where they also measured a point:
    /// forcing that setting there runs what NCCL runs, so it is no
    /// candidate there ([`crate::features::Grid::nccl_runs`]).
    pub nccl_runs_marked: usize,
    /// Points the sweep did not measure (another node count or size).
    pub added: usize,
    /// Points the sweep measured too, now decided by the traces.
    pub replaced: usize,
    pub confirmed: usize,
    pub reverted: usize,
    pub changed: usize,
    pub new: usize,
    pub unchanged: usize,
    pub points: Vec<TracedDecision>,
}

impl TraceChanges {
    pub fn new(
        notes: ingest::traces::TraceNotes,
        grids: &[Grid],
        decided: &[GridDecisions],
    ) -> TraceChanges {
        let mut t = TraceChanges {
            read: notes.read,
            nccl_runs_marked: grids.iter().map(Grid::nccl_run_marks).sum(),
            added: 0,
            replaced: 0,
            confirmed: 0,
            reverted: 0,
            changed: 0,
            new: 0,
            unchanged: 0,
            points: Vec::new(),
        };
        for p in notes.points {
            let k = p.key;
            let ppn = k.ranks / k.nodes.max(1);
            let found = grids.iter().zip(decided).find_map(|(g, d)| {
                if g.coll != k.coll || g.ppn != ppn || g.state != crate::record::State::BASELINE {
                    return None;
                }
                let si = g.sizes.binary_search(&k.n_bytes).ok()?;
                let a = d
                    .anchors
                    .iter()
                    .find(|a| a.measured && a.nodes == k.nodes)?;
                Some(g.configs[a.per_size[si].cfg])
            });
            let Some(now) = found else { continue };
            use ingest::traces::Deployed;
            let outcome = match p.deployed {
                Deployed::Forced(x) if x == now => TraceOutcome::Confirmed,
                Deployed::Forced(_) if now.is_default() => TraceOutcome::Reverted,
                Deployed::Forced(_) => TraceOutcome::Changed,
                Deployed::Nccl if now.is_default() => TraceOutcome::Unchanged,
                Deployed::Nccl => TraceOutcome::New,
            };
            *match outcome {
                TraceOutcome::Confirmed => &mut t.confirmed,
                TraceOutcome::Reverted => &mut t.reverted,
                TraceOutcome::Changed => &mut t.changed,
                TraceOutcome::New => &mut t.new,
                TraceOutcome::Unchanged => &mut t.unchanged,
            } += 1;
            if p.replaced_sweep {
                t.replaced += 1;
            } else {
                t.added += 1;
            }
            t.points.push(TracedDecision {
                decision: if now.is_default() {
                    "default".into()
                } else {
                    now.to_string()
                },
                point: p,
                outcome,
            });
        }
        t
    }
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
    /// The sweep's fingerprint (`Dataset::sweep_fingerprint_of`), 16 hex
    /// digits; the table records it and jobs' traces carry it.
    pub sweep: Option<String>,
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

impl Coverage {
    /// The coverage as the table's `coverage` metadata states it:
    /// `allreduce ppn 8 nodes [1, 2, 4] 8 B..4 GiB` (entries joined by `; `;
    /// [`measured_sizes`] reads them back).
    pub fn meta_text(&self) -> String {
        format!(
            "{} ppn {} nodes {:?} {}..{}",
            self.collective,
            self.ppn,
            self.nodes,
            fmt_bytes(self.min_bytes),
            fmt_bytes(self.max_bytes)
        )
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Forced {
    pub collective: String,
    pub nodes: (u32, u32),
    pub ppn: (u32, u32),
    pub from_bytes: u64,
    pub to_bytes: u64,
    #[serde(flatten)]
    pub setting: SettingJson,
    /// Smallest expected speedup of the table's rules in the region
    /// (t_default / t_choice).
    pub gain: f64,
    /// Largest one.
    pub gain_max: f64,
    /// Every ground of those rules, worded by [`crate::audit::evidence`]
    /// as `explain` and `query` word them.
    pub basis: String,
    #[serde(skip)]
    pub evidence: Evidence,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct TableInfo {
    pub path: Option<PathBuf>,
    pub bytes: usize,
    pub digest: String,
    pub contexts: u32,
    /// The exploration plan written (format 1.1): cells and candidates;
    /// 0 and 0 when there is none (a 1.0 table).
    pub plan_cells: u32,
    pub plan_candidates: u32,
}

pub(crate) fn describe(
    r: &mut Report,
    grids: &[Grid],
    decided: &[GridDecisions],
    contexts: &[PlannedContext],
    notes: &GridNotes,
    decide: &DecideOptions,
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
            let ni = g.nodes.iter().position(|&n| n == a.nodes).unwrap_or(0);
            // Measured points only: a sweep's (every size of a swept count,
            // as always), or where jobs' traces measured one; not sizes a
            // count only traces measured read off the sweep.
            let measured = |si: usize| g.any_at(ni, si) || (g.swept(ni) && g.swept_size(si));
            for (si, c) in a.per_size.iter().enumerate() {
                if c.why != Why::Forced && measured(si) {
                    let k = serde_json::to_value(c.why)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_string));
                    *e.entry(k.unwrap_or_default()).or_default() += 1;
                }
            }
        }
    }
    for c in contexts {
        for l in &c.other_paths {
            r.other_paths.push(OtherPathJson {
                collective: c.coll.name().into(),
                nodes: c.nodes,
                traced_nodes: l.mark.nodes,
                ppn: c.ppn.0,
                from_bytes: bucket_lower_bound(l.bucket),
                to_bytes: bucket_upper_bound(l.bucket),
                was: SettingJson::of(l.was),
                other_path_calls: l.mark.ran,
                classic_calls: l.mark.classic,
                communicators: l.mark.comms,
                classic_communicators: l.mark.classic_comms,
                file: l.mark.file.clone(),
            });
        }
    }
    // Forced regions of contexts gated on regBuff that the plugin leaves to
    // NCCL: NCCL computes regBuff per rank, so no answer may depend on it
    // (dyncc_tables::RegBuff::agreed). Stored, but not forced.
    let mut split_by_reg_buff: Vec<Forced> = Vec::new();
    for c in contexts {
        let gate = c
            .state
            .gates()
            .map_or(dyncc_tables::RegBuff::Any, |g| g.reg_buff);
        // The rules the table stores for the context (split by basis, each
        // with its smallest bucket gain), with their first buckets: a
        // region's evidence is theirs, so it reads as `query` reads them.
        let rules = dyncc_tables::rules_from_buckets(&c.buckets);
        let firsts: Vec<usize> = std::iter::once(0)
            .chain(rules.iter().map(|r| r.last_bucket as usize + 1))
            .collect();
        let mut k = 0;
        while k < c.buckets.len() {
            let BucketDecision { decision: d, .. } = c.buckets[k];
            let mut j = k;
            // One region per decision: the table splits it further by
            // basis, the report names every basis inside it.
            while j < c.buckets.len() && c.buckets[j].decision == d {
                j += 1;
            }
            let mut evidence = Evidence::default();
            for (r, first) in rules.iter().zip(&firsts) {
                if *first < j && r.last_bucket as usize >= k {
                    evidence.add(Ground::of_basis(r.basis), r.gain as f64);
                }
            }
            if let Decision::Force(_) = d {
                let to = if gate.splits(d) {
                    &mut split_by_reg_buff
                } else {
                    &mut r.forced
                };
                to.push(Forced {
                    collective: c.coll.name().into(),
                    nodes: c.nodes,
                    ppn: c.ppn,
                    from_bytes: bucket_lower_bound(k as u8),
                    to_bytes: bucket_upper_bound((j - 1) as u8),
                    setting: SettingJson::of(d),
                    gain: evidence.gain_min,
                    gain_max: evidence.gain_max,
                    basis: evidence.word(),
                    evidence,
                });
            }
            k = j;
        }
    }
    merge_node_ranges(&mut r.forced);
    if !split_by_reg_buff.is_empty() {
        merge_node_ranges(&mut split_by_reg_buff);
        r.notes.push(reg_buff_note(&split_by_reg_buff));
    }
    for (g, d) in grids.iter().zip(decided) {
        let coll = g.coll.name();
        for o in &d.off_trend {
            r.notes.push(o.describe(coll, g.ppn));
        }
        for a in &d.anchors {
            let n = a
                .per_size
                .iter()
                .filter(|c| c.why == Why::TakenBack)
                .count();
            if n > 0 {
                let what = if n == 1 {
                    "1 size's force".to_string()
                } else {
                    format!("{n} sizes' forces")
                };
                r.notes.push(format!(
                    "{coll} ppn {}: at {} nodes, {what} on the sweep's reading taken back to NCCL's choice: jobs there measured the setting at the sizes around, and it no longer reads past the margin",
                    g.ppn, a.nodes
                ));
            }
        }
        let measured = g
            .nodes
            .iter()
            .map(|n| n.to_string())
            .collect::<Vec<_>>()
            .join(",");
        let reach = match d.reach {
            _ if !d.model.calibrated() && g.nodes.iter().any(|&n| n >= 2) => format!(
                "only the measured node counts ({measured}) are decided: fewer than two multi-node counts to calibrate predictions on"
            ),
            None => format!("only the measured node counts ({measured}) are decided"),
            Some((_, u32::MAX)) => format!(
                "node counts measured {measured}; every other node count from 2 up is predicted (--extrapolate)"
            ),
            Some((lo, hi)) if !d.model.extrapolates_down => format!(
                "node counts measured {measured}; {}-{hi} predicted from them (sizes matched on {}; above the measured counts up to {}x, --node-reach), others left to NCCL: carrying gains down below the smallest multi-node count needs at least {} multi-node counts",
                lo.max(multi_lo(&g.nodes)),
                d.model.align.name(),
                decide.node_reach,
                crate::nodes::MIN_COUNTS_TO_EXTRAPOLATE_DOWN
            ),
            Some((lo, hi)) => format!(
                "node counts measured {measured}; {lo}-{hi} predicted from them (sizes matched on {}; beyond the measured counts up to {}x, --node-reach), others left to NCCL",
                d.model.align.name(),
                decide.node_reach
            ),
        };
        // How far a traced size steers the plan at the next (nodes.rs).
        let steer = match d.model.size_corr {
            Some(rho) if d.model.calibrated() && d.reach.is_some() => format!(
                "; the readings' errors correlate {rho:.2} per octave of size (how far jobs' measurements at one size steer the exploration plan at the next)"
            ),
            _ => String::new(),
        };
        r.reach
            .push(format!("{coll} ppn {}: {reach}{steer}", g.ppn));
    }
    if !decide.extrapolate {
        let colls: BTreeSet<&str> = grids.iter().map(|g| g.coll.name()).collect();
        for coll in colls {
            let gs: Vec<&Grid> = grids.iter().filter(|g| g.coll.name() == coll).collect();
            let lo = gs.iter().map(|g| g.sizes[0]).min().unwrap_or(0);
            let hi = gs
                .iter()
                .filter_map(|g| g.sizes.last().copied())
                .max()
                .unwrap_or(0);
            let ppns: Vec<String> = gs.iter().map(|g| g.ppn.to_string()).collect();
            r.outside.push(format!(
                "{coll}: sizes outside {}..{} and ranks per node other than {} are left to NCCL (--extrapolate extends them)",
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
    if !notes.uneven.is_empty() {
        const SHOWN: usize = 4;
        let total: usize = notes.uneven.iter().map(|u| u.cells).sum();
        let mut shapes: Vec<String> = notes
            .uneven
            .iter()
            .take(SHOWN)
            .map(|u| {
                format!(
                    "{} ranks on {} nodes ({} cells, e.g. {})",
                    u.nranks, u.nnodes, u.cells, u.example
                )
            })
            .collect();
        if notes.uneven.len() > SHOWN {
            shapes.push(format!("{} more shapes", notes.uneven.len() - SHOWN));
        }
        r.notes.push(format!(
            "{total} cells whose ranks are not a multiple of their nodes were not used: {}",
            shapes.join("; ")
        ));
    }
    if notes.partial_cells > 0 {
        r.notes.push(format!(
            "{} cells ran under settings a table cannot force ({}): they need both an algorithm and a protocol",
            notes.partial_cells,
            notes.partial_configs.iter().cloned().collect::<Vec<_>>().join(", ")
        ));
    }
    if notes.ungated > 0 {
        r.notes.push(format!(
            "{} cells measured several pipelined operations (numPipeOps > 1) were not used: a table gates numPipeOps only from above, so it cannot decide them apart from single ones",
            notes.ungated
        ));
    }
}

/// The note for forced regions a regBuff-gated table leaves to NCCL: how
/// many, the first few, and why.
fn reg_buff_note(split: &[Forced]) -> String {
    const SHOWN: usize = 3;
    let mut shown: Vec<String> = split
        .iter()
        .take(SHOWN)
        .map(|f| {
            format!(
                "{} nodes {} ppn {} {}-{} {}/{}",
                f.collective,
                crate::audit::text::fmt_span(f.nodes.0, f.nodes.1),
                crate::audit::text::fmt_span(f.ppn.0, f.ppn.1),
                fmt_bytes(f.from_bytes),
                fmt_bytes(f.to_bytes),
                f.setting.algorithm,
                f.setting.protocol
            )
        })
        .collect();
    if split.len() > SHOWN {
        shown.push(format!("{} more", split.len() - SHOWN));
    }
    format!(
        "{} forced region{} of calls with registered buffers (--setup regBuff=1) {} left to NCCL: NCCL computes \
         regBuff per rank, so a decision for one regBuff value only could make ranks of one collective run \
         different algorithms; the plugin applies only what every regBuff gets ({})",
        split.len(),
        if split.len() == 1 { "" } else { "s" },
        if split.len() == 1 { "is" } else { "are" },
        shown.join("; ")
    )
}

/// Joins forced regions that differ only in adjacent node ranges, so a
/// decision predicted over many ranges reads as one line.
fn merge_node_ranges(forced: &mut Vec<Forced>) {
    forced.sort_by(|a, b| {
        (
            &a.collective,
            a.ppn,
            a.from_bytes,
            a.to_bytes,
            a.setting,
            &a.basis,
            a.nodes,
        )
            .cmp(&(
                &b.collective,
                b.ppn,
                b.from_bytes,
                b.to_bytes,
                b.setting,
                &b.basis,
                b.nodes,
            ))
    });
    let mut out: Vec<Forced> = Vec::with_capacity(forced.len());
    for f in forced.drain(..) {
        if let Some(l) = out.last_mut() {
            let same = (
                &l.collective,
                l.ppn,
                l.from_bytes,
                l.to_bytes,
                l.setting,
                &l.basis,
            ) == (
                &f.collective,
                f.ppn,
                f.from_bytes,
                f.to_bytes,
                f.setting,
                &f.basis,
            );
            if same && l.nodes.1.checked_add(1) == Some(f.nodes.0) {
                l.nodes.1 = f.nodes.1;
                l.evidence.merge(&f.evidence);
                l.gain = l.evidence.gain_min;
                l.gain_max = l.evidence.gain_max;
                continue;
            }
        }
        out.push(f);
    }
    // Strongest ground first: measured regions, then interpolated, ...
    let rank = |f: &Forced| f.evidence.grounds().next();
    out.sort_by(|a, b| {
        (&a.collective, a.ppn, rank(a), a.nodes, a.from_bytes).cmp(&(
            &b.collective,
            b.ppn,
            rank(b),
            b.nodes,
            b.from_bytes,
        ))
    });
    *forced = out;
}

/// The smallest measured multi-node count (predictions below it need
/// [`crate::nodes::MIN_COUNTS_TO_EXTRAPOLATE_DOWN`] counts).
fn multi_lo(nodes: &[u32]) -> u32 {
    nodes.iter().copied().find(|&n| n >= 2).unwrap_or(2)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The coverage metadata is read back as written.
    #[test]
    fn coverage_metadata_round_trips() {
        let c = |collective: &str, ppn, min_bytes, max_bytes| Coverage {
            collective: collective.into(),
            ppn,
            nodes: vec![1, 2, 4],
            min_bytes,
            max_bytes,
            configs: Vec::new(),
            cells: 0,
        };
        let all = [
            c("allreduce", 8, 8, 4 << 30),
            c("allgather", 4, 1024, 3 << 19),
        ];
        let text = all
            .iter()
            .map(Coverage::meta_text)
            .collect::<Vec<_>>()
            .join("; ");
        assert_eq!(
            text,
            "allreduce ppn 8 nodes [1, 2, 4] 8 B..4 GiB; allgather ppn 4 nodes [1, 2, 4] 1 KiB..1.5 MiB"
        );
        let m = |collective: &str, ppn, min_bytes, max_bytes| MeasuredSizes {
            collective: collective.into(),
            ppn,
            nodes: vec![1, 2, 4],
            min_bytes,
            max_bytes,
        };
        assert_eq!(
            measured_sizes(&text),
            [
                m("allreduce", 8, 8, 4 << 30),
                m("allgather", 4, 1024, 3 << 19)
            ]
        );
        assert!(measured_sizes("").is_empty());
    }
}
