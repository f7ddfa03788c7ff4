//! The validating reader: [`Table::from_bytes`] checks a byte image once and
//! then answers lookups by indexing the validated arrays in place.
//!
//! Nothing here allocates, and nothing panics on any input: slices are
//! taken with `get`, arithmetic on file values is done in `u64` or checked,
//! and every decode of a validated value still has a non-panicking fallback.

use core::str;

use zerocopy::{FromBytes, IntoBytes};

use crate::bucket::{size_bucket, NUM_BUCKETS};
use crate::error::Error;
use crate::model::{
    channels_problem, check_gain, check_rules, gain_bits_ok, packed_is_valid, pipe_ops_allowed,
    Basis, ContextSpec, Decision, Feature, RegBuff, Rule, TreeLeaf, TreeNode, NUM_FEATURES,
    PACKED_DEFAULT,
};
use crate::nccl::{Coll, Comm, NUM_COLLS};
use crate::raw::{
    kind, ContextRecord, CountPrefix, Header, MetaEntry, NodeRecord, PlanRecord, RuleRecord,
    SectionEntry, TreeEntry, COUNT_PREFIX_LEN, FORMAT_MAJOR, HEADER_LEN, MAGIC, MAX_SECTIONS,
    MAX_TABLE_LEN, META_ENTRY_LEN, NCCL_LAYOUT, NODE_LEAF, NODE_SPLIT, RULE_LEN, SECTION_ENTRY_LEN,
    TREE_ENTRY_LEN,
};
use crate::specialised::Specialised;

/// A validated table borrowing its bytes. Cheap to copy.
#[derive(Clone, Copy, Debug)]
pub struct Table<'a> {
    bytes: &'a [u8],
    version: (u16, u16),
    contexts: &'a [ContextRecord],
    rules: &'a [RuleRecord],
    trees: &'a [TreeEntry],
    nodes: &'a [NodeRecord],
    meta: &'a [MetaEntry],
    strings: &'a [u8],
    /// Rules forcing a choice, counted by the validating scan.
    forced_rules: u32,
    /// Exploration plan (empty when the table has no PLAN section).
    plan: &'a [PlanRecord],
}

/// The ranked candidates of one plan cell ([`Table::plan_cell`]).
#[derive(Clone, Copy, Debug)]
pub struct PlanCell<'a>(&'a [PlanRecord]);

impl<'a> PlanCell<'a> {
    /// Number of candidates (0..=4).
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the cell has no candidate.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Candidate `rank`, validated at load.
    #[inline]
    pub fn get(&self, rank: usize) -> Option<crate::plan::PlanCandidate> {
        self.0
            .get(rank)
            .and_then(crate::plan::PlanCandidate::from_record)
    }

    /// Packed setting and cost bound of candidate `rank` without building
    /// a [`crate::plan::PlanCandidate`] (the runtime's hot path).
    #[inline]
    pub fn packed(&self, rank: usize) -> Option<(u32, f32)> {
        self.0
            .get(rank)
            .map(|r| (r.decision.get(), r.cost_bound.get()))
    }
}

/// The answer to one [`Table::lookup`], with its provenance.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Lookup {
    /// What to tell NCCL.
    pub decision: Decision,
    /// Basis of the rule used; `None` when no rule applied.
    pub basis: Option<Basis>,
    /// Expected speedup of the rule used; 1.0 when no rule applied.
    pub gain: f32,
    /// Index of the matching context, if any (even when its numPipeOps or
    /// regBuff gate sent the call to Default).
    pub context: Option<u32>,
    /// Index of the rule used, within its context.
    pub rule: Option<u32>,
    /// True when the matching context is gated on `regBuff` and its rule
    /// at this size would answer regBuff 0 and 1 differently
    /// ([`RegBuff::splits`]): NCCL computes `regBuff` per rank, so the call
    /// is left to NCCL (`decision` Default, `rule` None) whatever this
    /// call's `regBuff`, and every rank agrees.
    pub reg_buff_split: bool,
}

impl Lookup {
    const fn default_with(context: Option<u32>) -> Lookup {
        Lookup {
            decision: Decision::Default,
            basis: None,
            gain: 1.0,
            context,
            rule: None,
            reg_buff_split: false,
        }
    }
}

/// Counts for logs and `dyncc explain`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Coverage {
    /// Number of contexts.
    pub contexts: u32,
    /// Number of rules over all contexts.
    pub rules: u32,
    /// Rules that force a decision (not Default).
    pub forced_rules: u32,
    /// Number of trees.
    pub trees: u32,
}

impl core::fmt::Display for Coverage {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "{} contexts, {} rules ({} forcing a choice), {} trees",
            self.contexts, self.rules, self.forced_rules, self.trees
        )
    }
}

/// One context of a table: its spec and its rules.
#[derive(Clone, Copy, Debug)]
pub struct ContextView<'a> {
    index: u32,
    spec: ContextSpec,
    rules: &'a [RuleRecord],
}

impl<'a> ContextView<'a> {
    /// Index of the context in file order.
    pub fn index(&self) -> u32 {
        self.index
    }

