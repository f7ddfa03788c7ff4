//! Trace recording (`DYNCC_TRACE=DIR`): fixed, preallocated, lock-free
//! state the profiler's event callbacks update, and the writer that turns
//! it into one trace file per process (format: `dyncc_tables::trace`).
//!
//! Three process-wide tables, all statics (zero pages until touched, no
//! allocation ever):
//! - [`Journal`]s, one per tuner context (communicator rank): the tuner
//!   writes what it answered for each `getCollInfo` (per collective, a
//!   ring of the last [`JOURNAL_LEN`] answers keyed by `nBytes`; one
//!   writer, so a plain head store), and the profiler takes answers from it
//!   to say who chose what ran. This is how the two halves are linked: NCCL
//!   passes the same `commId` to tuner v5/v6 `init` and profiler v5/v6
//!   `init`, the tuner's `nBytes` for a collective equals what the profiler
//!   computes from the `Coll` event (type size x count, x nRanks for
//!   AllGather/ReduceScatter), and rank 0's profiler finds rank 0's ring
//!   through [`link_rank0`] (both `init`s run on the rank's thread). An
//!   answer is taken once; a collective NCCL aggregated with others (one
//!   tuner call, `numPipeOps` > 1), one whose pending answers disagree, or
//!   one seen through tuner v2-v4 (no `commId`) is recorded as `unknown`,
//!   never guessed ([`take_answer`]).
//! - the in-flight pool ([`POOL_LEN`] slots): a `Coll` event takes a slot
//!   holding what ran and `1 + nChannels` pending references; the `Coll`
//!   stop and each kernel-channel stop give one back, and the last one
//!   (whichever thread and order) aggregates the GPU time (first channel
//!   start to last channel stop) and frees the slot. Handles are a slot
//!   index and generation ([`Handle`]), checked on every use, so a late event of a
//!   closed or evicted collective is ignored; a full pool evicts its oldest
//!   collective (counted as dropped). A `Coll` event with `nChannels` 0
//!   (NCCL's CollNet and multi-node NVLS) takes no slot and is counted as
//!   untimed: its channels arrive after the `Coll` stop in a number nothing
//!   announces, so no stop can be known to be the last one.
//! - the bins ([`BINS`]): open addressing on one packed `u64` key,
//!   claimed by CAS; count, sums of `ln(ns)` and its square (f64 bits,
//!   CAS), min and max. Full: the collective is counted as dropped. A
//!   finalized communicator's bins are moved out ([`retire`]) and left as
//!   tombstones that later keys take.
//!
//! A process-wide `Mutex` guards only the facts written at init and read
//! by the writer (directory, host, job, communicators, the records of
//! finalized communicators): never taken on an event.

use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::ffi::OsString;
use std::io::Write as _;
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use dyncc_tables::trace::{
    encode, Source, TraceComm, TraceHead, TraceRecord, MAX_TRACE_LEN, MAX_TRACE_STR,
    TRACE_COMM_LEN, TRACE_HEADER_LEN, TRACE_RECORD_LEN,
};
use dyncc_tables::{Algo, Coll, Decision, Proto};

use crate::log::{Escaped, Logger};

/// Answers kept per communicator and collective.
pub const JOURNAL_LEN: usize = 16;
/// Tuner contexts (communicator ranks) with a journal at once.
pub const MAX_JOURNALS: usize = 256;
/// Communicators one process records (6 bits of the bin key).
pub const MAX_COMMS: usize = 64;
/// Collectives in flight (Coll started, last kernel channel not stopped).
pub const POOL_LEN: usize = 4096;
/// Distinct (communicator, collective, size, setting, source) per process:
/// 8192 records of 56 bytes stay well under the format's 1 MiB.
pub const BINS: usize = 8192;
/// Sizes above 2^40 bytes do not fit the key and are dropped.
const MAX_KEY_BYTES: u64 = (1 << 40) - 1;
/// Linear probes before a bin insert gives up.
const PROBES: usize = 64;

// ---------------------------------------------------------------------
// Journal: the tuner's answers.

/// One tuner context's recent answers. Written only by its own context
/// (NCCL calls one communicator's `getCollInfo` from one thread at a
/// time), read by the profiler of the same communicator id.
pub struct Journal {
    /// Per collective: answers written so far (the writer's alone).
    heads: [AtomicUsize; 5],
    answers: [[AtomicU64; JOURNAL_LEN]; 5],
}

#[allow(clippy::declare_interior_mutable_const)]
const JOURNAL_EMPTY: Journal = Journal {
    heads: [const { AtomicUsize::new(0) }; 5],
    answers: [const { [const { AtomicU64::new(0) }; JOURNAL_LEN] }; 5],
};
static JOURNALS: [Journal; MAX_JOURNALS] = [JOURNAL_EMPTY; MAX_JOURNALS];
/// Per journal: 0 when free, else its communicator id + 1 (so id 0 is
/// usable). Apart from the rings, so the profiler's search of its
/// communicator's rings reads a few cache lines.
static JOURNAL_TAGS: [AtomicU64; MAX_JOURNALS] = [const { AtomicU64::new(0) }; MAX_JOURNALS];
/// Per journal: its tuner context is rank 0's (see [`link_rank0`]).
static JOURNAL_RANK0: [AtomicBool; MAX_JOURNALS] = [const { AtomicBool::new(false) }; MAX_JOURNALS];

/// What this thread's communicator init has done so far: NCCL runs one
/// rank's profiler `init` and tuner `init` on one thread, in one call
/// (`initTransportsRank`: the profiler's first), and the profiler is told
/// the rank but the tuner is not; whichever comes second links them.
#[derive(Clone, Copy)]
enum InitLink {
    None,
    /// A rank-0 profiler init of this communicator id waits for its tuner.
    Rank0Profiler(u64),
    /// A tuner init of this communicator id took this ring.
    Tuner(u64, usize),
}

std::thread_local! {
    static INIT_LINK: core::cell::Cell<InitLink> = const { core::cell::Cell::new(InitLink::None) };
}

/// An answer packed in a u64: bit 63 valid, 61-62 source, 58-60 algo,
/// 56-57 proto, 49-55 channels, 0-48 nBytes (larger sizes never match).
/// An `Explore` answer that ran NCCL's own choice has algo [`ANSWER_NCCL`];
/// an aggregated call's answer has source `Unknown`. 0: no answer (never
/// written, or taken by the profiler).
const ANSWER_VALID: u64 = 1 << 63;
const ANSWER_BYTES: u64 = (1 << 49) - 1;
/// The algo field of an exploring call that left the choice to NCCL (no
/// algorithm has this number).
pub const ANSWER_NCCL: u8 = 7;

/// What the tuner answered for one call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Answer {
    /// Who chose: `Table` when a forced cell was written, `Nccl` when the
    /// table left the call to NCCL, `Explore` when exploration chose,
    /// `Unknown` when the call was an aggregate of several collectives.
    pub source: Source,
    /// The forced algorithm (meaningful for `Table` and `Explore`;
    /// [`ANSWER_NCCL`] for an exploring call that ran NCCL's choice).
    pub algo: u8,
    /// The forced protocol.
    pub proto: u8,
    /// The forced channel count (0: NCCL's).
    pub channels: u8,
}

/// Packs one answer (see [`ANSWER_VALID`] for the layout).
#[inline]
fn pack(n_bytes: usize, source: Source, algo: u8, proto: u8, channels: u8) -> u64 {
    ANSWER_VALID
        | (source as u64) << 61
        | (algo as u64 & 7) << 58
        | (proto as u64 & 3) << 56
        | (channels as u64 & 0x7f) << 49
        | (n_bytes as u64 & ANSWER_BYTES)
}

fn unpack(v: u64) -> Answer {
    Answer {
        source: Source::from_u8(((v >> 61) & 3) as u8).unwrap_or(Source::Unknown),
        algo: ((v >> 58) & 7) as u8,
        proto: ((v >> 56) & 3) as u8,
        channels: ((v >> 49) & 0x7f) as u8,
    }
}

impl Journal {
    /// Records the tuner's answer for `(coll, n_bytes)`: the table's
    /// decision `d`, and whether it was applied (a forced cell written).
    /// `aggregated` (`numPipeOps > 1`): NCCL asked once for several
    /// collectives under their summed size, so no collective can be linked
    /// to this answer: it is recorded as `Unknown`. No lock, no allocation.
    #[inline]
    pub fn record(&self, coll: i32, n_bytes: usize, aggregated: bool, d: Decision, applied: bool) {
        let v = match (d, applied) {
            _ if aggregated => pack(n_bytes, Source::Unknown, 0, 0, 0),
            (
                Decision::Force {
                    algo,
                    proto,
                    channels,
                },
                true,
            ) => pack(n_bytes, Source::Table, algo as u8, proto as u8, channels),
            _ => pack(n_bytes, Source::Nccl, 0, 0, 0),
        };
        self.publish(coll, v);
    }

