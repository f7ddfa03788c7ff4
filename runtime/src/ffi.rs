//! `#[repr(C)]` mirrors of NCCL's tuner-plugin ABI, versions 2 to 7.
//!
//! Written from `shared/reference/nccl-tuner-abi.md` sections 1-2 (NCCL's
//! `tuner_v2.h` .. `tuner_v6.h`) and NCCL's `tuner_v7.h` (2.32.6: v6's
//! function table, constants with a fifth compute-capability row). C enums that come in from NCCL
//! (`ncclResult_t`, `ncclFunc_t`, `ncclDebugLogLevel`) are plain `c_int`: an
//! out-of-range value in a Rust enum would be undefined behaviour. Every
//! member of every tuner struct is pointer-sized, so there is no padding:
//! v2-v5 are 32 bytes, v6 and v7 are 40 (checked by tests here, with `readelf` on
//! the built library, and by the C harness with `_Static_assert`).
#![allow(non_camel_case_types, non_snake_case)]

use core::ffi::{c_char, c_int, c_ulong, c_void};

/// `ncclResult_t` (a 4-byte C enum).
pub type ncclResult_t = c_int;
/// `ncclSuccess`.
pub const NCCL_SUCCESS: ncclResult_t = 0;
/// `ncclSystemError`: used when the configured table cannot be read.
pub const NCCL_SYSTEM_ERROR: ncclResult_t = 2;
/// `ncclInternalError`: used when init panicked.
pub const NCCL_INTERNAL_ERROR: ncclResult_t = 3;
/// `ncclInvalidArgument`: used when NCCL passes a NULL context out-pointer.
pub const NCCL_INVALID_ARGUMENT: ncclResult_t = 4;
/// `ncclInvalidUsage`: used when the configured table is not a valid table.
pub const NCCL_INVALID_USAGE: ncclResult_t = 5;

/// `ncclFunc_t` (a 4-byte C enum; 0..=4 are the tunable collectives).
pub type ncclFunc_t = c_int;

/// `ncclDebugLogLevel` values.
pub const NCCL_LOG_WARN: c_int = 2;
/// `NCCL_LOG_INFO`.
pub const NCCL_LOG_INFO: c_int = 3;
/// `ncclDebugLogSubSys` flag `NCCL_INIT`.
pub const NCCL_INIT: c_ulong = 0x1;
/// `ncclDebugLogSubSys` flag `NCCL_TUNING`.
pub const NCCL_TUNING: c_ulong = 0x40;

/// `ncclDebugLogger_t`: NCCL's variadic `ncclDebugLog`
/// `(level, flags, file, line, fmt, ...)`.
pub type ncclDebugLogger_t = Option<
    unsafe extern "C" fn(
        level: c_int,
        flags: c_ulong,
        file: *const c_char,
        line: c_int,
        fmt: *const c_char,
        ...
    ),
>;

/// `ncclNvlDomainInfo_v5_t` (also v6): 12 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ncclNvlDomainInfo_v5_t {
    /// `comm->nNodes`.
    pub nNvlDomains: c_int,
    /// `comm->minLocalRanks`.
    pub minRanksPerNvlDomain: c_int,
    /// `comm->maxLocalRanks`.
    pub maxRanksPerNvlDomain: c_int,
}

/// `NCCL_NUM_ALGORITHMS_V5`.
pub const NUM_ALGORITHMS_V5: usize = 7;
/// `NCCL_NUM_PROTOCOLS_V5`.
pub const NUM_PROTOCOLS_V5: usize = 3;
/// `NCCL_NUM_HW_LINKS_V5`.
pub const NUM_HW_LINKS_V5: usize = 3;
/// `NCCL_NUM_COMPCAPS_V5`.
pub const NUM_COMPCAPS_V5: usize = 4;
/// `NCCL_NUM_TUNING_SCALES_V5`.
pub const NUM_TUNING_SCALES_V5: usize = 3;

