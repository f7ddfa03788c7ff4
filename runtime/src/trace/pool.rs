//! The in-flight pool: collectives between their `Coll` start and their
//! last kernel-channel stop.
//!
//! A `Coll` event takes a slot holding what ran and `1 + nChannels`
//! pending references; the `Coll` stop and each kernel-channel stop give
//! one back, and the last one (whichever thread and order) aggregates the
//! GPU time (first channel start to last channel stop) into the bins and
//! frees the slot. Handles are a slot index and generation ([`Handle`]),
//! checked on every use, so a late event of a closed or evicted collective
//! is ignored; a full pool evicts its oldest collective (counted as
//! dropped). Lock-free, no allocation.

use core::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};

use super::bins::{aggregate, untimed, Key};
use super::{CHANGES, DROPPED_POOL_FULL};

/// Collectives in flight (Coll started, last kernel channel not stopped).
pub const POOL_LEN: usize = 4096;

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
    pub(super) state: AtomicU64,
    pub(super) key: AtomicU64,
    /// Kernel channels NCCL said will run.
    pub(super) expected: AtomicU32,
    /// Take order (a full pool evicts the smallest).
    pub(super) born: AtomicU64,
    pub(super) first_start: AtomicU64,
    pub(super) last_stop: AtomicU64,
}

#[allow(clippy::declare_interior_mutable_const)]
pub(super) const SLOT_EMPTY: Slot = Slot {
    state: AtomicU64::new(0),
    key: AtomicU64::new(0),
    expected: AtomicU32::new(0),
    born: AtomicU64::new(0),
    first_start: AtomicU64::new(u64::MAX),
    last_stop: AtomicU64::new(0),
};
pub(super) static POOL: [Slot; POOL_LEN] = [SLOT_EMPTY; POOL_LEN];
pub(super) static POOL_USED: [AtomicU64; POOL_LEN / 64] =
    [const { AtomicU64::new(0) }; POOL_LEN / 64];
pub(super) static POOL_CURSOR: AtomicUsize = AtomicUsize::new(0);
/// Takes so far (the slots' birth order).
pub(super) static TAKES: AtomicU64 = AtomicU64::new(0);
/// Evictions one take tries before it gives up (others evicted the same
/// slots first).
pub(super) const EVICT_TRIES: usize = 4;

/// A slot's packed `state`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct State {
    pub(super) gen: u32,
    pub(super) started: u16,
    pub(super) pending: u16,
}

impl State {
    pub(super) fn load(s: &Slot) -> State {
        let v = s.state.load(Ordering::Acquire);
        State {
            gen: (v >> 32) as u32,
            started: (v >> 16) as u16,
            pending: v as u16,
        }
    }

    pub(super) fn bits(self) -> u64 {
        (self.gen as u64) << 32 | (self.started as u64) << 16 | self.pending as u64
    }

    /// Replaces `self` (as loaded) by `new`; false when it changed since.
    pub(super) fn replace(self, s: &Slot, new: State) -> bool {
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
    pub(super) index: usize,
    pub(super) gen: u32,
    /// A kernel channel's handle (else the Coll's).
    pub channel: bool,
}

pub(super) const HANDLE_MARK: usize = 0b1000;
pub(super) const HANDLE_FIXED: usize = 0b1110;
pub(super) const HANDLE_INDEX_SHIFT: u32 = 4;
pub(super) const HANDLE_GEN_SHIFT: u32 = 16;
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
    pub(super) fn open(self) -> Option<(&'static Slot, State)> {
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
pub(super) fn fill(i: usize, key: Key, channels: u8) -> Handle {
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
pub(super) fn evict_oldest() -> Option<usize> {
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
pub(super) fn free(i: usize) {
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
