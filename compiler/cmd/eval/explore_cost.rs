//! What exploration cost the jobs, read from their traces alone (issue 27
//! item 4: the cost is reported by `eval --traces`, not only measured in
//! the loop tests).
//!
//! At each shape (nodes, ranks, collective, size) where some collectives
//! ran an exploring setting (records chosen by `explore`), their extra GPU
//! time is set against what the jobs' table ran there when not exploring
//! (records chosen by the table or left to NCCL, pooled over every
//! communicator at that shape: exploration is drawn per communicator, so
//! the one that explored a shape rarely ran the answer there too). The
//! share is that extra over the GPU time of every traced collective.
//! Means are geometric (a trace keeps the sums of ln(time)); where the
//! plugin stopped recording a shape (trace major 3), its records stand
//! for the calls its tuner answered there, scaled up.

use std::collections::BTreeMap;

use dyncc_tables::{size_bucket, Source};
use serde::Serialize;

use crate::ingest::traces::TraceFile;

/// The jobs' exploration cost.
#[derive(Serialize, Default, Debug, PartialEq)]
pub struct ExploreCost {
    /// Collectives that ran an exploring setting.
    pub explored_calls: u64,
    /// Of them, at shapes where no communicator ran the table's answer
    /// (nothing to price them against; not in `extra_us`).
    pub unpriced_calls: u64,
    /// Their extra GPU time over the answer at the same shape, us
    /// (negative where exploring ran faster).
    pub extra_us: f64,
    /// GPU time of every traced collective, us.
    pub total_us: f64,
    /// The mean over communicators of each one's extra over its own traced
    /// GPU time (each communicator weighs alike); 0 without traced time.
    pub share: f64,
}

/// Per shape: per communicator that ran the answer there, (count, sum of
/// ln ns); and the explored records' (communicator, count, geometric mean
/// ns).
#[derive(Default)]
struct AtShape {
    answer: BTreeMap<(usize, u16), (f64, f64)>,
    explored: Vec<((usize, u16), u64, f64)>,
}

/// Key of a shape across files.
type ShapeKey = (u32, u32, u8, u64);

