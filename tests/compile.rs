//! `dyncc compile` and `dyncc eval` end to end on the shipped datasets:
//! the decision-quality bars of issue 5, the atomic write, and errors.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::cli::{dyncc, root};

fn real(name: &str) -> PathBuf {
    root().join("datasets/real").join(name)
}

fn run_json(cmd: &mut Command) -> serde_json::Value {
    let out = cmd.output().expect("run dyncc");
    assert!(
        out.status.success(),
        "dyncc failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    serde_json::from_slice(&out.stdout).expect("JSON on stdout")
}

fn compile(input: &Path, out: &Path) -> serde_json::Value {
    run_json(
        dyncc()
            .arg("compile")
            .arg(input)
            .arg("-o")
            .arg(out)
            .arg("--json"),
    )
}

/// `eval` of the DGX-1V table on the DGX-2V sweep (another platform, 16
/// ranks per node where the table covers 8) scored 0 % with no word that
/// they do not match: it warns on stderr, its exit status unchanged.
#[test]
fn eval_warns_when_the_table_is_of_another_machine() {
    let dir = tempfile::tempdir().unwrap();
    let tbl = dir.path().join("dgx1v.tbl");
    compile(&real("nvidia-dgx1v-allreduce.csv"), &tbl);
    let eval = |data: &str| {
        dyncc()
            .arg("eval")
            .arg(&tbl)
            .arg(real(data))
            .output()
            .unwrap()
    };
    let other = eval("nvidia-dgx2v-allreduce.csv");
    let err = String::from_utf8_lossy(&other.stderr);
    assert_eq!(other.status.code(), Some(0), "{err}");
    assert!(
        err.contains(
            "the table was compiled for platform DGX-1V, the measurements are of platform DGX-2V"
        ),
        "{err}"
    );
    assert!(
        err.contains("no context of the table covers 16 ranks per node")
            && err.contains("(it covers 8)"),
        "{err}"
    );
    let same = eval("nvidia-dgx1v-allreduce.csv");
    let err = String::from_utf8_lossy(&same.stderr);
    assert_eq!(same.status.code(), Some(0), "{err}");
    assert!(!err.contains("warning"), "{err}");
}

#[test]
fn real_v100_sweeps_meet_the_in_sample_bars() {
    // (sweep, captured at least) -- where the tables stood before the
    // unmeasured-node-count work, which must not cost in-sample quality.
    for (name, bar) in [
        ("nvidia-dgx1v-allreduce.csv", 0.66),
        ("nvidia-dgx2v-allreduce.csv", 0.93),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let tbl = dir.path().join("t.tbl");
        let report = compile(&real(name), &tbl);
        assert!(report["table"]["bytes"].as_u64().unwrap() <= 64 * 1024);
        let s = run_json(dyncc().arg("eval").arg(&tbl).arg(real(name)).arg("--json"));
        let captured = s["captured"].as_f64().unwrap();
        assert!(captured >= bar, "{name}: captured {captured}");
        assert_eq!(s["regressions"].as_u64(), Some(0), "{name}: {s}");
        assert!(s["table"]["geomean"].as_f64() < s["default"]["geomean"].as_f64());
    }
}

/// `dyncc eval --cv all --json` on a shipped sweep: (mode -> score).
fn cross_validate(name: &str) -> std::collections::BTreeMap<String, serde_json::Value> {
    let v = run_json(
        dyncc()
            .args(["eval", "--cv", "all", "--json", "--cells"])
            .arg(real(name)),
    );
    v["scenarios"]
        .as_array()
        .expect("one scenario per mode")
        .iter()
        .map(|s| (s["cv"].as_str().unwrap().to_string(), s.clone()))
        .collect()
}

#[test]
fn real_v100_sweeps_meet_the_cross_validation_bars() {
    // Issue 10's bars: held-out node counts (each inner one, every other
    // one, the larger half) are scored through the same lookup the plugin
    // runs; no scenario may make more than 2 % of cells 5 % slower than
    // NCCL's default, and none may be slower than the default overall.
    let bars = [
        ("nvidia-dgx2v-allreduce.csv", "nodes", 0.75),
        ("nvidia-dgx2v-allreduce.csv", "upward", 0.50),
        ("nvidia-dgx2v-allreduce.csv", "sparse", 0.50),
        ("nvidia-dgx1v-allreduce.csv", "nodes", 0.05),
        // Two multi-node counts kept (2 and 4, or 4 and 16): gains are
        // carried up to the larger counts (0 % when that needed three).
        ("nvidia-dgx1v-allreduce.csv", "upward", 0.05),
        ("nvidia-dgx1v-allreduce.csv", "sparse", 0.10),
    ];
    for name in ["nvidia-dgx1v-allreduce.csv", "nvidia-dgx2v-allreduce.csv"] {
        let scores = cross_validate(name);
        assert_eq!(scores.len(), 3, "{name}: {scores:?}");
        for (mode, s) in &scores {
            let t = s["table"]["geomean"].as_f64().unwrap();
            let d = s["default"]["geomean"].as_f64().unwrap();
            assert!(
                t <= d + 1e-9,
                "{name} --cv {mode}: table {t} slower than default {d}"
            );
            let r = s["regression_share"].as_f64().unwrap();
            assert!(r <= 0.02, "{name} --cv {mode}: regressions {r}");
            // What the kept counts showed bounds what the table read off
            // them could capture.
            let c = s["captured"].as_f64().unwrap();
            let reach = s["reachable"].as_f64().unwrap();
            assert!(
                c <= reach + 1e-9 && reach <= 1.0,
                "{name} --cv {mode}: captured {c}, reachable {reach}"
            );
            // ... and so, cell by cell: a table forces only what the
            // readings show.
            for cell in s["scored"].as_array().unwrap() {
                let gain = cell["default"].as_f64().unwrap() / cell["table"].as_f64().unwrap();
                let visible = cell["visible"].as_f64().unwrap();
                assert!(
                    gain <= 1.0 || gain <= visible * (1.0 + 1e-9),
                    "{name}: {cell}"
                );
            }
            for (n, m, bar) in bars {
                if n == name && m == mode {
                    let c = s["captured"].as_f64().unwrap();
                    assert!(c >= bar, "{name} --cv {mode}: captured {c} < {bar}");
                }
            }
        }
    }
}

#[test]
fn explain_shows_what_the_plugin_does_where_its_tree_differs() {
    let dir = tempfile::tempdir().unwrap();
    let tbl = dir.path().join("t.tbl");
    let report = compile(&real("nvidia-dgx1v-allreduce.csv"), &tbl);
    // The fidelity compile reports covers every shape the plugin answers,
    // unmeasured node counts included (not only the measured grid).
    let fid = &report["trees"]["allreduce"];
    assert!(fid["points"].as_u64().unwrap() > 180 * 10, "{fid}");
    let v = run_json(dyncc().arg("explain").arg(&tbl).arg("--json"));
    let ag = &v["agreement"][0];
    let (shapes, disagree) = (
        ag["shapes"].as_u64().unwrap(),
        ag["disagree"].as_u64().unwrap(),
    );
    assert!(shapes > 10_000, "{ag}");
    assert!(
        disagree * 20 < shapes,
        "the tree should reproduce most shapes: {ag}"
    );
    let regions = ag["regions"].as_array().unwrap();
    // The figure counts the shapes the table decides; the regions are every
    // disagreement, beyond the sweep included.
    assert!(
        disagree == 0 || regions.iter().any(|r| r["beyond"].is_null()),
        "{ag}"
    );
    // Every region explain lists says what the plugin does there: query
    // (the plugin's own lookup) agrees, and the tree says otherwise.
    for r in regions.iter().take(25) {
        let q = run_json(
            dyncc()
                .arg("query")
                .arg(&tbl)
                .args(["--coll", "allreduce", "--json"])
                .args(["--bytes", &r["from_bytes"].to_string()])
                .args(["--nodes", &r["nodes"].to_string()])
                .args(["--ranks", &r["ranks"].to_string()]),
        );
        let plugin = r["plugin"].as_str().unwrap();
        let said = q["decision"].as_str().unwrap();
        assert!(
            said == plugin || (plugin == "NCCL's choice" && said.contains("NCCL")),
            "explain says the plugin does {plugin}, query says {said}: {r}"
        );
        assert_eq!(q["tree"]["agrees"], false, "{q}");
    }
    // The text form says how often the tree holds, and lists the rest.
    let out = dyncc().arg("explain").arg(&tbl).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("shapes the table decides"), "{text}");
}

