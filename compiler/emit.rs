//! Emit: turn the decisions into table contexts and rules and write them
//! through `dyncc-tables`' builder, the only code that knows the bytes.

use anyhow::Context;
use dyncc_tables::{
    rules_from_buckets, Basis, Coll, ContextSpec, Decision, Feature, RegBuff, TableBuilder,
    TreeNode, NUM_BUCKETS,
};

use crate::decide::{buckets, BucketChoice, GridDecisions};
use crate::distil::Leaf;
use crate::features::Grid;
use crate::tree::{FlatTree, Node};

/// One context as it goes into the table, kept for the report and tests.
#[derive(Clone, Debug)]
pub struct PlannedContext {
    pub coll: Coll,
    pub nodes: (u32, u32),
    pub ppn: (u32, u32),
    pub buckets: Box<[BucketChoice; NUM_BUCKETS]>,
}

/// Lays out the contexts of every grid, most specific first (the plugin
/// takes the first match): measured and interpolated node counts exactly,
/// then the node ranges between them, then (only when extrapolating) what
/// lies beyond the measured node counts and ranks per node.
pub fn plan(grids: &[Grid], decided: &[GridDecisions], extrapolate: bool) -> Vec<PlannedContext> {
    let mut exact = Vec::new();
    let mut between = Vec::new();
    let mut beyond = Vec::new();
    let mut any_ppn: Vec<(Coll, usize, usize)> = Vec::new(); // (coll, grid, measured cells)
    for (gi, (g, d)) in grids.iter().zip(decided).enumerate() {
        let per_anchor: Vec<_> = d
            .anchors
            .iter()
            .map(|a| buckets(g, a, extrapolate))
            .collect();
        for (a, b) in d.anchors.iter().zip(&per_anchor) {
            exact.push(PlannedContext {
                coll: g.coll,
                nodes: (a.nodes, a.nodes),
                ppn: (g.ppn, g.ppn),
                buckets: b.clone(),
            });
        }
        for (i, w) in d.anchors.windows(2).enumerate() {
            let (lo, hi) = (w[0].nodes, w[1].nodes);
            if hi <= lo + 1 {
                continue;
            }
            // Between two node counts: only what both agree on.
            let mut b = Box::new([(Decision::Default, Basis::Interpolated, 1.0f32); NUM_BUCKETS]);
            for (k, slot) in b.iter_mut().enumerate() {
                let (x, y) = (per_anchor[i][k], per_anchor[i + 1][k]);
                if x.0 == y.0 && x.0 != Decision::Default {
                    let basis = if x.1 == Basis::Extrapolated || y.1 == Basis::Extrapolated {
                        Basis::Extrapolated
                    } else {
                        Basis::Interpolated
                    };
                    *slot = (x.0, basis, x.2.min(y.2));
                } else if x.1 == Basis::Extrapolated && y.1 == Basis::Extrapolated {
                    *slot = (Decision::Default, Basis::Extrapolated, 1.0);
                }
            }
            between.push(PlannedContext {
                coll: g.coll,
                nodes: (lo + 1, hi - 1),
                ppn: (g.ppn, g.ppn),
                buckets: b,
            });
        }
        if extrapolate {
            let mark = |src: &[BucketChoice; NUM_BUCKETS]| {
                let mut b = Box::new(*src);
                for s in b.iter_mut() {
                    s.1 = Basis::Extrapolated;
                }
                b
            };
            if let (Some(first), Some(last)) = (d.anchors.first(), d.anchors.last()) {
                if first.nodes > 1 {
                    beyond.push(PlannedContext {
                        coll: g.coll,
                        nodes: (1, first.nodes - 1),
                        ppn: (g.ppn, g.ppn),
                        buckets: mark(&per_anchor[0]),
                    });
                }
                beyond.push(PlannedContext {
                    coll: g.coll,
                    nodes: (last.nodes + 1, u32::MAX),
                    ppn: (g.ppn, g.ppn),
                    buckets: mark(&per_anchor[per_anchor.len() - 1]),
                });
            }
            match any_ppn.iter_mut().find(|e| e.0 == g.coll) {
                Some(e) if e.2 >= g.measured() => {}
                Some(e) => *e = (g.coll, gi, g.measured()),
                None => any_ppn.push((g.coll, gi, g.measured())),
            }
        }
    }
    let mut out = exact;
    out.append(&mut between);
    out.append(&mut beyond);
    // Other ranks per node: the best-covered grid's contexts, marked extrapolated.
    for (coll, gi, _) in any_ppn {
        let extra: Vec<PlannedContext> = out
            .iter()
            .filter(|c| c.coll == coll && c.ppn == (grids[gi].ppn, grids[gi].ppn))
            .map(|c| {
                let mut b = c.buckets.clone();
                for s in b.iter_mut() {
                    s.1 = Basis::Extrapolated;
                }
                PlannedContext {
                    coll,
                    nodes: c.nodes,
                    ppn: (1, u32::MAX),
                    buckets: b,
                }
            })
            .collect();
        out.extend(extra);
    }
    out
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

/// Builds the table bytes.
pub fn build(
    contexts: &[PlannedContext],
    trees: &[(Coll, FlatTree<Leaf>)],
    meta: &[(&str, String)],
    extrapolate: bool,
) -> anyhow::Result<Vec<u8>> {
    let mut b = TableBuilder::new();
    for (k, v) in meta {
        b.meta(k, v);
    }
    for c in contexts {
        let rules = rules_from_buckets(&c.buckets);
        // Contexts that leave every size alone cost bytes and say nothing,
        // unless a broader (extrapolated) context after them would match.
        if !extrapolate && rules.iter().all(|r| r.decision == Decision::Default) {
            continue;
        }
        let spec = ContextSpec {
            coll: c.coll,
            nodes: c.nodes,
            ppn: c.ppn,
            max_pipe_ops: 0,
            reg_buff: RegBuff::Any,
        };
        b.context(spec, &rules)
            .map_err(|e| anyhow::anyhow!("{e}"))
            .context("building a table context")?;
    }
    for (coll, t) in trees {
        b.tree(*coll, &tree_nodes(t))
            .map_err(|e| anyhow::anyhow!("{e}"))
            .context("storing a distilled tree")?;
    }
    b.build()
        .map_err(|e| anyhow::anyhow!("{e}"))
        .context("building the table")
}
