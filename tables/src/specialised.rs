//! The per-communicator dense lookup the plugin keeps: one decision per
//! (collective, size bucket), built once at `init` by
//! [`crate::Table::specialise`], answered on the hot path by
//! [`Specialised::decide`] with one bounds check and one array index.
//!
//! `regBuff` is resolved here, once: NCCL computes it per rank, so a
//! context gated on it keeps only the decisions it would give for every
//! value ([`RegBuff::agreed`]); the hot path never reads it.

use crate::bucket::{size_bucket, NUM_BUCKETS};
#[cfg(doc)]
use crate::model::RegBuff;
use crate::model::{pipe_ops_allowed, ContextSpec, Decision, Rule};
use crate::nccl::{Coll, NUM_COLLS};

/// Dense decisions for one communicator. Fixed size (about 4 KiB), no heap.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Specialised {
    dense: [[Decision; NUM_BUCKETS]; NUM_COLLS],
    max_pipe_ops: [u32; NUM_COLLS],
    context: [Option<u32>; NUM_COLLS],
}

impl Default for Specialised {
    fn default() -> Self {
        Specialised::empty()
    }
}

impl Specialised {
    /// Default for every call: what a communicator no context matches gets.
    pub const fn empty() -> Specialised {
        Specialised {
            dense: [[Decision::Default; NUM_BUCKETS]; NUM_COLLS],
            max_pipe_ops: [0; NUM_COLLS],
            context: [None; NUM_COLLS],
        }
    }

    /// Gives `coll` the decisions of `rules` (sorted runs ending at bucket
    /// 255, as validated) from `context`, each as every rank agrees on it
    /// whatever its `regBuff` ([`RegBuff::agreed`]). Writes the row in
    /// place: building a row on the stack and copying it in cost more than
    /// the fill.
    pub(crate) fn set(
        &mut self,
        coll: Coll,
        rules: impl Iterator<Item = Rule>,
        context: u32,
        spec: ContextSpec,
    ) {
        let c = coll as usize;
        if let (Some(row), Some(m), Some(x)) = (
            self.dense.get_mut(c),
            self.max_pipe_ops.get_mut(c),
            self.context.get_mut(c),
        ) {
            let mut first = 0usize;
            for rule in rules {
                let last = rule.last_bucket as usize;
                if let Some(cells) = row.get_mut(first..=last) {
                    cells.fill(spec.reg_buff.agreed(rule.decision));
                }
                first = last + 1;
            }
            *m = spec.max_pipe_ops;
            *x = Some(context);
        }
    }

    /// The decision for one `getCollInfo` call. Hot path: no allocation,
    /// no panic, no loop; equal to `Table::lookup(..).decision` for the
    /// communicator this was specialised for. Takes `getCollInfo`'s
    /// `regBuff` and ignores it: NCCL computes it per rank, and the answer
    /// never depends on it (resolved when specialised).
    #[inline]
    pub fn decide(
        &self,
        coll_type: u32,
        n_bytes: u64,
        num_pipe_ops: i32,
        _reg_buff: i32,
    ) -> Decision {
        // The bucket is computed only once the gate lets the call through
        // (measured: computing it first costs the plain path 3 instructions).
        match self.row(coll_type, num_pipe_ops) {
            // A u8 bucket indexes a 256-entry row: no bounds check is emitted.
            Some(row) => row[size_bucket(n_bytes) as usize],
            None => Decision::Default,
        }
    }

    /// [`Specialised::decide`] for a size already bucketed (the plugin's
    /// exploring path needs the bucket too, and computes it once).
    /// `regBuff` is ignored, as there.
    #[inline]
    pub fn decide_bucket(
        &self,
        coll_type: u32,
        bucket: u8,
        num_pipe_ops: i32,
        _reg_buff: i32,
    ) -> Decision {
        match self.row(coll_type, num_pipe_ops) {
            Some(row) => row[bucket as usize],
            None => Decision::Default,
        }
    }

    /// The chunk size to answer NCCL's `getChunkSize` (tuner v6+) with, in
    /// bytes: the table's chunk where its decision for this call's cell
    /// (`nBytes` as NCCL passes it here, one collective: numPipeOps 1)
    /// forces the same algorithm and protocol NCCL is chunking with and a
    /// chunk; else `None` (leave NCCL's). A function of the table, the
    /// communicator and the call's arguments only, so every rank answers
    /// alike. Hot path: no allocation, no panic.
    #[inline]
    pub fn chunk(&self, coll_type: u32, n_bytes: u64, algo: i32, proto: i32) -> Option<u32> {
        self.decide(coll_type, n_bytes, 1, 0).chunk_for(algo, proto)
    }

    /// The decisions of `coll_type` by size bucket, when its context's
    /// `numPipeOps` gate lets the call through (the same on every rank).
    #[inline(always)]
    fn row(&self, coll_type: u32, num_pipe_ops: i32) -> Option<&[Decision; NUM_BUCKETS]> {
        let c = coll_type as usize;
        let (Some(row), Some(&max_pipe_ops)) = (self.dense.get(c), self.max_pipe_ops.get(c)) else {
            return None;
        };
        pipe_ops_allowed(max_pipe_ops, num_pipe_ops).then_some(row)
    }

    /// Index of the context chosen for `coll`, if one matched.
    pub fn context(&self, coll: Coll) -> Option<u32> {
        self.context.get(coll as usize).copied().flatten()
    }

    /// True when no collective has a context (every call gets Default).
    pub fn is_empty(&self) -> bool {
        self.context.iter().all(Option::is_none)
    }
}

