//! The plugin's paths through the rlib: the exported `ncclTunerPlugin_vN`
//! statics called directly from Rust (the same code the cdylib exports),
//! the configuration from the environment, the process-wide table cache,
//! and the C API. Tests that touch the environment or the cache hold
//! `SERIAL` so they never overlap.

use std::ffi::c_void;
use std::ptr::{null, null_mut};
use std::sync::Mutex;

use dyncc_runtime::cache::loaded_tables;
use dyncc_runtime::ffi::*;
use dyncc_runtime::plugin::{init_with, Config};
use dyncc_runtime::*;

#[path = "../../tests/c/harness_table.rs"]
mod harness_table;

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

struct Files {
    dir: tempfile::TempDir,
}

impl Files {
    fn new() -> Files {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("good.tbl"), harness_table::harness_table()).unwrap();
        std::fs::write(
            dir.path().join("corrupt.tbl"),
            harness_table::corrupt_table(),
        )
        .unwrap();
        Files { dir }
    }
    fn path(&self, name: &str) -> std::path::PathBuf {
        self.dir.path().join(name)
    }
}

fn cfg(path: Option<&std::path::Path>, strict: bool) -> Config {
    Config {
        table: path.map(|p| p.as_os_str().to_owned()),
        strict,
        ..Config::default()
    }
}

/// Calls v6 getCollInfo on a fresh float[7][3] of positive costs; returns
/// the forced (algo, proto) if a cell became 0.0, and nChannels.
fn call_v6(
    ctx: *mut c_void,
    coll: i32,
    n_bytes: usize,
    pipe: i32,
    reg: i32,
) -> (Option<(usize, usize)>, i32) {
    let mut table = [[1.0f32; 3]; 7];
    let mut n_ch = 0;
    let gci = ncclTunerPlugin_v6.getCollInfo.unwrap();
    // SAFETY: a contiguous float[7][3] and a writable nChannels, as NCCL
    // passes them.
    let rc = unsafe {
        gci(
            ctx,
            coll,
            n_bytes,
            pipe,
            table.as_mut_ptr().cast(),
            7,
            3,
            reg,
            &mut n_ch,
        )
    };
    assert_eq!(rc, NCCL_SUCCESS);
    let forced = (0..21)
        .find(|&i| table[i / 3][i % 3] == 0.0)
        .map(|i| (i / 3, i % 3));
    (forced, n_ch)
}

fn finalize(ctx: *mut c_void) {
    // SAFETY: ctx came from init (or is NULL).
    assert_eq!(
        unsafe { ncclTunerPlugin_v6.finalize.unwrap()(ctx) },
        NCCL_SUCCESS
    );
}

#[test]
fn valid_table_forces_the_tables_decisions() {
    let _g = serial();
    let f = Files::new();
    let mut ctx = null_mut();
    // SAFETY: writable context pointer.
    let rc = unsafe { init_with(&cfg(Some(&f.path("good.tbl")), true), &mut ctx, 8, 1, None) };
    assert_eq!(rc, NCCL_SUCCESS);
    assert!(!ctx.is_null());
    assert_eq!(call_v6(ctx, 4, 1024, 1, 0), (Some((0, 0)), 0)); // Tree/LL
    assert_eq!(call_v6(ctx, 4, 1 << 20, 1, 0), (Some((1, 1)), 4)); // Ring/LL128 x4
    assert_eq!(call_v6(ctx, 4, 64 << 20, 1, 0), (None, 0)); // default
    assert_eq!(call_v6(ctx, 1, 1 << 20, 1, 0), (None, 0)); // reduce: no context
    assert_eq!(call_v6(ctx, 3, 1 << 20, 1, 0), (Some((4, 2)), 8)); // NVLS/Simple x8
    assert_eq!(call_v6(ctx, 3, 1 << 20, 2, 0), (None, 0)); // numPipeOps 2
    assert_eq!(call_v6(ctx, 3, 1 << 20, 1, 1), (Some((4, 2)), 8)); // regBuff: no say
    assert_eq!(call_v6(ctx, -1, 1 << 20, 1, 0), (None, 0));
    assert_eq!(call_v6(ctx, 9, 1 << 20, 1, 0), (None, 0));
    finalize(ctx);
    assert_eq!(loaded_tables(), 0, "the last finalize frees the table");
}

