//! Proves the `getCollInfo` path allocates nothing: a counting global
//! allocator (per thread, so the test harness's own threads do not count)
//! wraps the system allocator, and every ABI version's `getCollInfo` runs
//! on many inputs between two readings of the counter. Its own test binary,
//! so the allocator affects nothing else.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::ptr::null_mut;

use dyncc_runtime::plugin::{init_with_comm_id, Config};
use dyncc_runtime::*;
use dyncc_tables::{Basis, Rule, Table, TableBuilder};

#[path = "../../tests/c/harness_table.rs"]
mod harness_table;

struct Counting;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: forwards to System unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        ALLOCS.with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        ALLOCS.with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static A: Counting = Counting;

fn allocs() -> u64 {
    ALLOCS.with(|c| c.get())
}

#[test]
fn get_coll_info_allocates_nothing() {
    calls_allocate_nothing(harness_table::harness_table(), None);
}

/// With `DYNCC_EXPLORE` on a table whose decisions are all interpolated:
/// the exploring path allocates nothing either, and it does explore (fewer
/// forced cells than the same table without exploration).
#[test]
fn exploring_get_coll_info_allocates_nothing() {
    let bytes = unconfirmed(&harness_table::harness_table());
    let plain = calls_allocate_nothing(bytes.clone(), None);
    let explored = calls_allocate_nothing(with_share(&bytes, "0.1"), Some("1".into()));
    assert!(explored < plain, "{explored} forced cells of {plain}");
}

/// `bytes` carrying the exploration share `f` (the plugin explores at the
/// table's share).
fn with_share(bytes: &[u8], f: &str) -> Vec<u8> {
    let t = Table::from_bytes(bytes).unwrap();
    let mut b = TableBuilder::new();
    for (k, v) in t.meta_entries() {
        b.meta(k, v);
    }
    b.meta(dyncc_tables::META_EXPLORE, f);
    for c in t.contexts() {
        b.context(c.spec(), &c.rules().collect::<Vec<_>>()).unwrap();
    }
    b.build().unwrap()
}

/// `bytes`'s contexts with every rule interpolated (nothing confirmed).
fn unconfirmed(bytes: &[u8]) -> Vec<u8> {
    let t = Table::from_bytes(bytes).unwrap();
    let mut b = TableBuilder::new();
    for c in t.contexts() {
        let rules: Vec<Rule> = c
            .rules()
            .map(|r| Rule {
                basis: Basis::Interpolated,
                ..r
            })
            .collect();
        b.context(c.spec(), &rules).unwrap();
    }
    b.build().unwrap()
}

