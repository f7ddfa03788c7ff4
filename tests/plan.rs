//! `dyncc plan`: the generated sweep scripts are shellcheck-clean and run
//! end to end against the fake nccl-tests in tests/data/fake-nccl-tests
//! (with fake srun/mpirun for the cluster launchers), writing the log tree
//! `dyncc compile` reads.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::cli::dyncc;
use crate::support::tools::require_tool;

fn fake_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/fake-nccl-tests")
}

fn plan(dir: &Path, name: &str, args: &[&str]) -> PathBuf {
    let script = dir.join(name);
    let fake = fake_dir();
    let mut all = vec![
        "plan",
        "--nccl-tests",
        fake.to_str().unwrap(),
        "-o",
        script.to_str().unwrap(),
    ];
    all.extend_from_slice(args);
    let o = dyncc().args(&all).output().unwrap();
    assert!(
        o.status.success(),
        "dyncc {all:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    script
}

fn shellcheck(script: &Path) {
    require_tool("shellcheck", "shellcheck");
    let o = Command::new("shellcheck").arg(script).output().unwrap();
    assert!(
        o.status.success(),
        "shellcheck {}:\n{}",
        script.display(),
        String::from_utf8_lossy(&o.stdout)
    );
}

/// Runs a script with the fake launchers first on PATH; returns stderr.
fn run_script(script: &Path, out: &Path, env: &[(&str, &str)]) -> String {
    let path = format!(
        "{}:{}",
        fake_dir().join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let o = Command::new("bash")
        .arg(script)
        .env("PATH", path)
        .env("DYNCC_OUT", out)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "{} failed:\n{err}", script.display());
    err
}

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                files(&p, out);
            } else {
                out.push(p);
            }
        }
    }
}

#[test]
fn scripts_for_every_launcher_are_shellcheck_clean() {
    let d = tempfile::tempdir().unwrap();
    for (name, args) in [
        (
            "slurm.sh",
            &[
                "--launcher",
                "slurm",
                "--nodes",
                "1,2,4,8",
                "--nvls",
                "--collnet",
                "--channels",
                "0,8",
                "--launcher-args",
                "--partition=gpu --account='my acct'",
            ][..],
        ),
        (
            "mpirun.sh",
            &[
                "--launcher",
                "mpirun",
                "--nodes",
                "2",
                "--gpus-per-node",
                "1",
                "--colls",
                "allgather,broadcast,reduce",
            ][..],
        ),
        (
            "local.sh",
            &[
                "--launcher",
                "local",
                "--nodes",
                "1",
                "--platform",
                "dgx h100",
            ][..],
        ),
    ] {
        let s = plan(d.path(), name, args);
        shellcheck(&s);
        let text = std::fs::read_to_string(&s).unwrap();
        assert!(text.contains("# Estimated duration: "), "{text}");
        assert!(text.contains("NCCL_DEBUG_SUBSYS=INIT,ENV,TUNING"));
    }
    let slurm = std::fs::read_to_string(d.path().join("slurm.sh")).unwrap();
    assert!(slurm.contains("#SBATCH --nodes=8") && slurm.contains("#SBATCH --time="));
    assert!(
        slurm.contains("all_reduce_perf 2 NVLSTree Simple 8 1"),
        "NVLSTree swept at 2 nodes"
    );
    assert!(
        !slurm.contains("all_reduce_perf 1 NVLSTree"),
        "NVLSTree needs more than one node"
    );
    assert!(slurm.contains("all_reduce_perf 4 CollNetChain Simple default 3"));
    assert!(
        !slurm.contains("CollNetChain LL"),
        "CollNet runs Simple only"
    );
    let mpi = std::fs::read_to_string(d.path().join("mpirun.sh")).unwrap();
    assert!(
        mpi.contains("all_gather_perf 2 PAT Simple default 1"),
        "PAT at 1 GPU per node"
    );
    assert!(
        !mpi.contains("broadcast_perf 2 PAT"),
        "broadcast runs Ring only"
    );
}

