//! Ingest golden tests over the real shared datasets and the fixtures in
//! tests/data (row and record counts pinned per file and per variant).

use std::path::{Path, PathBuf};

use dyncc::ingest::{self, IngestOptions};
use dyncc::record::{Algo, Collective, Proto};

/// `../shared/datasets/real` beside the checkout, or `None` (with a loud
/// message) when it is absent.
pub fn real_dir() -> Option<PathBuf> {
    let d = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/datasets/real");
    if d.is_dir() {
        Some(d)
    } else {
        eprintln!(
            "!!! SKIPPING: {} is absent; real-data golden tests did not run",
            d.display()
        );
        None
    }
}

fn opts() -> IngestOptions {
    IngestOptions::default()
}

#[test]
fn sweeps_csv_row_and_record_counts() {
    let Some(real) = real_dir() else { return };
    for (file, rows, nodes, ranks_per_node) in [
        (
            "nvidia-dgx1v-allreduce.csv",
            1260,
            vec![1, 2, 4, 8, 16, 32],
            8,
        ),
        (
            "nvidia-dgx2v-allreduce.csv",
            1470,
            vec![1, 2, 4, 8, 16, 32, 64],
            16,
        ),
    ] {
        let ds = ingest::read_paths(&[real.join("sweeps").join(file)], &opts()).unwrap();
        assert_eq!(ds.files, 1, "{file}");
        assert_eq!(ds.rows, rows, "{file}");
        assert_eq!(ds.records.len(), rows, "{file}");
        assert!(ds.skipped.is_empty(), "{file}: {:?}", ds.skipped);
        let mut n: Vec<u32> = ds.records.iter().map(|r| r.nnodes).collect();
        n.sort();
        n.dedup();
        assert_eq!(n, nodes, "{file}");
        assert!(ds
            .records
            .iter()
            .all(|r| r.nranks == r.nnodes * ranks_per_node));
        assert!(ds
            .records
            .iter()
            .all(|r| r.collective == Collective::AllReduce));
        // 7 configurations x 30 sizes per node count; default is NCCL's choice.
        let defaults = ds.records.iter().filter(|r| r.is_default()).count();
        assert_eq!(defaults, rows / 7, "{file}");
        let ring_ll128 = ds
            .records
            .iter()
            .filter(|r| r.algo == Some(Algo::Ring) && r.proto == Some(Proto::LL128))
            .count();
        assert_eq!(ring_ll128, rows / 7);
        assert!(ds
            .records
            .iter()
            .all(|r| r.channels.is_none() && r.time_us > 0.0));
        assert!(ds.records.iter().all(|r| r.platform.is_some()));
        let cells = ingest::aggregate(&ds.records);
        // One run per cell: every row is its own cell.
        assert_eq!(
            cells.len(),
            rows - ds.count_flag(dyncc::ingest::UNTRUSTED),
            "{file}"
        );
    }
    // The first data row of the DGX-1V file, exactly.
    let ds =
        ingest::read_paths(&[real.join("sweeps/nvidia-dgx1v-allreduce.csv")], &opts()).unwrap();
    let r = &ds.records[0];
    assert_eq!((r.nbytes, r.nnodes, r.nranks, r.time_us), (8, 1, 8, 12.7));
    assert_eq!(
        (
            r.source.line,
            ds.records[1].source.line,
            ds.records[1259].source.line
        ),
        (2, 3, 1261)
    );
    assert_eq!(r.platform.as_deref(), Some("DGX-1V"));
}

#[test]
fn sweeps_dir_reads_both_files() {
    let Some(real) = real_dir() else { return };
    let ds = ingest::read_paths(&[real.join("sweeps")], &opts()).unwrap();
    assert_eq!((ds.files, ds.rows, ds.records.len()), (2, 2730, 2730));
}
