//! Malformed inputs: strict reading fails with `file:line`, what was
//! expected and what to do; lenient reading skips and reports the same.

use std::path::PathBuf;

use dyncc::ingest::{self, IngestOptions};

const HEAD: &str = "# dyncc: NCCL_ALGO=Ring NCCL_PROTO=Simple channels=-1
# nThread 1 nGpus 1 minBytes 8 maxBytes 64 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid  1 on  n1 device  0 [0x01] NVIDIA A100-SXM4-40GB
#  Rank  1 Group  0 Pid  2 on  n2 device  0 [0x01] NVIDIA A100-SXM4-40GB
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
";
const GOOD: &str =
    "           8             2     float     sum      -1    10.00    0.00    0.00      0    10.10    0.00    0.00      0\n";

fn write(dir: &tempfile::TempDir, name: &str, body: &str) -> PathBuf {
    let p = dir.path().join(name);
    std::fs::write(&p, body).unwrap();
    p
}

fn strict(p: &PathBuf) -> String {
    format!(
        "{:#}",
        ingest::read_paths(std::slice::from_ref(p), &IngestOptions::default()).unwrap_err()
    )
}

fn lenient(p: &PathBuf) -> ingest::Dataset {
    ingest::read_paths(
        std::slice::from_ref(p),
        &IngestOptions {
            lenient: true,
            ..Default::default()
        },
    )
    .unwrap()
}

/// A log whose 12th line is `row`, after one good row.
fn log_with_row(dir: &tempfile::TempDir, row: &str) -> PathBuf {
    write(
        dir,
        "all_reduce.log",
        &format!("{HEAD}{GOOD}{row}\n# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 1 \n"),
    )
}

fn check_row_error(row: &str, expect: &str) {
    let d = tempfile::tempdir().unwrap();
    let p = log_with_row(&d, row);
    let e = strict(&p);
    assert!(e.contains(&format!("{}:12:", p.display())), "{e}");
    assert!(e.contains(expect), "{e}");
    assert!(e.contains("--lenient"), "{e}");
    let ds = lenient(&p);
    assert_eq!(ds.records.len(), 2, "the good row is kept");
    assert_eq!(ds.skipped.len(), 1);
    assert_eq!(ds.skipped[0].line, 12);
    assert!(ds.skipped[0].reason.contains(expect));
}

#[test]
fn text_row_with_wrong_column_count() {
    check_row_error(
        "          16             4     float     sum      -1    10.50    0.00    0.00      0    10.40",
        "a data row with 10 fields; expected 13",
    );
}

#[test]
fn text_row_with_non_numeric_time() {
    check_row_error(
        "          16             4     float     sum      -1    fast    0.00    0.00      0    10.40    0.00    0.00      0",
        "out-of-place time \"fast\": expected a positive number of microseconds",
    );
}

#[test]
fn text_row_with_negative_time() {
    check_row_error(
        "          16             4     float     sum      -1    10.50    0.00    0.00      0    -3.0    0.00    0.00      0",
        "in-place time \"-3.0\": expected a positive",
    );
}

#[test]
fn text_row_with_nan_time() {
    check_row_error(
        "          16             4     float     sum      -1      nan    0.00    0.00      0    10.40    0.00    0.00      0",
        "out-of-place time \"nan\"",
    );
}

#[test]
fn text_row_with_bad_wrong_count() {
    check_row_error(
        "          16             4     float     sum      -1    10.50    0.00    0.00      x    10.40    0.00    0.00      0",
        "#wrong \"x\": expected a count or N/A",
    );
}

#[test]
fn launcher_noise_and_comments_are_not_errors() {
    let d = tempfile::tempdir().unwrap();
    let body = format!(
        "+ srun -l all_reduce_perf -b 8\nRead only 28 bytes from /etc/pals/server_key.pub, expected 40\n{HEAD}n1:1:1 [0] NCCL INFO Channel 00/02 : 0 1\n{GOOD}# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 1 \n12 34 is not a row outside a table\n1 2 3 4\n"
    );
    let p = write(&d, "x.log", &body);
    let ds = ingest::read_paths(&[p], &IngestOptions::default()).unwrap();
    assert_eq!((ds.rows, ds.records.len(), ds.skipped.len()), (1, 2, 0));
}

