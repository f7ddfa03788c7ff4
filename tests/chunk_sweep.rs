//! Chunk sizes end to end: a sweep the plugin ran at a chunk
//! (`DYNCC_SWEEP_CHUNK`, `dyncc plan --chunks`) compiles into a decision
//! that forces it, and the built plugin, driven through NCCL's symbol by a
//! stand-in (tests/c/chunk.c), answers `getChunkSize` with that chunk.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::plugin_c::{compile_c, plugin_lib, HARNESS_LINK_FLAGS};
use crate::support::cli::{dyncc, root};
use crate::support::tools::{require_c_compiler, require_tool};

/// The sweep in tests/data/chunk-sweep: nccl-tests logs of `dyncc plan
/// --chunks 64K` runs, with the plugin's init lines as it printed them.
fn sample() -> PathBuf {
    root().join("tests/data/chunk-sweep")
}

/// tests/c/chunk.c, compiled into `dir`.
fn standin(dir: &Path) -> PathBuf {
    let exe = dir.join("chunk");
    compile_c(
        require_c_compiler(),
        &["-O1"],
        "chunk.c",
        &exe,
        &HARNESS_LINK_FLAGS,
    );
    exe
}

/// Runs the stand-in (tuner `ver`) with `env` and the queries; its stdout.
fn ask(exe: &Path, ver: u32, env: &[(&str, &str)], queries: &[&str]) -> String {
    let mut cmd = Command::new(exe);
    cmd.env("DYNCC_CHUNK_LIB", plugin_lib())
        .env_remove("DYNCC_TABLE")
        .env_remove("DYNCC_SWEEP_CHUNK")
        .env_remove("DYNCC_TRACE")
        .env_remove("DYNCC_EXPLORE")
        .env_remove("DYNCC_INIT_RANKS")
        .env_remove("DYNCC_INIT_NODES")
        .envs(env.iter().copied())
        .arg(ver.to_string())
        .args(queries);
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "chunk stand-in failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The plugin's sweep init line in `text` (NCCL INFO prefix cut), if any.
fn sweep_line(text: &str) -> Option<&str> {
    text.lines().find_map(|l| {
        let at = l.find("dyncc: sweep chunk=")?;
        Some(&l[at..])
    })
}

/// With DYNCC_SWEEP_CHUNK and no table, the built .so answers NCCL's
/// getChunkSize (v6 and v7) with the chunk on every collective, rounded
/// down to the protocol's grain, and leaves the cost table and channels
/// alone; its init line says the chunk. With a table too, or malformed,
/// it says so and NCCL's chunk stays.
#[test]
fn the_sweep_chunk_makes_the_built_plugin_answer_it_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let exe = standin(dir.path());
    // AllReduce Ring/Simple, AllGather PAT/LL, ReduceScatter Tree/LL128
    // (NCCL's own chunk in *chunkSize last).
    let q = [
        "4:1048576:1:2:131072",
        "2:4096:6:0:2048",
        "3:65536:0:1:7680",
    ];
    for ver in [6, 7] {
        let out = ask(&exe, ver, &[("DYNCC_SWEEP_CHUNK", "64K")], &q);
        assert!(out.contains("rc 0 ctx set"), "{out}");
        let line = sweep_line(&out).unwrap_or_else(|| panic!("no sweep line:\n{out}"));
        assert!(line.starts_with("dyncc: sweep chunk=65536 "), "{line}");
        assert!(line.contains("LL 65536 LL128 61440 Simple 65536"), "{line}");
        for (want, what) in [
            ("chunk 4 1048576 1 2 131072 -> 65536 rc 0", "Ring/Simple"),
            ("chunk 2 4096 6 0 2048 -> 65536 rc 0", "PAT/LL"),
            (
                "chunk 3 65536 0 1 7680 -> 61440 rc 0",
                "Tree/LL128 on its grain",
            ),
        ] {
            assert!(out.contains(want), "v{ver} {what}: {out}");
        }
        assert_eq!(
            out.matches("cell -1 nChannels 0").count(),
            3,
            "v{ver}: algorithm, protocol and channels left to NCCL: {out}"
        );
    }
    // Both set, or not a size: a WARN, and NCCL's own chunks stay.
    let tbl = dir.path().join("x.tbl");
    let tbl = tbl.to_str().unwrap();
    for (env, says) in [
        (
            vec![("DYNCC_SWEEP_CHUNK", "64K"), ("DYNCC_TABLE", tbl)],
            "are both set",
        ),
        (vec![("DYNCC_SWEEP_CHUNK", "64 KiB")], "is not a chunk size"),
    ] {
        let out = ask(&exe, 6, &env, &q);
        assert!(
            out.lines()
                .any(|l| l.starts_with("WARN ") && l.contains(says)),
            "{env:?}: {out}"
        );
        assert!(out.contains("rc 0 "), "never an error: {out}");
        assert!(
            out.contains("-> 131072 rc 0") && out.contains("-> 7680 rc 0"),
            "{out}"
        );
        assert!(sweep_line(&out).is_none(), "{out}");
    }
}