#[test]
fn simulated_sweep_lands_near_the_true_optimum() {
    let dir = tempfile::tempdir().unwrap();
    let sweep = dir.path().join("sweep");
    let out = dyncc()
        .args([
            "simulate",
            "--nodes",
            "1,2,4,8",
            "--colls",
            "allreduce,allgather",
            "--repeats",
            "2",
        ])
        .args(["--channels", "auto,8", "--seed", "3", "-o"])
        .arg(&sweep)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tbl = dir.path().join("sim.tbl");
    compile(&sweep, &tbl);
    let s = run_json(
        dyncc()
            .arg("eval")
            .arg(&tbl)
            .arg("--truth")
            .arg(sweep.join("truth.csv"))
            .arg("--json"),
    );
    let g = s["table"]["geomean"].as_f64().unwrap();
    assert!(
        g <= 1.02,
        "table is {g}x the true optimum on geometric mean"
    );
    assert_eq!(s["regressions"].as_u64(), Some(0), "{s}");
}

#[test]
fn a_failed_compile_leaves_the_previous_table_intact() {
    let dir = tempfile::tempdir().unwrap();
    let tbl = dir.path().join("cluster.tbl");
    std::fs::write(&tbl, b"previous table").unwrap();
    let bad = dir.path().join("bad.csv");
    std::fs::write(
        &bad,
        "collective,size_bytes,algorithm,protocol,channels,nodes,ranks,pipeOps,regBuff,cost_metric,bandwidth_gbps,latency_us\n\
         allreduce,8,ring,ll,-1,1,8,1,0,12.7,0.001,not-a-number\n",
    )
    .unwrap();
    let out = dyncc()
        .arg("compile")
        .arg(&bad)
        .arg("-o")
        .arg(&tbl)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bad.csv:2"),
        "error names file and line: {err}"
    );
    assert_eq!(std::fs::read(&tbl).unwrap(), b"previous table");
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left.len(), 2, "no temporary files left: {left:?}");
}

/// `dyncc compile` under a file-size limit of `limit` bytes (RLIMIT_FSIZE),
/// run in `dir`: writing the table past the limit fails for real, at the
/// write. With `ignore_sigxfsz` the write returns EFBIG (a full disk, as the
/// program sees it); without, the kernel kills the process with SIGXFSZ in
/// the middle of writing the table.
fn compile_with_file_size_limit(
    dir: &Path,
    input: &Path,
    out: &Path,
    limit: u64,
    ignore_sigxfsz: bool,
) -> std::process::Output {
    use std::os::unix::process::CommandExt;
    let mut cmd = dyncc();
    cmd.current_dir(dir)
        .arg("compile")
        .arg(input)
        .arg("-o")
        .arg(out);
    // SAFETY: the closure runs in the forked child before exec and calls
    // only async-signal-safe functions (setrlimit, signal).
    unsafe {
        cmd.pre_exec(move || {
            let fsize = libc::rlimit {
                rlim_cur: limit,
                rlim_max: limit,
            };
            let none = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &fsize) != 0
                || libc::setrlimit(libc::RLIMIT_CORE, &none) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            if ignore_sigxfsz {
                libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            }
            Ok(())
        })
    };
    cmd.output().unwrap()
}

/// Files in `dir` other than `keep`, sorted.
fn others(dir: &Path, keep: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !keep.contains(&n.as_str()))
        .collect();
    v.sort();
    v
}