    /// Which communicators and calls it applies to.
    pub fn spec(&self) -> ContextSpec {
        self.spec
    }

    /// Number of rules (>= 1).
    pub fn rule_count(&self) -> u32 {
        self.rules.len() as u32
    }

    /// The rules in bucket order.
    pub fn rules(&self) -> impl ExactSizeIterator<Item = Rule> + 'a {
        self.rules.iter().map(decode_rule)
    }

    /// The rule covering size bucket `bucket` and its index in this context.
    #[inline]
    pub fn rule_for_bucket(&self, bucket: u8) -> Option<(u32, Rule)> {
        let i = self.rules.partition_point(|r| r.last_bucket < bucket);
        self.rules.get(i).map(|r| (i as u32, decode_rule(r)))
    }

    /// The rule covering a message of `n_bytes`.
    pub fn rule_for_size(&self, n_bytes: u64) -> Option<(u32, Rule)> {
        self.rule_for_bucket(size_bucket(n_bytes))
    }
}

/// The decision tree of one collective (for `dyncc explain`).
#[derive(Clone, Copy, Debug)]
pub struct TreeView<'a> {
    coll: Coll,
    nodes: &'a [NodeRecord],
}

impl<'a> TreeView<'a> {
    /// The collective this tree is for.
    pub fn coll(&self) -> Coll {
        self.coll
    }

    /// Number of nodes (>= 1); node 0 is the root.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Always false: a stored tree has at least one node.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Node `i`, or `None` past the end.
    pub fn node(&self, i: usize) -> Option<TreeNode> {
        self.nodes.get(i).map(decode_node)
    }

    /// All nodes in index order.
    pub fn nodes(&self) -> impl ExactSizeIterator<Item = TreeNode> + 'a {
        self.nodes.iter().map(decode_node)
    }

    /// Walks from the root: at a split go left when
    /// `features[feature] < threshold` (so NaN goes right). The feature
    /// vector is indexed by [`Feature`] numbering ([`crate::tree_features`]
    /// computes it). `None` only if the walk leaves the tree, which
    /// validation rules out.
    pub fn eval(&self, features: &[f32; NUM_FEATURES]) -> Option<TreeLeaf> {
        self.walk(features, |_| {}).map(|(_, leaf)| leaf)
    }

    /// [`TreeView::eval`], telling `on_split` every split passed on the way
    /// (for printing the path); returns the leaf's index and what it says.
    pub fn walk(
        &self,
        features: &[f32; NUM_FEATURES],
        mut on_split: impl FnMut(SplitStep),
    ) -> Option<(usize, TreeLeaf)> {
        let mut i = 0usize;
        loop {
            match self.node(i)? {
                TreeNode::Leaf {
                    decision,
                    basis,
                    gain,
                } => {
                    return Some((
                        i,
                        TreeLeaf {
                            decision,
                            basis,
                            gain,
                        },
                    ))
                }
                TreeNode::Split {
                    feature,
                    threshold,
                    left,
                    right,
                } => {
                    let value = *features.get(feature as usize)?;
                    let holds = value < threshold;
                    on_split(SplitStep {
                        feature,
                        threshold,
                        value,
                        holds,
                    });
                    let next = if holds { left } else { right } as usize;
                    // Children are validated to be > their parent; this
                    // keeps the walk finite even if that ever regressed.
                    if next <= i {
                        return None;
                    }
                    i = next;
                }
            }
        }
    }
}

/// One split passed by [`TreeView::walk`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SplitStep {
    /// The feature tested.
    pub feature: Feature,
    /// The split's threshold.
    pub threshold: f32,
    /// The feature's value in the walk.
    pub value: f32,
    /// Whether `value < threshold` (the walk went left).
    pub holds: bool,
}

fn decode_rule(r: &RuleRecord) -> Rule {
    Rule {
        last_bucket: r.last_bucket,
        decision: Decision::from_packed(r.decision.get()).unwrap_or(Decision::Default),
        basis: Basis::from_u8(r.basis).unwrap_or(Basis::Extrapolated),
        gain: r.gain.get(),
    }
}

fn decode_context(c: &ContextRecord) -> Option<ContextSpec> {
    Some(ContextSpec {
        coll: Coll::from_nccl(c.coll as u32)?,
        nodes: (c.nodes_min.get(), c.nodes_max.get()),
        ppn: (c.ppn_min.get(), c.ppn_max.get()),
        max_pipe_ops: c.max_pipe_ops.get(),
        reg_buff: RegBuff::from_u8(c.reg_buff)?,
    })
}

fn decode_node(n: &NodeRecord) -> TreeNode {
    if n.kind == NODE_SPLIT {
        TreeNode::Split {
            feature: Feature::from_u8(n.a).unwrap_or(Feature::Log2Bytes),
            threshold: f32::from_bits(n.w0.get()),
            left: n.w1.get(),
            right: n.w2.get(),
        }
    } else {
        TreeNode::Leaf {
            decision: Decision::from_packed(n.w0.get()).unwrap_or(Decision::Default),
            basis: Basis::from_u8(n.a).unwrap_or(Basis::Extrapolated),
            gain: f32::from_bits(n.w1.get()),
        }
    }
}

