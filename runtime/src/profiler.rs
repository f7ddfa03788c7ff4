//! NCCL's profiler interface: the exported `ncclProfiler_v1` .. `_v7`
//! statics, so the same library is NCCL's tuner and profiler
//! (`NCCL_PROFILER_PLUGIN=dyncc` finds `libnccl-profiler-dyncc.so`).
//!
//! Without `DYNCC_TRACE` every `init` leaves NCCL's event mask as it is
//! and nothing else happens. With `DYNCC_TRACE=DIR` (v4-v6, which carry GPU
//! timestamps) a communicator's rank 0 records what ran (see
//! [`crate::trace`]) and its `init` adds `Coll` and `KernelCh` to the mask;
//! NCCL's mask is process-wide, so the other ranks get the events too and
//! return NULL handles. No `init` ever lowers the mask; from profiler v5
//! on, the bits an `init` added are taken away once every shape seen has
//! its evidence and given back for a new shape ([`crate::trace::mask`];
//! `DYNCC_TRACE_ALL=1` keeps them). On v4 (NCCL 2.27,
//! which starts Coll events only under a non-NULL Group handle) a
//! recording rank's Group events get a constant handle. v1-v3 have no GPU
//! timestamps: one WARN, no events. The event callbacks never allocate, lock, log or block; any
//! failure at init is one WARN and a context that records nothing (the
//! job goes on).
//!
//! Profiler v7 (NCCL 2.31+) also says when a collective ran a symmetric
//! kernel (`isSymColl`) and carries each call's `userTag`; a recording
//! rank's v7 `init` adds `CeColl` to the mask too. A symmetric-kernel or
//! copy-engine collective takes its tuner answer off the ring (so no later
//! call is linked to it) and is counted apart ([`crate::trace::paths`]),
//! never recorded as a classic (algorithm, protocol). From 2.31 NCCL's
//! KernelCh (and KernelPhase) events come from a profiler thread of their
//! own, before or after the Coll stop: the pool's references make any
//! order count once; a KernelPhase event (a channel's child) gets NULL.

use core::ffi::{c_char, c_int, c_void};
use core::sync::atomic::{AtomicBool, Ordering};
use std::path::PathBuf;

use dyncc_tables::trace::Source;
use dyncc_tables::{datatype_size, Algo, Coll, ProfilerAbi, Proto, Setting};

use crate::ffi::{ncclDebugLogger_t, ncclResult_t, NCCL_SUCCESS};
use crate::guard::{c_bytes, ffi_guard, write_out, PLUGIN_NAME};
use crate::log::{Escaped, Logger};
use crate::nccl_version;
use crate::profiler_ffi::*;
use crate::trace::{self, Answer, Handle, Key, OtherPath};

/// One communicator rank's profiler state.
pub struct ProfContext {
    /// Set on the recording rank (its communicator index in the file).
    recording: Option<u8>,
    /// The communicator id whose tuner rings link answers (v5/v6).
    comm_id: Option<u64>,
    n_ranks: u64,
}

/// The events dyncc asks for when tracing.
const TRACE_MASK: c_int = (PROFILE_COLL | PROFILE_KERNEL_CH) as c_int;

/// The events asked for under profiler `abi`: from v7 also `CeColl`, so a
/// copy-engine collective's tuner answer is taken off the ring and the
/// collective counted apart.
fn trace_mask(abi: u8) -> c_int {
    // Not `row`: `abi` comes from an init at run time.
    match ProfilerAbi::get(abi) {
        Some(a) if a.sym_and_tags => TRACE_MASK | PROFILE_CE_COLL as c_int,
        _ => TRACE_MASK,
    }
}

/// The ABI table's row of profiler version `v` (checked when compiled).
const fn row(v: u8) -> &'static ProfilerAbi {
    match ProfilerAbi::get(v) {
        Some(a) => a,
        None => panic!("a profiler ABI NCCL never defined"),
    }
}
/// The rows of the statics' versions with GPU timestamps (v6 is v5's
/// shape: `start_v5` serves both).
const V4: &ProfilerAbi = row(4);
const V5: &ProfilerAbi = row(5);
const V7: &ProfilerAbi = row(7);
const _: () = assert!(V4.byte_type && !V5.byte_type && !row(6).needs_group_handle);

