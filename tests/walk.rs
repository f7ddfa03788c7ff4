//! The walk of trace and sweep directories stays in the tree named: a link
//! to `/` or to an ancestor is not followed but named as skipped, traces at
//! any depth are read, and `query --data` names the traces it skips.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use dyncc_tables::trace::{encode, Source, TraceComm, TraceHead, TraceRecord};
use dyncc_tables::{Algo, Coll, Proto, Setting};

use crate::support::cli::dyncc;

/// A valid trace at `dir/name`: one communicator of 2 x 8 ranks that ran
/// NCCL's Ring/Simple at 1 MiB 100 times (about 1 ms each).
fn trace(dir: &Path, name: &str) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let head = TraceHead {
        profiler_abi: 6,
        nccl_version: 22703,
        pid: 7,
        host: "node1",
        job_id: "1",
        ..Default::default()
    };
    let comm = TraceComm {
        comm_id: 1,
        n_nodes: 2,
        n_ranks: 16,
        rank: 0,
        name: "",
    };
    let ln = 1e6f64.ln();
    let rec = TraceRecord {
        comm: 0,
        coll: Coll::AllReduce,
        n_bytes: 1 << 20,
        setting: Setting::new(Algo::Ring, Proto::Simple).with_channels(8),
        source: Source::Nccl,
        count: 100,
        sum_ln: 100.0 * ln,
        sum_ln2: 100.0 * ln * ln + 99.0 * 0.03 * 0.03,
        min_ns: 950_000,
        max_ns: 1_050_000,
    };
    let p = dir.join(name);
    std::fs::write(&p, encode(&head, &[comm], &[rec]).unwrap()).unwrap();
    p
}

/// A tuner-CSV sweep of AllReduce on 2 x 8 ranks: NCCL's default and
/// Ring/Simple, 64 KiB to 4 MiB.
fn sweep(dir: &Path) -> PathBuf {
    let mut s = String::from(
        "collective,size_bytes,algorithm,protocol,channels,nodes,ranks,pipeOps,regBuff,\
         cost_metric,bandwidth_gbps,latency_us,platform\n",
    );
    for k in 16..=22 {
        let b = 1u64 << k;
        let t = 20.0 + b as f64 / 2e3;
        for (a, p) in [("default", "default"), ("ring", "simple")] {
            s.push_str(&format!(
                "allreduce,{b},{a},{p},-1,2,16,1,0,{t:.3},1.0,{t:.3},test\n"
            ));
        }
    }
    std::fs::create_dir_all(dir).unwrap();
    let p = dir.join("sweep.csv");
    std::fs::write(&p, s).unwrap();
    p
}

/// `dyncc inspect DIR --json`: exit status, stdout, stderr and how long it
/// took.
fn inspect(dir: &Path) -> (bool, String, String, Duration) {
    let t = Instant::now();
    let o = dyncc().arg("inspect").arg(dir).output().unwrap();
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
        t.elapsed(),
    )
}

/// A link to `/` in a trace directory walked the whole file system
/// (15-21 s, 40,084 error lines, other processes' traces through
/// `/proc/PID/cwd`).
#[test]
fn a_link_to_root_in_a_trace_directory_is_named_not_followed() {
    let d = tempfile::tempdir().unwrap();
    let traces = d.path().join("traces");
    trace(&traces.join("job1"), "a.trace");
    std::os::unix::fs::symlink("/", traces.join("everything")).unwrap();
    let (ok, out, err, took) = inspect(&traces);
    assert!(ok, "{err}");
    assert_eq!(
        out.matches("trace ").count(),
        1,
        "one trace, read once: {out}"
    );
    assert!(out.contains("a.trace"), "{out}");
    assert!(
        err.contains("everything")
            && err.contains("not followed")
            && err.contains("the directory /,"),
        "the link is named: {err}"
    );
    assert!(!err.contains("/proc"), "nothing read below /: {err}");
    assert!(err.lines().count() < 5, "{err}");
    eprintln!("inspect with a link to /: {took:?}");
    assert!(took < Duration::from_secs(10), "{took:?}");
}