/// The write of the new table fails for real (the file-size limit: EFBIG,
/// as on a full disk) with a previous table in place: the previous table is
/// intact and no temporary file is left.
#[test]
fn a_compile_whose_write_fails_leaves_the_previous_table_intact() {
    let dir = tempfile::tempdir().unwrap();
    let tbl = dir.path().join("cluster.tbl");
    compile(&real("nvidia-dgx1v-allreduce.csv"), &tbl);
    let previous = std::fs::read(&tbl).unwrap();
    dyncc_tables::Table::from_bytes(&previous).unwrap();
    let limit = 512;
    assert!(previous.len() as u64 > limit);
    let out = compile_with_file_size_limit(
        dir.path(),
        &real("nvidia-dgx2v-allreduce.csv"),
        &tbl,
        limit,
        true,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("cannot write") && err.contains("cluster.tbl is unchanged"),
        "{err}"
    );
    assert!(
        std::fs::read(&tbl).unwrap() == previous,
        "the previous table was changed"
    );
    assert_eq!(others(dir.path(), &["cluster.tbl"]), Vec::<String>::new());
}

/// The process is killed in the middle of writing the new table (SIGXFSZ
/// from the file-size limit lands inside the write itself, deterministically,
/// not at a guessed moment): the previous table is intact; the only trace is
/// the partial temporary file beside it, never the target, and the next
/// compile into the directory removes it.
#[test]
fn a_compile_killed_while_writing_leaves_the_previous_table_intact() {
    use std::os::unix::process::ExitStatusExt;
    let dir = tempfile::tempdir().unwrap();
    let tbl = dir.path().join("cluster.tbl");
    compile(&real("nvidia-dgx1v-allreduce.csv"), &tbl);
    let previous = std::fs::read(&tbl).unwrap();
    let out = compile_with_file_size_limit(
        dir.path(),
        &real("nvidia-dgx2v-allreduce.csv"),
        &tbl,
        512,
        false,
    );
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGXFSZ),
        "killed while writing: {:?} {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        std::fs::read(&tbl).unwrap() == previous,
        "the previous table was changed"
    );
    let left = others(dir.path(), &["cluster.tbl"]);
    assert!(
        left.len() == 1 && left[0].starts_with(".dyncc-") && left[0].ends_with(".tmp"),
        "{left:?}"
    );
    assert_eq!(
        std::fs::metadata(dir.path().join(&left[0])).unwrap().len(),
        512,
        "the kill landed mid-write"
    );
    // The writer is dead: the next write into the directory removes its
    // temporary file.
    compile(&real("nvidia-dgx2v-allreduce.csv"), &tbl);
    assert_eq!(others(dir.path(), &["cluster.tbl"]), Vec::<String>::new());
}

/// `compile s.csv -o s.csv` replaced the sweep with the table: an output
/// that is an input (by name, by hard link, or as a file read from an input
/// directory) is refused, and the input is untouched.
#[test]
fn compile_refuses_to_write_its_output_over_an_input() {
    let dir = tempfile::tempdir().unwrap();
    let sweeps = dir.path().join("sweeps");
    std::fs::create_dir(&sweeps).unwrap();
    let s = sweeps.join("s.csv");
    std::fs::copy(real("nvidia-dgx1v-allreduce.csv"), &s).unwrap();
    let original = std::fs::read(&s).unwrap();
    let link = dir.path().join("same-file.csv");
    std::fs::hard_link(&s, &link).unwrap();
    for (input, output) in [(&s, &s), (&s, &link), (&sweeps, &s)] {
        let out = dyncc()
            .arg("compile")
            .arg(input)
            .arg("-o")
            .arg(output)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(
            err.contains("is an input of this command") && err.contains(".tbl"),
            "{input:?} -o {output:?}: {err}"
        );
        assert_eq!(std::fs::read(&s).unwrap(), original);
    }
    // A table next to the sweep, in the directory compiled, is fine.
    compile(&sweeps, &sweeps.join("s.tbl"));
    compile(&sweeps, &sweeps.join("s.tbl"));
}

/// As root, `-o` onto a device node turned it into a regular file: only a
/// regular file is ever replaced (a FIFO stands for any special file here;
/// a symbolic link is not followed or replaced either).
#[test]
fn compile_replaces_only_a_regular_file() {
    use std::os::unix::fs::FileTypeExt;
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("out.tbl");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo with a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    let link = dir.path().join("link.tbl");
    std::os::unix::fs::symlink("elsewhere.tbl", &link).unwrap();
    for target in [&fifo, &link] {
        let out = dyncc()
            .arg("compile")
            .arg(real("nvidia-dgx1v-allreduce.csv"))
            .arg("-o")
            .arg(target)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains("only ever replaces regular files"), "{err}");
    }
    assert!(std::fs::symlink_metadata(&fifo)
        .unwrap()
        .file_type()
        .is_fifo());
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    // Every other command writes through the same rule.
    let tbl = dir.path().join("t.tbl");
    compile(&real("nvidia-dgx1v-allreduce.csv"), &tbl);
    let out = dyncc()
        .arg("plot")
        .arg(&tbl)
        .arg("-o")
        .arg(&fifo)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(std::fs::symlink_metadata(&fifo)
        .unwrap()
        .file_type()
        .is_fifo());
}

/// `--dry-run` reads, checks and compiles everything, prints the report,
/// and writes nothing; it refuses what a real run would refuse.
#[test]
fn compile_dry_run_checks_everything_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let tbl = dir.path().join("new.tbl");
    let out = dyncc()
        .arg("compile")
        .arg(real("nvidia-dgx1v-allreduce.csv"))
        .args(["--dry-run", "--json", "-o"])
        .arg(&tbl)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(report["table"]["path"].is_null(), "{report}");
    assert!(err.contains("dry run: nothing written"), "{err}");
    assert!(!tbl.exists());
    assert_eq!(others(dir.path(), &[]), Vec::<String>::new());
    // The same checks as a real run.
    let s = dir.path().join("s.csv");
    std::fs::copy(real("nvidia-dgx1v-allreduce.csv"), &s).unwrap();
    let out = dyncc()
        .arg("compile")
        .arg(&s)
        .args(["--dry-run", "-o"])
        .arg(&s)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let bad = dir.path().join("bad.csv");
    std::fs::write(
        &bad,
        "collective,size_bytes,algorithm,protocol,channels,nodes,ranks,pipeOps,regBuff,cost_metric,bandwidth_gbps,latency_us\n\
         allreduce,8,ring,ll,-1,1,8,1,0,12.7,0.001,not-a-number\n",
    )
    .unwrap();
    let out = dyncc()
        .arg("compile")
        .arg(&bad)
        .args(["--dry-run", "-o"])
        .arg(&tbl)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("bad.csv:2"));
}

