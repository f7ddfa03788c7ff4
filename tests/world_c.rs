//! The plugin in a simulated production round: tests/c/world.c, a
//! stand-in NCCL (sharing tests/c/standin_core.h with standin.c) whose
//! collective times come from the `truth.csv` that `dyncc simulate`
//! writes. It drives several ranks of one communicator through the tuner
//! and the profiler in NCCL's order and threads, and says per
//! (collective, size) what NCCL's default, what ran and the best setting
//! cost there. [`run_world`] is the driver other tests (the end-to-end
//! learning loop) reuse.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use dyncc_tables::trace::Source;
use dyncc_tables::{
    Algo, Basis, Coll, ContextSpec, Decision, Proto, RegBuff, Rule, Setting, TableBuilder, Trace,
};

use crate::plugin_c::{compile_c, plugin_lib, HARNESS_LINK_FLAGS};
use crate::support::cli::dyncc;
use crate::support::tools::require_c_compiler;

/// One `(collective, size)` of a round: times in microseconds, noise-free.
#[derive(Debug, Clone, PartialEq)]
pub struct WorldShape {
    /// The truth's name of the collective (`allreduce`, ...).
    pub coll: String,
    /// Bytes, as NCCL passes them to the tuner.
    pub n_bytes: u64,
    /// NCCL's own choice there.
    pub nccl_us: f64,
    /// Mean over the round's calls of what rank 0 ran (the table's
    /// answer, or exploration's).
    pub table_us: f64,
    /// The fastest setting the truth holds there.
    pub best_us: f64,
}

/// The round's totals: sums over every call of noise-free times (us).
#[derive(Debug, Clone, PartialEq)]
pub struct WorldSummary {
    /// Collectives run (per rank).
    pub calls: u64,
    /// Calls where some rank's answer (forced cell or channel count)
    /// differed from rank 0's.
    pub disagreements: u64,
    /// What rank 0 ran.
    pub ran_us: f64,
    /// NCCL's own choice at every call.
    pub nccl_us: f64,
    /// The truth's best setting at every call.
    pub best_us: f64,
}

/// What one `world` run printed.
#[derive(Debug, Clone)]
pub struct WorldRound {
    /// Per (collective, size), in the order run (collective, then size).
    pub shapes: Vec<WorldShape>,
    pub summary: WorldSummary,
    /// Everything printed (the plugin's INFO/WARN lines among it).
    pub stdout: String,
}

impl WorldRound {
    /// Parses `world`'s standard output.
    pub fn parse(stdout: String) -> WorldRound {
        let mut shapes = Vec::new();
        let mut summary = None;
        for l in stdout.lines() {
            let f: Vec<&str> = l.split_whitespace().collect();
            match f.as_slice() {
                ["shape", coll, n_bytes, "nccl_us", nccl, "table_us", table, "best_us", best] => {
                    shapes.push(WorldShape {
                        coll: (*coll).to_string(),
                        n_bytes: n_bytes.parse().unwrap(),
                        nccl_us: nccl.parse().unwrap(),
                        table_us: table.parse().unwrap(),
                        best_us: best.parse().unwrap(),
                    });
                }
                ["summary", "calls", calls, "disagreements", d, "ran_us", ran, "nccl_us", nccl, "best_us", best] =>
                {
                    summary = Some(WorldSummary {
                        calls: calls.parse().unwrap(),
                        disagreements: d.parse().unwrap(),
                        ran_us: ran.parse().unwrap(),
                        nccl_us: nccl.parse().unwrap(),
                        best_us: best.parse().unwrap(),
                    });
                }
                _ => {}
            }
        }
        let summary = summary.unwrap_or_else(|| panic!("world printed no summary line:\n{stdout}"));
        WorldRound {
            shapes,
            summary,
            stdout,
        }
    }

    /// The plugin's WARN lines.
    pub fn warns(&self) -> Vec<&str> {
        self.stdout
            .lines()
            .filter(|l| l.starts_with("WARN"))
            .collect()
    }

    /// Share of the gain over NCCL's default that the round captured:
    /// `(nccl - ran) / (nccl - best)` (1 when there is no gain to take).
    pub fn captured(&self) -> f64 {
        let s = &self.summary;
        if s.nccl_us <= s.best_us {
            return 1.0;
        }
        (s.nccl_us - s.ran_us) / (s.nccl_us - s.best_us)
    }
}

