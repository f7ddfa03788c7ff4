//! nccl-tests 2.19 output read right, or refused by name: the logs in
//! tests/data/nccl-tests-2.19 are written as nccl-tests 2.19.6 prints them
//! (src/util.cu's printf and JSON writers, src/common.cu): several GPUs per
//! process (`-g 8`), `NCCL_TESTS_SPLIT` communicators, `-C 1`, `-z 3` and
//! `-G 4` runs, a `-J` file beside its own stdout, a JSON cut off by a
//! killed job and a `-d all` run.

use std::path::{Path, PathBuf};

use dyncc::ingest::{self, setup, IngestOptions};

use crate::support::cli::dyncc;

fn data(name: &str) -> PathBuf {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/nccl-tests-2.19")
        .join(name);
    assert!(p.is_file(), "{} is part of the repository", p.display());
    p
}

/// Reads `files` strictly (or leniently) as NCCL's own choice where a log
/// does not show its knobs.
fn read(files: &[PathBuf], lenient: bool) -> anyhow::Result<ingest::Dataset> {
    let opts = IngestOptions {
        lenient,
        assume: IngestOptions::parse_assume(&["default".into()]).unwrap(),
        ..Default::default()
    };
    ingest::read_paths(files, &opts)
}

/// The (ranks, nodes) of the records read.
fn shapes(ds: &ingest::Dataset) -> Vec<(u32, u32)> {
    let mut s: Vec<(u32, u32)> = ds
        .records
        .iter()
        .map(|r| (r.run.nranks, r.run.nnodes))
        .collect();
    s.sort_unstable();
    s.dedup();
    s
}

/// nccl-tests' JSON holds one device record per process: `-g 8` on two
/// nodes was read as 2 ranks ("1 rank per node").
#[test]
fn json_of_several_gpus_per_process_counts_every_rank() {
    let ds = read(&[data("ar_g8_2x8.json")], false).unwrap();
    assert_eq!(ds.records.len(), 50);
    assert_eq!(shapes(&ds), [(16, 2)]);
    // The same run's stdout says so with one `# Rank` line per GPU.
    let ds = read(&[data("ar_g8_2x8.log")], false).unwrap();
    assert_eq!(shapes(&ds), [(16, 2)]);
}

/// `NCCL_TESTS_SPLIT=DIV8` makes a communicator per node: read as 16 ranks
/// on 2 nodes, the rows forced decisions no 16-rank job would see. The
/// text's `Group` column, the JSON's `group`, and (rank lines without a
/// `Group` column, as older nccl-tests print them) NCCL's own
/// `nRanks`/`nNodes` INFO lines each say so.
#[test]
fn split_runs_are_counted_per_communicator() {
    for f in [
        "ar_split_div8.log",
        "ar_split_div8.json",
        "ar_split_div8_nogroup.log",
    ] {
        let ds = read(&[data(f)], false).unwrap();
        assert_eq!(shapes(&ds), [(8, 1)], "{f}");
        assert!(
            ds.anomalies
                .iter()
                .any(|a| a.kind == "split-communicators" && a.detail.contains("8 ranks on 1 nodes")),
            "{f}: {:?}",
            ds.anomalies
        );
    }
}

/// Communicators of 12 and 4 ranks: one row per size reduced over both,
/// which no shape measured; refused, naming the file.
#[test]
fn split_runs_of_different_shapes_are_refused_naming_the_file() {
    let e = format!(
        "{:#}",
        read(&[data("ar_split_div12.log")], false).unwrap_err()
    );
    assert!(
        e.contains("ar_split_div12.log")
            && e.contains("NCCL_TESTS_SPLIT")
            && e.contains("12 ranks")
            && e.contains("4 ranks"),
        "{e}"
    );
}

