//! `dyncc inspect` as users run it: JSON fields, human summary, exit codes.

use std::path::Path;

use crate::support::cli::dyncc;

fn data(p: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(p)
        .display()
        .to_string()
}

#[test]
fn inspect_json_has_the_documented_fields() {
    let out = dyncc()
        .args([
            "inspect",
            "--json",
            &data("nccl-tests-2.18_all_reduce_ring_ll128_2x8xh100.json"),
        ])
        .args([
            &data("info_nvls_ignored_all_reduce.log"),
            &data("NCCL_ALGO=Tree"),
        ])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["files"], 3);
    assert_eq!(v["rows"], 25 + 3 + 7);
    assert_eq!(v["records"], 50 + 6 + 14);
    assert_eq!(v["collectives"]["allreduce"], 70);
    assert_eq!(v["algorithms"]["ring"], 50);
    assert_eq!(v["algorithms"]["nvls"], 6);
    // The Tree/Simple path names no channel count: NCCL chose it.
    assert_eq!(v["algorithms"]["tree"], 14);
    assert_eq!(v["protocols"]["ll128"], 50);
    assert_eq!(v["protocols"]["default"], 6);
    assert_eq!(v["protocols"]["simple"], 14);
    assert_eq!(v["channels"]["16"], 50);
    assert_eq!(v["channels"]["default"], 20);
    assert_eq!(v["nodes"], serde_json::json!([1, 2]));
    assert_eq!(v["knob_ignored"], 4);
    assert!(v["skipped"].as_array().unwrap().is_empty());
}

#[test]
fn inspect_assume_default_and_human_summary() {
    let out = dyncc()
        .args(["inspect", &data("NCCL_ALGO=Tree"), "--assume", "default"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(
        s.contains("1 sweep files, 7 rows (0 zero-size), 14 records"),
        "{s}"
    );
    assert!(s.contains("tree/simple"), "{s}");
}

#[test]
fn inspect_reports_skips_with_file_and_line() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("all_gather_output.dat.1");
    std::fs::write(
        &p,
        "launch failed on x3006c0s1b1n0: Couldn't allocate a port for PMI to use\n",
    )
    .unwrap();
    let q = d.path().join("t.csv");
    std::fs::write(&q, "collective,size_bytes,algorithm,protocol,channels,nodes,ranks,latency_us\nallreduce,8,ring,ll,-1,1,8,4.5\nallreduce,x,ring,ll,-1,1,8,4.5\n").unwrap();
    let out = dyncc()
        .args(["inspect", "--json"])
        .arg(d.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let sk = v["skipped"].as_array().unwrap();
    assert_eq!(sk.len(), 2);
    assert!(sk
        .iter()
        .any(|s| s["line"] == 3 && s["reason"].as_str().unwrap().contains("size_bytes")));
    assert!(sk
        .iter()
        .any(|s| s["reason"].as_str().unwrap().contains("launch failed")));
    assert_eq!(
        (v["rows"].as_u64(), v["records"].as_u64()),
        (Some(2), Some(1))
    );
}

#[test]
fn inspect_exits_non_zero_when_nothing_was_read() {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("notes.md"), "# nothing here\n").unwrap();
    let out = dyncc().arg("inspect").arg(d.path()).output().unwrap();
    assert_ne!(out.status.code(), Some(0));
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("no measurements found"), "{e}");
    let out = dyncc()
        .args(["inspect", "/nonexistent/x"])
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/x"));
    let out = dyncc()
        .args(["inspect", ".", "--assume", "nodez=3"])
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown key"));
}

