//! The logical content of a table: decisions, rules, contexts and tree nodes.
//!
//! These are the values the reader hands out and the builder takes in; the
//! byte layout they are stored in lives in `raw.rs`.

use crate::nccl::{Coll, Comm, Setting, MAX_CHANNELS, NUM_ALGOS, NUM_PROTOS};

/// What the plugin tells NCCL for one collective call.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash)]
pub enum Decision {
    /// Leave NCCL's own choice alone.
    Default,
    /// Force this setting (its `channels == 0` leaves the channel count to
    /// NCCL).
    Force(Setting),
}

/// `to_packed()` of [`Decision::Default`].
pub const PACKED_DEFAULT: u32 = 0x0000_FFFF;

impl Decision {
    /// The file encoding: a forced decision is [`Setting::to_rule_bits`]
    /// (byte0 algo, byte1 proto, byte2 channels, byte3 the chunk's code,
    /// 0 = NCCL's); Default is byte0 and byte1 0xFF, bytes 2 and 3 zero.
    #[inline]
    pub const fn to_packed(self) -> u32 {
        match self {
            Decision::Default => PACKED_DEFAULT,
            Decision::Force(s) => s.to_rule_bits(),
        }
    }

    /// Decodes [`Decision::to_packed`]; `None` for any other value (unknown
    /// algorithm or protocol, Default with a protocol or channels, more
    /// than [`MAX_CHANNELS`] channels, a chunk no code or grain allows, a
    /// Default with a chunk).
    #[inline]
    pub fn from_packed(v: u32) -> Option<Decision> {
        let [a, p, ch, chunk] = v.to_le_bytes();
        if a == 0xFF {
            return (p == 0xFF && ch == 0 && chunk == 0).then_some(Decision::Default);
        }
        Setting::from_rule_bits(v).map(Decision::Force)
    }

    /// True unless this is [`Decision::Default`].
    pub const fn is_forced(self) -> bool {
        matches!(self, Decision::Force(..))
    }

    /// The forced setting; `None` for [`Decision::Default`].
    pub const fn setting(self) -> Option<Setting> {
        match self {
            Decision::Default => None,
            Decision::Force(s) => Some(s),
        }
    }

    /// The chunk size in bytes this decision sets for a call NCCL chunks
    /// with `algo` and `proto` (getChunkSize's arguments): its chunk where
    /// it forces that same algorithm and protocol with one; `None` (leave
    /// NCCL's) for any other call. One definition for the table's answer
    /// and an exploring communicator's.
    #[inline]
    pub fn chunk_for(self, algo: i32, proto: i32) -> Option<u32> {
        match self {
            // NCCL's chunk is 0 bytes: one test for both.
            Decision::Force(s) if s.algo as i32 == algo && s.proto as i32 == proto => {
                let bytes = s.chunk.bytes();
                (bytes != 0).then_some(bytes)
            }
            _ => None,
        }
    }
}

impl core::fmt::Display for Decision {
    /// `default`, or the setting (`tree/ll`, `ring/simple/8ch`).
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Decision::Default => f.write_str("default"),
            Decision::Force(s) => s.fmt(f),
        }
    }
}

/// How well a rule's decision is backed by measurements.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Basis {
    /// Measured at this size and shape.
    Measured = 0,
    /// Between measured points.
    Interpolated = 1,
    /// Outside what was measured.
    Extrapolated = 2,
}

impl Basis {
    /// All values, in numbering order.
    pub const ALL: [Basis; 3] = [Basis::Measured, Basis::Interpolated, Basis::Extrapolated];

    /// From the file's byte; `None` if out of range.
    pub const fn from_u8(v: u8) -> Option<Basis> {
        match v {
            0 => Some(Basis::Measured),
            1 => Some(Basis::Interpolated),
            2 => Some(Basis::Extrapolated),
            _ => None,
        }
    }

    /// Lower-case name (`measured`, `interpolated`, `extrapolated`).
    pub const fn name(self) -> &'static str {
        match self {
            Basis::Measured => "measured",
            Basis::Interpolated => "interpolated",
            Basis::Extrapolated => "extrapolated",
        }
    }
}