    /// Records an exploring call's answer: `chosen` is the explored setting
    /// (`Default`: NCCL's own choice), `applied` whether its cell was
    /// written. A setting NCCL had marked unavailable was not written: the
    /// call ran NCCL's choice, recorded as `Nccl`. Aggregated calls as in
    /// [`Journal::record`].
    #[inline]
    pub fn record_explore(
        &self,
        coll: i32,
        n_bytes: usize,
        aggregated: bool,
        chosen: Decision,
        applied: bool,
    ) {
        let v = match (chosen, applied) {
            _ if aggregated => pack(n_bytes, Source::Unknown, 0, 0, 0),
            (
                Decision::Force {
                    algo,
                    proto,
                    channels,
                },
                true,
            ) => pack(n_bytes, Source::Explore, algo as u8, proto as u8, channels),
            (Decision::Default, _) => pack(n_bytes, Source::Explore, ANSWER_NCCL, 0, 0),
            (Decision::Force { .. }, false) => pack(n_bytes, Source::Nccl, 0, 0, 0),
        };
        self.publish(coll, v);
    }

    /// Appends `v` to `coll`'s ring: the entry first, then the head
    /// (Release), so a reader that sees the head sees the entry. This
    /// context is the only writer, so a plain load and store of the head
    /// is exact (an atomic add would cost more than the rest of
    /// `getCollInfo`).
    #[inline]
    fn publish(&self, coll: i32, v: u64) {
        let (Some(head), Some(ring)) = (
            self.heads.get(coll as u32 as usize),
            self.answers.get(coll as u32 as usize),
        ) else {
            return;
        };
        let h = head.load(Ordering::Relaxed);
        ring[h % JOURNAL_LEN].store(v, Ordering::Relaxed);
        head.store(h.wrapping_add(1), Ordering::Release);
    }

    /// The oldest answer for `(coll, n_bytes)` still in this ring, taken
    /// (cleared, unless the writer has just reused its slot), and whether
    /// every answer for it in the ring agrees.
    fn take_oldest(&self, coll: usize, n_bytes: u64) -> Option<(u64, bool)> {
        let head = self.heads[coll].load(Ordering::Acquire);
        let mut oldest: Option<(usize, u64)> = None;
        let mut agree = true;
        for back in 1..=JOURNAL_LEN {
            let i = head.wrapping_sub(back) % JOURNAL_LEN;
            let v = self.answers[coll][i].load(Ordering::Acquire);
            if v & ANSWER_VALID != 0 && v & ANSWER_BYTES == n_bytes {
                agree &= oldest.is_none_or(|(_, o)| o == v);
                oldest = Some((i, v));
            }
        }
        let (i, v) = oldest?;
        // Failure: the writer put a newer answer there; it stays.
        let _ = self.answers[coll][i].compare_exchange(v, 0, Ordering::AcqRel, Ordering::Relaxed);
        Some((v, agree))
    }

    fn clear(&self) {
        for (h, ring) in self.heads.iter().zip(&self.answers) {
            h.store(0, Ordering::Relaxed);
            for a in ring {
                a.store(0, Ordering::Relaxed);
            }
        }
    }
}

/// The tuner's answer for the collective the profiler of communicator
/// `comm_id` sees now: `(coll, n_bytes)`, from rank 0's ring (the one
/// [`link_rank0`] marked, or the communicator's only ring in this process;
/// several rings and none marked: `None`, as another rank's ring may run
/// ahead of or behind rank 0's events). The oldest answer for it is taken
/// (cleared), so a later call of the same size cannot find it again; it is
/// returned only when every answer for it pending in the ring is the same
/// (several calls of one size answered before their `Coll` events, as in
/// one group, may differ) and is not an aggregate's. Anything else is
/// `None` (`unknown`), never a guess. Lock-free, no allocation.
///
/// Left: an answer pushed out of its ring before its `Coll` event (more
/// than [`JOURNAL_LEN`] calls of that collective answered first) lets that
/// event take a later call's answer of the same size.
pub fn take_answer(comm_id: u64, coll: Coll, n_bytes: u64) -> Option<Answer> {
    if n_bytes > ANSWER_BYTES {
        return None;
    }
    let tag = comm_id.wrapping_add(1).max(1);
    let (mut rank0, mut only, mut rings) = (None, None, 0);
    for (i, t) in JOURNAL_TAGS.iter().enumerate() {
        if t.load(Ordering::Acquire) == tag {
            rings += 1;
            only = Some(i);
            if JOURNAL_RANK0[i].load(Ordering::Relaxed) {
                rank0 = Some(i);
            }
        }
    }
    let ring = rank0.or(only.filter(|_| rings == 1))?;
    let (v, agree) = JOURNALS[ring].take_oldest(coll as usize, n_bytes)?;
    let a = unpack(v);
    (agree && a.source != Source::Unknown).then_some(a)
}

/// A profiler `init` of communicator `comm_id` (every rank, tracing on):
/// links rank 0's profiler to the ring its tuner context takes on this
/// thread, before or after (see [`InitLink`]).
pub fn link_rank0(comm_id: u64, rank: i32) {
    let link = INIT_LINK.with(|l| l.replace(InitLink::None));
    if rank != 0 {
        return;
    }
    match link {
        InitLink::Tuner(id, i) if id == comm_id => {
            JOURNAL_RANK0[i].store(true, Ordering::Relaxed);
        }
        _ => INIT_LINK.with(|l| l.set(InitLink::Rank0Profiler(comm_id))),
    }
}

/// A ring of its own for a tuner context of communicator `comm_id` (init
/// only: takes the process lock). `None` when all [`MAX_JOURNALS`] are in
/// use.
pub fn journal_acquire(comm_id: u64) -> Option<&'static Journal> {
    let _g = lock();
    let tag = comm_id.wrapping_add(1).max(1);
    let i = JOURNAL_TAGS
        .iter()
        .position(|t| t.load(Ordering::Relaxed) == 0)?;
    JOURNALS[i].clear();
    let link = INIT_LINK.with(|l| l.replace(InitLink::None));
    let rank0 = matches!(link, InitLink::Rank0Profiler(id) if id == comm_id);
    if !rank0 {
        INIT_LINK.with(|l| l.set(InitLink::Tuner(comm_id, i)));
    }
    JOURNAL_RANK0[i].store(rank0, Ordering::Relaxed);
    JOURNAL_TAGS[i].store(tag, Ordering::Release);
    Some(&JOURNALS[i])
}

/// Gives back [`journal_acquire`]'s ring (the tuner's finalize only).
pub fn journal_release(j: &'static Journal) {
    let _g = lock();
    let i = (j as *const Journal as usize - JOURNALS.as_ptr() as usize) / size_of::<Journal>();
    if let Some(t) = JOURNAL_TAGS.get(i) {
        t.store(0, Ordering::Release);
        JOURNAL_RANK0[i].store(false, Ordering::Relaxed);
    }
}

// ---------------------------------------------------------------------
// Bins: the aggregates.

struct Bin {
    key: AtomicU64,
    count: AtomicU64,
    sum_ln: AtomicU64,
    sum_ln2: AtomicU64,
    /// u64::MAX - min, so a fetch_max over zeroed memory works.
    min_inv: AtomicU64,
    max: AtomicU64,
}

#[allow(clippy::declare_interior_mutable_const)]
const BIN_EMPTY: Bin = Bin {
    key: AtomicU64::new(0),
    count: AtomicU64::new(0),
    sum_ln: AtomicU64::new(0),
    sum_ln2: AtomicU64::new(0),
    min_inv: AtomicU64::new(0),
    max: AtomicU64::new(0),
};
static BIN_TABLE: [Bin; BINS] = [BIN_EMPTY; BINS];

/// Bit 63 of every bin key (and of no [`TOMBSTONE`]).
const KEY_VALID: u64 = 1 << 63;

/// What ran, packed as a bin key: bit 63 set, comm 57-62, coll 54-56,
/// algo 51-53, proto 49-50, channels 42-48, source 40-41, nBytes 0-39.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Key(u64);

impl Key {
    /// None when `n_bytes` does not fit (above 1 TiB).
    pub fn new(
        comm: u8,
        coll: Coll,
        n_bytes: u64,
        algo: Algo,
        proto: Proto,
        channels: u8,
        source: Source,
    ) -> Option<Key> {
        (n_bytes <= MAX_KEY_BYTES && (comm as usize) < MAX_COMMS).then(|| {
            Key(KEY_VALID
                | (comm as u64) << 57
                | (coll as u64) << 54
                | (algo as u64) << 51
                | (proto as u64) << 49
                | (channels.min(64) as u64) << 42
                | (source as u64) << 40
                | n_bytes)
        })
    }

    fn comm(self) -> u8 {
        ((self.0 >> 57) & 0x3f) as u8
    }