/// `ncclTunerConstants_v5_t` (also v6), the core layout: 1152 bytes of
/// `double`. dyncc never modifies it; it is mirrored so the pointer's
/// pointee type is honest.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ncclTunerConstants_v5_t {
    /// `[algo][proto]`, us.
    pub baseLatencies: [[f64; NUM_PROTOCOLS_V5]; NUM_ALGORITHMS_V5],
    /// `[hw link][algo][proto]`, us.
    pub hwLatencies: [[[f64; NUM_PROTOCOLS_V5]; NUM_ALGORITHMS_V5]; NUM_HW_LINKS_V5],
    /// `[compcap][scale]`, GB/s.
    pub llMaxBws: [[f64; NUM_TUNING_SCALES_V5]; NUM_COMPCAPS_V5],
    /// `[compcap][scale]`, GB/s.
    pub perChMaxRingLL128Bws: [[f64; NUM_TUNING_SCALES_V5]; NUM_COMPCAPS_V5],
    /// `[compcap][scale]`, GB/s.
    pub perChMaxTreeLL128Bws: [[f64; NUM_TUNING_SCALES_V5]; NUM_COMPCAPS_V5],
    /// `[compcap][scale]`, GB/s.
    pub perChMaxTreeBws: [[f64; NUM_TUNING_SCALES_V5]; NUM_COMPCAPS_V5],
    /// `[compcap][scale]`, GB/s (absent from the example plugin's fork).
    pub perChMaxNVLSTreeBws: [[f64; NUM_TUNING_SCALES_V5]; NUM_COMPCAPS_V5],
}

/// v6 typedefs the v5 structs.
pub type ncclNvlDomainInfo_v6_t = ncclNvlDomainInfo_v5_t;
/// v6 typedefs the v5 structs.
pub type ncclTunerConstants_v6_t = ncclTunerConstants_v5_t;

/// `NCCL_NUM_COMPCAPS_V7`: v7 adds compute capability index 4 (Rubin).
pub const NUM_COMPCAPS_V7: usize = 5;
const _: () = assert!(NUM_COMPCAPS_V5 == 4 && NUM_COMPCAPS_V7 == NUM_COMPCAPS_V5 + 1);

/// `ncclTunerConstants_v7_t`: v5's layout with [`NUM_COMPCAPS_V7`] rows in
/// the five bandwidth arrays, 1272 bytes of `double`. Never modified.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ncclTunerConstants_v7_t {
    /// `[algo][proto]`, us.
    pub baseLatencies: [[f64; NUM_PROTOCOLS_V5]; NUM_ALGORITHMS_V5],
    /// `[hw link][algo][proto]`, us.
    pub hwLatencies: [[[f64; NUM_PROTOCOLS_V5]; NUM_ALGORITHMS_V5]; NUM_HW_LINKS_V5],
    /// `[compcap][scale]`, GB/s.
    pub llMaxBws: [[f64; NUM_TUNING_SCALES_V5]; NUM_COMPCAPS_V7],
    /// `[compcap][scale]`, GB/s.
    pub perChMaxRingLL128Bws: [[f64; NUM_TUNING_SCALES_V5]; NUM_COMPCAPS_V7],
    /// `[compcap][scale]`, GB/s.
    pub perChMaxTreeLL128Bws: [[f64; NUM_TUNING_SCALES_V5]; NUM_COMPCAPS_V7],
    /// `[compcap][scale]`, GB/s.
    pub perChMaxTreeBws: [[f64; NUM_TUNING_SCALES_V5]; NUM_COMPCAPS_V7],
    /// `[compcap][scale]`, GB/s.
    pub perChMaxNVLSTreeBws: [[f64; NUM_TUNING_SCALES_V5]; NUM_COMPCAPS_V7],
}

/// v7 typedefs v5's NVLink domain struct.
pub type ncclNvlDomainInfo_v7_t = ncclNvlDomainInfo_v5_t;

/// v2-v4 `init(nRanks, nNodes, logFunction, void** context)`: context LAST.
pub type InitV2 = unsafe extern "C" fn(
    nRanks: usize,
    nNodes: usize,
    logFunction: ncclDebugLogger_t,
    context: *mut *mut c_void,
) -> ncclResult_t;

/// v5/v6 `init(void** ctx, commId, nRanks, nNodes, logFunction,
/// nvlDomainInfo, constants)`: context FIRST.
pub type InitV5 = unsafe extern "C" fn(
    context: *mut *mut c_void,
    commId: u64,
    nRanks: usize,
    nNodes: usize,
    logFunction: ncclDebugLogger_t,
    nvlDomainInfo: *mut ncclNvlDomainInfo_v5_t,
    constants: *mut ncclTunerConstants_v5_t,
) -> ncclResult_t;

/// v7 `init`: v5's, with v7's constants.
pub type InitV7 = unsafe extern "C" fn(
    context: *mut *mut c_void,
    commId: u64,
    nRanks: usize,
    nNodes: usize,
    logFunction: ncclDebugLogger_t,
    nvlDomainInfo: *mut ncclNvlDomainInfo_v7_t,
    constants: *mut ncclTunerConstants_v7_t,
) -> ncclResult_t;

/// v2 `getCollInfo`: returns algorithm/protocol ints (NCCL presets -1).
pub type GetCollInfoV2 = unsafe extern "C" fn(
    context: *mut c_void,
    collType: ncclFunc_t,
    nBytes: usize,
    collNetSupport: c_int,
    nvlsSupport: c_int,
    numPipeOps: c_int,
    algorithm: *mut c_int,
    protocol: *mut c_int,
    nChannels: *mut c_int,
) -> ncclResult_t;

