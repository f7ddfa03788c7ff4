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

use dyncc_tables::{bucket_lower_bound, bucket_upper_bound, tree_features, Coll, Table, TreeLeaf};
use serde::Serialize;

use crate::audit::evidence::{ground_at, sweep_sizes, Evidence, Ground};
use crate::audit::plane::live_buckets;
use crate::audit::text::fmt_decision;

/// Where a summary tree says something other than the plugin.
#[derive(Clone, Debug, Serialize)]
pub struct Disagreement {
    pub nodes: u32,
    pub ranks: u64,
    pub from_bytes: u64,
    pub to_bytes: u64,
    /// What the plugin does (the table's rules).
    pub plugin: String,
    /// What the tree says.
    pub tree: String,
}

/// How well a collective's tree reproduces what the plugin answers over
/// the shapes the table decides (see the module docs).
#[derive(Clone, Debug, Serialize)]
pub struct Agreement {
    pub collective: &'static str,
    pub shapes: usize,
    pub disagree: usize,
    /// The disagreeing shapes, runs of sizes merged.
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
        let mut run: Option<Disagreement> = None;
        for b in live_buckets() {
            let bytes = bucket_lower_bound(b);
            let l = table.lookup(coll as u32, ranks, nodes as u64, bytes, 1, 0);
            let ground = ground_at(&l, sweep.as_ref(), bytes);
            let said = tree.walk(&tree_features(bytes, nodes as u64, ranks), |_| {});
            if let (Some((i, leaf)), Some(g)) = (said, ground) {
                if leaf.decision == l.decision {
                    leaves.entry(i as u32).or_default().add(g, l.gain as f64);
                }
            }
            if ground == Some(Ground::BeyondSweep) {
                if let Some(r) = run.take() {
                    a.regions.push(r);
                }
                continue;
            }
            a.shapes += 1;
            let said = said.map(|(_, leaf)| leaf.decision);
            if said == Some(l.decision) {
                if let Some(r) = run.take() {
                    a.regions.push(r);
                }
                continue;
            }
            a.disagree += 1;
            let (p, t) = (
                fmt_decision(l.decision),
                said.map(fmt_decision).unwrap_or_else(|| "nothing".into()),
            );
            match &mut run {
                Some(r) if r.plugin == p && r.tree == t => r.to_bytes = bucket_upper_bound(b),
                _ => {
                    if let Some(r) = run.take() {
                        a.regions.push(r);
                    }
                    run = Some(Disagreement {
                        nodes,
                        ranks,
                        from_bytes: bytes,
                        to_bytes: bucket_upper_bound(b),
                        plugin: p,
                        tree: t,
                    });
                }
            }
        }
        if let Some(r) = run.take() {
            a.regions.push(r);
        }
    }
    Some(TreeAudit {
        agreement: a,
        leaves,
    })
}

/// The agreement of every tree in the table image `bytes`, by collective
/// name (what `compile` reports for the table it wrote); empty when the
/// image does not validate.
pub fn agreements(bytes: &[u8]) -> BTreeMap<&'static str, Agreement> {
    let Ok(table) = Table::from_bytes(bytes) else {
        return BTreeMap::new();
    };
    Coll::ALL
        .iter()
        .filter_map(|c| audit_tree(&table, *c))
        .map(|t| (t.agreement.collective, t.agreement))
        .collect()
}
