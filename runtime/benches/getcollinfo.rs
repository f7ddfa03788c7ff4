//! ns per `getCollInfo` through the exported `ncclTunerPlugin_v6` function
//! pointer, including the cost-table write, against a bare
//! `[coll][log2 size]` array index doing the same store; repeated inputs
//! (what one communicator sees) and random ones (branch-mispredict worst
//! case). Run: `cargo bench -p dyncc-runtime --bench getcollinfo`
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
        };
        let mut ctx = std::ptr::null_mut();
        // SAFETY: writable context pointer; the table stays cached by the
        // context after the temp dir goes.
        assert_eq!(unsafe { init_with(&cfg, &mut ctx, 8, 1, None) }, 0);
        Ctx(ctx)
    })
    .0
}

const N_INPUTS: usize = 4096;

/// Random (coll, nBytes) pairs over the tunable collectives and 1 B-4 GiB.
fn random_inputs() -> Vec<(i32, usize)> {
    let mut x = 0x2545f4914f6cdd1du64;
    (0..N_INPUTS)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ((x % 5) as i32, ((x >> 16) as usize) >> (32 + (x % 32)))
        })
        .collect()
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

#[divan::bench]
fn v6_random(b: Bencher) {
    let ctx = ctx();
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
