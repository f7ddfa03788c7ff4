//! Ingest throughput: nccl-tests text log parsing on one core, over a
//! generated ~32 MB log that looks like real captured output (srun labels,
//! header blocks, rank lines, NCCL INFO noise, data rows of every size).
//! Reported as bytes/s by divan (`cargo bench --bench ingest`).
//!
//! Large sweeps: `csv_sweep_4m` reads a 4M-row tuner CSV (283 MB, 38,850
//! distinct cells repeated, written once to the temp directory) the way
//! `compile` reads it, on every core, and reports MB/s and rows/s; the
//! README's figures for the 2 GB sweep come from `/usr/bin/time -v dyncc
//! compile` on `examples/gen_sweep`'s file (see there).
//!
//! Memory: divan's allocation profiler reports each bench's `max alloc`,
//! the peak of live heap bytes while it ran. `csv_repeats_folded` reads a
//! 1M-row sweep of 38,850 distinct cells the way `compile` does (folded as
//! it is read): its peak is a fraction of the 71 MB it reads;
//! `csv_repeats_records` reads the same file into one record per row, as
//! `compile` did before, and peaks at about twice the file.

use std::io::Cursor;
use std::path::Path;

use divan::counter::{BytesCount, ItemsCount};
use dyncc::ingest::{self, Format, IngestOptions};

// Only the sweep of repeats is used here (the distinct one is compile's).
#[path = "support/gen_sweep.rs"]
#[allow(dead_code)]
mod gen_sweep;

#[global_allocator]
static ALLOC: divan::AllocProfiler = divan::AllocProfiler::system();

fn main() {
    divan::main();
}

/// A log of `blocks` all_reduce sections, 8 ranks on 2 nodes, 8 B..4 GiB.
fn generate(blocks: usize) -> Vec<u8> {
    use std::fmt::Write;
    let mut s = String::new();
    for b in 0..blocks {
        let p = "0: ";
        writeln!(
            s,
            "{p}# nccl-tests version 2.19.6 nccl-headers=22703 nccl-library=22703"
        )
        .unwrap();
        writeln!(s, "{p}# Collective test starting: all_reduce_perf").unwrap();
        writeln!(s, "{p}# nThread 1 nGpus 1 minBytes 8 maxBytes 4294967296 step: 2(factor) warmup iters: 1 iters: 20 agg iters: 1 validation: 1 graph: 0 unalign: 0").unwrap();
        writeln!(s, "{p}#\n{p}# Using devices").unwrap();
        for r in 0..8 {
            writeln!(s, "{p}#  Rank {r:2} Group  0 Pid {:6} on {:>10} device {:2} [0000:{:02x}:00] NVIDIA H100 80GB HBM3", 4000 + r, format!("node{}", r / 4), r % 4, 0x18 + r).unwrap();
        }
        for i in 0..6 {
            writeln!(
                s,
                "node0:4000:4{i:03} [0] NCCL INFO Channel {i:02}/32 : 0 1 2 3 4 5 6 7"
            )
            .unwrap();
        }
        writeln!(s, "{p}#\n{p}#                                                              out-of-place                       in-place          ").unwrap();
        writeln!(s, "{p}#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong ").unwrap();
        writeln!(s, "{p}#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)         ").unwrap();
        for i in 0..30u32 {
            let size = 8u64 << i;
            let t = 20.0 + size as f64 / 45_000.0 + (b % 7) as f64 * 0.13;
            let alg = size as f64 / 1e3 / t;
            writeln!(
                s,
                "{p}{size:12}  {:12}     float     sum      -1  {t:7.2}  {alg:6.2}  {:6.2}       0  {:7.2}  {alg:6.2}  {:6.2}       0",
                size / 4,
                alg * 1.75,
                t * 0.99,
                alg * 1.75
            )
            .unwrap();
        }
        writeln!(
            s,
            "{p}# Out of bounds values : 0 OK\n{p}# Avg bus bandwidth    : 42.784 \n{p}#"
        )
        .unwrap();
        writeln!(s, "{p}# Collective test concluded: all_reduce_perf\n{p}#").unwrap();
    }
    s.into_bytes()
}

