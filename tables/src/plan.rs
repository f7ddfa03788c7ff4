//! The exploration plan (section kind 5, format 1.1): per cell the
//! compiler could not decide from a measurement at its node count (a
//! context, a first node count, a run of size buckets), a short ranked
//! list of settings a job may try there, each with its predicted gain, the
//! spread of that prediction and a floored predicted cost bound. The
//! runtime draws from it; `dyncc explain`/`query` print it. A table
//! without the section (any 1.0 table) has no plan: the runtime then
//! explores as it did before the plan existed (see runtime/README.md).
//!
//! A cell serves the node counts from its `nodes` up to the next node
//! count its context's plan lists (or the context's last), and the size
//! buckets `bucket..=last_bucket`: a context decided over a range of node
//! counts has one plan for the range, and a run of buckets with one list
//! is one record per candidate, so the plan stays about the size of the
//! rules it explores.
//!
//! Validation follows the rest of the format: every record is checked in
//! [`parse_plan`], called from `Table::from_bytes`, so readers never meet a
//! record that names a missing context, a bucket run that is empty or
//! overlaps another, a setting NCCL does not have or a cost that is not a
//! finite positive number.

use zerocopy::FromBytes;

use crate::error::Error;
use crate::model::Decision;
use crate::raw::{kind, ContextRecord, PlanRecord};

/// Most candidates one cell may list.
pub const MAX_PLAN_CANDIDATES: u8 = 4;

/// One candidate, as the builder takes it and [`crate::Table::plan`] yields it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PlanCandidate {
    /// Index of the context (in CONTEXTS) the cell belongs to.
    pub context: u32,
    /// First node count the cell serves, inside the context's node range;
    /// it serves counts up to the next one its context's plan lists.
    pub nodes: u32,
    /// First size bucket (`size_bucket`) the cell serves.
    pub bucket: u8,
    /// Last size bucket it serves (inclusive): a run of buckets with one
    /// list is one record per candidate.
    pub last_bucket: u8,
    /// Rank within the cell, 0 = try first; ranks of a cell are 0, 1, ...
    pub rank: u8,
    /// The setting to try (`Decision::Default` = NCCL's own choice).
    pub decision: Decision,
    /// Predicted gain over the table's answer (fraction of its time).
    pub gain: f32,
    /// Spread (uncertainty) of that prediction, >= 0.
    pub spread: f32,
    /// Predicted extra time vs the table's answer when trying it, as a
    /// fraction of the call's time; floored by the compiler, so > 0.
    pub cost_bound: f32,
}

impl PlanCandidate {
    pub(crate) fn from_record(r: &PlanRecord) -> Option<PlanCandidate> {
        Some(PlanCandidate {
            context: r.context.get(),
            nodes: r.nodes.get(),
            bucket: r.bucket,
            last_bucket: r.last_bucket,
            rank: r.rank,
            decision: Decision::from_packed(r.decision.get())?,
            gain: r.gain.get(),
            spread: r.spread.get(),
            cost_bound: r.cost_bound.get(),
        })
    }
}

/// The rank a communicator picks in a cell of `n` candidates, from `x`
/// (any value, uniform; the plugin uses bits 32..64 of the cell's hash):
/// rank `r` has weight `n - r` of `n(n+1)/2`, so the first ranked is tried
/// most and every candidate by some communicators. The plugin's draw and
/// `dyncc query`'s chances both read it here.
pub const fn plan_pick(n: u64, x: u64) -> usize {
    let total = n * (n + 1) / 2;
    if total == 0 {
        return 0;
    }
    let mut x = x % total;
    let mut r = 0;
    while r < n {
        let w = n - r;
        if x < w {
            return r as usize;
        }
        x -= w;
        r += 1;
    }
    0
}

/// The largest share of communicators that try a candidate at one cell
/// (the chance is `min(MAX_EXPLORE_CHANCE, F / cost bound)`): the others
/// run the table's answer there, so every explored cell keeps a baseline
/// its gain is read against, however large F. The plugin's draw and
/// `dyncc query`'s chances both read it here.
pub const MAX_EXPLORE_CHANCE: f64 = 0.5;

