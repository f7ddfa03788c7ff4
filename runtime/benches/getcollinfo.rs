//! ns per `getCollInfo` through the exported `ncclTunerPlugin_v6` function
//! pointer, including the cost-table write, against a bare
//! `[coll][log2 size]` array index doing the same store; repeated inputs
//! (what one communicator sees) and random ones (branch-mispredict worst
//! case), and what a communicator's first `init` costs (`first_init_64k`:
//! open, fstat, read, validate, digest, specialise, format the init line,
//! then finalize, which frees the table so every iteration is a first
//! load). With `DYNCC_TRACE` (`*_traced`): the same calls on a context
//! that records each answer for the profiler; and what one profiler event
//! costs (`profiler_events`: a collective's Coll start and stop and one
//! kernel channel's start, stop time and stop, 5 events per iteration, as
//! NCCL sends them; the last one aggregates into the bins).
//! Run: `cargo bench -p dyncc-runtime --bench getcollinfo`
//! (pin with `taskset -c 1` on a busy machine). Instruction counts:
//! `runtime/benches/instructions.sh`.

use std::cell::Cell;
use std::ffi::c_void;
use std::hint::black_box;
use std::sync::OnceLock;

use divan::Bencher;
use dyncc_runtime::ncclTunerPlugin_v6;
use dyncc_runtime::plugin::{init_with, Config};

#[path = "../../tests/c/harness_table.rs"]
mod harness_table;
#[path = "support/inputs.rs"]
mod inputs;
#[path = "../../tables/benches/support/table_64k.rs"]
mod table_64k;
use inputs::{check_random_inputs, random_inputs, N_INPUTS};

fn main() {
    divan::main();
}

struct Ctx(*mut c_void);
// SAFETY: the context is only read by getCollInfo, which is thread-safe.
unsafe impl Send for Ctx {}
// SAFETY: as above.
unsafe impl Sync for Ctx {}

/// One communicator (8 ranks on 1 node) on the harness table.
fn ctx() -> *mut c_void {
    static CTX: OnceLock<Ctx> = OnceLock::new();
    CTX.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bench.tbl");
        std::fs::write(&path, harness_table::harness_table()).unwrap();
        let cfg = Config {
            table: Some(path.into_os_string()),
            strict: true,
            ..Config::default()
        };
        let mut ctx = std::ptr::null_mut();
        // SAFETY: writable context pointer; the table stays cached by the
        // context after the temp dir goes.
        assert_eq!(unsafe { init_with(&cfg, &mut ctx, 8, 1, None) }, 0);
        Ctx(ctx)
    })
    .0
}

/// The baseline: a dense `[coll][floor(log2 nBytes)]` array of packed
/// decisions (algo | proto << 8 | channels << 16; 0xFF algo = default) and
/// the same guarded store into the cost table.
struct Bare {
    dense: [[u32; 64]; 5],
}

impl Bare {
    fn new() -> Bare {
        let mut dense = [[0xFFu32; 64]; 5];
        for (l, d) in dense[4].iter_mut().enumerate() {
            *d = if l <= 16 {
                0
            } else if l <= 22 {
                1 | 1 << 8 | 4 << 16
            } else {
                0xFF
            };
        }
        dense[2] = [6 | 2 << 8; 64];
        dense[3] = [4 | 2 << 8 | 8 << 16; 64];
        Bare { dense }
    }

    #[inline(never)]
    fn call(&self, coll: i32, n: usize, table: *mut f32, na: i32, np: i32, nch: *mut i32) {
        let Some(row) = self.dense.get(coll as u32 as usize) else {
            return;
        };
        let d = row[63 - (n | 1).leading_zeros() as usize];
        let (a, p, ch) = (
            (d & 0xFF) as usize,
            ((d >> 8) & 0xFF) as usize,
            (d >> 16) as i32,
        );
        if a == 0xFF || a >= na as usize || p >= np as usize {
            return;
        }
        // SAFETY: a < na and p < np, inside the caller's float[na][np].
        unsafe {
            let cell = table.add(a * np as usize + p);
            if *cell >= 0.0 {
                *cell = 0.0;
                if ch != 0 {
                    *nch = ch;
                }
            }
        }
    }
}

#[divan::bench]
fn v6_repeated(b: Bencher) {
    let ctx = ctx();
    let mut table = [[1.0f32; 3]; 7];
    let mut nch = 0;
    b.bench_local(|| {
        let gci = black_box(&ncclTunerPlugin_v6).getCollInfo.unwrap();
        // SAFETY: contiguous float[7][3], writable nChannels.
        unsafe {
            gci(
                ctx,
                black_box(4),
                black_box(1 << 20),
                1,
                table.as_mut_ptr().cast(),
                7,
                3,
                0,
                &mut nch,
            )
        }
    });
    black_box(table);
}

