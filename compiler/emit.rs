//! Emit: turn the decisions into table contexts and rules and write them
//! through `dyncc-tables`' builder, the only code that knows the bytes.

use anyhow::Context;
use dyncc_tables::{
    rules_from_buckets, Basis, BucketDecision, Coll, ContextSpec, Decision, Feature, PlanCandidate,
    RegBuff, TableBuilder, TreeNode, NUM_BUCKETS,
};

use crate::decide::{buckets, GridDecisions};
use crate::distil::{Fidelity, Leaf};
use crate::explore;
use crate::features::Grid;
use crate::record::State;
use crate::tree::{FlatTree, Node};

/// One context as it goes into the table, kept for the report and tests.
#[derive(Clone, Debug)]
pub struct PlannedContext {
    pub coll: Coll,
    pub nodes: (u32, u32),
    pub ppn: (u32, u32),
    /// The call state its decisions were measured in: its gates.
    pub state: State,
    /// Whether its node counts were measured (one measured count) rather
    /// than decided from the measured ones.
    pub measured: bool,
    pub buckets: Box<[BucketDecision; NUM_BUCKETS]>,
    /// What jobs may try where its answers stand on no measurement at its
    /// node counts (the table's exploration plan), by runs of buckets.
    pub plan: Vec<explore::Run>,
    /// Forces left to NCCL because jobs saw NCCL run a path the tuner
    /// cannot choose in most of its own calls there ([`leave_other_paths`]).
    pub other_paths: Vec<OtherPathLeft>,
}

/// A forced bucket left to NCCL where NCCL mostly runs a symmetric kernel
/// or a copy-engine method on its own.
#[derive(Clone, Debug, PartialEq)]
pub struct OtherPathLeft {
    pub bucket: u8,
    /// The force it would have been.
    pub was: Decision,
    /// The mark that left it: a node count of the context's, NCCL's own
    /// calls there on that path and on a classic pair, a file that saw it.
    pub mark: crate::features::OtherPathMark,
}

/// Where a context's node counts hold a mark that NCCL's own calls mostly
/// ran a path the tuner cannot choose ([`crate::features::OtherPathMark`]),
/// a forced bucket is left to NCCL unless the sweep measured that force at
/// that count and size (its default run is what NCCL chose there, whatever
/// path that was): forcing a classic pair displaces the path (NCCL 2.31+
/// ranks a forced pair's zero cost before symmetric kernels and copy-engine
/// methods), and nothing else measured a classic pair against it (a job's
/// symmetric-kernel calls are counted, never timed). The exploration plan
/// skips those buckets too: what a job would try there can only be
/// measured against NCCL's minority of classic calls.
pub fn leave_other_paths(grid: &Grid, c: &mut PlannedContext) {
    let swept = |n: u32| {
        grid.nodes
            .iter()
            .position(|&x| x == n)
            .is_some_and(|ni| grid.swept(ni))
    };
    for m in grid.other_paths() {
        if m.nodes < c.nodes.0 || m.nodes > c.nodes.1 {
            continue;
        }
        let b = m.bucket as usize;
        let Some(slot) = c.buckets.get_mut(b) else {
            continue;
        };
        let measured_here = c.nodes == (m.nodes, m.nodes) && swept(m.nodes);
        if let Decision::Force(_) = slot.decision {
            if !(measured_here && slot.basis == Basis::Measured) {
                c.other_paths.push(OtherPathLeft {
                    bucket: m.bucket,
                    was: slot.decision,
                    mark: m.clone(),
                });
                *slot = BucketDecision::leave(if c.nodes == (m.nodes, m.nodes) {
                    Basis::Measured
                } else {
                    slot.basis
                });
            }
        }
        c.plan = without_bucket(std::mem::take(&mut c.plan), m.bucket);
    }
}