/// The sample sweep's init lines are the ones the plugin prints now for
/// the same chunk and communicator (so the ingest is tested on the real
/// string): regenerate tests/data/chunk-sweep (see its README) when this
/// fails after a change to the line.
#[test]
fn the_sample_sweeps_init_lines_are_the_plugins() {
    let dir = tempfile::tempdir().unwrap();
    let exe = standin(dir.path());
    let mut seen = 0;
    for f in walk(&sample()) {
        let text = std::fs::read_to_string(&f).unwrap();
        let Some(line) = sweep_line(&text) else {
            continue;
        };
        let bytes = line["dyncc: sweep chunk=".len()..]
            .split(' ')
            .next()
            .unwrap()
            .to_string();
        let out = ask(
            &exe,
            6,
            &[
                ("DYNCC_SWEEP_CHUNK", bytes.as_str()),
                ("DYNCC_INIT_RANKS", "16"),
                ("DYNCC_INIT_NODES", "2"),
            ],
            &[],
        );
        // The plugin's version ends the line: a release moves it, not the
        // chunk's words.
        let cut = |l: &str| l.split("; plugin ").next().unwrap_or(l).to_string();
        assert_eq!(
            Some(cut(line)),
            sweep_line(&out).map(cut),
            "{}",
            f.display()
        );
        seen += 1;
    }
    assert!(seen > 0, "no sweep lines in {}", sample().display());
}

