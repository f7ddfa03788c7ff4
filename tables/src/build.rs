//! The writer (feature `build`): [`TableBuilder`] collects contexts, rules,
//! trees and metadata, checks them with the reader's rules, and lays out a
//! byte image that always passes [`crate::Table::from_bytes`].
//!
//! Output is deterministic: the same calls give the same bytes (metadata is
//! sorted by key, trees by collective, no timestamps are added).

use alloc::collections::BTreeMap;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt;

use zerocopy::little_endian::{F32, U16, U32};
use zerocopy::IntoBytes;

use crate::bucket::NUM_BUCKETS;
use crate::model::{
    channels_problem, check_gain, check_rules, BucketDecision, ContextSpec, Rule, TreeNode,
    NUM_FEATURES,
};
use crate::nccl::Coll;
use crate::raw::{
    kind, ContextRecord, CountPrefix, Header, MetaEntry, NodeRecord, PlanRecord, RuleRecord,
    SectionEntry, TreeEntry, FORMAT_MAJOR, FORMAT_MINOR, HEADER_LEN, MAGIC, NCCL_ENUM, NCCL_LAYOUT,
    NODE_LEAF, NODE_SPLIT,
};

/// Why the builder refused its input.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum BuildError {
    /// A context spec is invalid.
    Context {
        /// What is wrong.
        what: &'static str,
    },
    /// A rule is invalid.
    Rule {
        /// Index of the rule in the slice passed.
        index: u32,
        /// What is wrong.
        what: &'static str,
    },
    /// A tree node is invalid.
    Tree {
        /// The collective of the tree.
        coll: Coll,
        /// Index of the node.
        node: u32,
        /// What is wrong.
        what: &'static str,
    },
    /// A metadata key is invalid.
    Meta {
        /// The key.
        key: String,
        /// What is wrong.
        what: &'static str,
    },
    /// The table would exceed the format's 64 MiB limit
    /// ([`crate::MAX_TABLE_LEN`]).
    TooLarge,
    /// The exploration plan does not validate (a candidate names a missing
    /// context, a node count outside it, a repeated rank or setting...).
    Plan(crate::Error),
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BuildError::Context { what } => write!(f, "invalid context: {what}"),
            BuildError::Rule { index, what } => write!(f, "invalid rule {index}: {what}"),
            BuildError::Tree { coll, node, what } => {
                write!(f, "invalid {} tree, node {node}: {what}", coll.name())
            }
            BuildError::Meta { key, what } => write!(f, "invalid metadata key {key:?}: {what}"),
            BuildError::Plan(e) => write!(f, "invalid exploration plan: {e}"),
            BuildError::TooLarge => {
                f.write_str("table would be larger than the format's 64 MiB limit")
            }
        }
    }
}

impl core::error::Error for BuildError {}

/// Collects a table's content; [`TableBuilder::build`] writes the bytes.
#[derive(Clone, Debug, Default)]
pub struct TableBuilder {
    meta: BTreeMap<String, String>,
    contexts: Vec<(ContextSpec, Vec<Rule>)>,
    trees: BTreeMap<u8, Vec<TreeNode>>,
    plan: Vec<crate::plan::PlanCandidate>,
}

impl TableBuilder {
    /// An empty table: no contexts (NCCL is left alone everywhere).
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets metadata `key` to `value` (a later call replaces the value).
    /// If `nccl_enum` is never set, `build` records [`NCCL_ENUM`].
    pub fn meta(&mut self, key: &str, value: &str) -> &mut Self {
        self.meta.insert(key.to_string(), value.to_string());
        self
    }

    /// Appends a context. Order matters: at lookup the first matching
    /// context of a collective wins, so add the most specific first.
    ///
    /// # Errors
    /// Empty node or ranks-per-node range, or rules that break the format's
    /// invariants (see [`Rule`]).
    pub fn context(&mut self, spec: ContextSpec, rules: &[Rule]) -> Result<&mut Self, BuildError> {
        if spec.nodes.0 > spec.nodes.1 {
            return Err(BuildError::Context {
                what: "node range is empty (min > max)",
            });
        }
        if spec.ppn.0 > spec.ppn.1 {
            return Err(BuildError::Context {
                what: "ranks-per-node range is empty (min > max)",
            });
        }
        check_rules(
            rules
                .iter()
                .map(|r| (r.last_bucket, r.decision.to_packed(), r.basis as u8, r.gain)),
        )
        .map_err(|(index, what)| BuildError::Rule { index, what })?;
        self.contexts.push((spec, rules.to_vec()));
        Ok(self)
    }