#[test]
fn mixed_platforms_get_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let out = dyncc()
        .arg("compile")
        .arg(root().join("datasets/real"))
        .arg("-o")
        .arg(dir.path().join("t.tbl"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("DGX-1V") && err.contains("DGX-2V") && err.contains("--platform"),
        "{err}"
    );
    assert!(!dir.path().join("t.tbl").exists());
    // ... and picking one works.
    let tbl = dir.path().join("t.tbl");
    run_json(
        dyncc()
            .arg("compile")
            .arg(root().join("datasets/real"))
            .args(["--platform", "DGX-2V", "--json", "-o"])
            .arg(&tbl),
    );
    assert!(tbl.exists());
}

#[test]
fn compile_help_teaches_with_an_example() {
    let out = dyncc().args(["compile", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(
        help.contains("Example") && help.contains("--margin") && help.contains("--extrapolate")
    );
}

#[test]
fn runs_off_their_trend_are_reported_by_compile_and_inspect() {
    // Smooth curves at 2-32 nodes, except that the default runs at 8 nodes
    // are 12 % faster than the trend of 4 and 16 (another job, another
    // environment): both commands must say so.
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("sweep.csv");
    let mut s = String::from(
        "collective,size_bytes,algorithm,protocol,channels,nodes,ranks,pipeOps,regBuff,cost_metric,bandwidth_gbps,latency_us\n",
    );
    for n in [2u32, 4, 8, 16, 32] {
        for k in 3..=25 {
            let b = 1u64 << k;
            let base = (10.0 + b as f64 / 1e4) * (n as f64).powf(0.3);
            for (algo, proto, f) in [
                ("default", "default", 1.0),
                ("tree", "ll", 1.1),
                ("ring", "ll", 1.2),
            ] {
                let off = if n == 8 && algo == "default" {
                    0.88
                } else {
                    1.0
                };
                let t = base * f * off;
                s.push_str(&format!(
                    "allreduce,{b},{algo},{proto},-1,{n},{},1,0,{t:.3},1,{t:.3}\n",
                    n * 8
                ));
            }
        }
    }
    std::fs::write(&csv, s).unwrap();
    let report = compile(&csv, &dir.path().join("t.tbl"));
    let notes = report["notes"].to_string();
    assert!(
        notes.contains("the default runs at 8 nodes are 12 % faster than the trend of 4 and 16"),
        "{notes}"
    );
    let out = dyncc().arg("inspect").arg(&csv).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("the default runs at 8 nodes are 12 % faster"),
        "{text}"
    );
}

/// A sweep at 1-32 nodes where Tree/LL beats the default by 20 % below
/// 64 KiB at the node counts `wins` (and matches it elsewhere).
fn sweep_where_tree_wins_at(dir: &Path, wins: &[u32]) -> PathBuf {
    let csv = dir.join("sweep.csv");
    let mut s = String::from(
        "collective,size_bytes,algorithm,protocol,channels,nodes,ranks,pipeOps,regBuff,cost_metric,bandwidth_gbps,latency_us\n",
    );
    for n in [1u32, 2, 4, 8, 16, 32] {
        for k in 3..=25 {
            let b = 1u64 << k;
            let base = (10.0 + b as f64 / 1e4) * (n as f64).powf(0.3);
            let tree = if b < 65536 && wins.contains(&n) {
                0.8
            } else {
                1.0
            };
            for (algo, proto, f) in [
                ("default", "default", 1.0),
                ("tree", "ll", tree),
                ("ring", "ll", 1.3),
            ] {
                let t = base * f;
                s.push_str(&format!(
                    "allreduce,{b},{algo},{proto},-1,{n},{},1,0,{t:.3},1,{t:.3}\n",
                    n * 8
                ));
            }
        }
    }
    std::fs::write(&csv, s).unwrap();
    csv
}

fn cv_nodes(csv: &Path) -> serde_json::Value {
    run_json(dyncc().args(["eval", "--cv", "nodes", "--json"]).arg(csv))
}

#[test]
fn cross_validation_says_how_much_of_the_held_out_gain_the_kept_counts_showed() {
    let dir = tempfile::tempdir().unwrap();
    // Tree/LL wins at every multi-node count: each held-out count's gain
    // shows at the counts around it, and the table takes it.
    let all = cv_nodes(&sweep_where_tree_wins_at(dir.path(), &[2, 4, 8, 16, 32]));
    let reach = all["reachable"].as_f64().unwrap();
    let captured = all["captured"].as_f64().unwrap();
    assert!(reach > 0.99, "{all}");
    assert!(captured > 0.5 && captured <= reach + 1e-9, "{all}");
    // Tree/LL wins only at 8 nodes: nothing the other counts measured
    // shows it there, so no table read off them could capture it.
    let only8 = cv_nodes(&sweep_where_tree_wins_at(dir.path(), &[8]));
    let at8 = &only8["by_nodes"]["8"];
    assert_eq!(at8["reachable"].as_f64().unwrap(), 0.0, "{only8}");
    assert!(at8["captured"].as_f64().unwrap() <= 0.0, "{only8}");
    // The person reading the table is told what the figure means.
    let out = dyncc()
        .args(["eval", "--cv", "nodes"])
        .arg(dir.path().join("sweep.csv"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("(reachable 0.0%: "), "{text}");
    assert!(text.contains("measure those counts"), "{text}");
    // Scoring a table (not a cross-validation) has no such figure.
    let tbl = dir.path().join("t.tbl");
    compile(&dir.path().join("sweep.csv"), &tbl);
    let v = run_json(
        dyncc()
            .args(["eval", "--json"])
            .arg(&tbl)
            .arg(dir.path().join("sweep.csv")),
    );
    assert!(v.get("reachable").is_none(), "{v}");
}

/// A sweep of one 8-GPU node measured with unregistered buffers (Tree/LL
/// 20 % faster than NCCL below 64 KiB) and with registered ones (`regBuff`
/// 1, nccl-tests `-R 1`: Ring/LL 20 % faster there instead).
fn sweep_with_registered_buffers(dir: &Path) -> PathBuf {
    let csv = dir.join("sweep.csv");
    let mut s = String::from(
        "collective,size_bytes,algorithm,protocol,channels,nodes,ranks,pipeOps,regBuff,cost_metric,bandwidth_gbps,latency_us\n",
    );
    for reg in [0, 1] {
        for k in 3..=25 {
            let b = 1u64 << k;
            let base = 10.0 + b as f64 / 1e4;
            let small = b < 65536;
            let (tree, ring) = match (reg, small) {
                (0, true) => (0.8, 1.3),
                (1, true) => (1.3, 0.8),
                _ => (1.0, 1.3),
            };
            for (algo, proto, f) in [
                ("default", "default", 1.0),
                ("tree", "ll", tree),
                ("ring", "ll", ring),
            ] {
                let t = base * f;
                s.push_str(&format!(
                    "allreduce,{b},{algo},{proto},-1,1,8,1,{reg},{t:.3},1,{t:.3}\n"
                ));
            }
        }
    }
    std::fs::write(&csv, s).unwrap();
    csv
}

/// `regBuff` (the CSV column; nccl-tests `-R`) was read and then dropped:
/// registered and unregistered runs were pooled as repeats of one cell, and
/// every table decided for any `regBuff`. It is now part of the cell key,
/// the runs are kept apart like NCCL setups, and a table compiled from the
/// registered runs is gated to registered buffers. NCCL computes regBuff
/// per rank, so what that table would force for registered buffers only
/// is left to NCCL on every call (ranks that registered differently would
/// run different algorithms), and the report says so.
#[test]
fn registered_buffer_runs_compile_into_a_table_gated_on_reg_buff() {
    use dyncc_tables::{Algo, Decision, Proto, Setting, Table};
    let dir = tempfile::tempdir().unwrap();
    let csv = sweep_with_registered_buffers(dir.path());
    // Mixed states are not repeats: refused, naming how to pick each.
    let out = dyncc()
        .arg("compile")
        .arg(&csv)
        .arg("-o")
        .arg(dir.path().join("mixed.tbl"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("--setup 'regBuff=1'") && err.contains("--setup 'regBuff=0'"),
        "{err}"
    );
    let lookup = |tbl: &Path, reg_buff: i32| {
        let bytes = std::fs::read(tbl).unwrap();
        let t = Table::from_bytes(&bytes).unwrap();
        // allreduce (ncclFunc_t 4), 8 ranks on 1 node, 4 KiB, one operation.
        t.lookup(4, &dyncc_tables::Comm::new(8, 1), 4096, 1, reg_buff)
            .decision
    };
    let force = |algo, proto| Decision::Force(Setting::new(algo, proto));
    let compile_with = |out: &Path, setup: &str| {
        run_json(
            dyncc()
                .arg("compile")
                .arg(&csv)
                .args(["--setup", setup, "--json", "-o"])
                .arg(out),
        )
    };
    let reg = dir.path().join("registered.tbl");
    let report = compile_with(&reg, "regBuff=1");
    let bytes = std::fs::read(&reg).unwrap();
    let t = Table::from_bytes(&bytes).unwrap();
    // Stored as compiled (gated Ring/LL below 64 KiB), answered as NCCL.
    let c = t
        .find_context(
            dyncc_tables::Coll::AllReduce,
            &dyncc_tables::Comm::new(8, 1),
        )
        .unwrap();
    assert_eq!(c.spec().reg_buff, dyncc_tables::RegBuff::Only1);
    assert_eq!(
        c.rule_for_size(4096).unwrap().1.decision,
        force(Algo::Ring, Proto::LL)
    );
    assert_eq!(lookup(&reg, 1), Decision::Default);
    assert_eq!(lookup(&reg, 0), Decision::Default);
    assert!(
        t.lookup(4, &dyncc_tables::Comm::new(8, 1), 4096, 1, 1)
            .reg_buff_split
    );
    let notes = report["notes"].to_string();
    assert!(
        notes.contains(
            "1 forced region of calls with registered buffers (--setup regBuff=1) is left to NCCL"
        ) && notes.contains("allreduce nodes 1 ppn 8"),
        "{notes}"
    );
    assert!(
        report["forced"].as_array().is_some_and(|f| f.is_empty()),
        "{}",
        report["forced"]
    );
    // The built plugin, as NCCL calls it (getCollInfo v6 with regBuff).
    let calls = dir.path().join("calls.csv");
    std::fs::write(&calls, "allreduce,4096,1,8,1,1\nallreduce,4096,1,8,1,0\n").unwrap();
    let answers = crate::audit::plugin_answers(&reg, &calls, &dir.path().join("answers.txt"));
    let names = |a: &(String, String, u8)| (a.0.clone(), a.1.clone());
    assert_eq!(
        answers.iter().map(names).collect::<Vec<_>>(),
        [
            ("default".to_string(), "default".to_string()),
            ("default".to_string(), "default".to_string())
        ]
    );
    // `query` gives the plugin's answer and says why.
    let out = dyncc()
        .args(["query"])
        .arg(&reg)
        .args([
            "--coll",
            "allreduce",
            "--bytes",
            "4096",
            "--nodes",
            "1",
            "--ranks",
            "8",
            "--reg-buff",
            "1",
        ])
        .output()
        .unwrap();
    let q = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{q}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        q.contains("NCCL computes regBuff per rank") && q.contains("forces ring/ll"),
        "{q}"
    );
    // The unregistered runs decide as every table always has: for any call.
    let unreg = dir.path().join("unregistered.tbl");
    compile_with(&unreg, "regBuff=0");
    assert_eq!(lookup(&unreg, 0), force(Algo::Tree, Proto::LL));
    assert_eq!(lookup(&unreg, 1), force(Algo::Tree, Proto::LL));
}

/// Rows whose ranks are not a multiple of their nodes were dropped with a
/// note that said how many, not which shape or where it was read.
#[test]
fn uneven_shapes_are_noted_with_file_and_line() {
    let d = tempfile::tempdir().unwrap();
    let csv = d.path().join("sweep.csv");
    std::fs::write(
        &csv,
        "collective,size_bytes,algorithm,protocol,channels,nodes,ranks,latency_us\n\
         allreduce,1024,default,default,-1,1,8,10\n\
         allreduce,1024,ring,ll,-1,1,8,8\n\
         allreduce,1024,default,default,-1,3,8,20\n\
         allreduce,2048,default,default,-1,3,8,21\n",
    )
    .unwrap();
    let v = compile(&csv, &d.path().join("t.tbl"));
    let notes = v["notes"].to_string();
    let want = format!(
        "2 cells whose ranks are not a multiple of their nodes were not used: 8 ranks on 3 \
         nodes (2 cells, e.g. {}:4)",
        csv.display()
    );
    assert!(notes.contains(&want), "{notes}");
}

/// `dyncc diff A B` says whether every call gets the same decision.
fn same_decisions(a: &Path, b: &Path) -> bool {
    let out = dyncc().arg("diff").arg(a).arg(b).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).contains("no differences")
}

/// The same CSV rows read twice (`cat a.csv; tail -n +2 a.csv`) counted as
/// independent repeats: on the DGX-1V sweep 34 decision regions changed.
/// A stretch of rows read again is one measurement: the same table.
#[test]
fn csv_rows_read_twice_compile_to_the_table_read_once() {
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(real("nvidia-dgx1v-allreduce.csv")).unwrap();
    let rows = text.split_once('\n').unwrap().1;
    let twice = dir.path().join("twice.csv");
    std::fs::write(&twice, format!("{text}{rows}")).unwrap();
    let once_tbl = dir.path().join("once.tbl");
    let twice_tbl = dir.path().join("twice.tbl");
    compile(&real("nvidia-dgx1v-allreduce.csv"), &once_tbl);
    let out = dyncc()
        .arg("compile")
        .arg(&twice)
        .arg("-o")
        .arg(&twice_tbl)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        report.contains("twice.csv:1262: 1260 row(s) repeat earlier rows"),
        "{report}"
    );
    assert!(same_decisions(&once_tbl, &twice_tbl));
}