/// The plan's runs with bucket `b` cut out (a run around it splits in two).
fn without_bucket(plan: Vec<explore::Run>, b: u8) -> Vec<explore::Run> {
    plan.into_iter()
        .flat_map(|r| {
            if r.first > b || r.last < b {
                return vec![r];
            }
            let below = (r.first < b).then(|| explore::Run {
                first: r.first,
                last: b - 1,
                candidates: r.candidates.clone(),
            });
            let above = (r.last > b).then(|| explore::Run {
                first: b + 1,
                last: r.last,
                candidates: r.candidates.clone(),
            });
            below.into_iter().chain(above).collect()
        })
        .collect()
}

impl PlannedContext {
    /// Whether some communicator matches both contexts (a collective's
    /// first matching context is the only one the plugin reads).
    fn overlaps(&self, other: &PlannedContext) -> bool {
        self.coll == other.coll
            && self.nodes.0 <= other.nodes.1
            && other.nodes.0 <= self.nodes.1
            && self.ppn.0 <= other.ppn.1
            && other.ppn.0 <= self.ppn.1
    }
}

/// One collective's distilled tree as it goes into the table, with how
/// faithfully it summarises the contexts (for the report).
#[derive(Clone, Debug)]
pub struct PlannedTree {
    pub coll: Coll,
    pub tree: FlatTree<Leaf>,
    pub fidelity: Fidelity,
}

/// The grid of a collective (in one call state) with the most measured cells.
struct BestCovered {
    coll: Coll,
    state: State,
    /// Index into the grids.
    grid: usize,
    measured: usize,
}

/// Lays out the contexts of every grid: one per anchor (a measured node
/// count, or a range of unmeasured ones decided together), then, only when
/// extrapolating, the best-covered grid's contexts for every other number
/// of ranks per node. Ranges never overlap within a grid, so the plugin's
/// first match is the only match.
pub fn plan(grids: &[Grid], decided: &[GridDecisions], extrapolate: bool) -> Vec<PlannedContext> {
    let mut out = Vec::new();
    let mut any_ppn: Vec<BestCovered> = Vec::new();
    for (gi, (g, d)) in grids.iter().zip(decided).enumerate() {
        for a in &d.anchors {
            let mut c = PlannedContext {
                coll: g.coll,
                nodes: a.span,
                ppn: (g.ppn, g.ppn),
                state: g.state,
                measured: a.measured,
                buckets: buckets(g, a, extrapolate),
                plan: explore::runs(g, a),
                other_paths: Vec::new(),
            };
            leave_other_paths(g, &mut c);
            out.push(c);
        }
        if extrapolate {
            let best = BestCovered {
                coll: g.coll,
                state: g.state,
                grid: gi,
                measured: g.measured(),
            };
            match any_ppn
                .iter_mut()
                .find(|e| e.coll == g.coll && e.state == g.state)
            {
                Some(e) if e.measured >= best.measured => {}
                Some(e) => *e = best,
                None => any_ppn.push(best),
            }
        }
    }
    for BestCovered {
        coll,
        state,
        grid: gi,
        ..
    } in any_ppn
    {
        let extra: Vec<PlannedContext> = out
            .iter()
            .filter(|c| {
                c.coll == coll && c.state == state && c.ppn == (grids[gi].ppn, grids[gi].ppn)
            })
            .map(|c| {
                let mut b = c.buckets.clone();
                for s in b.iter_mut() {
                    s.basis = Basis::Extrapolated;
                }
                PlannedContext {
                    coll,
                    nodes: c.nodes,
                    ppn: (1, u32::MAX),
                    state,
                    measured: false,
                    buckets: b,
                    // Another ranks per node: nothing read there to plan on.
                    plan: Vec::new(),
                    // Said once, at the grid's own context.
                    other_paths: Vec::new(),
                }
            })
            .collect();
        out.extend(extra);
    }
    out
}

/// At most this many node counts stand for one range.
const SAMPLES_PER_RANGE: u32 = 64;

