//! The journal: what the tuner answered, for the profiler to link.
//!
//! One ring per tuner context (communicator rank): the tuner writes what it
//! answered for each `getCollInfo` (per collective, a ring of the last
//! [`JOURNAL_LEN`] answers keyed by `nBytes`; one writer, so a plain head
//! store), and the profiler takes answers from it to say who chose what
//! ran. NCCL passes the same `commId` to tuner v5/v6 `init` and profiler
//! v5/v6 `init`, the tuner's `nBytes` for a collective equals what the
//! profiler computes from the `Coll` event (type size x count, x nRanks for
//! AllGather/ReduceScatter), and rank 0's profiler finds rank 0's ring
//! through [`link_rank0`] (both `init`s run on the rank's thread). An
//! answer is taken once; a collective NCCL aggregated with others (one
//! tuner call, `numPipeOps` > 1), one whose pending answers disagree, or
//! one seen through tuner v2-v4 (no `commId`) is recorded as `unknown`,
//! never guessed ([`take_answer`]).

use core::sync::atomic::{
    AtomicBool, AtomicI64, AtomicU16, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering,
};
use std::sync::{Mutex, MutexGuard};

use dyncc_tables::trace::{Source, TraceShape};
use dyncc_tables::{size_bucket, Coll, Decision, Setting, NUM_BUCKETS};

use super::mask::{self, MIN_CALLS_PER_SIDE};
use super::paths::OtherPath;

/// Answers kept per communicator and collective.
pub const JOURNAL_LEN: usize = 16;
/// Tuner contexts (communicator ranks) with a journal at once.
pub const MAX_JOURNALS: usize = 256;

/// Serialises taking and giving back rings (tuner init and finalize only;
/// never taken on `getCollInfo` or an event).
static RINGS: Mutex<()> = Mutex::new(());

fn lock() -> MutexGuard<'static, ()> {
    RINGS.lock().unwrap_or_else(|e| e.into_inner())
}

/// One tuner context's recent answers. Written only by its own context
/// (NCCL calls one communicator's `getCollInfo` from one thread at a
/// time), read by the profiler of the same communicator id.
pub struct Journal {
    /// Per collective: answers written so far (the writer's alone).
    pub(super) heads: [AtomicUsize; 5],
    pub(super) answers: [[AtomicU64; JOURNAL_LEN]; 5],
    /// Per shape (collective, size bucket): calls the tuner answered, one
    /// per collective (aggregated calls are not counted: their size is
    /// several collectives'); the tuner's alone, saturating. The trace's
    /// "calls seen" per shape, and 0 -> 1 is a new shape ([`mask`]).
    pub(super) calls: [[AtomicU32; NUM_BUCKETS]; 5],
    /// Per shape and source (NCCL, table, exploration): `Coll` events the
    /// profiler linked, up to [`MIN_CALLS_PER_SIDE`] (the profiler's alone).
    pub(super) recorded: [[[AtomicU8; 3]; NUM_BUCKETS]; 5],
    /// Per shape and path (symmetric kernel, copy engines): collectives
    /// the profiler saw run where the tuner cannot force (the trace
    /// shape's other paths), saturating at `u16::MAX` like the file's
    /// field. Added to by a CAS that stops at the ceiling: lock-free, and
    /// right whichever of the rank's threads reports the event.
    pub(super) other: [[[AtomicU16; 2]; NUM_BUCKETS]; 5],
    /// Per collective: the buckets this communicator explored (bitmap; the
    /// tuner's alone).
    pub(super) explored: [[AtomicU64; NUM_BUCKETS / 64]; 5],
    /// Per collective: the buckets whose first call added a wanting count
    /// ([`mask::new_shape`]; rank 0's ring only), which the shape's first
    /// recorded side takes over.
    pub(super) wanted: [[AtomicU64; NUM_BUCKETS / 64]; 5],
    /// This ring's share of [`mask`]'s counts, given back when it goes.
    pub(super) wanting: AtomicI64,
    pub(super) exploring: AtomicI64,
}

