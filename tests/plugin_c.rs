//! The built plugin (`libdyncc_runtime.so`, installed as
//! `libnccl-tuner-dyncc.so`) as NCCL sees it: its exported symbol set and
//! sizes, its shared-library dependencies, and the C harness
//! (tests/c/harness.c) compiled with gcc, run natively and under valgrind.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

pub(crate) use crate::support::cli::root;
use crate::support::tools::{require_c_compiler, require_tool};

#[path = "c/harness_table.rs"]
pub(crate) mod harness_table;

fn newest_mtime(dir: &Path) -> std::time::SystemTime {
    let mut newest = std::time::SystemTime::UNIX_EPOCH;
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        let t = if p.is_dir() {
            newest_mtime(&p)
        } else {
            e.metadata().and_then(|m| m.modified()).unwrap_or(newest)
        };
        newest = newest.max(t);
    }
    newest
}

/// The debug build of the plugin, built (`cargo build -p dyncc-runtime`)
/// when it is missing or older than its sources; `make test` builds it
/// first, so normally this only checks. `DYNCC_TEST_PLUGIN_LIB=/path/to.so`
/// tests another build instead (e.g. the installed release library).
pub(crate) fn plugin_lib() -> &'static Path {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        if let Some(lib) = std::env::var_os("DYNCC_TEST_PLUGIN_LIB") {
            let lib = PathBuf::from(lib);
            assert!(
                lib.is_file(),
                "DYNCC_TEST_PLUGIN_LIB={} is not a file",
                lib.display()
            );
            return lib;
        }
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| root().join("target"));
        let lib = target.join("debug/libdyncc_runtime.so");
        let sources =
            newest_mtime(&root().join("runtime/src")).max(newest_mtime(&root().join("tables/src")));
        let fresh = lib
            .metadata()
            .and_then(|m| m.modified())
            .is_ok_and(|t| t >= sources);
        if !fresh {
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            eprintln!(
                "plugin_c: building {} with `{cargo} build -p dyncc-runtime`",
                lib.display()
            );
            let st = Command::new(&cargo)
                .args(["build", "-p", "dyncc-runtime"])
                .current_dir(root())
                .status()
                .expect("run cargo build -p dyncc-runtime");
            assert!(st.success(), "cargo build -p dyncc-runtime failed");
        }
        assert!(
            lib.is_file(),
            "{} does not exist after building it",
            lib.display()
        );
        lib
    })
}

pub(crate) fn run(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Compiles `src` (a path under tests/c) with `cc` into `out`: C11,
/// warnings as errors, the plugin's header and tests/c on the include path,
/// then `flags` before the source and `link` after it.
pub(crate) fn compile_c(cc: &str, flags: &[&str], src: &str, out: &Path, link: &[&str]) {
    run(Command::new(cc)
        .args(["-std=c11", "-g", "-Wall", "-Wextra", "-Werror"])
        .args(flags)
        .arg("-I")
        .arg(root().join("include"))
        .arg("-I")
        .arg(root().join("tests/c"))
        .arg(root().join("tests/c").join(src))
        .arg("-o")
        .arg(out)
        .args(link));
}

const TUNER_SYMBOLS: [(&str, u64); 6] = [
    ("ncclTunerPlugin_v2", 32),
    ("ncclTunerPlugin_v3", 32),
    ("ncclTunerPlugin_v4", 32),
    ("ncclTunerPlugin_v5", 32),
    ("ncclTunerPlugin_v6", 40),
    ("ncclTunerPlugin_v7", 40),
];
/// The profiler statics: six pointers each.
const PROFILER_SYMBOLS: [(&str, u64); 7] = [
    ("ncclProfiler_v1", 48),
    ("ncclProfiler_v2", 48),
    ("ncclProfiler_v3", 48),
    ("ncclProfiler_v4", 48),
    ("ncclProfiler_v5", 48),
    ("ncclProfiler_v6", 48),
    ("ncclProfiler_v7", 48),
];
const CAPI_SYMBOLS: [&str; 5] = [
    "dyncc_status_str",
    "dyncc_table_close",
    "dyncc_table_lookup",
    "dyncc_table_open",
    "dyncc_version",
];

#[test]
fn plugin_exports_exactly_the_tuner_and_profiler_statics_and_the_c_api() {
    require_tool("nm", "binutils");
    let out = run(Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(plugin_lib()));
    let mut got: Vec<(String, String)> = out
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 3).then(|| (f[2].to_string(), f[1].to_string()))
        })
        .collect();
    got.sort();
    let mut want: Vec<(String, String)> = TUNER_SYMBOLS
        .iter()
        .chain(&PROFILER_SYMBOLS)
        .map(|(n, _)| (n.to_string(), "D".to_string()))
        .chain(
            CAPI_SYMBOLS
                .iter()
                .map(|n| (n.to_string(), "T".to_string())),
        )
        .collect();
    want.sort();
    assert_eq!(
        got, want,
        "exported dynamic symbols (nm -D --defined-only):\n{out}"
    );
}

