//! The plugin under stress and under sanitizers: tests/c/stress.c (many
//! communicators initialised at once on many threads, calls racing with
//! init/finalize, the table file deleted and replaced mid-job, dlclose/dlopen
//! cycles) natively and under valgrind, and both C harnesses (harness.c and
//! stress.c) built with clang `-fsanitize=address,undefined`.
//!
//! The Rust cdylib itself is not instrumented (that needs nightly); ASan and
//! UBSan check the harness side, where NCCL's cost tables, channel counts and
//! context pointers live, so an out-of-bounds or stray write by the plugin into
//! them is caught, and LeakSanitizer sees every allocation (the plugin uses the
//! system allocator). Without clang these tests fail (`apt-get install clang`).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use dyncc_tables::{
    Algo, Basis, Coll, ContextSpec, Decision, Proto, RegBuff, Rule, Setting, TableBuilder,
};

use crate::plugin_c::{
    check_harness_output, compile_c, harness, harness_command, harness_table, plugin_lib, run,
    HARNESS_LINK_FLAGS,
};
use crate::support::cli::dyncc_output;
use crate::support::tools::{require_c_compiler, require_tool};

/// Table B of stress.c: allreduce, nodes 1-4, ppn 1-8, Ring/Simple at every
/// size; nothing else. Differs from the harness table in digest and decisions.
fn table_b() -> Vec<u8> {
    let mut b = TableBuilder::new();
    b.meta("platform", "stress-b")
        .meta("command", "tests/stress_c.rs");
    let spec = ContextSpec {
        coll: Coll::AllReduce,
        nodes: (1, 4),
        ppn: (1, 8),
        max_pipe_ops: 0,
        reg_buff: RegBuff::Any,
    };
    let rule = Rule {
        last_bucket: 255,
        decision: Decision::Force(Setting::new(Algo::Ring, Proto::Simple)),
        basis: Basis::Measured,
        gain: 1.3,
    };
    b.context(spec, &[rule]).unwrap();
    b.build().unwrap()
}

struct Stress {
    dir: tempfile::TempDir,
    b: PathBuf,
}

impl Stress {
    fn new() -> Stress {
        let dir = tempfile::tempdir().unwrap();
        let b = dir.path().join("b.tbl");
        std::fs::write(&b, table_b()).unwrap();
        Stress { dir, b }
    }

    /// Compiles stress.c with `cc` and `flags` into the scratch dir.
    fn build(&self, cc: &str, flags: &[&str], name: &str) -> PathBuf {
        let exe = self.dir.path().join(name);
        let flags: Vec<&str> = ["-pthread"].iter().chain(flags).copied().collect();
        compile_c(cc, &flags, "stress.c", &exe, &["-ldl"]);
        exe
    }

    /// Runs `exe` (behind `wrapper`) on a fresh copy of the harness table
    /// (stress.c deletes and replaces it).
    fn run(&self, exe: &Path, wrapper: &[&str], scale: u32, env: &[(&str, &str)]) -> Output {
        let table = self
            .dir
            .path()
            .join(format!("a-{scale}-{}.tbl", wrapper.len()));
        std::fs::write(&table, harness_table::harness_table()).unwrap();
        let mut cmd = match wrapper.split_first() {
            Some((w, args)) => {
                let mut c = Command::new(w);
                c.args(args).arg(exe);
                c
            }
            None => Command::new(exe),
        };
        cmd.env("DYNCC_STRESS_LIB", plugin_lib())
            .env("DYNCC_STRESS_TABLE", &table)
            .env("DYNCC_STRESS_TABLE_B", &self.b)
            .env("DYNCC_STRESS_SCALE", scale.to_string())
            .env_remove("DYNCC_TABLE")
            .env_remove("DYNCC_STRICT")
            .envs(env.iter().copied());
        cmd.output().unwrap()
    }
}

/// Asserts the stress run passed and did real work; returns its stdout.
fn check_stress(what: &str, out: &Output, min_calls: u64) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    let summary = stdout
        .lines()
        .find(|l| l.starts_with("stress: ") && l.contains(" passed, "));
    assert!(
        summary.is_some_and(|s| s.ends_with(" 0 failed")),
        "{what}: {summary:?}\n{stderr}"
    );
    let figures = stdout
        .lines()
        .find(|l| l.starts_with("stress figures:"))
        .unwrap_or("");
    let calls: u64 = figures
        .split(';')
        .find(|p| p.contains("getCollInfo calls"))
        .and_then(|p| p.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(
        calls >= min_calls,
        "{what}: only {calls} calls checked: {figures}"
    );
    eprintln!("{what}:\n{stdout}");
    stdout
}