/// The share of communicators [`plan_pick`] gives rank `rank` of `n`.
pub fn plan_pick_share(rank: usize, n: usize) -> f64 {
    if rank >= n {
        return 0.0;
    }
    (n - rank) as f64 / (n * (n + 1) / 2) as f64
}

/// Views and validates a PLAN section against the table's contexts.
///
/// Records are strictly ordered by (context, nodes, bucket, rank), ranks of
/// a cell run 0, 1, ... below [`MAX_PLAN_CANDIDATES`], and a cell never
/// lists one setting twice.
pub(crate) fn parse_plan<'a>(
    sec: &'a [u8],
    contexts: &[ContextRecord],
) -> Result<&'a [PlanRecord], Error> {
    let recs = <[PlanRecord]>::ref_from_bytes(sec).map_err(|_| Error::BadSection {
        kind: kind::PLAN,
        what: "length is not a multiple of the 28-byte plan record",
    })?;
    let mut prev: Option<&PlanRecord> = None;
    for (i, r) in recs.iter().enumerate() {
        let index = i as u32;
        let bad = |what| Error::BadPlan { index, what };
        let Some(c) = contexts.get(r.context.get() as usize) else {
            return Err(bad("context index is past the CONTEXTS section"));
        };
        let nodes = r.nodes.get();
        if nodes < c.nodes_min.get() || nodes > c.nodes_max.get() || nodes == 0 {
            return Err(bad("node count is outside its context's node range"));
        }
        if r.reserved != 0 {
            return Err(bad("reserved byte is not zero"));
        }
        if r.last_bucket < r.bucket {
            return Err(bad("last bucket is below the first"));
        }
        if r.rank >= MAX_PLAN_CANDIDATES {
            return Err(bad("rank is 4 or more (at most 4 candidates a cell)"));
        }
        if Decision::from_packed(r.decision.get()).is_none() {
            return Err(bad("decision is not a packed setting NCCL has"));
        }
        let (g, s, cost) = (r.gain.get(), r.spread.get(), r.cost_bound.get());
        if !g.is_finite() || !s.is_finite() || s < 0.0 {
            return Err(bad("gain is not finite or spread is not finite and >= 0"));
        }
        if !cost.is_finite() || cost <= 0.0 {
            return Err(bad("cost bound is not a finite number > 0"));
        }
        let cell = |r: &PlanRecord| (r.context.get(), r.nodes.get(), r.bucket);
        match prev {
            Some(p) if cell(p) == cell(r) => {
                if r.rank != p.rank + 1 {
                    return Err(bad("ranks of a cell do not run 0, 1, 2, ..."));
                }
                if r.last_bucket != p.last_bucket {
                    return Err(bad("ranks of a cell name different last buckets"));
                }
                let start = i - r.rank as usize;
                if recs[start..i].iter().any(|q| q.decision == r.decision) {
                    return Err(bad("a cell lists one setting twice"));
                }
            }
            Some(p) if cell(p) > cell(r) => {
                return Err(bad("records are not ordered by (context, nodes, bucket)"));
            }
            _ => {
                if r.rank != 0 {
                    return Err(bad("ranks of a cell do not run 0, 1, 2, ..."));
                }
                let same_nodes = |p: &PlanRecord| (p.context, p.nodes) == (r.context, r.nodes);
                if prev.is_some_and(|p| same_nodes(p) && p.last_bucket >= r.bucket) {
                    return Err(bad("bucket runs of one node count overlap"));
                }
            }
        }
        prev = Some(r);
    }
    Ok(recs)
}

/// The records of the node count serving `nodes` in `context` (its last
/// listed node count at or below `nodes`): every cell of it, ordered by
/// bucket run then rank. One binary search for each end, no allocation.
pub(crate) fn group(recs: &[PlanRecord], context: u32, nodes: u32) -> &[PlanRecord] {
    let key = |r: &PlanRecord| (r.context.get(), r.nodes.get());
    let upto = recs.partition_point(|r| key(r) <= (context, nodes));
    let Some(last) = upto.checked_sub(1).map(|i| &recs[i]) else {
        return &[];
    };
    if last.context.get() != context {
        return &[];
    }
    let from = key(last);
    let start = recs[..upto].partition_point(|r| key(r) < from);
    &recs[start..upto]
}