/// v3 `getCollInfo`: cost table, no `regBuff`. `collCostTable` is really
/// the address of a contiguous `float[numAlgo][numProto]`.
pub type GetCollInfoV3 = unsafe extern "C" fn(
    context: *mut c_void,
    collType: ncclFunc_t,
    nBytes: usize,
    numPipeOps: c_int,
    collCostTable: *mut *mut f32,
    numAlgo: c_int,
    numProto: c_int,
    nChannels: *mut c_int,
) -> ncclResult_t;

/// v4-v6 `getCollInfo`: v3 plus `regBuff` before `nChannels`.
pub type GetCollInfoV4 = unsafe extern "C" fn(
    context: *mut c_void,
    collType: ncclFunc_t,
    nBytes: usize,
    numPipeOps: c_int,
    collCostTable: *mut *mut f32,
    numAlgo: c_int,
    numProto: c_int,
    regBuff: c_int,
    nChannels: *mut c_int,
) -> ncclResult_t;

/// `destroy` (v2-v4) / `finalize` (v5, v6): same slot, same signature.
pub type Finalize = unsafe extern "C" fn(context: *mut c_void) -> ncclResult_t;

/// v6 `getChunkSize` (optional; dyncc answers from the table).
pub type GetChunkSize = unsafe extern "C" fn(
    context: *mut c_void,
    collType: ncclFunc_t,
    nBytes: usize,
    algo: c_int,
    proto: c_int,
    nChannels: c_int,
    chunkSize: *mut usize,
) -> ncclResult_t;

/// `ncclTuner_v2_t` (NCCL 2.21).
#[repr(C)]
pub struct ncclTuner_v2_t {
    /// Plugin name, printed by NCCL.
    pub name: *const c_char,
    /// Context is the LAST argument.
    pub init: Option<InitV2>,
    /// Algorithm/protocol ints.
    pub getCollInfo: Option<GetCollInfoV2>,
    /// Frees the context.
    pub destroy: Option<Finalize>,
}

/// `ncclTuner_v3_t` (NCCL 2.22, 2.23).
#[repr(C)]
pub struct ncclTuner_v3_t {
    /// Plugin name.
    pub name: *const c_char,
    /// Context is the LAST argument.
    pub init: Option<InitV2>,
    /// Cost table, no `regBuff`.
    pub getCollInfo: Option<GetCollInfoV3>,
    /// Frees the context.
    pub destroy: Option<Finalize>,
}

/// `ncclTuner_v4_t` (NCCL 2.24 - 2.27).
#[repr(C)]
pub struct ncclTuner_v4_t {
    /// Plugin name.
    pub name: *const c_char,
    /// Context is the LAST argument.
    pub init: Option<InitV2>,
    /// Cost table and `regBuff`.
    pub getCollInfo: Option<GetCollInfoV4>,
    /// Frees the context.
    pub destroy: Option<Finalize>,
}

/// `ncclTuner_v5_t` (NCCL 2.28, 2.29).
#[repr(C)]
pub struct ncclTuner_v5_t {
    /// Plugin name.
    pub name: *const c_char,
    /// Context is the FIRST argument.
    pub init: Option<InitV5>,
    /// Same as v4.
    pub getCollInfo: Option<GetCollInfoV4>,
    /// Frees the context.
    pub finalize: Option<Finalize>,
}

/// `ncclTuner_v6_t` (NCCL 2.30+): v5 plus `getChunkSize`, which NCCL reads
/// directly, so the slot must exist (NULL when unused).
#[repr(C)]
pub struct ncclTuner_v6_t {
    /// Plugin name.
    pub name: *const c_char,
    /// Context is the FIRST argument.
    pub init: Option<InitV5>,
    /// Same as v4.
    pub getCollInfo: Option<GetCollInfoV4>,
    /// Frees the context.
    pub finalize: Option<Finalize>,
    /// Optional; dyncc's answers the table's chunk sizes.
    pub getChunkSize: Option<GetChunkSize>,
}

/// `ncclTuner_v7_t` (NCCL 2.32.6+): v6's table, v7's `init`.
#[repr(C)]
pub struct ncclTuner_v7_t {
    /// Plugin name.
    pub name: *const c_char,
    /// Context is the FIRST argument; v7 constants.
    pub init: Option<InitV7>,
    /// Same as v4.
    pub getCollInfo: Option<GetCollInfoV4>,
    /// Frees the context.
    pub finalize: Option<Finalize>,
    /// Optional; dyncc's answers the table's chunk sizes.
    pub getChunkSize: Option<GetChunkSize>,
}