/// `ncclProfileGroup`: a launched plan (its collectives' parent on 2.27).
const PROFILE_GROUP: u64 = 1 << 0;

/// What a recording rank's Group event gets on profiler v4 (NCCL 2.27):
/// 2.27 starts (and stops) a plan's Coll events only under a non-NULL
/// Group handle (`ncclProfilerStartTaskEvents`, `if
/// (plan->groupEventHandle)`; 2.28 dropped the condition; see
/// runtime/README.md, "Traces"). A constant, so nothing is allocated or
/// freed, and not a pool handle (bit 2 set: [`Handle::from_ptr`] refuses
/// it), so NCCL's `stopEvent` on it, and a KernelCh naming it as parent,
/// change nothing.
const GROUP_HANDLE: usize = 0b100;
const _: () = assert!(GROUP_HANDLE & 0b1110 != 0b1000);

/// One WARN per process for an unusable DYNCC_TRACE directory.
static WARNED_DIR: AtomicBool = AtomicBool::new(false);

/// `DYNCC_TRACE_ALL=1`: record every collective, never lowering NCCL's
/// event mask once the shapes have their evidence (the cost of tracing then
/// never stops). Read at init only.
fn trace_all() -> bool {
    std::env::var_os("DYNCC_TRACE_ALL").is_some_and(|v| v == "1")
}

fn c_str(p: *const c_char) -> Option<&'static [u8]> {
    // SAFETY: NCCL passes NULL, NUL-terminated static strings
    // (ncclFuncToString and friends) or the communicator's name, valid for
    // the call (its bytes are copied before init returns).
    unsafe { c_bytes(p) }
}

/// The bytes of a C string NCCL passes, if NUL-terminated within `max`
/// bytes (never read past them; `None` for NULL or a longer string).
///
/// # Safety
/// `p` is NULL or points at a NUL-terminated string, live for the call.
unsafe fn c_bytes_bounded<'a>(p: *const c_char, max: usize) -> Option<&'a [u8]> {
    if p.is_null() {
        return None;
    }
    let mut len = 0;
    // SAFETY: reads stop at the NUL, which the caller says is there; at
    // most `max` bytes otherwise.
    while len < max && unsafe { *p.add(len) } != 0 {
        len += 1;
    }
    // SAFETY: the `len` bytes just read are live for the call.
    (len < max).then(|| unsafe { core::slice::from_raw_parts(p.cast::<u8>(), len) })
}

/// A name NCCL passes (`ncclFuncToString`, `ncclAlgoToString`, ...) as
/// text for the tables crate's parsers, which own NCCL's spellings.
fn c_name(p: *const c_char) -> Option<&'static str> {
    core::str::from_utf8(c_str(p)?).ok()
}

