//! Ingest golden tests over the real datasets (tests/data/real) and the fixtures in
//! tests/data (row and record counts pinned per file and per variant).

use std::path::{Path, PathBuf};

use dyncc::ingest::{self, IngestOptions};
use dyncc::record::{Algo, Collective, Proto};

/// The real measurements shipped with the tests (tests/data/real, a copy of
/// the project's shared collection; see its README.md).
pub fn real_dir() -> PathBuf {
    let d = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/real");
    assert!(
        d.join("CATALOG.md").is_file(),
        "{} is missing: it is part of the repository (git checkout -- tests/data/real)",
        d.display()
    );
    d
}

fn opts() -> IngestOptions {
    IngestOptions::default()
}

#[test]
fn sweeps_csv_row_and_record_counts() {
    let real = real_dir();
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
        let mut n: Vec<u32> = ds.records.iter().map(|r| r.run.nnodes).collect();
        n.sort();
        n.dedup();
        assert_eq!(n, nodes, "{file}");
        assert!(ds
            .records
            .iter()
            .all(|r| r.run.nranks == r.run.nnodes * ranks_per_node));
        assert!(ds
            .records
            .iter()
            .all(|r| r.run.collective == Collective::AllReduce));
        // 7 configurations x 30 sizes per node count; default is NCCL's choice.
        let defaults = ds.records.iter().filter(|r| r.is_default()).count();
        assert_eq!(defaults, rows / 7, "{file}");
        let ring_ll128 = ds
            .records
            .iter()
            .filter(|r| {
                r.run.config.algo == Some(Algo::Ring) && r.run.config.proto == Some(Proto::LL128)
            })
            .count();
        assert_eq!(ring_ll128, rows / 7);
        assert!(ds
            .records
            .iter()
            .all(|r| r.run.config.channels.is_none() && r.measurement.time_us > 0.0));
        assert!(ds.records.iter().all(|r| r.run.platform.is_some()));
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
    assert_eq!(
        (
            r.measurement.nbytes,
            r.run.nnodes,
            r.run.nranks,
            r.measurement.time_us
        ),
        (8, 1, 8, 12.7)
    );
    assert_eq!(
        (
            r.measurement.source.line,
            ds.records[1].measurement.source.line,
            ds.records[1259].measurement.source.line
        ),
        (2, 3, 1261)
    );
    assert_eq!(r.run.platform.as_deref(), Some("DGX-1V"));
}

#[test]
fn sweeps_dir_reads_both_files() {
    let real = real_dir();
    let ds = ingest::read_paths(&[real.join("sweeps")], &opts()).unwrap();
    assert_eq!((ds.files, ds.rows, ds.records.len()), (2, 2730, 2730));
}

fn assume(pairs: &[&str]) -> IngestOptions {
    IngestOptions {
        assume: IngestOptions::parse_assume(
            &pairs.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
        )
        .unwrap(),
        ..Default::default()
    }
}

fn lenient_default() -> IngestOptions {
    IngestOptions {
        lenient: true,
        ..assume(&["default"])
    }
}

fn logs() -> PathBuf {
    real_dir().join("nccl-tests-logs")
}

/// Row counts of every measurement file, as listed in CATALOG.md; a file
/// whose rows cannot be attributed still has its rows counted.
#[test]
fn every_real_log_is_read_with_the_catalogued_row_count() {
    let real = real_dir();
    let opts = IngestOptions {
        keep_unresolved: true,
        ..lenient_default()
    };
    let ds = ingest::read_paths(std::slice::from_ref(&real), &opts).unwrap();
    // 189 catalogued logs + 2 sweep CSVs; docs (CATALOG.md, this copy's
    // README.md, 4 reports) and unrelated CSV/TSV (2) ignored.
    assert_eq!(ds.files, 191);
    assert_eq!(ds.ignored.len(), 8);
    assert_eq!(ds.rows, 8278);
    let catalog = std::fs::read_to_string(real.join("CATALOG.md")).unwrap();
    let mut checked = 0;
    for line in catalog.lines() {
        let Some(rest) = line.strip_prefix("| ") else {
            continue;
        };
        let cols: Vec<&str> = rest.split(" | ").collect();
        if cols.len() < 9 || !cols[0].chars().all(|c| c.is_ascii_digit()) {
            continue;
        }
        let file = cols[1].trim_matches('`');
        if !file.starts_with("nccl-tests-logs/") {
            continue;
        }
        let sizes = cols[7];
        let expected = if sizes.contains("NO DATA ROWS") {
            0
        } else {
            let i = sizes.find(" rows").expect(sizes);
            let start = sizes[..i].rfind('(').unwrap() + 1;
            sizes[start..i].parse::<usize>().unwrap()
        };
        let rep = ds
            .reports
            .iter()
            .find(|r| r.file.ends_with(file))
            .unwrap_or_else(|| panic!("{file} was not read"));
        assert_eq!(rep.rows, expected, "{file}");
        checked += 1;
    }
    assert_eq!(checked, 189);
    // The 18 failed launches are reported, not errors.
    let failed: Vec<_> = ds
        .skipped
        .iter()
        .filter(|s| s.reason.starts_with("no data rows"))
        .collect();
    assert_eq!(failed.len(), 18);
}

