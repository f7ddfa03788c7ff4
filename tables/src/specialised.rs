//! The per-communicator dense lookup the plugin keeps: one decision per
//! (collective, size bucket), built once at `init` by
//! [`crate::Table::specialise`], answered on the hot path by
//! [`Specialised::decide`] with one bounds check and one array index.

use crate::bucket::{size_bucket, NUM_BUCKETS};
use crate::model::{pipe_ops_allowed, ContextSpec, Decision, RegBuff, Rule};
use crate::nccl::{Coll, NUM_COLLS};

/// Dense decisions for one communicator. Fixed size (about 4 KiB), no heap.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Specialised {
    dense: [[Decision; NUM_BUCKETS]; NUM_COLLS],
    max_pipe_ops: [u32; NUM_COLLS],
    reg_buff: [RegBuff; NUM_COLLS],
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
            reg_buff: [RegBuff::Any; NUM_COLLS],
            context: [None; NUM_COLLS],
        }
    }

    /// Gives `coll` the decisions of `rules` (sorted runs ending at bucket
    /// 255, as validated) from `context`. Writes the row in place: building
    /// a row on the stack and copying it in cost more than the fill.
    pub(crate) fn set(
        &mut self,
        coll: Coll,
        rules: impl Iterator<Item = Rule>,
        context: u32,
        spec: ContextSpec,
    ) {
        let c = coll as usize;
        if let (Some(row), Some(m), Some(r), Some(x)) = (
            self.dense.get_mut(c),
            self.max_pipe_ops.get_mut(c),
            self.reg_buff.get_mut(c),
            self.context.get_mut(c),
        ) {
            let mut first = 0usize;
            for rule in rules {
                let last = rule.last_bucket as usize;
                if let Some(cells) = row.get_mut(first..=last) {
                    cells.fill(rule.decision);
                }
                first = last + 1;
            }
            *m = spec.max_pipe_ops;
            *r = spec.reg_buff;
            *x = Some(context);
        }
    }

    /// The decision for one `getCollInfo` call. Hot path: no allocation,
    /// no panic, no loop; equal to `Table::lookup(..).decision` for the
    /// communicator this was specialised for.
    #[inline]
    pub fn decide(
        &self,
        coll_type: u32,
        n_bytes: u64,
        num_pipe_ops: i32,
        reg_buff: i32,
    ) -> Decision {
        // The bucket is computed only once the gates let the call through
        // (measured: computing it first costs the plain path 3 instructions).
        match self.row(coll_type, num_pipe_ops, reg_buff) {
            // A u8 bucket indexes a 256-entry row: no bounds check is emitted.
            Some(row) => row[size_bucket(n_bytes) as usize],
            None => Decision::Default,
        }
    }

    /// [`Specialised::decide`] for a size already bucketed (the plugin's
    /// exploring path needs the bucket too, and computes it once).
    #[inline]
    pub fn decide_bucket(
        &self,
        coll_type: u32,
        bucket: u8,
        num_pipe_ops: i32,
        reg_buff: i32,
    ) -> Decision {
        match self.row(coll_type, num_pipe_ops, reg_buff) {
            Some(row) => row[bucket as usize],
            None => Decision::Default,
        }
    }

    /// The decisions of `coll_type` by size bucket, when its context's
    /// gates let a call with this state through.
    #[inline(always)]
    fn row(
        &self,
        coll_type: u32,
        num_pipe_ops: i32,
        reg_buff: i32,
    ) -> Option<&[Decision; NUM_BUCKETS]> {
        let c = coll_type as usize;
        let (Some(row), Some(&max_pipe_ops), Some(&rb)) = (
            self.dense.get(c),
            self.max_pipe_ops.get(c),
            self.reg_buff.get(c),
        ) else {
            return None;
        };
        (pipe_ops_allowed(max_pipe_ops, num_pipe_ops) && rb.allows(reg_buff)).then_some(row)
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