/// Shared `init` of v4-v6.
#[allow(clippy::too_many_arguments)]
unsafe fn init_common(
    ctx: *mut *mut c_void,
    mask: *mut c_int,
    comm_id: Option<u64>,
    comm_hash: u64,
    name: *const c_char,
    n_nodes: c_int,
    n_ranks: c_int,
    rank: c_int,
    log: ncclDebugLogger_t,
    abi: u8,
) -> ncclResult_t {
    let log = Logger(log);
    // SAFETY: NCCL passes a writable context pointer (or NULL).
    unsafe { write_out(ctx, core::ptr::null_mut()) };
    let want = ffi_guard(None, || {
        let dir = trace::configured()?;
        trace::say_pending(log);
        // A relative directory is the one it names now: the job may change
        // its working directory before the file is written.
        let dir = std::path::absolute(&dir).unwrap_or_else(|_| PathBuf::from(dir));
        Some(init_tracing(
            dir, comm_id, comm_hash, name, n_nodes, n_ranks, rank, log, abi,
        ))
    });
    if let Some(Some(c)) = want {
        // NCCL's mask is process-wide (one int every communicator's init
        // is handed): raise it for the events a recording rank needs, and
        // never lower it (another communicator, or NCCL itself, may want
        // events; the other ranks' events simply get NULL handles).
        if c.recording.is_some() && !mask.is_null() {
            // SAFETY: NCCL passes its event mask, an aligned int that lives
            // while NCCL is loaded, which NCCL reads with relaxed atomics.
            let m = unsafe { core::sync::atomic::AtomicI32::from_ptr(mask) };
            let want = trace_mask(abi);
            let before = m.fetch_or(want, Ordering::Relaxed);
            // Only the bits added here are ever taken away again, only
            // from profiler v5 on, and never with DYNCC_TRACE_ALL=1
            // (trace::mask).
            if !trace_all() {
                // SAFETY: as above.
                unsafe { trace::mask::arm(mask, abi, want & !before) };
            }
        }
        if !ctx.is_null() {
            // SAFETY: as above.
            unsafe { ctx.write(Box::into_raw(Box::new(c)).cast()) };
        }
    }
    NCCL_SUCCESS
}

#[allow(clippy::too_many_arguments)]
fn init_tracing(
    dir: PathBuf,
    comm_id: Option<u64>,
    comm_hash: u64,
    name: *const c_char,
    n_nodes: c_int,
    n_ranks: c_int,
    rank: c_int,
    log: Logger,
    abi: u8,
) -> Option<ProfContext> {
    if let Some(id) = comm_id {
        trace::link_rank0(id, rank);
    }
    if let Err(why) = trace::dir_usable(&dir) {
        if !WARNED_DIR.swap(true, Ordering::Relaxed) {
            let shown = dir.to_string_lossy();
            log.warn(format_args!(
                "dyncc: DYNCC_TRACE={} cannot be written ({}); no trace is recorded and the job \
                 goes on",
                Escaped(&shown),
                Escaped(&why)
            ));
        }
        return None;
    }
    let n_ranks_u = u32::try_from(n_ranks).unwrap_or(0);
    let mut ctx = ProfContext {
        recording: None,
        comm_id,
        n_ranks: n_ranks_u as u64,
    };
    if rank != 0 {
        return Some(ctx);
    }
    let name = String::from_utf8_lossy(c_str(name).unwrap_or(b"")).into_owned();
    let running = nccl_version::running(log)
        .map(|v| v.major * 10000 + v.minor * 100 + v.patch)
        .unwrap_or(0);
    match trace::register(
        &dir,
        trace::CommFacts {
            comm_id: comm_id.unwrap_or(comm_hash),
            n_nodes: u32::try_from(n_nodes).unwrap_or(0),
            n_ranks: n_ranks_u,
            rank: 0,
            name: &name,
            abi,
            nccl_version: running,
        },
        log,
    ) {
        Ok(r) => {
            ctx.recording = Some(r.comm);
            log.info(format_args!(
                "dyncc: tracing communicator {:#018x} ({} nodes, {} ranks) into DYNCC_TRACE={}",
                comm_id.unwrap_or(comm_hash),
                n_nodes,
                n_ranks,
                Escaped(&dir.to_string_lossy())
            ));
        }
        // Said once per process; the rest are counted and said when the
        // recording communicators are finalized (trace::retire).
        Err(r) if r.first => log.warn(format_args!(
            "dyncc: not tracing communicator {:#018x}: this process records {} communicators \
             at once, the most it can (a finalized one frees its place); later ones are \
             counted, not said each time; the job goes on",
            comm_id.unwrap_or(comm_hash),
            trace::MAX_COMMS
        )),
        Err(_) => {}
    }
    Some(ctx)
}