#[test]
fn local_sweep_runs_end_to_end_and_resumes() {
    let d = tempfile::tempdir().unwrap();
    let s = plan(
        d.path(),
        "sweep.sh",
        &[
            "--launcher",
            "local",
            "--nodes",
            "1",
            "--gpus-per-node",
            "4",
            "--colls",
            "allreduce,allgather",
            "--max-bytes",
            "64K",
            "--repeats",
            "2",
            "--nvls",
        ],
    );
    shellcheck(&s);
    let out = d.path().join("out");
    // No NVLS on this "machine": those runs fail, are recorded, and do not stop the sweep.
    let err = run_script(&s, &out, &[("FAKE_NO_NVLS", "1")]);
    assert!(err.contains("estimated"), "{err}");
    let mut logs = Vec::new();
    files(&out.join("logs"), &mut logs);
    let mut json = Vec::new();
    files(&out.join("json"), &mut json);
    let mut failed = Vec::new();
    files(&out.join("failed"), &mut failed);
    // allreduce: default + 6 Tree/Ring + NVLS; allgather: default + 3 Ring + NVLS; x 2 repeats.
    assert_eq!(logs.len(), 2 * (1 + 6 + 1 + 3), "{logs:?}");
    assert_eq!(failed.len(), 2 * 2, "{failed:?}");
    assert_eq!(json.len(), logs.len());
    let one = out.join(
        "logs/allreduce/nodes=1/NCCL_ALGO=Tree/NCCL_PROTO=LL128/channels=default/repeat=2.log",
    );
    let text = std::fs::read_to_string(&one).unwrap();
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("# dyncc: NCCL_ALGO=Tree NCCL_PROTO=LL128 NCCL_MIN_NCHANNELS=default NCCL_MAX_NCHANNELS=default repeat=2"));
    assert_eq!(
        lines.next(),
        Some("# dyncc: coll=allreduce nodes=1 gpus_per_node=4 launcher=local")
    );
    assert!(text.contains("NCCL INFO NCCL_ALGO set by environment to Tree"));
    assert!(text.contains("# Avg bus bandwidth"));
    let def = std::fs::read_to_string(out.join(
        "logs/allreduce/nodes=1/NCCL_ALGO=default/NCCL_PROTO=default/channels=default/repeat=1.log",
    ))
    .unwrap();
    assert!(
        !def.contains("set by environment"),
        "default runs must not inherit knobs:\n{def}"
    );
    let j: serde_json::Value = serde_json::from_slice(
        &std::fs::read(out.join(
            "json/allreduce/nodes=1/NCCL_ALGO=Tree/NCCL_PROTO=LL128/channels=default/repeat=2.json",
        ))
        .unwrap(),
    )
    .unwrap();
    let env: Vec<&str> = j["env"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v.as_str())
        .collect();
    assert!(
        env.contains(&"NCCL_ALGO=Tree") && env.contains(&"NCCL_DEBUG_SUBSYS=INIT,ENV,TUNING"),
        "{env:?}"
    );
    assert_eq!(j["results"].as_array().unwrap().len(), 14);
    let bad = std::fs::read_to_string(&failed[0]).unwrap();
    assert!(bad.contains("# dyncc: status=failed exit=3"), "{bad}");
    // Nothing half-written is left where the ingest looks.
    let mut hidden = Vec::new();
    files(&out, &mut hidden);
    assert!(hidden
        .iter()
        .all(|p| !p.to_string_lossy().contains(".partial")));
    // A second run skips what finished (and retries what failed).
    let err = run_script(&s, &out, &[("FAKE_NO_NVLS", "1")]);
    assert!(
        err.contains("0 ran, 4 failed") && err.contains(&format!("{} already done", logs.len())),
        "{err}"
    );

    // The logs feed `dyncc compile`, and the fake's physics (Tree/LL is
    // fastest for small allreduce) comes out as a forced decision.
    let tbl = d.path().join("cluster.tbl");
    let o = dyncc()
        .args([
            "compile",
            out.join("logs").to_str().unwrap(),
            "-o",
            tbl.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "compile of the sweep failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let q = dyncc()
        .args([
            "query",
            tbl.to_str().unwrap(),
            "--coll",
            "allreduce",
            "--bytes",
            "1K",
            "--nodes",
            "1",
            "--ranks",
            "4",
            "--json",
        ])
        .output()
        .unwrap();
    assert!(q.status.success(), "{}", String::from_utf8_lossy(&q.stderr));
    let j: serde_json::Value = serde_json::from_slice(&q.stdout).unwrap();
    assert_eq!(
        (j["algorithm"].as_str(), j["protocol"].as_str()),
        (Some("tree"), Some("ll")),
        "{j}"
    );
    assert_eq!(j["basis"], "measured");
}

#[test]
fn slurm_and_mpirun_sweeps_run_through_their_launchers() {
    let d = tempfile::tempdir().unwrap();
    for l in ["slurm", "mpirun"] {
        let s = plan(
            d.path(),
            &format!("{l}.sh"),
            &[
                "--launcher",
                l,
                "--nodes",
                "1,2",
                "--gpus-per-node",
                "2",
                "--colls",
                "allreduce",
                "--max-bytes",
                "4K",
                "--repeats",
                "1",
                "--channels",
                "0,2",
                "--algos",
                "ring",
            ],
        );
        let out = d.path().join(l);
        run_script(&s, &out, &[]);
        let mut logs = Vec::new();
        files(&out.join("logs"), &mut logs);
        // Per node count: default + Ring x 3 protocols x 2 channel settings.
        assert_eq!(logs.len(), 2 * (1 + 3 * 2), "{l}: {logs:?}");
        let two = std::fs::read_to_string(out.join(
            "logs/allreduce/nodes=2/NCCL_ALGO=Ring/NCCL_PROTO=Simple/channels=2/repeat=1.log",
        ))
        .unwrap();
        assert!(
            two.contains("NCCL_MIN_NCHANNELS=2 NCCL_MAX_NCHANNELS=2"),
            "{two}"
        );
        assert!(
            two.contains("NCCL INFO NCCL_MAX_NCHANNELS set by environment to 2"),
            "{l}: knobs reach the ranks\n{two}"
        );
        assert_eq!(two.matches("#  Rank").count(), 4, "2 nodes x 2 GPUs");
        assert!(two.contains(" on fakehost-1 device"), "{two}");
    }
}

#[test]
fn outputs_are_readable_and_the_script_executable() {
    use std::os::unix::fs::PermissionsExt;
    let d = tempfile::tempdir().unwrap();
    let s = plan(d.path(), "s.sh", &["--launcher", "local", "--nodes", "1"]);
    assert_eq!(
        std::fs::metadata(&s).unwrap().permissions().mode() & 0o777,
        0o755
    );
}

/// `--launcher-args` for Slurm reached srun only, so a site that requires
/// an account or partition refused `sbatch sweep.sh`: the resource options
/// are #SBATCH lines too (before the first command, where sbatch reads
/// them); srun-only options stay off them.
#[test]
fn slurm_launcher_args_reach_the_sbatch_lines() {
    let d = tempfile::tempdir().unwrap();
    let s = plan(
        d.path(),
        "slurm.sh",
        &[
            "--launcher",
            "slurm",
            "--nodes",
            "2",
            "--launcher-args",
            "--partition=gpu -A 'my acct' --mpi=pmix",
        ],
    );
    let text = std::fs::read_to_string(&s).unwrap();
    let header: Vec<&str> = text
        .lines()
        .take_while(|l| l.starts_with('#') || l.trim().is_empty())
        .collect();
    for want in ["#SBATCH --partition=gpu", "#SBATCH -A 'my acct'"] {
        assert!(header.contains(&want), "{want} in\n{}", header.join("\n"));
    }
    assert!(!text.contains("#SBATCH --mpi"), "{text}");
    assert!(
        text.contains("LAUNCHER_ARGS=(--partition=gpu -A 'my acct' --mpi=pmix)"),
        "{text}"
    );
    shellcheck(&s);
}

/// The bash program of every script is a template file with `@NAME@`
/// placeholders; it is a bash script in its own right and stays
/// shellcheck-clean (the scripts made from it are checked above).
#[test]
fn the_script_template_is_shellcheck_clean() {
    require_tool("shellcheck", "shellcheck");
    let t = Path::new(env!("CARGO_MANIFEST_DIR")).join("compiler/plan/sweep.sh.tmpl");
    let o = Command::new("shellcheck")
        .arg("--shell=bash")
        .arg(&t)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "shellcheck {}:\n{}",
        t.display(),
        String::from_utf8_lossy(&o.stdout)
    );
    let text = std::fs::read_to_string(&t).unwrap();
    assert_eq!(template_placeholder(&text), Some("NCCL_TESTS_DIR"));
}