#[test]
fn stress_harness_many_communicators_races_file_changes_reloads() {
    let cc = require_c_compiler();
    let s = Stress::new();
    let exe = s.build(cc, &["-O1"], "stress");
    let out = s.run(&exe, &[], 1, &[]);
    let stdout = check_stress("the stress harness", &out, 800_000);
    // 512 communicators initialised at once read the file once.
    assert!(
        stdout.contains("16 threads x 32 communicators alive at once, 1 file read(s)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("file deleted: 64 new communicators still init"),
        "{stdout}"
    );
    assert!(
        stdout.contains("the next init loads the new file"),
        "{stdout}"
    );
    assert!(stdout.contains("50 dlclose/dlopen cycles"), "{stdout}");
}

#[test]
fn stress_harness_is_clean_under_valgrind() {
    require_tool("valgrind", "valgrind");
    let cc = require_c_compiler();
    let s = Stress::new();
    let exe = s.build(cc, &["-O1"], "stress-vg");
    // A tenth of the iterations (valgrind runs code ~50x slower); the
    // 512-communicator init and the file changes run in full.
    let out = s.run(
        &exe,
        &[
            "valgrind",
            "--error-exitcode=99",
            "--leak-check=full",
            "--errors-for-leak-kinds=definite,indirect,possible",
            "--quiet",
        ],
        10,
        &[],
    );
    check_stress("the stress harness under valgrind", &out, 80_000);
}

/// Sanitizer reports that must fail the run even if the exit code were 0.
fn assert_no_sanitizer_report(what: &str, out: &Output) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    for needle in [
        "ERROR: AddressSanitizer",
        "ERROR: LeakSanitizer",
        "runtime error:",
        "SUMMARY: ",
    ] {
        assert!(
            !stderr.contains(needle),
            "{what}: sanitizer report ({needle}):\n{stderr}"
        );
    }
}

const SAN_FLAGS: [&str; 5] = [
    "-O1",
    "-fsanitize=address,undefined",
    "-fno-sanitize-recover=all",
    "-fno-omit-frame-pointer",
    "-fno-common",
];
const SAN_ENV: [(&str, &str); 2] = [
    (
        "ASAN_OPTIONS",
        "detect_leaks=1:halt_on_error=1:detect_stack_use_after_return=1:strict_string_checks=1",
    ),
    ("UBSAN_OPTIONS", "halt_on_error=1:print_stacktrace=1"),
];

#[test]
fn c_harnesses_are_clean_under_asan_and_ubsan() {
    require_tool("clang", "clang");
    // harness.c: every ABI version, bad tables, threads, reloads.
    let mut h = harness();
    let exe = h.exe.with_file_name("harness-asan");
    let flags: Vec<&str> = ["-pthread"].iter().chain(&SAN_FLAGS).copied().collect();
    compile_c("clang", &flags, "harness.c", &exe, &HARNESS_LINK_FLAGS);
    h.exe = exe;
    let out = harness_command(&h, &[]).envs(SAN_ENV).output().unwrap();
    check_harness_output("the C harness under ASan/UBSan", &out);
    assert_no_sanitizer_report("the C harness under ASan/UBSan", &out);

    // stress.c, a quarter of the iterations (ASan slows the harness ~2-3x).
    let s = Stress::new();
    let exe = s.build("clang", &SAN_FLAGS, "stress-asan");
    let out = s.run(&exe, &[], 4, &SAN_ENV);
    check_stress("the stress harness under ASan/UBSan", &out, 200_000);
    assert_no_sanitizer_report("the stress harness under ASan/UBSan", &out);
}

/// The sanitizers are live: an out-of-bounds write in a harness-built
/// program is reported and fails the run (so a clean run means something).
#[test]
fn asan_catches_an_out_of_bounds_write_in_this_setup() {
    require_tool("clang", "clang");
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("oob.c");
    std::fs::write(
        &src,
        "#include <stdlib.h>\nint main(int c, char **v) { (void)v; float *t = malloc(21 * sizeof *t);\n\
         t[20 + c] = 0.0f; /* one past the end */ free(t); return 0; }\n",
    )
    .unwrap();
    let exe = dir.path().join("oob");
    run(Command::new("clang")
        .args(SAN_FLAGS)
        .arg(&src)
        .arg("-o")
        .arg(&exe));
    let out = Command::new(&exe).envs(SAN_ENV).output().unwrap();
    assert!(
        !out.status.success(),
        "ASan did not fail an out-of-bounds write"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("heap-buffer-overflow"));
}