#[test]
fn alps_srun_labels_launcher_collective_and_shape() {
    let logs = logs();
    let f = logs.join("cscs-alps-gh200-boeschf/nccl-tests_nccl-2.23.4-1-aws-1.13.0-v0/job-n-00008-N-0002-142996.out");
    // Strict without knob information: a clear error naming the file.
    let e = ingest::read_paths(std::slice::from_ref(&f), &opts())
        .unwrap_err()
        .to_string();
    assert!(e.contains("job-n-00008-N-0002-142996.out"), "{e}");
    assert!(e.contains("--assume default"), "{e}");
    let ds = ingest::read_paths(&[f], &assume(&["default"])).unwrap();
    assert_eq!((ds.rows, ds.records.len()), (30, 60));
    let r = &ds.records[0];
    assert_eq!(r.run.collective, Collective::AllReduce); // from `+ srun ... all_reduce_perf`
    assert_eq!((r.run.nranks, r.run.nnodes), (8, 2));
    assert_eq!(r.run.gpu.as_deref(), Some("NVIDIA GH200 120GB"));
    assert_eq!(
        (
            r.measurement.nbytes,
            r.measurement.time_us,
            r.measurement.in_place
        ),
        (8, 18.74, false)
    );
    assert_eq!(
        (
            ds.records[1].measurement.time_us,
            ds.records[1].measurement.in_place
        ),
        (18.69, true)
    );
    assert!(ds.records.iter().all(|r| r.is_default()));
    assert_eq!(ds.records.last().unwrap().measurement.nbytes, 4294967296);
}

#[test]
fn alps_wrong_rows_are_flagged_and_not_aggregated() {
    let logs = logs();
    let f = logs.join("cscs-alps-gh200-boeschf/nccl-tests_nccl-2.23.4-1-aws-1.13.0-v0/job-n-00032-N-0008-142998.out");
    let ds = ingest::read_paths(&[f], &assume(&["default"])).unwrap();
    let wrong: Vec<_> = ds
        .records
        .iter()
        .filter(|r| r.measurement.flags & dyncc::record::flags::WRONG_DATA != 0)
        .collect();
    assert_eq!(wrong.len(), 2);
    assert!(wrong.iter().all(|r| r.measurement.nbytes == 33554432));
    let cells = ingest::aggregate(&ds.records);
    assert!(!cells.iter().any(|c| c.key.nbytes == 33554432));
    assert_eq!(cells.len(), 29);
    assert!(cells.iter().all(|c| c.n == 2));
}

#[test]
fn xxrjun_new_format_several_collectives_per_file() {
    let logs = logs();
    let f = logs.join(
        "xxrjun-h100-cluster01/multi-node/runs/20260129-180219/without-debug/logs/nccl_N10_G2.log",
    );
    let ds = ingest::read_paths(&[f], &assume(&["default"])).unwrap();
    assert_eq!((ds.rows, ds.records.len()), (50, 100));
    for c in [
        Collective::AllReduce,
        Collective::AllGather,
        Collective::ReduceScatter,
        Collective::AllToAll,
        Collective::SendRecv,
    ] {
        assert_eq!(
            ds.records.iter().filter(|r| r.run.collective == c).count(),
            20,
            "{c:?}"
        );
    }
    assert!(ds
        .records
        .iter()
        .all(|r| r.run.nranks == 20 && r.run.nnodes == 10));
    assert!(ds.records.iter().all(|r| r.run.nccl_version == Some(22902)));
    assert!(ds
        .records
        .iter()
        .all(|r| r.measurement.dtype.as_deref() == Some("double")));
    // AllGather size is the total buffer (rounded to nranks x 8 B).
    let ag = ds
        .records
        .iter()
        .find(|r| r.run.collective == Collective::AllGather)
        .unwrap();
    assert_eq!(ag.measurement.nbytes, 33554240);
}