/// The first node count above `nodes` that `context`'s plan lists: where
/// the cells listed at or below `nodes` stop serving.
pub(crate) fn next_nodes(recs: &[PlanRecord], context: u32, nodes: u32) -> Option<u32> {
    let i = recs.partition_point(|r| (r.context.get(), r.nodes.get()) <= (context, nodes));
    recs.get(i)
        .filter(|r| r.context.get() == context)
        .map(|r| r.nodes.get())
}

/// The candidates of the cell serving (context, node count, bucket),
/// ranked, from a validated plan: the serving node count's records
/// ([`group`]), then the run holding `bucket`.
pub(crate) fn cell(recs: &[PlanRecord], context: u32, nodes: u32, bucket: u8) -> &[PlanRecord] {
    let g = group(recs, context, nodes);
    // Runs of one node count do not overlap and are ordered, so their last
    // buckets are too: the first record whose run ends at or past `bucket`.
    let start = g.partition_point(|r| r.last_bucket < bucket);
    match g.get(start) {
        Some(first) if first.bucket <= bucket => run_at(&g[start..]),
        _ => &[],
    }
}

/// The leading cell of `g` (records of one node count, from a cell's rank
/// 0): its ranks, those sharing the first record's bucket run.
fn run_at(g: &[PlanRecord]) -> &[PlanRecord] {
    let n = g.iter().take_while(|r| r.bucket == g[0].bucket).count();
    &g[..n]
}

/// Every cell of the node count serving `nodes` in `context`, in bucket
/// order, as (its records): for readers that fill a whole row at once.
pub(crate) fn cells(
    recs: &[PlanRecord],
    context: u32,
    nodes: u32,
) -> impl Iterator<Item = &[PlanRecord]> {
    let mut rest = group(recs, context, nodes);
    core::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let c = run_at(rest);
        rest = &rest[c.len()..];
        Some(c)
    })
}

#[cfg(all(test, feature = "build"))]
mod tests {
    use super::*;
    use crate::nccl::{Algo, Coll, Proto, Setting};
    use crate::{Basis, BuildError, ContextSpec, RegBuff, Rule, Table, TableBuilder};
    use alloc::vec::Vec;

    fn ring_ll() -> Decision {
        Decision::Force(Setting::new(Algo::Ring, Proto::LL))
    }

    fn cand(nodes: u32, bucket: u8, rank: u8, decision: Decision, cost: f32) -> PlanCandidate {
        PlanCandidate {
            context: 0,
            nodes,
            bucket,
            last_bucket: bucket,
            rank,
            decision,
            gain: 0.1,
            spread: 0.05,
            cost_bound: cost,
        }
    }

    fn table_with(plan: &[PlanCandidate]) -> Result<Vec<u8>, BuildError> {
        let mut b = TableBuilder::new();
        b.context(
            ContextSpec {
                coll: Coll::AllReduce,
                nodes: (2, 16),
                ppn: (1, 8),
                max_pipe_ops: 0,
                reg_buff: RegBuff::Any,
            },
            &[Rule {
                last_bucket: 255,
                decision: ring_ll(),
                basis: Basis::Interpolated,
                gain: 0.2,
            }],
        )
        .unwrap();
        b.plan(plan);
        b.build()
    }

    fn good() -> Vec<u8> {
        // Given out of order: the builder sorts.
        table_with(&[
            cand(4, 20, 1, ring_ll(), 0.3),
            cand(4, 20, 0, Decision::Default, 0.05),
            cand(16, 3, 0, Decision::Default, 0.02),
        ])
        .unwrap()
    }

    /// Offset of the PLAN section's first record.
    fn plan_offset(b: &[u8]) -> usize {
        let n = u32::from_le_bytes(b[28..32].try_into().unwrap()) as usize;
        (0..n)
            .map(|i| 40 + 12 * i)
            .find(|&e| u32::from_le_bytes(b[e..e + 4].try_into().unwrap()) == kind::PLAN)
            .map(|e| u32::from_le_bytes(b[e + 4..e + 8].try_into().unwrap()) as usize)
            .unwrap()
    }