/// tests/c/world.c, compiled once per test process into Cargo's scratch
/// directory for integration tests (renamed into place, so concurrent
/// test processes never run a half-written file).
pub fn world_exe() -> &'static Path {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| {
        let cc = require_c_compiler();
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("c-tests");
        std::fs::create_dir_all(&dir).unwrap();
        let exe = dir.join("world");
        let tmp = dir.join(format!("world.{}.tmp", std::process::id()));
        let mut link = HARNESS_LINK_FLAGS.to_vec();
        link.extend(["-lm", "-pthread"]);
        compile_c(cc, &["-O1", "-pthread"], "world.c", &tmp, &link);
        std::fs::rename(&tmp, &exe).unwrap();
        exe
    })
}

/// The `world` command for a round on `nnodes` nodes of `ppn` ranks,
/// `calls` calls per (collective, size) of `truth`, with `env` set on top
/// of a clean one (no DYNCC_* or WORLD_* variables from the caller's).
pub fn world_command(
    truth: &Path,
    nnodes: u32,
    ppn: u32,
    calls: u32,
    env: &[(&str, &str)],
) -> Command {
    let mut cmd = Command::new(world_exe());
    cmd.arg(truth)
        .args([nnodes.to_string(), ppn.to_string(), calls.to_string()])
        .env("DYNCC_TEST_PLUGIN_LIB", plugin_lib());
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy();
        if (k.starts_with("DYNCC_") && k != "DYNCC_TEST_PLUGIN_LIB") || k.starts_with("WORLD_") {
            cmd.env_remove(&*k);
        }
    }
    cmd.env_remove("SLURM_JOB_ID");
    cmd.envs(env.iter().copied());
    cmd
}

/// Runs a round (see [`world_command`]) that must succeed, and parses it.
pub fn run_world(
    truth: &Path,
    nnodes: u32,
    ppn: u32,
    calls: u32,
    env: &[(&str, &str)],
) -> WorldRound {
    let out = world_command(truth, nnodes, ppn, calls, env)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "world {} {nnodes} {ppn} {calls} {env:?}: {}\n{stdout}\n{}",
        truth.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    WorldRound::parse(stdout)
}

/// The NCCL version `dyncc simulate`'s logs claim (2.28.7): a world that
/// claims it too draws no version-mismatch WARN from the plugin.
pub const SIMULATED_NCCL: &str = "22807";

/// `dyncc simulate` into `out`: AllReduce, 1 KiB..64 MiB, on `nodes`.
pub fn simulate(out: &Path, nodes: &str, repeats: &str) {
    simulate_colls(out, nodes, "allreduce", repeats);
}

/// `dyncc simulate` into `out` (H100 profile): `colls`, 1 KiB..64 MiB, on
/// `nodes`.
pub fn simulate_colls(out: &Path, nodes: &str, colls: &str, repeats: &str) {
    let st = dyncc()
        .args(["simulate", "-o"])
        .arg(out)
        .args(["--profile", "h100", "--nodes", nodes, "--colls", colls])
        .args(["--min-bytes", "1KiB", "--max-bytes", "64MiB"])
        .args(["--repeats", repeats])
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "dyncc simulate: {}",
        String::from_utf8_lossy(&st.stderr)
    );
}

/// `dyncc compile INPUTS... -o out`.
pub fn compile(inputs: &[PathBuf], out: &Path) {
    let st = dyncc()
        .arg("compile")
        .args(inputs)
        .arg("-o")
        .arg(out)
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "dyncc compile: {}",
        String::from_utf8_lossy(&st.stderr)
    );
}

/// The trace files in `dir`.
pub fn trace_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "trace"))
        .collect();
    v.sort();
    v
}

/// Ranks per node of the h100 profile.
pub const PPN: u32 = 8;

