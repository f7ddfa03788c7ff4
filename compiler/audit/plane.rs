//! What the plugin does over a whole region of one table: the (nodes,
//! ranks per node) plane of a collective is cut into patches at every
//! context edge, and each patch is resolved the way the plugin resolves a
//! call (first matching context, then the rule of the size bucket).

use std::collections::BTreeSet;

use dyncc_tables::{
    bucket_is_empty, bucket_lower_bound, bucket_upper_bound, Coll, Comm, ContextSpec, Decision,
    Lookup, Table, NUM_BUCKETS,
};

/// The buckets a size can fall in (0..=3 and 8..=255).
pub fn live_buckets() -> impl Iterator<Item = u8> {
    (0..=255u8).filter(|b| !bucket_is_empty(*b))
}

/// A numPipeOps / regBuff pair the plugin can be asked with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Probe {
    pub pipe_ops: i32,
    pub reg_buff: i32,
}

impl Probe {
    /// What NCCL passes for a plain collective: one op, unregistered buffer.
    pub const PLAIN: Probe = Probe {
        pipe_ops: 1,
        reg_buff: 0,
    };
}

/// The probes under which `tables` can answer differently: the plain call,
/// plus a registered buffer and a large pipeline when some context gates
/// on them.
pub fn probes(tables: &[&Table]) -> Vec<Probe> {
    let mut v = vec![Probe::PLAIN];
    let specs: Vec<ContextSpec> = tables
        .iter()
        .flat_map(|t| t.contexts().map(|c| c.spec()))
        .collect();
    if specs
        .iter()
        .any(|s| s.reg_buff != dyncc_tables::RegBuff::Any)
    {
        v.push(Probe {
            pipe_ops: 1,
            reg_buff: 1,
        });
    }
    if let Some(m) = specs
        .iter()
        .map(|s| s.max_pipe_ops)
        .max()
        .filter(|m| *m > 0)
    {
        v.push(Probe {
            pipe_ops: i32::try_from(m).unwrap_or(i32::MAX - 1).saturating_add(1),
            reg_buff: 0,
        });
    }
    v
}

/// A rectangle of the (nodes, ranks per node) plane of one collective in
/// which every given table resolves to the same context.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Patch {
    pub coll: Coll,
    pub nodes: (u32, u32),
    pub ppn: (u32, u32),
}

/// Splits `[1, u32::MAX]` at every context edge of `coll` in `tables`.
fn spans(
    tables: &[&Table],
    coll: Coll,
    axis: impl Fn(&ContextSpec) -> (u32, u32),
) -> Vec<(u32, u32)> {
    let mut cuts: BTreeSet<u64> = BTreeSet::new();
    cuts.insert(1);
    cuts.insert(u32::MAX as u64 + 1);
    for t in tables {
        for c in t.contexts().filter(|c| c.spec().coll == coll) {
            let (lo, hi) = axis(&c.spec());
            if lo <= hi {
                cuts.insert((lo as u64).max(1));
                cuts.insert(hi as u64 + 1);
            }
        }
    }
    let cuts: Vec<u64> = cuts
        .into_iter()
        .filter(|c| (1..=u32::MAX as u64 + 1).contains(c))
        .collect();
    cuts.windows(2)
        .map(|w| (w[0] as u32, (w[1] - 1) as u32))
        .collect()
}

/// Every patch of `coll` that some table has a context in, in (ppn, nodes)
/// order. Patches no table covers are left out: every table says "NCCL's
/// choice" there.
pub fn patches(tables: &[&Table], coll: Coll) -> Vec<Patch> {
    let nodes = spans(tables, coll, |s| s.nodes);
    let ppns = spans(tables, coll, |s| s.ppn);
    let mut out = Vec::new();
    for &ppn in &ppns {
        for &n in &nodes {
            let covered = tables.iter().any(|t| {
                t.find_context(coll, &Comm::new(n.0 as u64 * ppn.0 as u64, n.0 as u64))
                    .is_some()
            });
            if covered {
                out.push(Patch {
                    coll,
                    nodes: n,
                    ppn,
                });
            }
        }
    }
    out
}

/// What one table answers in one patch, per size bucket.
pub fn plane(table: &Table, p: &Patch, probe: Probe) -> Box<[Lookup; NUM_BUCKETS]> {
    let (n, ppn) = (p.nodes.0 as u64, p.ppn.0 as u64);
    let mut row = Box::new(
        [Lookup {
            decision: Decision::Default,
            basis: None,
            gain: 1.0,
            context: None,
            rule: None,
            reg_buff_split: false,
        }; NUM_BUCKETS],
    );
    for b in 0..=255u8 {
        // Empty buckets (4..=7) take the answer of bucket 8, the next live one.
        let size = if bucket_is_empty(b) {
            4
        } else {
            bucket_lower_bound(b)
        };
        row[b as usize] = table.lookup(
            p.coll as u32,
            &Comm::new(n * ppn, n),
            size,
            probe.pipe_ops,
            probe.reg_buff,
        );
    }
    row
}

/// A run of live buckets `[first, last]` over which `same` holds between
/// neighbours, as inclusive byte bounds.
pub fn runs<T>(row: &[T; NUM_BUCKETS], same: impl Fn(&T, &T) -> bool) -> Vec<(u8, u8)> {
    let live: Vec<u8> = live_buckets().collect();
    let mut out = Vec::new();
    let mut start = 0usize;
    for i in 1..=live.len() {
        if i == live.len() || !same(&row[live[i - 1] as usize], &row[live[i] as usize]) {
            out.push((live[start], live[i - 1]));
            start = i;
        }
    }
    out
}

/// Inclusive byte bounds of a bucket run.
pub fn run_bytes(r: (u8, u8)) -> (u64, u64) {
    (bucket_lower_bound(r.0), bucket_upper_bound(r.1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::testutil;

    #[test]
    fn patches_split_at_every_context_edge() {
        let bytes = testutil::sample();
        let t = Table::from_bytes(&bytes).unwrap();
        let p = patches(&[&t], Coll::AllReduce);
        let nodes: Vec<(u32, u32)> = p.iter().map(|p| p.nodes).collect();
        assert_eq!(nodes, vec![(2, 2), (3, 3), (4, 4)]);
        assert!(p.iter().all(|p| p.ppn == (8, 8)));
        assert!(patches(&[&t], Coll::AllGather).is_empty());
    }

    #[test]
    fn runs_cover_every_live_bucket_once() {
        let bytes = testutil::sample();
        let t = Table::from_bytes(&bytes).unwrap();
        let p = patches(&[&t], Coll::AllReduce)[0];
        let row = plane(&t, &p, Probe::PLAIN);
        let r = runs(&row, |a, b| a.decision == b.decision);
        assert_eq!(r.len(), 2);
        assert_eq!(run_bytes(r[0]), (0, 65536 + 16383));
        assert_eq!(run_bytes(r[1]).1, u64::MAX);
    }
}
