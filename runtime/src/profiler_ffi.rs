//! `#[repr(C)]` mirrors of NCCL's profiler-plugin ABI, versions 1 to 6, as
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
#![allow(non_camel_case_types, non_snake_case)]

use core::ffi::{c_char, c_int, c_void};

use crate::ffi::{ncclDebugLogger_t, ncclResult_t};

/// `ncclProfileColl`: a collective as launched (what runs).
pub const PROFILE_COLL: u64 = 1 << 1;
/// `ncclProfileKernelCh`: one channel of a kernel, with GPU timestamps.
pub const PROFILE_KERNEL_CH: u64 = 1 << 6;
/// `ncclProfilerKernelChStop`: the state carrying a channel's stop time.
pub const KERNEL_CH_STOP: c_int = 22;

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

/// `ncclProfilerEventStateArgs_v4_t` .. `_v6_t`: a union whose kernel
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
}
