//! Every way of installing (README, "Install the plugin and point NCCL at
//! it"), run: `make plugin`, `make install` and pip's layout each give a
//! directory that `dyncc plugin-path` of the installed command prints, and
//! in which NCCL's two names, libnccl-tuner-dyncc.so and
//! libnccl-profiler-dyncc.so, opened as NCCL opens them (bare names through
//! LD_LIBRARY_PATH, tuner and profiler in NCCL's order: the stand-in NCCL,
//! tests/c/standin.c), are one object: the profiler's trace links every call
//! to who chose it, which a second object cannot. The init INFO line names
//! the version `dyncc --version` prints.
//!
//! `DYNCC_TEST_INSTALLED=/path/to/bin/dyncc` checks a real pip install (CI
//! installs the wheel in a fresh virtual environment) instead of the layout
//! the pip test builds from the debug plugin.

use std::path::{Path, PathBuf};
use std::process::Command;

use dyncc_tables::trace::Source;
use dyncc_tables::Trace;

use crate::plugin_c::{plugin_lib, root, run};
use crate::profiler_c::{check_trace, stdout_of, Standin};
use crate::support::tools::{require_c_compiler, require_tool};

const TUNER: &str = "libnccl-tuner-dyncc.so";
const PROFILER: &str = "libnccl-profiler-dyncc.so";

/// A scratch directory on the target's file system, so that the 100 MB
/// debug `dyncc` can be hard-linked into it rather than copied.
fn scratch() -> tempfile::TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap()
}

/// Puts `src` at `dst` (a hard link when it can, else a copy): a file of
/// its own name there, as an install leaves it.
fn place(src: &Path, dst: &Path) {
    std::fs::create_dir_all(dst.parent().unwrap()).unwrap();
    if std::fs::hard_link(src, dst).is_err() {
        std::fs::copy(src, dst).unwrap();
    }
}

/// The `dyncc` under test, placed at `dst` (as an install puts it).
fn place_dyncc(dst: &Path) {
    place(Path::new(env!("CARGO_BIN_EXE_dyncc")), dst);
}

/// `dyncc --version`'s version.
fn version_of(dyncc: &Path) -> String {
    let out = run(Command::new(dyncc).arg("--version"));
    out.trim()
        .strip_prefix("dyncc ")
        .unwrap_or_else(|| panic!("dyncc --version: {out:?}"))
        .to_string()
}

/// What every route must give (see the module doc); `want` is the
/// directory the route put both names in. Returns the printed directory.
fn check_route(what: &str, dyncc: &Path, want: &Path) -> PathBuf {
    let out = run(Command::new(dyncc).arg("plugin-path"));
    let dir = PathBuf::from(out.strip_suffix('\n').unwrap_or(&out));
    assert_eq!(out.lines().count(), 1, "{what}: one line: {out:?}");
    assert!(dir.is_absolute(), "{what}: {out:?}");
    assert_eq!(dir, want.canonicalize().unwrap(), "{what}");
    let json: serde_json::Value =
        serde_json::from_str(&run(Command::new(dyncc).args(["plugin-path", "--json"]))).unwrap();
    assert_eq!(json["found"], true, "{what}: {json}");
    assert_eq!(json["dir"], dir.to_str().unwrap(), "{what}: {json}");
    assert_eq!(
        json["profiler"],
        dir.join(PROFILER).to_str().unwrap(),
        "{what}: {json}"
    );

    let version = version_of(dyncc);
    assert_eq!(json["version"], version.as_str(), "{what}: {json}");
    let s = Standin::new();
    for abi in [6u8, 5] {
        for f in s.trace_files() {
            std::fs::remove_file(f).unwrap();
        }
        let args = [abi.to_string(), "200".into(), "finalize".into()];
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = s
            .command(&[], &args, Some(&s.traces))
            .env("DYNCC_TEST_PLUGIN_LIB", TUNER)
            .env("DYNCC_TEST_PROFILER_LIB", PROFILER)
            .env("LD_LIBRARY_PATH", &dir)
            .output()
            .unwrap();
        let out = stdout_of(&out, &args);
        check_trace(&s, &out, abi, false);
        let init = out
            .lines()
            .find(|l| l.starts_with("INFO dyncc: table "))
            .unwrap_or_else(|| panic!("{what}: no init line:\n{out}"));
        assert!(
            init.contains(&format!(" plugin {version} ")),
            "{what}: the init line names another version than `dyncc --version` ({version}): \
             {init}"
        );
    }
    dir
}

/// `make plugin`, its cargo step stood in by `true` on a target directory
/// holding the debug plugin: the recipe's strip and link run as written,
/// and `target/release/dyncc` (`cargo build --release`) finds the result.
#[test]
fn make_plugin_output_holds_both_names_as_one_object() {
    require_tool("make", "make");
    require_tool("strip", "binutils");
    let t = scratch();
    let release = t.path().join("release");
    place(plugin_lib(), &release.join("libdyncc_runtime.so"));
    let st = Command::new("make")
        .args(["-s", "plugin", "CARGO=true"])
        .arg(format!("TARGET_DIR={}", t.path().display()))
        .current_dir(root())
        .status()
        .unwrap();
    assert!(st.success());
    assert_eq!(
        std::fs::read_link(release.join(PROFILER)).unwrap(),
        Path::new(TUNER)
    );
    place_dyncc(&release.join("dyncc"));
    check_route("make plugin", &release.join("dyncc"), &release);
}