/// A rerun of NCCL's default 3x slower (a degraded node) was averaged in
/// with "0 flagged" (only 10x was caught) and the table forced another
/// setting at every size of it. Now it disagrees beyond the sweep's own
/// noise: an error naming file:line; with --lenient its cells are dropped,
/// listed, and the table is the one of a sweep that never measured them.
/// The shipped DGX-1V sweep, and a rerun of its default runs at 2 nodes
/// `factor` times slower (as a degraded node or another job would give),
/// and the sweep without those runs, as CSV texts.
struct Rerun {
    sweep: String,
    rerun: String,
    without: String,
}

fn dgx1v_default_rerun(factor: f64) -> Rerun {
    let sweep = std::fs::read_to_string(real("nvidia-dgx1v-allreduce.csv")).unwrap();
    let (header, rows) = sweep.split_once('\n').unwrap();
    // Columns: collective,size_bytes,algorithm,protocol,channels,nodes,
    // ranks,pipeOps,regBuff,cost_metric,bandwidth_gbps,latency_us,platform.
    let mut rerun = format!("{header}\n");
    let mut without = format!("{header}\n");
    for l in rows.lines() {
        let f: Vec<&str> = l.split(',').collect();
        if f[2] == "default" && f[5] == "2" {
            let t: f64 = f[11].parse().unwrap();
            let mut g: Vec<String> = f.iter().map(|s| s.to_string()).collect();
            g[9] = format!("{:.1}", t * factor);
            g[11] = format!("{:.1}", t * factor);
            rerun += &format!("{}\n", g.join(","));
        } else {
            without += &format!("{l}\n");
        }
    }
    Rerun {
        sweep,
        rerun,
        without,
    }
}