    fn record(self, b: &Bin) -> Option<TraceRecord> {
        let v = self.0;
        let count = b.count.load(Ordering::Acquire);
        if count == 0 {
            return None;
        }
        Some(TraceRecord {
            comm: self.comm() as u16,
            coll: Coll::from_nccl(((v >> 54) & 7) as u32)?,
            algo: Algo::from_u8(((v >> 51) & 7) as u8)?,
            proto: Proto::from_u8(((v >> 49) & 3) as u8)?,
            channels: ((v >> 42) & 0x7f) as u8,
            source: Source::from_u8(((v >> 40) & 3) as u8)?,
            n_bytes: v & MAX_KEY_BYTES,
            count,
            sum_ln: f64::from_bits(b.sum_ln.load(Ordering::Relaxed)),
            sum_ln2: f64::from_bits(b.sum_ln2.load(Ordering::Relaxed)),
            min_ns: u64::MAX - b.min_inv.load(Ordering::Relaxed),
            max_ns: b.max.load(Ordering::Relaxed),
        })
    }
}

fn add_f64(a: &AtomicU64, x: f64) {
    let mut cur = a.load(Ordering::Relaxed);
    loop {
        let new = (f64::from_bits(cur) + x).to_bits();
        match a.compare_exchange_weak(cur, new, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return,
            Err(now) => cur = now,
        }
    }
}

/// Counters for the header.
static DROPPED_TABLE_FULL: AtomicU64 = AtomicU64::new(0);
static DROPPED_POOL_FULL: AtomicU64 = AtomicU64::new(0);
static UNTIMED: AtomicU64 = AtomicU64::new(0);
/// Everything that changed what a file would say (for "write only when
/// something is new").
static CHANGES: AtomicU64 = AtomicU64::new(0);

/// A bin whose communicator finalized and whose record was moved out
/// ([`retire`]): not a key (bit 63 clear), passed over by lookups and
/// taken again by a new key.
const TOMBSTONE: u64 = 1;
/// Claims a lookup retries when other threads took its free bin first.
const CLAIM_TRIES: usize = 4;

/// Adds one collective of `ns` GPU nanoseconds to its bin.
///
/// The key's bin, else the first tombstone or empty bin of its probe run
/// (searched to the first empty bin, so a key is not claimed twice while
/// it is further on); a key claimed twice all the same (a retire racing a
/// claim) is merged by the writer.
pub fn aggregate(key: Key, ns: u64) {
    CHANGES.fetch_add(1, Ordering::Relaxed);
    let ns = ns.max(1);
    // Fibonacci hashing of the key.
    let start = (key.0.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 51) as usize;
    for _ in 0..CLAIM_TRIES {
        let mut free = None;
        for p in 0..PROBES {
            let i = (start + p) % BINS;
            let k = BIN_TABLE[i].key.load(Ordering::Acquire);
            if k == key.0 {
                add_to(&BIN_TABLE[i], ns);
                return;
            }
            if k == TOMBSTONE || k == 0 {
                free = free.or(Some((i, k)));
            }
            if k == 0 {
                break;
            }
        }
        let Some((i, was)) = free else { break };
        match BIN_TABLE[i]
            .key
            .compare_exchange(was, key.0, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => {
                add_to(&BIN_TABLE[i], ns);
                return;
            }
            Err(now) if now == key.0 => {
                add_to(&BIN_TABLE[i], ns);
                return;
            }
            Err(_) => {} // another key took it: look again
        }
    }
    DROPPED_TABLE_FULL.fetch_add(1, Ordering::Relaxed);
}

fn add_to(b: &Bin, ns: u64) {
    let l = (ns as f64).ln();
    add_f64(&b.sum_ln, l);
    add_f64(&b.sum_ln2, l * l);
    b.min_inv.fetch_max(u64::MAX - ns, Ordering::Relaxed);
    b.max.fetch_max(ns, Ordering::Relaxed);
    // Last, so a reader that sees the count sees the rest (Release).
    b.count.fetch_add(1, Ordering::Release);
}

/// Counts a collective without usable timestamps.
pub fn untimed() {
    CHANGES.fetch_add(1, Ordering::Relaxed);
    UNTIMED.fetch_add(1, Ordering::Relaxed);
}

// ---------------------------------------------------------------------
// Pool: collectives in flight.

/// One collective between its `Coll` start and its last stop.
///
/// `state` packs the slot's generation (bits 32-63), the kernel channels
/// accepted (16-31) and the references still out (0-15: one for the Coll,
/// one per expected channel). Every handle carries the generation it was
/// issued for, and every change of the counts is a CAS that checks it, so
/// an event for an earlier occupant (a handle of a collective that was
/// evicted, or closed and its slot taken again) changes nothing. The
/// timestamps are plain atomics beside it: a stale event that passed the
/// check just before an eviction can still move one timestamp of the new
/// occupant (only when the pool is full, one collective's time at most).
#[repr(align(64))]
pub struct Slot {
    state: AtomicU64,
    key: AtomicU64,
    /// Kernel channels NCCL said will run.
    expected: AtomicU32,
    /// Take order (a full pool evicts the smallest).
    born: AtomicU64,
    first_start: AtomicU64,
    last_stop: AtomicU64,
}

#[allow(clippy::declare_interior_mutable_const)]
const SLOT_EMPTY: Slot = Slot {
    state: AtomicU64::new(0),
    key: AtomicU64::new(0),
    expected: AtomicU32::new(0),
    born: AtomicU64::new(0),
    first_start: AtomicU64::new(u64::MAX),
    last_stop: AtomicU64::new(0),
};
static POOL: [Slot; POOL_LEN] = [SLOT_EMPTY; POOL_LEN];
static POOL_USED: [AtomicU64; POOL_LEN / 64] = [const { AtomicU64::new(0) }; POOL_LEN / 64];
static POOL_CURSOR: AtomicUsize = AtomicUsize::new(0);
/// Takes so far (the slots' birth order).
static TAKES: AtomicU64 = AtomicU64::new(0);
/// Evictions one take tries before it gives up (others evicted the same
/// slots first).
const EVICT_TRIES: usize = 4;

/// A slot's packed `state`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct State {
    gen: u32,
    started: u16,
    pending: u16,
}

impl State {
    fn load(s: &Slot) -> State {
        let v = s.state.load(Ordering::Acquire);
        State {
            gen: (v >> 32) as u32,
            started: (v >> 16) as u16,
            pending: v as u16,
        }
    }

    fn bits(self) -> u64 {
        (self.gen as u64) << 32 | (self.started as u64) << 16 | self.pending as u64
    }

    /// Replaces `self` (as loaded) by `new`; false when it changed since.
    fn replace(self, s: &Slot, new: State) -> bool {
        s.state
            .compare_exchange(self.bits(), new.bits(), Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }
}

/// A pool handle as NCCL holds it (`void*`): generation in bits 16-47,
/// slot index in bits 4-15, bit 3 always set (never NULL), bits 1-2 clear,
/// bit 0 set for a kernel channel's handle. [`Handle::from_ptr`] checks
/// all of it, and every use checks the generation against the slot's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Handle {
    index: usize,
    gen: u32,
    /// A kernel channel's handle (else the Coll's).
    pub channel: bool,
}

const HANDLE_MARK: usize = 0b1000;
const HANDLE_FIXED: usize = 0b1110;
const HANDLE_INDEX_SHIFT: u32 = 4;
const HANDLE_GEN_SHIFT: u32 = 16;
const _: () = assert!(POOL_LEN <= 1 << (HANDLE_GEN_SHIFT - HANDLE_INDEX_SHIFT));
const _: () = assert!(usize::BITS >= HANDLE_GEN_SHIFT + 32);

impl Handle {
    /// The pointer NCCL is given.
    pub fn to_ptr(self) -> *mut core::ffi::c_void {
        ((self.gen as usize) << HANDLE_GEN_SHIFT
            | self.index << HANDLE_INDEX_SHIFT
            | HANDLE_MARK
            | self.channel as usize) as *mut core::ffi::c_void
    }

    /// The handle behind a pointer NCCL passes back; `None` for NULL and
    /// for anything dyncc cannot have made.
    pub fn from_ptr(p: *mut core::ffi::c_void) -> Option<Handle> {
        let v = p as usize;
        if v & HANDLE_FIXED != HANDLE_MARK || (v as u64) >> (HANDLE_GEN_SHIFT + 32) != 0 {
            return None;
        }
        let index =
            (v >> HANDLE_INDEX_SHIFT) & ((1 << (HANDLE_GEN_SHIFT - HANDLE_INDEX_SHIFT)) - 1);
        (index < POOL_LEN).then_some(Handle {
            index,
            gen: (v >> HANDLE_GEN_SHIFT) as u32,
            channel: v & 1 != 0,
        })
    }