/// A template placeholder (`@NAME@`) left in `text`, if any.
fn template_placeholder(text: &str) -> Option<&str> {
    let parts: Vec<&str> = text.split('@').collect();
    let between = parts.get(1..parts.len().saturating_sub(1)).unwrap_or(&[]);
    between
        .iter()
        .copied()
        .find(|w| !w.is_empty() && w.bytes().all(|b| b.is_ascii_uppercase() || b == b'_'))
}

/// The scripts held literal placeholders (`sbatch {this script}`,
/// `HOSTFILE=...`): every instruction in them can be run as written.
#[test]
fn plan_scripts_hold_no_placeholders() {
    let d = tempfile::tempdir().unwrap();
    for (name, args) in [
        ("slurm.sh", &["--launcher", "slurm", "--nodes", "2"][..]),
        ("mpirun.sh", &["--launcher", "mpirun", "--nodes", "2"][..]),
        ("local.sh", &["--launcher", "local", "--nodes", "1"][..]),
    ] {
        let s = plan(d.path(), name, args);
        let text = std::fs::read_to_string(&s).unwrap();
        for l in text.lines().filter(|l| l.starts_with('#')) {
            assert!(
                !l.contains("...")
                    && !l.contains("{this")
                    && !l.contains("<")
                    && !l.contains("$DYNCC_OUT"),
                "{name}: placeholder in `{l}`"
            );
        }
        assert_eq!(template_placeholder(&text), None, "{name}: {text}");
        assert!(text.contains(&format!("bash {}", s.display())), "{text}");
        assert!(
            text.contains("# Afterwards: dyncc compile dyncc-sweep/logs -o cluster.tbl"),
            "{text}"
        );
    }
}