    /// Sets the distilled tree of `coll` (node 0 is the root).
    ///
    /// # Errors
    /// A second tree for `coll`, no nodes, a child index not after its
    /// parent or outside the tree, a non-finite threshold, or an invalid
    /// leaf gain.
    pub fn tree(&mut self, coll: Coll, nodes: &[TreeNode]) -> Result<&mut Self, BuildError> {
        let bad = |node: usize, what| BuildError::Tree {
            coll,
            node: node as u32,
            what,
        };
        if self.trees.contains_key(&(coll as u8)) {
            return Err(bad(0, "this collective already has a tree"));
        }
        if nodes.is_empty() {
            return Err(bad(0, "tree has no nodes"));
        }
        if nodes.len() > u32::MAX as usize {
            return Err(BuildError::TooLarge);
        }
        let n = nodes.len() as u64;
        for (j, node) in nodes.iter().enumerate() {
            match *node {
                TreeNode::Split {
                    threshold,
                    left,
                    right,
                    ..
                } => {
                    if !threshold.is_finite() {
                        return Err(bad(j, "split threshold is not finite"));
                    }
                    for c in [left as u64, right as u64] {
                        if c <= j as u64 || c >= n {
                            return Err(bad(
                                j,
                                "child index is not after its parent and inside the tree",
                            ));
                        }
                    }
                }
                TreeNode::Leaf { gain, decision, .. } => {
                    if let Some(reason) = channels_problem(decision.to_packed()) {
                        return Err(bad(j, reason));
                    }
                    check_gain(gain).map_err(|w| bad(j, w))?
                }
            }
        }
        self.trees.insert(coll as u8, nodes.to_vec());
        Ok(self)
    }

    /// Adds exploration-plan candidates (format 1.1 PLAN section). `build`
    /// orders them by (context, nodes, bucket, rank); `build` fails where
    /// the result would not validate (see `Table::from_bytes`).
    pub fn plan(&mut self, candidates: &[crate::plan::PlanCandidate]) -> &mut Self {
        self.plan.extend_from_slice(candidates);
        self
    }