/// The node counts that stand for a context's range of `span` when
/// checking what the table answers there (the explain trees' fidelity in
/// `compile`, their agreement in `explain`): all of a short range,
/// geometrically spread ones of a long one, the first of an unbounded one.
pub fn range_samples(span: (u32, u32)) -> Vec<u32> {
    let (a, b) = span;
    // An unbounded last range (extrapolating): its first count stands for it.
    let b = if b == u32::MAX { a } else { b };
    if b - a < SAMPLES_PER_RANGE {
        return (a..=b).collect();
    }
    let (la, lb) = ((a as f64).ln(), (b as f64).ln());
    let mut v: Vec<u32> = (0..SAMPLES_PER_RANGE)
        .map(|i| {
            let t = i as f64 / (SAMPLES_PER_RANGE - 1) as f64;
            ((la + t * (lb - la)).exp().round() as u32).clamp(a, b)
        })
        .collect();
    v.dedup();
    v
}

/// Converts a distilled tree into the table's node list.
pub fn tree_nodes(t: &FlatTree<Leaf>) -> Vec<TreeNode> {
    t.nodes
        .iter()
        .map(|n| match n {
            Node::Leaf(l) => TreeNode::Leaf {
                decision: l.decision,
                basis: l.basis,
                gain: l.gain as f32,
            },
            Node::Split {
                feature,
                threshold,
                left,
                right,
            } => TreeNode::Split {
                feature: match *feature {
                    0 => Feature::Log2Bytes,
                    1 => Feature::Nodes,
                    2 => Feature::Ranks,
                    3 => Feature::Ppn,
                    _ => Feature::Log2BytesPerRank,
                },
                threshold: *threshold as f32,
                left: *left,
                right: *right,
            },
        })
        .collect()
}

/// Whether a context leaves every size to NCCL.
fn leaves_all(c: &PlannedContext) -> bool {
    c.buckets.iter().all(|b| b.decision == Decision::Default)
}

/// The contexts the table stores, in order. A context that forces
/// something is stored. One that leaves every size alone is stored when a
/// broader (extrapolated) context after it would otherwise match, at a
/// measured node count, so that the shape reads as covered (measured, NCCL's
/// default kept) rather than unmeasured, and where it has a plan (the plugin
/// reads a plan under the communicator's own context); but only where no
/// other stored context of its collective matches, so no communicator's
/// decisions change. Elsewhere it would cost bytes and say nothing.
fn stored(contexts: &[PlannedContext], extrapolate: bool) -> Vec<&PlannedContext> {
    let forcing = |c: &PlannedContext| extrapolate || !leaves_all(c);
    let mut out: Vec<&PlannedContext> = Vec::new();
    for c in contexts {
        let keep = forcing(c)
            || ((c.measured || !c.plan.is_empty())
                && !contexts.iter().any(|o| forcing(o) && o.overlaps(c))
                && !out.iter().any(|o| o.overlaps(c)));
        if keep {
            out.push(c);
        }
    }
    out
}

/// Builds the table bytes.
pub fn build(
    contexts: &[PlannedContext],
    trees: &[PlannedTree],
    meta: &[(&str, String)],
    extrapolate: bool,
) -> anyhow::Result<Vec<u8>> {
    let mut b = TableBuilder::new();
    for (k, v) in meta {
        b.meta(k, v);
    }
    let mut plan: Vec<PlanCandidate> = Vec::new();
    for (index, c) in stored(contexts, extrapolate).into_iter().enumerate() {
        let rules = rules_from_buckets(&c.buckets);
        let gates = c.state.gates().with_context(|| {
            format!(
                "internal error: a context for calls in state {} no gate expresses",
                c.state
            )
        })?;
        let spec = ContextSpec {
            coll: c.coll,
            nodes: c.nodes,
            ppn: c.ppn,
            max_pipe_ops: gates.max_pipe_ops,
            reg_buff: gates.reg_buff,
        };
        b.context(spec, &rules)
            .map_err(|e| anyhow::anyhow!("{e}"))
            .context("building a table context")?;
        // One plan per context, from its first node count: the compiler
        // decides a context's node counts together. Never under a regBuff
        // gate: the plugin does not explore there (regBuff is each rank's
        // own, and ranks must agree).
        if spec.reg_buff != RegBuff::Any {
            continue;
        }
        for run in &c.plan {
            for (rank, k) in run.candidates.iter().enumerate() {
                plan.push(PlanCandidate {
                    context: index as u32,
                    nodes: c.nodes.0,
                    bucket: run.first,
                    last_bucket: run.last,
                    rank: rank as u8,
                    decision: k.decision,
                    gain: k.gain,
                    spread: k.spread,
                    cost_bound: k.cost_bound,
                });
            }
        }
    }
    b.plan(&plan);
    for t in trees {
        b.tree(t.coll, &tree_nodes(&t.tree))
            .map_err(|e| anyhow::anyhow!("{e}"))
            .context("storing a distilled tree")?;
    }
    b.build()
        .map_err(|e| anyhow::anyhow!("{e}"))
        .context("building the table")
}