#[test]
fn ignore_cells_and_table_bounds_are_respected() {
    let _g = serial();
    let f = Files::new();
    let mut ctx = null_mut();
    // SAFETY: writable context pointer.
    unsafe { init_with(&cfg(Some(&f.path("good.tbl")), true), &mut ctx, 8, 1, None) };
    let gci = ncclTunerPlugin_v4.getCollInfo.unwrap();
    // Broadcast forces CollNetDirect/Simple (cell 2*3+2) with 2 channels.
    let mut t = [5.0f32; 23];
    t[1 + 8] = -1.0;
    let before = t;
    let mut n_ch = 0;
    // SAFETY: t[1..22] is a contiguous float[7][3].
    unsafe {
        gci(
            ctx,
            0,
            1 << 20,
            1,
            t[1..].as_mut_ptr().cast(),
            7,
            3,
            0,
            &mut n_ch,
        )
    };
    assert_eq!(t, before, "an IGNORE cell is never written");
    assert_eq!(n_ch, 0, "no channel count without the forced cell");
    // AllGather forces PAT (algo 6): outside a numAlgo = 6 table (NCCL 2.22).
    let mut t = [5.0f32; 20];
    let before = t;
    // SAFETY: t[1..19] is a contiguous float[6][3]; t[19] is a canary.
    unsafe {
        gci(
            ctx,
            2,
            1 << 20,
            1,
            t[1..].as_mut_ptr().cast(),
            6,
            3,
            0,
            &mut n_ch,
        )
    };
    assert_eq!(t, before, "PAT is ignored when numAlgo is 6");
    // NULL table and NULL nChannels.
    // SAFETY: NULLs are allowed.
    assert_eq!(
        unsafe { gci(ctx, 4, 1 << 20, 1, null_mut(), 7, 3, 0, null_mut()) },
        NCCL_SUCCESS
    );
    let mut t = [5.0f32; 21];
    // SAFETY: contiguous float[7][3]; NULL nChannels.
    unsafe {
        gci(
            ctx,
            4,
            1 << 20,
            1,
            t.as_mut_ptr().cast(),
            7,
            3,
            0,
            null_mut(),
        )
    };
    assert_eq!(t[4], 0.0);
    finalize(ctx);
}

#[test]
fn v2_answers_algorithm_and_protocol_only_when_supported() {
    let _g = serial();
    let f = Files::new();
    let mut ctx = null_mut();
    // SAFETY: writable context pointer.
    unsafe { init_with(&cfg(Some(&f.path("good.tbl")), true), &mut ctx, 8, 1, None) };
    let gci = ncclTunerPlugin_v2.getCollInfo.unwrap();
    let call = |coll, bytes, collnet, nvls| {
        let (mut a, mut p, mut ch) = (-1, -1, 0);
        // SAFETY: writable outs.
        let rc = unsafe { gci(ctx, coll, bytes, collnet, nvls, 1, &mut a, &mut p, &mut ch) };
        assert_eq!(rc, NCCL_SUCCESS);
        (a, p, ch)
    };
    assert_eq!(call(4, 1 << 20, 0, 0), (1, 1, 4));
    assert_eq!(call(2, 1 << 20, 1, 1), (-1, -1, 0), "no PAT in NCCL 2.21");
    assert_eq!(
        call(0, 1 << 20, 0, 1),
        (-1, -1, 0),
        "CollNet needs collNetSupport"
    );
    assert_eq!(
        call(0, 1 << 20, 1, 0),
        (-1, -1, 0),
        "NCCL runs broadcast with Ring only, and CollNet on one node never"
    );
    assert_eq!(
        call(3, 1 << 20, 1, 0),
        (-1, -1, 0),
        "NVLS needs nvlsSupport"
    );
    assert_eq!(call(3, 1 << 20, 0, 1), (4, 2, 8));
    finalize(ctx);
}