    /// The slot, with its state, when the handle's generation is current
    /// and the collective still open.
    fn open(self) -> Option<(&'static Slot, State)> {
        let s = &POOL[self.index];
        let st = State::load(s);
        (st.gen == self.gen && st.pending > 0).then_some((s, st))
    }
}

/// Takes a slot for a collective that will have `channels` (1 to 64)
/// kernel-channel events. A full pool evicts its oldest collective
/// (counted as dropped); `None` (counted) only when that fails too.
pub fn slot_take(key: Key, channels: u8) -> Option<Handle> {
    if channels == 0 {
        return None;
    }
    let words = POOL_USED.len();
    let first = POOL_CURSOR.fetch_add(1, Ordering::Relaxed);
    for i in 0..2 * words {
        let w = (first + i) % words;
        let used = POOL_USED[w].load(Ordering::Relaxed);
        if used == u64::MAX {
            continue;
        }
        let bit = (!used).trailing_zeros();
        let prev = POOL_USED[w].fetch_or(1 << bit, Ordering::Acquire);
        if prev & (1 << bit) != 0 {
            continue; // another thread took it; try on
        }
        return Some(fill(w * 64 + bit as usize, key, channels));
    }
    for _ in 0..EVICT_TRIES {
        if let Some(i) = evict_oldest() {
            return Some(fill(i, key, channels));
        }
    }
    CHANGES.fetch_add(1, Ordering::Relaxed);
    DROPPED_POOL_FULL.fetch_add(1, Ordering::Relaxed);
    None
}

/// Sets up slot `i` (owned by the caller: its bit is set and its state
/// closed) for a new collective, under the next generation.
fn fill(i: usize, key: Key, channels: u8) -> Handle {
    let s = &POOL[i];
    let gen = State::load(s).gen.wrapping_add(1);
    s.key.store(key.0, Ordering::Relaxed);
    s.expected.store(channels as u32, Ordering::Relaxed);
    s.born
        .store(TAKES.fetch_add(1, Ordering::Relaxed), Ordering::Relaxed);
    s.first_start.store(u64::MAX, Ordering::Relaxed);
    s.last_stop.store(0, Ordering::Relaxed);
    s.state.store(
        State {
            gen,
            started: 0,
            pending: 1 + channels as u16,
        }
        .bits(),
        Ordering::Release,
    );
    Handle {
        index: i,
        gen,
        channel: false,
    }
}

/// Closes the open collective taken longest ago (its channels never all
/// stopped: NCCL sent fewer than it said), counting it as dropped, and
/// returns its slot, now the caller's. Scans the pool: only on a full one.
fn evict_oldest() -> Option<usize> {
    let (i, st) = POOL
        .iter()
        .enumerate()
        .map(|(i, s)| (i, State::load(s)))
        .filter(|(_, st)| st.pending > 0)
        .min_by_key(|&(i, _)| POOL[i].born.load(Ordering::Relaxed))?;
    let closed = State {
        gen: st.gen.wrapping_add(1),
        started: 0,
        pending: 0,
    };
    if !st.replace(&POOL[i], closed) {
        return None; // it closed, or another take evicted it
    }
    CHANGES.fetch_add(1, Ordering::Relaxed);
    DROPPED_POOL_FULL.fetch_add(1, Ordering::Relaxed);
    Some(i)
}

/// A kernel channel of the collective `parent` started at GPU time `t`:
/// the channel's handle, or `None` when `parent` is not an open
/// collective's or NCCL sent more channels than the collective said
/// (that one is ignored, so the references stay balanced).
pub fn channel_start(parent: Handle, t: u64) -> Option<Handle> {
    if parent.channel {
        return None;
    }
    loop {
        let (s, st) = parent.open()?;
        if st.started as u32 >= s.expected.load(Ordering::Relaxed) {
            return None;
        }
        let new = State {
            started: st.started + 1,
            ..st
        };
        if st.replace(s, new) {
            if t != 0 {
                s.first_start.fetch_min(t, Ordering::Relaxed);
            }
            return Some(Handle {
                channel: true,
                ..parent
            });
        }
    }
}

/// A kernel channel stopped at GPU time `t`.
pub fn channel_stop(h: Handle, t: u64) {
    if let (true, Some((s, _))) = (h.channel, h.open()) {
        if t != 0 {
            s.last_stop.fetch_max(t, Ordering::Relaxed);
        }
    }
}

/// Gives back one reference (the Coll's stop or a channel's); the last
/// one aggregates and frees the slot. A stale handle changes nothing.
pub fn release(h: Handle) {
    loop {
        let Some((s, st)) = h.open() else { return };
        let new = State {
            pending: st.pending - 1,
            ..st
        };
        if !st.replace(s, new) {
            continue;
        }
        if new.pending != 0 {
            return;
        }
        let (a, b) = (
            s.first_start.load(Ordering::Relaxed),
            s.last_stop.load(Ordering::Relaxed),
        );
        if new.started > 0 && a != u64::MAX && b > a {
            aggregate(Key(s.key.load(Ordering::Relaxed)), b - a);
        } else {
            untimed();
        }
        free(h.index);
        return;
    }
}

/// Gives slot `i` (closed, owned by the caller) back to the pool.
fn free(i: usize) {
    POOL[i].key.store(0, Ordering::Relaxed);
    POOL_USED[i / 64].fetch_and(!(1 << (i % 64)), Ordering::Release);
}

/// Frees the slots still held by communicator `comm` (its finalize: NCCL
/// sends it no more events), counting them as untimed.
pub fn reclaim(comm: u8) {
    for (w, used) in POOL_USED.iter().enumerate() {
        let mut bits = used.load(Ordering::Acquire);
        while bits != 0 {
            let b = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            let i = w * 64 + b;
            let s = &POOL[i];
            let st = State::load(s);
            let k = s.key.load(Ordering::Relaxed);
            if st.pending == 0 || k == 0 || Key(k).comm() != comm {
                continue;
            }
            let closed = State {
                gen: st.gen.wrapping_add(1),
                started: 0,
                pending: 0,
            };
            if st.replace(s, closed) {
                untimed();
                free(i);
            }
        }
    }
}

// ---------------------------------------------------------------------
// The process: facts for the header, and the writer.

/// One communicator this process records (or recorded).
struct CommInfo {
    comm_id: u64,
    n_nodes: u32,
    n_ranks: u32,
    rank: u32,
    name: String,
}

impl CommInfo {
    /// Bytes its entry takes in a file.
    fn file_len(&self) -> usize {
        TRACE_COMM_LEN + self.name.len().min(MAX_TRACE_STR)
    }

    fn same_shape(&self, o: &CommInfo) -> bool {
        (self.n_nodes, self.n_ranks, self.rank) == (o.n_nodes, o.n_ranks, o.rank)
    }

    fn file_entry(&self) -> TraceComm<'_> {
        TraceComm {
            comm_id: self.comm_id,
            n_nodes: self.n_nodes.max(1).min(self.n_ranks.max(1)),
            n_ranks: self.n_ranks.max(1),
            rank: self.rank.min(self.n_ranks.max(1) - 1),
            name: &self.name,
        }
    }
}

/// What finalized communicators may add to a file: with the live
/// tables' most ([`BINS`] records, [`MAX_COMMS`] entries with the
/// longest names) and the header, a file stays under the format's 1 MiB.
const ARCHIVE_BUDGET: usize = 512 << 10;
const _: () = assert!(
    ARCHIVE_BUDGET
        + BINS * TRACE_RECORD_LEN
        + MAX_COMMS * (TRACE_COMM_LEN + MAX_TRACE_STR)
        + TRACE_HEADER_LEN
        + 2 * MAX_TRACE_STR
        <= MAX_TRACE_LEN
);

struct Process {
    dir: Option<PathBuf>,
    host: String,
    job: String,
    nccl_version: u32,
    abi: u8,
    table_digest: Option<u64>,
    /// The loaded table's `platform` and `gpu` metadata (the header's
    /// provenance); empty without a table.
    platform: String,
    gpu: String,
    /// The loaded table's sweep fingerprint (its `sweep` metadata).
    sweep: Option<u64>,
    log: Logger,
    /// The communicators recording now, by bin-key slot: a finalized one
    /// frees its slot ([`retire`]).
    live: [Option<CommInfo>; MAX_COMMS],
    /// Finalized communicators, in the file before the live ones.
    finished: Vec<CommInfo>,
    /// Their records (`comm`: the index in `finished`).
    archive: Vec<TraceRecord>,
    /// Bytes `finished` and `archive` add to a file.
    archive_bytes: usize,
    /// Communicators not recorded because [`MAX_COMMS`] were recording at
    /// once, and how many of them a WARN has counted.
    refused: u64,
    refused_said: u64,
    /// `CHANGES` when the file was last written; `None` before.
    written_at: Option<u64>,
    /// The process that recorded: a child forked after NCCL started
    /// (data-loader workers) inherits the tables but must not write them
    /// again under its own id.
    pid: u32,
    /// Drawn once per load of this library (see [`file_names`]).
    nonce: u64,
}