#[allow(clippy::declare_interior_mutable_const)]
pub(super) const JOURNAL_EMPTY: Journal = Journal {
    heads: [const { AtomicUsize::new(0) }; 5],
    answers: [const { [const { AtomicU64::new(0) }; JOURNAL_LEN] }; 5],
    calls: [const { [const { AtomicU32::new(0) }; NUM_BUCKETS] }; 5],
    recorded: [const { [const { [const { AtomicU8::new(0) }; 3] }; NUM_BUCKETS] }; 5],
    other: [const { [const { [const { AtomicU16::new(0) }; 2] }; NUM_BUCKETS] }; 5],
    explored: [const { [const { AtomicU64::new(0) }; NUM_BUCKETS / 64] }; 5],
    wanted: [const { [const { AtomicU64::new(0) }; NUM_BUCKETS / 64] }; 5],
    wanting: AtomicI64::new(0),
    exploring: AtomicI64::new(0),
};
pub(super) static JOURNALS: [Journal; MAX_JOURNALS] = [JOURNAL_EMPTY; MAX_JOURNALS];
/// Per journal: 0 when free, else its communicator id + 1 (so id 0 is
/// usable). Apart from the rings, so the profiler's search of its
/// communicator's rings reads a few cache lines.
pub(super) static JOURNAL_TAGS: [AtomicU64; MAX_JOURNALS] =
    [const { AtomicU64::new(0) }; MAX_JOURNALS];
/// Per journal: its tuner context is rank 0's (see [`link_rank0`]).
pub(super) static JOURNAL_RANK0: [AtomicBool; MAX_JOURNALS] =
    [const { AtomicBool::new(false) }; MAX_JOURNALS];

/// What this thread's communicator init has done so far: NCCL runs one
/// rank's profiler `init` and tuner `init` on one thread, in one call
/// (`initTransportsRank`: the profiler's first), and the profiler is told
/// the rank but the tuner is not; whichever comes second links them.
#[derive(Clone, Copy)]
pub(super) enum InitLink {
    None,
    /// A rank-0 profiler init of this communicator id waits for its tuner.
    Rank0Profiler(u64),
    /// A tuner init of this communicator id took this ring.
    Tuner(u64, usize),
}

std::thread_local! {
    static INIT_LINK: core::cell::Cell<InitLink> = const { core::cell::Cell::new(InitLink::None) };
}

/// An answer packed in a u64: bit 63 valid, 61-62 source, 41-60 the
/// setting with its chunk ([`Setting::to_answer_word`], [`SETTING_SHIFT`]),
/// 0-40 nBytes (larger sizes never match; the bins keep none that large). An `Explore` answer that ran NCCL's own choice has
/// the word [`NCCL_CHOSE`]; an aggregated call's answer has source
/// `Unknown`. 0: no answer (never written, or taken by the profiler).
pub(super) const ANSWER_VALID: u64 = 1 << 63;
/// Where the setting's word starts: below the source's two bits. A wider
/// setting moves it down and narrows the size field.
const SETTING_SHIFT: u32 = 61 - Setting::ANSWER_WORD_BITS;
pub(super) const ANSWER_BYTES: u64 = (1 << SETTING_SHIFT) - 1;
// The size field holds every size up to 2 TiB (the bins keep up to 64 GiB);
// a new setting field may take it down to 40 bits (1 TiB), no further.
const _: () = assert!(SETTING_SHIFT >= 40);
/// The algorithm number of an exploring call that left the choice to NCCL
/// (no algorithm has it).
pub const ANSWER_NCCL: u8 = 7;
/// The setting word of such a call: [`ANSWER_NCCL`] in the algorithm's bits.
const NCCL_CHOSE: u64 = (ANSWER_NCCL as u64) << 9;
// An eighth NCCL algorithm would make the mark a setting: refuse to build.
const _: () = assert!(Setting::from_word(NCCL_CHOSE).is_none());

/// What the tuner answered for one call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Answer {
    /// Who chose: `Table` when a forced cell was written, `Nccl` when the
    /// table left the call to NCCL, `Explore` when exploration chose,
    /// `Unknown` when the call was an aggregate of several collectives.
    pub source: Source,
    /// The forced setting (for `Table` and `Explore`; `None` for an
    /// exploring call that ran NCCL's choice, and for the other sources).
    pub setting: Option<Setting>,
}