/// The metadata key of the sweep fingerprint ([`Table::sweep_fingerprint`]).
pub const META_SWEEP: &str = "sweep";

/// The metadata key of the exploration share F (`dyncc compile
/// --explore F`, a decimal number): the plugin explores at the table's F
/// alone, so every rank holding the table explores alike (the digest
/// covers it); `DYNCC_EXPLORE` only switches exploration on.
pub const META_EXPLORE: &str = "explore_share";

/// The table digest of a byte image: XXH3-64 with seed 0 (the reference
/// xxHash algorithm, as `xxhsum -H3` and Python's `xxhash.xxh3_64` compute
/// it). [`Table::digest`] is this over the whole table; `dyncc verify`,
/// `dyncc compile` and the plugin's init line all print it.
///
/// XXH3 reads the input in 64-byte stripes with independent lanes (about
/// 4 us for 64 KiB here); the FNV-1a 64 digest used before it was one
/// serial multiply per byte (~1.5 ns/byte, ~100 us for 64 KiB).
pub fn digest(bytes: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(bytes)
}

/// `&bytes[off..off + len]` with the arithmetic done in u64, `None` if out
/// of range.
fn range(bytes: &[u8], off: u64, len: u64) -> Option<&[u8]> {
    let end = off.checked_add(len)?;
    bytes.get(usize::try_from(off).ok()?..usize::try_from(end).ok()?)
}

fn records<'a, T: FromBytes + zerocopy::KnownLayout + zerocopy::Immutable>(
    bytes: &'a [u8],
    kind: u32,
    what: &'static str,
) -> Result<&'a [T], Error> {
    <[T]>::ref_from_bytes(bytes).map_err(|_| Error::BadSection { kind, what })
}

impl<'a> Table<'a> {
    /// Validates `bytes` as a table and returns a view of it.
    ///
    /// Checks, in order: magic, major version, header fields and lengths,
    /// NCCL layout, section directory, CRC-32 of the body, then every
    /// context, rule, tree node and metadata string. After this succeeds
    /// every lookup indexes validated data.
    ///
    /// Never allocates and never panics, for any input. Runs in time linear
    /// in `bytes.len()`.
    ///
    /// # Errors
    /// The first problem found, as an [`Error`] whose `Display` says what is
    /// wrong in plain words.
    pub fn from_bytes(bytes: &'a [u8]) -> Result<Table<'a>, Error> {
        let have = bytes.len() as u64;
        let truncated = |need: u64| Error::Truncated { need, have };
        match bytes.get(..MAGIC.len()) {
            None => return Err(truncated(HEADER_LEN as u64)),
            Some(m) if m != MAGIC => return Err(Error::BadMagic),
            Some(_) => {}
        }
        // The major version is read before the rest of the header, whose
        // layout a future major may change.
        let major = match bytes.get(8..10) {
            Some(&[a, b]) => u16::from_le_bytes([a, b]),
            _ => return Err(truncated(HEADER_LEN as u64)),
        };
        if major != FORMAT_MAJOR {
            return Err(Error::UnsupportedVersion {
                found: major,
                supported: FORMAT_MAJOR,
            });
        }
        let (h, _) = Header::ref_from_prefix(bytes).map_err(|_| truncated(HEADER_LEN as u64))?;
        if h.reserved.get() != 0 {
            return Err(Error::BadHeader {
                what: "reserved field (bytes 36..40) is not zero",
            });
        }
        let total = h.total_len.get() as u64;
        if total > MAX_TABLE_LEN {
            return Err(Error::BadHeader {
                what: "total_len is over the format's 64 MiB limit",
            });
        }
        if have < total {
            return Err(truncated(total));
        }
        if have > total {
            return Err(Error::LengthMismatch {
                header: total,
                actual: have,
            });
        }
        let header_len = h.header_len.get() as u64;
        if header_len < HEADER_LEN as u64 {
            return Err(Error::BadHeader {
                what: "header_len is smaller than the 40-byte header",
            });
        }
        if header_len > total {
            return Err(Error::BadHeader {
                what: "header_len is past the end of the table",
            });
        }
        if h.nccl_layout.get() != NCCL_LAYOUT {
            return Err(Error::UnsupportedNcclLayout(h.nccl_layout.get()));
        }
        let count = h.section_count.get();
        if count > MAX_SECTIONS {
            return Err(Error::BadHeader {
                what: "more than 64 sections in the directory",
            });
        }
        let dir_end = header_len + count as u64 * SECTION_ENTRY_LEN as u64;
        if dir_end > total {
            return Err(Error::BadHeader {
                what: "section directory runs past the end of the table",
            });
        }
        // The CRC covers everything after the fixed 40-byte header, so header
        // fields a later minor appends (header_len > 40) are covered too.
        let body =
            range(bytes, HEADER_LEN as u64, total - HEADER_LEN as u64).ok_or(truncated(total))?;
        let found = crc32fast::hash(body);
        // The fuzzer cannot forge CRCs; skipping the check lets it reach
        // the structural checks below.
        if found != h.body_crc32.get() && !cfg!(fuzzing) {
            return Err(Error::Checksum {
                expected: h.body_crc32.get(),
                found,
            });
        }
        let dir_bytes = range(bytes, header_len, dir_end - header_len).ok_or(truncated(dir_end))?;
        let dir = <[SectionEntry]>::ref_from_bytes(dir_bytes).map_err(|_| Error::BadHeader {
            what: "section directory has a partial entry",
        })?;

        let mut known: [Option<&'a [u8]>; 5] = [None; 5];
        for (i, e) in dir.iter().enumerate() {
            let (k, off, len) = (e.kind.get(), e.offset.get() as u64, e.len.get() as u64);
            if off < dir_end || off + len > total {
                return Err(Error::BadSection {
                    kind: k,
                    what: "section lies outside the table body",
                });
            }
            for prev in dir.iter().take(i) {
                let (po, pl) = (prev.offset.get() as u64, prev.len.get() as u64);
                if len > 0 && pl > 0 && off < po + pl && po < off + len {
                    return Err(Error::BadSection {
                        kind: k,
                        what: "section overlaps another",
                    });
                }
            }
            if (kind::CONTEXTS..=kind::PLAN).contains(&k) {
                let slot = &mut known[(k - 1) as usize];
                if slot.is_some() {
                    return Err(Error::BadSection {
                        kind: k,
                        what: "section appears twice",
                    });
                }
                *slot = Some(range(bytes, off, len).ok_or(truncated(off + len))?);
            }
            // Unknown kinds come from newer minors; skip them.
        }
        let section = |k: u32| known[(k - 1) as usize].ok_or(Error::MissingSection { kind: k });
        let contexts: &[ContextRecord] = records(
            section(kind::CONTEXTS)?,
            kind::CONTEXTS,
            "length is not a multiple of the 32-byte context record",
        )?;
        let rules: &[RuleRecord] = records(
            section(kind::RULES)?,
            kind::RULES,
            "length is not a multiple of the 12-byte rule record",
        )?;
        let forced_rules = validate_contexts(contexts, rules)?;
        let (trees, nodes) = parse_trees(section(kind::TREES)?)?;
        let (meta, strings) = parse_meta(section(kind::META)?)?;
        let plan = match known[(kind::PLAN - 1) as usize] {
            Some(sec) => crate::plan::parse_plan(sec, contexts)?,
            None => &[],
        };

        Ok(Table {
            bytes,
            version: (major, h.minor.get()),
            contexts,
            rules,
            trees,
            nodes,
            meta,
            strings,
            forced_rules,
            plan,
        })
    }

    /// Whether the table carries an exploration plan (format 1.1 PLAN).
    pub fn has_plan(&self) -> bool {
        !self.plan.is_empty()
    }

    /// Number of plan records (candidates over all cells).
    pub fn plan_len(&self) -> usize {
        self.plan.len()
    }

    /// Every plan candidate, in (context, nodes, bucket, rank) order.
    pub fn plan(&self) -> impl Iterator<Item = crate::plan::PlanCandidate> + 'a {
        self.plan
            .iter()
            .filter_map(crate::plan::PlanCandidate::from_record)
    }

    /// The ranked candidates of one cell: a binary search over the plan,
    /// no allocation. Empty when the plan has no such cell.
    #[inline]
    pub fn plan_cell(&self, context: u32, nodes: u32, bucket: u8) -> PlanCell<'a> {
        PlanCell(crate::plan::cell(self.plan, context, nodes, bucket))
    }