/// The `Coll` event of a recording rank: what ran, who chose it, a slot
/// (none for `nChannels` 0: counted as untimed, see [`crate::trace`]).
fn coll_start(ctx: &ProfContext, comm: u8, d: &ncclProfilerCollDescr) -> *mut c_void {
    // Every event a recording rank sees is spent from tracing's budget,
    // linked or not (trace::mask).
    trace::mask::spend();
    let (Some(coll), Some(size), Some(algo), Some(proto)) = (
        c_name(d.func).and_then(Coll::parse),
        c_str(d.datatype).and_then(datatype_size),
        c_name(d.algo).and_then(Algo::parse),
        c_name(d.proto).and_then(Proto::parse),
    ) else {
        return core::ptr::null_mut();
    };
    // What NCCL passes the tuner: type size x the larger of send and
    // receive count (x nRanks for the gathering and scattering ones).
    let per = match coll {
        Coll::AllGather | Coll::ReduceScatter => ctx.n_ranks.max(1),
        _ => 1,
    };
    let n_bytes = size.saturating_mul(d.count as u64).saturating_mul(per);
    let channels = d.nChannels.min(64);
    let mut ran = Setting::new(algo, proto).with_channels(channels);
    let ring = ctx.comm_id.and_then(trace::profiled_ring);
    let source = match ring.and_then(|r| trace::take_answer_in(r, coll, n_bytes)) {
        None => Source::Unknown,
        // Exploration left the choice to NCCL: whatever ran is its choice.
        Some(Answer {
            source: Source::Explore,
            setting: None,
        }) => Source::ExploreNccl,
        Some(Answer {
            source: s @ (Source::Table | Source::Explore),
            setting: Some(set),
        }) => {
            // Who chose is what the plugin answered: the forced setting ran
            // only if NCCL ran its algorithm, protocol and (when one was
            // forced) channel count. Otherwise NCCL overrode the answer
            // (the job's NCCL_ALGO/NCCL_PROTO, a channel cap, a path the
            // tuner cannot choose): never NCCL's own choice, whose
            // measurements every gain is read against.
            if set.ran_as(&ran) {
                // And with the chunk the plugin answered: getChunkSize
                // answers the chunk of this same answer for the algorithm
                // and protocol that ran (`Decision::chunk_for`), and NCCL's
                // events do not say the chunk.
                ran = set.with_channels(ran.channels);
                s
            } else if Setting::new(set.algo, set.proto).ran_as(&ran) {
                Source::RanOtherChannels
            } else {
                Source::RanOther
            }
        }
        Some(a) => a.source,
    };
    if let Some(r) = ring {
        // Evidence for the shape's side: the mask comes down once every
        // shape has enough (trace::mask).
        trace::note_recorded(r, coll, n_bytes, source);
    }
    // Seven other chunks answered in this process hold every chunk index
    // of the bin key: the collective is recorded, as one whose origin
    // cannot be told.
    let Some(key) = Key::new(comm, coll, n_bytes, ran, source)
        .or_else(|| Key::new(comm, coll, n_bytes, ran.without_chunk(), Source::Unknown))
    else {
        return core::ptr::null_mut();
    };
    if channels == 0 {
        trace::untimed();
        return core::ptr::null_mut();
    }
    match trace::slot_take(key, channels) {
        Some(h) => h.to_ptr(),
        None => core::ptr::null_mut(),
    }
}

/// A collective of a recording rank that ran a path the tuner cannot
/// choose (v7: a symmetric kernel, or the copy engines): its tuner answer
/// is taken off the ring, so no later collective of the same size is
/// linked to it, and it is counted apart; never a record (no handle).
fn other_path_start(
    ctx: &ProfContext,
    path: OtherPath,
    func: *const c_char,
    count: usize,
    datatype: *const c_char,
) {
    if ctx.recording.is_none() {
        return;
    }
    trace::mask::spend();
    let (Some(coll), Some(size)) = (
        c_name(func).and_then(Coll::parse),
        c_str(datatype).and_then(datatype_size),
    ) else {
        return;
    };
    let per = match coll {
        Coll::AllGather | Coll::ReduceScatter => ctx.n_ranks.max(1),
        _ => 1,
    };
    let n_bytes = size.saturating_mul(count as u64).saturating_mul(per);
    if let Some(r) = ctx.comm_id.and_then(trace::profiled_ring) {
        // What was answered did not run: nothing to compare it with.
        let _ = trace::take_answer_in(r, coll, n_bytes);
        // NCCL's own side of the shape ran, as far as the mask is
        // concerned (no record is written): a shape NCCL always runs this
        // way would otherwise keep the mask raised for good.
        trace::note_recorded(r, coll, n_bytes, Source::Nccl);
        trace::note_other_path(r, coll, n_bytes, path);
    }
    trace::other_path_ran(path);
}