/// The answer a call's record says: `Unknown` when aggregated; `by` (the
/// table, or exploration) when it wrote a forced setting; exploration's
/// NCCL probe (`Default`) marked [`NCCL_CHOSE`]; else NCCL's own choice.
#[inline]
fn answer(n_bytes: usize, aggregated: bool, d: Decision, applied: bool, by: Source) -> u64 {
    match (d, applied) {
        _ if aggregated => pack(n_bytes, Source::Unknown, 0),
        (Decision::Force(s), true) => pack(n_bytes, by, s.to_answer_word()),
        (Decision::Default, _) if by == Source::Explore => {
            pack(n_bytes, Source::Explore, NCCL_CHOSE)
        }
        _ => pack(n_bytes, Source::Nccl, 0),
    }
}

/// Packs one answer (see [`ANSWER_VALID`] for the layout). `source` has
/// two bits here: never `ExploreNccl`, which the profiler derives from
/// [`NCCL_CHOSE`].
#[inline]
pub(super) fn pack(n_bytes: usize, source: Source, setting: u64) -> u64 {
    ANSWER_VALID
        | (source as u64) << 61
        | (setting & ((1 << Setting::ANSWER_WORD_BITS) - 1)) << SETTING_SHIFT
        | (n_bytes as u64 & ANSWER_BYTES)
}