    /// Every cell of the node count serving `nodes` in `context`, in
    /// bucket order (each [`PlanCell`] a run of buckets,
    /// `get(0).bucket..=last_bucket`): a reader filling a whole row reads
    /// each run once instead of looking up every bucket.
    pub fn plan_cells(&self, context: u32, nodes: u32) -> impl Iterator<Item = PlanCell<'a>> + 'a {
        crate::plan::cells(self.plan, context, nodes).map(PlanCell)
    }

    /// The first node count above `nodes` that `context`'s plan lists (the
    /// cells listed at or below `nodes` serve up to one below it), `None`
    /// when they serve to the context's last. A binary search.
    pub fn plan_next_nodes(&self, context: u32, nodes: u32) -> Option<u32> {
        crate::plan::next_nodes(self.plan, context, nodes)
    }

    /// Format (major, minor) of the file.
    pub fn version(&self) -> (u16, u16) {
        self.version
    }

    /// The table's digest ([`digest`]: XXH3-64 of the whole byte image):
    /// equal digests on every rank mean every rank loaded the same table.
    ///
    /// Computed on each call (a few microseconds for 64 KiB), not in
    /// `from_bytes`; callers that print it often keep the value.
    pub fn digest(&self) -> u64 {
        digest(self.bytes)
    }