/// A log cut at a row boundary (no `# Avg bus bandwidth` footer) was read as
/// complete: nothing said its largest sizes may be missing.
#[test]
fn inspect_notes_a_log_cut_before_its_footer() {
    let whole = data("NCCL_ALGO=Tree/NCCL_PROTO=Simple/k80_allreduce.log");
    let text = std::fs::read_to_string(&whole).unwrap();
    // Up to and including line 18 (1 GiB); the 2 GiB row and the footer are gone.
    let cut: String = text.lines().take(18).map(|l| format!("{l}\n")).collect();
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("k80_allreduce.log");
    std::fs::write(&p, cut).unwrap();
    let inspect = |f: &str| {
        let out = dyncc()
            .args(["inspect", f, "--assume", "default"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let s = inspect(&p.display().to_string());
    let note = format!(
        "{}:18: truncated: the table ends without nccl-tests' `# Avg bus bandwidth` footer",
        p.display()
    );
    assert!(s.contains(&note), "{s}");
    assert!(
        s.contains("its 6 rows are kept, but sizes after 1073741824 B (line 18) may be missing"),
        "{s}"
    );
    assert!(s.contains("1 sweep files, 6 rows"), "{s}");
    // The whole log has its footer: no note.
    let s = inspect(&whole);
    assert!(!s.contains("truncated"), "{s}");
}

/// `inspect` printed each unlabelled file's remedy twice (in "knobs per
/// file" and in "knobs or shape unknown"), suggested `-o table.dyncc` where
/// everything else says `.tbl`, and showed a shape nothing gave as an
/// "allreduce 0 nodes 0 ranks" row.
#[test]
fn inspect_says_each_remedy_once_names_tbl_and_no_zero_shape() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let unlabelled = [
        root.join("datasets/logs/alps-gh200_srun_N2_allreduce.out"),
        root.join("datasets/logs/k80-old-format_allreduce.log"),
    ];
    let out = dyncc().arg("inspect").args(&unlabelled).output().unwrap();
    let s = String::from_utf8_lossy(&out.stdout);
    assert_eq!(s.matches("Label it: `--assume default`").count(), 1, "{s}");
    let out = dyncc()
        .arg("inspect")
        .arg(&unlabelled[1])
        .args(["--assume", "default"])
        .output()
        .unwrap();
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(s.contains("-o cluster.tbl") && !s.contains(".dyncc"), "{s}");
    let elided = data(
        "real/nccl-tests-logs/coreweave-nccl-tests/a100-80gb_128gpu_allreduce_README@22df9b7_2022-07-05.log",
    );
    let out = dyncc()
        .args(["inspect", &elided, "--assume", "default"])
        .output()
        .unwrap();
    let s = String::from_utf8_lossy(&out.stdout);
    let row: Vec<&str> = s
        .lines()
        .find(|l| l.trim_start().starts_with("allreduce "))
        .unwrap_or_else(|| panic!("no coverage row: {s}"))
        .split_whitespace()
        .collect();
    assert_eq!(row[..4], ["allreduce", "?", "?", "unknown"], "{s}");
}

/// What `dyncc compile` of a shipped sweep writes to stderr when stderr is
/// a pseudo-terminal (`tty`) or a pipe, with progress shown at once (the
/// one-second wait set to 0, as a long read would reach it).
fn compile_stderr(tty: bool, quiet: bool) -> String {
    use std::io::Read as _;
    use std::os::fd::{FromRawFd as _, OwnedFd};
    let d = tempfile::tempdir().unwrap();
    let sweep =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("datasets/real/nvidia-dgx1v-allreduce.csv");
    let mut cmd = dyncc();
    cmd.args(["compile", sweep.to_str().unwrap(), "-o"])
        .arg(d.path().join("t.tbl"))
        .env(dyncc::progress::SHOW_AFTER_ENV, "0")
        .stdout(std::process::Stdio::null());
    if quiet {
        cmd.arg("--quiet");
    }
    if !tty {
        let out = cmd.stderr(std::process::Stdio::piped()).output().unwrap();
        assert!(out.status.success());
        return String::from_utf8_lossy(&out.stderr).into_owned();
    }
    let (mut master, mut slave) = (0, 0);
    let size = libc::winsize {
        ws_row: 24,
        ws_col: 100,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: openpty writes two descriptors into the ints given; the name
    // and termios pointers may be null; the winsize is read only.
    let rc = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            &size,
        )
    };
    assert_eq!(rc, 0, "openpty");
    // SAFETY: both descriptors were just opened by openpty and are owned
    // here alone.
    let (master, slave) = unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
    let mut child = cmd
        .stderr(std::process::Stdio::from(slave))
        .spawn()
        .unwrap();
    // The child holds the only other end now: reading ends (EIO) when it exits.
    drop(cmd);
    let mut master = std::fs::File::from(master);
    let mut out = Vec::new();
    let reader = std::thread::spawn(move || {
        let _ = master.read_to_end(&mut out);
        out
    });
    assert!(child.wait().unwrap().success());
    String::from_utf8_lossy(&reader.join().unwrap()).into_owned()
}

/// Progress of the files and bytes read is drawn on a terminal, and never
/// in a pipe (a log file, a CI job) or with `--quiet`.
#[test]
fn reading_progress_shows_on_a_terminal_only() {
    let tty = compile_stderr(true, false);
    assert!(
        tty.contains("reading file 1/1: nvidia-dgx1v-allreduce.csv"),
        "{tty:?}"
    );
    assert!(tty.contains("KiB"), "bytes read: {tty:?}");
    let pipe = compile_stderr(false, false);
    assert!(!pipe.contains("reading"), "{pipe:?}");
    assert!(!pipe.contains('\x1b'), "{pipe:?}");
    let quiet = compile_stderr(true, true);
    assert!(!quiet.contains("reading"), "{quiet:?}");
}
