//! How a collective's summary tree stands against what the plugin answers,
//! measured once on the table as the plugin reads it: `compile` prints the
//! figure for the table it wrote, `explain` for the table it reads, and
//! `explain`/`query` word each leaf from the same pass.
//!
//! The shapes measured are the ones the table decides: every node count
//! standing for each context's range ([`crate::emit::range_samples`]), at
//! the context's ranks per node, at every size bucket whose answer rests on
//! the sweep (measured, interpolated or extrapolated). Sizes beyond the
//! sweep, which the plugin leaves to NCCL by construction, are left out of
//! the figure: counting them would make it depend on how many buckets lie
//! between the largest measured size and 16 EiB, not on the tree.

use std::collections::{BTreeMap, BTreeSet};

use dyncc_tables::{
    bucket_lower_bound, tree_features, Coll, Comm, Feature, Table, TreeLeaf, TreeNode, TreeView,
    NUM_FEATURES,
};
use serde::Serialize;

use crate::audit::evidence::{ground_at, sweep_sizes, Evidence, Ground};
use crate::audit::plane::live_buckets;
use crate::audit::text::fmt_decision;

/// Where a summary tree says something other than the plugin.
#[derive(Clone, Debug, Serialize)]
pub struct Disagreement {
    /// The first node count of the region...
    pub nodes: u32,
    /// ... and the last (`u32::MAX`: every larger one).
    pub nodes_to: u32,
    /// Ranks at `nodes` (ranks per node times nodes).
    pub ranks: u64,
    pub ppn: u32,
    pub from_bytes: u64,
    pub to_bytes: u64,
    /// What the plugin does (the table's rules).
    pub plugin: String,
    /// What the tree says.
    pub tree: String,
    /// Where the plugin leaves NCCL alone by construction, why: "beyond
    /// the sweep's sizes", "no context serves these node counts"; `None`
    /// inside what the table decides.
    pub beyond: Option<&'static str>,
}

/// How well a collective's tree reproduces what the plugin answers over
/// the shapes the table decides (see the module docs).
#[derive(Clone, Debug, Serialize)]
pub struct Agreement {
    pub collective: &'static str,
    pub shapes: usize,
    pub disagree: usize,
    /// Every region where the tree and the plugin disagree, beyond the
    /// sweep's sizes and node counts included (see the module docs).
    pub regions: Vec<Disagreement>,
}

impl Agreement {
    /// "98.2 % of the 29952 shapes the table decides": the one wording of
    /// the figure, for `compile` and `explain`.
    pub fn text(&self) -> String {
        agreement_text(self.shapes, self.disagree)
    }
}

/// [`Agreement::text`] from its two counts (what `compile`'s report keeps).
pub fn agreement_text(shapes: usize, disagree: usize) -> String {
    format!(
        "{:.1} % of the {shapes} shapes the table decides",
        100.0 * (1.0 - disagree as f64 / shapes.max(1) as f64)
    )
}

/// A tree against its table: the agreement, and per leaf (by node index)
/// the evidence of the shapes where the plugin does what the leaf says.
#[derive(Clone, Debug)]
pub struct TreeAudit {
    pub agreement: Agreement,
    pub leaves: BTreeMap<u32, Evidence>,
}

impl TreeAudit {
    /// What leaf `index` says, as text: its evidence taken from the
    /// plugin's answers inside it, or, where no decided shape falls in it,
    /// what the tree stores.
    pub fn leaf_then(&self, index: u32, leaf: &TreeLeaf) -> String {
        self.leaf_evidence(index, leaf).then(leaf.decision)
    }

    pub fn leaf_evidence(&self, index: u32, leaf: &TreeLeaf) -> Evidence {
        self.leaves
            .get(&index)
            .copied()
            .unwrap_or_else(|| Evidence::one(Ground::of_basis(leaf.basis), leaf.gain as f64))
    }
}

/// The (nodes, ranks) pairs the table's contexts of `coll` serve, each once.
fn served_shapes(table: &Table, coll: Coll) -> Vec<(u32, u64)> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for c in table.contexts().filter(|c| c.spec().coll == coll) {
        let spec = c.spec();
        for nodes in crate::emit::range_samples(spec.nodes) {
            let ranks = nodes as u64 * spec.ppn.0.max(1) as u64;
            if seen.insert((nodes, ranks)) {
                out.push((nodes, ranks));
            }
        }
    }
    out
}

