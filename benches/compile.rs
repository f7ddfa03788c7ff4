//! Compile time: the shipped real DGX-1V sweep, a 1M-row synthetic sweep
//! of 38,850 distinct cells repeated, and a 1M-row sweep of 1M distinct
//! cells (read + compile, in process). Peak memory is measured outside
//! (README, `/usr/bin/time -v` on the files `examples/gen_sweep.rs`
//! writes), since a bench cannot see its own peak.
//!
//!     cargo bench --bench compile

#[path = "support/gen_sweep.rs"]
#[allow(dead_code)] // the spread shape is `scale`'s
mod gen_sweep;

use std::path::PathBuf;

use dyncc::ingest::{read_paths_folded, IngestOptions};
use dyncc::pipeline::{compile_dataset, CompileOptions};

fn main() {
    divan::main();
}

fn compile(path: PathBuf) -> usize {
    // As `dyncc compile` does: folded as read, compiled without a copy.
    let ds = read_paths_folded(&[path], &IngestOptions::default()).expect("read");
    compile_dataset(ds, &CompileOptions::default())
        .expect("compile")
        .bytes
        .len()
}

#[divan::bench(sample_count = 5, sample_size = 1)]
fn shipped_dgx1v() -> usize {
    compile(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("datasets/real/nvidia-dgx1v-allreduce.csv"),
    )
}

/// 1,000,000 rows repeating 38,850 distinct cells.
#[divan::bench(sample_count = 2, sample_size = 1)]
fn synthetic_1m_rows(b: divan::Bencher) {
    let path = gen_sweep::generated("dyncc-bench-sweep-1m.csv", |f| {
        gen_sweep::write_sweep(f, 1_000_000)
    });
    b.bench(|| compile(path.clone()));
}

/// 1,000,000 rows, every one its own cell (47 shapes, nodes 1-24).
#[divan::bench(sample_count = 2, sample_size = 1)]
fn synthetic_1m_distinct_cells(b: divan::Bencher) {
    let path = gen_sweep::generated("dyncc-bench-sweep-1m-distinct.csv", |f| {
        gen_sweep::write_distinct_sweep(f, 1_000_000)
    });
    b.bench(|| compile(path.clone()));
}