/// No table: every call runs NCCL's own choice, which the trace records
/// (chosen by no table) with the truth's time (the noise averages out).
#[test]
fn without_a_table_every_call_runs_nccls_default() {
    let dir = tempfile::tempdir().unwrap();
    let sim = dir.path().join("sim");
    simulate(&sim, "4", "1");
    let truth = sim.join("truth.csv");
    for ranks in ["2", "3"] {
        let traces = dir.path().join(format!("traces-{ranks}"));
        std::fs::create_dir(&traces).unwrap();
        let r = run_world(
            &truth,
            4,
            PPN,
            200,
            &[
                ("WORLD_RANKS", ranks),
                ("WORLD_NCCL_VERSION", SIMULATED_NCCL),
                ("DYNCC_TRACE", traces.to_str().unwrap()),
                // Every call recorded (the mask is never lowered), so
                // rank 0's records can be checked against every call.
                ("DYNCC_TRACE_ALL", "1"),
            ],
        );
        let s = &r.summary;
        assert_eq!(r.shapes.len(), 17, "1 KiB..64 MiB: {:?}", r.shapes);
        assert_eq!(s.calls, 17 * 200);
        assert_eq!(s.disagreements, 0);
        assert_eq!(s.ran_us, s.nccl_us, "{}", r.stdout);
        for sh in &r.shapes {
            assert_eq!(sh.table_us, sh.nccl_us, "{sh:?}");
        }
        // The world is worth tuning: NCCL's default is not always best.
        assert!(s.best_us < s.nccl_us * 0.99, "{s:?}");
        assert!(r.warns().is_empty(), "{}", r.stdout);
        let files = trace_files(&traces);
        assert_eq!(files.len(), 1, "{files:?}");
        let bytes = std::fs::read(&files[0]).unwrap();
        let t = Trace::from_bytes(&bytes).unwrap();
        let mut counted = 0;
        for rec in t.records() {
            // No table: the traced tuner still journals every answer as
            // NCCL's, so rank 0 says NCCL chose (it was `unknown`, no
            // context to link to, before).
            assert_eq!(rec.source, Source::Nccl, "{rec:?}");
            let sh = r
                .shapes
                .iter()
                .find(|sh| sh.n_bytes == rec.n_bytes)
                .unwrap_or_else(|| panic!("{rec:?} ran no shape"));
            // ln noise of sd 0.03 over 200 calls: the mean is within 1 %.
            let mean_us = (rec.sum_ln / rec.count as f64).exp() / 1000.0;
            assert!(
                (mean_us / sh.nccl_us - 1.0).abs() < 0.01,
                "{rec:?}: {mean_us} us, truth {sh:?}"
            );
            counted += rec.count;
        }
        assert_eq!(counted, s.calls, "rank 0 recorded every call");
    }
}

/// A table compiled from a sweep at the world's own shape beats NCCL's
/// default there, and every rank makes the same choice.
#[test]
fn a_table_from_the_same_shape_beats_nccl_and_ranks_agree() {
    let dir = tempfile::tempdir().unwrap();
    let sim = dir.path().join("sim");
    simulate(&sim, "4", "3");
    let table = dir.path().join("t.tbl");
    compile(std::slice::from_ref(&sim), &table);
    for ranks in ["2", "3"] {
        let r = run_world(
            &sim.join("truth.csv"),
            4,
            PPN,
            100,
            &[
                ("WORLD_RANKS", ranks),
                ("WORLD_NCCL_VERSION", SIMULATED_NCCL),
                ("DYNCC_TABLE", table.to_str().unwrap()),
            ],
        );
        let s = &r.summary;
        assert_eq!(s.disagreements, 0, "{}", r.stdout);
        assert!(s.ran_us < s.nccl_us, "{s:?}");
        assert!(r.warns().is_empty(), "{}", r.stdout);
        eprintln!(
            "in-sample table, {ranks} ranks: ran {:.1} us, NCCL {:.1} us, best {:.1} us: {:.0} % of the gain",
            s.ran_us,
            s.nccl_us,
            s.best_us,
            100.0 * r.captured()
        );
    }
}