pub(super) fn unpack(v: u64) -> Answer {
    let source = Source::from_u8(((v >> 61) & 3) as u8).unwrap_or(Source::Unknown);
    let forced = matches!(source, Source::Table | Source::Explore);
    Answer {
        source,
        setting: if forced {
            Setting::from_answer_word(v >> SETTING_SHIFT)
        } else {
            None
        },
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
        let v = answer(n_bytes, aggregated, d, applied, Source::Table);
        self.publish(coll, v, n_bytes, !aggregated);
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
        let v = answer(n_bytes, aggregated, chosen, applied, Source::Explore);
        self.publish(coll, v, n_bytes, !aggregated);
        self.explore_at(coll, n_bytes);
    }

    /// Appends `v` to `coll`'s ring: the entry first, then the head
    /// (Release), so a reader that sees the head sees the entry. This
    /// context is the only writer, so a plain load and store of the head
    /// is exact (an atomic add would cost more than the rest of
    /// `getCollInfo`).
    ///
    /// `count`: also counts the call at its shape (the tuner's own
    /// counter: a load and a store); the first call of a shape is a new
    /// shape ([`Journal::new_shape`], out of line).
    #[inline]
    pub(super) fn publish(&self, coll: i32, v: u64, n_bytes: usize, count: bool) {
        let c = coll as u32 as usize;
        let (Some(head), Some(ring), Some(calls)) =
            (self.heads.get(c), self.answers.get(c), self.calls.get(c))
        else {
            return;
        };
        let h = head.load(Ordering::Relaxed);
        ring[h % JOURNAL_LEN].store(v, Ordering::Relaxed);
        head.store(h.wrapping_add(1), Ordering::Release);
        if h % mask::TICK_CALLS == mask::TICK_CALLS - 1 {
            self.tick();
        }
        if count {
            // A u8 bucket indexes a 256-entry row: no bounds check.
            let at = &calls[size_bucket(n_bytes as u64) as usize];
            let n = at.load(Ordering::Relaxed);
            at.store(n.saturating_add(1), Ordering::Relaxed);
            if n == 0 {
                self.new_shape(c, size_bucket(n_bytes as u64) as usize);
            }
        }
    }

    /// This ring's index in [`JOURNALS`].
    fn index(&self) -> usize {
        (self as *const Journal as usize - JOURNALS.as_ptr() as usize) / size_of::<Journal>()
    }

    /// Another [`mask::TICK_CALLS`] calls of one collective: on rank 0's
    /// ring, the tracing budget's credit ([`mask::credit`]).
    #[cold]
    #[inline(never)]
    fn tick(&self) {
        if JOURNAL_RANK0[self.index()].load(Ordering::Relaxed) {
            mask::credit(mask::TICK_CALLS as u64);
        }
    }

    /// A shape this ring had not seen: on rank 0's ring (the one the
    /// profiler records through), it wants evidence ([`mask::new_shape`]).
    #[cold]
    #[inline(never)]
    fn new_shape(&self, coll: usize, bucket: usize) {
        if JOURNAL_RANK0[self.index()].load(Ordering::Relaxed) {
            self.wanted[coll][bucket / 64].fetch_or(1 << (bucket % 64), Ordering::Relaxed);
            self.wanting.fetch_add(1, Ordering::Relaxed);
            mask::new_shape();
        }
    }

    /// An exploring call at `(coll, n_bytes)`: the first at its shape keeps
    /// the mask raised while this ring lives ([`mask::explored_shape`]).
    #[inline]
    fn explore_at(&self, coll: i32, n_bytes: usize) {
        let Some(bits) = self.explored.get(coll as u32 as usize) else {
            return;
        };
        let b = size_bucket(n_bytes as u64) as usize;
        let word = &bits[b / 64];
        let w = word.load(Ordering::Relaxed);
        if w & (1 << (b % 64)) == 0 {
            word.store(w | 1 << (b % 64), Ordering::Relaxed);
            self.exploring.fetch_add(1, Ordering::Relaxed);
            mask::explored_shape();
        }
    }

    /// The profiler linked a `Coll` event at `(coll, n_bytes)` to `source`
    /// (rank 0's ring): counts it for its side's evidence.
    fn note_recorded(&self, coll: usize, n_bytes: u64, source: Source) {
        let side = match source {
            Source::Nccl => 0,
            Source::Table => 1,
            Source::Explore | Source::ExploreNccl => 2,
            // NCCL overrode the answer: evidence for neither side.
            Source::Unknown | Source::RanOther | Source::RanOtherChannels => return,
        };
        let Some(row) = self.recorded.get(coll) else {
            return;
        };
        let sides = &row[size_bucket(n_bytes) as usize];
        let n = sides[side].load(Ordering::Relaxed) as u64;
        if n >= MIN_CALLS_PER_SIDE {
            return;
        }
        let first = sides.iter().all(|s| s.load(Ordering::Relaxed) == 0);
        sides[side].store(n as u8 + 1, Ordering::Relaxed);
        // Only shapes whose first call added a wanting count have one to
        // take over (a shape seen only in aggregated calls, or through a
        // ring not known as rank 0's, has none).
        let b = size_bucket(n_bytes) as usize;
        let seen = self.wanted[coll][b / 64].load(Ordering::Relaxed) & 1 << (b % 64) != 0;
        let delta = match n + 1 {
            1 if first && seen => 0,
            1 => 1,
            _ => 0,
        } - (n + 1 == MIN_CALLS_PER_SIDE) as i64;
        self.wanting.fetch_add(delta, Ordering::Relaxed);
        mask::recorded(n + 1, first && seen);
    }

    /// A collective at `(coll, n_bytes)` ran on `path`: counted at its
    /// shape, saturating.
    fn note_other_path(&self, coll: usize, n_bytes: u64, path: OtherPath) {
        let Some(row) = self.other.get(coll) else {
            return;
        };
        let at = &row[size_bucket(n_bytes) as usize][path as usize];
        let _ = at.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_add(1));
    }

    /// The shapes the tuner answered calls at (the trace's "calls seen"),
    /// with the collectives of each that ran on another path; `comm` is
    /// left 0 for the writer to name. A shape with no answered call has
    /// no entry (the file's shapes have calls >= 1): its other paths are
    /// in the process-wide block only.
    pub(super) fn shape_calls(&self) -> impl Iterator<Item = TraceShape> + '_ {
        self.calls.iter().enumerate().flat_map(move |(c, row)| {
            row.iter().enumerate().filter_map(move |(b, n)| {
                let n = n.load(Ordering::Relaxed) as u64;
                let coll = Coll::from_nccl(c as u32).filter(|_| n > 0)?;
                let other = &self.other[c][b];
                Some(TraceShape {
                    symmetric: other[OtherPath::Symmetric as usize].load(Ordering::Relaxed),
                    copy_engine: other[OtherPath::CopyEngine as usize].load(Ordering::Relaxed),
                    ..TraceShape::new(0, coll, b as u8, n)
                })
            })
        })
    }

    /// The oldest answer for `(coll, n_bytes)` still in this ring, taken
    /// (cleared, unless the writer has just reused its slot), and whether
    /// every answer for it in the ring agrees.
    pub(super) fn take_oldest(&self, coll: usize, n_bytes: u64) -> Option<(u64, bool)> {
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

    pub(super) fn clear(&self) {
        for (h, ring) in self.heads.iter().zip(&self.answers) {
            h.store(0, Ordering::Relaxed);
            for a in ring {
                a.store(0, Ordering::Relaxed);
            }
        }
        for row in &self.calls {
            for n in row {
                n.store(0, Ordering::Relaxed);
            }
        }
        for row in &self.recorded {
            for sides in row {
                for s in sides {
                    s.store(0, Ordering::Relaxed);
                }
            }
        }
        for row in &self.other {
            for paths in row {
                for n in paths {
                    n.store(0, Ordering::Relaxed);
                }
            }
        }
        for bits in self.explored.iter().chain(&self.wanted) {
            for w in bits {
                w.store(0, Ordering::Relaxed);
            }
        }
        self.wanting.store(0, Ordering::Relaxed);
        self.exploring.store(0, Ordering::Relaxed);
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
    take_answer_in(profiled_ring(comm_id)?, coll, n_bytes)
}

/// The ring the profiler of communicator `comm_id` reads: rank 0's (the
/// one [`link_rank0`] marked), or the communicator's only ring in this
/// process. Scans the ring tags (a few cache lines); no lock.
pub fn profiled_ring(comm_id: u64) -> Option<&'static Journal> {
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
    rank0.or(only.filter(|_| rings == 1)).map(|i| &JOURNALS[i])
}