    fn reseal(b: &mut [u8]) {
        let crc = crc32fast::hash(&b[40..]);
        b[32..36].copy_from_slice(&crc.to_le_bytes());
    }

    #[test]
    fn plan_round_trips_and_marks_the_table_1_1() {
        let bytes = good();
        let t = Table::from_bytes(&bytes).unwrap();
        assert_eq!(t.version(), (1, 1));
        assert!(t.has_plan());
        assert_eq!(t.plan_len(), 3);
        let c = t.plan_cell(0, 4, 20);
        assert_eq!(c.len(), 2);
        assert_eq!(c.get(0).unwrap().decision, Decision::Default);
        assert_eq!(c.get(1).unwrap().decision, ring_ll());
        assert_eq!(c.packed(1), Some((ring_ll().to_packed(), 0.3)));
        assert!(t.plan_cell(0, 4, 21).is_empty());
        // 4's cell serves 5..=15 too (16 is the next count listed), not 3.
        assert_eq!(t.plan_cell(0, 8, 20).len(), 2);
        assert!(t.plan_cell(0, 3, 20).is_empty());
        assert_eq!(t.plan_cell(0, 16, 3).len(), 1);
        assert!(t.plan_cell(0, 16, 20).is_empty());
    }

    /// The plugin's pick gives rank r of n exactly weight n - r over a
    /// whole cycle of draws, the shares `dyncc query` prints.
    #[test]
    fn the_pick_follows_the_rank_weights() {
        for n in 1..=4u64 {
            let total = n * (n + 1) / 2;
            let mut seen = [0u64; 4];
            for x in 0..total * 3 {
                seen[plan_pick(n, x)] += 1;
            }
            for (r, &got) in seen.iter().enumerate().take(n as usize) {
                assert_eq!(got, 3 * (n - r as u64), "n {n} rank {r}");
                let share = plan_pick_share(r, n as usize);
                assert!((share - (n - r as u64) as f64 / total as f64).abs() < 1e-12);
            }
        }
        assert_eq!(plan_pick(0, 7), 0);
        assert_eq!(plan_pick_share(4, 4), 0.0);
    }

    /// A cell serves its run of buckets and the node counts up to the next
    /// one its context lists; lookups between runs find nothing.
    #[test]
    fn a_cell_serves_its_bucket_run_and_node_counts_up_to_the_next() {
        let run = |nodes, b0, b1, rank, d| PlanCandidate {
            last_bucket: b1,
            ..cand(nodes, b0, rank, d, 0.1)
        };
        let bytes = table_with(&[
            run(2, 10, 14, 0, Decision::Default),
            run(2, 10, 14, 1, ring_ll()),
            run(2, 20, 20, 0, ring_ll()),
            run(6, 0, 255, 0, Decision::Default),
        ])
        .unwrap();
        let t = Table::from_bytes(&bytes).unwrap();
        let len = |n, b| t.plan_cell(0, n, b).len();
        assert_eq!(
            (len(2, 9), len(2, 10), len(2, 14), len(2, 15)),
            (0, 2, 2, 0)
        );
        assert_eq!((len(5, 12), len(5, 20), len(5, 21)), (2, 1, 0));
        assert_eq!((len(6, 12), len(16, 0), len(16, 255)), (1, 1, 1));
        assert_eq!(len(1, 12), 0);
        assert_eq!(t.plan_cell(0, 3, 11).get(1).unwrap().last_bucket, 14);
        // A whole row at once: the runs of the node count serving 5.
        let runs: Vec<(u8, u8, usize)> = t
            .plan_cells(0, 5)
            .map(|c| {
                let c0 = c.get(0).unwrap();
                (c0.bucket, c0.last_bucket, c.len())
            })
            .collect();
        assert_eq!(runs, [(10, 14, 2), (20, 20, 1)]);
        assert_eq!(t.plan_cells(0, 1).count(), 0);
        assert_eq!(
            [1, 2, 5, 6, 16].map(|n| t.plan_next_nodes(0, n)),
            [Some(2), Some(6), Some(6), None, None]
        );
        // Overlapping runs of one node count are refused.
        let overlap = table_with(&[run(2, 10, 14, 0, ring_ll()), run(2, 14, 16, 0, ring_ll())]);
        assert!(matches!(overlap, Err(BuildError::Plan(_))), "{overlap:?}");
        let mixed = table_with(&[
            run(2, 10, 14, 0, ring_ll()),
            run(2, 10, 12, 1, Decision::Default),
        ]);
        assert!(matches!(mixed, Err(BuildError::Plan(_))), "{mixed:?}");
    }

