//! Paths the tuner cannot choose: where jobs let NCCL choose and it ran a
//! symmetric kernel or a copy-engine method in most of its calls at a
//! (collective, shape, size bucket), a mark ([`TimeBase::OtherPath`]) that
//! keeps a classic pair from being forced there on anything less than a
//! measurement at that point (`emit::plan`).
//!
//! NCCL 2.31+ ranks symmetric kernels and copy-engine methods beside the
//! classic pairs after the tuner has set their costs
//! (`ncclTuningSelectBestTuning`, src/tuning/tuning.cc), and a forced
//! pair's zero cost ranks first: a force there displaces the path NCCL
//! would have run. A sweep run under `NCCL_ALGO`/`NCCL_PROTO` never ran
//! that path, and a job's symmetric-kernel calls are counted, never
//! recorded (no time), so no reading of the sweep's or of the jobs'
//! classic measurements says a force beats it.
//!
//! The counts: a trace's shapes hold the symmetric and copy-engine calls
//! the recording rank saw per (communicator, collective, size bucket);
//! NCCL's own classic calls are its records of NCCL's choice there (each
//! communicator read once, [`Readings`]). Forced calls are in neither: a
//! table that forces the cell hides the path, but its exploration's calls
//! that leave NCCL alone (`ExploreNccl`) show it again.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use dyncc_tables::{bucket_lower_bound, size_bucket, Coll};

use super::evidence::rule;
use super::files::TraceFile;
use super::shapes::{AtShape, Readings, Shape};
use crate::record::Cell;
use crate::record::{CellKey, Collective, Config, Source, State, TimeBase};

/// Where the counts are kept: collective, nodes, ranks, size bucket.
type Key = (Coll, u32, u32, u8);

/// One communicator: its file's index and its index in that file.
type CommAt = (usize, u16);

/// Per communicator, NCCL's own calls on another path and classic; with
/// one file that saw the former.
type Votes = (BTreeMap<CommAt, (u64, u64)>, Option<Arc<PathBuf>>);

/// NCCL's own calls per (collective, shape, size bucket) and communicator:
/// on a path the tuner cannot choose, and classic; with one file that saw
/// the former.
#[derive(Default)]
pub(super) struct OtherPaths {
    at: BTreeMap<Key, Votes>,
}

impl OtherPaths {
    /// Adds file `fi`'s per-shape counts of the communicators `readings`
    /// keeps (one recording per communicator).
    pub(super) fn add_file(&mut self, files: &[TraceFile], fi: usize, readings: &Readings) {
        let f = &files[fi];
        for s in &f.shapes {
            let ran = u64::from(s.symmetric) + u64::from(s.copy_engine);
            let Some(c) = f.comms.get(s.comm as usize) else {
                continue;
            };
            if ran == 0 || !readings.keeps(fi, s.comm as usize) {
                continue;
            }
            let (comms, file) = self
                .at
                .entry((s.coll, c.n_nodes, c.n_ranks, s.bucket))
                .or_default();
            let e = comms.entry((fi, s.comm)).or_default();
            e.0 = e.0.saturating_add(ran);
            file.get_or_insert_with(|| f.path.clone());
        }
    }

    /// Adds NCCL's own classic calls at communicator `ci` of file `fi`'s
    /// shape.
    pub(super) fn add_classic(&mut self, (fi, ci): CommAt, s: &Shape, at: &AtShape) {
        if at.nccl.count == 0 {
            return;
        }
        let (comms, _) = self
            .at
            .entry((s.coll, s.nodes, s.ranks, size_bucket(s.n_bytes)))
            .or_default();
        let e = comms.entry((fi, ci)).or_default();
        e.1 = e.1.saturating_add(at.nccl.count);
    }

    /// The marks: where more communicators saw NCCL's own calls mostly run
    /// another path than saw them mostly run a classic pair, each with at
    /// least the calls a side needs to count ([`rule::MIN_CALLS`]) on the
    /// side it votes for. A communicator weighs one, however many calls it
    /// claims, as everywhere in the evidence rule: one file with a million
    /// symmetric calls does not outvote a fleet that ran classic pairs.
    pub(super) fn marks(self) -> Vec<Cell> {
        self.at
            .into_iter()
            .filter_map(|((coll, nodes, ranks, bucket), (comms, file))| {
                let (mut ran, mut classic, mut other_comms, mut classic_comms) =
                    (0u64, 0u64, 0u32, 0u32);
                for &(r, c) in comms.values() {
                    ran = ran.saturating_add(r);
                    classic = classic.saturating_add(c);
                    if r > c && r >= rule::MIN_CALLS {
                        other_comms += 1;
                    } else if c >= r && c >= rule::MIN_CALLS {
                        classic_comms += 1;
                    }
                }
                (other_comms > classic_comms).then(|| Cell {
                    key: CellKey {
                        collective: Collective::from_coll(coll),
                        nbytes: bucket_lower_bound(bucket),
                        nranks: ranks,
                        nnodes: nodes,
                        state: State::BASELINE,
                        config: Config::DEFAULT,
                    },
                    time_us: 0.0,
                    n: 0,
                    spread: 0.0,
                    source: Source {
                        file: file.unwrap_or_default(),
                        line: 0,
                    },
                    base: TimeBase::OtherPath {
                        ran,
                        classic,
                        comms: other_comms,
                        classic_comms,
                    },
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingest::traces::notes::TraceCounts;
    use crate::ingest::traces::test_util::{file, rec, RING};
    use dyncc_tables::trace::Source as Who;
    use dyncc_tables::TraceShape;

    fn marks_of(files: &[TraceFile]) -> Vec<(u64, u64)> {
        let mut read = TraceCounts::default();
        let readings = Readings::new(files, &mut read);
        let mut p = OtherPaths::default();
        for fi in 0..files.len() {
            p.add_file(files, fi, &readings);
            for ((ci, s), at) in readings.classify(fi) {
                p.add_classic((fi, ci), &s, &at);
            }
        }
        p.marks()
            .into_iter()
            .map(|c| match c.base {
                TimeBase::OtherPath { ran, classic, .. } => (ran, classic),
                _ => unreachable!(),
            })
            .collect()
    }

    fn shape(bytes: u64, symmetric: u16, copy_engine: u16) -> TraceShape {
        TraceShape {
            symmetric,
            copy_engine,
            ..TraceShape::new(0, Coll::AllReduce, size_bucket(bytes), 1000)
        }
    }

    /// Symmetric and copy-engine calls count together against NCCL's own
    /// classic records at the same bucket; forced calls count for neither.
    #[test]
    fn a_mark_where_most_of_nccls_own_calls_ran_another_path() {
        let mut f = file(vec![
            rec(0, 4096, RING, Who::Nccl, 100, 10_000.0),
            rec(
                0,
                4096,
                (dyncc_tables::Algo::Tree, dyncc_tables::Proto::LL),
                Who::Table,
                900,
                9_000.0,
            ),
        ]);
        f.shapes = vec![shape(4096, 150, 10)];
        assert_eq!(marks_of(&[f.clone()]), vec![(160, 100)]);
        // More classic than other: no mark.
        f.shapes = vec![shape(4096, 60, 30)];
        assert_eq!(marks_of(&[f.clone()]), vec![]);
        // Too few calls to say anything.
        f.records.clear();
        f.shapes = vec![shape(4096, 1, 0)];
        assert_eq!(marks_of(&[f]), vec![]);
    }
}