#[test]
fn interleaved_jobs_are_not_read_as_one_bigger_job() {
    let logs = logs();
    let f = logs.join("together-nccl-tests-h100/20260306_001221_slurm__all_reduce_ring.out");
    let ds = ingest::read_paths(&[f], &assume(&["NCCL_ALGO=Ring", "default"])).unwrap();
    assert_eq!((ds.rows, ds.records.len()), (28, 56));
    assert!(ds
        .records
        .iter()
        .all(|r| r.run.nranks == 8 && r.run.nnodes == 1));
    assert!(ds
        .records
        .iter()
        .all(|r| r.run.config.algo == Some(Algo::Ring) && r.run.config.proto.is_none()));
    assert_eq!(
        ds.anomalies
            .iter()
            .filter(|a| a.kind == "interleaved-jobs")
            .count(),
        1
    );
    // Each size measured by both jobs, both placements: 4 samples per cell.
    let cells = ingest::aggregate(&ds.records);
    assert_eq!(cells.len(), 14);
    assert!(cells.iter().all(|c| c.n == 4));
}

#[test]
fn old_format_no_root_float_error_column() {
    let logs = logs();
    let f = logs.join("format-samples/old-format_error-column_no-root_k80_allreduce.log");
    let ds = ingest::read_paths(&[f], &assume(&["default"])).unwrap();
    assert_eq!((ds.rows, ds.records.len()), (7, 14));
    let r = &ds.records[12];
    assert_eq!(
        (
            r.measurement.nbytes,
            r.measurement.time_us,
            r.run.nranks,
            r.run.nnodes
        ),
        (2147483648, 1258554.0, 4, 1)
    );
    assert_eq!(r.run.gpu.as_deref(), Some("Tesla K80"));
    // 2e-07 max error is rounding, not wrong data.
    assert_eq!(ds.count_flag(dyncc::record::flags::WRONG_DATA), 0);
}

#[test]
fn openmpi_tag_output_and_mpi_binary_name() {
    let logs = logs();
    let f = logs
        .join("format-samples/nccl-tests-2.18.0_openmpi-tag-output_rtx5090-socket_allreduce.log");
    let ds = ingest::read_paths(&[f], &assume(&["default"])).unwrap();
    assert_eq!((ds.rows, ds.records.len()), (8, 16));
    let r = &ds.records[0];
    assert_eq!(r.run.collective, Collective::AllReduce);
    assert_eq!(
        (r.run.nranks, r.run.nnodes, r.run.nccl_version),
        (2, 1, Some(22907))
    );
    assert_eq!(
        (r.measurement.nbytes, r.measurement.time_us),
        (1048576, 4366.46)
    );
}

#[test]
fn linear_steps_na_wrong_and_zero_size_rows() {
    let logs = logs();
    let f = logs.join("format-samples/monsieurconan__nccl_sendrecv.out");
    let ds = ingest::read_paths(&[f], &assume(&["default"])).unwrap();
    assert_eq!((ds.rows, ds.records.len()), (128, 256));
    assert!(ds
        .records
        .iter()
        .all(|r| r.run.collective == Collective::SendRecv && r.measurement.flags == 0));
    assert_eq!(ds.records[2].measurement.nbytes, 1048584);
    // nccl_g1.out names no collective anywhere: an error unless assumed.
    let g1 = logs.join("format-samples/monsieurconan__nccl_g1.out");
    let e = ingest::read_paths(std::slice::from_ref(&g1), &assume(&["default"])).unwrap_err();
    assert!(e.to_string().contains("--assume coll="), "{e}");
    let ds = ingest::read_paths(&[g1], &assume(&["default", "coll=allgather"])).unwrap();
    assert_eq!(ds.rows, 128);
    assert_eq!(ds.reports[0].zero_size_rows, 1);
    assert_eq!(ds.records.len(), 254);
}

