//! NCCL's plugin ABI versions, one descriptor table per plugin kind: what
//! each version of the tuner and the profiler interface passes, and the
//! releases that load it. The plugin's exported statics, its profiler's
//! event handling, the mask's lowering and the trace reader all read these
//! rows instead of comparing version numbers, so a new NCCL ABI is a row
//! here, a mirror of its struct and its static.
//!
//! Facts from NCCL's own headers and loaders (`src/include/plugin/tuner/
//! tuner_vN.h`, `profiler/profiler_vN.h`, `src/plugin/tuner.cc`,
//! `src/plugin/profiler.cc`); the releases are what each PyPI wheel's
//! `libnccl.so` looks up (`runtime/scripts/wheel-symbols.sh`, its table in
//! runtime/README.md), 2.32.6 from NCCL's source.

/// One version of NCCL's tuner-plugin interface (`ncclTuner_vN_t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TunerAbi {
    /// N in `ncclTunerPlugin_vN`.
    pub version: u8,
    /// The data symbol NCCL's loader looks up.
    pub symbol: &'static str,
    /// The NCCL releases whose loader tries this version first.
    pub releases: &'static str,
    /// `init` gets the communicator's id (and the NVLink domains and
    /// constants; context first): v5 on.
    pub comm_id: bool,
    /// `getCollInfo` ranks NCCL's cost table (v2 answered with two ints).
    pub cost_table: bool,
    /// `getCollInfo` says whether user buffers can be registered.
    pub reg_buff: bool,
    /// The struct ends with the `getChunkSize` slot (NCCL reads it, so it
    /// must exist; NULL when unused).
    pub chunk_size: bool,
    /// Rows of the constants' compute-capability arrays (`llMaxBws` and
    /// the per-channel bandwidths); 0 where `init` gets no constants.
    pub compcaps: u8,
}

/// Every tuner version NCCL has defined, oldest first.
pub const TUNER_ABIS: [TunerAbi; 6] = [
    TunerAbi {
        version: 2,
        symbol: "ncclTunerPlugin_v2",
        releases: "2.21",
        comm_id: false,
        cost_table: false,
        reg_buff: false,
        chunk_size: false,
        compcaps: 0,
    },
    TunerAbi {
        version: 3,
        symbol: "ncclTunerPlugin_v3",
        releases: "2.22, 2.23",
        comm_id: false,
        cost_table: true,
        reg_buff: false,
        chunk_size: false,
        compcaps: 0,
    },
    TunerAbi {
        version: 4,
        symbol: "ncclTunerPlugin_v4",
        releases: "2.24 - 2.27",
        comm_id: false,
        cost_table: true,
        reg_buff: true,
        chunk_size: false,
        compcaps: 0,
    },
    TunerAbi {
        version: 5,
        symbol: "ncclTunerPlugin_v5",
        releases: "2.28, 2.29",
        comm_id: true,
        cost_table: true,
        reg_buff: true,
        chunk_size: false,
        compcaps: 4,
    },
    TunerAbi {
        version: 6,
        symbol: "ncclTunerPlugin_v6",
        releases: "2.30 - 2.32.3",
        comm_id: true,
        cost_table: true,
        reg_buff: true,
        chunk_size: true,
        compcaps: 4,
    },
    TunerAbi {
        version: 7,
        symbol: "ncclTunerPlugin_v7",
        releases: "2.32.6+",
        comm_id: true,
        cost_table: true,
        reg_buff: true,
        chunk_size: true,
        // Compute capability index 4 (Rubin) added.
        compcaps: 5,
    },
];

impl TunerAbi {
    /// The row of version `v`; `None` for a version NCCL never defined.
    pub const fn get(v: u8) -> Option<&'static TunerAbi> {
        let mut i = 0;
        while i < TUNER_ABIS.len() {
            if TUNER_ABIS[i].version == v {
                return Some(&TUNER_ABIS[i]);
            }
            i += 1;
        }
        None
    }

    /// The newest version.
    pub const NEWEST: &'static TunerAbi = &TUNER_ABIS[TUNER_ABIS.len() - 1];
}

/// One version of NCCL's profiler-plugin interface (`ncclProfiler_vN_t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProfilerAbi {
    /// N in `ncclProfiler_vN`.
    pub version: u8,
    /// The data symbol NCCL's loader looks up.
    pub symbol: &'static str,
    /// The NCCL releases whose loader tries this version first.
    pub releases: &'static str,
    /// KernelCh events carry GPU timestamps (v4 on): the only versions
    /// that can trace, and the only `profiler_abi` a trace file holds.
    pub gpu_timestamps: bool,
    /// `init` gets the communicator's id, the one the tuner gets (v5 on;
    /// v4 gets a hash the tuner of its releases never sees).
    pub comm_id: bool,
    /// The descriptor's `type` is a `uint8_t` (v4) rather than a
    /// `uint64_t`.
    pub byte_type: bool,
    /// NCCL starts a plan's Coll events only under a non-NULL Group
    /// handle (v4, NCCL 2.27: `if (plan->groupEventHandle)`).
    pub needs_group_handle: bool,
    /// Lowering the event mask after init is safe (v5 on; on 2.27 it
    /// changes which graph-captured collectives the sequence numbers
    /// count partway through a job).
    pub lowers_mask: bool,
    /// The `coll` descriptor says whether a symmetric kernel ran
    /// (`kernelVariant`, `isSymColl`) and every call carries the user's
    /// profiler tag (`userTag`): v7.
    pub sym_and_tags: bool,
    /// KernelPhase sub-events (bit 15, state 31) exist, children of a
    /// KernelCh event: v7.
    pub kernel_phase: bool,
}