/// A table compiled from a sparse sweep (1, 2, 8 nodes) in rounds at 4
/// nodes with `DYNCC_EXPLORE=0.02`, one per job (each job its own
/// commHash): ranks agree on every call (2 and 3 ranks); the trace records
/// explored calls; a job explores a shape on every call there or none (the
/// cells are drawn per communicator at init); and exploration's cost,
/// against the same round (same noise seed) without it, averaged over the
/// jobs, is within the budget F (what exploration promises: the expected
/// extra time, over communicators, at most F).
#[test]
fn exploring_at_a_skipped_node_count_agrees_records_and_stays_in_budget() {
    let dir = tempfile::tempdir().unwrap();
    let sim = dir.path().join("sim");
    simulate(&sim, "1,2,4,8", "3");
    let table = dir.path().join("sparse.tbl");
    let counts = ["n1", "n2", "n8"].map(|n| sim.join("h100").join(n));
    compile(&counts, &table);
    let truth = sim.join("truth.csv");
    let calls = 500;
    let jobs = 8;
    let (mut extra_sum, mut explored_jobs) = (0.0, 0);
    for job in 0..jobs {
        let job = job.to_string();
        let base_env = [
            ("WORLD_SEED", "7"),
            ("WORLD_NCCL_VERSION", SIMULATED_NCCL),
            ("DYNCC_TABLE", table.to_str().unwrap()),
            ("WORLD_JOB", job.as_str()),
        ];
        let plain = run_world(&truth, 4, PPN, calls, &base_env);
        assert_eq!(plain.summary.disagreements, 0);
        for ranks in ["2", "3"] {
            let traces = dir.path().join(format!("traces-{job}-{ranks}"));
            std::fs::create_dir(&traces).unwrap();
            let mut env = base_env.to_vec();
            env.extend([
                ("WORLD_RANKS", ranks),
                ("DYNCC_EXPLORE", "0.02"),
                ("DYNCC_TRACE", traces.to_str().unwrap()),
            ]);
            let r = run_world(&truth, 4, PPN, calls, &env);
            assert_eq!(r.summary.disagreements, 0, "{ranks} ranks: {}", r.stdout);
            assert!(r.warns().is_empty(), "{}", r.stdout);
            let files = trace_files(&traces);
            assert_eq!(files.len(), 1, "{files:?}");
            let bytes = std::fs::read(&files[0]).unwrap();
            let t = Trace::from_bytes(&bytes).unwrap();
            let mut explored_at = std::collections::BTreeMap::<u64, u64>::new();
            for rec in t.records().filter(|rec| rec.source == Source::Explore) {
                *explored_at.entry(rec.n_bytes).or_default() += rec.count;
            }
            for (&n_bytes, &n) in &explored_at {
                assert_eq!(
                    n,
                    u64::from(calls),
                    "{n_bytes}: {n} of {calls} calls explored"
                );
            }
            let extra = r.summary.ran_us / plain.summary.ran_us - 1.0;
            eprintln!(
                "job {job}, {ranks} ranks, DYNCC_EXPLORE=0.02: {} sizes explored, round {:.1} us vs {:.1} us without: {:+.3} %",
                explored_at.len(),
                r.summary.ran_us,
                plain.summary.ran_us,
                100.0 * extra
            );
            if ranks == "2" {
                extra_sum += extra;
                explored_jobs += usize::from(!explored_at.is_empty());
            }
        }
    }
    assert!(explored_jobs > 0, "no job explored anything");
    let mean = extra_sum / f64::from(jobs);
    eprintln!(
        "{explored_jobs} of {jobs} jobs explored; mean cost {:+.3} % of a round",
        100.0 * mean
    );
    assert!(
        mean <= 0.02,
        "exploration cost {:+.3} % of a round on average",
        100.0 * mean
    );
}

/// The same WORLD_SEED draws the same GPU times (so rounds compare), and
/// another seed other ones.
#[test]
fn the_same_seed_draws_the_same_times() {
    let dir = tempfile::tempdir().unwrap();
    let sim = dir.path().join("sim");
    simulate(&sim, "2", "1");
    let truth = sim.join("truth.csv");
    let sums = |name: &str, seed: &str| -> Vec<(u64, f64)> {
        let traces = dir.path().join(name);
        std::fs::create_dir(&traces).unwrap();
        run_world(
            &truth,
            2,
            PPN,
            20,
            &[
                ("WORLD_SEED", seed),
                ("DYNCC_TRACE", traces.to_str().unwrap()),
            ],
        );
        let bytes = std::fs::read(&trace_files(&traces)[0]).unwrap();
        let t = Trace::from_bytes(&bytes).unwrap();
        let mut v: Vec<(u64, f64)> = t.records().map(|r| (r.n_bytes, r.sum_ln)).collect();
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        v
    };
    let a = sums("a", "5");
    assert_eq!(a.len(), 17);
    assert_eq!(a, sums("b", "5"));
    assert_ne!(a, sums("c", "6"));
}