#[divan::bench(sample_count = 10)]
fn text_log(bencher: divan::Bencher) {
    let log = generate(6000);
    let opts = IngestOptions {
        assume: vec![("default".into(), "1".into())],
        ..Default::default()
    };
    bencher.counter(BytesCount::new(log.len())).bench(|| {
        let ds = ingest::read_with_format(
            Path::new("bench_all_reduce.log"),
            Cursor::new(divan::black_box(&log[..])),
            Format::NcclTestsText,
            &opts,
        )
        .unwrap();
        assert_eq!(ds.rows, 6000 * 30);
        ds
    });
}

#[divan::bench(sample_count = 10)]
fn tuner_csv(bencher: divan::Bencher) {
    let mut s = String::from("collective,size_bytes,algorithm,protocol,channels,nodes,ranks,pipeOps,regBuff,cost_metric,bandwidth_gbps,latency_us,platform\n");
    for i in 0..200_000u64 {
        s.push_str(&format!(
            "allreduce,{},ring,ll128,-1,2,16,1,0,{:.1},0.5,{:.1},DGX-1V\n",
            8u64 << (i % 30),
            10.0 + i as f64 * 0.01,
            10.0 + i as f64 * 0.01
        ));
    }
    let opts = IngestOptions::default();
    bencher.counter(BytesCount::new(s.len())).bench(|| {
        ingest::read_with_format(
            Path::new("b.csv"),
            Cursor::new(s.as_bytes()),
            Format::TunerCsv,
            &opts,
        )
        .unwrap()
    });
}

/// The 1M-row sweep of 38,850 distinct cells repeated (`gen_sweep`), on
/// disk once.
fn repeats_csv() -> std::path::PathBuf {
    gen_sweep::generated("dyncc-bench-ingest-repeats-1m.csv", |f| {
        gen_sweep::write_sweep(f, 1_000_000)
    })
}

/// What `compile` reads: folded as read (see `max alloc`).
#[divan::bench(sample_count = 3, sample_size = 1)]
fn csv_repeats_folded(bencher: divan::Bencher) {
    let path = repeats_csv();
    let len = std::fs::metadata(&path).unwrap().len() as usize;
    bencher.counter(BytesCount::new(len)).bench(|| {
        let ds = ingest::read_paths_folded(std::slice::from_ref(&path), &IngestOptions::default())
            .unwrap();
        assert_eq!(ds.folded.groups.len(), 38_850);
        ds
    });
}

/// The same file as one record per row (what `inspect` lists).
#[divan::bench(sample_count = 3, sample_size = 1)]
fn csv_repeats_records(bencher: divan::Bencher) {
    let path = repeats_csv();
    let len = std::fs::metadata(&path).unwrap().len() as usize;
    bencher.counter(BytesCount::new(len)).bench(|| {
        let ds =
            ingest::read_paths(std::slice::from_ref(&path), &IngestOptions::default()).unwrap();
        assert_eq!(ds.records.len(), 1_000_000);
        ds
    });
}

/// A 4M-row sweep of 38,850 distinct cells repeated, on disk once.
fn sweep_4m() -> std::path::PathBuf {
    gen_sweep::generated("dyncc-bench-ingest-repeats-4m.csv", |f| {
        gen_sweep::write_sweep(f, 4_000_000)
    })
}

/// Read throughput on a large sweep, as `compile` reads it (folded, on
/// every core): bytes and rows per second.
#[divan::bench(sample_count = 3, sample_size = 1)]
fn csv_sweep_4m(bencher: divan::Bencher) {
    let path = sweep_4m();
    let len = std::fs::metadata(&path).unwrap().len() as usize;
    bencher
        .counter(BytesCount::new(len))
        .counter(ItemsCount::new(4_000_000usize))
        .bench(|| {
            let ds =
                ingest::read_paths_folded(std::slice::from_ref(&path), &IngestOptions::default())
                    .unwrap();
            assert_eq!(ds.rows, 4_000_000);
            ds
        });
}