/// Every profiler version NCCL has defined, oldest first.
pub const PROFILER_ABIS: [ProfilerAbi; 7] = [
    ProfilerAbi::old(1, "ncclProfiler_v1", "2.23"),
    ProfilerAbi::old(2, "ncclProfiler_v2", "2.24, 2.25"),
    ProfilerAbi::old(3, "ncclProfiler_v3", "2.26"),
    ProfilerAbi {
        version: 4,
        symbol: "ncclProfiler_v4",
        releases: "2.27",
        gpu_timestamps: true,
        comm_id: false,
        byte_type: true,
        needs_group_handle: true,
        lowers_mask: false,
        sym_and_tags: false,
        kernel_phase: false,
    },
    ProfilerAbi::timed(5, "ncclProfiler_v5", "2.28"),
    ProfilerAbi::timed(6, "ncclProfiler_v6", "2.29, 2.30"),
    ProfilerAbi {
        sym_and_tags: true,
        kernel_phase: true,
        ..ProfilerAbi::timed(7, "ncclProfiler_v7", "2.31+")
    },
];

impl ProfilerAbi {
    /// v1-v3: no GPU timestamps.
    const fn old(version: u8, symbol: &'static str, releases: &'static str) -> ProfilerAbi {
        ProfilerAbi {
            version,
            symbol,
            releases,
            gpu_timestamps: false,
            comm_id: false,
            byte_type: false,
            needs_group_handle: false,
            lowers_mask: false,
            sym_and_tags: false,
            kernel_phase: false,
        }
    }

    /// v5 and v6 (and v7's base): timestamps, the tuner's id, a mask that
    /// may come down.
    const fn timed(version: u8, symbol: &'static str, releases: &'static str) -> ProfilerAbi {
        ProfilerAbi {
            gpu_timestamps: true,
            comm_id: true,
            lowers_mask: true,
            ..ProfilerAbi::old(version, symbol, releases)
        }
    }

    /// The row of version `v`; `None` for a version NCCL never defined.
    pub const fn get(v: u8) -> Option<&'static ProfilerAbi> {
        let mut i = 0;
        while i < PROFILER_ABIS.len() {
            if PROFILER_ABIS[i].version == v {
                return Some(&PROFILER_ABIS[i]);
            }
            i += 1;
        }
        None
    }

    /// The row of a version that can trace (a trace file's
    /// `profiler_abi`); `None` for any other byte.
    pub const fn traced(v: u8) -> Option<&'static ProfilerAbi> {
        match ProfilerAbi::get(v) {
            Some(a) if a.gpu_timestamps => Some(a),
            _ => None,
        }
    }

    /// The newest version.
    pub const NEWEST: &'static ProfilerAbi = &PROFILER_ABIS[PROFILER_ABIS.len() - 1];
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_in_version_order_and_name_their_symbol() {
        for (i, t) in TUNER_ABIS.iter().enumerate() {
            assert_eq!(t.version as usize, i + 2);
            assert!(t.symbol.as_bytes().ends_with(&suffix(t.version)));
            assert_eq!(TunerAbi::get(t.version), Some(t));
        }
        for (i, p) in PROFILER_ABIS.iter().enumerate() {
            assert_eq!(p.version as usize, i + 1);
            assert!(p.symbol.as_bytes().ends_with(&suffix(p.version)));
            assert_eq!(ProfilerAbi::get(p.version), Some(p));
        }
        assert_eq!(TunerAbi::get(1), None);
        assert_eq!(TunerAbi::get(8), None);
        assert_eq!(ProfilerAbi::get(0), None);
        assert_eq!(ProfilerAbi::get(8), None);
        assert_eq!(TunerAbi::NEWEST.version, 7);
        assert_eq!(ProfilerAbi::NEWEST.version, 7);
    }

    /// `_vN` as bytes (the crate is no_std).
    fn suffix(v: u8) -> [u8; 3] {
        [b'_', b'v', b'0' + v]
    }

    #[test]
    fn traced_versions_are_four_to_seven() {
        let traced: [u8; 4] = [4, 5, 6, 7];
        for v in 0..=255u8 {
            assert_eq!(
                ProfilerAbi::traced(v).is_some(),
                traced.contains(&v),
                "v{v}"
            );
        }
        assert!(ProfilerAbi::get(4).unwrap().needs_group_handle);
        assert!(!ProfilerAbi::get(4).unwrap().lowers_mask);
        assert!(ProfilerAbi::get(7).unwrap().sym_and_tags);
        assert!(!ProfilerAbi::get(6).unwrap().sym_and_tags);
        assert_eq!(TunerAbi::get(6).unwrap().compcaps, 4);
        assert_eq!(TunerAbi::get(7).unwrap().compcaps, 5);
    }
}