    /// Writes the table.
    ///
    /// # Errors
    /// An empty metadata key, or a table over 64 MiB.
    pub fn build(&self) -> Result<Vec<u8>, BuildError> {
        let mut meta = self.meta.clone();
        meta.entry("nccl_enum".to_string())
            .or_insert_with(|| NCCL_ENUM.to_string());
        if meta.contains_key("") {
            return Err(BuildError::Meta {
                key: String::new(),
                what: "key is empty",
            });
        }

        // CONTEXTS and RULES.
        let mut contexts = Vec::new();
        let mut rules = Vec::new();
        let mut next_rule = 0u32;
        for (spec, rs) in &self.contexts {
            let count = u32::try_from(rs.len()).map_err(|_| BuildError::TooLarge)?;
            contexts.push(ContextRecord {
                coll: spec.coll as u8,
                reg_buff: spec.reg_buff as u8,
                reserved: [0; 2],
                nodes_min: U32::new(spec.nodes.0),
                nodes_max: U32::new(spec.nodes.1),
                ppn_min: U32::new(spec.ppn.0),
                ppn_max: U32::new(spec.ppn.1),
                max_pipe_ops: U32::new(spec.max_pipe_ops),
                rule_start: U32::new(next_rule),
                rule_count: U32::new(count),
            });
            next_rule = next_rule.checked_add(count).ok_or(BuildError::TooLarge)?;
            rules.extend(rs.iter().map(|r| RuleRecord {
                last_bucket: r.last_bucket,
                basis: r.basis as u8,
                reserved: [0; 2],
                decision: U32::new(r.decision.to_packed()),
                gain: F32::new(r.gain),
            }));
        }

        // TREES: count prefix, directory, nodes.
        let mut tree_dir = Vec::new();
        let mut nodes = Vec::new();
        for (&coll, ns) in &self.trees {
            tree_dir.push(TreeEntry {
                coll,
                reserved: [0; 3],
                node_start: U32::new(nodes.len() as u32),
                node_count: U32::new(ns.len() as u32),
            });
            nodes.extend(ns.iter().map(encode_node));
        }
        let mut trees = Vec::new();
        trees.extend_from_slice(
            CountPrefix {
                count: U32::new(tree_dir.len() as u32),
                reserved: U32::new(0),
            }
            .as_bytes(),
        );
        trees.extend_from_slice(tree_dir.as_bytes());
        trees.extend_from_slice(nodes.as_bytes());

        // META: count prefix, directory, string area.
        let mut entries = Vec::new();
        let mut strings = Vec::new();
        for (k, v) in &meta {
            let mut put = |s: &str| -> Result<(U32, U32), BuildError> {
                let off = u32::try_from(strings.len()).map_err(|_| BuildError::TooLarge)?;
                let len = u32::try_from(s.len()).map_err(|_| BuildError::TooLarge)?;
                strings.extend_from_slice(s.as_bytes());
                Ok((U32::new(off), U32::new(len)))
            };
            let (key_off, key_len) = put(k)?;
            let (val_off, val_len) = put(v)?;
            entries.push(MetaEntry {
                key_off,
                key_len,
                val_off,
                val_len,
            });
        }
        let mut meta_sec = Vec::new();
        meta_sec.extend_from_slice(
            CountPrefix {
                count: U32::new(entries.len() as u32),
                reserved: U32::new(0),
            }
            .as_bytes(),
        );
        meta_sec.extend_from_slice(entries.as_bytes());
        meta_sec.extend_from_slice(&strings);

        let mut plan = self.plan.clone();
        plan.sort_by_key(|c| (c.context, c.nodes, c.bucket, c.rank));
        let plan: Vec<PlanRecord> = plan
            .iter()
            .map(|c| PlanRecord {
                context: U32::new(c.context),
                nodes: U32::new(c.nodes),
                bucket: c.bucket,
                rank: c.rank,
                last_bucket: c.last_bucket,
                reserved: 0,
                decision: U32::new(c.decision.to_packed()),
                gain: F32::new(c.gain),
                spread: F32::new(c.spread),
                cost_bound: F32::new(c.cost_bound),
            })
            .collect();
        let mut sections: Vec<(u32, &[u8])> = alloc::vec![
            (kind::CONTEXTS, contexts.as_bytes()),
            (kind::RULES, rules.as_bytes()),
            (kind::TREES, &trees),
            (kind::META, &meta_sec),
        ];
        // No plan, no section: such a table is a 1.0 table, byte for byte.
        if !plan.is_empty() {
            sections.push((kind::PLAN, plan.as_bytes()));
        }
        // 1.2 only where a decision carries a chunk (byte 3, reserved in
        // 1.1), 1.1 where a plan is present: every other table is byte for
        // byte what the older writers wrote.
        let chunked = |packed: u32| packed >> 24 != 0;
        let minor = if rules.iter().any(|r| chunked(r.decision.get()))
            || nodes
                .iter()
                .any(|n| n.kind == NODE_LEAF && chunked(n.w0.get()))
            || plan.iter().any(|c| chunked(c.decision.get()))
        {
            FORMAT_MINOR
        } else if !plan.is_empty() {
            1
        } else {
            0
        };
        let out = assemble_as(&sections, minor)?;
        if !plan.is_empty() {
            if let Err(e) = crate::Table::from_bytes(&out) {
                return Err(BuildError::Plan(e));
            }
        }
        Ok(out)
    }
}

/// Lays out header, directory and sections (each section starts on an
/// 8-byte boundary, padding is zero) and fills in lengths and the CRC.
#[cfg(test)]
pub(crate) fn assemble(sections: &[(u32, &[u8])]) -> Result<Vec<u8>, BuildError> {
    let minor = u16::from(sections.iter().any(|s| s.0 == kind::PLAN));
    assemble_as(sections, minor)
}

