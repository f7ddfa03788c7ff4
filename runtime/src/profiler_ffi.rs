//! `#[repr(C)]` mirrors of NCCL's profiler-plugin ABI, versions 1 to 7, as
//! far as dyncc reads them.
//!
//! Written from `shared/reference/nccl-profiler-abi.md` and NCCL's
//! `profiler_v4.h` .. `profiler_v6.h` (2.27-2.30). The event descriptor of
//! v4 starts with a `uint8_t type`, v5 and v6 with a `uint64_t type`; in all
//! three `parentObj` is at 8, `rank` at 16 and the union at 24, and the
//! union's `coll` and `kernelCh` members (the only ones dyncc reads) have
//! the same layout. NCCL's union has more (and, in v6, larger) members;
//! dyncc only ever reads through NCCL's pointer, so mirroring the prefix it
//! reads is enough. Every plugin struct is six pointers (48 bytes).
//!
//! v7 (NCCL 2.31.2, `profiler_v7.h`) keeps v6's function table and every
//! v6 field's offset, and appends to the `coll` member `kernelVariant` and
//! `isSymColl` (a symmetric kernel ran: `algo` is the variant's part after
//! "_", `proto` is "") and the call's `userTag`; it is mirrored whole
//! ([`ncclProfilerCollDescr_v7`]), with the copy-engine `ceColl` member
//! and the new `kernelPhase` one.
#![allow(non_camel_case_types, non_snake_case)]

use core::ffi::{c_char, c_int, c_void};

use crate::ffi::{ncclDebugLogger_t, ncclResult_t};

/// `ncclProfileColl`: a collective as launched (what runs).
pub const PROFILE_COLL: u64 = 1 << 1;
/// `ncclProfileKernelCh`: one channel of a kernel, with GPU timestamps.
pub const PROFILE_KERNEL_CH: u64 = 1 << 6;
/// `ncclProfilerKernelChStop`: the state carrying a channel's stop time.
pub const KERNEL_CH_STOP: c_int = 22;

/// `ncclProfileCeColl` (v6+): a collective run by the copy engines (no
/// kernel, no algorithm or protocol).
pub const PROFILE_CE_COLL: u64 = 1 << 12;
/// `ncclProfileKernelPhase` (v7): a phase of one kernel channel, child of
/// its KernelCh event; NCCL sets KernelCh whenever this is set.
pub const PROFILE_KERNEL_PHASE: u64 = 1 << 15;
/// `ncclProfilerKernelPhaseStop` (v7): a phase's stop time (in the
/// `kernelCh.pTimer` of the state args, like [`KERNEL_CH_STOP`]).
pub const KERNEL_PHASE_STOP: c_int = 31;

/// The `coll` member of the descriptor union (v4-v6).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ncclProfilerCollDescr {
    /// Per function per communicator.
    pub seqNumber: u64,
    /// "AllReduce", "AllGather", ...
    pub func: *const c_char,
    /// Send buffer.
    pub sendBuff: *const c_void,
    /// Receive buffer.
    pub recvBuff: *mut c_void,
    /// Elements per rank.
    pub count: usize,
    /// Root rank.
    pub root: c_int,
    /// "ncclFloat32", ...
    pub datatype: *const c_char,
    /// Channels that run it.
    pub nChannels: u8,
    /// Warps per channel.
    pub nWarps: u8,
    /// "RING", "TREE", ...
    pub algo: *const c_char,
    /// "LL", "LL128", "SIMPLE".
    pub proto: *const c_char,
}

/// The `coll` member of v7's descriptor union, whole.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ncclProfilerCollDescr_v7 {
    /// v4-v6's members, at their offsets.
    pub base: ncclProfilerCollDescr,
    /// The plan's Group event (v5 on).
    pub parentGroup: *mut c_void,
    /// A symmetric kernel's variant ("AGxLL_R"); NULL for a classic one.
    pub kernelVariant: *const c_char,
    /// A symmetric kernel ran (not a classic algorithm and protocol); C's
    /// `bool`, read as a byte so no value is undefined behaviour.
    pub isSymColl: u8,
    /// The call's `ncclCollConfig_t::userProfilerTag` (0: untagged).
    pub userTag: u64,
}

