//! Trace recording (`DYNCC_TRACE=DIR`): fixed, preallocated, lock-free
//! state the profiler's event callbacks update, and the writer that turns
//! it into one trace file per process (format: `dyncc_tables::trace`).
//!
//! Four jobs, one module each, all statics (zero pages until touched, no
//! allocation on any event):
//! - [`journal`]: per tuner context, what `getCollInfo` answered, so the
//!   profiler can say who chose what ran ([`take_answer`]);
//! - [`pool`]: the collectives in flight, from their `Coll` start to
//!   their last kernel-channel stop ([`slot_take`], [`release`]);
//! - [`bins`]: the per-shape aggregates the pool's last reference adds
//!   to ([`aggregate`]);
//! - [`writer`]: the process's facts (communicators, table, host) and
//!   the file ([`register`], [`retire`], [`flush`]);
//! - [`mask`]: when NCCL's event mask is lowered (every shape seen has
//!   its evidence) and raised again (a new or explored shape);
//! - [`paths`]: the collectives that ran a path the tuner cannot choose
//!   (a symmetric kernel, the copy engines), and the callers' tags.
//!
//! The order of dependence is mask, journal (counts shapes for the mask),
//! bins, pool (adds to bins), writer (reads bins and rings, reclaims the
//! pool); nothing here reaches up to the entry
//! points but `crate::guard` and [`crate::log`].
//!
//! A `Coll` event with `nChannels` 0 (NCCL's CollNet and multi-node NVLS)
//! takes no slot and is counted as untimed: its channels arrive after the
//! `Coll` stop in a number nothing announces, so no stop can be known to
//! be the last one.

use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::log::Logger;

pub mod bins;
pub mod journal;
pub mod mask;
pub mod paths;
pub mod pool;
pub mod writer;

pub use bins::{aggregate, untimed, Key, BINS};
pub use journal::{
    journal_acquire, link_rank0, note_other_path, note_recorded, profiled_ring, take_answer,
    take_answer_in, Answer, Journal, ANSWER_NCCL, JOURNAL_LEN, MAX_JOURNALS,
};
pub use paths::{
    note_tag, note_variant, other_path_ran, other_paths, tags_of, variants, variants_dropped,
    OtherPath,
};
pub use pool::{channel_start, channel_stop, reclaim, release, slot_take, Handle, Slot, POOL_LEN};
pub use writer::{
    configured, dir_usable, file_names, flush, note_platform, note_table, register, retire,
    CommFacts, Recording, Refused,
};

/// Gives back [`journal_acquire`]'s ring (the tuner's finalize only),
/// keeping rank 0's calls per shape for the trace files.
pub fn journal_release(j: &'static Journal) {
    journal::journal_release_with(j, writer::keep_shape_calls);
}

/// Communicators one process records (6 bits of the bin key).
pub const MAX_COMMS: usize = 64;

/// Counters for the header.
static DROPPED_TABLE_FULL: AtomicU64 = AtomicU64::new(0);
static DROPPED_POOL_FULL: AtomicU64 = AtomicU64::new(0);
static UNTIMED: AtomicU64 = AtomicU64::new(0);
/// Everything that changed what a file would say (for "write only when
/// something is new").
static CHANGES: AtomicU64 = AtomicU64::new(0);

/// One WARN per process for "tracing asked for, NCCL too old".
static WARNED_OLD: AtomicBool = AtomicBool::new(false);
/// A v1-v3 profiler init saw DYNCC_TRACE without a logger to say so:
/// the next logger (the tuner's or a v4+ profiler's init) says it.
static OLD_PENDING: AtomicBool = AtomicBool::new(false);

/// A v1-v3 profiler init (no GPU timestamps, no logger) saw
/// `DYNCC_TRACE`: the next init with a logger says so ([`say_pending`]).
pub fn old_profiler_pending() {
    if !WARNED_OLD.load(Ordering::Relaxed) {
        OLD_PENDING.store(true, Ordering::Relaxed);
    }
}

/// Says a pending "too old" WARN of a v1-v3 profiler init, which had no
/// logger: every init with a logger calls this.
pub fn say_pending(log: Logger) {
    if OLD_PENDING.swap(false, Ordering::Relaxed) && !WARNED_OLD.swap(true, Ordering::Relaxed) {
        log.warn(format_args!(
            "dyncc: DYNCC_TRACE is set but this NCCL loads profiler interface v3, which has \
             no GPU timestamps (v4, NCCL 2.27, is the oldest with them); no trace is recorded \
             and the job goes on"
        ));
    }
}

#[cfg(test)]
mod tests;