/// NCCL 2.21 takes a v2 answer unchecked, so an answer NCCL cannot run
/// (Tree for allgather, CollNet on one node, NVLS across nodes without
/// CollNet) is undefined behaviour there: v2 answered every Tree and Ring
/// and every supported CollNet/NVLS, whatever the collective and shape.
#[test]
fn v2_answers_only_what_nccl_can_run_for_the_collective_and_shape() {
    use dyncc_tables::{
        Algo, Basis, Coll, ContextSpec, Decision, Proto, RegBuff, Rule, Setting, TableBuilder,
    };
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let force = |algo, proto| {
        [Rule {
            last_bucket: 255,
            decision: Decision::Force(Setting::new(algo, proto)),
            basis: Basis::Measured,
            gain: 1.2,
        }]
    };
    let spec = |coll| ContextSpec {
        coll,
        nodes: (1, 8),
        ppn: (1, 16),
        max_pipe_ops: 0,
        reg_buff: RegBuff::Any,
    };
    let mut b = TableBuilder::new();
    b.context(
        spec(Coll::AllReduce),
        &force(Algo::CollNetChain, Proto::Simple),
    )
    .unwrap();
    b.context(spec(Coll::AllGather), &force(Algo::Tree, Proto::LL))
        .unwrap();
    b.context(spec(Coll::ReduceScatter), &force(Algo::Nvls, Proto::Simple))
        .unwrap();
    let path = dir.path().join("t.tbl");
    std::fs::write(&path, b.build().unwrap()).unwrap();
    let gci = ncclTunerPlugin_v2.getCollInfo.unwrap();
    let answer = |n_ranks, n_nodes, coll, collnet, nvls| {
        let mut ctx = null_mut();
        // SAFETY: writable context pointer.
        let rc = unsafe { init_with(&cfg(Some(&path), true), &mut ctx, n_ranks, n_nodes, None) };
        assert_eq!(rc, NCCL_SUCCESS);
        let (mut a, mut p, mut ch) = (-1, -1, 0);
        // SAFETY: a context from init, writable outs.
        unsafe {
            gci(
                ctx,
                coll,
                1 << 20,
                collnet,
                nvls,
                1,
                &mut a,
                &mut p,
                &mut ch,
            )
        };
        finalize(ctx);
        (a, p)
    };
    let (ar, ag, rs) = (4, 2, 3);
    assert_eq!(answer(16, 2, ar, 1, 0), (3, 2), "CollNetChain on 2 nodes");
    assert_eq!(answer(8, 1, ar, 1, 0), (-1, -1), "CollNet on one node");
    assert_eq!(
        answer(32, 2, ar, 1, 0),
        (-1, -1),
        "CollNet with 16 GPUs per node"
    );
    assert_eq!(
        answer(16, 2, ag, 0, 0),
        (-1, -1),
        "Tree does not run allgather"
    );
    assert_eq!(answer(8, 1, rs, 0, 1), (4, 2), "NVLS in one node");
    assert_eq!(
        answer(16, 2, rs, 0, 1),
        (-1, -1),
        "NVLS across nodes without CollNet"
    );
    assert_eq!(
        answer(16, 2, rs, 1, 1),
        (4, 2),
        "NVLS across nodes with CollNet"
    );
}

#[test]
fn bad_tables_fail_init_when_strict_and_leave_nccl_alone_otherwise() {
    let _g = serial();
    let f = Files::new();
    for (name, strict_rc) in [
        ("missing.tbl", NCCL_SYSTEM_ERROR),
        ("corrupt.tbl", NCCL_INVALID_USAGE),
    ] {
        let p = f.path(name);
        let mut ctx = std::ptr::dangling_mut::<c_void>(); // must be overwritten
                                                          // SAFETY: writable context pointer.
        assert_eq!(
            unsafe { init_with(&cfg(Some(&p), true), &mut ctx, 8, 1, None) },
            strict_rc,
            "{name}"
        );
        assert!(ctx.is_null());
        let mut ctx = std::ptr::dangling_mut::<c_void>(); // must be overwritten
                                                          // SAFETY: writable context pointer.
        assert_eq!(
            unsafe { init_with(&cfg(Some(&p), false), &mut ctx, 8, 1, None) },
            NCCL_SUCCESS
        );
        assert!(ctx.is_null(), "lenient mode leaves NCCL alone");
        assert_eq!(call_v6(ctx, 4, 1024, 1, 0), (None, 0));
        finalize(ctx);
    }
    assert_eq!(loaded_tables(), 0, "failed loads are not cached");
    // SAFETY: NULL out-pointer is refused.
    assert_eq!(
        unsafe { init_with(&cfg(None, true), null_mut(), 8, 1, None) },
        NCCL_INVALID_ARGUMENT
    );
}