#[cfg(test)]
mod tests {
    use super::*;
    use dyncc_tables::{Algo, Proto, Setting};

    /// A bucket cut out of the plan splits the run around it and drops a
    /// run of that bucket alone; runs elsewhere stay.
    #[test]
    fn a_bucket_left_to_another_path_is_cut_out_of_the_plan() {
        let c = vec![explore::Planned {
            decision: Decision::Force(Setting::new(Algo::Tree, Proto::LL)),
            gain: 0.1,
            spread: 0.05,
            cost_bound: 0.01,
        }];
        let run = |first, last| explore::Run {
            first,
            last,
            candidates: c.clone(),
        };
        let ends = |p: Vec<explore::Run>| p.iter().map(|r| (r.first, r.last)).collect::<Vec<_>>();
        assert_eq!(
            ends(without_bucket(
                vec![run(8, 20), run(30, 30), run(40, 44)],
                12
            )),
            vec![(8, 11), (13, 20), (30, 30), (40, 44)]
        );
        assert_eq!(ends(without_bucket(vec![run(30, 30)], 30)), vec![]);
        assert_eq!(ends(without_bucket(vec![run(30, 33)], 30)), vec![(31, 33)]);
        assert_eq!(ends(without_bucket(vec![run(30, 33)], 33)), vec![(30, 32)]);
    }

    fn ctx(nodes: (u32, u32), reg_buff: bool, measured: bool, forced: bool) -> PlannedContext {
        let mut buckets = Box::new([BucketDecision::leave(Basis::Measured); NUM_BUCKETS]);
        if forced {
            buckets[10].decision = Decision::Force(Setting::new(Algo::Tree, Proto::LL));
        }
        PlannedContext {
            coll: Coll::AllReduce,
            nodes,
            ppn: (8, 8),
            state: State {
                reg_buff,
                ..State::BASELINE
            },
            measured,
            buckets,
            plan: Vec::new(),
            other_paths: Vec::new(),
        }
    }

    /// Where stored: forcing contexts always; all-default ones only at
    /// measured counts, and never where another context of the collective
    /// (another call state's, later in the table) would have decided: the
    /// plugin reads a collective's first matching context only.
    #[test]
    fn all_default_contexts_are_stored_at_measured_counts_only_where_nothing_else_decides() {
        let planned = [
            // Registered buffers, measured at 8 nodes: nothing forced, but
            // the unregistered context below forces at 8 nodes.
            ctx((8, 8), true, true, false),
            ctx((4, 4), false, true, false),
            ctx((5, 7), false, false, false),
            ctx((8, 8), false, true, true),
            ctx((16, 16), false, true, false),
            ctx((16, 16), true, true, false),
        ];
        let kept: Vec<((u32, u32), bool)> = stored(&planned, false)
            .iter()
            .map(|c| (c.nodes, c.state.reg_buff))
            .collect();
        assert_eq!(kept, [((4, 4), false), ((8, 8), false), ((16, 16), false)]);
        assert_eq!(stored(&planned, true).len(), planned.len());
    }
}