/// `make install`: PREFIX/bin/dyncc finds PREFIX/lib.
#[test]
fn make_install_gives_the_command_and_both_names_as_one_object() {
    require_tool("make", "make");
    let dest = scratch();
    let st = Command::new("make")
        .args(["-s", "install", "PREFIX=/opt/dyncc"])
        .arg(format!("DESTDIR={}", dest.path().display()))
        .arg(format!("PLUGIN_SO={}", plugin_lib().display()))
        .arg(format!("DYNCC_BIN={}", env!("CARGO_BIN_EXE_dyncc")))
        .current_dir(root())
        .status()
        .unwrap();
    assert!(st.success());
    let prefix = dest.path().join("opt/dyncc");
    check_route(
        "make install",
        &prefix.join("bin/dyncc"),
        &prefix.join("lib"),
    );
}

/// pip's layout: ENV/bin/dyncc, ENV/lib/ with the profiler's name as the
/// wheel's stub (packaging/profiler-stub.sh, as packaging/dyncc_build.py
/// runs it, here linked by `cc`), or the real install named by
/// DYNCC_TEST_INSTALLED.
#[test]
fn the_pip_layout_gives_the_command_and_both_names_as_one_object() {
    if let Some(dyncc) = std::env::var_os("DYNCC_TEST_INSTALLED") {
        let dyncc = PathBuf::from(dyncc);
        let lib = dyncc.parent().unwrap().parent().unwrap().join("lib");
        let dir = check_route("pip install", &dyncc, &lib);
        assert!(
            std::fs::symlink_metadata(dir.join(PROFILER))
                .unwrap()
                .is_file(),
            "a wheel holds no symlink: the profiler's name is the stub"
        );
        return;
    }
    let env = scratch();
    let lib = env.path().join("lib");
    place(plugin_lib(), &lib.join(TUNER));
    stub(&lib);
    place_dyncc(&env.path().join("bin/dyncc"));
    check_route("pip layout", &env.path().join("bin/dyncc"), &lib);
}

/// packaging/profiler-stub.sh in `lib`, linked by the C compiler.
fn stub(lib: &Path) {
    let cc = require_c_compiler();
    run(Command::new("sh")
        .arg(root().join("packaging/profiler-stub.sh"))
        .arg(lib)
        .arg(cc));
    let dynamic = run(Command::new("readelf").arg("-d").arg(lib.join(PROFILER)));
    assert!(
        dynamic.contains("(NEEDED)") && dynamic.contains(&format!("[{TUNER}]")),
        "{dynamic}"
    );
}

/// Why the profiler's name must not be a copy: the copy is a second object,
/// whose profiler never hears of the tuner's answers, so the trace cannot
/// say who chose (nor which table ran); `dyncc plugin-path` refuses it,
/// naming the link to make.
#[test]
fn a_copy_under_the_profiler_name_is_a_second_object_and_is_refused() {
    let env = scratch();
    let lib = env.path().join("lib");
    place(plugin_lib(), &lib.join(TUNER));
    std::fs::copy(plugin_lib(), lib.join(PROFILER)).unwrap();
    let dyncc = env.path().join("bin/dyncc");
    place_dyncc(&dyncc);
    let out = Command::new(&dyncc).arg("plugin-path").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("separate file") && err.contains("ln -sf libnccl-tuner-dyncc.so"),
        "{err}"
    );

    let s = Standin::new();
    let args = ["6", "200", "finalize"];
    let out = s
        .command(&[], &args, Some(&s.traces))
        .env("DYNCC_TEST_PLUGIN_LIB", TUNER)
        .env("DYNCC_TEST_PROFILER_LIB", PROFILER)
        .env("LD_LIBRARY_PATH", &lib)
        .output()
        .unwrap();
    stdout_of(&out, &args);
    let files = s.trace_files();
    assert_eq!(files.len(), 1, "{files:?}");
    let bytes = std::fs::read(&files[0]).unwrap();
    let t = Trace::from_bytes(&bytes).unwrap();
    assert_eq!(t.head().table_digest, None, "the copy never saw the table");
    assert!(t.records().count() > 0);
    assert!(
        t.records().all(|r| r.source == Source::Unknown),
        "the copy cannot know who chose"
    );
}

/// Nothing installed beside the command: exit 2, nothing on stdout (a
/// script's `$(dyncc plugin-path)` is empty, not wrong), and the message
/// names the places looked in and each way to install; `--json` says the
/// same to a program.
#[test]
fn plugin_path_without_a_library_exits_2_naming_what_to_do() {
    let env = scratch();
    let dyncc = env.path().join("bin/dyncc");
    place_dyncc(&dyncc);
    let out = Command::new(&dyncc).arg("plugin-path").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    let err = String::from_utf8_lossy(&out.stderr);
    for needle in [
        "no libnccl-tuner-dyncc.so beside this dyncc",
        &env.path().join("lib").display().to_string(),
        "pip install",
        "make plugin",
        "make install PREFIX=",
    ] {
        assert!(err.contains(needle), "{needle}: {err}");
    }
    let out = Command::new(&dyncc)
        .args(["plugin-path", "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["found"], false);
    assert!(json["error"].as_str().unwrap().contains("pip install"));
    assert!(json.get("dir").is_none(), "{json}");
}

/// .ci/check-plugin-so.sh on a library that refers to no GLIBC symbol at
/// all (pip's stub): it passes, saying so. It used to end silently with
/// status 1 (grep finding nothing, under pipefail).
#[test]
fn check_plugin_so_passes_a_library_that_needs_no_glibc() {
    require_tool("objdump", "binutils");
    let t = scratch();
    place(plugin_lib(), &t.path().join(TUNER));
    stub(t.path());
    let out = Command::new(root().join(".ci/check-plugin-so.sh"))
        .arg(t.path().join(PROFILER))
        .arg("2.17")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("highest glibc symbol version GLIBC_none"),
        "{stdout}"
    );
}