/// [`take_answer`] on a ring [`profiled_ring`] found.
pub fn take_answer_in(ring: &Journal, coll: Coll, n_bytes: u64) -> Option<Answer> {
    if n_bytes > ANSWER_BYTES {
        return None;
    }
    let (v, agree) = ring.take_oldest(coll as usize, n_bytes)?;
    let a = unpack(v);
    (agree && a.source != Source::Unknown).then_some(a)
}

/// The profiler recorded a `Coll` event at `(coll, n_bytes)` whose source
/// it settled (after checking NCCL ran what was forced): counts it toward
/// its side's evidence on `ring` ([`mask`]).
pub fn note_recorded(ring: &Journal, coll: Coll, n_bytes: u64, source: Source) {
    ring.note_recorded(coll as usize, n_bytes, source);
}

/// The profiler saw a collective at `(coll, n_bytes)` run on `path` (a
/// symmetric kernel, the copy engines): counted at its shape on `ring`
/// for the trace's per-shape other paths. No lock, no allocation.
pub fn note_other_path(ring: &Journal, coll: Coll, n_bytes: u64, path: OtherPath) {
    ring.note_other_path(coll as usize, n_bytes, path);
}

/// A profiler `init` of communicator `comm_id` (every rank, tracing on):
/// links rank 0's profiler to the ring its tuner context takes on this
/// thread, before or after (see `InitLink`).
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
/// `keep(comm_id, ring)` runs first, under the journals' lock, when the
/// ring was rank 0's (the writer keeps its calls per shape: passed in so
/// the journal stays below the writer).
pub fn journal_release_with(j: &'static Journal, keep: impl FnOnce(u64, &Journal)) {
    let _g = lock();
    let i = j.index();
    if let Some(t) = JOURNAL_TAGS.get(i) {
        if JOURNAL_RANK0[i].load(Ordering::Relaxed) {
            keep(t.load(Ordering::Relaxed).wrapping_sub(1), j);
        }
        t.store(0, Ordering::Release);
        JOURNAL_RANK0[i].store(false, Ordering::Relaxed);
    }
    mask::forget(
        j.wanting.swap(0, Ordering::Relaxed),
        j.exploring.swap(0, Ordering::Relaxed),
    );
}