/// A communicator whose answers are recorded for the profiler
/// (`DYNCC_TRACE` set at its init), on the harness table.
fn traced_ctx() -> *mut c_void {
    static CTX: OnceLock<Ctx> = OnceLock::new();
    CTX.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bench.tbl");
        std::fs::write(&path, harness_table::harness_table()).unwrap();
        let init = ncclTunerPlugin_v6.init.unwrap();
        let mut ctx = std::ptr::null_mut();
        // SAFETY: divan runs benchmarks on this one thread; the variables
        // are read by init only and removed right after.
        unsafe {
            std::env::set_var("DYNCC_TRACE", dir.path());
            std::env::set_var("DYNCC_TABLE", &path);
        }
        // SAFETY: writable context pointer; NULL logger, NVL info and
        // constants are allowed.
        let rc = unsafe {
            init(
                &mut ctx,
                7,
                8,
                1,
                None,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            )
        };
        // SAFETY: as above.
        unsafe {
            std::env::remove_var("DYNCC_TRACE");
            std::env::remove_var("DYNCC_TABLE");
        }
        assert_eq!(rc, 0);
        Ctx(ctx)
    })
    .0
}

#[divan::bench]
fn v6_repeated_traced(b: Bencher) {
    let ctx = traced_ctx();
    let mut table = [[1.0f32; 3]; 7];
    let mut nch = 0;
    b.bench_local(|| {
        let gci = black_box(&ncclTunerPlugin_v6).getCollInfo.unwrap();
        // SAFETY: contiguous float[7][3], writable nChannels.
        unsafe {
            gci(
                ctx,
                black_box(4),
                black_box(1 << 20),
                1,
                table.as_mut_ptr().cast(),
                7,
                3,
                0,
                &mut nch,
            )
        }
    });
    black_box(table);
}

#[divan::bench]
fn v6_random_traced(b: Bencher) {
    let ctx = traced_ctx();
    let inputs = random_inputs();
    let mut table = [[1.0f32; 3]; 7];
    let mut nch = 0;
    let i = Cell::new(0usize);
    b.bench_local(|| {
        let (coll, n) = inputs[i.get() % N_INPUTS];
        i.set(i.get() + 1);
        let gci = black_box(&ncclTunerPlugin_v6).getCollInfo.unwrap();
        // SAFETY: contiguous float[7][3], writable nChannels.
        unsafe {
            gci(
                ctx,
                coll,
                n,
                1,
                table.as_mut_ptr().cast(),
                7,
                3,
                0,
                &mut nch,
            )
        }
    });
    black_box(table);
}

/// Five profiler events per iteration (see the module doc), through the
/// exported `ncclProfiler_v6` on a recording rank 0. Fixed sample sizes:
/// divan's own choice here was 1 iteration per sample, which measured
/// mostly its timer.
#[divan::bench(sample_size = 1000, sample_count = 200)]
fn profiler_events(b: Bencher) {
    use dyncc_runtime::ncclProfiler_v6 as prof;
    use dyncc_runtime::profiler_ffi::*;
    let dir = tempfile::tempdir().unwrap();
    let mut pctx = std::ptr::null_mut();
    let mut mask = 0;
    // SAFETY: single-threaded; read by init only, removed right after.
    unsafe { std::env::set_var("DYNCC_TRACE", dir.path()) };
    // SAFETY: writable pointers, a static name, NULL logger.
    let rc =
        unsafe { prof.init.unwrap()(&mut pctx, 9, &mut mask, c"bench".as_ptr(), 1, 8, 0, None) };
    // SAFETY: as above.
    unsafe { std::env::remove_var("DYNCC_TRACE") };
    assert_eq!((rc, mask), (0, 66));
    let coll = ncclProfilerCollDescr {
        seqNumber: 0,
        func: c"AllReduce".as_ptr(),
        sendBuff: std::ptr::null(),
        recvBuff: std::ptr::null_mut(),
        count: 1 << 18,
        root: 0,
        datatype: c"ncclFloat32".as_ptr(),
        nChannels: 1,
        nWarps: 16,
        algo: c"RING".as_ptr(),
        proto: c"SIMPLE".as_ptr(),
    };
    let (start, stop, record) = (
        prof.startEvent.unwrap(),
        prof.stopEvent.unwrap(),
        prof.recordEventState.unwrap(),
    );
    let t = Cell::new(1_000_000u64);
    b.counter(divan::counter::ItemsCount::new(5usize))
        .bench_local(|| {
            let mut d = ncclProfilerEventDescr_v5_t {
                type_: PROFILE_COLL,
                parentObj: std::ptr::null_mut(),
                rank: 0,
                u: ncclProfilerDescrUnion { coll },
            };
            let (mut h, mut kh) = (std::ptr::null_mut(), std::ptr::null_mut());
            let t0 = t.get();
            t.set(t0 + 10_000 + (t0 & 0xfff));
            // SAFETY: the context init made, valid descriptors and handles.
            unsafe {
                start(pctx, &mut h, &mut d);
                stop(h);
                d.type_ = PROFILE_KERNEL_CH;
                d.parentObj = h;
                d.u = ncclProfilerDescrUnion {
                    kernelCh: ncclProfilerKernelChDescr {
                        channelId: 0,
                        pTimer: t0,
                    },
                };
                start(pctx, &mut kh, &mut d);
                let mut a = ncclProfilerEventStateArgs {
                    pTimer: t0 + 5_000 + (t0 & 0xfff),
                };
                record(kh, KERNEL_CH_STOP, &mut a);
                stop(kh);
            }
            black_box(h);
        });
    // SAFETY: the context init made, after its last event.
    unsafe { prof.finalize.unwrap()(pctx) };
}