impl Process {
    const fn new() -> Process {
        Process {
            dir: None,
            host: String::new(),
            job: String::new(),
            nccl_version: 0,
            abi: 0,
            table_digest: None,
            platform: String::new(),
            gpu: String::new(),
            sweep: None,
            log: Logger(None),
            live: [const { None }; MAX_COMMS],
            finished: Vec::new(),
            archive: Vec::new(),
            archive_bytes: 0,
            refused: 0,
            refused_said: 0,
            written_at: None,
            pid: 0,
            nonce: 0,
        }
    }

    /// Keeps a finalized communicator's records for every later file: as
    /// an entry of its own while [`ARCHIVE_BUDGET`] allows; merged into a
    /// finalized entry of the same id and shape (the compiler reads those
    /// as one communicator anyway) or, past the budget, of the same
    /// shape; records that fit nowhere are counted as dropped.
    fn archive_comm(&mut self, info: CommInfo, recs: Vec<TraceRecord>) {
        let same_id = self
            .finished
            .iter()
            .position(|f| f.comm_id == info.comm_id && f.same_shape(&info));
        let need = info.file_len() + recs.len() * TRACE_RECORD_LEN;
        let target = match same_id {
            Some(t) => Some(t),
            None if self.archive_bytes + need <= ARCHIVE_BUDGET => {
                self.archive_bytes += info.file_len();
                self.finished.push(info);
                Some(self.finished.len() - 1)
            }
            None => self.finished.iter().position(|f| f.same_shape(&info)),
        };
        let Some(t) = target else {
            let lost = recs.iter().map(|r| r.count).sum::<u64>();
            DROPPED_TABLE_FULL.fetch_add(lost, Ordering::Relaxed);
            return;
        };
        let t = t as u16;
        let mut at: std::collections::HashMap<[u64; 2], usize> = self
            .archive
            .iter()
            .enumerate()
            .filter(|(_, r)| r.comm == t)
            .map(|(i, r)| (record_key(r), i))
            .collect();
        for mut r in recs {
            r.comm = t;
            if let Some(&i) = at.get(&record_key(&r)) {
                merge_record(&mut self.archive[i], &r);
            } else if self.archive_bytes + TRACE_RECORD_LEN <= ARCHIVE_BUDGET {
                at.insert(record_key(&r), self.archive.len());
                self.archive.push(r);
                self.archive_bytes += TRACE_RECORD_LEN;
            } else {
                DROPPED_TABLE_FULL.fetch_add(r.count, Ordering::Relaxed);
            }
        }
    }
}

/// Moves communicator slot `comm`'s records out of the bins (it sends no
/// more events), leaving tombstones the next keys take.
fn take_bins(comm: u8) -> Vec<TraceRecord> {
    let mut recs = Vec::new();
    for b in &BIN_TABLE {
        let k = b.key.load(Ordering::Acquire);
        if k & KEY_VALID == 0 || Key(k).comm() != comm {
            continue;
        }
        recs.extend(Key(k).record(b));
        // Zeroed before the key is freed (Release), so whoever claims the
        // bin next (Acquire) starts from zero.
        for a in [&b.count, &b.sum_ln, &b.sum_ln2, &b.min_inv, &b.max] {
            a.store(0, Ordering::Relaxed);
        }
        b.key.store(TOMBSTONE, Ordering::Release);
    }
    recs
}

/// What tells two records of one communicator apart.
fn record_key(r: &TraceRecord) -> [u64; 2] {
    [
        r.n_bytes,
        (r.comm as u64) << 40
            | (r.coll as u64) << 32
            | (r.algo as u64) << 24
            | (r.proto as u64) << 16
            | (r.channels as u64) << 8
            | r.source as u64,
    ]
}

/// Adds `b`'s collectives to `a` (same communicator, collective, size,
/// setting and source).
fn merge_record(a: &mut TraceRecord, b: &TraceRecord) {
    a.count = a.count.saturating_add(b.count);
    a.sum_ln += b.sum_ln;
    a.sum_ln2 += b.sum_ln2;
    a.min_ns = a.min_ns.min(b.min_ns);
    a.max_ns = a.max_ns.max(b.max_ns);
}

static PROCESS: Mutex<Process> = Mutex::new(Process::new());

/// One WARN per process for a failed write, one for tracing off.
static WARNED_WRITE: AtomicBool = AtomicBool::new(false);

fn lock() -> MutexGuard<'static, Process> {
    PROCESS.lock().unwrap_or_else(|e| e.into_inner())
}

/// `DYNCC_TRACE`, when set and non-empty.
pub fn configured() -> Option<OsString> {
    std::env::var_os("DYNCC_TRACE").filter(|v| !v.is_empty())
}

/// The tuner loaded a table with this digest (the trace header names it).
pub fn note_table(digest: u64) {
    lock().table_digest = Some(digest);
}

/// The tuner loaded a table of this platform and GPU, compiled from the
/// sweep with this fingerprint (its metadata; the trace header names them
/// so that the compiler can tell traces of another cluster or sweep).
/// Called at communicator init, never on the hot path.
pub fn note_platform(platform: &str, gpu: &str, sweep: Option<u64>) {
    let mut p = lock();
    p.sweep = sweep;
    if p.platform != platform {
        p.platform = platform.to_owned();
    }
    if p.gpu != gpu {
        p.gpu = gpu.to_owned();
    }
}

/// What a recording communicator brings to the file.
pub struct Recording {
    /// Its index (for the bin keys).
    pub comm: u8,
}

/// Facts of a communicator starting to record.
pub struct CommFacts<'a> {
    /// NCCL's communicator id.
    pub comm_id: u64,
    /// Nodes.
    pub n_nodes: u32,
    /// Ranks.
    pub n_ranks: u32,
    /// This rank.
    pub rank: u32,
    /// commName, lossily decoded.
    pub name: &'a str,
    /// Profiler ABI version.
    pub abi: u8,
    /// `ncclGetVersion`'s code, 0 unknown.
    pub nccl_version: u32,
}

/// Why [`register`] refused a communicator.
#[derive(Debug)]
pub struct Refused {
    /// The first refusal in this process (later ones are counted, and
    /// said once with their number: see [`retire`]).
    pub first: bool,
}

/// Registers a recording communicator (profiler init). Refused when
/// [`MAX_COMMS`] are recording at once (a finalized one frees its slot).
pub fn register(dir: &Path, facts: CommFacts<'_>, log: Logger) -> Result<Recording, Refused> {
    let mut p = lock();
    let Some(slot) = p.live.iter().position(Option::is_none) else {
        p.refused += 1;
        return Err(Refused {
            first: p.refused == 1,
        });
    };
    if p.dir.is_none() {
        p.pid = std::process::id();
        p.nonce = load_nonce();
        p.dir = Some(dir.to_path_buf());
        p.host = hostname();
        p.job = std::env::var("SLURM_JOB_ID").unwrap_or_default();
    }
    p.abi = facts.abi;
    p.nccl_version = facts.nccl_version;
    if p.log.0.is_none() {
        p.log = log;
    }
    p.live[slot] = Some(CommInfo {
        comm_id: facts.comm_id,
        n_nodes: facts.n_nodes,
        n_ranks: facts.n_ranks,
        rank: facts.rank,
        name: facts.name.to_owned(),
    });
    Ok(Recording { comm: slot as u8 })
}

/// A recording communicator's profiler finalized (NCCL sends it no more
/// events): its collectives still in flight are counted as untimed
/// ([`reclaim`]), its records move out of the bins into the process's
/// archive (every later file still holds them) and its slot and bins are
/// free for the next communicator. When the last recording communicator
/// goes and some were refused since the last such WARN, one WARN says how
/// many. Init and finalize only: takes the process lock, allocates.
pub fn retire(comm: u8) {
    reclaim(comm);
    let mut p = lock();
    let Some(info) = p.live.get_mut(comm as usize).and_then(Option::take) else {
        return;
    };
    let recs = take_bins(comm);
    p.archive_comm(info, recs);
    if p.live.iter().all(Option::is_none) && p.refused > p.refused_said {
        let n = p.refused - p.refused_said;
        p.refused_said = p.refused;
        p.log.warn(format_args!(
            "dyncc: {n} communicator{} of this process {} not traced: {MAX_COMMS} were \
             recording at the time (the most at once); the job went on",
            if n == 1 { "" } else { "s" },
            if n == 1 { "was" } else { "were" },
        ));
    }
}

fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: buf is writable for its length; gethostname NUL-terminates
    // when the name fits (and we cut at the first NUL or the end anyway).
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len() - 1) };
    if rc != 0 {
        return "unknown".into();
    }
    let n = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