/// One run of size buckets with one decision.
///
/// A context's rules are sorted by `last_bucket`, strictly increasing; rule
/// `i` covers buckets `(rules[i-1].last_bucket, rules[i].last_bucket]` and
/// the last rule has `last_bucket == 255`.
#[derive(Clone, Copy, PartialEq, Debug)]
pub struct Rule {
    /// Last bucket (inclusive) this rule covers.
    pub last_bucket: u8,
    /// What to do in these buckets.
    pub decision: Decision,
    /// How well it is backed.
    pub basis: Basis,
    /// Expected speedup over NCCL's default (`t_default / t_choice`; 1.0 for
    /// Default). Finite and > 0.
    pub gain: f32,
}

/// Which `regBuff` values a context's decisions apply to.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash)]
#[repr(u8)]
pub enum RegBuff {
    /// Any value.
    Any = 0,
    /// Only `regBuff == 0` (buffer not registered).
    Only0 = 1,
    /// Only `regBuff != 0` (buffer registered).
    Only1 = 2,
}

impl RegBuff {
    /// From the file's byte; `None` if out of range.
    pub const fn from_u8(v: u8) -> Option<RegBuff> {
        match v {
            0 => Some(RegBuff::Any),
            1 => Some(RegBuff::Only0),
            2 => Some(RegBuff::Only1),
            _ => None,
        }
    }

    /// Whether NCCL's `regBuff` argument is one this context decides for.
    #[inline]
    pub const fn allows(self, reg_buff: i32) -> bool {
        match self {
            RegBuff::Any => true,
            RegBuff::Only0 => reg_buff == 0,
            RegBuff::Only1 => reg_buff != 0,
        }
    }

    /// Whether a context with this gate, whose rule says `d` at some size
    /// (its `numPipeOps` gate passed), would answer `regBuff` 0 and 1
    /// differently. NCCL computes `regBuff` per rank (src/enqueue.cc:2145 at
    /// v2.30.7-1, from the rank's own registration cache and its own
    /// `NCCL_LOCAL_REGISTER`), so ranks of one collective can pass different
    /// values: where this is true, answering by `regBuff` could make them run
    /// different algorithms, a hang.
    #[inline]
    pub fn splits(self, d: Decision) -> bool {
        self.answer(d, 0) != self.answer(d, 1)
    }

    /// What a call gets from a context with this gate whose rule says `d`
    /// (its `numPipeOps` gate passed), whatever the calling rank's
    /// `regBuff`: the common answer where regBuff 0 and 1 agree, else
    /// Default (NCCL alone, which every rank gives). So no answer depends on
    /// `regBuff`; a gated context keeps only what it would decide for every
    /// value (with first-match-no-fall-through, its Default rules).
    #[inline]
    pub fn agreed(self, d: Decision) -> Decision {
        if self.splits(d) {
            Decision::Default
        } else {
            self.answer(d, 0)
        }
    }

    /// The answer for one `regBuff` value, as the gate alone would give it.
    #[inline]
    fn answer(self, d: Decision, reg_buff: i32) -> Decision {
        if self.allows(reg_buff) {
            d
        } else {
            Decision::Default
        }
    }
}

/// Whether NCCL's `numPipeOps` is one a context with this `max_pipe_ops`
/// decides for (0 = any).
#[inline]
pub const fn pipe_ops_allowed(max_pipe_ops: u32, num_pipe_ops: i32) -> bool {
    max_pipe_ops == 0 || (num_pipe_ops as i64) <= max_pipe_ops as i64
}

/// The communicator shapes one set of rules applies to.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash)]
pub struct ContextSpec {
    /// The collective.
    pub coll: Coll,
    /// Inclusive range of `nNodes`.
    pub nodes: (u32, u32),
    /// Inclusive range of ranks per node.
    pub ppn: (u32, u32),
    /// 0 = any `numPipeOps`; else decisions apply only when `numPipeOps <= this`.
    pub max_pipe_ops: u32,
    /// Which `regBuff` values decisions apply to.
    pub reg_buff: RegBuff,
}

impl ContextSpec {
    /// Whether `comm` is in this context: `nodes.0 <= nodes <= nodes.1`
    /// and `ppn.0 * nodes <= ranks <= ppn.1 * nodes` (saturating).
    #[inline]
    pub const fn matches(&self, comm: &Comm) -> bool {
        let (n_ranks, n_nodes) = (comm.ranks, comm.nodes);
        (self.nodes.0 as u64) <= n_nodes
            && n_nodes <= self.nodes.1 as u64
            && (self.ppn.0 as u64).saturating_mul(n_nodes) <= n_ranks
            && n_ranks <= (self.ppn.1 as u64).saturating_mul(n_nodes)
    }
}

