//! Tracing whose cost stops: lowering NCCL's profiler event mask once
//! every shape this process's recording ranks have seen has the evidence
//! the compiler needs, and raising it again for a new shape.
//!
//! NCCL re-reads its process-wide event mask (`ncclProfilerEventMask`,
//! the `int` every profiler `init` is handed) on every collective call
//! (runtime/README.md, "Traces", cites file:line per release), so bits a
//! recording rank's `init` added can be taken away later and given back.
//! A shape is (communicator, collective, size bucket) as rank 0's tuner
//! sees it; its evidence is [`MIN_CALLS_PER_SIDE`] recorded `Coll` events
//! for each side that ran there (NCCL's choice, the table's, an explored
//! setting). Only the bits dyncc added are ever taken away; an explored
//! cell keeps them all on; profiler v4 (NCCL 2.27) is never lowered.
//!
//! Counting: `WANTING` is the number of (shape, side) still short of the
//! evidence plus the shapes the tuner saw that nothing recorded yet;
//! `EXPLORING` the explored shapes. Each is changed by the one thread
//! that sees the event (the tuner's for a new shape, the profiler's for a
//! recorded side); the mask is lowered when both reach 0 and raised by a
//! new or explored shape. Lock-free; the mask writes are relaxed atomics on
//! NCCL's `int`, as NCCL's reads are.
//!
//! The bound: wanting evidence alone never holds the events up for good. A
//! shape seen once (a parameter broadcast at start), tuner calls NCCL never
//! launches (`ncclGroupSimulateEnd`) and graph replays (events with no tuner
//! call, so no answer to link) would each keep a shape short of its
//! evidence for the life of the process. So the `Coll` events the recording
//! ranks see while dyncc's bits are up are spent from a budget: the first
//! [`WARM_UP_EVENTS`], then one per [`CALLS_PER_EVENT`] calls rank 0's tuners
//! answered (credited every [`TICK_CALLS`] calls of a collective, carried at
//! most [`WARM_UP_EVENTS`] ahead). Spent, the bits come down though shapes
//! still want; the next credit gives them back while any does. At every
//! moment, events seen <= `WARM_UP_EVENTS` + calls / `CALLS_PER_EVENT`,
//! whatever the job does. Explored shapes are exempt (exploration is spent
//! from the table's own budget, and an explored call not recorded would be
//! spent for nothing).

use core::ffi::c_int;
use core::sync::atomic::{AtomicI32, AtomicI64, AtomicPtr, AtomicU64, Ordering};

pub use dyncc_tables::trace::MIN_CALLS_PER_SIDE;

/// NCCL's event mask (a recording rank's `init` on profiler v5+), or
/// NULL: nothing is lowered.
static MASK: AtomicPtr<c_int> = AtomicPtr::new(core::ptr::null_mut());
/// The bits dyncc added to it (those NCCL or the user had set stay).
static ADDED: AtomicI32 = AtomicI32::new(0);
/// (shape, side) pairs short of the evidence, and shapes seen but not
/// recorded yet.
static WANTING: AtomicI64 = AtomicI64::new(0);
/// Shapes a communicator explores (kept raised while they exist).
static EXPLORING: AtomicI64 = AtomicI64::new(0);
/// `Coll` events the recording ranks have seen while the mask was armed.
static SPENT: AtomicU64 = AtomicU64::new(0);
/// The events the budget allows so far (see the module's doc).
static LIMIT: AtomicU64 = AtomicU64::new(WARM_UP_EVENTS);

/// Events recorded before the budget's rate applies: the warm-up, in which
/// a job's steady shapes get their evidence (5 calls a side; about 100
/// shapes of two sides).
pub const WARM_UP_EVENTS: u64 = 1024;
/// After the warm-up, at most one recorded event per this many calls
/// (0.39 %).
pub const CALLS_PER_EVENT: u64 = 256;
/// Calls of one collective on rank 0's ring between credits (a power of two:
/// the tuner's test is a mask of the ring's head).
pub const TICK_CALLS: usize = 1024;
const _: () = assert!(TICK_CALLS.is_power_of_two() && TICK_CALLS as u64 >= CALLS_PER_EVENT);

/// NCCL's mask as an atomic.
fn mask() -> Option<&'static AtomicI32> {
    let p = MASK.load(Ordering::Acquire);
    // SAFETY: a non-NULL MASK is the `int` NCCL handed a profiler init:
    // its global `ncclProfilerEventMask`, aligned and alive while NCCL is
    // loaded (and NCCL calls this plugin only while it is); NCCL reads and
    // writes it with relaxed atomics too.
    (!p.is_null()).then(|| unsafe { AtomicI32::from_ptr(p) })
}