/// Every file under `dir`, sorted.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "log") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// Runs `dyncc ARGS`; its stdout (the test fails on a non-zero exit).
fn dyncc_ok(args: &[&std::ffi::OsStr]) -> String {
    let out = dyncc().args(args).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "dyncc {args:?} failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The sample sweep compiles into a table that forces Ring/Simple at the
/// 64K chunk where the chunk runs were faster; explain and query say the
/// chunk; and the built plugin, loaded with that table, answers
/// getChunkSize with 65536 there (v6 and v7) while forcing the cell, and
/// leaves NCCL's chunk for another protocol.
#[test]
fn a_chunk_sweep_compiles_into_chunk_decisions_the_plugin_answers() {
    let dir = tempfile::tempdir().unwrap();
    let tbl = dir.path().join("chunk.tbl");
    let os = |s: &str| std::ffi::OsString::from(s);
    let report = dyncc_ok(&[
        os("compile").as_os_str(),
        sample().as_os_str(),
        os("-o").as_os_str(),
        tbl.as_os_str(),
    ]);
    assert!(
        report.contains("ring/simple/64K"),
        "compile report:\n{report}"
    );
    let explain = dyncc_ok(&[os("explain").as_os_str(), tbl.as_os_str()]);
    assert!(explain.contains("ring/simple/64K"), "explain:\n{explain}");
    let query = dyncc_ok(&[
        os("query").as_os_str(),
        tbl.as_os_str(),
        os("--coll").as_os_str(),
        os("allreduce").as_os_str(),
        os("--bytes").as_os_str(),
        os("1M").as_os_str(),
        os("--nodes").as_os_str(),
        os("2").as_os_str(),
        os("--ranks").as_os_str(),
        os("16").as_os_str(),
        os("--json").as_os_str(),
    ]);
    assert!(query.contains("\"chunk_bytes\": 65536"), "query:\n{query}");
    let exe = standin(dir.path());
    let t = tbl.to_str().unwrap();
    for ver in [6, 7] {
        let out = ask(
            &exe,
            ver,
            &[("DYNCC_TABLE", t)],
            &["4:1048576:1:2:131072", "4:1048576:1:0:4096"],
        );
        assert!(out.contains("rc 0 ctx set"), "{out}");
        // Ring (1) x 3 protocols + Simple (2): cell 5 forced.
        assert!(
            out.contains("collinfo 4 1048576 rc 0 cell 5"),
            "v{ver}: {out}"
        );
        assert!(
            out.contains("chunk 4 1048576 1 2 131072 -> 65536 rc 0"),
            "v{ver}: {out}"
        );
        assert!(
            out.contains("chunk 4 1048576 1 0 4096 -> 4096 rc 0"),
            "v{ver}: another protocol keeps NCCL's chunk: {out}"
        );
    }
}

/// `dyncc plan --chunks` end to end on the fake nccl-tests: the script
/// runs the chunk runs under the built plugin (found as NCCL finds it, on
/// LD_LIBRARY_PATH), their logs carry its init line, and compile reads
/// them into a chunk decision.
#[test]
fn a_planned_chunk_sweep_runs_under_the_plugin_and_compiles() {
    require_tool("bash", "bash");
    let dir = tempfile::tempdir().unwrap();
    let exe = standin(dir.path());
    let libdir = dir.path().join("lib");
    std::fs::create_dir(&libdir).unwrap();
    std::os::unix::fs::symlink(plugin_lib(), libdir.join("libnccl-tuner-dyncc.so")).unwrap();
    let fake = root().join("tests/data/fake-nccl-tests");
    let work = dir.path().join("w");
    std::fs::create_dir(&work).unwrap();
    let plan = dyncc()
        .current_dir(&work)
        .args([
            "plan",
            "--launcher",
            "slurm",
            "--nodes",
            "1,2,4",
            "--gpus-per-node",
            "8",
            "--colls",
            "allreduce",
            "--algos",
            "ring",
            "--protos",
            "ll,simple",
            "--max-bytes",
            "64M",
            "--repeats",
            "2",
            "--chunks",
            "64K",
            "--plugin-dir",
        ])
        .arg(&libdir)
        .arg("--nccl-tests")
        .arg(&fake)
        .args(["-o", "sweep.sh"])
        .output()
        .unwrap();
    assert!(
        plan.status.success(),
        "{}",
        String::from_utf8_lossy(&plan.stderr)
    );
    let path = format!(
        "{}:{}",
        fake.join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let run = Command::new("bash")
        .arg("sweep.sh")
        .current_dir(&work)
        .env("PATH", path)
        .env("FAKE_TUNER_INIT", &exe)
        .env_remove("DYNCC_TABLE")
        .env_remove("DYNCC_SWEEP_CHUNK")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{err}");
    assert!(err.contains("30 ran, 0 failed"), "{err}");
    let logs = work.join("dyncc-sweep/logs");
    let chunk_log = logs.join(
        "allreduce/nodes=2/NCCL_ALGO=Ring/NCCL_PROTO=Simple/channels=default/chunk=65536/repeat=1.log",
    );
    let text = std::fs::read_to_string(&chunk_log).unwrap();
    assert!(
        sweep_line(&text).is_some_and(|l| l.starts_with("dyncc: sweep chunk=65536 ")),
        "{text}"
    );
    let tbl = dir.path().join("planned.tbl");
    let report = dyncc_ok(&[
        std::ffi::OsStr::new("compile"),
        logs.as_os_str(),
        std::ffi::OsStr::new("-o"),
        tbl.as_os_str(),
    ]);
    assert!(report.contains("ring/simple/64K"), "{report}");
    // Without the plugin the chunk runs fail (no init line): nothing is
    // recorded as a chunk NCCL did not run.
    let work2 = dir.path().join("w2");
    std::fs::create_dir(&work2).unwrap();
    std::fs::copy(work.join("sweep.sh"), work2.join("sweep.sh")).unwrap();
    let run = Command::new("bash")
        .arg("sweep.sh")
        .current_dir(&work2)
        .env(
            "PATH",
            format!(
                "{}:{}",
                fake.join("bin").display(),
                std::env::var("PATH").unwrap_or_default()
            ),
        )
        .env_remove("FAKE_TUNER_INIT")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(err.contains("18 ran, 12 failed"), "{err}");
}

/// A `chunk` label that disagrees with the plugin's line in a log is an
/// error naming the file and the line; one that agrees (any spelling)
/// compiles as the log alone does.
#[test]
fn a_chunk_label_that_disagrees_with_the_log_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let tbl = dir.path().join("x.tbl");
    let out = dyncc()
        .arg("compile")
        .arg(sample())
        .args(["--assume", "chunk=256K", "-o"])
        .arg(&tbl)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("chunk contradicts itself")
            && err.contains("chunk=65536/repeat=1.log")
            && err.contains("NCCL INFO line ")
            && err.contains("--assume"),
        "{err}"
    );
    assert!(!tbl.exists(), "nothing written on an error");
    // The path components the plan writes (`chunk=65536/`) agree with the
    // plugin's line; a manifest saying 64K for those files agrees too.
    let copy = dir.path().join("sweep");
    let cp = Command::new("cp")
        .arg("-r")
        .arg(sample())
        .arg(&copy)
        .status()
        .unwrap();
    assert!(cp.success());
    let manifest = copy.join("m.csv");
    std::fs::write(&manifest, "path,chunk\n**/chunk=65536/*.log,64K\n").unwrap();
    let out = dyncc()
        .arg("compile")
        .arg(copy.join("allreduce"))
        .arg("--manifest")
        .arg(&manifest)
        .arg("-o")
        .arg(&tbl)
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{report}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(report.contains("ring/simple/64K"), "{report}");
}