/// The feature vector the explain trees split on, indexed by [`Feature`]
/// numbering: log2 bytes, nodes, ranks, ranks per node, log2 bytes per
/// rank. The compiler fits trees on it and every reader walks them with it,
/// so both compute it here.
pub fn tree_features(n_bytes: u64, n_nodes: u64, n_ranks: u64) -> [f32; NUM_FEATURES] {
    let lb = log2(n_bytes.max(1));
    let nodes = n_nodes.max(1) as f64;
    let ranks = n_ranks.max(1) as f64;
    [
        lb as f32,
        nodes as f32,
        ranks as f32,
        (ranks / nodes) as f32,
        (lb - log2(n_ranks.max(1))) as f32,
    ]
}

/// log2 without `std` (no_std has no `f64::log2`): exponent plus a
/// polynomial for the mantissa, exact at powers of two and within 1e-6
/// elsewhere, which is far below what a split threshold resolves.
fn log2(x: u64) -> f64 {
    let e = 63 - x.leading_zeros();
    // Mantissa m in [1, 2).
    let m = x as f64 / (1u64 << e) as f64;
    // log2(m) = ln(m) / ln 2 with ln(m) = 2 atanh((m-1)/(m+1)) series.
    let t = (m - 1.0) / (m + 1.0);
    let t2 = t * t;
    let mut term = t;
    let mut sum = 0.0;
    let mut k = 1.0;
    while k < 40.0 {
        sum += term / k;
        term *= t2;
        k += 2.0;
    }
    e as f64 + 2.0 * sum / core::f64::consts::LN_2
}

/// What a tree's leaf says.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TreeLeaf {
    /// The decision.
    pub decision: Decision,
    /// How it was established.
    pub basis: Basis,
    /// Expected speedup over NCCL's default.
    pub gain: f32,
}

/// One size bucket's decision, before runs of equal buckets are merged into
/// [`Rule`]s.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BucketDecision {
    /// What to tell NCCL.
    pub decision: Decision,
    /// How the decision was established.
    pub basis: Basis,
    /// Expected speedup over NCCL's default (1 when leaving NCCL alone).
    pub gain: f32,
}

impl BucketDecision {
    /// Leave NCCL alone, on the given basis.
    pub const fn leave(basis: Basis) -> BucketDecision {
        BucketDecision {
            decision: Decision::Default,
            basis,
            gain: 1.0,
        }
    }
}

/// A feature a tree split tests.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash)]
#[repr(u8)]
pub enum Feature {
    /// log2 of the message size in bytes.
    Log2Bytes = 0,
    /// Number of nodes.
    Nodes = 1,
    /// Number of ranks.
    Ranks = 2,
    /// Ranks per node.
    Ppn = 3,
    /// log2 of bytes per rank.
    Log2BytesPerRank = 4,
}

/// Number of tree features (the length of [`crate::TreeView::eval`]'s input).
pub const NUM_FEATURES: usize = 5;

impl Feature {
    /// All features, in numbering order (= index into the feature vector).
    pub const ALL: [Feature; NUM_FEATURES] = [
        Feature::Log2Bytes,
        Feature::Nodes,
        Feature::Ranks,
        Feature::Ppn,
        Feature::Log2BytesPerRank,
    ];

    /// From the file's byte; `None` if out of range.
    pub const fn from_u8(v: u8) -> Option<Feature> {
        match v {
            0 => Some(Feature::Log2Bytes),
            1 => Some(Feature::Nodes),
            2 => Some(Feature::Ranks),
            3 => Some(Feature::Ppn),
            4 => Some(Feature::Log2BytesPerRank),
            _ => None,
        }
    }

    /// Snake-case name (`log2_bytes`, `nodes`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            Feature::Log2Bytes => "log2_bytes",
            Feature::Nodes => "nodes",
            Feature::Ranks => "ranks",
            Feature::Ppn => "ppn",
            Feature::Log2BytesPerRank => "log2_bytes_per_rank",
        }
    }
}

/// One node of a flat decision tree (for `dyncc explain`).
#[derive(Clone, Copy, PartialEq, Debug)]
pub enum TreeNode {
    /// Go to `left` when the feature value `< threshold`, else to `right`.
    /// Children indices are greater than this node's index and less than the
    /// number of nodes, so every walk ends.
    Split {
        /// The feature tested.
        feature: Feature,
        /// Finite threshold.
        threshold: f32,
        /// Index of the `<` child.
        left: u32,
        /// Index of the `>=` (or NaN) child.
        right: u32,
    },
    /// A decision.
    Leaf {
        /// The decision.
        decision: Decision,
        /// How well it is backed.
        basis: Basis,
        /// Expected speedup, finite and > 0.
        gain: f32,
    },
}