#[test]
fn polaris_zero_size_rows_and_error_only_files() {
    let logs = logs();
    let d = logs.join(
        "alcf-polaris-sophia-nccl-tests/results_polaris/nccl_2_18/n128.g4.2024-04-29-18-31-53",
    );
    let ds =
        ingest::read_paths(&[d.join("all_gather_output.dat.5")], &assume(&["default"])).unwrap();
    assert_eq!(ds.rows, 29);
    assert_eq!(ds.reports[0].zero_size_rows, 11);
    assert_eq!(ds.records.len(), 36);
    assert!(ds
        .records
        .iter()
        .all(|r| r.run.collective == Collective::AllGather));
    assert!(ds
        .records
        .iter()
        .all(|r| r.run.nranks == 512 && r.run.nnodes == 128));
    // A failed launch: no rows, reported with its message, not an error.
    let ds = ingest::read_paths(&[d.join("all_gather_output.dat.1")], &opts()).unwrap();
    assert_eq!((ds.files, ds.rows, ds.records.len()), (1, 0, 0));
    assert!(
        ds.skipped[0].reason.contains("Couldn't allocate a port"),
        "{:?}",
        ds.skipped
    );
    // The whole directory: 3 files with rows, 12 failed launches.
    let ds = ingest::read_paths(&[d], &assume(&["default"])).unwrap();
    assert_eq!((ds.files, ds.rows), (15, 87));
    assert_eq!(ds.skipped.len(), 12);
}

#[test]
fn elided_rank_lists_need_the_shape_from_metadata() {
    let logs = logs();
    let f =
        logs.join("coreweave-nccl-tests/a100-80gb_128gpu_allreduce_README@22df9b7_2022-07-05.log");
    let e = ingest::read_paths(std::slice::from_ref(&f), &assume(&["default"])).unwrap_err();
    assert!(e.to_string().contains("ranks/nodes unknown"), "{e}");
    assert!(e.to_string().contains("elided"), "{e}");
    let ds = ingest::read_paths(&[f], &assume(&["default", "ranks=128", "nodes=16"])).unwrap();
    assert_eq!((ds.rows, ds.records.len()), (30, 60));
    assert!(ds
        .records
        .iter()
        .all(|r| r.run.nranks == 128 && r.run.nnodes == 16));
    assert_eq!(
        ds.records[0].run.gpu.as_deref(),
        Some("NVIDIA A100-SXM4-80GB")
    );
}

#[test]
fn together_nvls_label_needs_an_explicit_knob() {
    let logs = logs();
    let f = logs.join("together-nccl-tests-h100/20260305_220043__all_reduce_nvls.out");
    // The file name says nvls, but nothing establishes it: never guessed.
    assert!(ingest::read_paths(std::slice::from_ref(&f), &opts()).is_err());
    let ds = ingest::read_paths(&[f], &assume(&["NCCL_ALGO=NVLS", "default"])).unwrap();
    assert_eq!((ds.rows, ds.records.len()), (31, 62));
    assert!(ds
        .records
        .iter()
        .all(|r| r.run.config.algo == Some(Algo::Nvls)));
    assert_eq!(ds.records[0].run.nccl_version, Some(22602));
}

fn data(p: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(p)
}

#[test]
fn json_fixture_env_knobs_and_shape() {
    let ds = ingest::read_paths(
        &[data("nccl-tests-2.18_all_reduce_ring_ll128_2x8xh100.json")],
        &opts(),
    )
    .unwrap();
    assert_eq!((ds.rows, ds.records.len()), (25, 50));
    let r = &ds.records[0];
    assert_eq!(
        (r.run.config.algo, r.run.config.proto, r.run.config.channels),
        (Some(Algo::Ring), Some(Proto::LL128), Some(16))
    );
    assert_eq!(
        (r.run.nranks, r.run.nnodes, r.run.nccl_version),
        (16, 2, Some(22703))
    );
    assert_eq!(r.run.collective, Collective::AllReduce);
    assert_eq!(r.run.gpu.as_deref(), Some("NVIDIA H100 80GB HBM3"));
    assert_eq!(r.measurement.nbytes, 8);
}

