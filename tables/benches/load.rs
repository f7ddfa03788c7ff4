//! Load and hot-path costs of the table format.
//!
//! - `load_64k`: what every first load of a ~64 KiB table costs: validate
//!   (`from_bytes`) plus the digest the plugin logs and `dyncc verify`
//!   prints; `from_bytes_64k` and `digest_64k` are its two parts.
//! - `decide` vs `bare_array`: `Specialised::decide` against a bare
//!   `[coll][log2 size]` array index doing the same job without checks.
//!
//! Run: `cargo bench -p dyncc-tables --features build --bench load`.

use std::hint::black_box;

use divan::Bencher;
use dyncc_tables::{digest, Comm, Decision, Table};

#[path = "support/table_64k.rs"]
mod support;
use support::table_64k;

fn main() {
    divan::main();
}

#[divan::bench]
fn from_bytes_64k(bencher: Bencher) {
    let bytes = table_64k();
    assert!(
        (60 * 1024..=70 * 1024).contains(&bytes.len()),
        "{} bytes",
        bytes.len()
    );
    bencher.bench(|| {
        Table::from_bytes(black_box(&bytes))
            .unwrap()
            .context_count()
    });
}

#[divan::bench]
fn digest_64k(bencher: Bencher) {
    let bytes = table_64k();
    bencher.bench(|| digest(black_box(&bytes)));
}

#[divan::bench]
fn load_64k(bencher: Bencher) {
    let bytes = table_64k();
    bencher.bench(|| Table::from_bytes(black_box(&bytes)).unwrap().digest());
}

/// Queries: (collType, nBytes) over all collectives and a spread of sizes.
fn queries() -> Vec<(u32, u64)> {
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    (0..4096)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (
                (state % 5) as u32,
                1u64 << ((state >> 8) % 34) | (state >> 40) & 0xFF,
            )
        })
        .collect()
}

#[divan::bench]
fn decide(bencher: Bencher) {
    let bytes = table_64k();
    let t = Table::from_bytes(&bytes).unwrap();
    let s = t.specialise(&Comm::new(16, 2));
    let q = queries();
    let mut i = 0usize;
    bencher.bench_local(|| {
        i = (i + 1) & 4095;
        let (c, n) = q[i];
        s.decide(black_box(c), black_box(n), black_box(1), black_box(0))
    });
}

#[divan::bench]
fn bare_array(bencher: Bencher) {
    let bytes = table_64k();
    let t = Table::from_bytes(&bytes).unwrap();
    let s = t.specialise(&Comm::new(16, 2));
    // The same decisions in the simplest possible layout: [coll][log2 n].
    let mut bare = [[Decision::Default; 64]; 5];
    for (c, row) in bare.iter_mut().enumerate() {
        for (l, cell) in row.iter_mut().enumerate() {
            *cell = s.decide(c as u32, 1u64 << l, 1, 0);
        }
    }
    let q = queries();
    let mut i = 0usize;
    bencher.bench_local(|| {
        i = (i + 1) & 4095;
        let (c, n) = q[i];
        let (c, n) = (black_box(c), black_box(n));
        bare[c as usize][63 - n.leading_zeros() as usize]
    });
}

#[divan::bench]
fn lookup(bencher: Bencher) {
    let bytes = table_64k();
    let t = Table::from_bytes(&bytes).unwrap();
    let q = queries();
    let mut i = 0usize;
    bencher.bench_local(|| {
        i = (i + 1) & 4095;
        let (c, n) = q[i];
        t.lookup(black_box(c), &Comm::new(16, 2), black_box(n), 1, 0)
            .decision
    });
}