/// Shared `startEvent` body: `type_` and the descriptor's common part.
/// `group`: a recording rank's Group events get [`GROUP_HANDLE`] (v4).
///
/// # Safety
/// `ctx` is NULL or a live `ProfContext`; `u` is the descriptor's union,
/// valid for the member `type_` names.
unsafe fn start(
    ctx: *mut c_void,
    handle: *mut *mut c_void,
    type_: u64,
    parent: *mut c_void,
    u: *const ncclProfilerDescrUnion,
    group: bool,
) {
    if handle.is_null() {
        return;
    }
    let mut h = core::ptr::null_mut();
    if type_ == PROFILE_GROUP && group && !ctx.is_null() {
        // SAFETY: a non-NULL ctx is the ProfContext init made.
        if unsafe { &*ctx.cast::<ProfContext>() }.recording.is_some() {
            h = GROUP_HANDLE as *mut c_void;
        }
    } else if type_ == PROFILE_COLL && !ctx.is_null() {
        // SAFETY: a non-NULL ctx is the ProfContext init made.
        let c = unsafe { &*ctx.cast::<ProfContext>() };
        if let Some(comm) = c.recording {
            // SAFETY: a Coll event's union holds `coll`.
            h = coll_start(c, comm, unsafe { &(*u).coll });
        }
    } else if type_ == PROFILE_KERNEL_CH {
        // NCCL passes back the Coll's handle as the channel's parent; it is
        // only a number to dyncc, checked before use.
        if let Some(p) = Handle::from_ptr(parent) {
            // SAFETY: a KernelCh event's union holds `kernelCh`.
            let t = unsafe { (*u).kernelCh.pTimer };
            if let Some(c) = trace::channel_start(p, t) {
                h = c.to_ptr();
            }
        }
    }
    // SAFETY: non-NULL, NCCL's handle out-pointer.
    unsafe { handle.write(h) };
}

unsafe extern "C" fn stop_event(h: *mut c_void) -> ncclResult_t {
    ffi_guard((), || {
        if let Some(h) = Handle::from_ptr(h) {
            trace::release(h);
        }
    });
    NCCL_SUCCESS
}

unsafe extern "C" fn record_event_state(
    h: *mut c_void,
    state: c_int,
    args: *mut ncclProfilerEventStateArgs,
) -> ncclResult_t {
    ffi_guard((), || {
        if state != KERNEL_CH_STOP || args.is_null() {
            return;
        }
        if let Some(h) = Handle::from_ptr(h) {
            // SAFETY: non-NULL; NCCL's state args for a kernel stop.
            trace::channel_stop(h, unsafe { (*args).pTimer });
        }
    });
    NCCL_SUCCESS
}

unsafe extern "C" fn start_v4(
    ctx: *mut c_void,
    handle: *mut *mut c_void,
    d: *mut ncclProfilerEventDescr_v4_t,
) -> ncclResult_t {
    ffi_guard((), || {
        if d.is_null() {
            return;
        }
        // SAFETY: NCCL's descriptor, valid for the call.
        let d = unsafe { &*d };
        // SAFETY: ctx/handle from NCCL; the union matches the type.
        unsafe {
            start(
                ctx,
                handle,
                d.type_ as u64,
                d.parentObj,
                &d.u,
                V4.needs_group_handle,
            )
        };
    });
    NCCL_SUCCESS
}