/// Runs of one setting from another job differ by more than one run's
/// noise (another allocation, other traffic): 1.3x apart at every size is
/// not a broken run, and compiles (their median decides).
#[test]
fn a_rerun_from_another_job_within_1_5x_compiles() {
    let dir = tempfile::tempdir().unwrap();
    let Rerun {
        sweep: text, rerun, ..
    } = dgx1v_default_rerun(1.3);
    let sweep = dir.path().join("sweep");
    std::fs::create_dir(&sweep).unwrap();
    std::fs::write(sweep.join("a.csv"), &text).unwrap();
    std::fs::write(sweep.join("rerun.csv"), &rerun).unwrap();
    let out = dyncc()
        .arg("compile")
        .arg(&sweep)
        .arg("-o")
        .arg(dir.path().join("t.tbl"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
}

#[test]
fn a_degraded_rerun_of_the_default_is_flagged_and_kept_out_of_decisions() {
    let dir = tempfile::tempdir().unwrap();
    let Rerun {
        sweep: text,
        rerun,
        without,
    } = dgx1v_default_rerun(3.0);
    let sweep = dir.path().join("sweep");
    std::fs::create_dir(&sweep).unwrap();
    std::fs::write(sweep.join("a.csv"), &text).unwrap();
    std::fs::write(sweep.join("rerun.csv"), &rerun).unwrap();
    let tbl = dir.path().join("t.tbl");
    let out = dyncc()
        .arg("compile")
        .arg(&sweep)
        .arg("-o")
        .arg(&tbl)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("rerun.csv:") && err.contains("a.csv:") && err.contains("3.0x apart"),
        "{err}"
    );
    assert!(err.contains("sweep's own noise"), "{err}");
    assert!(!tbl.exists());
    let out = dyncc()
        .arg("compile")
        .arg(&sweep)
        .arg("--lenient")
        .arg("-o")
        .arg(&tbl)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(report.contains("30 skipped"), "{report}");
    assert!(
        report.contains("skipped ")
            && report.contains("rerun.csv:")
            && report.contains("dropped the cell"),
        "{report}"
    );
    let never = dir.path().join("never.csv");
    std::fs::write(&never, &without).unwrap();
    let never_tbl = dir.path().join("never.tbl");
    let out = dyncc()
        .arg("compile")
        .arg(&never)
        .arg("--lenient")
        .arg("-o")
        .arg(&never_tbl)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(same_decisions(&never_tbl, &tbl));
}

/// `-o /dev/stdout` was refused (a symbolic link) and `-o -` wrote a file
/// named `-`, so a table could not be piped. Now both stream the table to
/// stdout, byte-clean (the report goes to stderr), and the bytes are a
/// valid table deciding as the one written to a file does; `plot` and
/// `export` stream theirs the same way.
#[test]
fn compile_plot_and_export_write_to_stdout_with_dash_o_dash() {
    let dir = tempfile::tempdir().unwrap();
    let data = real("nvidia-dgx1v-allreduce.csv");
    let file = dir.path().join("t.tbl");
    compile(&data, &file);
    for target in ["-", "/dev/stdout"] {
        let out = dyncc()
            .current_dir(dir.path())
            .arg("compile")
            .arg(&data)
            .args(["-o", target])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "-o {target}: {err}");
        assert!(
            err.contains("wrote the table to standard output") && err.contains("forces"),
            "-o {target}: the report belongs on stderr: {err}"
        );
        dyncc_tables::Table::from_bytes(&out.stdout)
            .unwrap_or_else(|e| panic!("-o {target}: stdout is not a table: {e}"));
        assert!(
            !dir.path().join("-").exists(),
            "-o {target} wrote a file named -"
        );
        let piped = dir.path().join("piped.tbl");
        std::fs::write(&piped, &out.stdout).unwrap();
        assert!(same_decisions(&piped, &file), "-o {target}");
    }
    let plot = dyncc()
        .current_dir(dir.path())
        .arg("plot")
        .arg(&file)
        .args(["-o", "-"])
        .output()
        .unwrap();
    assert!(plot.status.success(), "{plot:?}");
    assert!(plot.stdout.starts_with(b"<svg"), "{plot:?}");
    assert!(
        plot.stdout.ends_with(b"</svg>\n"),
        "plot's note followed the SVG on stdout"
    );
    let export = dyncc()
        .current_dir(dir.path())
        .arg("export")
        .arg(&file)
        .args(["-o", "/dev/stdout"])
        .output()
        .unwrap();
    assert!(export.status.success(), "{export:?}");
    assert!(String::from_utf8_lossy(&export.stdout).starts_with("# NCCL example tuner rules"));
    assert!(!dir.path().join("-").exists());
}