/// Checks a rule list the way the reader does; `Err((index, what))`.
pub(crate) fn check_rules<I: Iterator<Item = (u8, u32, u8, f32)>>(
    rules: I,
) -> Result<(), (u32, &'static str)> {
    // (last_bucket, packed decision, basis byte, gain) per rule.
    let mut prev: Option<u8> = None;
    let mut last: Option<u8> = None;
    let mut i = 0u32;
    for (lb, packed, basis, gain) in rules {
        if let Some(p) = prev {
            if lb <= p {
                return Err((i, "last_bucket values are not strictly increasing"));
            }
        }
        if let Some(reason) = channels_problem(packed) {
            return Err((i, reason));
        }
        let Some(decision) = Decision::from_packed(packed) else {
            return Err((
                i,
                "decision is not a valid algorithm/protocol/channels encoding",
            ));
        };
        if Basis::from_u8(basis).is_none() {
            return Err((
                i,
                "basis is not 0 (measured), 1 (interpolated) or 2 (extrapolated)",
            ));
        }
        check_gain(gain).map_err(|w| (i, w))?;
        let _ = decision;
        prev = Some(lb);
        last = Some(lb);
        i += 1;
    }
    match last {
        None => Err((
            0,
            "context has no rules (it needs at least one, ending at bucket 255)",
        )),
        Some(255) => Ok(()),
        Some(_) => Err((i - 1, "last rule does not end at bucket 255")),
    }
}

/// `Decision::from_packed(v).is_some()` without branches, for the
/// reader's one-pass rule scan: Default's exact encoding, or algorithm
/// <= 6, protocol <= 2 and channels <= 64, tested in one addition: each
/// field plus (0x80 - its limit - 1) reaches its top bit exactly when it
/// is over the limit, unless the field had that bit set already, which the
/// OR catches. A carry out of a field only happens when that field is
/// already over, so it can add a false "over" to the next field but never
/// hide one. The chunk byte ([`Chunk`](crate::Chunk)) is tested apart:
/// NCCL's (0), or a code whose size is on the protocol's grain
/// (`chunk_on_grain`).
#[inline]
pub(crate) const fn packed_is_valid(v: u32) -> bool {
    const ADD: u32 = (0x80 - NUM_ALGOS as u32)
        | (0x80 - NUM_PROTOS as u32) << 8
        | (0x80 - 1 - MAX_CHANNELS as u32) << 16;
    const TOP: u32 = 0x80 | 0x80 << 8 | 0x80 << 16;
    let low = v & 0x00FF_FFFF;
    (v == PACKED_DEFAULT)
        | (((low.wrapping_add(ADD) | low) & TOP == 0)
            & crate::nccl::chunk_on_grain((v >> 8) as u8, (v >> 24) as u8))
}

/// `check_gain(f32::from_bits(bits)).is_ok()` as one comparison: the
/// finite floats above zero are exactly the bit patterns 1..=0x7F7F_FFFF
/// (sign clear, not zero, exponent not all ones).
#[inline]
pub(crate) const fn gain_bits_ok(bits: u32) -> bool {
    bits.wrapping_sub(1) < 0x7F7F_FFFF
}

/// The specific complaint about a packed decision's channel byte, if it is
/// above NCCL's `MAXCHANNELS` (decoding alone would only say "invalid").
pub(crate) fn channels_problem(packed: u32) -> Option<&'static str> {
    let channels = packed.to_le_bytes()[2];
    (channels > MAX_CHANNELS)
        .then_some("channel count is above 64, NCCL's MAXCHANNELS (NCCL has no more channels)")
}

pub(crate) fn check_gain(gain: f32) -> Result<(), &'static str> {
    if !gain.is_finite() {
        Err("gain is not finite")
    } else if gain <= 0.0 {
        Err("gain is not > 0")
    } else {
        Ok(())
    }
}

// A decision stays one 4-byte word (`Default` lives in the protocol's
// spare values, `Setting`'s first byte), so the plugin's hot path moves it
// in a register: a field more in `Setting` must keep it so.
const _: () = assert!(core::mem::size_of::<Decision>() == 4);

#[cfg(test)]
mod tests {
    use super::*;