/// The `ceColl` member of the descriptor union (v6; v7 appends `userTag`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ncclProfilerCeCollDescr_v7 {
    /// Per communicator.
    pub seqNumber: u64,
    /// "AllGather", ...
    pub func: *const c_char,
    /// Send buffer.
    pub sendBuff: *const c_void,
    /// Receive buffer.
    pub recvBuff: *mut c_void,
    /// Elements per rank.
    pub count: usize,
    /// Root rank.
    pub root: c_int,
    /// "ncclFloat32", ...
    pub datatype: *const c_char,
    /// "MC" or "UC".
    pub syncStrategy: *const c_char,
    /// Whether batches synchronise (C's `bool`, as a byte).
    pub intraBatchSync: u8,
    /// Batch size.
    pub batchSize: u32,
    /// Batches.
    pub numBatches: u32,
    /// Copy-engine sequence number.
    pub ceSeqNum: u32,
    /// The call's stream.
    pub stream: *mut c_void,
    /// The call's tag (v7).
    pub userTag: u64,
}

/// The `collApi` member (v5+; v7 appends `userTag`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ncclProfilerCollApiDescr_v7 {
    /// "AllReduce", ...
    pub func: *const c_char,
    /// Elements.
    pub count: usize,
    /// "ncclFloat32", ...
    pub datatype: *const c_char,
    /// Root rank.
    pub root: c_int,
    /// The call's stream.
    pub stream: *mut c_void,
    /// Captured into a CUDA graph (C's `bool`, as a byte).
    pub graphCaptured: u8,
    /// The call's tag (v7).
    pub userTag: u64,
}

/// The `kernelPhase` member (v7).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ncclProfilerKernelPhaseDescr_v7 {
    /// Channel.
    pub channelId: u8,
    /// 0 initial_sync, 1 compute, 2 final_sync.
    pub phaseId: u8,
    /// The phase's name.
    pub phaseName: *const c_char,
    /// GPU globaltimer at the phase's start, ns.
    pub pTimer: u64,
}

/// The `kernelCh` member of the descriptor union.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ncclProfilerKernelChDescr {
    /// Channel.
    pub channelId: u8,
    /// GPU globaltimer at the channel's start, ns.
    pub pTimer: u64,
}

/// The part of NCCL's descriptor union dyncc reads.
#[repr(C)]
#[derive(Clone, Copy)]
pub union ncclProfilerDescrUnion {
    /// `ncclProfileColl` events.
    pub coll: ncclProfilerCollDescr,
    /// `ncclProfileKernelCh` events.
    pub kernelCh: ncclProfilerKernelChDescr,
}

/// `ncclProfilerEventDescr_v4_t` (the prefix dyncc reads).
#[repr(C)]
pub struct ncclProfilerEventDescr_v4_t {
    /// Event type bit (a byte in v4).
    pub type_: u8,
    /// Parent event's handle.
    pub parentObj: *mut c_void,
    /// Originating rank.
    pub rank: c_int,
    /// Per-type details.
    pub u: ncclProfilerDescrUnion,
}

/// `ncclProfilerEventDescr_v5_t` and `_v6_t` (the prefix dyncc reads).
#[repr(C)]
pub struct ncclProfilerEventDescr_v5_t {
    /// Event type bit.
    pub type_: u64,
    /// Parent event's handle.
    pub parentObj: *mut c_void,
    /// Originating rank.
    pub rank: c_int,
    /// Per-type details.
    pub u: ncclProfilerDescrUnion,
}

/// The part of v7's descriptor union dyncc reads (its largest member is
/// `coll`, 112 bytes: this union is NCCL's size).
#[repr(C)]
#[derive(Clone, Copy)]
pub union ncclProfilerDescrUnion_v7 {
    /// `ncclProfileColl` events.
    pub coll: ncclProfilerCollDescr_v7,
    /// `ncclProfileKernelCh` events.
    pub kernelCh: ncclProfilerKernelChDescr,
    /// `ncclProfileCollApi` events.
    pub collApi: ncclProfilerCollApiDescr_v7,
    /// `ncclProfileCeColl` events.
    pub ceColl: ncclProfilerCeCollDescr_v7,
    /// `ncclProfileKernelPhase` events.
    pub kernelPhase: ncclProfilerKernelPhaseDescr_v7,
    /// v4-v6's view of the same bytes (every shared field at its offset).
    pub v6: ncclProfilerDescrUnion,
}