#[divan::bench]
fn v6_random(b: Bencher) {
    let ctx = ctx();
    let inputs = random_inputs();
    check_random_inputs(&inputs);
    let mut table = [[1.0f32; 3]; 7];
    let mut nch = 0;
    let i = Cell::new(0usize);
    b.bench_local(|| {
        let (coll, n) = inputs[i.get() % N_INPUTS];
        i.set(i.get() + 1);
        let gci = black_box(&ncclTunerPlugin_v6).getCollInfo.unwrap();
        // SAFETY: contiguous float[7][3], writable nChannels.
        unsafe {
            gci(
                ctx,
                coll,
                n,
                1,
                table.as_mut_ptr().cast(),
                7,
                3,
                0,
                &mut nch,
            )
        }
    });
    black_box(table);
}

/// First `init` of a communicator on a ~64 KiB table (nothing cached),
/// then its `finalize`, through the exported v6 struct as NCCL calls them.
#[divan::bench]
fn first_init_64k(b: Bencher) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t64k.tbl");
    let bytes = table_64k::table_64k();
    assert!((60 << 10..=70 << 10).contains(&bytes.len()));
    std::fs::write(&path, bytes).unwrap();
    // SAFETY: plain environment write before any init reads it; the bench
    // is single-threaded here.
    unsafe { std::env::set_var("DYNCC_TABLE", &path) };
    let v6 = &ncclTunerPlugin_v6;
    let (init, fin) = (v6.init.unwrap(), v6.finalize.unwrap());
    let mut nvl = dyncc_runtime::ffi::ncclNvlDomainInfo_v5_t {
        nNvlDomains: 2,
        minRanksPerNvlDomain: 8,
        maxRanksPerNvlDomain: 8,
    };
    b.bench_local(|| {
        let mut ctx = std::ptr::null_mut();
        // SAFETY: writable context pointer and NVL info; NULL logger and
        // constants are allowed.
        let rc = unsafe { init(&mut ctx, 1, 16, 2, None, &mut nvl, std::ptr::null_mut()) };
        assert_eq!(rc, 0);
        assert!(!ctx.is_null());
        // SAFETY: the context init just made; finalized once.
        unsafe { fin(ctx) };
    });
    assert_eq!(dyncc_runtime::cache::loaded_tables(), 0);
}

#[divan::bench]
fn bare_index_repeated(b: Bencher) {
    let bare = Bare::new();
    let mut table = [[1.0f32; 3]; 7];
    let mut nch = 0;
    b.bench_local(|| {
        black_box(&bare).call(
            black_box(4),
            black_box(1 << 20),
            table.as_mut_ptr().cast(),
            7,
            3,
            &mut nch,
        )
    });
    black_box(table);
}

#[divan::bench]
fn bare_index_random(b: Bencher) {
    let bare = Bare::new();
    let inputs = random_inputs();
    check_random_inputs(&inputs);
    let mut table = [[1.0f32; 3]; 7];
    let mut nch = 0;
    let i = Cell::new(0usize);
    b.bench_local(|| {
        let (coll, n) = inputs[i.get() % N_INPUTS];
        i.set(i.get() + 1);
        black_box(&bare).call(coll, n, table.as_mut_ptr().cast(), 7, 3, &mut nch)
    });
    black_box(table);
}