/// [`assemble`] with the header's minor version given.
fn assemble_as(sections: &[(u32, &[u8])], minor: u16) -> Result<Vec<u8>, BuildError> {
    let dir_end = HEADER_LEN + sections.len() * core::mem::size_of::<SectionEntry>();
    let mut out = alloc::vec![0u8; dir_end];
    let mut dir = Vec::new();
    for &(k, data) in sections {
        out.resize(out.len().next_multiple_of(8), 0);
        let offset = u32::try_from(out.len()).map_err(|_| BuildError::TooLarge)?;
        let len = u32::try_from(data.len()).map_err(|_| BuildError::TooLarge)?;
        dir.push(SectionEntry {
            kind: U32::new(k),
            offset: U32::new(offset),
            len: U32::new(len),
        });
        out.extend_from_slice(data);
    }
    if out.len() as u64 > crate::raw::MAX_TABLE_LEN {
        return Err(BuildError::TooLarge);
    }
    let total = u32::try_from(out.len()).map_err(|_| BuildError::TooLarge)?;
    out[HEADER_LEN..dir_end].copy_from_slice(dir.as_bytes());
    let header = Header {
        magic: MAGIC,
        major: U16::new(FORMAT_MAJOR),
        minor: U16::new(minor),
        header_len: U32::new(HEADER_LEN as u32),
        total_len: U32::new(total),
        flags: U32::new(0),
        nccl_layout: U32::new(NCCL_LAYOUT),
        section_count: U32::new(sections.len() as u32),
        body_crc32: U32::new(crc32fast::hash(&out[HEADER_LEN..])),
        reserved: U32::new(0),
    };
    out[..HEADER_LEN].copy_from_slice(header.as_bytes());
    Ok(out)
}

fn encode_node(n: &TreeNode) -> NodeRecord {
    match *n {
        TreeNode::Split {
            feature,
            threshold,
            left,
            right,
        } => NodeRecord {
            kind: NODE_SPLIT,
            a: feature as u8,
            reserved: [0; 2],
            w0: U32::new(threshold.to_bits()),
            w1: U32::new(left),
            w2: U32::new(right),
        },
        TreeNode::Leaf {
            decision,
            basis,
            gain,
        } => NodeRecord {
            kind: NODE_LEAF,
            a: basis as u8,
            reserved: [0; 2],
            w0: U32::new(decision.to_packed()),
            w1: U32::new(gain.to_bits()),
            w2: U32::new(0),
        },
    }
}

/// Rules from one (decision, basis, gain) per size bucket: neighbouring
/// buckets with equal decision AND basis merge into one rule whose gain is
/// the MINIMUM of the run's gains (the conservative figure: a merged rule
/// never promises more than its worst bucket).
///
/// The result always ends at bucket 255; it passes
/// [`TableBuilder::context`] when every gain is finite and > 0.
pub fn rules_from_buckets(per_bucket: &[BucketDecision; NUM_BUCKETS]) -> Vec<Rule> {
    let mut out: Vec<Rule> = Vec::new();
    for (
        b,
        &BucketDecision {
            decision,
            basis,
            gain,
        },
    ) in per_bucket.iter().enumerate()
    {
        match out.last_mut() {
            Some(r) if r.decision == decision && r.basis == basis => {
                r.last_bucket = b as u8;
                // NaN-proof min: a NaN gain is kept so `context` rejects it.
                if gain < r.gain || gain.is_nan() {
                    r.gain = gain;
                }
            }
            _ => out.push(Rule {
                last_bucket: b as u8,
                decision,
                basis,
                gain,
            }),
        }
    }
    out
}