/// Checks `coll`'s tree against the plugin's answers; `None` without a tree.
pub fn audit_tree(table: &Table, coll: Coll) -> Option<TreeAudit> {
    let tree = table.tree(coll)?;
    let mut a = Agreement {
        collective: coll.name(),
        shapes: 0,
        disagree: 0,
        regions: Vec::new(),
    };
    let mut leaves: BTreeMap<u32, Evidence> = BTreeMap::new();
    for (nodes, ranks) in served_shapes(table, coll) {
        let sweep = sweep_sizes(table, coll, nodes as u64, ranks);
        for b in live_buckets() {
            let bytes = bucket_lower_bound(b);
            let l = table.lookup(coll as u32, &Comm::new(ranks, nodes as u64), bytes, 1, 0);
            let ground = ground_at(&l, sweep.as_ref(), bytes);
            let said = tree.walk(&tree_features(bytes, nodes as u64, ranks), |_| {});
            if let (Some((i, leaf)), Some(g)) = (said, ground) {
                if leaf.decision == l.decision {
                    leaves.entry(i as u32).or_default().add(g, l.gain as f64);
                }
            }
            if ground == Some(Ground::BeyondSweep) {
                continue;
            }
            a.shapes += 1;
            if said.map(|(_, leaf)| leaf.decision) != Some(l.decision) {
                a.disagree += 1;
            }
        }
    }
    a.regions = disagreements(table, coll, &tree);
    Some(TreeAudit {
        agreement: a,
        leaves,
    })
}

/// Every region where `tree` and the plugin disagree (see the module
/// docs), by ranks per node, node count and size.
fn disagreements(table: &Table, coll: Coll, tree: &TreeView) -> Vec<Disagreement> {
    // The tree's thresholds, by feature.
    let mut cuts: [Vec<f32>; NUM_FEATURES] = Default::default();
    for n in tree.nodes() {
        if let TreeNode::Split {
            feature, threshold, ..
        } = n
        {
            cuts[feature as usize].push(threshold);
        }
    }
    let ceil_u64 = |x: f64| {
        if x <= 1.0 {
            1
        } else if x >= u64::MAX as f64 {
            u64::MAX
        } else {
            x.ceil() as u64
        }
    };
    let contexts: Vec<_> = table
        .contexts()
        .map(|c| c.spec())
        .filter(|s| s.coll == coll)
        .collect();
    // Ranks per node: every context's first, and the tree's cuts on it
    // inside a context's range.
    let mut ppns: BTreeSet<u32> = contexts.iter().map(|s| s.ppn.0.max(1)).collect();
    for &t in &cuts[Feature::Ppn as usize] {
        let p = ceil_u64(t as f64).min(u32::MAX as u64) as u32;
        if contexts.iter().any(|s| (s.ppn.0..=s.ppn.1).contains(&p)) {
            ppns.insert(p);
        }
    }
    let mut out = Vec::new();
    for ppn in ppns {
        // Node counts where the plugin's context or the tree can change.
        let mut starts: BTreeSet<u32> = BTreeSet::from([1]);
        for s in contexts
            .iter()
            .filter(|s| (s.ppn.0..=s.ppn.1).contains(&ppn))
        {
            starts.insert(s.nodes.0.max(1));
            starts.insert(s.nodes.1.saturating_add(1));
        }
        for &t in &cuts[Feature::Nodes as usize] {
            starts.insert(ceil_u64(t as f64).min(u32::MAX as u64) as u32);
        }
        for &t in &cuts[Feature::Ranks as usize] {
            starts.insert(ceil_u64(t as f64 / ppn as f64).min(u32::MAX as u64) as u32);
        }
        let starts: Vec<u32> = starts.into_iter().collect();
        // The regions of the piece before: where they start in `out`, and
        // how many.
        let mut prev = (0, 0);
        for (k, &nodes) in starts.iter().enumerate() {
            let nodes_to = starts.get(k + 1).map_or(u32::MAX, |n| n - 1);
            let ranks = nodes as u64 * ppn as u64;
            let sweep = sweep_sizes(table, coll, nodes as u64, ranks);
            // Sizes where the plugin's rule or the tree can change.
            let mut sizes: BTreeSet<u64> = live_buckets().map(bucket_lower_bound).collect();
            for &t in &cuts[Feature::Log2Bytes as usize] {
                sizes.insert(ceil_u64((t as f64).exp2()));
            }
            for &t in &cuts[Feature::Log2BytesPerRank as usize] {
                sizes.insert(ceil_u64((t as f64).exp2() * ranks as f64));
            }
            let sizes: Vec<u64> = sizes.into_iter().collect();
            let before = out.len();
            let mut run: Option<Disagreement> = None;
            for (j, &bytes) in sizes.iter().enumerate() {
                let to_bytes = sizes.get(j + 1).map_or(u64::MAX, |n| n - 1);
                let l = table.lookup(coll as u32, &Comm::new(ranks, nodes as u64), bytes, 1, 0);
                let said = tree
                    .walk(&tree_features(bytes, nodes as u64, ranks), |_| {})
                    .map(|(_, leaf)| leaf.decision);
                if said == Some(l.decision) {
                    out.extend(run.take());
                    continue;
                }
                let beyond = if l.context.is_none() {
                    Some("no context serves these node counts")
                } else if ground_at(&l, sweep.as_ref(), bytes) == Some(Ground::BeyondSweep) {
                    Some("beyond the sweep's sizes")
                } else {
                    None
                };
                let (p, t) = (
                    fmt_decision(l.decision),
                    said.map(fmt_decision).unwrap_or_else(|| "nothing".into()),
                );
                match &mut run {
                    Some(r) if r.plugin == p && r.tree == t && r.beyond == beyond => {
                        r.to_bytes = to_bytes
                    }
                    _ => {
                        out.extend(run.take());
                        run = Some(Disagreement {
                            nodes,
                            nodes_to,
                            ranks,
                            ppn,
                            from_bytes: bytes,
                            to_bytes,
                            plugin: p,
                            tree: t,
                            beyond,
                        });
                    }
                }
            }
            out.extend(run.take());
            if !merge_with_previous(&mut out, before, prev) {
                prev = (before, out.len() - before);
            }
        }
    }
    out
}