// SAFETY: the exported statics of these types are immutable and hold only
// a pointer to a 'static NUL-terminated string and function pointers, so
// sharing them between threads is sound.
unsafe impl Sync for ncclTuner_v2_t {}
// SAFETY: as above.
unsafe impl Sync for ncclTuner_v3_t {}
// SAFETY: as above.
unsafe impl Sync for ncclTuner_v4_t {}
// SAFETY: as above.
unsafe impl Sync for ncclTuner_v5_t {}
// SAFETY: as above.
unsafe impl Sync for ncclTuner_v6_t {}
// SAFETY: as above.
unsafe impl Sync for ncclTuner_v7_t {}

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::{offset_of, size_of};

    #[test]
    fn tuner_struct_sizes_match_nccl() {
        assert_eq!(size_of::<ncclTuner_v2_t>(), 32);
        assert_eq!(size_of::<ncclTuner_v3_t>(), 32);
        assert_eq!(size_of::<ncclTuner_v4_t>(), 32);
        assert_eq!(size_of::<ncclTuner_v5_t>(), 32);
        assert_eq!(size_of::<ncclTuner_v6_t>(), 40);
        assert_eq!(offset_of!(ncclTuner_v6_t, init), 8);
        assert_eq!(offset_of!(ncclTuner_v6_t, getCollInfo), 16);
        assert_eq!(offset_of!(ncclTuner_v6_t, finalize), 24);
        assert_eq!(offset_of!(ncclTuner_v6_t, getChunkSize), 32);
        assert_eq!(size_of::<ncclTuner_v7_t>(), 40);
        assert_eq!(offset_of!(ncclTuner_v7_t, init), 8);
        assert_eq!(offset_of!(ncclTuner_v7_t, getCollInfo), 16);
        assert_eq!(offset_of!(ncclTuner_v7_t, finalize), 24);
        assert_eq!(offset_of!(ncclTuner_v7_t, getChunkSize), 32);
    }

    /// v7's constants: v5's latencies, then five rows of three bandwidths
    /// per array (`tuner_v7.h`, NCCL 2.32.6).
    #[test]
    fn v7_constants_layout_matches_nccl() {
        assert_eq!(size_of::<ncclNvlDomainInfo_v7_t>(), 12);
        assert_eq!(size_of::<ncclTunerConstants_v7_t>(), 1272);
        assert_eq!(offset_of!(ncclTunerConstants_v7_t, hwLatencies), 168);
        assert_eq!(offset_of!(ncclTunerConstants_v7_t, llMaxBws), 672);
        assert_eq!(
            offset_of!(ncclTunerConstants_v7_t, perChMaxRingLL128Bws),
            792
        );
        assert_eq!(
            offset_of!(ncclTunerConstants_v7_t, perChMaxTreeLL128Bws),
            912
        );
        assert_eq!(offset_of!(ncclTunerConstants_v7_t, perChMaxTreeBws), 1032);
        assert_eq!(
            offset_of!(ncclTunerConstants_v7_t, perChMaxNVLSTreeBws),
            1152
        );
        assert_eq!(
            dyncc_tables::TunerAbi::get(7).map(|a| a.compcaps as usize),
            Some(NUM_COMPCAPS_V7)
        );
        assert_eq!(
            dyncc_tables::TunerAbi::get(6).map(|a| a.compcaps as usize),
            Some(NUM_COMPCAPS_V5)
        );
    }

    #[test]
    fn v5_argument_struct_layouts_match_nccl() {
        assert_eq!(size_of::<ncclNvlDomainInfo_v5_t>(), 12);
        assert_eq!(offset_of!(ncclNvlDomainInfo_v5_t, minRanksPerNvlDomain), 4);
        assert_eq!(offset_of!(ncclNvlDomainInfo_v5_t, maxRanksPerNvlDomain), 8);
        assert_eq!(size_of::<ncclTunerConstants_v5_t>(), 1152);
        assert_eq!(offset_of!(ncclTunerConstants_v5_t, hwLatencies), 168);
        assert_eq!(offset_of!(ncclTunerConstants_v5_t, llMaxBws), 672);
        assert_eq!(
            offset_of!(ncclTunerConstants_v5_t, perChMaxRingLL128Bws),
            768
        );
        assert_eq!(
            offset_of!(ncclTunerConstants_v5_t, perChMaxTreeLL128Bws),
            864
        );
        assert_eq!(offset_of!(ncclTunerConstants_v5_t, perChMaxTreeBws), 960);
        assert_eq!(
            offset_of!(ncclTunerConstants_v5_t, perChMaxNVLSTreeBws),
            1056
        );
    }
}
