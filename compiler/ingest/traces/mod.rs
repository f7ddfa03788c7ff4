//! Trace files (`DYNCC_TRACE`, format in `tables/FORMAT.md`) read as
//! measurements: what jobs ran, who chose it and its GPU time, per
//! communicator shape, collective and size.
//!
//! A trace's kernel time and a sweep's nccl-tests time differ (launch and
//! host overheads), so a trace is never set against a sweep: a setting's
//! gain is read within one trace file (one process of one job), against
//! NCCL's own choice at the same shape in the same file, and pooled over
//! files. Every rank of a collective sees the same collective, so a
//! communicator recorded by several ranks counts once. Points (node count,
//! ranks, collective, size bucket) where jobs measured a gain become
//! [`Cell`]s on the trace [`TimeBase`], which the grids let decide the
//! point alone ([`crate::features`]). Measurements from an older NCCL than
//! the newest that measured the same point are set aside (drift).
//!
//! The submodules, in the order the data goes through them:
//!
//! - `files`: finding trace files among the paths given, reading and
//!   checking them, and their provenance against the sweep;
//! - `shapes`: who ran what, per communicator and shape: NCCL's own choice
//!   or another setting, each communicator read once;
//! - `evidence`: the rule a comparison meets before it decides ([`rule`],
//!   [`evidence()`], [`judge`]), shared with `eval --traces`;
//! - `points`: where a shape lands, the table's point, and what the sweep
//!   measured there;
//! - `cells`: traced points judged and turned into cells;
//! - `paths`: where NCCL's own calls mostly ran a path the tuner cannot
//!   choose (a symmetric kernel, the copy engines), as marks;
//! - `notes`: what the report says of them.
//!
//! [`Cell`]: crate::record::Cell
//! [`TimeBase`]: crate::record::TimeBase

mod cells;
mod evidence;
mod files;
mod notes;
mod paths;
mod points;
mod shapes;

// Every item keeps one path, `ingest::traces::X`, whichever submodule
// holds it: the crate and the library's users (the benchmarks) name it so.
pub use cells::cells;
pub use evidence::Side;
pub use evidence::{counts, evidence, judge, rule, var_call, Bar, Evidence, Verdict};
pub use files::{
    check_provenance, check_records, find, holds_nothing, is_trace, read, split, Comm, Found,
    Provenance, TraceFile,
};
pub use notes::{Deployed, Finding, TraceCounts, TraceNotes, TracedGain, TracedPoint};
pub use points::{PointKey, SweepView};
pub use shapes::{
    add_facts, classify, classify_comms, AtShape, Facts, Other, Overridden, Readings, Shape,
    ShapeFacts,
};

/// Records and files the submodules' tests build their traces from.
#[cfg(test)]
mod test_util {
    use std::sync::Arc;

    use dyncc_tables::trace::Source as Who;
    use dyncc_tables::{Algo, Coll, Proto, Setting, TraceRecord};

    use super::files::{Comm, TraceFile};

    pub(super) fn rec(
        comm: u16,
        bytes: u64,
        ran: (Algo, Proto),
        source: Who,
        count: u64,
        ns: f64,
    ) -> TraceRecord {
        let ln = ns.ln();
        TraceRecord {
            comm,
            coll: Coll::AllReduce,
            n_bytes: bytes,
            setting: Setting::new(ran.0, ran.1).with_channels(4),
            source,
            count,
            sum_ln: count as f64 * ln,
            sum_ln2: count as f64 * ln * ln + (count as f64 - 1.0) * 0.02f64.powi(2),
            min_ns: ns as u64,
            max_ns: ns as u64,
        }
    }

    pub(super) fn file(records: Vec<TraceRecord>) -> TraceFile {
        TraceFile {
            path: Arc::new("a.trace".into()),
            nccl_version: 23007,
            table_digest: None,
            platform: String::new(),
            gpu: String::new(),
            sweep: None,
            shapes: Vec::new(),
            comms: vec![Comm {
                comm_id: 1,
                n_nodes: 4,
                n_ranks: 32,
                rank: 0,
            }],
            records,
        }
    }

    pub(super) const RING: (Algo, Proto) = (Algo::Ring, Proto::Simple);
    pub(super) const TREE: (Algo, Proto) = (Algo::Tree, Proto::LL);
}
