//! Ranks of one communicator answer `getChunkSize` alike whatever their
//! own call sequences: the answer is a function of the table, the
//! communicator and the call's arguments only. Two ranks of one
//! communicator id (exploration on, the harness table's 512 KiB AllGather
//! PAT/Simple chunk): one makes 5,000 extra `getCollInfo` calls first and
//! another every 97 calls (as `ncclGroupSimulateEnd` adds), then both ask
//! the same 20,000 calls; every chunk answer and forced cell agrees.

use std::ptr::null_mut;

use dyncc_runtime::plugin::{init_with_comm_id, Config};
use dyncc_runtime::*;

#[path = "../../tests/c/harness_table.rs"]
mod harness_table;

/// getCollInfo (v6) then getChunkSize (v6) for one call: the forced cell
/// (or 21: none) and the chunk answered (NCCL's 3 when left).
fn ask(ctx: *mut std::ffi::c_void, coll: i32, n: usize) -> (usize, usize) {
    let gci = ncclTunerPlugin_v6.getCollInfo.unwrap();
    let chunk = ncclTunerPlugin_v6.getChunkSize.unwrap();
    let mut t = [1.0f32; 21];
    let mut ch = 0;
    // SAFETY: a contiguous float[7][3] and writable outs, as NCCL passes.
    unsafe { gci(ctx, coll, n, 1, t.as_mut_ptr().cast(), 7, 3, 0, &mut ch) };
    let cell = (0..21).find(|&i| t[i] == 0.0).unwrap_or(21);
    // NCCL asks with what it will run: the forced cell, else PAT/Simple
    // (the harness table's chunked pair), so the chunk path is exercised.
    let (algo, proto) = if cell < 21 {
        (cell / 3, cell % 3)
    } else {
        (6, 2)
    };
    let mut c = 3usize;
    // SAFETY: the live context and a writable size_t.
    unsafe { chunk(ctx, coll, n, algo as i32, proto as i32, ch, &mut c) };
    (cell, c)
}

#[test]
fn ranks_with_uneven_call_sequences_answer_get_chunk_size_alike() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.tbl");
    std::fs::write(&path, harness_table::harness_table()).unwrap();
    let cfg = Config {
        table: Some(path.into_os_string()),
        strict: true,
        explore: Some("1".into()),
        ..Config::default()
    };
    let (mut r0, mut r1) = (null_mut(), null_mut());
    // SAFETY: writable context pointers; one communicator id, two ranks.
    unsafe {
        assert_eq!(init_with_comm_id(&cfg, &mut r0, 0xC0FFEE, 16, 2, None), 0);
        assert_eq!(init_with_comm_id(&cfg, &mut r1, 0xC0FFEE, 16, 2, None), 0);
    }
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    // Rank 0's extra calls before the job's.
    for _ in 0..5000 {
        let v = next();
        ask(r0, (v % 5) as i32, ((v >> 8) >> (v % 40)) as usize);
    }
    let (mut differ, mut chunked) = (0, 0);
    for i in 0..20_000u32 {
        let v = next();
        let (coll, n) = ((v % 5) as i32, ((v >> 8) >> (v % 40)) as usize);
        if i % 97 == 0 {
            ask(r1, coll, n / 2 + 1);
        }
        let (a, b) = (ask(r0, coll, n), ask(r1, coll, n));
        differ += u32::from(a != b);
        chunked += u32::from(a.1 == 512 << 10);
    }
    assert_eq!(differ, 0, "ranks answered differently");
    assert!(
        chunked > 10,
        "the chunk path ran ({chunked} chunked answers)"
    );
    let fin = ncclTunerPlugin_v6.finalize.unwrap();
    // SAFETY: contexts from init, finalized once.
    unsafe {
        fin(r0);
        fin(r1);
    }
}