#[test]
fn unknown_knobs_are_an_error_that_says_what_to_pass() {
    let d = tempfile::tempdir().unwrap();
    let p = write(
        &d,
        "all_reduce.log",
        &format!(
            "{}{GOOD}",
            HEAD.lines()
                .skip(1)
                .map(|l| format!("{l}\n"))
                .collect::<String>()
        ),
    );
    let e = strict(&p);
    assert!(e.contains(&p.display().to_string()), "{e}");
    assert!(e.contains("knobs unknown"), "{e}");
    assert!(e.contains("--assume default"), "{e}");
    let ds = lenient(&p);
    assert_eq!((ds.rows, ds.records.len(), ds.skipped.len()), (1, 0, 1));
    // inspect keeps them, flagged, and never aggregates them.
    let ds = ingest::read_paths(
        &[p],
        &IngestOptions {
            lenient: true,
            keep_unresolved: true,
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(ds.records.len(), 2);
    assert!(ds
        .records
        .iter()
        .all(|r| r.measurement.flags & ingest::UNRESOLVED != 0));
    assert!(ingest::aggregate(&ds.records).is_empty());
}

#[test]
fn bad_dyncc_header_value() {
    let d = tempfile::tempdir().unwrap();
    let p = write(
        &d,
        "all_reduce.log",
        &format!("# dyncc: nodes=two\n{HEAD}{GOOD}"),
    );
    let e = strict(&p);
    assert!(
        e.contains(":1:") && e.contains("nodes=two: expected a whole number"),
        "{e}"
    );
}

#[test]
fn interleaved_jobs_of_different_shapes_are_not_attributed() {
    let d = tempfile::tempdir().unwrap();
    let body = format!(
        "{HEAD}#  Rank  0 Group  0 Pid  1 on  n3 device  0 [0x01] NVIDIA A100-SXM4-40GB\n{GOOD}"
    );
    let p = write(&d, "all_reduce.log", &body);
    let e = strict(&p);
    assert!(e.contains("2 interleaved jobs of different shapes"), "{e}");
}

const CSV_HEAD: &str = "collective,size_bytes,algorithm,protocol,channels,nodes,ranks,pipeOps,regBuff,cost_metric,bandwidth_gbps,latency_us\n";
const CSV_GOOD: &str = "allreduce,8,ring,ll,-1,1,8,1,0,12.5,0.001,12.5\n";

fn check_csv_error(row: &str, expect: &str) {
    let d = tempfile::tempdir().unwrap();
    let p = write(&d, "t.csv", &format!("{CSV_HEAD}{CSV_GOOD}{row}\n"));
    let e = strict(&p);
    assert!(e.contains(&format!("{}:3:", p.display())), "{e}");
    assert!(e.contains(expect), "{e}");
    let ds = lenient(&p);
    assert_eq!((ds.rows, ds.records.len(), ds.skipped.len()), (2, 1, 1));
    assert_eq!(ds.skipped[0].line, 3);
}

#[test]
fn csv_bad_size() {
    check_csv_error(
        "allreduce,8k,ring,ll,-1,1,8,1,0,12.5,0.001,12.5",
        "size_bytes \"8k\": expected a whole number",
    );
}

#[test]
fn csv_bad_algorithm() {
    check_csv_error(
        "allreduce,16,rign,ll,-1,1,8,1,0,12.5,0.001,12.5",
        "algorithm \"rign\"",
    );
}

#[test]
fn csv_negative_time() {
    check_csv_error(
        "allreduce,16,ring,ll,-1,1,8,1,0,12.5,0.001,-4",
        "latency_us \"-4\": expected a positive time",
    );
}

#[test]
fn csv_zero_channels() {
    check_csv_error(
        "allreduce,16,ring,ll,0,1,8,1,0,12.5,0.001,12",
        "0 channels: expected 1..=64",
    );
}

#[test]
fn csv_time_falls_back_to_cost_metric() {
    let d = tempfile::tempdir().unwrap();
    let p = write(
        &d,
        "t.csv",
        &format!("{CSV_HEAD}allreduce,16,tree,simple,4,2,16,1,1,33.5,,\n"),
    );
    let ds = ingest::read_paths(&[p], &IngestOptions::default()).unwrap();
    let r = &ds.records[0];
    assert_eq!(
        (
            r.measurement.time_us,
            r.run.config.channels,
            r.run.state.reg_buff,
            r.run.nnodes
        ),
        (33.5, Some(4), true, 2)
    );
}

#[test]
fn csv_missing_required_column() {
    let d = tempfile::tempdir().unwrap();
    let p = write(&d, "t.csv", "collective,size_bytes,algorithm,protocol,nodes,ranks,latency_us\nallreduce,8,ring,ll,1,8,3\n");
    let e = strict(&p);
    assert!(e.contains(":1:") && e.contains("lacks `channels`"), "{e}");
}

#[test]
fn nvidia_raw_bad_row_and_unknown_platform() {
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(d.path().join("DGX-1V/data")).unwrap();
    let p = write(&d, "DGX-1V/data/2.csv", "1,2,3,4,5,6,7\n1,2,3,x,5,6,7\n");
    let e = strict(&p);
    assert!(
        e.contains("2.csv:2:") && e.contains("expected 7 comma-separated times"),
        "{e}"
    );
    let q = write(&d, "3.csv", "1,2,3,4,5,6,7\n");
    let e = strict(&q);
    assert!(e.contains("--assume gpus_per_node=N"), "{e}");
    let ds = ingest::read_paths(
        &[q],
        &IngestOptions {
            assume: vec![("gpus_per_node".into(), "4".into())],
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!((ds.records.len(), ds.records[0].run.nranks), (7, 12));
}

#[test]
fn json_invalid_and_nan_time() {
    let d = tempfile::tempdir().unwrap();
    let p = write(&d, "r.json", "{\"version\": 3,\n \"results\": [\n");
    let e = strict(&p);
    assert!(
        e.contains("r.json:3:") && e.contains("not valid JSON"),
        "{e}"
    );
    let p = write(
        &d,
        "all_gather.json",
        r#"{"version":3,"env":[],"args":["./all_gather_perf"],"config":{"devices":[{"rank":0,"hostname":"a","device_info":"G"}]},
        "results":[{"size":64,"count":16,"type":"float","redop":"none","root":"    -1","out_of_place":null,"in_place":{"time":"nan","alg_bw":0,"bus_bw":0,"nwrong":null}}]}"#,
    );
    let e = strict(&p);
    assert!(
        e.contains("all_gather.json:1:") && e.contains("results[0].in_place.time"),
        "{e}"
    );
}

#[test]
fn missing_path_and_bad_assume() {
    let e = ingest::read_paths(
        &[PathBuf::from("/nonexistent/sweeps")],
        &IngestOptions::default(),
    )
    .unwrap_err();
    assert!(
        format!("{e:#}").contains("/nonexistent/sweeps: cannot read it"),
        "{e:#}"
    );
    let e = IngestOptions::parse_assume(&["nodez=2".into()]).unwrap_err();
    assert!(format!("{e:#}").contains("unknown key \"nodez\""), "{e:#}");
    let e = IngestOptions::parse_assume(&["NCCL_ALGO".into()]).unwrap_err();
    assert!(format!("{e:#}").contains("expected KEY=VALUE"), "{e:#}");
}

/// Found by the ingest_csv fuzz target: an empty tuner CSV made even a
/// lenient read fail.
#[test]
fn empty_tuner_csv_is_skipped_when_lenient() {
    let opts = IngestOptions {
        lenient: true,
        ..Default::default()
    };
    let ds = ingest::read_with_format(
        std::path::Path::new("e.csv"),
        std::io::Cursor::new(&b""[..]),
        ingest::Format::TunerCsv,
        &opts,
    )
    .unwrap();
    assert_eq!((ds.rows, ds.skipped.len()), (0, 1));
    let e = ingest::read_with_format(
        std::path::Path::new("e.csv"),
        std::io::Cursor::new(&b""[..]),
        ingest::Format::TunerCsv,
        &IngestOptions::default(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("e.csv:0: empty file"), "{e}");
}

#[test]
fn unreadable_file_is_an_error_naming_it() {
    let d = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(d.path().join("gone.log"), d.path().join("dangling.log")).unwrap();
    let e = format!(
        "{:#}",
        ingest::read_paths(&[d.path().to_path_buf()], &IngestOptions::default()).unwrap_err()
    );
    assert!(e.contains("dangling.log:0: cannot open the file"), "{e}");
    assert!(e.contains("--lenient"), "{e}");
    let ds = ingest::read_paths(
        &[d.path().to_path_buf()],
        &IngestOptions {
            lenient: true,
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(ds.skipped.len(), 1);
}

#[test]
fn invalid_utf8_in_csv_is_a_bad_value_not_an_io_error() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("t.csv");
    let mut body = CSV_HEAD.as_bytes().to_vec();
    body.extend_from_slice(b"allreduce,8,ri\xffng,ll,-1,1,8,1,0,12.5,0.001,12.5\n");
    std::fs::write(&p, body).unwrap();
    let e = strict(&p);
    assert!(e.contains("t.csv:2: algorithm"), "{e}");
}