#[test]
fn environment_configures_the_exported_init() {
    let _g = serial();
    let f = Files::new();
    let init4 = ncclTunerPlugin_v4.init.unwrap();
    let init6 = ncclTunerPlugin_v6.init.unwrap();
    let run = |table: Option<&std::path::Path>, strict: Option<&str>| {
        match table {
            Some(p) => std::env::set_var("DYNCC_TABLE", p),
            None => std::env::remove_var("DYNCC_TABLE"),
        }
        match strict {
            Some(s) => std::env::set_var("DYNCC_STRICT", s),
            None => std::env::remove_var("DYNCC_STRICT"),
        }
        let (mut c4, mut c6) = (null_mut(), null_mut());
        let mut nvl = ncclNvlDomainInfo_v5_t {
            nNvlDomains: 1,
            minRanksPerNvlDomain: 8,
            maxRanksPerNvlDomain: 8,
        };
        // SAFETY: writable context pointers; NULL constants are allowed.
        let r4 = unsafe { init4(8, 1, None, &mut c4) };
        // SAFETY: as above.
        let r6 = unsafe { init6(&mut c6, 7, 8, 1, None, &mut nvl, null_mut()) };
        finalize(c4);
        finalize(c6);
        (r4, r6, !c4.is_null(), !c6.is_null())
    };
    assert_eq!(run(Some(&f.path("good.tbl")), None), (0, 0, true, true));
    assert_eq!(run(None, None), (0, 0, false, false));
    std::env::set_var("DYNCC_TABLE", "");
    assert_eq!(
        Config::from_env().table,
        None,
        "an empty DYNCC_TABLE is no table"
    );
    let missing = f.path("missing.tbl");
    assert_eq!(
        run(Some(&missing), None),
        (NCCL_SYSTEM_ERROR, NCCL_SYSTEM_ERROR, false, false)
    );
    assert_eq!(
        run(Some(&missing), Some("1")),
        (NCCL_SYSTEM_ERROR, NCCL_SYSTEM_ERROR, false, false)
    );
    for lenient in ["0", "false", "OFF", " no "] {
        assert_eq!(
            run(Some(&missing), Some(lenient)),
            (0, 0, false, false),
            "DYNCC_STRICT={lenient:?}"
        );
    }
    std::env::remove_var("DYNCC_TABLE");
    std::env::remove_var("DYNCC_STRICT");
}

#[test]
fn hundreds_of_communicators_share_one_loaded_table() {
    let _g = serial();
    let f = Files::new();
    let good = f.path("good.tbl");
    let c = cfg(Some(&good), true);
    let mut ctxs = Vec::new();
    for i in 0..300 {
        let mut ctx = null_mut();
        // SAFETY: writable context pointer.
        assert_eq!(
            unsafe { init_with(&c, &mut ctx, 8 * (1 + i % 8), 1 + i % 8, None) },
            0
        );
        ctxs.push(ctx);
        if i == 0 {
            // Once loaded, the file is never read again while a context
            // holds the table.
            std::fs::remove_file(&good).unwrap();
        }
    }
    assert_eq!(loaded_tables(), 1);
    for ctx in ctxs.drain(..150) {
        finalize(ctx);
    }
    assert_eq!(loaded_tables(), 1);
    for ctx in ctxs {
        finalize(ctx);
    }
    assert_eq!(loaded_tables(), 0);
    let mut ctx = null_mut();
    // SAFETY: writable context pointer.
    assert_eq!(
        unsafe { init_with(&c, &mut ctx, 8, 1, None) },
        NCCL_SYSTEM_ERROR,
        "freed, so read again"
    );
}

#[test]
fn concurrent_communicators_agree() {
    let _g = serial();
    let f = Files::new();
    let c = cfg(Some(&f.path("good.tbl")), true);
    std::thread::scope(|s| {
        for t in 0..4 {
            let c = &c;
            s.spawn(move || {
                for i in 0..50 {
                    let mut ctx = null_mut();
                    let nodes = if (t + i) % 2 == 0 { 1 } else { 8 };
                    // SAFETY: writable context pointer.
                    assert_eq!(unsafe { init_with(c, &mut ctx, 8 * nodes, nodes, None) }, 0);
                    let want = if nodes == 1 {
                        (Some((1, 1)), 4)
                    } else {
                        (Some((0, 2)), 0)
                    };
                    for _ in 0..20 {
                        assert_eq!(call_v6(ctx, 4, 1 << 20, 1, 0), want);
                    }
                    finalize(ctx);
                }
            });
        }
    });
    assert_eq!(loaded_tables(), 0);
}

