//! Load and hot-path costs of the table format.
//!
//! - `from_bytes_64k`: validate a ~64 KiB table (target <= 100 us), and
//!   `digest_64k`, the FNV-1a part of that.
//! - `decide` vs `bare_array`: `Specialised::decide` against a bare
//!   `[coll][log2 size]` array index doing the same job without checks.
//!
//! Run: `cargo bench -p dyncc-tables --features build --bench load`.

use std::hint::black_box;

use divan::Bencher;
use dyncc_tables::{
    fnv1a64, Algo, Basis, Coll, ContextSpec, Decision, Proto, RegBuff, Rule, Table, TableBuilder,
};

fn main() {
    divan::main();
}

/// 200 contexts (5 collectives x 40 node counts) of 24 rules each, plus
/// metadata: about 64 KiB.
fn table_64k() -> Vec<u8> {
    let mut b = TableBuilder::new();
    b.meta("platform", "bench")
        .meta("command", "benches/load.rs");
    for coll in Coll::ALL {
        for nodes in 1..=40u32 {
            let rules: Vec<Rule> = (0..24u32)
                .map(|i| Rule {
                    last_bucket: if i == 23 { 255 } else { (i * 10) as u8 },
                    decision: Decision::Force {
                        algo: Algo::ALL[(i % 7) as usize],
                        proto: Proto::ALL[(i % 3) as usize],
                        channels: (i % 5) as u8,
                    },
                    basis: Basis::Measured,
                    gain: 1.0 + i as f32 / 10.0,
                })
                .collect();
            let spec = ContextSpec {
                coll,
                nodes: (nodes, nodes),
                ppn: (1, 8),
                max_pipe_ops: 0,
                reg_buff: RegBuff::Any,
            };
            b.context(spec, &rules).unwrap();
        }
    }
    b.build().unwrap()
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
    bencher.bench(|| fnv1a64(black_box(&bytes)));
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
    let s = t.specialise(16, 2);
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
    let s = t.specialise(16, 2);
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
        t.lookup(black_box(c), 16, 2, black_box(n), 1, 0).decision
    });
}