/// A pseudo-terminal pair: the master's file and the slave's path.
fn pseudo_terminal() -> (std::fs::File, PathBuf) {
    use std::os::fd::FromRawFd;
    // SAFETY: posix_openpt takes flags only and returns a new descriptor
    // or -1 (checked); grantpt/unlockpt take that descriptor.
    let master = unsafe { libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY) };
    assert!(
        master >= 0,
        "posix_openpt: {}",
        std::io::Error::last_os_error()
    );
    // SAFETY: `master` is an open descriptor this function owns from here.
    let file = unsafe { std::fs::File::from_raw_fd(master) };
    // SAFETY: `master` is a valid pty master descriptor.
    assert_eq!(unsafe { libc::grantpt(master) }, 0);
    // SAFETY: as above.
    assert_eq!(unsafe { libc::unlockpt(master) }, 0);
    let mut name = [0 as libc::c_char; 128];
    // SAFETY: `name` is a writable buffer of the length passed.
    assert_eq!(
        unsafe { libc::ptsname_r(master, name.as_mut_ptr(), name.len()) },
        0
    );
    // SAFETY: ptsname_r succeeded, so `name` holds a NUL-terminated path.
    let slave = unsafe { std::ffi::CStr::from_ptr(name.as_ptr()) };
    (file, PathBuf::from(slave.to_str().unwrap()))
}

/// `compile -o -` with stdout a terminal wrote the table's binary bytes to
/// the screen. It is refused, before any work, with what to do instead,
/// and nothing reaches the terminal.
#[test]
fn compile_refuses_to_write_a_table_to_a_terminal() {
    use std::io::Read;
    let data = real("nvidia-dgx1v-allreduce.csv");
    for target in ["-", "/dev/stdout"] {
        let (mut master, slave) = pseudo_terminal();
        let tty = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&slave)
            .unwrap();
        let mut cmd = dyncc();
        cmd.arg("compile")
            .arg(&data)
            .args(["-o", target])
            .stdout(tty)
            .stderr(std::process::Stdio::piped());
        let child = cmd.spawn().unwrap();
        drop(cmd); // The slave's last copy outside the child.
                   // Drain the terminal meanwhile, so a table written there cannot
                   // block the child on a full buffer.
        let screen = std::thread::spawn(move || {
            let mut seen = Vec::new();
            // Reading a master whose slave is closed fails with EIO: the end.
            let _ = master.read_to_end(&mut seen);
            seen
        });
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "-o {target}: {err}");
        assert!(
            err.contains("standard output is a terminal") && err.contains("-o FILE.tbl"),
            "-o {target}: {err}"
        );
        let seen = screen.join().unwrap();
        assert!(
            seen.is_empty(),
            "-o {target}: {} bytes reached the terminal",
            seen.len()
        );
    }
}

/// The table must not depend on how many threads fitted it: a compile on
/// one thread and on four give the same bytes but for the command line
/// (and the body checksum over it), and `dyncc diff` finds no difference.
#[test]
fn compiles_on_1_and_4_jobs_give_the_same_table() {
    let dir = tempfile::tempdir().unwrap();
    let sim = root().join("datasets/sim");
    let table = |jobs: &str| {
        // Equal-length names and arguments: only the job count differs.
        let out = dir.path().join(format!("t{jobs}.tbl"));
        let run = dyncc()
            .args(["compile", "--jobs", jobs, "-o"])
            .arg(&out)
            .arg(&sim)
            .output()
            .unwrap();
        assert!(
            run.status.success(),
            "{}",
            String::from_utf8_lossy(&run.stderr)
        );
        (out.clone(), std::fs::read(&out).unwrap())
    };
    let (p1, one) = table("1");
    let (p4, mut four) = table("4");
    let command = |bytes: &[u8]| {
        let t = dyncc_tables::Table::from_bytes(bytes).unwrap();
        t.meta("command").unwrap().to_string()
    };
    let (c1, c4) = (command(&one), command(&four));
    assert_ne!(c1, c4, "the command lines name their job counts");
    assert_eq!(one.len(), four.len());
    let at = four
        .windows(c4.len())
        .position(|w| w == c4.as_bytes())
        .expect("the command line is stored verbatim");
    four[at..at + c4.len()].copy_from_slice(c1.as_bytes());
    // Bytes 32..36: the checksum of the body, which holds the command line.
    let same = |a: &[u8], b: &[u8]| a[..32] == b[..32] && a[36..] == b[36..];
    assert!(
        same(&one, &four),
        "the tables differ beyond the command line"
    );
    let diff = dyncc().arg("diff").arg(&p1).arg(&p4).output().unwrap();
    assert_eq!(
        diff.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&diff.stdout)
    );
}