unsafe extern "C" fn start_v5(
    ctx: *mut c_void,
    handle: *mut *mut c_void,
    d: *mut ncclProfilerEventDescr_v5_t,
) -> ncclResult_t {
    ffi_guard((), || {
        if d.is_null() {
            return;
        }
        // SAFETY: NCCL's descriptor, valid for the call.
        let d = unsafe { &*d };
        // SAFETY: ctx/handle from NCCL; the union matches the type.
        unsafe {
            start(
                ctx,
                handle,
                d.type_,
                d.parentObj,
                &d.u,
                V5.needs_group_handle,
            )
        };
    });
    NCCL_SUCCESS
}

/// v7's `startEvent`: a symmetric-kernel Coll or a CeColl is counted
/// apart ([`other_path_start`]); a tagged call's `userTag` is kept; every
/// other event as v5/v6 (v7 keeps their fields' offsets).
unsafe extern "C" fn start_v7(
    ctx: *mut c_void,
    handle: *mut *mut c_void,
    d: *mut ncclProfilerEventDescr_v7_t,
) -> ncclResult_t {
    ffi_guard((), || {
        if d.is_null() {
            return;
        }
        // SAFETY: NCCL's descriptor, valid for the call.
        let d = unsafe { &*d };
        // SAFETY: a non-NULL ctx is the ProfContext init made.
        let c = unsafe { ctx.cast::<ProfContext>().as_ref() };
        let other = match (d.type_, c) {
            (PROFILE_COLL, Some(c)) => {
                // SAFETY: a Coll event's union holds v7's `coll`.
                let coll = unsafe { &d.u.coll };
                if let (Some(id), true) = (c.comm_id, c.recording.is_some()) {
                    trace::note_tag(id, coll.userTag);
                }
                if coll.isSymColl != 0 && c.recording.is_some() {
                    // Bounded: NCCL's variant names are a few characters,
                    // and one the format cannot hold is not kept.
                    // SAFETY: NULL or NCCL's NUL-terminated static name.
                    if let Some(v) = unsafe { c_bytes_bounded(coll.kernelVariant, 32) } {
                        trace::note_variant(v);
                    }
                }
                (coll.isSymColl != 0).then_some((
                    OtherPath::Symmetric,
                    coll.base.func,
                    coll.base.count,
                    coll.base.datatype,
                ))
            }
            (PROFILE_CE_COLL, Some(c)) => {
                // SAFETY: a CeColl event's union holds `ceColl`.
                let ce = unsafe { &d.u.ceColl };
                if let (Some(id), true) = (c.comm_id, c.recording.is_some()) {
                    trace::note_tag(id, ce.userTag);
                }
                Some((OtherPath::CopyEngine, ce.func, ce.count, ce.datatype))
            }
            _ => None,
        };
        if let (Some((path, func, count, datatype)), Some(c)) = (other, c) {
            other_path_start(c, path, func, count, datatype);
            // SAFETY: NCCL's handle out-pointer (or NULL).
            unsafe { write_out(handle, core::ptr::null_mut()) };
            return;
        }
        // SAFETY: ctx/handle from NCCL; v7's union has v6's members at
        // their offsets, and the union matches the type.
        unsafe {
            start(
                ctx,
                handle,
                d.type_,
                d.parentObj,
                &d.u.v6,
                V7.needs_group_handle,
            )
        };
    });
    NCCL_SUCCESS
}

unsafe extern "C" fn finalize(ctx: *mut c_void) -> ncclResult_t {
    if ctx.is_null() {
        return NCCL_SUCCESS;
    }
    ffi_guard((), || {
        // SAFETY: a non-NULL ctx came from Box::into_raw in init; NCCL
        // finalizes it once, after its last event.
        let c = unsafe { Box::from_raw(ctx.cast::<ProfContext>()) };
        if let Some(comm) = c.recording {
            trace::retire(comm);
            trace::flush(false);
        }
    });
    NCCL_SUCCESS
}