/// A number drawn for this load of the library: the kernel's random
/// bytes, or (without them) the clock and this load's address.
fn load_nonce() -> u64 {
    let mut n = 0u64;
    // SAFETY: n is 8 writable bytes; GRND_NONBLOCK never waits.
    let got = unsafe {
        libc::getrandom(
            (&mut n as *mut u64).cast(),
            size_of::<u64>(),
            libc::GRND_NONBLOCK,
        )
    };
    if got != size_of::<u64>() as isize {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        n = t ^ (&PROCESS as *const _ as u64).rotate_left(32);
    }
    n
}

/// The file this process writes in `dir`, and its temporary name. The
/// nonce keeps apart two loads of the library in one process (a copy
/// installed under the profiler's name loads twice, each with its own
/// tables) and a process id reused on a host name shared by containers.
pub fn file_names(dir: &Path, host: &str, pid: u32, nonce: u64) -> (PathBuf, PathBuf) {
    let host: String = host
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    (
        dir.join(format!("dyncc-{host}-{pid}-{nonce:016x}.trace")),
        dir.join(format!(".dyncc-{host}-{pid}-{nonce:016x}.trace.tmp")),
    )
}

/// Writes this process's trace file if anything changed since the last
/// write (or none was written yet). `try_only`: give up rather than wait
/// for the lock (the exit hook: a thread killed while holding it must not
/// hang exit). A failure is one WARN per process; never panics into C.
pub fn flush(try_only: bool) {
    let mut p = if try_only {
        match PROCESS.try_lock() {
            Ok(g) => g,
            Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return,
        }
    } else {
        lock()
    };
    let Some(dir) = p.dir.clone() else { return };
    let pid = std::process::id();
    if pid != p.pid {
        return; // a forked child: the parent writes these tables
    }
    let changes = CHANGES.load(Ordering::Acquire);
    if p.written_at == Some(changes) {
        return;
    }
    let (path, tmp) = file_names(&dir, &p.host, pid, p.nonce);
    match write_file(&p, &path, &tmp, pid) {
        Ok(()) => p.written_at = Some(changes),
        Err((failed, e)) => {
            // Do not try again for every finalize: one WARN, and later
            // writes only when something new happened.
            p.written_at = Some(changes);
            if !WARNED_WRITE.swap(true, Ordering::Relaxed) {
                let shown = failed.to_string_lossy();
                p.log.warn(format_args!(
                    "dyncc: cannot write trace file {}: {}; the job goes on without this \
                     process's trace (check that DYNCC_TRACE names a writable directory with \
                     free space)",
                    Escaped(&shown),
                    Escaped(&e.to_string())
                ));
            }
        }
    }
}

/// Writes the file: whole to `tmp` (created here, never an entry that
/// was there), then renamed over `path`. On failure, the path that failed
/// (`tmp` when it could not be created or written, `path` when the file
/// could not be encoded or renamed) and why; a `tmp` this call created is
/// removed, anything else left alone.
fn write_file(
    p: &Process,
    path: &Path,
    tmp: &Path,
    pid: u32,
) -> Result<(), (PathBuf, std::io::Error)> {
    // Finalized communicators first, then the live ones by slot.
    let mut comms: Vec<TraceComm<'_>> = p.finished.iter().map(CommInfo::file_entry).collect();
    let mut index = [None; MAX_COMMS];
    for (slot, c) in p.live.iter().enumerate() {
        if let Some(c) = c {
            index[slot] = Some(comms.len() as u16);
            comms.push(c.file_entry());
        }
    }
    let mut records = p.archive.clone();
    // A key claimed twice (a retire racing a claim) is one record.
    let mut seen: std::collections::HashMap<u64, usize> = std::collections::HashMap::new();
    for b in &BIN_TABLE {
        let k = b.key.load(Ordering::Acquire);
        if k & KEY_VALID == 0 {
            continue;
        }
        let (Some(ci), Some(mut r)) = (index[Key(k).comm() as usize], Key(k).record(b)) else {
            continue;
        };
        r.comm = ci;
        match seen.get(&k) {
            Some(&i) => merge_record(&mut records[i], &r),
            None => {
                seen.insert(k, records.len());
                records.push(r);
            }
        }
    }
    let head = TraceHead {
        profiler_abi: p.abi,
        table_digest: p.table_digest,
        nccl_version: p.nccl_version,
        pid,
        host: &p.host,
        job_id: &p.job,
        platform: &p.platform,
        gpu: &p.gpu,
        sweep: p.sweep,
        dropped_table_full: DROPPED_TABLE_FULL.load(Ordering::Relaxed),
        dropped_pool_full: DROPPED_POOL_FULL.load(Ordering::Relaxed),
        untimed: UNTIMED.load(Ordering::Relaxed),
    };
    let bytes = encode(&head, &comms, &records)
        .map_err(|e| (path.to_path_buf(), std::io::Error::other(e)))?;
    // create_new (O_EXCL): a file, link or FIFO already at the temporary
    // name is an error, never opened (a FIFO would block the open, inside
    // ncclCommDestroy); O_NONBLOCK besides, for the same reason.
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(tmp)
        .map_err(|e| (tmp.to_path_buf(), e))?;
    // From here the temporary is this call's own: removed on failure.
    let undo = |at: &Path, e| {
        let _ = std::fs::remove_file(tmp);
        (at.to_path_buf(), e)
    };
    f.write_all(&bytes).map_err(|e| undo(tmp, e))?;
    drop(f);
    // Atomic on POSIX file systems: readers see the old file or the new,
    // whenever the process dies. No fsync: it would hold the process lock
    // inside ncclCommDestroy for as long as the (often network) file system
    // takes, and it only guards against the machine crashing, after which
    // a lost or (on a file system that reorders rename before data) torn
    // trace is rejected by its checksum and the job's other files remain.
    std::fs::rename(tmp, path).map_err(|e| undo(path, e))
}

/// Whether `dir` is a directory this process can create files in.
pub fn dir_usable(dir: &Path) -> Result<(), String> {
    let meta = std::fs::metadata(dir).map_err(|e| e.to_string())?;
    if !meta.is_dir() {
        return Err("it is not a directory".into());
    }
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| "it contains a NUL byte".to_string())?;
    // SAFETY: c is a valid NUL-terminated path.
    if unsafe { libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) } != 0 {
        return Err(std::io::Error::last_os_error().to_string());
    }
    Ok(())
}

/// Runs at process exit and at `dlclose` (an ELF destructor, not on any of
/// NCCL's threads' paths): many jobs never destroy their communicators, so
/// neither finalize runs; this writes what was recorded.
extern "C" fn flush_at_exit() {
    crate::plugin::ffi_guard((), || {
        flush(true);
        // At dlclose the statics are unmapped next: free what they own.
        if let Ok(mut p) = PROCESS.try_lock() {
            p.live = [const { None }; MAX_COMMS];
            p.finished = Vec::new();
            p.archive = Vec::new();
            p.host = String::new();
            p.job = String::new();
            p.platform = String::new();
            p.gpu = String::new();
            p.dir = None;
        }
    });
}

#[used]
#[unsafe(link_section = ".fini_array")]
static FLUSH_AT_EXIT: extern "C" fn() = flush_at_exit;

#[cfg(test)]
mod tests {
    use super::*;

    /// The pool is process-wide: tests that fill or count it take turns.
    static POOL_TESTS: std::sync::Mutex<()> = std::sync::Mutex::new(());
    /// So are the bins: tests that count them or add many take turns.
    static BIN_TESTS: std::sync::Mutex<()> = std::sync::Mutex::new(());

    const FORCE: Decision = Decision::Force {
        algo: Algo::Tree,
        proto: Proto::LL,
        channels: 4,
    };

    #[test]
    fn a_journal_answer_is_found_by_size() {
        let j = journal_acquire(0xfeed).unwrap();
        j.record(4, 4096, false, Decision::Default, false);
        j.record(4, 8192, false, FORCE, true);
        assert_eq!(
            take_answer(0xfeed, Coll::AllReduce, 8192),
            Some(Answer {
                source: Source::Table,
                algo: Algo::Tree as u8,
                proto: Proto::LL as u8,
                channels: 4
            })
        );
        assert_eq!(
            take_answer(0xfeed, Coll::AllReduce, 4096).map(|a| a.source),
            Some(Source::Nccl)
        );
        assert_eq!(take_answer(0xfeed, Coll::AllGather, 4096), None);
        // A forced cell NCCL had disabled (not applied) is NCCL's choice.
        j.record(4, 8192, false, FORCE, false);
        assert_eq!(
            take_answer(0xfeed, Coll::AllReduce, 8192).map(|a| a.source),
            Some(Source::Nccl)
        );
        journal_release(j);
    }