    /// Length of the table in bytes.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Always false (a valid table has a header).
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// The validated byte image.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.bytes
    }

    fn string(&self, off: u32, len: u32) -> &'a str {
        range(self.strings, off as u64, len as u64)
            .and_then(|b| str::from_utf8(b).ok())
            .unwrap_or("")
    }

    /// The metadata value for `key` (keys are unique).
    pub fn meta(&self, key: &str) -> Option<&'a str> {
        let i = self
            .meta
            .binary_search_by(|e| self.string(e.key_off.get(), e.key_len.get()).cmp(key))
            .ok()?;
        self.meta
            .get(i)
            .map(|e| self.string(e.val_off.get(), e.val_len.get()))
    }

    /// The fingerprint of the sweep this table was compiled from: its
    /// [`META_SWEEP`] metadata, 16 hex digits (written by `dyncc compile`
    /// from the contents of the sweep files that contributed, traces not
    /// included). `None` when absent or malformed. Jobs' traces carry it,
    /// so the compiler can tell traces of a table from another sweep.
    pub fn sweep_fingerprint(&self) -> Option<u64> {
        let v = self.meta(META_SWEEP)?;
        if v.len() != 16 {
            return None;
        }
        u64::from_str_radix(v, 16).ok()
    }

    /// All metadata, sorted by key.
    pub fn meta_entries(&self) -> impl ExactSizeIterator<Item = (&'a str, &'a str)> + 'a {
        let t = *self;
        self.meta.iter().map(move |e| {
            (
                t.string(e.key_off.get(), e.key_len.get()),
                t.string(e.val_off.get(), e.val_len.get()),
            )
        })
    }

    /// Number of contexts.
    pub fn context_count(&self) -> u32 {
        self.contexts.len() as u32
    }

    /// Context `i` in file order.
    pub fn context(&self, i: u32) -> Option<ContextView<'a>> {
        let c = self.contexts.get(i as usize)?;
        let start = c.rule_start.get() as u64;
        Some(ContextView {
            index: i,
            spec: decode_context(c)?,
            rules: self
                .rules
                .get(start as usize..(start + c.rule_count.get() as u64) as usize)?,
        })
    }

    /// All contexts in file order (first match wins).
    pub fn contexts(&self) -> impl ExactSizeIterator<Item = ContextView<'a>> + 'a {
        let t = *self;
        // Every index is valid after validation; `Default` view is never hit.
        (0..self.context_count()).map(move |i| {
            t.context(i).unwrap_or(ContextView {
                index: i,
                spec: ContextSpec {
                    coll: Coll::Broadcast,
                    nodes: (1, 0),
                    ppn: (1, 0),
                    max_pipe_ops: 0,
                    reg_buff: RegBuff::Any,
                },
                rules: &[],
            })
        })
    }

    /// The first context of `coll` that `comm` falls in.
    pub fn find_context(&self, coll: Coll, comm: &Comm) -> Option<ContextView<'a>> {
        let i = self.contexts.iter().position(|c| {
            c.coll == coll as u8 && decode_context(c).is_some_and(|s| s.matches(comm))
        })?;
        self.context(i as u32)
    }

    /// What to tell NCCL for one call, with provenance. Same arguments as
    /// the tuner's `getCollInfo`, the communicator whole (`coll_type` is
    /// `ncclFunc_t`); `regBuff`
    /// is taken and ignored: NCCL computes it per rank, so no answer may
    /// depend on it. A context gated on it keeps only what it decides for
    /// every value ([`RegBuff::agreed`]; [`Lookup::reg_buff_split`] marks
    /// the calls that leaves to NCCL).
    pub fn lookup(
        &self,
        coll_type: u32,
        comm: &Comm,
        n_bytes: u64,
        num_pipe_ops: i32,
        _reg_buff: i32,
    ) -> Lookup {
        let Some(coll) = Coll::from_nccl(coll_type) else {
            return Lookup::default_with(None);
        };
        let Some(ctx) = self.find_context(coll, comm) else {
            return Lookup::default_with(None);
        };
        let spec = ctx.spec();
        if !pipe_ops_allowed(spec.max_pipe_ops, num_pipe_ops) {
            return Lookup::default_with(Some(ctx.index));
        }
        match ctx.rule_for_size(n_bytes) {
            Some((_, r)) if spec.reg_buff.splits(r.decision) => Lookup {
                reg_buff_split: true,
                ..Lookup::default_with(Some(ctx.index))
            },
            // Not split: `agreed` is the rule's own decision.
            Some((i, r)) => Lookup {
                decision: r.decision,
                basis: Some(r.basis),
                gain: r.gain,
                context: Some(ctx.index),
                rule: Some(i),
                reg_buff_split: false,
            },
            None => Lookup::default_with(Some(ctx.index)),
        }
    }

    /// The dense lookup for `comm`. [`Specialised::decide`] equals
    /// [`Table::lookup`]'s decision for every call on that communicator.
    pub fn specialise(&self, comm: &Comm) -> Specialised {
        // One pass over the contexts finds every collective's first match
        // (what `find_context` finds for each).
        let mut chosen: [Option<u32>; NUM_COLLS] = [None; NUM_COLLS];
        let mut open = NUM_COLLS;
        for (i, c) in self.contexts.iter().enumerate() {
            let Some(slot @ None) = chosen.get_mut(c.coll as usize) else {
                continue;
            };
            if decode_context(c).is_some_and(|s| s.matches(comm)) {
                *slot = Some(i as u32);
                open -= 1;
                if open == 0 {
                    break;
                }
            }
        }
        let mut s = Specialised::empty();
        for (coll, i) in Coll::ALL.into_iter().zip(chosen) {
            let Some(ctx) = i.and_then(|i| self.context(i)) else {
                continue;
            };
            s.set(coll, ctx.rules(), ctx.index, ctx.spec());
        }
        s
    }

    /// The distilled tree of `coll`, if the table has one.
    pub fn tree(&self, coll: Coll) -> Option<TreeView<'a>> {
        let t = self.trees.iter().find(|t| t.coll == coll as u8)?;
        let start = t.node_start.get() as u64;
        let nodes = self
            .nodes
            .get(start as usize..(start + t.node_count.get() as u64) as usize)?;
        Some(TreeView { coll, nodes })
    }

    /// Counts of contexts, rules, forced rules and trees.
    pub fn coverage(&self) -> Coverage {
        Coverage {
            contexts: self.contexts.len() as u32,
            rules: self.rules.len() as u32,
            forced_rules: self.forced_rules,
            trees: self.trees.len() as u32,
        }
    }
}