/// `ncclProfilerEventDescr_v7_t`.
#[repr(C)]
pub struct ncclProfilerEventDescr_v7_t {
    /// Event type bit.
    pub type_: u64,
    /// Parent event's handle.
    pub parentObj: *mut c_void,
    /// Originating rank.
    pub rank: c_int,
    /// Per-type details.
    pub u: ncclProfilerDescrUnion_v7,
}

/// `ncclProfilerEventStateArgs_v4_t` .. `_v7_t`: a union whose kernel
/// member is one `uint64_t` (8 bytes, like every member).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ncclProfilerEventStateArgs {
    /// `kernelCh.pTimer` for `KERNEL_CH_STOP`.
    pub pTimer: u64,
}

/// v1-v3 `init(void** context, int* eActivationMask)`.
pub type ProfInitV1 =
    unsafe extern "C" fn(context: *mut *mut c_void, eActivationMask: *mut c_int) -> ncclResult_t;
/// v4 `init(ctx, mask, commName, commHash, nNodes, nranks, rank, logfn)`.
pub type ProfInitV4 = unsafe extern "C" fn(
    context: *mut *mut c_void,
    eActivationMask: *mut c_int,
    commName: *const c_char,
    commHash: u64,
    nNodes: c_int,
    nranks: c_int,
    rank: c_int,
    logfn: ncclDebugLogger_t,
) -> ncclResult_t;
/// v5/v6 `init(ctx, commId, mask, commName, nNodes, nranks, rank, logfn)`.
pub type ProfInitV5 = unsafe extern "C" fn(
    context: *mut *mut c_void,
    commId: u64,
    eActivationMask: *mut c_int,
    commName: *const c_char,
    nNodes: c_int,
    nranks: c_int,
    rank: c_int,
    logfn: ncclDebugLogger_t,
) -> ncclResult_t;
/// `startEvent(context, void** eHandle, descr*)`; the descriptor type
/// depends on the version.
pub type ProfStart<D> = unsafe extern "C" fn(
    context: *mut c_void,
    eHandle: *mut *mut c_void,
    eDescr: *mut D,
) -> ncclResult_t;
/// `stopEvent(eHandle)`.
pub type ProfStop = unsafe extern "C" fn(eHandle: *mut c_void) -> ncclResult_t;
/// `recordEventState(eHandle, state, args*)`.
pub type ProfRecord = unsafe extern "C" fn(
    eHandle: *mut c_void,
    eState: c_int,
    eStateArgs: *mut ncclProfilerEventStateArgs,
) -> ncclResult_t;
/// `finalize(context)`.
pub type ProfFinalize = unsafe extern "C" fn(context: *mut c_void) -> ncclResult_t;

/// `ncclProfiler_vN_t`: name, init, startEvent, stopEvent,
/// recordEventState, finalize.
#[repr(C)]
pub struct ncclProfiler_t<I, D> {
    /// Plugin name.
    pub name: *const c_char,
    /// Per communicator.
    pub init: Option<I>,
    /// Event start.
    pub startEvent: Option<ProfStart<D>>,
    /// Event stop.
    pub stopEvent: Option<ProfStop>,
    /// State change (kernel-channel stop time).
    pub recordEventState: Option<ProfRecord>,
    /// Per communicator.
    pub finalize: Option<ProfFinalize>,
}

// SAFETY: the exported statics are immutable and hold only a pointer to a
// 'static NUL-terminated string and function pointers.
unsafe impl<I, D> Sync for ncclProfiler_t<I, D> {}

/// The descriptor of v1-v3, never read (dyncc asks those versions for no
/// events).
pub enum OpaqueDescr {}