/// Runs every version's `getCollInfo` on many inputs with the table
/// `bytes`, asserting no allocation; returns how many cells were forced.
fn calls_allocate_nothing(bytes: Vec<u8>, explore: Option<String>) -> u64 {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.tbl");
    std::fs::write(&path, bytes).unwrap();
    let cfg = Config {
        table: Some(path.into_os_string()),
        strict: true,
        explore,
        ..Config::default()
    };
    let mut ctx = null_mut();
    let before_init = allocs();
    // SAFETY: writable context pointer.
    // With an id, as tuner v5 and later init (without one nothing explores).
    assert_eq!(
        unsafe { init_with_comm_id(&cfg, &mut ctx, 0x5EED, 8, 1, None) },
        0
    );
    assert!(
        allocs() > before_init,
        "the counter works (init allocates the context)"
    );

    // Inputs prepared up front: every collective value, sizes across the
    // whole range, pipe ops and regBuff, IGNORE cells and odd dimensions.
    let mut inputs = Vec::new();
    let mut x = 0x9e3779b97f4a7c15u64;
    for i in 0..20_000u64 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let coll = (x % 9) as i32 - 1;
        let n = (x >> 8) >> (x % 64);
        inputs.push((
            coll,
            n as usize,
            (i % 3) as i32,
            (i % 2) as i32,
            (i % 7) as usize,
        ));
    }

    let v2 = ncclTunerPlugin_v2.getCollInfo.unwrap();
    let v3 = ncclTunerPlugin_v3.getCollInfo.unwrap();
    let v4 = ncclTunerPlugin_v4.getCollInfo.unwrap();
    let v5 = ncclTunerPlugin_v5.getCollInfo.unwrap();
    let v6 = ncclTunerPlugin_v6.getCollInfo.unwrap();
    let chunk6 = ncclTunerPlugin_v6.getChunkSize.unwrap();
    let chunk7 = ncclTunerPlugin_v7.getChunkSize.unwrap();
    let mut forced = 0u64;
    let mut chunks = 0u64;
    let start = allocs();
    for &(coll, n, pipe, reg, ignore) in &inputs {
        let mut t = [1.0f32; 21];
        t[ignore * 3] = -1.0;
        let mut ch = 0;
        let tp = t.as_mut_ptr().cast();
        let (mut a, mut p) = (-1, -1);
        // SAFETY: contiguous float[7][3] and writable outs, as NCCL passes.
        unsafe {
            v2(ctx, coll, n, 1, 1, pipe, &mut a, &mut p, &mut ch);
            v3(ctx, coll, n, pipe, tp, 7, 3, &mut ch);
            v4(ctx, coll, n, pipe, tp, 6, 3, reg, &mut ch);
            v5(ctx, coll, n, pipe, tp, 7, 2, reg, &mut ch);
            v6(ctx, coll, n, pipe, tp, 7, 3, reg, &mut ch);
            v6(null_mut(), coll, n, pipe, tp, 7, 3, reg, &mut ch);
            // getChunkSize after getCollInfo, as NCCL's calcCollChunking.
            let (algo, proto) = ((ignore % 7) as i32, pipe.rem_euclid(3));
            let mut c = 3usize;
            chunk6(ctx, coll, n, algo, proto, 4, &mut c);
            chunk7(ctx, coll, n, algo, proto, 4, &mut c);
            chunk7(null_mut(), coll, n, algo, proto, 4, &mut c);
            chunk7(ctx, coll, n, algo, proto, 4, null_mut());
            chunks += u64::from(c != 3);
        }
        forced += t.iter().filter(|&&c| c == 0.0).count() as u64;
    }
    let during = allocs() - start;
    // The harness table's AllGather PAT/Simple chunk is answered (proto 2
    // when pipe is 2, algorithm 6 when ignore is 6).
    assert!(
        chunks > 10,
        "the inputs exercise answered chunks ({chunks})"
    );
    assert!(
        forced > 1000,
        "the inputs exercise forced decisions ({forced})"
    );
    assert_eq!(
        during,
        0,
        "getCollInfo or getChunkSize allocated {during} times over {} calls",
        inputs.len() * 10
    );

    // SAFETY: ctx came from init.
    unsafe { ncclTunerPlugin_v6.finalize.unwrap()(ctx) };
    forced
}