/// Checks CONTEXTS and RULES and returns how many rules force a choice
/// (for [`Table::coverage`]).
///
/// The fast scan decides; the exact walk runs only on a rejected table, to
/// name the first problem (it returns `Ok` only if the scan was stricter
/// than the format, which the tests rule out; the table then loads, since
/// the exact walk is the format's definition).
fn validate_contexts(contexts: &[ContextRecord], rules: &[RuleRecord]) -> Result<u32, Error> {
    if let Some(forced) = scan_contexts(contexts, rules) {
        return Ok(forced);
    }
    validate_contexts_exact(contexts, rules)?;
    Ok(rules
        .iter()
        .filter(|r| r.decision.get() != PACKED_DEFAULT)
        .count() as u32)
}

/// The same checks as [`validate_contexts_exact`], fused into one pass over
/// the contexts and one branch-free pass over the rules; `Some(number of
/// forcing rules)` when every check holds, `None` when any fails (without
/// saying which).
///
/// Why the flat rule pass is the per-context check: the contexts tile RULES
/// (each `rule_start` is the previous end, no context is empty, the last
/// ends at the end of RULES) and each context's last rule ends at bucket
/// 255. With exactly as many 255s in RULES as there are contexts, every
/// 255 is a context's last rule, so "each rule's `last_bucket` is above the
/// one before it, unless that one is 255" is "strictly increasing within
/// each context". Every per-rule check is the same predicate on every rule.
pub(crate) fn scan_contexts(contexts: &[ContextRecord], rules: &[RuleRecord]) -> Option<u32> {
    let mut bad = false;
    let mut next = 0u64;
    for c in contexts {
        bad |= Coll::from_nccl(c.coll as u32).is_none()
            | RegBuff::from_u8(c.reg_buff).is_none()
            | (c.reserved != [0; 2])
            | (c.nodes_min.get() > c.nodes_max.get())
            | (c.ppn_min.get() > c.ppn_max.get())
            | (c.rule_start.get() as u64 != next);
        let n = c.rule_count.get() as u64;
        if n == 0 {
            return None;
        }
        next += n;
        let last = rules.get(usize::try_from(next - 1).ok()?)?;
        bad |= last.last_bucket != u8::MAX;
    }
    if bad || next != rules.len() as u64 {
        return None;
    }
    let scan = scan_rules(rules);
    (scan.ok && scan.ends == contexts.len() as u64).then_some(scan.forced)
}

/// What [`scan_rules`] found.
struct RuleScan {
    /// Every rule passes the per-rule checks, and each `last_bucket` is
    /// above the previous rule's unless that one is 255.
    ok: bool,
    /// Rules ending at bucket 255.
    ends: u64,
    /// Rules whose decision is not Default.
    forced: u32,
}

/// Rules [`scan_rules`] checks side by side, which the autovectoriser turns
/// into a few SIMD operations per check (8 measured the same as 4).
const LANES: usize = 4;

/// One pass over all rules with no data-dependent branch: each check is a
/// comparison OR-ed into a flag. Rules are taken [`LANES`] at a time, their
/// three words gathered into lane arrays first, so the compiler evaluates
/// each check for all lanes with a few SIMD instructions (about 1.1 ns per
/// rule on the development machine; the rule-by-rule walk took about 2).
fn scan_rules(rules: &[RuleRecord]) -> RuleScan {
    let mut bad = [0u32; LANES];
    let mut ends = [0u32; LANES];
    let mut forced = [0u32; LANES];
    // The previous rule's `last_bucket + 1` (mod 256): the least this
    // rule's `last_bucket` may be. 255 before the first rule wraps to 0, as
    // after every context's last rule.
    let mut floor = 0u32;
    let chunks = rules.as_bytes().chunks_exact(RULE_LEN * LANES);
    let tail = chunks.remainder();
    for chunk in chunks {
        let mut w = [RuleWords::default(); LANES];
        for (k, lane) in w.iter_mut().enumerate() {
            *lane = RuleWords::read(chunk, RULE_LEN * k);
        }
        let mut floors = [floor; LANES];
        for k in 1..LANES {
            floors[k] = w[k - 1].next_floor();
        }
        for k in 0..LANES {
            bad[k] |= u32::from(w[k].bad(floors[k]));
            ends[k] += u32::from(w[k].next_floor() == 0);
            forced[k] += u32::from(w[k].packed != PACKED_DEFAULT);
        }
        floor = w[LANES - 1].next_floor();
    }
    let mut scan = RuleScan {
        ok: bad.iter().all(|&b| b == 0),
        ends: ends.iter().map(|&e| u64::from(e)).sum(),
        forced: forced.iter().sum(),
    };
    for r in tail.chunks_exact(RULE_LEN) {
        let w = RuleWords::read(r, 0);
        scan.ok &= !w.bad(floor);
        scan.ends += u64::from(w.next_floor() == 0);
        scan.forced += u32::from(w.packed != PACKED_DEFAULT);
        floor = w.next_floor();
    }
    scan
}