#[test]
fn modern_log_per_iteration_timestamps_all_types_and_dyncc_header() {
    let ds = ingest::read_paths(&[data("modern_I_S_dall_reduce_scatter.log")], &opts()).unwrap();
    assert_eq!((ds.rows, ds.records.len()), (6, 12));
    let r = &ds.records[0];
    assert_eq!(r.run.collective, Collective::ReduceScatter);
    assert_eq!(
        (r.run.config.algo, r.run.config.proto, r.run.config.channels),
        (Some(Algo::Ring), Some(Proto::LL128), Some(8))
    );
    assert_eq!(
        (r.run.nranks, r.run.nnodes, r.measurement.time_us),
        (4, 2, 21.05)
    );
    assert_eq!(r.run.platform.as_deref(), Some("sim-h100"));
    assert_eq!(ds.records[1].measurement.time_us, 20.80); // in-place time, not an -I column
    assert_eq!(ds.records[2].measurement.dtype.as_deref(), Some("half"));
    assert_eq!(ds.records[8].measurement.time_us, 12.0); // 1.2e+01
    assert_eq!(ds.count_flag(dyncc::record::flags::WRONG_DATA), 1);
    // float and half rows of one size share a cell.
    let cells = ingest::aggregate(&ds.records);
    assert_eq!(cells.len(), 3);
    assert_eq!(cells[2].n, 3);
}

#[test]
fn knob_ignored_by_nccl_is_flagged_from_its_own_info_lines() {
    let ds = ingest::read_paths(&[data("info_nvls_ignored_all_reduce.log")], &opts()).unwrap();
    assert_eq!((ds.rows, ds.records.len()), (3, 6));
    assert!(ds
        .records
        .iter()
        .all(|r| r.run.config.algo == Some(Algo::Nvls) && r.run.config.proto.is_none()));
    assert_eq!(ds.records[0].run.nccl_version, Some(22602));
    let ignored: Vec<u64> = ds
        .records
        .iter()
        .filter(|r| r.measurement.flags & dyncc::record::flags::KNOB_IGNORED != 0)
        .map(|r| r.measurement.nbytes)
        .collect();
    assert_eq!(ignored, vec![1048576, 1048576, 4194304, 4194304]);
    assert_eq!(ingest::aggregate(&ds.records).len(), 1);
}

#[test]
fn path_components_give_knobs() {
    let f = data("NCCL_ALGO=Tree/NCCL_PROTO=Simple/k80_allreduce.log");
    // A label describes the run: the channel count it does not name was
    // not forced (once a second error, "channel count unknown").
    let ds = ingest::read_paths(&[f], &opts()).unwrap();
    assert_eq!(ds.records.len(), 14);
    assert!(ds
        .records
        .iter()
        .all(|r| r.run.config.algo == Some(Algo::Tree)
            && r.run.config.proto == Some(Proto::Simple)
            && r.run.config.channels.is_none()));
}

#[test]
fn nvidia_raw_csv_from_platform_directory() {
    let ds = ingest::read_paths(&[data("nvidia-raw")], &opts()).unwrap();
    assert_eq!((ds.files, ds.rows, ds.records.len()), (2, 60, 420));
    let one = ds
        .records
        .iter()
        .find(|r| r.run.platform.as_deref() == Some("DGX-1V"))
        .unwrap();
    assert_eq!(
        (one.run.nnodes, one.run.nranks, one.measurement.nbytes),
        (2, 16, 8)
    );
    assert_eq!(
        (
            one.run.config.algo,
            one.run.config.proto,
            one.measurement.time_us
        ),
        (Some(Algo::Tree), Some(Proto::LL), 25.8)
    );
    let two = ds
        .records
        .iter()
        .find(|r| r.run.platform.as_deref() == Some("DGX-2V"))
        .unwrap();
    assert_eq!((two.run.nnodes, two.run.nranks), (4, 64));
    // The raw files carry the same numbers as the converted sweeps.
    let real = real_dir();
    let sw =
        ingest::read_paths(&[real.join("sweeps/nvidia-dgx1v-allreduce.csv")], &opts()).unwrap();
    let raw: Vec<_> = ds
        .records
        .iter()
        .filter(|r| r.run.platform.as_deref() == Some("DGX-1V"))
        .collect();
    for r in raw {
        let s = sw
            .records
            .iter()
            .find(|s| s.key() == r.key())
            .expect("same cell in the sweep");
        assert_eq!(s.measurement.time_us, r.measurement.time_us);
    }
}

mod prop {
    use std::io::Cursor;
    use std::path::Path;

    use dyncc::ingest::{self, Format, IngestOptions};
    use proptest::prelude::*;