/// A link back up to the directory above the one named left the tree too.
#[test]
fn a_link_to_an_ancestor_is_named_not_followed() {
    let d = tempfile::tempdir().unwrap();
    let traces = d.path().join("traces");
    trace(&traces.join("job1"), "a.trace");
    // Beside the named directory: another day's traces, not named.
    trace(&d.path().join("other"), "b.trace");
    std::os::unix::fs::symlink(d.path(), traces.join("job1").join("up")).unwrap();
    let (ok, out, err, _) = inspect(&traces);
    assert!(ok, "{err}");
    assert!(out.contains("a.trace") && !out.contains("b.trace"), "{out}");
    assert!(
        err.contains("up") && err.contains("an ancestor") && err.contains("not followed"),
        "{err}"
    );
}

/// Compile names the link it did not follow in its report, beside the
/// traces it read.
#[test]
fn compile_names_a_link_out_of_the_trace_tree_in_its_report() {
    let d = tempfile::tempdir().unwrap();
    let s = sweep(&d.path().join("sweep"));
    let traces = d.path().join("traces");
    trace(&traces.join("job1"), "a.trace");
    std::os::unix::fs::symlink("/proc", traces.join("proc")).unwrap();
    let o = dyncc()
        .arg("compile")
        .arg(&s)
        .arg(&traces)
        .arg("-o")
        .arg(d.path().join("t.tbl"))
        .output()
        .unwrap();
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert!(o.status.success(), "{out}{err}");
    let all = format!("{out}{err}");
    assert!(
        all.contains("skipped") && all.contains("proc") && all.contains("not followed"),
        "{all}"
    );
    assert!(!all.contains("fdinfo"), "{all}");
}

/// More than 8 levels below the named directory traces were skipped and
/// compile said "no trace ... in or below this directory".
#[test]
fn traces_deeper_than_eight_levels_are_read() {
    let d = tempfile::tempdir().unwrap();
    let traces = d.path().join("traces");
    let mut deep = traces.clone();
    for i in 0..12 {
        deep = deep.join(format!("l{i}"));
    }
    trace(&deep, "deep.trace");
    let (ok, out, err, _) = inspect(&traces);
    assert!(ok, "{err}");
    assert!(out.contains("deep.trace"), "{out}{err}");
    // Compile reads it too, and does not call the directory empty.
    let s = sweep(&d.path().join("sweep"));
    let o = dyncc()
        .arg("compile")
        .arg(&s)
        .arg(&traces)
        .arg("-o")
        .arg(d.path().join("t.tbl"))
        .arg("--json")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(!err.contains("no trace"), "{err}");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["traces"]["files"], 1, "the trace is read: {v}");
}

/// `query --data` counted the traces it could not read; it names them now,
/// as compile's report does.
#[test]
fn query_data_names_the_traces_it_skips() {
    let d = tempfile::tempdir().unwrap();
    let s = sweep(&d.path().join("sweep"));
    let table = d.path().join("t.tbl");
    let o = dyncc()
        .arg("compile")
        .arg(&s)
        .arg("-o")
        .arg(&table)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let traces = d.path().join("traces");
    trace(&traces, "good.trace");
    let bad = trace(&traces, "bad.trace");
    let mut bytes = std::fs::read(&bad).unwrap();
    let n = bytes.len();
    bytes[n - 3] ^= 0xff;
    std::fs::write(&bad, bytes).unwrap();
    std::os::unix::fs::symlink("/", traces.join("root")).unwrap();
    let o = dyncc()
        .arg("query")
        .arg(&table)
        .args([
            "--coll",
            "allreduce",
            "--bytes",
            "1M",
            "--nodes",
            "2",
            "--ranks",
            "16",
        ])
        .arg("--data")
        .arg(&s)
        .arg(&traces)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("skipped") && err.contains("bad.trace") && err.contains("not a valid"),
        "{err}"
    );
    assert!(
        err.contains("root") && err.contains("not followed"),
        "{err}"
    );
}