/// One rule as the three little-endian words [`scan_rules`] checks.
#[derive(Clone, Copy, Default)]
struct RuleWords {
    /// `last_bucket`, `basis` and the two reserved bytes.
    head: u32,
    /// The packed decision.
    packed: u32,
    /// The gain's bits.
    gain: u32,
}

impl RuleWords {
    /// The rule at byte `at` of `bytes` (all zero past the end, which the
    /// callers' exact chunking never reaches).
    #[inline(always)]
    fn read(bytes: &[u8], at: usize) -> RuleWords {
        let word = |i: usize| {
            bytes
                .get(at + i..at + i + 4)
                .and_then(|b| b.try_into().ok())
                .map_or(0, u32::from_le_bytes)
        };
        RuleWords {
            head: word(0),
            packed: word(4),
            gain: word(8),
        }
    }

    /// `last_bucket + 1` mod 256: the least the next rule's may be, 0 after
    /// a rule ending at bucket 255.
    #[inline(always)]
    fn next_floor(&self) -> u32 {
        (self.head.wrapping_add(1)) & 0xFF
    }

    /// True when any per-rule check fails, or `last_bucket` is below
    /// `floor`.
    #[inline(always)]
    fn bad(&self, floor: u32) -> bool {
        // basis <= 2 and both reserved bytes zero.
        let head_bad = (self.head >> 8) > Basis::Extrapolated as u32;
        ((self.head & 0xFF) < floor)
            | head_bad
            | !packed_is_valid(self.packed)
            | !gain_bits_ok(self.gain)
    }
}

/// The exact check of CONTEXTS and RULES: walks context by context and
/// returns the first problem, named by context and rule. The reference
/// semantics [`scan_contexts`] must agree with; `from_bytes` runs it only
/// when the fast scan rejects, to say what is wrong.
pub(crate) fn validate_contexts_exact(
    contexts: &[ContextRecord],
    rules: &[RuleRecord],
) -> Result<(), Error> {
    let mut next_rule = 0u64;
    for (i, c) in contexts.iter().enumerate() {
        let index = i as u32;
        let bad = |what| Error::BadContext { index, what };
        if Coll::from_nccl(c.coll as u32).is_none() {
            return Err(bad("collective is not 0..=4 (broadcast..allreduce)"));
        }
        if RegBuff::from_u8(c.reg_buff).is_none() {
            return Err(bad("reg_buff is not 0 (any), 1 (only 0) or 2 (only 1)"));
        }
        if c.reserved != [0; 2] {
            return Err(bad("reserved bytes are not zero"));
        }
        if c.nodes_min.get() > c.nodes_max.get() {
            return Err(bad("node range is empty (min > max)"));
        }
        if c.ppn_min.get() > c.ppn_max.get() {
            return Err(bad("ranks-per-node range is empty (min > max)"));
        }
        if c.rule_start.get() as u64 != next_rule {
            return Err(bad(
                "rule ranges do not tile the RULES section in context order",
            ));
        }
        let n = c.rule_count.get() as u64;
        if n == 0 {
            return Err(bad(
                "context has no rules (it needs at least one, ending at bucket 255)",
            ));
        }
        let Some(own) = rules.get(next_rule as usize..(next_rule + n) as usize) else {
            return Err(bad("rule range runs past the end of the RULES section"));
        };
        if let Some(j) = own.iter().position(|r| r.reserved != [0; 2]) {
            return Err(Error::BadRule {
                context: index,
                index: j as u32,
                what: "reserved bytes are not zero",
            });
        }
        check_rules(
            own.iter()
                .map(|r| (r.last_bucket, r.decision.get(), r.basis, r.gain.get())),
        )
        .map_err(|(j, what)| Error::BadRule {
            context: index,
            index: j,
            what,
        })?;
        next_rule += n;
    }
    if next_rule != rules.len() as u64 {
        return Err(Error::BadSection {
            kind: kind::RULES,
            what: "some rules belong to no context",
        });
    }
    Ok(())
}