#[test]
fn c_api_matches_the_plugin_and_checks_its_arguments() {
    let _g = serial();
    let f = Files::new();
    let bytes = harness_table::harness_table();
    let mut t = null_mut();
    // SAFETY: valid bytes and out-pointer.
    assert_eq!(
        unsafe { dyncc_table_open(bytes.as_ptr(), bytes.len(), &mut t) },
        DYNCC_OK
    );
    let mut bad = std::ptr::dangling_mut::<dyncc_table>(); // must be overwritten
    let corrupt = harness_table::corrupt_table();
    // SAFETY: as above.
    assert_eq!(
        unsafe { dyncc_table_open(corrupt.as_ptr(), corrupt.len(), &mut bad) },
        DYNCC_ERR_INVALID_TABLE
    );
    assert!(bad.is_null());
    // SAFETY: NULL bytes are refused.
    assert_eq!(
        unsafe { dyncc_table_open(null(), 10, &mut bad) },
        DYNCC_ERR_NULL_ARGUMENT
    );
    let mut newer = bytes.clone();
    newer[8] = 99; // format major (u16 LE right after the magic)
    newer[9] = 0;
    // SAFETY: as above.
    assert_eq!(
        unsafe { dyncc_table_open(newer.as_ptr(), newer.len(), &mut bad) },
        DYNCC_ERR_UNSUPPORTED_VERSION
    );

    for (ranks, nodes) in [(8usize, 1usize), (64, 8), (16, 1), (16, 2)] {
        let mut ctx = null_mut();
        // SAFETY: writable context pointer.
        unsafe {
            init_with(
                &cfg(Some(&f.path("good.tbl")), true),
                &mut ctx,
                ranks,
                nodes,
                None,
            )
        };
        for coll in -1..7 {
            for k in 0..64 {
                let n = (1usize << k) | (k % 5);
                for (pipe, reg) in [(1, 0), (2, 0), (1, 1), (0, 0)] {
                    let (mut a, mut p, mut ch) = (0, 0, 0);
                    // SAFETY: live table, writable outs.
                    let st = unsafe {
                        dyncc_table_lookup(
                            t, coll, ranks, nodes, n, pipe, reg, &mut a, &mut p, &mut ch,
                        )
                    };
                    assert_eq!(st, DYNCC_OK);
                    let want = if a < 0 {
                        (None, 0)
                    } else {
                        (Some((a as usize, p as usize)), ch)
                    };
                    assert_eq!(
                        call_v6(ctx, coll, n, pipe, reg),
                        want,
                        "{ranks}x{nodes} coll {coll} n {n}"
                    );
                }
            }
        }
        finalize(ctx);
    }
    let (mut a, mut p, mut ch) = (0, 0, 0);
    // SAFETY: NULL table is refused.
    assert_eq!(
        unsafe { dyncc_table_lookup(null(), 4, 8, 1, 1, 1, 0, &mut a, &mut p, &mut ch) },
        DYNCC_ERR_NULL_ARGUMENT
    );
    // SAFETY: the table came from dyncc_table_open; NULL is a no-op.
    unsafe {
        dyncc_table_close(t);
        dyncc_table_close(null_mut());
    }
    // SAFETY: static strings.
    let s = |code| {
        unsafe { std::ffi::CStr::from_ptr(dyncc_status_str(code)) }
            .to_str()
            .unwrap()
    };
    assert_eq!(s(DYNCC_OK), "ok");
    assert!(s(DYNCC_ERR_INVALID_TABLE).contains("valid"));
    assert_eq!(s(77), "unknown dyncc status");
    // SAFETY: static string.
    let v = unsafe { std::ffi::CStr::from_ptr(dyncc_version()) };
    assert_eq!(v.to_str().unwrap(), env!("CARGO_PKG_VERSION"));
}