#[cfg(all(test, feature = "build"))]
mod tests {
    use crate::*;

    /// `getChunkSize`'s answer: the table's chunk only where its cell
    /// forces that algorithm and protocol with a chunk.
    #[test]
    fn chunk_answers_only_a_forced_chunk_of_the_same_algorithm_and_protocol() {
        let k512 = Chunk::from_bytes(512 << 10).unwrap();
        let ring = Setting::new(Algo::Ring, Proto::Simple)
            .with_chunk(k512)
            .unwrap();
        let tree = Setting::new(Algo::Tree, Proto::LL);
        let rule = |last, s| Rule {
            last_bucket: last,
            decision: Decision::Force(s),
            basis: Basis::Measured,
            gain: 1.2,
        };
        let mut b = TableBuilder::new();
        b.context(
            ContextSpec {
                coll: Coll::AllReduce,
                nodes: (1, 1),
                ppn: (8, 8),
                max_pipe_ops: 0,
                reg_buff: RegBuff::Any,
            },
            &[rule(size_bucket(65535), tree), rule(255, ring)],
        )
        .unwrap();
        let bytes = b.build().unwrap();
        let t = Table::from_bytes(&bytes).unwrap();
        let s = t.specialise(&Comm::new(8, 1));
        let (ar, ring_a, simple) = (
            Coll::AllReduce as u32,
            Algo::Ring as i32,
            Proto::Simple as i32,
        );
        assert_eq!(s.chunk(ar, 1 << 20, ring_a, simple), Some(512 << 10));
        assert_eq!(
            s.chunk(ar, 1 << 20, Algo::Tree as i32, simple),
            None,
            "another algorithm"
        );
        assert_eq!(
            s.chunk(ar, 1 << 20, ring_a, Proto::LL as i32),
            None,
            "another protocol"
        );
        assert_eq!(
            s.chunk(ar, 4096, Algo::Tree as i32, Proto::LL as i32),
            None,
            "no chunk"
        );
        assert_eq!(
            s.chunk(Coll::AllGather as u32, 1 << 20, ring_a, simple),
            None
        );
        assert_eq!(s.chunk(99, 1 << 20, ring_a, simple), None);
        assert!(t
            .specialise(&Comm::new(16, 2))
            .chunk(ar, 1 << 20, ring_a, simple)
            .is_none());
    }

    /// A table compiled with `--setup regBuff=1` gates its contexts to
    /// `regBuff != 0`; NCCL computes `regBuff` per rank, so a rank that
    /// registered its buffers forced Tree/LL where one that did not got
    /// NCCL's choice: a hang. Now every rank gets the same answer whatever
    /// its `regBuff`: NCCL's where the gated context forced, the common
    /// answer where it did not, and ungated contexts are untouched.
    #[test]
    fn reg_buff_gated_contexts_answer_every_reg_buff_alike() {
        let ll = Decision::Force(Setting::new(Algo::Tree, Proto::LL));
        let rules = [
            Rule {
                last_bucket: size_bucket(65536),
                decision: ll,
                basis: Basis::Measured,
                gain: 1.3,
            },
            Rule {
                last_bucket: 255,
                decision: Decision::Default,
                basis: Basis::Measured,
                gain: 1.0,
            },
        ];
        let spec = |coll, reg_buff| ContextSpec {
            coll,
            nodes: (1, 1),
            ppn: (8, 8),
            max_pipe_ops: 2,
            reg_buff,
        };
        let mut b = TableBuilder::new();
        b.context(spec(Coll::AllReduce, RegBuff::Only1), &rules)
            .unwrap();
        b.context(spec(Coll::AllGather, RegBuff::Only0), &rules)
            .unwrap();
        b.context(spec(Coll::Broadcast, RegBuff::Any), &rules)
            .unwrap();
        let bytes = b.build().unwrap();
        let t = Table::from_bytes(&bytes).unwrap();
        let s = t.specialise(&Comm::new(8, 1));
        for reg in [0, 1, -1, 7] {
            for coll in [Coll::AllReduce, Coll::AllGather] {
                let c = coll as u32;
                // Forced for one regBuff only: left to NCCL for every one.
                assert_eq!(s.decide(c, 4096, 1, reg), Decision::Default);
                assert_eq!(
                    s.decide_bucket(c, size_bucket(4096), 1, reg),
                    Decision::Default
                );
                let l = t.lookup(c, &Comm::new(8, 1), 4096, 1, reg);
                assert_eq!(
                    (l.decision, l.rule, l.basis, l.reg_buff_split),
                    (Decision::Default, None, None, true),
                    "{coll:?} regBuff {reg}"
                );
                // Default for every regBuff already: the rule applies.
                let l = t.lookup(c, &Comm::new(8, 1), 1 << 20, 1, reg);
                assert_eq!(
                    (l.decision, l.rule, l.basis, l.reg_buff_split),
                    (Decision::Default, Some(1), Some(Basis::Measured), false)
                );
                // The numPipeOps gate is the same on every rank: it stays.
                let l = t.lookup(c, &Comm::new(8, 1), 4096, 3, reg);
                assert_eq!((l.decision, l.reg_buff_split), (Decision::Default, false));
            }
            let c = Coll::Broadcast as u32;
            assert_eq!(s.decide(c, 4096, 1, reg), ll);
            assert_eq!(s.decide(c, 4096, 3, reg), Decision::Default);
            let l = t.lookup(c, &Comm::new(8, 1), 4096, 1, reg);
            assert_eq!((l.decision, l.rule, l.reg_buff_split), (ll, Some(0), false));
        }
    }
}