#[test]
fn plugin_tuner_statics_have_the_nccl_struct_sizes() {
    require_tool("readelf", "binutils");
    let out = run(Command::new("readelf")
        .args(["--dyn-syms", "-W"])
        .arg(plugin_lib()));
    for (name, size) in TUNER_SYMBOLS.into_iter().chain(PROFILER_SYMBOLS) {
        let line = out
            .lines()
            .find(|l| l.split_whitespace().last() == Some(name))
            .unwrap_or_else(|| panic!("{name} missing from readelf --dyn-syms:\n{out}"));
        let f: Vec<&str> = line.split_whitespace().collect();
        // Num: Value Size Type Bind Vis Ndx Name
        assert_eq!(f[2].parse::<u64>().unwrap(), size, "size of {name}: {line}");
        assert_eq!(
            (f[3], f[4]),
            ("OBJECT", "GLOBAL"),
            "{name} is a global data object: {line}"
        );
    }
}

#[test]
fn plugin_depends_only_on_libc_and_libgcc() {
    require_tool("ldd", "libc-bin");
    let out = run(Command::new("ldd").arg(plugin_lib()));
    let allowed = [
        "linux-vdso.so",
        "libc.so",
        "libgcc_s.so",
        "ld-linux",
        "libm.so",
        "libdl.so",
        "libpthread.so",
    ];
    for line in out.lines().map(str::trim).filter(|l| !l.is_empty()) {
        assert!(
            allowed.iter().any(|a| line.contains(a)),
            "unexpected shared-library dependency of the plugin: {line}\nfull ldd output:\n{out}"
        );
        assert!(!line.contains("not found"), "unresolved dependency: {line}");
    }
}

pub(crate) struct HarnessFiles {
    _dir: tempfile::TempDir,
    pub(crate) exe: PathBuf,
    table: PathBuf,
    corrupt: PathBuf,
    missing: PathBuf,
    scratch: PathBuf,
    channels: PathBuf,
    reserved: PathBuf,
    versioned: PathBuf,
}

/// Flags every build of tests/c/harness.c needs: -rdynamic exports the
/// harness's own ncclGetVersion, so the plugin's
/// `dlsym(RTLD_DEFAULT, "ncclGetVersion")` finds it as it would libnccl's.
pub(crate) const HARNESS_LINK_FLAGS: [&str; 2] = ["-rdynamic", "-ldl"];

/// Builds the harness tables and compiles tests/c/harness.c (failing the
/// test when no C compiler is installed).
pub(crate) fn harness() -> HarnessFiles {
    let cc = require_c_compiler();
    let dir = tempfile::tempdir().unwrap();
    let table = dir.path().join("harness.tbl");
    let corrupt = dir.path().join("corrupt.tbl");
    std::fs::write(&table, harness_table::harness_table()).unwrap();
    std::fs::write(&corrupt, harness_table::corrupt_table()).unwrap();
    let channels = dir.path().join("channels-200.tbl");
    let reserved = dir.path().join("reserved.tbl");
    let versioned = dir.path().join("versioned.tbl");
    std::fs::write(&channels, harness_table::channels_200_table()).unwrap();
    std::fs::write(&reserved, harness_table::reserved_table()).unwrap();
    std::fs::write(&versioned, harness_table::versioned_table()).unwrap();
    let scratch = dir.path().join("scratch");
    std::fs::create_dir(&scratch).unwrap();
    let exe = dir.path().join("harness");
    compile_c(
        cc,
        &["-O1", "-pthread"],
        "harness.c",
        &exe,
        &HARNESS_LINK_FLAGS,
    );
    let missing = dir.path().join("no-such-table.tbl");
    HarnessFiles {
        _dir: dir,
        exe,
        table,
        corrupt,
        missing,
        scratch,
        channels,
        reserved,
        versioned,
    }
}