/// A recording rank's `init` added `bits` to NCCL's mask at `p`; `abi`
/// is the profiler ABI. From profiler v5 (NCCL 2.28) on, the mask may be
/// lowered later; on v4 (2.27) it never is: lowering KernelCh there
/// changes which CUDA-graph-captured collectives NCCL's sequence numbers
/// count in this process partway through the job (runtime/README.md).
///
/// # Safety
/// `p` is NULL or NCCL's event mask, valid while NCCL is loaded.
pub unsafe fn arm(p: *mut c_int, abi: u8, bits: c_int) {
    let lowers = dyncc_tables::ProfilerAbi::get(abi).is_some_and(|a| a.lowers_mask);
    if p.is_null() || !lowers {
        return;
    }
    ADDED.fetch_or(bits, Ordering::Relaxed);
    MASK.store(p, Ordering::Release);
}

/// Gives the bits back (a new or explored shape). Cold: once per shape.
#[cold]
fn raise() {
    if let Some(m) = mask() {
        m.fetch_or(ADDED.load(Ordering::Relaxed), Ordering::Relaxed);
    }
}

/// The budget has events left (see the module's doc).
fn affordable() -> bool {
    SPENT.load(Ordering::Relaxed) < LIMIT.load(Ordering::Relaxed)
}

/// Whether anything holds the bits up now: an explored shape, or a shape
/// wanting evidence while the budget lasts.
fn wanted() -> bool {
    EXPLORING.load(Ordering::Acquire) > 0 || (WANTING.load(Ordering::Acquire) > 0 && affordable())
}

/// Takes the bits away when nothing holds them up. A new shape racing this
/// (its count raised after the check) gives them back at once.
fn maybe_lower() {
    let Some(m) = mask() else { return };
    if wanted() {
        return;
    }
    let bits = ADDED.load(Ordering::Relaxed);
    m.fetch_and(!bits, Ordering::Relaxed);
    if wanted() {
        raise();
    }
}

/// Rank 0's tuner saw a shape for the first time: it wants evidence (now,
/// if the budget has any left; else from the next credit).
#[cold]
pub fn new_shape() {
    WANTING.fetch_add(1, Ordering::AcqRel);
    if affordable() {
        raise();
    }
}

/// `calls` more calls of rank 0's tuner (every [`TICK_CALLS`] of one
/// collective): the budget's credit, and the bits back up if a shape still
/// wants evidence. Cold: once per [`TICK_CALLS`] calls.
#[cold]
pub fn credit(calls: u64) {
    let ahead = SPENT.load(Ordering::Relaxed).saturating_add(WARM_UP_EVENTS);
    let add = calls / CALLS_PER_EVENT;
    // Several rank-0 tuners may credit at once: each adds its own share.
    let _ = LIMIT.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |l| {
        Some(l.saturating_add(add).min(ahead.max(l)))
    });
    if mask().is_some() && WANTING.load(Ordering::Acquire) > 0 && affordable() {
        raise();
    }
}

/// A recording rank saw a `Coll` event: spent from the budget; the bits come
/// down when it is spent and no explored shape holds them.
#[inline]
pub fn spend() {
    let n = SPENT.fetch_add(1, Ordering::Relaxed) + 1;
    if n >= LIMIT.load(Ordering::Relaxed) {
        spent();
    }
}

#[cold]
fn spent() {
    maybe_lower();
}

/// A communicator explores a shape (first call there): kept raised.
#[cold]
pub fn explored_shape() {
    EXPLORING.fetch_add(1, Ordering::AcqRel);
    raise();
}

/// The profiler recorded a side's `n`-th collective at a shape (`first`:
/// the shape's first recorded side, which takes over the shape's own
/// wanting count). Lowers the mask when this completed the last evidence.
pub fn recorded(n: u64, first: bool) {
    if n == 1 && !first {
        WANTING.fetch_add(1, Ordering::AcqRel);
    }
    if n == MIN_CALLS_PER_SIDE && WANTING.fetch_sub(1, Ordering::AcqRel) == 1 {
        maybe_lower();
    }
}

/// A ring went away (its tuner finalized) still wanting `wanting` and
/// exploring `explored` shapes.
pub fn forget(wanting: i64, explored: i64) {
    if wanting == 0 && explored == 0 {
        return;
    }
    WANTING.fetch_sub(wanting, Ordering::AcqRel);
    EXPLORING.fetch_sub(explored, Ordering::AcqRel);
    maybe_lower();
}