    #[test]
    fn a_table_without_plan_is_written_as_1_0() {
        let bytes = table_with(&[]).unwrap();
        let t = Table::from_bytes(&bytes).unwrap();
        assert_eq!(t.version(), (1, 0));
        assert!(!t.has_plan());
        assert!(t.plan_cell(0, 4, 20).is_empty());
    }

    #[test]
    fn builder_refuses_a_plan_the_reader_would_refuse() {
        let out_of_range = table_with(&[cand(32, 0, 0, Decision::Default, 0.1)]);
        assert!(matches!(
            out_of_range,
            Err(BuildError::Plan(Error::BadPlan { .. }))
        ));
        let gap = table_with(&[cand(4, 0, 1, Decision::Default, 0.1)]);
        assert!(matches!(gap, Err(BuildError::Plan(_))));
        let twice = table_with(&[cand(4, 0, 0, ring_ll(), 0.1), cand(4, 0, 1, ring_ll(), 0.1)]);
        assert!(matches!(twice, Err(BuildError::Plan(_))));
        let free = table_with(&[cand(4, 0, 0, ring_ll(), 0.0)]);
        assert!(matches!(free, Err(BuildError::Plan(_))));
    }

    /// Each corruption of a valid plan record is refused with a message
    /// that names the plan record and what is wrong.
    #[test]
    fn corrupt_plan_section_is_refused_with_a_clear_error() {
        let good = good();
        let off = plan_offset(&good);
        type Corrupt = fn(&mut [u8]);
        let cases: [(Corrupt, &str); 9] = [
            (
                |r| r[0..4].copy_from_slice(&7u32.to_le_bytes()),
                "context index",
            ),
            (
                |r| r[4..8].copy_from_slice(&99u32.to_le_bytes()),
                "node range",
            ),
            (|r| r[9] = 4, "rank is 4"),
            (|r| r[10] = 1, "last bucket"),
            (|r| r[11] = 1, "reserved"),
            (
                |r| r[12..16].copy_from_slice(&0x0102_0309u32.to_le_bytes()),
                "decision",
            ),
            (
                |r| r[20..24].copy_from_slice(&(-1.0f32).to_le_bytes()),
                "spread",
            ),
            (
                |r| r[24..28].copy_from_slice(&f32::NAN.to_le_bytes()),
                "cost bound",
            ),
            (
                |r| {
                    r[8] = 200;
                    r[10] = 200;
                },
                "ordered",
            ),
        ];
        for (corrupt, needle) in cases {
            let mut b = good.clone();
            corrupt(&mut b[off..off + 28]);
            reseal(&mut b);
            let e = Table::from_bytes(&b).unwrap_err();
            // Record 0 moved past record 1 is caught at record 1.
            let at = if needle == "ordered" { 1 } else { 0 };
            assert!(
                matches!(e, Error::BadPlan { index, .. } if index == at),
                "{needle}: {e:?}"
            );
            let msg = alloc::format!("{e}");
            let head = alloc::format!("exploration plan record {at}");
            assert!(msg.contains(&head) && msg.contains(needle), "{msg}");
        }
        // A section whose length is not a whole number of records.
        let mut b = good.clone();
        let e = (0..5)
            .map(|i| 40 + 12 * i)
            .find(|&e| b[e] == kind::PLAN as u8)
            .unwrap();
        b[e + 8..e + 12].copy_from_slice(&27u32.to_le_bytes());
        reseal(&mut b);
        let err = Table::from_bytes(&b).unwrap_err();
        assert!(alloc::format!("{err}").contains("PLAN"), "{err}");
    }
}