pub(crate) fn harness_command(h: &HarnessFiles, wrapper: &[&str]) -> Command {
    let mut cmd = match wrapper.split_first() {
        Some((w, args)) => {
            let mut c = Command::new(w);
            c.args(args).arg(&h.exe);
            c
        }
        None => Command::new(&h.exe),
    };
    cmd.env("DYNCC_HARNESS_LIB", plugin_lib())
        .env("DYNCC_HARNESS_TABLE", &h.table)
        .env("DYNCC_HARNESS_CORRUPT", &h.corrupt)
        .env("DYNCC_HARNESS_MISSING", &h.missing)
        .env("DYNCC_HARNESS_SCRATCH", &h.scratch)
        .env("DYNCC_HARNESS_CHANNELS", &h.channels)
        .env("DYNCC_HARNESS_RESERVED", &h.reserved)
        .env("DYNCC_HARNESS_VERSIONED", &h.versioned)
        .env(
            "DYNCC_HARNESS_DIGEST",
            format!(
                "digest {:016x}",
                dyncc_tables::digest(&harness_table::harness_table())
            ),
        )
        .env_remove("DYNCC_TABLE")
        .env_remove("DYNCC_STRICT")
        .env_remove("DYNCC_NCCL_MISMATCH");
    cmd
}

pub(crate) fn check_harness_output(what: &str, out: &std::process::Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    let summary = stdout
        .lines()
        .rfind(|l| l.starts_with("harness:") && l.contains(" passed, "))
        .unwrap_or("");
    assert!(
        summary.ends_with(" 0 failed"),
        "{what}: {summary}\n{stderr}"
    );
    let passed: u64 = summary
        .trim_start_matches("harness: ")
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(passed > 1000, "{what} ran only {passed} checks: {summary}");
    stderr
}

#[test]
fn c_harness_drives_every_abi_version_like_nccl() {
    let h = harness();
    let out = harness_command(&h, &[]).output().unwrap();
    check_harness_output("the C harness", &out);
    // The lines docs/src/explanation/failure-semantics.md quotes (`-- --nocapture`).
    for l in String::from_utf8_lossy(&out.stdout).lines() {
        eprintln!("{l}");
    }
}

#[test]
fn c_harness_is_clean_under_valgrind() {
    require_tool("valgrind", "valgrind");
    let h = harness();
    let out = harness_command(
        &h,
        &[
            "valgrind",
            "--error-exitcode=99",
            "--leak-check=full",
            "--errors-for-leak-kinds=definite,indirect,possible",
            "--quiet",
        ],
    )
    .output()
    .unwrap();
    let stderr = check_harness_output("the C harness under valgrind", &out);
    assert!(
        !stderr.contains("ERROR SUMMARY: ") || stderr.contains("ERROR SUMMARY: 0 errors"),
        "{stderr}"
    );
}

/// An NCCL a framework opened with RTLD_LOCAL is not in the global
/// namespace: the plugin finds `ncclGetVersion` through the library that
/// holds the logger NCCL passes to init (dladdr, then RTLD_NOLOAD), and
/// warns that the table was swept on another NCCL. With a logger from
/// elsewhere, the version is unknown and nothing is claimed.
#[test]
fn nccl_version_is_found_through_the_logger_of_a_locally_loaded_nccl() {
    let cc = require_c_compiler();
    let dir = tempfile::tempdir().unwrap();
    let fake = dir.path().join("libfakenccl.so");
    compile_c(cc, &["-O1", "-shared", "-fPIC"], "fakenccl.c", &fake, &[]);
    let exe = dir.path().join("version_route");
    compile_c(cc, &["-O1"], "version_route.c", &exe, &["-ldl"]);
    let table = dir.path().join("versioned.tbl");
    std::fs::write(&table, harness_table::versioned_table()).unwrap();
    let route = |logger: &str| {
        let out = Command::new(&exe)
            .arg(&fake)
            .arg(logger)
            .env("DYNCC_ROUTE_LIB", plugin_lib())
            .env("DYNCC_TABLE", &table)
            .env_remove("DYNCC_STRICT")
            .env_remove("DYNCC_NCCL_MISMATCH")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "version_route {logger}: {}\n{stdout}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(stdout.contains("rc 0 ctx set"), "{logger}: {stdout}");
        assert!(
            stdout.contains("nccl still loaded: yes"),
            "{logger}: {stdout}"
        );
        stdout
    };
    let found = route("nccl-logger");
    assert!(
        found.contains("nccl 2.27.3 (table swept on 2.18.1,2.19.3)"),
        "{found}"
    );
    assert!(
        found.lines().any(|l| l.starts_with("WARN")
            && l.contains("swept on NCCL 2.18.1,2.19.3 but this process runs NCCL 2.27.3")),
        "{found}"
    );
    let unknown = route("own-logger");
    assert!(
        unknown.contains("nccl unknown (table swept on 2.18.1,2.19.3)"),
        "{unknown}"
    );
    assert!(!unknown.lines().any(|l| l.starts_with("WARN")), "{unknown}");
}
