//! The dyncc table format: NCCL's enum numbering, the on-disk layout, a
//! validating reader that never allocates or panics, and (feature `build`)
//! the builder the compiler writes tables with.
//!
//! The byte layout is specified in `tables/FORMAT.md`. In short: a 40-byte
//! little-endian header (magic `DYNCCTBL`, format major/minor, lengths, NCCL
//! enum layout, CRC-32 of the body), a section directory, and the sections
//! CONTEXTS, RULES, TREES and META, all alignment 1 so a table can be read
//! in place from any byte buffer.
//!
//! ```
//! # #[cfg(feature = "build")] {
//! use dyncc_tables::*;
//! let ll = Decision::Force(Setting::new(Algo::Tree, Proto::LL));
//! let spec = ContextSpec { coll: Coll::AllReduce, nodes: (2, 2), ppn: (8, 8),
//!                          max_pipe_ops: 0, reg_buff: RegBuff::Any };
//! let rules = [
//!     Rule { last_bucket: size_bucket(65536), decision: ll, basis: Basis::Measured, gain: 1.3 },
//!     Rule { last_bucket: 255, decision: Decision::Default, basis: Basis::Measured, gain: 1.0 },
//! ];
//! let bytes = TableBuilder::new().context(spec, &rules).unwrap().build().unwrap();
//! let table = Table::from_bytes(&bytes).unwrap();
//! let comm = table.specialise(&Comm::new(16, 2));
//! assert_eq!(comm.decide(Coll::AllReduce as u32, 4096, 1, 0), ll);
//! assert_eq!(comm.decide(Coll::AllReduce as u32, 1 << 30, 1, 0), Decision::Default);
//! # }
//! ```
//!
//! API notes for users of `tables-spec.md` (small additions, nothing
//! renamed): `Error::BadMeta`, `BadTree` and `BadRule` carry indices and a
//! `what`; `Error::MissingSection` and `Error::BadHeader` exist;
//! `Lookup::rule` is the index within the context; `RegBuff::Only1` means
//! `regBuff != 0`, but no answer depends on `regBuff` (NCCL computes it per
//! rank): a gated context's rules that would answer regBuff 0 and 1
//! differently give Default (`RegBuff::agreed`, `Lookup::reg_buff_split`);
//! `numPipeOps` is allowed when `max_pipe_ops == 0` or
//! `numPipeOps <= max_pipe_ops` (signed compare); `rules_from_buckets`
//! takes the minimum gain of a merged run. `Specialised` stores `Decision`s
//! (not packed u32) so `decide` does no decoding. `Table::digest` (XXH3-64
//! of the whole image, see FORMAT.md) is computed when called rather than
//! inside `from_bytes`; callers log it once at init.
//!
//! Features: `build` (the writer; needs `alloc`), `alloc`, and `std`, which
//! lets crc32fast pick its SIMD CRC at run time (about 10x faster
//! validation of large tables); the reader is `no_std` and allocation-free
//! under every feature set.
#![no_std]
#![forbid(unsafe_code)]
#![deny(missing_docs)]
// Redundant with forbid(unsafe_code) today; kept so adding unsafe later
// still needs its `// SAFETY:` comment.
#![deny(clippy::undocumented_unsafe_blocks)]

#[cfg(feature = "alloc")]
extern crate alloc;
#[cfg(test)]
extern crate std;

mod bucket;
#[cfg(feature = "build")]
mod build;
mod error;
mod model;
pub mod nccl;
mod plan;
mod raw;
mod specialised;
mod table;
pub mod trace;
#[cfg(all(test, feature = "build"))]
mod validation_tests;

pub use bucket::{
    bucket_is_empty, bucket_lower_bound, bucket_upper_bound, size_bucket, NUM_BUCKETS,
};
#[cfg(feature = "build")]
pub use build::{rules_from_buckets, BuildError, TableBuilder};
pub use error::Error;
pub use model::{
    pipe_ops_allowed, tree_features, Basis, BucketDecision, ContextSpec, Decision, Feature,
    RegBuff, Rule, TreeLeaf, TreeNode, NUM_FEATURES, PACKED_DEFAULT,
};
pub use nccl::{
    datatype_size, Algo, Chunk, Coll, Comm, Machine, ProfilerAbi, Proto, Refusal, Setting,
    TunerAbi, MAX_CHANNELS, NUM_ALGOS, NUM_COLLS, NUM_PROTOS, PROFILER_ABIS, TUNER_ABIS,
};
pub use plan::{
    plan_pick, plan_pick_share, PlanCandidate, MAX_EXPLORE_CHANCE, MAX_PLAN_CANDIDATES,
};
pub use raw::{
    kind as section_kind, FORMAT_MAJOR, FORMAT_MINOR, MAGIC, MAX_TABLE_LEN, NCCL_ENUM, NCCL_LAYOUT,
};
pub use specialised::Specialised;
pub use table::{
    digest, ContextView, Coverage, Lookup, PlanCell, SplitStep, Table, TreeView, META_EXPLORE,
    META_SWEEP,
};
pub use trace::{
    Source, Trace, TraceComm, TraceError, TraceHead, TraceOtherPaths, TraceRecord, TraceShape,
    TraceTag, TraceVariant, MAX_TRACE_LEN, TRACE_MAGIC, TRACE_MAJOR, TRACE_MAJOR_OLDEST,
    TRACE_MINOR,
};