    /// An answer links one collective: a later one of the same size whose
    /// tuner call the profiler cannot see (aggregated, or lost) must not
    /// take it again. Failed on the old `find`, which kept answers.
    #[test]
    fn a_taken_answer_is_not_found_again() {
        let j = journal_acquire(0xfee1).unwrap();
        j.record(4, 4096, false, FORCE, true);
        assert!(take_answer(0xfee1, Coll::AllReduce, 4096).is_some());
        assert_eq!(take_answer(0xfee1, Coll::AllReduce, 4096), None);
        journal_release(j);
    }

    /// NCCL asks once for an aggregate (numPipeOps > 1) with the summed
    /// size: that answer links no collective.
    #[test]
    fn an_aggregated_calls_answer_is_unknown() {
        let j = journal_acquire(0xfee2).unwrap();
        j.record(4, 8192, true, FORCE, true);
        j.record_explore(4, 65536, true, Decision::Default, true);
        assert_eq!(take_answer(0xfee2, Coll::AllReduce, 8192), None);
        assert_eq!(take_answer(0xfee2, Coll::AllReduce, 65536), None);
        journal_release(j);
    }

    /// Two calls of one size in one group (both answered before either
    /// Coll event): the first event cannot tell which answer is its own,
    /// so it is unknown; the second then has only its own. The old newest-
    /// first `find` gave the first event the second call's answer.
    #[test]
    fn two_same_size_calls_in_one_group_are_not_swapped() {
        let j = journal_acquire(0xfee3).unwrap();
        j.record_explore(4, 4096, false, Decision::Default, true);
        j.record(4, 4096, false, FORCE, true);
        assert_eq!(take_answer(0xfee3, Coll::AllReduce, 4096), None);
        assert_eq!(
            take_answer(0xfee3, Coll::AllReduce, 4096).map(|a| a.source),
            Some(Source::Table)
        );
        journal_release(j);
    }

    /// Ranks of one communicator in one process (NCCL's init order per
    /// rank, on one thread: profiler, then tuner): each tuner context owns
    /// a ring, so another rank's answers never push rank 0's out (the old
    /// shared ring held 16/N answers per rank), and the profiler reads rank
    /// 0's ring only, so an answer rank 1 gave ahead of rank 0 is not taken.
    #[test]
    fn each_rank_owns_a_ring_and_the_profiler_reads_rank_0s() {
        link_rank0(0xfee4, 0);
        let r0 = journal_acquire(0xfee4).unwrap();
        link_rank0(0xfee4, 1);
        let r1 = journal_acquire(0xfee4).unwrap();
        assert!(!core::ptr::eq(r0, r1));
        r0.record(4, 4096, false, FORCE, true);
        for _ in 0..JOURNAL_LEN {
            r1.record(4, 1 << 20, false, Decision::Default, false);
        }
        assert_eq!(
            take_answer(0xfee4, Coll::AllReduce, 4096).map(|a| a.source),
            Some(Source::Table)
        );
        r1.record_explore(4, 4096, false, Decision::Default, true);
        assert_eq!(take_answer(0xfee4, Coll::AllReduce, 4096), None);
        journal_release(r0);
        journal_release(r1);
    }

    /// The tuner's init first (a NCCL that reorders them) links as well;
    /// two rings of one id, neither known as rank 0's, give `unknown`.
    #[test]
    fn rank_0_links_in_either_init_order_and_unlinked_rings_are_unknown() {
        let r0 = journal_acquire(0xfee5).unwrap();
        link_rank0(0xfee5, 0);
        r0.record(4, 4096, false, FORCE, true);
        assert!(take_answer(0xfee5, Coll::AllReduce, 4096).is_some());
        journal_release(r0);
        let a = journal_acquire(0xfee6).unwrap();
        let b = journal_acquire(0xfee6).unwrap();
        a.record(4, 4096, false, FORCE, true);
        b.record(4, 4096, false, FORCE, true);
        assert_eq!(take_answer(0xfee6, Coll::AllReduce, 4096), None);
        journal_release(a);
        journal_release(b);
    }

    /// NCCL's order: Coll start, Coll stop, then (proxy thread) channel
    /// starts and stops; the last reference aggregates first start to last
    /// stop, whatever thread gives it back.
    #[test]
    fn a_collective_is_aggregated_when_its_last_channel_stops() {
        let _pool = POOL_TESTS.lock().unwrap_or_else(|e| e.into_inner());
        let key = Key::new(
            63,
            Coll::Broadcast,
            12345,
            Algo::Ring,
            Proto::Simple,
            2,
            Source::Nccl,
        )
        .unwrap();
        let h = slot_take(key, 2).unwrap();
        assert_eq!(Handle::from_ptr(h.to_ptr()), Some(h));
        release(h); // Coll stop, long before the kernel ran
        let c0 = channel_start(h, 1_000).unwrap();
        let c1 = channel_start(h, 1_100).unwrap();
        assert!(
            channel_start(h, 1_200).is_none(),
            "a third channel is refused"
        );
        assert!(channel_start(c0, 1_200).is_none(), "a channel is no parent");
        channel_stop(c1, 5_000);
        release(c1);
        channel_stop(c0, 6_000);
        release(c0);
        assert!(h.open().is_none(), "closed after its last reference");
        let b = BIN_TABLE
            .iter()
            .find(|b| b.key.load(Ordering::Relaxed) == key.0)
            .unwrap();
        let r = key.record(b).unwrap();
        assert_eq!((r.count, r.min_ns, r.max_ns), (1, 5_000, 5_000));
        assert!((r.sum_ln - 5000f64.ln()).abs() < 1e-9);
    }

    /// A handle of a closed collective whose slot was taken again (NCCL's
    /// late channel events of a collective that said nChannels 0, or of an
    /// evicted one) must not touch the new collective.
    #[test]
    fn a_stale_handle_does_not_touch_the_slots_next_collective() {
        let _pool = POOL_TESTS.lock().unwrap_or_else(|e| e.into_inner());
        let key =
            |n| Key::new(62, Coll::Reduce, n, Algo::Ring, Proto::LL, 1, Source::Nccl).unwrap();
        let old = slot_take(key(100), 1).unwrap();
        let c = channel_start(old, 10).unwrap();
        channel_stop(c, 20);
        release(c);
        release(old);
        // Take slots until the same index comes round again.
        let mut held = Vec::new();
        let new = loop {
            let h = slot_take(key(200), 1).unwrap();
            if h.index == old.index {
                break h;
            }
            held.push(h);
        };
        assert_ne!(new.gen, old.gen);
        assert!(channel_start(old, 1).is_none());
        channel_stop(c, 1 << 40);
        release(c);
        release(old);
        assert_eq!(State::load(&POOL[new.index]).pending, 2, "untouched");
        let nc = channel_start(new, 1_000).unwrap();
        channel_stop(nc, 3_000);
        assert_eq!(POOL[new.index].first_start.load(Ordering::Relaxed), 1_000);
        assert_eq!(POOL[new.index].last_stop.load(Ordering::Relaxed), 3_000);
        for h in held.into_iter().chain([new]) {
            release(h);
        }
        release(nc);
        reclaim(62);
    }

    #[test]
    fn handles_dyncc_did_not_make_are_refused() {
        for p in [
            0usize,
            8 << 4,
            0x1000,
            0b1010 | 1 << 4,
            1 << 60 | HANDLE_MARK,
        ] {
            assert_eq!(
                Handle::from_ptr(p as *mut core::ffi::c_void),
                None,
                "{p:#x}"
            );
        }
        let h = Handle {
            index: POOL_LEN - 1,
            gen: u32::MAX,
            channel: true,
        };
        assert_eq!(Handle::from_ptr(h.to_ptr()), Some(h));
    }

    /// A collective whose channels never all stop holds its slot; once
    /// every slot is held, the next collective evicts the oldest (counted
    /// as dropped) instead of every later one being dropped.
    #[test]
    fn a_full_pool_evicts_its_oldest_collective() {
        let _pool = POOL_TESTS.lock().unwrap_or_else(|e| e.into_inner());
        let key = Key::new(
            61,
            Coll::AllGather,
            64,
            Algo::Ring,
            Proto::LL,
            1,
            Source::Nccl,
        )
        .unwrap();
        let free_before = POOL_USED
            .iter()
            .map(|w| w.load(Ordering::Relaxed).count_zeros() as usize)
            .sum::<usize>();
        let held: Vec<Handle> = (0..free_before)
            .map(|_| slot_take(key, 1).unwrap())
            .collect();
        let dropped = DROPPED_POOL_FULL.load(Ordering::Relaxed);
        let h = slot_take(key, 1).expect("a full pool evicts");
        assert_eq!(DROPPED_POOL_FULL.load(Ordering::Relaxed), dropped + 1);
        assert_eq!(h.index, held[0].index, "the oldest goes");
        assert!(held[0].open().is_none(), "its handle is stale");
        let h2 = slot_take(key, 1).unwrap();
        assert_eq!(h2.index, held[1].index);
        reclaim(61);
        assert!(h.open().is_none() && h2.open().is_none());
    }