/// Cross-validation compiles its folds in parallel: its scores must not
/// depend on the number of threads either.
#[test]
fn cross_validation_on_1_and_4_jobs_scores_the_same() {
    let cv = |jobs: &str| {
        let out = dyncc()
            .args(["eval", "--cv", "all", "--json", "--jobs", jobs])
            .arg(real("nvidia-dgx2v-allreduce.csv"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    };
    assert_eq!(
        String::from_utf8(cv("1")).unwrap(),
        String::from_utf8(cv("4")).unwrap()
    );
}

/// A 200,000-cell sweep (every row its own cell) in `dir`: on one thread
/// its fitting takes well over the second after which progress shows.
fn long_sweep(dir: &Path) -> PathBuf {
    let path = dir.join("distinct.csv");
    let mut f = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    crate::support::gen_sweep::write_distinct_sweep(&mut f, 200_000).unwrap();
    std::io::Write::flush(&mut f).unwrap();
    path
}

/// Runs `dyncc compile --jobs 1 INPUT` with stderr on a fresh
/// pseudo-terminal (stdout piped); returns what the terminal received
/// and stdout.
fn compile_on_a_terminal(input: &Path, out: &Path, extra: &[&str]) -> (String, String) {
    let mut cmd = dyncc();
    cmd.args(["compile", "--jobs", "1"])
        .args(extra)
        .arg("-o")
        .arg(out)
        .arg(input);
    on_a_terminal(cmd)
}

/// Runs `cmd` with stderr on a fresh pseudo-terminal (stdout piped);
/// returns what the terminal received and stdout.
fn on_a_terminal(mut cmd: std::process::Command) -> (String, String) {
    use std::io::Read;
    use std::os::fd::{FromRawFd, OwnedFd};
    let (mut master, mut slave) = (-1, -1);
    // SAFETY: openpty writes two descriptors into the given ints; the name,
    // termios and window-size pointers may be null.
    let rc = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(rc, 0, "openpty failed: {}", std::io::Error::last_os_error());
    // SAFETY: both descriptors were just opened by openpty and are owned
    // by nothing else.
    let (master, slave) = unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
    let mut child = cmd
        .env("TERM", "xterm")
        .stdout(std::process::Stdio::piped())
        .stderr(slave)
        .spawn()
        .unwrap();
    // The parent's copy of the slave goes with the Command: reading the
    // master ends (EIO) once the child has exited.
    drop(cmd);
    let reader = std::thread::spawn(move || {
        let mut f = std::fs::File::from(master);
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n) = f.read(&mut buf) {
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
        String::from_utf8_lossy(&got).into_owned()
    });
    let mut stdout = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    assert!(child.wait().unwrap().success());
    (reader.join().unwrap(), stdout)
}

/// Long fitting shows its progress (models fitted of all, with an ETA) on a
/// terminal's stderr, never on stdout; not with --quiet.
#[test]
fn progress_shows_on_a_terminal_and_not_with_quiet() {
    let dir = tempfile::tempdir().unwrap();
    let input = long_sweep(dir.path());
    let out = dir.path().join("t.tbl");
    let (term, stdout) = compile_on_a_terminal(&input, &out, &[]);
    assert!(
        term.contains("fitting") && term.contains("/360 models") && term.contains("ETA"),
        "no progress on the terminal: {term:?}"
    );
    assert!(!stdout.contains("fitting"), "{stdout}");
    assert!(stdout.contains("wrote"), "{stdout}");
    let (term, _) = compile_on_a_terminal(&input, &out, &["--quiet"]);
    assert!(
        !term.contains("fitting"),
        "progress despite --quiet: {term:?}"
    );
}

/// `eval --cv` shows folds done of all on a terminal (not on stdout, not
/// with --quiet); it showed nothing before.
#[test]
fn cross_validation_shows_its_folds_on_a_terminal() {
    let run = |extra: &[&str]| {
        let mut cmd = dyncc();
        cmd.args(["eval", "--cv", "nodes"])
            .args(extra)
            .arg(real("nvidia-dgx1v-allreduce.csv"))
            .env("DYNCC_PROGRESS_AFTER_MS", "0");
        on_a_terminal(cmd)
    };
    let (term, stdout) = run(&[]);
    assert!(
        term.contains("cross-validating (--cv nodes)") && term.contains("folds"),
        "no progress on the terminal: {term:?}"
    );
    assert!(!stdout.contains("cross-validating"), "{stdout}");
    let (term, _) = run(&["--quiet"]);
    assert!(!term.contains("cross-validating"), "{term:?}");
}

/// The same long compile with stderr a pipe (a script, a CI log) prints no
/// progress at all.
#[test]
fn progress_does_not_show_in_a_pipe() {
    let dir = tempfile::tempdir().unwrap();
    let input = long_sweep(dir.path());
    let run = dyncc()
        .args(["compile", "--jobs", "1", "-o"])
        .arg(dir.path().join("t.tbl"))
        .arg(&input)
        .env("TERM", "xterm")
        .output()
        .unwrap();
    assert!(run.status.success());
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(!stderr.contains("fitting"), "{stderr}");
    assert!(
        !stderr.contains('\u{1b}'),
        "escape codes in a pipe: {stderr:?}"
    );
}