// `NUM_FEATURES` is the length of the feature vector trees are built for.
const _: () = assert!(NUM_FEATURES == 5);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Basis, Decision};
    use crate::model::{Feature, RegBuff};
    use crate::nccl::{Algo, Proto, Setting};
    use crate::Table;

    fn all(d: Decision) -> [Rule; 1] {
        [Rule {
            last_bucket: 255,
            decision: d,
            basis: Basis::Measured,
            gain: 1.0,
        }]
    }

    fn spec(coll: Coll) -> ContextSpec {
        ContextSpec {
            coll,
            nodes: (1, 4),
            ppn: (1, 8),
            max_pipe_ops: 0,
            reg_buff: RegBuff::Any,
        }
    }

    #[test]
    fn empty_builder_gives_a_valid_table_with_nccl_enum() {
        let bytes = TableBuilder::new().build().unwrap();
        let t = Table::from_bytes(&bytes).unwrap();
        assert_eq!(t.meta("nccl_enum"), Some(NCCL_ENUM));
        assert_eq!(t.context_count(), 0);
        assert_eq!(t.version(), (FORMAT_MAJOR, 0));
    }

    #[test]
    fn builder_rejects_what_the_reader_would() {
        let mut b = TableBuilder::new();
        let bad_spec = ContextSpec {
            nodes: (3, 2),
            ..spec(Coll::AllReduce)
        };
        assert!(matches!(
            b.context(bad_spec, &all(Decision::Default)),
            Err(BuildError::Context { .. })
        ));
        assert!(matches!(
            b.context(spec(Coll::AllReduce), &[]),
            Err(BuildError::Rule { .. })
        ));
        let short = [Rule {
            last_bucket: 10,
            ..all(Decision::Default)[0]
        }];
        assert!(matches!(
            b.context(spec(Coll::AllReduce), &short),
            Err(BuildError::Rule { .. })
        ));
        let nan = [Rule {
            gain: f32::NAN,
            ..all(Decision::Default)[0]
        }];
        assert!(matches!(
            b.context(spec(Coll::AllReduce), &nan),
            Err(BuildError::Rule { .. })
        ));
        let loop_ = [TreeNode::Split {
            feature: Feature::Nodes,
            threshold: 1.0,
            left: 0,
            right: 0,
        }];
        assert!(matches!(
            b.tree(Coll::AllReduce, &loop_),
            Err(BuildError::Tree { .. })
        ));
        let leaf = [TreeNode::Leaf {
            decision: Decision::Default,
            basis: Basis::Measured,
            gain: 1.0,
        }];
        b.tree(Coll::AllReduce, &leaf).unwrap();
        assert!(matches!(
            b.tree(Coll::AllReduce, &leaf),
            Err(BuildError::Tree { .. })
        ));
        b.meta("", "x");
        assert!(matches!(b.build(), Err(BuildError::Meta { .. })));
    }

    #[test]
    fn output_is_byte_stable() {
        let mut b = TableBuilder::new();
        b.meta("b", "2").meta("a", "1");
        let d = Decision::Force(Setting::new(Algo::Ring, Proto::Simple).with_channels(4));
        b.context(spec(Coll::AllGather), &all(d)).unwrap();
        assert_eq!(b.build().unwrap(), b.clone().build().unwrap());
    }

    #[test]
    fn rules_from_buckets_merges_and_takes_min_gain() {
        let tree_ll = Decision::Force(Setting::new(Algo::Tree, Proto::LL));
        let mut per = [BucketDecision::leave(Basis::Measured); NUM_BUCKETS];
        for (b, cell) in per.iter_mut().enumerate().take(20) {
            *cell = BucketDecision {
                decision: tree_ll,
                basis: Basis::Measured,
                gain: 1.5 + b as f32 / 100.0,
            };
        }
        per[10].basis = Basis::Interpolated;
        let rules = rules_from_buckets(&per);
        assert_eq!(rules.len(), 4);
        assert_eq!((rules[0].last_bucket, rules[0].gain), (9, 1.5));
        assert_eq!(
            (rules[1].last_bucket, rules[1].basis),
            (10, Basis::Interpolated)
        );
        assert_eq!(
            (rules[2].last_bucket, rules[2].gain),
            (19, 1.5 + 11.0 / 100.0)
        );
        assert_eq!(
            (rules[3].last_bucket, rules[3].decision),
            (255, Decision::Default)
        );
    }
}