unsafe extern "C" fn init_v1(ctx: *mut *mut c_void, _mask: *mut c_int) -> ncclResult_t {
    ffi_guard((), || {
        if trace::configured().is_some() {
            // No logger in v1-v3: the tuner's init says it.
            trace::old_profiler_pending();
        }
    });
    // The mask is left as it is (process-wide: see init_common).
    // SAFETY: NCCL passes a writable context pointer (or NULL).
    unsafe { write_out(ctx, core::ptr::null_mut()) };
    NCCL_SUCCESS
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn init_v4(
    ctx: *mut *mut c_void,
    mask: *mut c_int,
    name: *const c_char,
    comm_hash: u64,
    n_nodes: c_int,
    n_ranks: c_int,
    rank: c_int,
    log: ncclDebugLogger_t,
) -> ncclResult_t {
    // SAFETY: forwarded NCCL pointers. Tuner v4 has no commId: no journal.
    unsafe {
        init_common(
            ctx, mask, None, comm_hash, name, n_nodes, n_ranks, rank, log, 4,
        )
    }
}

#[allow(clippy::too_many_arguments)]
unsafe fn init_v5_abi(
    ctx: *mut *mut c_void,
    comm_id: u64,
    mask: *mut c_int,
    name: *const c_char,
    n_nodes: c_int,
    n_ranks: c_int,
    rank: c_int,
    log: ncclDebugLogger_t,
    abi: u8,
) -> ncclResult_t {
    // SAFETY: forwarded NCCL pointers.
    unsafe {
        init_common(
            ctx,
            mask,
            Some(comm_id),
            comm_id,
            name,
            n_nodes,
            n_ranks,
            rank,
            log,
            abi,
        )
    }
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn init_v5(
    ctx: *mut *mut c_void,
    comm_id: u64,
    mask: *mut c_int,
    name: *const c_char,
    n_nodes: c_int,
    n_ranks: c_int,
    rank: c_int,
    log: ncclDebugLogger_t,
) -> ncclResult_t {
    // SAFETY: forwarded NCCL pointers.
    unsafe { init_v5_abi(ctx, comm_id, mask, name, n_nodes, n_ranks, rank, log, 5) }
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn init_v6(
    ctx: *mut *mut c_void,
    comm_id: u64,
    mask: *mut c_int,
    name: *const c_char,
    n_nodes: c_int,
    n_ranks: c_int,
    rank: c_int,
    log: ncclDebugLogger_t,
) -> ncclResult_t {
    // SAFETY: forwarded NCCL pointers.
    unsafe { init_v5_abi(ctx, comm_id, mask, name, n_nodes, n_ranks, rank, log, 6) }
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn init_v7(
    ctx: *mut *mut c_void,
    comm_id: u64,
    mask: *mut c_int,
    name: *const c_char,
    n_nodes: c_int,
    n_ranks: c_int,
    rank: c_int,
    log: ncclDebugLogger_t,
) -> ncclResult_t {
    // SAFETY: forwarded NCCL pointers.
    unsafe { init_v5_abi(ctx, comm_id, mask, name, n_nodes, n_ranks, rank, log, 7) }
}

unsafe extern "C" fn start_none(
    _ctx: *mut c_void,
    handle: *mut *mut c_void,
    _d: *mut OpaqueDescr,
) -> ncclResult_t {
    // SAFETY: NCCL's handle out-pointer (or NULL).
    unsafe { write_out(handle, core::ptr::null_mut()) };
    NCCL_SUCCESS
}

const fn old(init: ProfInitV1) -> ncclProfiler_v3_t {
    ncclProfiler_t {
        name: PLUGIN_NAME.as_ptr(),
        init: Some(init),
        startEvent: Some(start_none),
        stopEvent: Some(stop_event),
        recordEventState: Some(record_event_state),
        finalize: Some(finalize),
    }
}

/// NCCL 2.23 (no GPU timestamps: a WARN, no events).
#[unsafe(no_mangle)]
pub static ncclProfiler_v1: ncclProfiler_v3_t = old(init_v1);
/// NCCL 2.24, 2.25 (no GPU timestamps).
#[unsafe(no_mangle)]
pub static ncclProfiler_v2: ncclProfiler_v3_t = old(init_v1);
/// NCCL 2.26 (no GPU timestamps).
#[unsafe(no_mangle)]
pub static ncclProfiler_v3: ncclProfiler_v3_t = old(init_v1);

/// NCCL 2.27.
#[unsafe(no_mangle)]
pub static ncclProfiler_v4: ncclProfiler_v4_t = ncclProfiler_t {
    name: PLUGIN_NAME.as_ptr(),
    init: Some(init_v4),
    startEvent: Some(start_v4),
    stopEvent: Some(stop_event),
    recordEventState: Some(record_event_state),
    finalize: Some(finalize),
};

/// NCCL 2.28.
#[unsafe(no_mangle)]
pub static ncclProfiler_v5: ncclProfiler_v5_t = ncclProfiler_t {
    name: PLUGIN_NAME.as_ptr(),
    init: Some(init_v5),
    startEvent: Some(start_v5),
    stopEvent: Some(stop_event),
    recordEventState: Some(record_event_state),
    finalize: Some(finalize),
};

/// NCCL 2.29, 2.30 (v6's descriptor is v5's plus copy-engine members
/// dyncc does not ask for).
#[unsafe(no_mangle)]
pub static ncclProfiler_v6: ncclProfiler_v5_t = ncclProfiler_t {
    name: PLUGIN_NAME.as_ptr(),
    init: Some(init_v6),
    startEvent: Some(start_v5),
    stopEvent: Some(stop_event),
    recordEventState: Some(record_event_state),
    finalize: Some(finalize),
};

/// NCCL 2.31+ (symmetric kernels named, user tags, the profiler thread).
#[unsafe(no_mangle)]
pub static ncclProfiler_v7: ncclProfiler_v7_t = ncclProfiler_t {
    name: PLUGIN_NAME.as_ptr(),
    init: Some(init_v7),
    startEvent: Some(start_v7),
    stopEvent: Some(stop_event),
    recordEventState: Some(record_event_state),
    finalize: Some(finalize),
};

#[cfg(test)]
mod tests {
    use super::*;

    /// The v4 Group handle is only ever compared with NULL and handed back
    /// by NCCL: stopping it, recording a state on it or naming it as a
    /// channel's parent touches nothing.
    #[test]
    fn the_v4_group_handle_is_inert() {
        let g = GROUP_HANDLE as *mut c_void;
        assert_eq!(Handle::from_ptr(g), None);
        // SAFETY: a plain C struct of integers: all zero bytes are valid.
        let mut args: ncclProfilerEventStateArgs = unsafe { core::mem::zeroed() };
        // SAFETY: the handle is opaque to the callbacks; args is valid.
        unsafe {
            assert_eq!(stop_event(g), NCCL_SUCCESS);
            assert_eq!(
                record_event_state(g, KERNEL_CH_STOP, &mut args),
                NCCL_SUCCESS
            );
        }
        // A rank that does not record gets NULL: no Coll events on 2.27.
        let mut ctx = ProfContext {
            recording: None,
            comm_id: None,
            n_ranks: 2,
        };
        // SAFETY: a C union of integers and pointers: zero bytes are valid.
        let u: ncclProfilerDescrUnion = unsafe { core::mem::zeroed() };
        // The handle a Group event gets (`v4`: profiler v4, NCCL 2.27).
        let group = |ctx: &mut ProfContext, v4: bool| {
            let mut h = core::ptr::dangling_mut::<c_void>();
            // SAFETY: ctx is a live ProfContext; u is a zeroed union.
            unsafe {
                start(
                    (ctx as *mut ProfContext).cast(),
                    &mut h,
                    PROFILE_GROUP,
                    core::ptr::null_mut(),
                    &u,
                    v4,
                )
            };
            h
        };
        assert!(group(&mut ctx, true).is_null());
        ctx.recording = Some(0);
        assert_eq!(group(&mut ctx, true), g);
        // Profiler v5/v6 (2.28+) need no Group handle: NULL.
        assert!(group(&mut ctx, false).is_null());
    }
}