/// A table forcing a setting the world has no time for (Ring/Simple on 2
/// channels: the sweep pins 4, 8, 16, 32) stops the round with exit 3
/// and a message naming it, rather than inventing a time.
#[test]
fn a_forced_setting_the_truth_lacks_stops_the_round() {
    let dir = tempfile::tempdir().unwrap();
    let sim = dir.path().join("sim");
    simulate(&sim, "2", "1");
    let mut b = TableBuilder::new();
    b.meta("platform", "h100");
    let spec = ContextSpec {
        coll: Coll::AllReduce,
        nodes: (2, 2),
        ppn: (PPN, PPN),
        max_pipe_ops: 0,
        reg_buff: RegBuff::Any,
    };
    let rule = Rule {
        last_bucket: 255,
        decision: Decision::Force(Setting::new(Algo::Ring, Proto::Simple).with_channels(2)),
        basis: Basis::Measured,
        gain: 1.2,
    };
    b.context(spec, &[rule]).unwrap();
    let table = dir.path().join("two-channels.tbl");
    std::fs::write(&table, b.build().unwrap()).unwrap();
    let out: Output = world_command(
        &sim.join("truth.csv"),
        2,
        PPN,
        5,
        &[("DYNCC_TABLE", table.to_str().unwrap())],
    )
    .output()
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("forced ring/simple on 2 channels") && stderr.contains("does not hold"),
        "{stderr}"
    );
}

/// Chunk sizes in the world: a table compiled from a simulated chunk sweep
/// (Broadcast on 8 nodes, `dyncc simulate --chunks`) answers getChunkSize,
/// the world runs the truth row at the chunk answered, and the round is
/// faster than with the table compiled from the same sweep's runs at
/// NCCL's chunk alone; every rank answers alike. On a truth without those
/// chunks the same table stops the round (exit 3): the world holds only
/// what was simulated.
#[test]
fn a_chunk_table_runs_its_chunks_and_beats_the_table_without_them() {
    let dir = tempfile::tempdir().unwrap();
    let sim = |out: &Path, chunks: &[&str]| {
        let st = dyncc()
            .args(["simulate", "-o"])
            .arg(out)
            .args(["--profile", "h100", "--nodes", "8", "--colls", "broadcast"])
            .args([
                "--min-bytes",
                "1MiB",
                "--max-bytes",
                "64MiB",
                "--channels",
                "auto",
            ])
            .args(["--repeats", "2"])
            .args(chunks)
            .output()
            .unwrap();
        assert!(
            st.status.success(),
            "{}",
            String::from_utf8_lossy(&st.stderr)
        );
    };
    let (chunked, plain) = (dir.path().join("chunked"), dir.path().join("plain"));
    sim(&chunked, &["--chunks", "64K,128K,256K"]);
    sim(&plain, &[]);
    let (t_chunk, t_plain) = (dir.path().join("chunk.tbl"), dir.path().join("plain.tbl"));
    compile(std::slice::from_ref(&chunked), &t_chunk);
    compile(std::slice::from_ref(&plain), &t_plain);
    let truth = chunked.join("truth.csv");
    let round = |tbl: &Path| {
        run_world(
            &truth,
            8,
            PPN,
            20,
            &[
                ("WORLD_RANKS", "3"),
                ("WORLD_NCCL_VERSION", SIMULATED_NCCL),
                ("DYNCC_TABLE", tbl.to_str().unwrap()),
            ],
        )
    };
    let (c, p) = (round(&t_chunk), round(&t_plain));
    assert_eq!(c.summary.disagreements, 0, "{}", c.stdout);
    assert!(c.warns().is_empty(), "{}", c.stdout);
    assert!(p.summary.ran_us < p.summary.nccl_us, "{:?}", p.summary);
    assert!(
        c.summary.ran_us < 0.97 * p.summary.ran_us,
        "chunks {:?} vs none {:?}",
        c.summary,
        p.summary
    );
    eprintln!(
        "chunk world, 8 nodes broadcast: NCCL {:.1} us, table without chunks {:.1} us, with chunks {:.1} us, best {:.1} us",
        c.summary.nccl_us, p.summary.ran_us, c.summary.ran_us, c.summary.best_us
    );
    let out = world_command(
        &plain.join("truth.csv"),
        8,
        PPN,
        2,
        &[
            ("WORLD_NCCL_VERSION", SIMULATED_NCCL),
            ("DYNCC_TABLE", t_chunk.to_str().unwrap()),
        ],
    )
    .output()
    .unwrap();
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("at chunk"));
}