/// `-C 1` (CPU time), `-z 3` (barrier excluded) and `-G 4` (graphs) time
/// something else: the CPU-time column was read as latency and forced
/// ring/ll from 8 B to 160 MiB against a default run.
#[test]
fn cputime_blocking_and_graph_runs_are_setups_of_their_own() {
    for (f, word) in [
        ("ar_cputime_2x8.log", "cputime"),
        ("ar_z3_2x8.log", "blocking3"),
        ("ar_graph_2x8.log", "graph"),
    ] {
        let mut ds = read(&[data("ar_default_2x8.log"), data(f)], false).unwrap();
        assert_eq!(ds.records.len(), 100, "{f}");
        // Never pooled: not by default, not with --pool-setups.
        for pool in [false, true] {
            let e = setup::select_setup(&mut ds, &setup::SetupChoice::new(None, pool).unwrap())
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("timed differently") && e.contains(&format!("timing={word}")),
                "{f}: {e}"
            );
        }
        // Picked by name, each alone.
        for pick in [word, "default"] {
            let mut ds = read(&[data("ar_default_2x8.log"), data(f)], false).unwrap();
            let choice = setup::SetupChoice::new(Some(&format!("timing={pick}")), false).unwrap();
            setup::select_setup(&mut ds, &choice).unwrap();
            assert_eq!(ds.records.len(), 50, "{f} {pick}");
            let want = if pick == "default" {
                "ar_default_2x8.log"
            } else {
                f
            };
            assert!(
                ds.records
                    .iter()
                    .all(|r| r.measurement.source.file.ends_with(want)),
                "{f} {pick}"
            );
        }
    }
}

/// Through the CLI as a user runs it: compile refuses the mix and says how
/// to pick each.
#[test]
fn compile_refuses_a_cputime_run_beside_a_default_one() {
    let d = tempfile::tempdir().unwrap();
    let o = dyncc()
        .arg("compile")
        .arg(data("ar_default_2x8.log"))
        .arg(data("ar_cputime_2x8.log"))
        .args(["--assume", "default", "-o"])
        .arg(d.path().join("t.tbl"))
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(
        e.contains("CPU time (-C 1)") && e.contains("--setup 'timing=cputime'"),
        "{e}"
    );
    assert!(!d.path().join("t.tbl").exists());
}

/// A `-J` file and the same run's stdout were counted as two repeats.
#[test]
fn a_json_and_its_own_stdout_are_counted_once() {
    let d = tempfile::tempdir().unwrap();
    for f in ["ar_g8_2x8.json", "ar_g8_2x8.log"] {
        std::fs::copy(data(f), d.path().join(f)).unwrap();
    }
    // The log alone shows no knobs: the JSON's environment does.
    let opts = IngestOptions::default();
    let ds = ingest::read_paths(&[d.path().to_path_buf()], &opts).unwrap();
    assert_eq!(ds.records.len(), 50);
    assert!(ds
        .records
        .iter()
        .all(|r| r.measurement.source.file.ends_with("ar_g8_2x8.json")));
    assert!(
        ds.notes
            .iter()
            .any(|n| n.contains("ar_g8_2x8.log") && n.contains("counted once")),
        "{:?}",
        ds.notes
    );
}

/// `NCCL_IB_HCA=mlx5_0,mlx5_3` (as dyncc's own message writes it) was
/// refused as two words.
#[test]
fn setup_values_with_commas_are_accepted() {
    let mut ds = read(&[data("ar_g8_2x8.json"), data("ar_split_div8.json")], false).unwrap();
    let choice = setup::SetupChoice::new(
        Some("NCCL_IB_HCA=mlx5_0,mlx5_3 NCCL_TESTS_SPLIT=unset"),
        false,
    )
    .unwrap();
    setup::select_setup(&mut ds, &choice).unwrap();
    assert_eq!(shapes(&ds), [(16, 2)]);
    let o = dyncc()
        .arg("inspect")
        .arg(data("ar_g8_2x8.json"))
        .args(["--setup", "NCCL_IB_HCA=mlx5_0,mlx5_3"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// A JSON cut off by a killed job was refused whole without saying why.
#[test]
fn a_truncated_json_is_named_and_its_complete_results_read_under_lenient() {
    let f = data("ar_killed.json");
    let e = format!("{:#}", read(std::slice::from_ref(&f), false).unwrap_err());
    assert!(
        e.contains("ar_killed.json") && e.contains("truncated"),
        "{e}"
    );
    let ds = read(&[f], true).unwrap();
    // 8 B to 32 KiB: 13 complete results, both placements.
    assert_eq!(ds.records.len(), 26);
    assert!(
        ds.skipped.iter().any(|s| s.reason.contains("truncated")),
        "{:?}",
        ds.skipped
    );
}

/// `-d all` pooled ten datatypes at each size without a word.
#[test]
fn datatypes_of_a_d_all_run_are_said_pooled() {
    let ds = read(&[data("ar_dall_2x8.log")], false).unwrap();
    let a = ds
        .anomalies
        .iter()
        .find(|a| a.kind == "datatypes-pooled")
        .unwrap_or_else(|| panic!("{:?}", ds.anomalies));
    assert!(
        a.detail.contains("10 datatypes") && a.detail.contains("bfloat16"),
        "{}",
        a.detail
    );
}
