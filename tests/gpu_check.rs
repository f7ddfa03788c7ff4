//! The GPU check (`tests/gpu/`, README "On a GPU") runs only where a GPU
//! is, which no test machine has; these keep it from rotting in between:
//! the script is shellcheck-clean, the rank script compiles, and a call
//! without arguments says how to call it.

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