/// The jobs' exploration cost in `files` (see the module docs). Each
/// communicator weighs alike, whatever the calls it claims: the answer's
/// time at a shape is the mean over the communicators that ran it, and the
/// share is the mean over communicators of each one's extra over its own
/// traced time (a file claiming a billion calls is one communicator).
pub fn explore_cost(files: &[TraceFile]) -> ExploreCost {
    let mut shapes: BTreeMap<ShapeKey, AtShape> = BTreeMap::new();
    let mut cost = ExploreCost::default();
    // Per communicator: its traced GPU time (us), and its extra.
    let mut per_comm: BTreeMap<(usize, u16), (f64, f64)> = BTreeMap::new();
    for (fi, f) in files.iter().enumerate() {
        // Calls answered per (communicator, collective, bucket), and the
        // collectives recorded there: the scale of an unrecorded tail.
        let mut recorded: BTreeMap<(u16, u8, u8), u64> = BTreeMap::new();
        for r in &f.records {
            let e = recorded
                .entry((r.comm, r.coll as u8, size_bucket(r.n_bytes)))
                .or_default();
            *e = e.saturating_add(r.count);
        }
        let answered: BTreeMap<(u16, u8, u8), u64> = f
            .shapes
            .iter()
            .map(|s| ((s.comm, s.coll as u8, s.bucket), s.calls))
            .collect();
        let scale = |comm: u16, coll: u8, bucket: u8| -> f64 {
            let key = (comm, coll, bucket);
            let rec = recorded.get(&key).copied().unwrap_or(0);
            match answered.get(&key) {
                Some(&calls) if rec > 0 && calls > rec => calls as f64 / rec as f64,
                _ => 1.0,
            }
        };
        for r in &f.records {
            let Some(c) = f.comms.get(r.comm as usize) else {
                continue;
            };
            if r.count == 0 {
                continue;
            }
            let geo = r.sum_ln / r.count as f64;
            let s = scale(r.comm, r.coll as u8, size_bucket(r.n_bytes));
            let t = s * r.count as f64 * geo.exp() / 1e3;
            if !t.is_finite() {
                continue;
            }
            cost.total_us += t;
            per_comm.entry((fi, r.comm)).or_default().0 += t;
            let at = shapes
                .entry((c.n_nodes, c.n_ranks, r.coll as u8, r.n_bytes))
                .or_default();
            match r.source {
                Source::Explore | Source::ExploreNccl => {
                    at.explored.push(((fi, r.comm), r.count, geo.exp()))
                }
                Source::Table | Source::Nccl => {
                    let e = at.answer.entry((fi, r.comm)).or_default();
                    e.0 += r.count as f64;
                    e.1 += r.sum_ln;
                }
                _ => {}
            }
        }
    }
    for at in shapes.values() {
        let n = at.explored.iter().fold(0u64, |n, e| n.saturating_add(e.1));
        cost.explored_calls = cost.explored_calls.saturating_add(n);
        let means: Vec<f64> = at
            .answer
            .values()
            .filter(|(n, _)| *n > 0.0)
            .map(|(n, sum)| sum / n)
            .filter(|m| m.is_finite())
            .collect();
        if means.is_empty() {
            cost.unpriced_calls = cost.unpriced_calls.saturating_add(n);
            continue;
        }
        let answer_ns = (means.iter().sum::<f64>() / means.len() as f64).exp();
        for &(comm, count, ns) in &at.explored {
            let extra = count as f64 * (ns - answer_ns) / 1e3;
            if extra.is_finite() {
                cost.extra_us += extra;
                per_comm.entry(comm).or_default().1 += extra;
            }
        }
    }
    let shares: Vec<f64> = per_comm
        .values()
        .filter(|(t, _)| *t > 0.0)
        .map(|(t, x)| x / t)
        .filter(|s| s.is_finite())
        .collect();
    if !shares.is_empty() {
        cost.share = shares.iter().sum::<f64>() / shares.len() as f64;
    }
    cost
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::sync::Arc;

    use dyncc_tables::{Algo, Coll, Proto, Setting, TraceRecord, TraceShape};

    use super::*;
    use crate::ingest::traces::Comm;

    fn rec(comm: u16, source: Source, count: u64, ns: f64) -> TraceRecord {
        TraceRecord {
            comm,
            coll: Coll::AllReduce,
            n_bytes: 1 << 20,
            setting: Setting::new(Algo::Ring, Proto::Simple).with_channels(8),
            source,
            count,
            sum_ln: count as f64 * ns.ln(),
            sum_ln2: count as f64 * ns.ln() * ns.ln(),
            min_ns: ns as u64,
            max_ns: ns as u64,
        }
    }

    fn file(records: Vec<TraceRecord>, shapes: Vec<TraceShape>) -> TraceFile {
        let comm = |id| Comm {
            comm_id: id,
            n_nodes: 2,
            n_ranks: 16,
            rank: 0,
        };
        TraceFile {
            path: Arc::new(PathBuf::from("a.trace")),
            nccl_version: 23007,
            table_digest: None,
            platform: String::new(),
            gpu: String::new(),
            sweep: None,
            comms: vec![comm(1), comm(2)],
            records,
            shapes,
        }
    }

    /// One communicator ran the answer 90 times at 100 us, another
    /// explored 10 calls at 150 us: 500 us extra over 9,000 + 1,500 us.
    #[test]
    fn explored_calls_cost_their_excess_over_the_answer_at_the_same_shape() {
        let f = file(
            vec![
                rec(0, Source::Table, 90, 100_000.0),
                rec(1, Source::Explore, 10, 150_000.0),
            ],
            Vec::new(),
        );
        let c = explore_cost(&[f]);
        assert_eq!((c.explored_calls, c.unpriced_calls), (10, 0));
        assert!((c.extra_us - 500.0).abs() < 1e-6, "{c:?}");
        assert!((c.total_us - 10_500.0).abs() < 1e-6, "{c:?}");
        // Each communicator weighs alike: 0 and 500 / 1,500.
        assert!((c.share - (500.0 / 1_500.0) / 2.0).abs() < 1e-12, "{c:?}");
    }

    /// One file claiming a billion calls is one communicator: it moves the
    /// fleet's share no more than any other.
    #[test]
    fn a_file_claiming_a_billion_calls_is_one_communicator_in_the_cost() {
        let honest = |comm_id| {
            let mut f = file(
                vec![
                    rec(0, Source::Table, 490, 100_000.0),
                    rec(1, Source::Explore, 10, 101_000.0),
                ],
                Vec::new(),
            );
            f.comms[0].comm_id = comm_id;
            f.comms[1].comm_id = comm_id + 1;
            f
        };
        let fleet: Vec<TraceFile> = (0..10).map(|i| honest(10 * i)).collect();
        let base = explore_cost(&fleet).share;
        let mut crafted = file(
            vec![
                rec(0, Source::Table, 1, 100_000.0),
                rec(1, Source::Explore, 1_000_000_000, 140_000.0),
            ],
            Vec::new(),
        );
        crafted.comms[0].comm_id = 999;
        crafted.comms[1].comm_id = 1000;
        let mut all = fleet.clone();
        all.push(crafted);
        let with = explore_cost(&all).share;
        // 20 honest communicators and 2 crafted: the crafted one's share
        // (about 40 %) counts once among 22.
        assert!(with - base < 0.4 / 22.0 + 1e-9, "{base} -> {with}");
    }

    /// Where the plugin stopped recording (5 of 1,000 calls answered),
    /// the records stand for every call: the share is of the job's time,
    /// not of what was recorded; explored calls with no answer anywhere
    /// are counted apart.
    #[test]
    fn an_unrecorded_tail_counts_in_the_total_and_unpriced_calls_are_apart() {
        let shape = TraceShape::new(0, Coll::AllReduce, size_bucket(1 << 20), 1000);
        let f = file(
            vec![
                rec(0, Source::Nccl, 5, 100_000.0),
                rec(1, Source::Explore, 10, 110_000.0),
            ],
            vec![shape],
        );
        let c = explore_cost(&[f]);
        assert!((c.total_us - (100_000.0 + 1_100.0)).abs() < 1e-6, "{c:?}");
        assert!((c.extra_us - 100.0).abs() < 1e-6, "{c:?}");
        let lone = file(vec![rec(1, Source::Explore, 10, 110_000.0)], Vec::new());
        let c = explore_cost(&[lone]);
        assert_eq!((c.explored_calls, c.unpriced_calls), (10, 10));
        assert_eq!(c.extra_us, 0.0);
    }
}