use harness_table::edited;

/// Runs tests/c/initlog.c with `table` (None: DYNCC_TABLE unset) and
/// `strict` (None: DYNCC_STRICT unset); returns what it printed.
fn init_log(exe: &Path, table: Option<&Path>, strict: Option<&str>) -> String {
    init_log_on(exe, table, strict, None)
}

/// The communicator's shape for [`init_log_on`] (initlog.c's default: 8
/// ranks on 1 node).
struct Shape {
    ranks: u32,
    nodes: u32,
}

/// [`init_log`] for a communicator of `shape`.
fn init_log_on(
    exe: &Path,
    table: Option<&Path>,
    strict: Option<&str>,
    shape: Option<Shape>,
) -> String {
    let mut cmd = Command::new(exe);
    cmd.env("DYNCC_INITLOG_LIB", plugin_lib())
        .env_remove("DYNCC_TABLE")
        .env_remove("DYNCC_STRICT")
        .env_remove("DYNCC_INIT_RANKS")
        .env_remove("DYNCC_INIT_NODES");
    if let Some(s) = shape {
        cmd.env("DYNCC_INIT_RANKS", s.ranks.to_string())
            .env("DYNCC_INIT_NODES", s.nodes.to_string());
    }
    if let Some(t) = table {
        cmd.env("DYNCC_TABLE", t);
    }
    if let Some(s) = strict {
        cmd.env("DYNCC_STRICT", s);
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "initlog failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Every statement of docs/src/explanation/failure-semantics.md, run: what one rank's init
/// logs and returns for each kind of table, strict and DYNCC_STRICT=0.
/// (`cargo test failure_semantics -- --nocapture` prints the real lines.)
#[test]
fn failure_semantics_of_init_for_every_kind_of_bad_table() {
    let cc = require_c_compiler();
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("initlog");
    compile_c(cc, &["-O1"], "initlog.c", &exe, &["-ldl"]);
    let file = |name: &str, bytes: &[u8]| {
        let p = dir.path().join(name);
        std::fs::write(&p, bytes).unwrap();
        p
    };
    let good = file("cluster.tbl", &harness_table::harness_table());
    let other = file("other.tbl", &table_b());
    let corrupt = file("corrupt.tbl", &harness_table::corrupt_table());
    let newer = file("newer.tbl", &edited(8, &2u16.to_le_bytes()));
    let layout = file("layout.tbl", &edited(24, &2u32.to_le_bytes()));
    let garbage = file("garbage.tbl", b"not a table at all\n");
    let missing = dir.path().join("missing.tbl");
    let fifo = dir.path().join("table.fifo");
    run(Command::new("mkfifo").arg(&fifo));
    let sparse = dir.path().join("sparse.tbl");
    std::fs::File::create(&sparse)
        .unwrap()
        .set_len(10_000_000_000)
        .unwrap();
    let dev_zero = PathBuf::from("/dev/zero");
    let show = |what: &str, out: &str| eprintln!("--- {what}:\n{out}");
    let digest = |out: &str| {
        let i = out.find(" digest ").expect("INFO line has the digest");
        out[i + 8..i + 24].to_string()
    };

    // No table configured: leave NCCL alone, say so at INFO.
    let out = init_log(&exe, None, None);
    show("DYNCC_TABLE unset", &out);
    assert!(
        out.contains("INFO dyncc: DYNCC_TABLE is not set; leaving NCCL's own tuning alone"),
        "{out}"
    );
    assert!(
        out.contains("rc 0 ctx null") && out.contains("answer cell -1 nChannels 0"),
        "{out}"
    );

    // A valid table: one INFO line with path, digest, platform, coverage.
    let out = init_log(&exe, Some(&good), None);
    show("valid table", &out);
    assert!(
        out.contains("rc 0 ctx set") && out.contains("answer cell 4 nChannels 4"),
        "{out}"
    );
    assert!(!out.contains("WARN"), "{out}");
    let d_good = digest(&out);
    // A rank with another table logs another digest: the mismatch is visible.
    let out = init_log(&exe, Some(&other), None);
    show("a different table on another rank", &out);
    assert_ne!(
        digest(&out),
        d_good,
        "different tables must log different digests"
    );
    assert!(out.contains("answer cell 5 nChannels 0"), "{out}");

    // Each bad table: strict fails init with a WARN naming path and cause;
    // DYNCC_STRICT=0 warns and leaves NCCL alone.
    let cases: [(&str, &Path, i32, &str); 8] = [
        ("missing file", &missing, 2, "cannot read DYNCC_TABLE="),
        (
            "corrupt (checksum)",
            &corrupt,
            5,
            "table is corrupt: CRC-32 of the body is",
        ),
        (
            "newer format version",
            &newer,
            5,
            "table format version 2 is newer than this reader",
        ),
        (
            "other NCCL enum layout",
            &layout,
            5,
            "built for NCCL enum layout 2",
        ),
        ("not a table", &garbage, 5, "invalid table DYNCC_TABLE="),
        (
            "a FIFO (init used to hang)",
            &fifo,
            5,
            "it is a FIFO (named pipe), not a regular file",
        ),
        (
            "/dev/zero (init used to read until memory ran out)",
            &dev_zero,
            5,
            "it is a character device, not a regular file",
        ),
        (
            "a 10 GB sparse file (init used to read it all)",
            &sparse,
            5,
            "larger than any dyncc table can be",
        ),
    ];
    for (what, path, rc, cause) in cases {
        let out = init_log(&exe, Some(path), None);
        show(&format!("{what}, strict (default)"), &out);
        assert!(out.contains(&format!("rc {rc} ctx null")), "{what}: {out}");
        let warn = out
            .lines()
            .find(|l| l.starts_with("WARN "))
            .unwrap_or_else(|| panic!("{what}: no WARN: {out}"));
        assert!(
            warn.contains(cause) && warn.contains(&path.display().to_string()),
            "{what}: {warn}"
        );
        assert!(
            warn.contains("failing this communicator's init") && warn.contains("DYNCC_STRICT=0"),
            "{warn}"
        );
        for off in ["0", "false", "no", "off", "OFF"] {
            let out = init_log(&exe, Some(path), Some(off));
            if off == "0" {
                show(&format!("{what}, DYNCC_STRICT=0"), &out);
            }
            assert!(
                out.contains("rc 0 ctx null") && out.contains("answer cell -1 nChannels 0"),
                "{what}: {out}"
            );
            let warn = out.lines().find(|l| l.starts_with("WARN ")).unwrap_or("");
            assert!(
                warn.contains(cause)
                    && warn.contains("DYNCC_STRICT=0, so leaving NCCL's own tuning alone"),
                "{warn}"
            );
        }
        // Anything else keeps strict on.
        let out = init_log(&exe, Some(path), Some("1"));
        assert!(
            out.contains(&format!("rc {rc} ctx null")),
            "DYNCC_STRICT=1 is strict: {out}"
        );
    }
}

/// A node count the DGX-1V sweep measured where nothing beat NCCL's default
/// (8 nodes x 8 ranks) had no context, so the plugin's init line called the
/// shape `allreduce=not-covered`, as if never swept. It is covered now, by a
/// context that leaves NCCL alone at every size.
#[test]
fn init_line_calls_a_measured_node_count_covered() {
    let cc = require_c_compiler();
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("initlog");
    compile_c(cc, &["-O1"], "initlog.c", &exe, &["-ldl"]);
    let data =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("datasets/real/nvidia-dgx1v-allreduce.csv");
    let tbl = dir.path().join("dgx1v.tbl");
    let o = dyncc_output(&[
        "compile",
        data.to_str().unwrap(),
        "-o",
        tbl.to_str().unwrap(),
    ]);
    assert!(
        o.status.success(),
        "compile failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let shape = Shape {
        ranks: 64,
        nodes: 8,
    };
    let log = init_log_on(&exe, Some(&tbl), None, Some(shape));
    assert!(
        log.contains("nRanks 64 nNodes 8")
            && log.contains(" allreduce=#")
            && !log.contains("not-covered"),
        "{log}"
    );
    // Covered, and still NCCL's choice: allreduce of 1 MiB is left alone.
    assert!(log.contains("answer cell -1 "), "{log}");
}
