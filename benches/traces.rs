//! Compile time with jobs' traces (issue: a million traced collectives'
//! worth of trace files compile within 2x the time of the same sweep
//! without them). The sweep is the shipped `datasets/sim` (H100 profile,
//! 1-8 nodes, 5 collectives); the traces are 24 files (6 jobs at each of
//! 3, 6, 12 and 24 nodes, 8 ranks per node), each with every collective at
//! 19 sizes (1 KiB to 256 MiB): 490 collectives of NCCL's own choice and 10
//! explored ones per shape, 1,140,000 collectives in all, written with the
//! format crate's encoder into the temp directory once.
//!
//!     cargo bench --bench traces

use std::path::{Path, PathBuf};

use dyncc::ingest::{read_paths_folded, traces, IngestOptions};
use dyncc::pipeline::{compile_dataset, CompileOptions};
use dyncc_tables::trace::{encode, Source, TraceComm, TraceHead, TraceRecord};
use dyncc_tables::{Algo, Coll, Proto, Setting};

fn main() {
    divan::main();
}

fn sweep() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("datasets/sim")
}

/// Writes the trace files and returns them.
fn trace_files() -> Vec<PathBuf> {
    let dir = std::env::temp_dir().join("dyncc-bench-traces-1m");
    let mut files = Vec::new();
    let colls = [
        Coll::AllReduce,
        Coll::AllGather,
        Coll::ReduceScatter,
        Coll::Broadcast,
        Coll::Reduce,
    ];
    std::fs::create_dir_all(&dir).unwrap();
    for (ni, nodes) in [3u32, 6, 12, 24].into_iter().enumerate() {
        for job in 0..6u64 {
            // Written every run (24 small files): a file left by an older
            // build would be read as today's.
            let path = dir.join(format!("dyncc-n{nodes}-j{job}.trace"));
            files.push(path.clone());
            let mut recs = Vec::new();
            for coll in colls {
                for k in 10..=28 {
                    let bytes = 1u64 << k;
                    let ns = 20e3 + bytes as f64 / 20.0 * (1.0 + 0.1 * nodes as f64);
                    // Exploration wins at half the shapes, loses at the others.
                    let f = if (k + ni) % 2 == 0 { 0.9 } else { 1.1 };
                    recs.push(rec(
                        coll,
                        bytes,
                        (Algo::Ring, Proto::LL128),
                        Source::Nccl,
                        490,
                        ns,
                    ));
                    recs.push(rec(
                        coll,
                        bytes,
                        (Algo::Tree, Proto::Simple),
                        Source::Explore,
                        10,
                        ns * f,
                    ));
                }
            }
            let head = TraceHead {
                profiler_abi: 6,
                nccl_version: 22902,
                pid: job as u32,
                host: "bench",
                ..Default::default()
            };
            let comm = TraceComm {
                comm_id: (nodes as u64) << 32 | job,
                n_nodes: nodes,
                n_ranks: nodes * 8,
                rank: 0,
                name: "",
            };
            std::fs::write(&path, encode(&head, &[comm], &recs).unwrap()).unwrap();
        }
    }
    files
}

fn rec(
    coll: Coll,
    bytes: u64,
    ran: (Algo, Proto),
    source: Source,
    count: u64,
    ns: f64,
) -> TraceRecord {
    let ln = ns.ln();
    TraceRecord {
        comm: 0,
        coll,
        n_bytes: bytes,
        setting: Setting::new(ran.0, ran.1).with_channels(16),
        source,
        count,
        // A 3 % spread of ln(time), within a range of +-10 % (a record's
        // spread must fit its range: the reader checks).
        sum_ln: count as f64 * ln,
        sum_ln2: count as f64 * ln * ln + (count as f64 - 1.0) * 0.03f64.powi(2),
        min_ns: (ns * 0.9) as u64,
        max_ns: (ns * 1.1) as u64,
    }
}

fn compile(sweep: &Path, traces: &[PathBuf]) -> usize {
    let mut ds = read_paths_folded(&[sweep.to_path_buf()], &IngestOptions::default()).unwrap();
    ds.traces = traces::read(traces, false).unwrap().0;
    // Synthetic jobs that ran no table of this sweep: used as
    // `--foreign-traces` uses them (the bench times the reading).
    ds.foreign_traces = true;
    compile_dataset(ds, &CompileOptions::default())
        .unwrap()
        .bytes
        .len()
}

/// `datasets/sim` alone.
#[divan::bench(sample_count = 5, sample_size = 1)]
fn sweep_alone() -> usize {
    compile(&sweep(), &[])
}

/// `datasets/sim` with 1,140,000 traced collectives in 24 trace files.
#[divan::bench(sample_count = 5, sample_size = 1)]
fn sweep_with_1m_traced_collectives(b: divan::Bencher) {
    let files = trace_files();
    b.bench(|| compile(&sweep(), &files));
}
