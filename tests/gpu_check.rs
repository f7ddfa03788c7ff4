//! The GPU check (`tests/gpu/`, README "On a GPU") runs only where a GPU
//! is, which no test machine has; these keep it from rotting in between:
//! the script is shellcheck-clean, the rank script compiles, a call
//! without arguments says how to call it, and the comparison of NCCL's own
//! pick with the same setting forced reads NCCL's log lines as they are.

use std::path::Path;
use std::process::Command;

use crate::support::tools::require_tool;

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/gpu");

#[test]
fn the_gpu_check_script_is_shellcheck_clean() {
    require_tool("shellcheck", "shellcheck");
    let o = Command::new("shellcheck")
        .arg(Path::new(DIR).join("check.sh"))
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "shellcheck tests/gpu/check.sh:\n{}",
        String::from_utf8_lossy(&o.stdout)
    );
}

#[test]
fn the_gpu_check_rank_script_compiles() {
    require_tool("python3", "python3");
    let o = Command::new("python3")
        .args([
            "-c",
            "import ast, sys; ast.parse(open(sys.argv[1]).read(), sys.argv[1])",
        ])
        .arg(Path::new(DIR).join("collectives.py"))
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "tests/gpu/collectives.py does not parse:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn the_gpu_check_without_arguments_says_how_to_call_it() {
    let o = Command::new("bash")
        .arg(Path::new(DIR).join("check.sh"))
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("usage: tests/gpu/check.sh BUNDLE_DIR OUT_DIR"),
        "{err}"
    );
    assert!(err.contains("make gpu-bundle"), "{err}");
}

/// `picks.py` reads NCCL's choice at each size from the first choice line
/// (the default's communicator runs first; later lines of forced
/// communicators at the same size are not NCCL's own pick) and compares
/// the default's time with that setting's forced time; a size without a
/// line, or whose choice the sweep did not force, is named, not guessed.
#[test]
fn the_gpu_check_compares_nccls_own_pick_with_the_same_setting_forced() {
    require_tool("python3", "python3");
    let d = tempfile::tempdir().unwrap();
    let csv = d.path().join("sweep.csv");
    let mut rows = String::from(
        "collective,size_bytes,algorithm,protocol,channels,nodes,ranks,pipeOps,regBuff,cost_metric,bandwidth_gbps,latency_us,platform\n",
    );
    for (size, algo, proto, us) in [
        (1u64 << 20, "default", "default", 110.0),
        (1 << 20, "ring", "ll128", 100.0),
        (2 << 20, "default", "default", 200.0),
        (2 << 20, "ring", "ll128", 300.0),
        (2 << 20, "tree", "simple", 200.0),
        (4 << 20, "default", "default", 400.0),
        (8 << 20, "default", "default", 800.0),
    ] {
        rows.push_str(&format!(
            "allreduce,{size},{algo},{proto},-1,2,2,1,0,{us},1,{us},gpu-check\n"
        ));
    }
    std::fs::write(&csv, rows).unwrap();
    let log = d.path().join("rank0.log");
    std::fs::write(
        &log,
        "h:1:1 [0] NCCL INFO AllReduce: 1048576 Bytes -> Algo RING proto LL128 channel{Lo..Hi}={0..1}\n\
         h:1:1 [0] NCCL INFO AllReduce: 2097152 Bytes -> Algo TREE proto SIMPLE channel{Lo..Hi}={0..3}\n\
         h:1:1 [0] NCCL INFO AllReduce: 8388608 Bytes -> Algo NVLS proto SIMPLE channel{Lo..Hi}={0..3}\n\
         h:1:1 [0] NCCL INFO AllReduce: 1048576 Bytes -> Algo TREE proto LL channel{Lo..Hi}={0..1}\n",
    )
    .unwrap();
    let o = Command::new("python3")
        .arg(Path::new(DIR).join("picks.py"))
        .arg(&csv)
        .arg("2")
        .arg(&log)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        out.contains(
            "1048576 B: NCCL chose ring/ll128/2ch: 110.0 us on its own, 100.0 us forced (+10.0 %)"
        ),
        "{out}"
    );
    assert!(
        out.contains(
            "2097152 B: NCCL chose tree/simple/4ch: 200.0 us on its own, 200.0 us forced (+0.0 %)"
        ),
        "{out}"
    );
    assert!(
        out.contains("4194304 B: NCCL's choice is not in the log"),
        "{out}"
    );
    assert!(
        out.contains("8388608 B: NCCL chose nvls/simple/4ch, which the sweep did not force"),
        "{out}"
    );
    assert!(
        out.contains("median 1.050 over 2 sizes; 1 beyond 5 %"),
        "{out}"
    );
}