    /// Something already at the temporary name (here a FIFO nobody reads,
    /// which an open for writing waits on forever, inside
    /// ncclCommDestroy) makes the write fail at once; nothing is renamed.
    #[test]
    fn a_fifo_at_the_temporary_name_fails_the_write_without_blocking() {
        let d = tempfile::tempdir().unwrap();
        let (path, tmp) = file_names(d.path(), "h", 7, 0xabc);
        let c = std::ffi::CString::new(tmp.as_os_str().as_bytes()).unwrap();
        // SAFETY: mkfifo with a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        let p = Process {
            dir: Some(d.path().to_path_buf()),
            host: "h".into(),
            abi: 6,
            pid: 7,
            nonce: 0xabc,
            ..Process::new()
        };
        let (at, e) = write_file(&p, &path, &tmp, 7).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::AlreadyExists, "{e}");
        assert_eq!(at, tmp, "the path that failed");
        assert!(!path.exists());
        assert!(tmp
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .ends_with("-7-0000000000000abc.trace.tmp"));
    }

    /// A finalized communicator's bins are moved out whole and become
    /// tombstones: the same keys of the slot's next communicator start
    /// from zero in one bin each (not merged with the old ones, not
    /// claimed twice), and the table does not fill up with the dead.
    #[test]
    fn retired_bins_are_moved_out_and_taken_again() {
        let _bins = BIN_TESTS.lock().unwrap_or_else(|e| e.into_inner());
        let key = |n| {
            Key::new(
                60,
                Coll::AllReduce,
                n,
                Algo::Ring,
                Proto::LL,
                2,
                Source::Nccl,
            )
            .unwrap()
        };
        let used = || {
            BIN_TABLE
                .iter()
                .filter(|b| b.key.load(Ordering::Relaxed) != 0)
                .count()
        };
        let before = used();
        for round in 0..50u64 {
            for n in 1..=20u64 {
                for _ in 0..n {
                    aggregate(key(n * 1000 + round % 2), 100 * n);
                }
            }
            let mut recs = take_bins(60);
            recs.sort_by_key(|r| r.n_bytes);
            assert_eq!(recs.len(), 20, "round {round}");
            for (i, r) in recs.iter().enumerate() {
                let n = i as u64 + 1;
                assert_eq!((r.count, r.min_ns, r.max_ns), (n, 100 * n, 100 * n));
            }
        }
        // Two rounds' keys at most, whatever the other tests add.
        assert!(used() <= before + 40 + 3 * 64, "{} -> {}", before, used());
    }

    fn info(id: u64, nodes: u32) -> CommInfo {
        CommInfo {
            comm_id: id,
            n_nodes: nodes,
            n_ranks: 8,
            rank: 0,
            name: "c".into(),
        }
    }

    fn rec(n_bytes: u64, count: u64) -> TraceRecord {
        TraceRecord {
            comm: 0,
            coll: Coll::AllReduce,
            algo: Algo::Ring,
            proto: Proto::Simple,
            channels: 4,
            source: Source::Nccl,
            n_bytes,
            count,
            sum_ln: count as f64 * 15f64.ln(),
            sum_ln2: count as f64 * 15f64.ln().powi(2),
            min_ns: 10,
            max_ns: 20,
        }
    }

    /// Finalized communicators keep an entry of their own while the
    /// budget allows; one with the id and shape of a finalized entry is
    /// merged into it; past the budget a communicator merges into one of
    /// its shape, and with none its collectives are counted as dropped.
    /// Nothing is lost silently and the file stays under 1 MiB.
    #[test]
    fn finalized_communicators_are_kept_within_the_budget() {
        let mut p = Process::new();
        p.archive_comm(info(1, 1), vec![rec(64, 3), rec(128, 1)]);
        p.archive_comm(info(2, 1), vec![rec(64, 2)]);
        p.archive_comm(info(1, 1), vec![rec(64, 5), rec(256, 1)]);
        assert_eq!(p.finished.len(), 2);
        let of = |p: &Process, c: u16, n: u64| {
            p.archive
                .iter()
                .find(|r| r.comm == c && r.n_bytes == n)
                .map(|r| r.count)
        };
        assert_eq!(of(&p, 0, 64), Some(8));
        assert_eq!(of(&p, 0, 256), Some(1));
        assert_eq!(of(&p, 1, 64), Some(2));
        // Fill the budget with 2-node communicators of many records.
        let big: Vec<TraceRecord> = (0..1000).map(|i| rec(i * 8 + 8, 1)).collect();
        let mut id = 100;
        while p.archive_bytes + 1000 * TRACE_RECORD_LEN + 64 <= ARCHIVE_BUDGET {
            p.archive_comm(info(id, 2), big.clone());
            id += 1;
        }
        let entries = p.finished.len();
        p.archive_comm(info(id, 2), big.clone());
        assert_eq!(p.finished.len(), entries, "merged by shape");
        let dropped = DROPPED_TABLE_FULL.load(Ordering::Relaxed);
        p.archive_comm(info(id + 1, 64), big.clone());
        assert_eq!(p.finished.len(), entries, "no 64-node entry to merge into");
        assert!(DROPPED_TABLE_FULL.load(Ordering::Relaxed) >= dropped + 1000);
        assert!(p.archive_bytes <= ARCHIVE_BUDGET);
        let comms: Vec<_> = p.finished.iter().map(CommInfo::file_entry).collect();
        let head = TraceHead {
            profiler_abi: 6,
            ..TraceHead::default()
        };
        let bytes = encode(&head, &comms, &p.archive).unwrap();
        assert!(bytes.len() <= MAX_TRACE_LEN);
    }

    /// One communicator finalizing (its bins moved out, tombstones left)
    /// while another records on two threads: the other loses and gains
    /// nothing (a key claimed twice in the race is merged, as the writer
    /// does), and each retire moves out exactly what was added.
    #[test]
    fn retiring_one_communicator_while_another_records_loses_nothing() {
        let _bins = BIN_TESTS.lock().unwrap_or_else(|e| e.into_inner());
        let key = |comm, n| {
            Key::new(
                comm,
                Coll::Broadcast,
                n,
                Algo::Tree,
                Proto::LL128,
                8,
                Source::Table,
            )
            .unwrap()
        };
        const PER_THREAD: u64 = 30_000;
        const KEYS: u64 = 300;
        let writers: Vec<_> = (0..2)
            .map(|_| {
                std::thread::spawn(move || {
                    for i in 0..PER_THREAD {
                        aggregate(key(57, 64 * (i % KEYS + 1)), 1000);
                    }
                })
            })
            .collect();
        let retirer = std::thread::spawn(move || {
            for round in 0..100u64 {
                for n in 0..KEYS {
                    aggregate(key(56, 8 * (n + round % 3 + 1)), 7);
                }
                let recs = take_bins(56);
                assert_eq!(recs.iter().map(|r| r.count).sum::<u64>(), KEYS);
            }
        });
        for w in writers {
            w.join().unwrap();
        }
        retirer.join().unwrap();
        let mut per_key: std::collections::HashMap<u64, u64> = std::collections::HashMap::new();
        for b in &BIN_TABLE {
            let k = b.key.load(Ordering::Acquire);
            if k & KEY_VALID != 0 && Key(k).comm() == 57 {
                *per_key.entry(k).or_default() += b.count.load(Ordering::Acquire);
            }
        }
        assert_eq!(per_key.len() as u64, KEYS);
        assert!(per_key.values().all(|&c| c == 2 * PER_THREAD / KEYS));
        assert_eq!(
            take_bins(57).iter().map(|r| r.count).sum::<u64>(),
            2 * PER_THREAD
        );
    }

    /// The header names the platform and GPU of the table that ran (its
    /// metadata), so that the compiler can tell another cluster's traces.
    #[test]
    fn the_trace_header_names_the_tables_platform_and_gpu() {
        let d = tempfile::tempdir().unwrap();
        let (path, tmp) = file_names(d.path(), "h", 8, 0xabd);
        let p = Process {
            dir: Some(d.path().to_path_buf()),
            host: "h".into(),
            job: String::new(),
            nccl_version: 23007,
            abi: 6,
            table_digest: Some(0x42),
            platform: "dgx-h100".into(),
            gpu: "NVIDIA H100 80GB HBM3".into(),
            sweep: Some(0x5eed),
            pid: 8,
            nonce: 0xabd,
            ..Process::new()
        };
        write_file(&p, &path, &tmp, 8).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        let t = dyncc_tables::Trace::from_bytes(&bytes).unwrap();
        assert_eq!(t.head().platform, "dgx-h100");
        assert_eq!(t.head().gpu, "NVIDIA H100 80GB HBM3");
        assert_eq!(t.head().sweep, Some(0x5eed));
    }
}