/// 29 % of a `--collnet` plan was CollNet with LL/LL128 or on one node.
#[test]
fn a_collnet_plan_holds_only_runs_nccl_will_do() {
    let d = tempfile::tempdir().unwrap();
    let script = d.path().join("s.sh");
    let o = dyncc()
        .args([
            "plan",
            "--launcher",
            "slurm",
            "--nodes",
            "1,2,4,8",
            "--collnet",
            "--json",
            "-o",
        ])
        .arg(&script)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let mut collnet = 0;
    for s in j["settings"].as_array().unwrap() {
        for f in s["forced"].as_array().unwrap() {
            let f = f.as_str().unwrap();
            if f.starts_with("CollNet") {
                collnet += 1;
                assert!(
                    f.ends_with("/Simple") && s["nodes"].as_u64().unwrap() > 1,
                    "{s}"
                );
            }
        }
    }
    assert!(collnet > 0);
    let text = std::fs::read_to_string(&script).unwrap();
    for l in text.lines().filter(|l| l.contains(" CollNet")) {
        let f: Vec<&str> = l.split(' ').collect();
        assert!(f[2] != "1" && f[4] == "Simple", "{l}");
    }
}

/// Runs `dyncc plan` writing to `script`; returns (exit code, stderr).
fn plan_status(script: &Path, args: &[&str]) -> (Option<i32>, String) {
    let o = dyncc()
        .args(["plan", "--nccl-tests", "/x", "-o"])
        .arg(script)
        .args(args)
        .output()
        .unwrap();
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// `--algos nvls` without `--nvls` was accepted (naming it counted as
/// saying the machine has NVLink SHARP), as was CollNet without
/// `--collnet`: the features are stated by their flags only.
#[test]
fn plan_refuses_nvls_or_collnet_the_machine_was_not_said_to_have() {
    let d = tempfile::tempdir().unwrap();
    let s = d.path().join("s.sh");
    let base = ["--launcher", "slurm", "--nodes", "1,2"];
    for (algo, flag, why) in [
        ("nvls", "--nvls", "NVLS needs NVSwitch with NVLink SHARP"),
        (
            "nvls_tree",
            "--nvls",
            "NVLS needs NVSwitch with NVLink SHARP",
        ),
        (
            "collnet_direct",
            "--collnet",
            "CollNet needs a CollNet (SHARP) network",
        ),
        (
            "collnet_chain",
            "--collnet",
            "CollNet needs a CollNet (SHARP) network",
        ),
    ] {
        let (rc, e) = plan_status(&s, &[&base[..], &["--algos", algo]].concat());
        assert_eq!(rc, Some(2), "{algo}: {e}");
        assert!(e.contains(why) && e.contains(&format!("add {flag}")), "{e}");
        assert!(!s.exists(), "{algo}: no script is written");
        let (rc, e) = plan_status(&s, &[&base[..], &["--algos", algo, flag]].concat());
        assert_eq!(rc, Some(0), "{algo} {flag}: {e}");
        std::fs::remove_file(&s).unwrap();
    }
}

/// 13 node counts x 1000 repeats wrote a 63 MB script asking Slurm for
/// `--time=152175:00:00`.
#[test]
fn plan_refuses_a_sweep_longer_than_max_hours() {
    let d = tempfile::tempdir().unwrap();
    let s = d.path().join("s.sh");
    let nodes = "1,2,3,4,5,6,8,12,16,24,32,48,64";
    let huge = ["--launcher", "slurm", "--nodes", nodes, "--repeats", "1000"];
    let (rc, e) = plan_status(&s, &huge);
    assert_eq!(rc, Some(2), "{e}");
    assert!(
        e.contains("over the --max-hours 168 limit") && e.contains("13 node count(s)"),
        "{e}"
    );
    assert!(!s.exists(), "no script is written");
    // Told, it is written; a usual plan is under the limit.
    let (rc, e) = plan_status(
        &s,
        &[
            "--launcher",
            "slurm",
            "--nodes",
            "1,2",
            "--repeats",
            "1000",
            "--max-hours",
            "100000",
        ],
    );
    assert_eq!(rc, Some(0), "{e}");
    let (rc, e) = plan_status(&s, &["--launcher", "slurm", "--nodes", "1,2,4,8"]);
    assert_eq!(rc, Some(0), "{e}");
}

/// `plan -o -` wrote a file named `-` (and `-o /dev/stdout` printed the
/// summary into the script): the script now goes to stdout alone, the
/// summary to stderr, and the piped script is the one a file would hold.
#[test]
fn plan_pipes_the_script_to_stdout_with_dash_o_dash() {
    let d = tempfile::tempdir().unwrap();
    let args = ["--launcher", "slurm", "--nodes", "1,2"];
    let (rc, err) = plan_status(&d.path().join("s.sh"), &args);
    assert_eq!(rc, Some(0), "{err}");
    let file = std::fs::read_to_string(d.path().join("s.sh")).unwrap();
    for target in ["-", "/dev/stdout"] {
        let o = dyncc()
            .current_dir(d.path())
            .args(["plan", "--nccl-tests", "/x", "-o", target])
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "-o {target}: {err}");
        assert!(
            err.contains("wrote the script to standard output")
                && err.contains("then sbatch sweep.sh"),
            "-o {target}: the summary belongs on stderr: {err}"
        );
        assert!(
            !d.path().join("-").exists(),
            "-o {target} wrote a file named -"
        );
        let piped = String::from_utf8(o.stdout).unwrap();
        assert!(piped.starts_with("#!"), "-o {target}: {piped:.200}");
        assert!(
            !piped.contains("wrote "),
            "-o {target}: the summary followed the script"
        );
        assert!(
            piped.contains("# Submit with `sbatch sweep.sh`"),
            "-o {target}: the script names no file it was not saved as"
        );
        // The same runs and #SBATCH lines as the script written to a file.
        let body = |s: &str| -> Vec<String> {
            s.lines()
                .filter(|l| !l.starts_with("# ") || l.starts_with("#SBATCH"))
                .map(str::to_string)
                .collect()
        };
        assert_eq!(body(&piped), body(&file), "-o {target}");
    }
}