    /// The branch-free grain check says what decoding says, for every
    /// protocol byte and chunk code.
    #[test]
    fn chunk_on_grain_is_the_decoded_size_on_the_grain() {
        for p in 0..=255u8 {
            for code in 0..=255u8 {
                let want = match (crate::Proto::from_u8(p), crate::Chunk::from_code(code)) {
                    _ if code == 0 => true,
                    (Some(proto), Some(c)) => c.bytes() % proto.chunk_grain() == 0,
                    _ => false,
                };
                assert_eq!(
                    crate::nccl::chunk_on_grain(p, code),
                    want,
                    "proto {p} code {code}"
                );
            }
        }
    }
    use crate::nccl::{Algo, Proto};

    #[test]
    fn packed_round_trip_and_rejects() {
        assert_eq!(Decision::Default.to_packed(), PACKED_DEFAULT);
        assert_eq!(
            Decision::from_packed(PACKED_DEFAULT),
            Some(Decision::Default)
        );
        for a in Algo::ALL {
            for p in Proto::ALL {
                for ch in [0u8, 1, 16, 64] {
                    let d = Decision::Force(Setting::new(a, p).with_channels(ch));
                    assert_eq!(Decision::from_packed(d.to_packed()), Some(d));
                }
            }
        }
        assert_eq!(Decision::from_packed(0x0000_FF07), None, "algo 7");
        assert_eq!(Decision::from_packed(0x0000_0300), None, "proto 3");
        assert_eq!(
            Decision::from_packed(0x0001_FFFF),
            None,
            "default with channels"
        );
        assert_eq!(
            Decision::from_packed(0x0000_00FF),
            None,
            "default with proto 0"
        );
        assert_eq!(
            Decision::from_packed(0x0100_FFFF),
            None,
            "default with a chunk"
        );
        assert_eq!(
            Decision::from_packed(0x0100_0200),
            None,
            "16 B chunk on simple"
        );
        assert!(
            Decision::from_packed(0x0100_0000).is_some(),
            "16 B chunk on LL"
        );
        assert_eq!(
            Decision::from_packed(0x0041_0101),
            None,
            "65 channels: NCCL has at most 64 (MAXCHANNELS)"
        );
        assert_eq!(
            Decision::from_packed(0x00FF_0101),
            None,
            "255 channels: NCCL has at most 64 (MAXCHANNELS)"
        );
    }

    #[test]
    fn context_matching_uses_per_node_ranks() {
        let c = ContextSpec {
            coll: Coll::AllReduce,
            nodes: (2, 2),
            ppn: (8, 8),
            max_pipe_ops: 0,
            reg_buff: RegBuff::Any,
        };
        assert!(c.matches(&Comm::new(16, 2)));
        assert!(!c.matches(&Comm::new(15, 2)));
        assert!(!c.matches(&Comm::new(16, 1)));
        let wide = ContextSpec {
            nodes: (0, u32::MAX),
            ppn: (0, u32::MAX),
            ..c
        };
        assert!(wide.matches(&Comm::new(
            u64::from(u32::MAX) * u64::from(u32::MAX),
            u64::from(u32::MAX)
        )));
        assert!(!wide.matches(&Comm::new(u64::MAX, u64::from(u32::MAX) + 1)));
    }

    #[test]
    fn pipe_ops_and_reg_buff_gates() {
        assert!(pipe_ops_allowed(0, i32::MAX));
        assert!(pipe_ops_allowed(1, 1));
        assert!(!pipe_ops_allowed(1, 2));
        assert!(RegBuff::Only0.allows(0) && !RegBuff::Only0.allows(1));
        assert!(RegBuff::Only1.allows(1) && !RegBuff::Only1.allows(0));
    }

    /// NCCL computes `regBuff` per rank: a gate on it split ranks of one
    /// collective wherever its rule forced a setting (one rank forced, the
    /// other got NCCL's choice). The agreed answer is the same for both.
    #[test]
    fn a_reg_buff_gate_agrees_only_on_what_every_value_gets() {
        let ll = Decision::Force(Setting::new(Algo::Tree, Proto::LL));
        for d in [ll, Decision::Default] {
            assert!(!RegBuff::Any.splits(d));
            assert_eq!(RegBuff::Any.agreed(d), d);
        }
        for gate in [RegBuff::Only0, RegBuff::Only1] {
            assert!(gate.splits(ll), "{gate:?}");
            assert_eq!(gate.agreed(ll), Decision::Default, "{gate:?}");
            assert!(!gate.splits(Decision::Default), "{gate:?}");
            assert_eq!(gate.agreed(Decision::Default), Decision::Default);
        }
    }
}
