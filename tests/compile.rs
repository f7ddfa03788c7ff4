//! `dyncc compile` and `dyncc eval` end to end on the shipped datasets:
//! the decision-quality bars of issue 5, the atomic write, and errors.

use std::path::{Path, PathBuf};
use std::process::Command;

fn dyncc() -> Command {
    Command::new(env!("CARGO_BIN_EXE_dyncc"))
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

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

#[test]
fn real_v100_sweeps_meet_the_in_sample_bars() {
    for name in ["nvidia-dgx1v-allreduce.csv", "nvidia-dgx2v-allreduce.csv"] {
        let dir = tempfile::tempdir().unwrap();
        let tbl = dir.path().join("t.tbl");
        let report = compile(&real(name), &tbl);
        assert!(report["table"]["bytes"].as_u64().unwrap() <= 64 * 1024);
        let s = run_json(dyncc().arg("eval").arg(&tbl).arg(real(name)).arg("--json"));
        let captured = s["captured"].as_f64().unwrap();
        let regress = s["regression_share"].as_f64().unwrap();
        assert!(captured >= 0.60, "{name}: captured {captured}");
        assert!(regress <= 0.02, "{name}: regressions {regress}");
        assert!(s["table"]["geomean"].as_f64() < s["default"]["geomean"].as_f64());
    }
}

#[test]
fn real_v100_sweeps_meet_the_cross_validation_bars() {
    for name in ["nvidia-dgx1v-allreduce.csv", "nvidia-dgx2v-allreduce.csv"] {
        let s = run_json(
            dyncc()
                .args(["eval", "--cv", "nodes", "--json"])
                .arg(real(name)),
        );
        let t = s["table"]["geomean"].as_f64().unwrap();
        let d = s["default"]["geomean"].as_f64().unwrap();
        assert!(t <= d + 1e-9, "{name}: table {t} slower than default {d}");
        assert!(
            s["regression_share"].as_f64().unwrap() <= 0.05,
            "{name}: {s}"
        );
    }
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

#[test]
fn a_killed_compile_leaves_the_previous_table_intact() {
    // Kill compiles at several points in their run; whatever moment the
    // signal lands, the target holds either the old table or a whole new one.
    let dir = tempfile::tempdir().unwrap();
    let tbl = dir.path().join("cluster.tbl");
    std::fs::write(&tbl, b"previous table").unwrap();
    for delay_ms in [0u64, 5, 20, 60] {
        let mut child = dyncc()
            .arg("compile")
            .arg(real("nvidia-dgx2v-allreduce.csv"))
            .arg("-o")
            .arg(&tbl)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(delay_ms));
        let _ = child.kill();
        let _ = child.wait();
        let bytes = std::fs::read(&tbl).unwrap();
        assert!(
            bytes == b"previous table" || dyncc_tables::Table::from_bytes(&bytes).is_ok(),
            "after a kill at {delay_ms} ms the table is neither the old one nor a valid new one"
        );
    }
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