fn split_counted(sec: &[u8], k: u32, entry_len: usize) -> Result<(u32, &[u8], &[u8]), Error> {
    let (prefix, rest) = CountPrefix::ref_from_prefix(sec).map_err(|_| Error::BadSection {
        kind: k,
        what: "shorter than its 8-byte count prefix",
    })?;
    if prefix.reserved.get() != 0 {
        return Err(Error::BadSection {
            kind: k,
            what: "reserved field is not zero",
        });
    }
    let count = prefix.count.get();
    let n = count as u64 * entry_len as u64;
    if n > rest.len() as u64 {
        return Err(Error::BadSection {
            kind: k,
            what: "entry count runs past the section end",
        });
    }
    let (entries, tail) = rest.split_at(n as usize);
    debug_assert_eq!(COUNT_PREFIX_LEN, 8);
    Ok((count, entries, tail))
}

fn parse_trees(sec: &[u8]) -> Result<(&[TreeEntry], &[NodeRecord]), Error> {
    let k = kind::TREES;
    let (_, entries, tail) = split_counted(sec, k, TREE_ENTRY_LEN)?;
    let trees: &[TreeEntry] = records(entries, k, "tree directory has a partial entry")?;
    let nodes: &[NodeRecord] = records(
        tail,
        k,
        "node area is not a multiple of the 16-byte node record",
    )?;
    let mut next = 0u64;
    let mut seen = 0u8;
    for (t, e) in trees.iter().enumerate() {
        let tree = t as u32;
        let bad = |node, what| Error::BadTree { tree, node, what };
        if Coll::from_nccl(e.coll as u32).is_none() {
            return Err(bad(0, "collective is not 0..=4"));
        }
        if seen & (1 << e.coll) != 0 {
            return Err(bad(0, "a second tree for the same collective"));
        }
        seen |= 1 << e.coll;
        if e.reserved != [0; 3] {
            return Err(bad(0, "reserved bytes are not zero"));
        }
        if e.node_start.get() as u64 != next {
            return Err(bad(
                0,
                "node ranges do not tile the node area in tree order",
            ));
        }
        let n = e.node_count.get() as u64;
        if n == 0 {
            return Err(bad(0, "tree has no nodes"));
        }
        let Some(own) = nodes.get(next as usize..(next + n) as usize) else {
            return Err(bad(0, "node range runs past the end of the node area"));
        };
        for (j, node) in own.iter().enumerate() {
            let bad = |what| Error::BadTree {
                tree,
                node: j as u32,
                what,
            };
            if node.reserved != [0; 2] {
                return Err(bad("reserved bytes are not zero"));
            }
            match node.kind {
                NODE_SPLIT => {
                    if Feature::from_u8(node.a).is_none() {
                        return Err(bad("split feature is not 0..=4"));
                    }
                    if !f32::from_bits(node.w0.get()).is_finite() {
                        return Err(bad("split threshold is not finite"));
                    }
                    for child in [node.w1.get() as u64, node.w2.get() as u64] {
                        if child <= j as u64 || child >= n {
                            return Err(bad(
                                "child index is not after its parent and inside the tree",
                            ));
                        }
                    }
                }
                NODE_LEAF => {
                    if Basis::from_u8(node.a).is_none() {
                        return Err(bad("leaf basis is not 0..=2"));
                    }
                    if let Some(reason) = channels_problem(node.w0.get()) {
                        return Err(bad(reason));
                    }
                    if Decision::from_packed(node.w0.get()).is_none() {
                        return Err(bad("leaf decision is not a valid encoding"));
                    }
                    check_gain(f32::from_bits(node.w1.get())).map_err(bad)?;
                    if node.w2.get() != 0 {
                        return Err(bad("leaf's unused word is not zero"));
                    }
                }
                _ => return Err(bad("node kind is not 0 (split) or 1 (leaf)")),
            }
        }
        next += n;
    }
    if next != nodes.len() as u64 {
        return Err(Error::BadSection {
            kind: k,
            what: "some tree nodes belong to no tree",
        });
    }
    Ok((trees, nodes))
}

fn parse_meta(sec: &[u8]) -> Result<(&[MetaEntry], &[u8]), Error> {
    let k = kind::META;
    let (_, entries, strings) = split_counted(sec, k, META_ENTRY_LEN)?;
    let meta: &[MetaEntry] = records(entries, k, "metadata directory has a partial entry")?;
    let mut prev: Option<&str> = None;
    for (i, e) in meta.iter().enumerate() {
        let bad = |what| Error::BadMeta {
            index: i as u32,
            what,
        };
        let key = range(strings, e.key_off.get() as u64, e.key_len.get() as u64)
            .ok_or(bad("key lies outside the string area"))?;
        let val = range(strings, e.val_off.get() as u64, e.val_len.get() as u64)
            .ok_or(bad("value lies outside the string area"))?;
        let key = str::from_utf8(key).map_err(|_| bad("key is not UTF-8"))?;
        str::from_utf8(val).map_err(|_| bad("value is not UTF-8"))?;
        if key.is_empty() {
            return Err(bad("key is empty"));
        }
        if prev.is_some_and(|p| p >= key) {
            return Err(bad("keys are not sorted and unique"));
        }
        prev = Some(key);
    }
    Ok((meta, strings))
}

// Compile-time guarantee the hot path's u8 index cannot leave a row.
const _: () = assert!(NUM_BUCKETS == u8::MAX as usize + 1);
