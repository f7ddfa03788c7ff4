//! Drives `ncclTunerPlugin_v6.getCollInfo` N times for instruction counting
//! under callgrind (see runtime/benches/instructions.sh, which runs this with
//! N calls and with 0 calls and divides the difference by N).
//!
//! Usage: `callgrind_getcollinfo N repeated|random`. With `DYNCC_TRACE`
//! set (a directory), the communicator records each answer for the
//! profiler, as it does in a traced job. With `DYNCC_EXPLORE` set (a
//! share, which the table is made to carry: the plugin explores at the
//! table's), the table's decisions are made interpolated, so every forced
//! call is one exploration may take: the exploring path's worst case.

use std::hint::black_box;

use dyncc_runtime::ncclTunerPlugin_v6;
use dyncc_runtime::plugin::{init_with_comm_id, Config};
use dyncc_tables::{Basis, Rule, Table, TableBuilder};

#[path = "../../tests/c/harness_table.rs"]
mod harness_table;
#[path = "../benches/support/inputs.rs"]
mod inputs;

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args
        .next()
        .and_then(|a| a.parse().ok())
        .expect("usage: callgrind_getcollinfo N repeated|random");
    let random = match args.next().as_deref() {
        Some("random") => true,
        Some("repeated") | None => false,
        Some(other) => panic!("mode must be repeated or random, not {other}"),
    };
    let dir = std::env::temp_dir().join(format!("dyncc-callgrind-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("t.tbl");
    std::fs::write(&path, table_bytes()).unwrap();
    let mut ctx = std::ptr::null_mut();
    if std::env::var_os("DYNCC_TRACE").is_some() {
        // Through the v6 init, which gets the communicator id the trace
        // journal is keyed by.
        // SAFETY: single-threaded here; nothing reads the environment yet.
        unsafe { std::env::set_var("DYNCC_TABLE", &path) };
        let init = ncclTunerPlugin_v6.init.unwrap();
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
        assert_eq!(rc, 0);
    } else {
        let cfg = Config {
            table: Some(path.clone().into_os_string()),
            strict: true,
            explore: explore_share(),
            ..Config::default()
        };
        // With a communicator id, as tuner v5 and later init: without one
        // nothing explores.
        // SAFETY: writable context pointer.
        assert_eq!(
            unsafe { init_with_comm_id(&cfg, &mut ctx, 7, 8, 1, None) },
            0
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();

    // The same fixed-size input set whatever N is, so it cancels out.
    let inputs = inputs::random_inputs();
    inputs::check_random_inputs(&inputs);
    if std::env::var_os("DYNCC_BENCH_CHUNK").is_some() {
        chunk_calls(ctx, n, random, &inputs);
        // SAFETY: ctx came from init.
        unsafe { ncclTunerPlugin_v6.finalize.unwrap()(ctx) };
        return;
    }
    let mut table = [[1.0f32; 3]; 7];
    let mut nch = 0;
    let gci = black_box(&ncclTunerPlugin_v6).getCollInfo.unwrap();
    for i in 0..n {
        let (coll, bytes) = if random {
            inputs[i % inputs::N_INPUTS]
        } else {
            (4, 1 << 20)
        };
        // SAFETY: contiguous float[7][3], writable nChannels.
        unsafe {
            gci(
                ctx,
                black_box(coll),
                black_box(bytes),
                1,
                table.as_mut_ptr().cast(),
                7,
                3,
                0,
                &mut nch,
            )
        };
    }
    black_box(table);
    // SAFETY: ctx came from init.
    unsafe { ncclTunerPlugin_v6.finalize.unwrap()(ctx) };
}

/// `DYNCC_BENCH_CHUNK`: `getChunkSize` N times instead, as NCCL asks
/// after getCollInfo chose (AllGather PAT/Simple repeated: the harness
/// table's 512 KiB answered; random: the inputs' cells, mostly NCCL's
/// kept). Apart from `main`'s loop, which compiles as before.
#[inline(never)]
fn chunk_calls(ctx: *mut std::ffi::c_void, n: usize, random: bool, inputs: &[(i32, usize)]) {
    let gcs = black_box(&ncclTunerPlugin_v6).getChunkSize.unwrap();
    let mut chunk = 0usize;
    for i in 0..n {
        let (coll, bytes) = if random {
            inputs[i % inputs::N_INPUTS]
        } else {
            (2, 1 << 20)
        };
        chunk = 131072;
        // SAFETY: a context from init, a writable size_t.
        unsafe { gcs(ctx, black_box(coll), black_box(bytes), 6, 2, 4, &mut chunk) };
    }
    black_box(chunk);
}

/// The harness table, unconfirmed with `DYNCC_EXPLORE`. Not inlined, so
/// the timed loop in `main` compiles as it did before exploration.
#[inline(never)]
fn table_bytes() -> Vec<u8> {
    let bytes = harness_table::harness_table();
    if std::env::var_os("DYNCC_EXPLORE").is_some() {
        unconfirmed(&bytes)
    } else {
        bytes
    }
}

/// `DYNCC_EXPLORE`, if set: the switch (the share is the table's).
#[inline(never)]
fn explore_share() -> Option<String> {
    std::env::var("DYNCC_EXPLORE").ok()
}

/// `bytes`'s contexts with every rule interpolated (nothing confirmed).
fn unconfirmed(bytes: &[u8]) -> Vec<u8> {
    let t = Table::from_bytes(bytes).unwrap();
    let mut b = TableBuilder::new();
    for (k, v) in t.meta_entries() {
        b.meta(k, v);
    }
    if let Some(f) = explore_share() {
        b.meta(dyncc_tables::META_EXPLORE, &f);
    }
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