/// `diff` and `plot --diff` show the chunk a table gained: the sample
/// sweep without its chunk runs compiles into a table with none; against
/// the whole sweep's table, `dyncc diff` names the chunked decision (text
/// and `--json`) and the change map's tooltips name it.
#[test]
fn diff_and_plot_name_the_chunk_a_table_gained() {
    let dir = tempfile::tempdir().unwrap();
    let plain_sweep = dir.path().join("plain-sweep");
    let mut copied = 0;
    for f in walk(&sample()) {
        let rel = f.strip_prefix(sample()).unwrap();
        if rel
            .components()
            .any(|c| c.as_os_str().to_string_lossy().starts_with("chunk="))
        {
            continue;
        }
        let to = plain_sweep.join(rel);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(&f, &to).unwrap();
        copied += 1;
    }
    assert!(
        copied > 0,
        "no logs without a chunk in {}",
        sample().display()
    );
    let (plain, chunked) = (dir.path().join("plain.tbl"), dir.path().join("chunk.tbl"));
    let os = |s: &str| std::ffi::OsString::from(s);
    for (sweep, tbl) in [(&plain_sweep, &plain), (&sample(), &chunked)] {
        dyncc_ok(&[
            os("compile").as_os_str(),
            sweep.as_os_str(),
            os("-o").as_os_str(),
            tbl.as_os_str(),
        ]);
    }
    let diff = |json: bool| {
        let mut cmd = dyncc();
        cmd.arg("diff").arg(&plain).arg(&chunked);
        if json {
            cmd.arg("--json");
        }
        let out = cmd.output().unwrap();
        // 1: the tables decide differently.
        assert_eq!(out.status.code(), Some(1), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let text = diff(false);
    assert!(text.contains("ring/simple/64K"), "diff:\n{text}");
    let json = diff(true);
    assert!(
        json.contains("\"chunk_bytes\": 65536"),
        "diff --json:\n{json}"
    );
    let svg = dir.path().join("changes.svg");
    dyncc_ok(&[
        os("plot").as_os_str(),
        os("--diff").as_os_str(),
        plain.as_os_str(),
        chunked.as_os_str(),
        os("-o").as_os_str(),
        svg.as_os_str(),
    ]);
    let drawn = std::fs::read_to_string(&svg).unwrap();
    assert!(
        drawn.contains("ring/simple/64K"),
        "plot --diff drew no chunk"
    );
}
