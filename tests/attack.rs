//! The attack suite: hostile or broken inputs handed to the `dyncc` binary,
//! one [`Row`] each (input, command line, expected exit status, a fragment
//! of the message), beside the plugin's malformed-table matrix in
//! `stress_c`. Every command runs under a memory limit and a timeout, so a
//! command that reads without bound or waits on a FIFO fails its row
//! instead of taking the machine down or hanging the suite.
//!
//! To check a new command or file argument, add it to [`bounded_readers`]
//! (it then meets every special file); to check one input, add a [`Row`]
//! to a list of rows and [`check`] it.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use dyncc_tables::*;

/// What a row hands the command where `IN` stands in its arguments.
#[derive(Clone, Copy, Debug)]
enum Input {
    /// `/dev/zero`: a device that never ends.
    DevZero,
    /// A FIFO nobody writes to: opening or reading it waits forever.
    Fifo,
    /// A directory.
    Directory,
    /// A sparse regular file of this many bytes (of zeros).
    Sparse(u64),
    /// A regular file with this text.
    Text(&'static str),
    /// A regular file with the bytes the function makes (named for messages).
    Made(&'static str, fn() -> Vec<u8>),
    /// A directory holding one file.
    NonEmptyDir,
}

impl Input {
    /// The input as failure messages name it.
    fn describe(&self) -> String {
        match self {
            Input::Made(name, _) => format!("a file made by {name}()"),
            Input::Text(t) => format!("text {:?}", t.chars().take(80).collect::<String>()),
            other => format!("{other:?}"),
        }
    }

    /// Makes the input in `dir`.
    fn make(self, dir: &Path) -> PathBuf {
        let p = dir.join("in");
        match self {
            Input::DevZero => return PathBuf::from("/dev/zero"),
            Input::Fifo => {
                let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
                // SAFETY: mkfifo with a valid NUL-terminated path.
                assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
            }
            Input::Directory => std::fs::create_dir(&p).unwrap(),
            Input::Sparse(len) => std::fs::File::create(&p).unwrap().set_len(len).unwrap(),
            Input::Text(t) => std::fs::write(&p, t).unwrap(),
            Input::Made(_, f) => std::fs::write(&p, f()).unwrap(),
            Input::NonEmptyDir => {
                std::fs::create_dir(&p).unwrap();
                std::fs::write(p.join("old.log"), "an earlier sweep").unwrap();
            }
        }
        p
    }
}

/// One case: `args` with `IN` replaced by the input, `TBL` by a valid
/// table and `OUT` by a fresh output path; the exit status and a fragment
/// of stderr it must give. When the status is 2, stderr must also name the
/// input and stdout must be empty (an error prints no partial answer).
struct Row {
    input: Input,
    args: Vec<&'static str>,
    rc: i32,
    stderr: String,
}

/// A command reading one bounded file (`IN`), and the limit the message
/// names for it.
struct Reader {
    args: &'static [&'static str],
    limit: u64,
    limit_text: &'static str,
}

const TABLE: (u64, &str) = (64 << 20, "64 MiB");

/// `query` of one call, reading the table `IN`.
const QUERY: &[&str] = &[
    "query",
    "IN",
    "--coll",
    "allreduce",
    "--bytes",
    "1M",
    "--nodes",
    "2",
    "--ranks",
    "16",
];

/// Every file argument of every command other than sweeps.
fn bounded_readers() -> Vec<Reader> {
    let r = |args, (limit, limit_text)| Reader {
        args,
        limit,
        limit_text,
    };
    vec![
        r(&["verify", "IN"], TABLE),
        r(&["explain", "IN"], TABLE),
        r(QUERY, TABLE),
        r(&["query", "TBL", "--batch", "IN"], (16 << 20, "16 MiB")),
        r(&["diff", "IN", "TBL"], TABLE),
        r(&["diff", "TBL", "IN"], TABLE),
        r(&["plot", "IN", "-o", "OUT"], TABLE),
        r(&["export", "IN"], TABLE),
        r(&["eval", "IN", "TBL"], TABLE),
        r(&["eval", "TBL", "--truth", "IN"], (256 << 20, "256 MiB")),
        r(
            &["simulate", "--profile", "v100", "--calibrate", "IN"],
            (64 << 20, "64 MiB"),
        ),
        r(
            &["simulate", "--profile-file", "IN", "--report"],
            (1 << 20, "1 MiB"),
        ),
        r(
            &["compile", "--manifest", "IN", "TBL", "-o", "OUT"],
            (16 << 20, "16 MiB"),
        ),
    ]
}

/// Every bounded reader meets a device, a FIFO, a directory and a sparse
/// file one byte over its limit: each is refused before it is read.
fn special_file_rows() -> Vec<Row> {
    let mut rows = Vec::new();
    for r in bounded_readers() {
        let cases = [
            (
                Input::DevZero,
                "is a character device, not a regular file; not read".to_string(),
            ),
            (
                Input::Fifo,
                "is a FIFO (named pipe), not a regular file; not read".into(),
            ),
            (
                Input::Directory,
                "is a directory, not a regular file; not read".into(),
            ),
            (
                Input::Sparse(r.limit + 1),
                format!("over the {} limit", r.limit_text),
            ),
        ];
        for (input, stderr) in cases {
            rows.push(Row {
                input,
                args: r.args.to_vec(),
                rc: 2,
                stderr,
            });
        }
    }
    rows
}

/// A small valid table.
fn table() -> Vec<u8> {
    let mut b = TableBuilder::new();
    b.meta("platform", "test-rig");
    b.context(
        ContextSpec {
            coll: Coll::AllReduce,
            nodes: (2, 2),
            ppn: (8, 8),
            max_pipe_ops: 0,
            reg_buff: RegBuff::Any,
        },
        &[Rule {
            last_bucket: 255,
            decision: Decision::Default,
            basis: Basis::Measured,
            gain: 1.0,
        }],
    )
    .unwrap();
    b.build().unwrap()
}

/// [`table`] as a newer format major would write it.
fn newer_table() -> Vec<u8> {
    let mut b = table();
    b[8..10].copy_from_slice(&(FORMAT_MAJOR + 1).to_le_bytes());
    b
}

/// What a run gave.
struct Ran {
    rc: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Runs dyncc with `args` under a 1 GiB address-space limit (reading
/// without bound then aborts quickly) and a 30 s timeout (waiting on a FIFO
/// then fails the row; the process is killed).
fn run_bounded(args: &[String]) -> Ran {
    use std::os::unix::process::CommandExt as _;
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dyncc"));
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: setrlimit is async-signal-safe and touches no memory of the
    // parent; the limit is a plain struct on the child's stack.
    unsafe {
        cmd.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: 1 << 30,
                rlim_max: 1 << 30,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd.spawn().expect("run dyncc");
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(Duration::from_secs(30)) {
        Ok(out) => {
            let out = out.expect("wait for dyncc");
            Ran {
                rc: out.status.code(),
                stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
                stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            }
        }
        Err(_) => {
            // SAFETY: kill(2) on the pid of our own child, which has not
            // been reaped (wait_with_output has not returned).
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
            let _ = rx.recv(); // reaped
            Ran {
                rc: None,
                stdout: String::new(),
                stderr: "(did not finish in 30 s: killed; waiting on a FIFO?)".into(),
            }
        }
    }
}

fn run_row(row: &Row) -> Result<(), String> {
    let d = tempfile::tempdir().unwrap();
    let tbl = d.path().join("t.tbl");
    std::fs::write(&tbl, table()).unwrap();
    let inp = row.input.make(d.path());
    let out = d.path().join("out");
    let args: Vec<String> = row
        .args
        .iter()
        .map(|a| match *a {
            "IN" => inp.display().to_string(),
            "TBL" => tbl.display().to_string(),
            "OUT" => out.display().to_string(),
            a => a.to_string(),
        })
        .collect();
    let ran = run_bounded(&args);
    let silent = row.rc != 2 || ran.stdout.is_empty();
    let named = row.rc != 2 || ran.stderr.contains(&inp.display().to_string());
    if ran.rc == Some(row.rc) && ran.stderr.contains(&row.stderr) && silent && named {
        return Ok(());
    }
    Err(format!(
        "dyncc {}  [{}]: rc {:?} (want {}), stderr must contain {:?}{}\n  stderr: {}\n  \
         stdout: {}",
        row.args.join(" "),
        row.input.describe(),
        ran.rc,
        row.rc,
        row.stderr,
        if row.rc == 2 {
            " and the input, stdout empty"
        } else {
            ""
        },
        ran.stderr.trim(),
        ran.stdout.trim()
    ))
}

/// Runs `rows`; fails listing every row that did not hold.
fn check(rows: &[Row]) {
    let failures: Vec<String> = rows.iter().filter_map(|r| run_row(r).err()).collect();
    assert!(
        failures.is_empty(),
        "{} of {} rows failed:\n{}",
        failures.len(),
        rows.len(),
        failures.join("\n")
    );
}

/// Every command, given a device, a FIFO, a directory or a file over its
/// limit where it reads a table, a batch, a truth, a calibration, a profile
/// or a manifest, refuses it before reading: rc 2, one message naming what
/// is wrong, nothing on stdout.
#[test]
fn special_and_oversized_files_are_refused_before_reading() {
    let mut rows = special_file_rows();
    // The 10 GB sparse file: refused from its size, not read.
    rows.push(row(
        Input::Sparse(10 << 30),
        &["verify", "IN"],
        2,
        "is 10737418240 bytes, over the 64 MiB limit for a table; not read",
    ));
    check(&rows);
}

/// `dyncc inspect` of a file that starts like a trace but is larger than
/// any trace can be: refused from its size, not read whole.
#[test]
fn inspect_refuses_an_oversized_trace_file_before_reading() {
    check(&[row(
        Input::Made("oversized_trace", oversized_trace),
        &["inspect", "IN"],
        2,
        "(trace file) is 1048577 bytes, over the 1 MiB limit for a trace file; not read",
    )]);
}

/// The trace magic, then zeros: one byte over [`MAX_TRACE_LEN`].
fn oversized_trace() -> Vec<u8> {
    let mut v = TRACE_MAGIC.to_vec();
    v.resize(MAX_TRACE_LEN + 1, 0);
    v
}

fn row(input: Input, args: &[&'static str], rc: i32, stderr: &str) -> Row {
    Row {
        input,
        args: args.to_vec(),
        rc,
        stderr: stderr.to_string(),
    }
}

/// `query --batch` printed the answers of the lines before a bad one, then
/// failed: a consumer got half the answers and rc 2.
#[test]
fn query_batch_checks_every_line_before_answering() {
    check(&[row(
        Input::Text("allreduce,1K,2,16\n# a comment\nallreduce,1K,x,16\n"),
        &["query", "TBL", "--batch", "IN"],
        2,
        "in:3: nodes `x` is not a whole number",
    )]);
}

/// `simulate -o DIR` wrote beside an earlier sweep, which `compile DIR`
/// then read together with the new one.
#[test]
fn simulate_refuses_a_non_empty_output_directory_unless_forced() {
    let sim = [
        "simulate",
        "--profile",
        "v100",
        "--nodes",
        "1",
        "--colls",
        "allreduce",
        "--channels",
        "auto",
        "--repeats",
        "1",
        "--max-bytes",
        "1K",
        "-o",
        "IN",
    ];
    check(&[
        row(
            Input::NonEmptyDir,
            &sim,
            2,
            "is not empty (1 entry: old.log): the new sweep would sit beside what is there",
        ),
        row(
            Input::NonEmptyDir,
            &[&sim[..], &["--force"]].concat(),
            0,
            "",
        ),
        row(Input::Directory, &sim, 0, ""),
    ]);
}

/// A table of a newer format major was called corrupt ("copy it again",
/// "re-create it"); a newer dyncc reads it.
#[test]
fn a_table_from_a_newer_dyncc_asks_for_an_upgrade() {
    let newer = format!(
        "was made by a newer dyncc (table format {}; this dyncc reads format {FORMAT_MAJOR}); \
         upgrade dyncc",
        FORMAT_MAJOR + 1
    );
    let commands: [&[&'static str]; 7] = [
        &["verify", "IN"],
        &["explain", "IN"],
        QUERY,
        &["diff", "TBL", "IN"],
        &["plot", "IN", "-o", "OUT"],
        &["export", "IN"],
        &["eval", "IN", "TBL"],
    ];
    let rows: Vec<Row> = commands
        .iter()
        .map(|args| row(Input::Made("newer_table", newer_table), args, 2, &newer))
        .collect();
    check(&rows);
}

/// A time of 1e300 was echoed in the error with all its 301 digits.
#[test]
fn a_huge_time_is_printed_short() {
    check(&[row(
        Input::Text(
            "collective,size_bytes,algorithm,protocol,channels,nodes,ranks,pipeOps,regBuff,\
             cost_metric,bandwidth_gbps,latency_us,platform\n\
             allreduce,16,default,default,-1,1,8,1,0,1e300,0.002,1e300,DGX-1V\n",
        ),
        &["compile", "IN", "-o", "OUT"],
        2,
        "latency_us 1e300 us: expected a time between",
    )]);
}

/// A shipped 1-node, 2-rank log (it names its collective).
fn one_node_log() -> Vec<u8> {
    std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/datasets/logs/rtx5090_nccl-tests-2.18.0_openmpi-tag-output_allreduce.log"
    ))
    .unwrap()
}

/// A shipped 2-node, 8-rank log (its collective comes from its name).
fn two_node_log() -> Vec<u8> {
    std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/datasets/logs/polaris-a100_n2g4_all_reduce_output.dat.1"
    ))
    .unwrap()
}

/// `--assume nodes=4` (or a wrong `gpus_per_node`) on logs of 1 and 2 nodes
/// was ignored with rc 0, and `nodes=0`, `ranks=0`, `gpus_per_node=0` were
/// accepted, though `--help` says a value must agree with the files.
#[test]
fn assume_shape_values_must_agree_with_the_files() {
    let one = Input::Made("one_node_log", one_node_log);
    let two = Input::Made("two_node_log", two_node_log);
    let compile = |extra: &'static str| -> Vec<&'static str> {
        vec![
            "compile",
            "IN",
            "--assume",
            "default",
            "--assume",
            "coll=allreduce",
            "--assume",
            extra,
            "-o",
            "OUT",
        ]
    };
    let rows = vec![
        row(
            one,
            &compile("nodes=4"),
            2,
            "--assume nodes=4 disagrees with the file, which shows 2 ranks on 1 node",
        ),
        row(
            two,
            &compile("nodes=4"),
            2,
            "--assume nodes=4 disagrees with the file, which shows 8 ranks on 2 nodes, 4 per node",
        ),
        row(
            two,
            &compile("ranks=16"),
            2,
            "--assume ranks=16 disagrees with the file, which shows 8 ranks on 2 nodes",
        ),
        row(
            two,
            &compile("gpus_per_node=8"),
            2,
            "--assume gpus_per_node=8 disagrees with the file, which shows 8 ranks on 2 nodes, \
             4 per node",
        ),
        // Values that agree are fine.
        row(two, &compile("nodes=2"), 0, ""),
        row(one, &compile("gpus_per_node=2"), 0, ""),
    ];
    check(&rows);
    // A zero is refused before any file is read (as `nodes=two` is).
    for zero in ["nodes=0", "ranks=0", "gpus_per_node=0"] {
        let d = tempfile::tempdir().unwrap();
        let inp = Input::Made("two_node_log", two_node_log).make(d.path());
        let mut args: Vec<String> = compile(zero).iter().map(|a| a.to_string()).collect();
        args[1] = inp.display().to_string();
        args[9] = d.path().join("out").display().to_string();
        let ran = run_bounded(&args);
        let want = format!("--assume: {zero}: expected a count of at least 1");
        assert!(
            ran.rc == Some(2) && ran.stderr.contains(&want) && ran.stdout.is_empty(),
            "{zero}: rc {:?}, stderr {}",
            ran.rc,
            ran.stderr
        );
    }
}

/// `compile`'s sweeps were opened by a reader of their own, which told a
/// FIFO, a socket and a device apart by none of their names ("not a
/// regular file (a FIFO, socket or device)") and had no limit: they now go
/// through the bounded reader every other file goes through, with its
/// words for what a file is and its refusal before a byte is read.
#[test]
fn compile_reads_sweeps_through_the_bounded_reader() {
    let compile: &[&'static str] = &["compile", "IN", "-o", "OUT"];
    check(&[
        row(
            Input::DevZero,
            compile,
            2,
            "the file is a character device, not a regular file; not read",
        ),
        row(
            Input::Fifo,
            compile,
            2,
            "the file is a FIFO (named pipe), not a regular file; not read",
        ),
        row(
            Input::Sparse((1 << 40) + 1),
            compile,
            2,
            "over the 1 TiB limit for a sweep file; not read",
        ),
    ]);
}

/// Trace records whose figures cannot be true (issue 28: inspect printed a
/// geomean of `inf`, eval pooled ratios of inf, 0 or 3.5e23): inspect names
/// the record and refuses the file (non-finite sums the format's reader
/// refuses already; compile and eval: tests/traces.rs).
#[test]
fn trace_records_that_cannot_be_true_are_named_and_refused() {
    let mut rows = Vec::new();
    for (name, made) in [
        (
            "trace_mean_outside_min_max",
            trace_mean_outside_min_max as fn() -> Vec<u8>,
        ),
        ("trace_mean_below_its_minimum", trace_mean_below_its_minimum),
    ] {
        rows.push(row(
            Input::Made(name, made),
            &["inspect", "IN"],
            2,
            "record 0",
        ));
    }
    check(&rows);
}

/// One communicator, one record of NCCL's choice, 490 calls around 1 ms,
/// changed by `mutate`.
fn one_record_trace(mutate: fn(&mut dyncc_tables::trace::TraceRecord)) -> Vec<u8> {
    use dyncc_tables::trace::{encode, Source, TraceComm, TraceHead, TraceRecord};
    let (n, ln) = (490u64, (1e6f64).ln());
    let mut r = TraceRecord {
        comm: 0,
        coll: Coll::AllReduce,
        n_bytes: 1 << 20,
        setting: Setting::new(Algo::Ring, Proto::Simple).with_channels(8),
        source: Source::Nccl,
        count: n,
        sum_ln: n as f64 * ln,
        sum_ln2: n as f64 * ln * ln,
        min_ns: 950_000,
        max_ns: 1_050_000,
    };
    mutate(&mut r);
    let head = TraceHead {
        profiler_abi: 6,
        table_digest: Some(7),
        nccl_version: 23007,
        pid: 1,
        host: "node1",
        job_id: "42",
        ..Default::default()
    };
    let comm = TraceComm {
        comm_id: 1,
        n_nodes: 2,
        n_ranks: 16,
        rank: 0,
        name: "",
    };
    encode(&head, &[comm], &[r]).unwrap()
}

fn trace_mean_outside_min_max() -> Vec<u8> {
    one_record_trace(|r| r.sum_ln = 1e6)
}

fn trace_mean_below_its_minimum() -> Vec<u8> {
    one_record_trace(|r| r.sum_ln = r.count as f64 * 10.0)
}