    /// nccl-tests time formatting, old (`%7.2f`/`%7.1f`/`%7.0f`) or new
    /// (2/1/0 decimals within width 7, else `%7.1e`).
    fn fmt_time(t: f64, new: bool) -> String {
        if new {
            for d in [2usize, 1, 0] {
                let s = format!("{t:7.d$}");
                if s.len() <= 7 {
                    return s;
                }
            }
            let e = format!("{t:.1e}");
            // Rust writes `1.2e6`; C writes `1.2e+06`.
            let (m, x) = e.split_once('e').unwrap();
            let x: i32 = x.parse().unwrap();
            format!("{m}e{}{:02}", if x < 0 { '-' } else { '+' }, x.abs())
        } else if t < 100.0 {
            format!("{t:7.2}")
        } else if t < 10000.0 {
            format!("{t:7.1}")
        } else {
            format!("{t:7.0}")
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]
        /// Any well-formed table, any era, any launcher prefix, reads back
        /// exactly the sizes and (printed) times it holds.
        #[test]
        fn rows_round_trip(
            // Times log-uniform in 0.1 (the floor ingest accepts) .. 5e7 us (from integers: proptest
            // 1.12's float range sampler can trip its own assertion).
            rows in proptest::collection::vec((1u64..(1u64 << 40), 0u32..1_000_000, 0u32..1_000_000)
                .prop_map(|(b, x, y)| (b, 0.1 * 5e8f64.powf(x as f64 / 1e6), 0.1 * 5e8f64.powf(y as f64 / 1e6))), 1..40),
            new in any::<bool>(),
            prefix in prop_oneof![Just(""), Just("0: "), Just(" 12: "), Just("[1,0]<stdout>:")],
        ) {
            let mut s = String::from("# dyncc: default\n");
            s += &format!("{prefix}# nThread 1 nGpus 1 minBytes 8 maxBytes 8 step: 2(factor) warmup iters: 5 iters: 20 validation: 1\n");
            s += &format!("{prefix}#  Rank  0 Group  0 Pid 1 on h device 0 [0x01] GPU X\n");
            if new {
                s += &format!("{prefix}#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong\n");
            } else {
                s += &format!("{prefix}#       size         count      type   redop     time   algbw   busbw  error     time   algbw   busbw  error\n");
            }
            for (size, a, b) in &rows {
                let (ta, tb) = (fmt_time(*a, new), fmt_time(*b, new));
                if new {
                    s += &format!("{prefix}{size:12}  {:12}     float     sum      -1  {ta}    0.00    0.00       0  {tb}    inf     nan     N/A\n", size / 4);
                } else {
                    s += &format!("{prefix}{size:12}  {:12}     float     sum  {ta}    0.00    0.00  2e-07  {tb}    0.00    0.00  0e+00\n", size / 4);
                }
            }
            s += &format!("{prefix}# Avg bus bandwidth    : 0 \n");
            let ds = ingest::read_with_format(
                Path::new("all_reduce.log"),
                Cursor::new(s.as_bytes()),
                Format::NcclTestsText,
                &IngestOptions::default(),
            ).unwrap();
            prop_assert_eq!(ds.rows, rows.len());
            prop_assert_eq!(ds.records.len(), rows.len() * 2);
            for (i, (size, a, b)) in rows.iter().enumerate() {
                let (ra, rb) = (&ds.records[2 * i], &ds.records[2 * i + 1]);
                prop_assert_eq!((ra.measurement.nbytes, rb.measurement.nbytes), (*size, *size));
                prop_assert_eq!(ra.measurement.time_us, fmt_time(*a, new).trim().parse::<f64>().unwrap());
                prop_assert_eq!(rb.measurement.time_us, fmt_time(*b, new).trim().parse::<f64>().unwrap());
                prop_assert!(!ra.measurement.in_place && rb.measurement.in_place);
                prop_assert_eq!(ra.measurement.flags, 0);
            }
        }
    }
}

#[test]
fn large_rank_lists_count_ranks_and_hosts() {
    use std::fmt::Write;
    let mut s = String::from("# dyncc: default\n# nThread 1 nGpus 1 minBytes 8 maxBytes 8 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0\n#\n# Using devices\n");
    for r in 0..20000 {
        writeln!(
            s,
            "#  Rank {r:5} Group  0 Pid {r:6} on nid{:06} device {:2} [0x01] NVIDIA GH200 120GB",
            r / 4,
            r % 4
        )
        .unwrap();
    }
    s += "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n";
    s += "     1048576        262144     float     sum      -1   1200.0    0.87    1.75      0   1190.0    0.88    1.76      0\n";
    let ds = ingest::read_with_format(
        Path::new("all_reduce.log"),
        std::io::Cursor::new(s.as_bytes()),
        ingest::Format::NcclTestsText,
        &IngestOptions::default(),
    )
    .unwrap();
    assert_eq!(ds.records.len(), 2);
    assert_eq!(
        (ds.records[0].run.nranks, ds.records[0].run.nnodes),
        (20000, 5000)
    );
}