/// `ncclProfiler_v1_t` .. `_v3_t`.
pub type ncclProfiler_v3_t = ncclProfiler_t<ProfInitV1, OpaqueDescr>;
/// `ncclProfiler_v4_t`.
pub type ncclProfiler_v4_t = ncclProfiler_t<ProfInitV4, ncclProfilerEventDescr_v4_t>;
/// `ncclProfiler_v5_t` and `_v6_t`.
pub type ncclProfiler_v5_t = ncclProfiler_t<ProfInitV5, ncclProfilerEventDescr_v5_t>;
/// `ncclProfiler_v7_t`: v5's init, v7's descriptor.
pub type ncclProfiler_v7_t = ncclProfiler_t<ProfInitV5, ncclProfilerEventDescr_v7_t>;

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::{offset_of, size_of};

    #[test]
    fn profiler_layouts_match_nccl() {
        assert_eq!(size_of::<ncclProfiler_v5_t>(), 48);
        assert_eq!(size_of::<ncclProfiler_v4_t>(), 48);
        assert_eq!(size_of::<ncclProfiler_v3_t>(), 48);
        assert_eq!(offset_of!(ncclProfilerEventDescr_v4_t, parentObj), 8);
        assert_eq!(offset_of!(ncclProfilerEventDescr_v4_t, rank), 16);
        assert_eq!(offset_of!(ncclProfilerEventDescr_v4_t, u), 24);
        assert_eq!(offset_of!(ncclProfilerEventDescr_v5_t, parentObj), 8);
        assert_eq!(offset_of!(ncclProfilerEventDescr_v5_t, u), 24);
        assert_eq!(offset_of!(ncclProfilerCollDescr, func), 8);
        assert_eq!(offset_of!(ncclProfilerCollDescr, count), 32);
        assert_eq!(offset_of!(ncclProfilerCollDescr, root), 40);
        assert_eq!(offset_of!(ncclProfilerCollDescr, datatype), 48);
        assert_eq!(offset_of!(ncclProfilerCollDescr, nChannels), 56);
        assert_eq!(offset_of!(ncclProfilerCollDescr, nWarps), 57);
        assert_eq!(offset_of!(ncclProfilerCollDescr, algo), 64);
        assert_eq!(offset_of!(ncclProfilerCollDescr, proto), 72);
        assert_eq!(offset_of!(ncclProfilerKernelChDescr, pTimer), 8);
    }

    /// v7's members at `profiler_v7.h`'s offsets (NCCL 2.31.2), v6's
    /// fields unmoved.
    #[test]
    fn profiler_v7_layouts_match_nccl() {
        assert_eq!(size_of::<ncclProfiler_v7_t>(), 48);
        assert_eq!(offset_of!(ncclProfilerEventDescr_v7_t, parentObj), 8);
        assert_eq!(offset_of!(ncclProfilerEventDescr_v7_t, rank), 16);
        assert_eq!(offset_of!(ncclProfilerEventDescr_v7_t, u), 24);
        assert_eq!(offset_of!(ncclProfilerCollDescr_v7, parentGroup), 80);
        assert_eq!(offset_of!(ncclProfilerCollDescr_v7, kernelVariant), 88);
        assert_eq!(offset_of!(ncclProfilerCollDescr_v7, isSymColl), 96);
        assert_eq!(offset_of!(ncclProfilerCollDescr_v7, userTag), 104);
        assert_eq!(size_of::<ncclProfilerCollDescr_v7>(), 112);
        assert_eq!(offset_of!(ncclProfilerCollApiDescr_v7, graphCaptured), 40);
        assert_eq!(offset_of!(ncclProfilerCollApiDescr_v7, userTag), 48);
        assert_eq!(offset_of!(ncclProfilerCeCollDescr_v7, syncStrategy), 56);
        assert_eq!(offset_of!(ncclProfilerCeCollDescr_v7, batchSize), 68);
        assert_eq!(offset_of!(ncclProfilerCeCollDescr_v7, stream), 80);
        assert_eq!(offset_of!(ncclProfilerCeCollDescr_v7, userTag), 88);
        assert_eq!(offset_of!(ncclProfilerKernelPhaseDescr_v7, phaseName), 8);
        assert_eq!(offset_of!(ncclProfilerKernelPhaseDescr_v7, pTimer), 16);
        assert_eq!(size_of::<ncclProfilerDescrUnion_v7>(), 112);
        assert_eq!(size_of::<ncclProfilerEventDescr_v7_t>(), 136);
    }
}
