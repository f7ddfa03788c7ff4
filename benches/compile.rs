//! Compile time: the shipped real DGX-1V sweep, and a 1M-row synthetic
//! sweep (read + compile, in process). Peak memory is measured outside
//! (README, `/usr/bin/time -v`), since a bench cannot see its own peak.
//!
//!     cargo bench --bench compile

#[path = "support/gen_sweep.rs"]
mod gen_sweep;

use std::path::PathBuf;

use dyncc::ingest::{read_paths, IngestOptions};
use dyncc::pipeline::{compile_dataset, CompileOptions};

fn main() {
    divan::main();
}

fn compile(path: PathBuf) -> usize {
    let ds = read_paths(&[path], &IngestOptions::default()).expect("read");
    compile_dataset(&ds, &CompileOptions::default())
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

#[divan::bench(sample_count = 2, sample_size = 1)]
fn synthetic_1m_rows(b: divan::Bencher) {
    let path = std::env::temp_dir().join("dyncc-bench-sweep-1m.csv");
    if !path.exists() {
        let tmp = path.with_extension("tmp");
        let mut f = std::io::BufWriter::new(std::fs::File::create(&tmp).unwrap());
        gen_sweep::write_sweep(&mut f, 1_000_000).unwrap();
        drop(f);
        std::fs::rename(&tmp, &path).unwrap();
    }
    b.bench(|| compile(path.clone()));
}
