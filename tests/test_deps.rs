//! `make test` on a fresh machine: `.ci/test-deps.sh` finds the tools the
//! tests run and, when it cannot install them, stops with one line naming
//! the command that does.

use std::os::unix::fs::symlink;
use std::path::Path;
use std::process::{Command, Output};

/// Runs `.ci/test-deps.sh --check` with PATH holding only links to the
/// named programs (each resolved on the real PATH).
fn check_with_only(programs: &[&str]) -> Output {
    let bin = tempfile::tempdir().unwrap();
    for p in programs.iter().chain(&["bash", "id"]) {
        let real = which(p).unwrap_or_else(|| panic!("`{p}` is not on PATH; this test links it"));
        symlink(real, bin.path().join(p)).unwrap();
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join(".ci/test-deps.sh");
    Command::new(bin.path().join("bash"))
        .arg(script)
        .arg("--check")
        .env("PATH", bin.path())
        .output()
        .unwrap()
}

fn which(program: &str) -> Option<std::path::PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}

#[test]
fn missing_tools_stop_make_test_with_one_line_naming_the_install_command() {
    let out = check_with_only(&["cargo"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    assert!(
        stderr.contains(
            "`sudo apt-get install -y gcc clang valgrind binutils libc-bin shellcheck librsvg2-bin`"
        ),
        "names every missing package once, in one command: {stderr}"
    );
}

#[test]
fn missing_cargo_is_named_before_anything_else() {
    let out = check_with_only(&[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("cargo is not on PATH"), "{stderr}");
}

#[test]
fn nothing_missing_is_silent_success() {
    // Links named like every tool the script looks for, to a program that
    // exists: the script only asks whether each is on PATH.
    let bin = tempfile::tempdir().unwrap();
    let t = which("true").expect("`true` on PATH");
    for p in [
        "gcc",
        "clang",
        "valgrind",
        "nm",
        "readelf",
        "ldd",
        "shellcheck",
        "rsvg-convert",
    ] {
        symlink(&t, bin.path().join(p)).unwrap();
    }
    for p in ["bash", "id", "cargo"] {
        symlink(which(p).unwrap(), bin.path().join(p)).unwrap();
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join(".ci/test-deps.sh");
    let out = Command::new(bin.path().join("bash"))
        .arg(script)
        .env("PATH", bin.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(out.stderr.is_empty() && out.stdout.is_empty());
}