/// Node counts in a row that disagree alike are one region: when the
/// regions `out[at..]` of one piece of node counts are those of the piece
/// before (`prev`: where its regions start, how many), but for the node
/// counts, the earlier ones are widened and these dropped (true).
fn merge_with_previous(out: &mut Vec<Disagreement>, at: usize, prev: (usize, usize)) -> bool {
    let (p, n) = prev;
    let alike = |a: &Disagreement, b: &Disagreement| {
        a.ppn == b.ppn
            && a.nodes_to.checked_add(1) == Some(b.nodes)
            && (a.from_bytes, a.to_bytes, &a.plugin, &a.tree, a.beyond)
                == (b.from_bytes, b.to_bytes, &b.plugin, &b.tree, b.beyond)
    };
    if n == 0 || p + n != at || out.len() - at != n {
        return false;
    }
    if !(0..n).all(|i| alike(&out[p + i], &out[at + i])) {
        return false;
    }
    for i in 0..n {
        out[p + i].nodes_to = out[at + i].nodes_to;
    }
    out.truncate(at);
    true
}

/// The agreement of every tree in the table image `bytes`, by collective
/// name (what `compile` reports for the table it wrote); empty when the
/// image does not validate.
pub fn agreements(bytes: &[u8]) -> BTreeMap<&'static str, Agreement> {
    let Ok(table) = Table::from_bytes(bytes) else {
        return BTreeMap::new();
    };
    // One collective a task (a compile's report waits for them).
    use rayon::prelude::*;
    let audits: Vec<TreeAudit> = Coll::ALL
        .par_iter()
        .filter_map(|c| audit_tree(&table, *c))
        .collect();
    audits
        .into_iter()
        .map(|t| (t.agreement.collective, t.agreement))
        .collect()
}