/// Compile held one full record per row and copied them all (a 2 GB CSV of
/// repeats took 8.6 GB): it now reads the sweep folded, one group per
/// distinct measurement with 16 bytes per repeat, and compiles exactly the
/// table the records give, on the shipped sweeps and on a file of repeats
/// with a warm-up outlier and a copy of itself.
#[test]
fn compile_reads_repeats_folded_into_one_group_per_cell() {
    use dyncc::pipeline::{compile_dataset, CompileOptions};
    let d = tempfile::tempdir().unwrap();
    let mut csv =
        String::from("collective,size_bytes,algorithm,protocol,channels,nodes,ranks,latency_us\n");
    for rep in 0..40 {
        for k in 3..13 {
            let b = 1u64 << k;
            let t = 10.0 + b as f64 / 100.0 + rep as f64 * 0.01;
            // A warm-up artefact in the first repeat of the smallest size.
            let t0 = if rep == 0 && k == 3 { t * 500.0 } else { t };
            csv += &format!("allreduce,{b},default,default,-1,1,8,{t0:.2}\n");
            csv += &format!("allreduce,{b},ring,ll,-1,1,8,{:.2}\n", t * 0.8);
        }
    }
    let f = d.path().join("repeats.csv");
    std::fs::write(&f, &csv).unwrap();
    std::fs::write(d.path().join("copy.csv"), &csv).unwrap();
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("datasets/real");
    for paths in [
        vec![d.path().to_path_buf()],
        vec![shipped.join("nvidia-dgx1v-allreduce.csv")],
        vec![shipped.join("nvidia-dgx2v-allreduce.csv")],
    ] {
        let folded = ingest::read_paths_folded(&paths, &opts()).unwrap();
        let rows = ingest::read_paths(&paths, &opts()).unwrap();
        assert!(folded.records.is_empty());
        assert_eq!(folded.folded.len(), rows.records.len(), "{paths:?}");
        assert_eq!(folded.anomalies.len(), rows.anomalies.len(), "{paths:?}");
        assert_eq!(folded.notes, rows.notes, "{paths:?}");
        assert_eq!(
            folded.folded.cells().len(),
            ingest::aggregate(&rows.records).len()
        );
        // The records come back in the order read.
        let back = folded.folded.clone().into_records();
        assert!(back
            .iter()
            .zip(&rows.records)
            .all(|(a, b)| a.measurement.source == b.measurement.source
                && a.measurement.time_us == b.measurement.time_us
                && a.key() == b.key()));
        let c = CompileOptions {
            command: "dyncc compile".into(),
            ..Default::default()
        };
        let a = compile_dataset(folded, &c).unwrap();
        let b = compile_dataset(rows, &c).unwrap();
        assert_eq!(a.bytes, b.bytes, "{paths:?}");
        assert_eq!(a.report.inputs.records, b.report.inputs.records);
    }
    // The file of repeats: 20 distinct measurements, 40 repeats each; the
    // copy counted once; the outlier flagged in a group of its own.
    let ds = ingest::read_paths_folded(&[d.path().to_path_buf()], &opts()).unwrap();
    assert_eq!(ds.folded.len(), 800);
    assert_eq!(ds.folded.groups.len(), 21, "{:?}", ds.folded.groups.len());
    assert!(
        ds.notes.iter().any(|n| n.contains("counted once")),
        "{:?}",
        ds.notes
    );
    let flagged: Vec<_> = ds
        .folded
        .groups
        .iter()
        .filter(|g| g.key.flags & dyncc::record::flags::WARMUP_OUTLIER != 0)
        .collect();
    assert_eq!(flagged.len(), 1);
    assert_eq!(flagged[0].samples.len(), 1);
    assert_eq!(ds.anomalies.len(), 1);
    assert!(ds.anomalies[0].detail.contains("8 B"), "{:?}", ds.anomalies);
    let cells = ds.folded.cells();
    assert_eq!(cells.len(), 20);
    assert_eq!(cells.iter().map(|c| c.n).sum::<u32>(), 799);
}