/// With `DYNCC_TRACE`: the traced `getCollInfo` and every profiler event
/// (Coll start and stop, kernel-channel start, stop time and stop, in
/// NCCL's order, each collective aggregated into the bins) allocate
/// nothing; init and finalize may.
#[test]
fn traced_get_coll_info_and_profiler_events_allocate_nothing() {
    use dyncc_runtime::profiler_ffi::*;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.tbl");
    std::fs::write(&path, harness_table::harness_table()).unwrap();
    let traces = dir.path().join("traces");
    std::fs::create_dir(&traces).unwrap();
    // SAFETY: read by the inits below only; this test binary's other test
    // never reads DYNCC_TRACE or DYNCC_TABLE from the environment.
    unsafe {
        std::env::set_var("DYNCC_TRACE", &traces);
        std::env::set_var("DYNCC_TABLE", &path);
    }
    let (mut tctx, mut pctx, mut mask) = (null_mut(), null_mut(), 0);
    // SAFETY: writable pointers, static name, NULL logger/NVL/constants.
    unsafe {
        let rc =
            ncclProfiler_v6.init.unwrap()(&mut pctx, 42, &mut mask, c"t".as_ptr(), 1, 8, 0, None);
        assert_eq!((rc, mask), (0, 66));
        let rc =
            ncclTunerPlugin_v6.init.unwrap()(&mut tctx, 42, 8, 1, None, null_mut(), null_mut());
        assert_eq!(rc, 0);
    }
    let (gci, start, stop, record) = (
        ncclTunerPlugin_v6.getCollInfo.unwrap(),
        ncclProfiler_v6.startEvent.unwrap(),
        ncclProfiler_v6.stopEvent.unwrap(),
        ncclProfiler_v6.recordEventState.unwrap(),
    );
    let before = allocs();
    for i in 0..5_000u64 {
        let mut table = [[1.0f32; 3]; 7];
        let mut nch = 0;
        let bytes = 1usize << (10 + i % 16);
        // SAFETY: contiguous float[7][3], writable nChannels; valid
        // descriptors and the handles the plugin returned.
        unsafe {
            gci(
                tctx,
                4,
                bytes,
                1,
                table.as_mut_ptr().cast(),
                7,
                3,
                0,
                &mut nch,
            );
            let mut d = ncclProfilerEventDescr_v5_t {
                type_: PROFILE_COLL,
                parentObj: null_mut(),
                rank: 0,
                u: ncclProfilerDescrUnion {
                    coll: ncclProfilerCollDescr {
                        seqNumber: i,
                        func: c"AllReduce".as_ptr(),
                        sendBuff: std::ptr::null(),
                        recvBuff: null_mut(),
                        count: bytes / 4,
                        root: 0,
                        datatype: c"ncclFloat32".as_ptr(),
                        nChannels: 2,
                        nWarps: 16,
                        algo: c"RING".as_ptr(),
                        proto: c"SIMPLE".as_ptr(),
                    },
                },
            };
            let mut h = null_mut();
            start(pctx, &mut h, &mut d);
            assert!(!h.is_null());
            stop(h);
            let mut kh = [null_mut(); 2];
            for (c, k) in kh.iter_mut().enumerate() {
                d.type_ = PROFILE_KERNEL_CH;
                d.parentObj = h;
                d.u = ncclProfilerDescrUnion {
                    kernelCh: ncclProfilerKernelChDescr {
                        channelId: c as u8,
                        pTimer: 1_000 * i + c as u64,
                    },
                };
                start(pctx, k, &mut d);
            }
            for k in kh {
                let mut a = ncclProfilerEventStateArgs {
                    pTimer: 1_000 * i + 500,
                };
                record(k, KERNEL_CH_STOP, &mut a);
                stop(k);
            }
        }
    }
    assert_eq!(allocs() - before, 0, "allocations on NCCL's threads");
    // Profiler and tuner v7 (NCCL 2.32.6) on a second communicator: tagged
    // calls, symmetric-kernel Colls, CeColls and KernelPhase children
    // allocate nothing either.
    let (mut tctx7, mut pctx7) = (null_mut(), null_mut());
    // SAFETY: as above.
    unsafe {
        let rc =
            ncclProfiler_v7.init.unwrap()(&mut pctx7, 43, &mut mask, c"t7".as_ptr(), 1, 8, 0, None);
        assert_eq!((rc, mask), (0, 66 | PROFILE_CE_COLL as i32));
        let rc =
            ncclTunerPlugin_v7.init.unwrap()(&mut tctx7, 43, 8, 1, None, null_mut(), null_mut());
        assert_eq!(rc, 0);
    }
    let (gci7, start7) = (
        ncclTunerPlugin_v7.getCollInfo.unwrap(),
        ncclProfiler_v7.startEvent.unwrap(),
    );
    let before = allocs();
    for i in 0..5_000u64 {
        let mut table = [[1.0f32; 3]; 7];
        let mut nch = 0;
        let bytes = 1usize << (10 + i % 16);
        // SAFETY: as above, with v7's descriptor (zeroed, then the members
        // each event reads).
        unsafe {
            gci7(
                tctx7,
                4,
                bytes,
                1,
                table.as_mut_ptr().cast(),
                7,
                3,
                0,
                &mut nch,
            );
            let mut d: ncclProfilerEventDescr_v7_t = std::mem::zeroed();
            let ce = i % 5 == 4;
            d.type_ = if ce { PROFILE_CE_COLL } else { PROFILE_COLL };
            if ce {
                d.u.ceColl.func = c"AllReduce".as_ptr();
                d.u.ceColl.count = bytes / 4;
                d.u.ceColl.datatype = c"ncclFloat32".as_ptr();
                d.u.ceColl.userTag = 0x200 + i % 3;
            } else {
                d.u.coll.base = ncclProfilerCollDescr {
                    seqNumber: i,
                    func: c"AllReduce".as_ptr(),
                    sendBuff: std::ptr::null(),
                    recvBuff: null_mut(),
                    count: bytes / 4,
                    root: 0,
                    datatype: c"ncclFloat32".as_ptr(),
                    nChannels: 2,
                    nWarps: 16,
                    algo: c"RING".as_ptr(),
                    proto: c"SIMPLE".as_ptr(),
                };
                d.u.coll.userTag = 0x100 + i % 3;
                if i % 4 == 3 {
                    d.u.coll.isSymColl = 1;
                    d.u.coll.kernelVariant = c"AllReduce_AGxLL_R".as_ptr();
                    d.u.coll.base.algo = c"AGxLL_R".as_ptr();
                    d.u.coll.base.proto = c"".as_ptr();
                }
            }
            let mut h = null_mut();
            start7(pctx7, &mut h, &mut d);
            assert_eq!(h.is_null(), ce || i % 4 == 3, "call {i}");
            let mut kh = [null_mut(); 2];
            for (c, k) in kh.iter_mut().enumerate() {
                d.type_ = PROFILE_KERNEL_CH;
                d.parentObj = h;
                d.u.kernelCh = ncclProfilerKernelChDescr {
                    channelId: c as u8,
                    pTimer: 1_000 * i + c as u64,
                };
                start7(pctx7, k, &mut d);
                // A phase child of the channel: NULL, its stop inert.
                d.type_ = PROFILE_KERNEL_PHASE;
                d.parentObj = *k;
                let mut ph = null_mut();
                start7(pctx7, &mut ph, &mut d);
                assert!(ph.is_null());
                let mut a = ncclProfilerEventStateArgs {
                    pTimer: 1_000 * i + 400,
                };
                record(ph, KERNEL_PHASE_STOP, &mut a);
                stop(ph);
            }
            // The profiler thread may finish the channels before the Coll
            // stop (NCCL 2.31+).
            for k in kh {
                let mut a = ncclProfilerEventStateArgs {
                    pTimer: 1_000 * i + 500,
                };
                record(k, KERNEL_CH_STOP, &mut a);
                stop(k);
            }
            stop(h);
        }
    }
    assert_eq!(allocs() - before, 0, "allocations on NCCL's threads (v7)");
    // SAFETY: the contexts the inits made, finalized once each.
    unsafe {
        ncclTunerPlugin_v7.finalize.unwrap()(tctx7);
        ncclProfiler_v7.finalize.unwrap()(pctx7);
        ncclTunerPlugin_v6.finalize.unwrap()(tctx);
        ncclProfiler_v6.finalize.unwrap()(pctx);
        std::env::remove_var("DYNCC_TRACE");
        std::env::remove_var("DYNCC_TABLE");
    }
    let written: Vec<_> = std::fs::read_dir(&traces).unwrap().flatten().collect();
    assert_eq!(written.len(), 1, "one trace file at finalize");
}
