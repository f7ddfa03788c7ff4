//! `DYNCC_EXPLORE` through the built plugin: tests/c/explore.c, a stand-in
//! NCCL whose two ranks of one communicator (8 ranks per node, on a node
//! count the test picks, NCCL's commHash the test picks) each call
//! getCollInfo on their own thread for the same sequence of collectives,
//! with the differences real ranks' sequences have (extra calls on one
//! rank, a context created late, regBuff per rank); it compares the two
//! ranks' cost tables and channel counts per common call and prints rank
//! 0's answers, which the test compares with the table's own. Over many
//! communicators, the shares that try each plan candidate are the chances
//! `dyncc query` prints.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use dyncc_tables::{
    size_bucket, Algo, Basis, Coll, ContextSpec, Decision, Proto, RegBuff, Rule, Setting, Table,
    TableBuilder,
};

use crate::plugin_c::{compile_c, plugin_lib, HARNESS_LINK_FLAGS};
use crate::support::tools::require_c_compiler;

fn force(algo: Algo, proto: Proto, channels: u8) -> Decision {
    Decision::Force(Setting::new(algo, proto).with_channels(channels))
}

fn rule(last: u64, decision: Decision, basis: Basis, gain: f32) -> Rule {
    Rule {
        last_bucket: if last == u64::MAX {
            255
        } else {
            size_bucket(last)
        },
        decision,
        basis,
        gain,
    }
}

fn spec(coll: Coll, nodes: (u32, u32)) -> ContextSpec {
    ContextSpec {
        coll,
        nodes,
        ppn: (8, 8),
        max_pipe_ops: 0,
        reg_buff: RegBuff::Any,
    }
}

/// AllReduce measured at 4 nodes (Ring/LL128 to 4 KiB, Tree/LL128 -- which
/// the stand-in's NCCL marks unavailable -- to 64 KiB, Ring/Simple on 8
/// channels to 1 MiB, default above) and interpolated at 5-7 nodes
/// (Tree/LL to 1 KiB with gain 1.1, Ring/LL to 4 KiB with gain 1.6, above
/// the loss bound, default above). AllGather measured only at 4 nodes.
/// ReduceScatter measured only at 4 nodes with registered buffers (gated
/// to `regBuff != 0`).
/// The table carries the exploration share `share` (`explore_share`,
/// what `dyncc compile --explore` writes).
fn explore_table(share: &str) -> Vec<u8> {
    explore_table_with(share, &[])
}

/// [`explore_table`] with an exploration plan (format 1.1).
fn explore_table_with(share: &str, plan: &[dyncc_tables::PlanCandidate]) -> Vec<u8> {
    let mut b = TableBuilder::new();
    b.meta("platform", "explore-standin");
    b.meta(dyncc_tables::META_EXPLORE, share);
    b.context(
        spec(Coll::AllReduce, (4, 4)),
        &[
            rule(
                4096,
                force(Algo::Ring, Proto::LL128, 4),
                Basis::Measured,
                1.2,
            ),
            rule(
                65536,
                force(Algo::Tree, Proto::LL128, 0),
                Basis::Measured,
                1.3,
            ),
            rule(
                1 << 20,
                force(Algo::Ring, Proto::Simple, 8),
                Basis::Measured,
                1.1,
            ),
            rule(u64::MAX, Decision::Default, Basis::Measured, 1.0),
        ],
    )
    .unwrap();
    b.context(
        spec(Coll::AllReduce, (5, 7)),
        &[
            rule(
                1024,
                force(Algo::Tree, Proto::LL, 2),
                Basis::Interpolated,
                1.1,
            ),
            rule(
                4096,
                force(Algo::Ring, Proto::LL, 0),
                Basis::Interpolated,
                1.6,
            ),
            rule(u64::MAX, Decision::Default, Basis::Interpolated, 1.0),
        ],
    )
    .unwrap();
    b.context(
        spec(Coll::AllGather, (4, 4)),
        &[rule(
            u64::MAX,
            force(Algo::Ring, Proto::Simple, 0),
            Basis::Measured,
            1.2,
        )],
    )
    .unwrap();
    b.context(
        ContextSpec {
            reg_buff: RegBuff::Only1,
            ..spec(Coll::ReduceScatter, (4, 4))
        },
        &[rule(
            u64::MAX,
            force(Algo::Ring, Proto::LL, 0),
            Basis::Measured,
            1.2,
        )],
    )
    .unwrap();
    b.plan(plan);
    b.build().unwrap()
}

struct Stand {
    _dir: tempfile::TempDir,
    exe: PathBuf,
    table: PathBuf,
}

impl Stand {
    fn new(share: &str) -> Stand {
        Stand::with_table(explore_table(share))
    }

    fn with_table(bytes: Vec<u8>) -> Stand {
        let cc = require_c_compiler();
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("explore");
        let mut link = HARNESS_LINK_FLAGS.to_vec();
        link.push("-pthread");
        compile_c(cc, &["-O1", "-pthread"], "explore.c", &exe, &link);
        let table = dir.path().join("explore.tbl");
        std::fs::write(&table, bytes).unwrap();
        Stand {
            _dir: dir,
            exe,
            table,
        }
    }

    fn run(&self, nodes: u64, calls: u32, explore: Option<&str>) -> Run {
        self.run_as(nodes, calls, explore, COMM_ID, "same")
    }

    /// [`Stand::run`] for a communicator `comm_id` whose ranks' call
    /// sequences differ as `scenario` says (see tests/c/explore.c).
    fn run_as(
        &self,
        nodes: u64,
        calls: u32,
        explore: Option<&str>,
        comm_id: u64,
        scenario: &str,
    ) -> Run {
        self.run_with(nodes, calls, explore, comm_id, scenario, &[])
    }

    /// [`Stand::run_as`] with more environment variables (`EXPLORE_TUNER`).
    fn run_with(
        &self,
        nodes: u64,
        calls: u32,
        explore: Option<&str>,
        comm_id: u64,
        scenario: &str,
        env: &[(&str, &str)],
    ) -> Run {
        let mut cmd = Command::new(&self.exe);
        cmd.args([
            nodes.to_string(),
            calls.to_string(),
            format!("{comm_id:#x}"),
            scenario.to_string(),
        ])
        .env("DYNCC_TEST_PLUGIN_LIB", plugin_lib())
        .env("DYNCC_TABLE", &self.table)
        .env_remove("DYNCC_STRICT")
        .env_remove("DYNCC_NCCL_MISMATCH")
        .env_remove("DYNCC_TRACE")
        .env_remove("DYNCC_EXPLORE");
        if let Some(f) = explore {
            cmd.env("DYNCC_EXPLORE", f);
        }
        cmd.env_remove("EXPLORE_TUNER");
        cmd.envs(env.iter().copied());
        let out = cmd.output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "explore {nodes} {calls} {scenario}: {}\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        Run::parse(&self.table, nodes, stdout)
    }
}

/// Per (collective, bytes): calls, and calls whose answer differed from
/// the table's.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Shape {
    calls: u32,
    explored: u32,
}

struct Run {
    stdout: String,
    shapes: BTreeMap<(u32, u64), Shape>,
    disagreements: u32,
    unavailable_written: u32,
}

/// What the table answers, as the stand-in prints it: (cell, channels).
fn table_answer(t: &Table<'_>, nodes: u64, coll: u32, bytes: u64) -> (i32, i32) {
    match t
        .lookup(
            coll,
            &dyncc_tables::Comm::new(nodes * 8, nodes),
            bytes,
            1,
            0,
        )
        .decision
    {
        // Tree/LL128 is unavailable: NCCL's choice stands.
        Decision::Force(Setting {
            algo: Algo::Tree,
            proto: Proto::LL128,
            ..
        })
        | Decision::Default => (-1, 0),
        Decision::Force(Setting {
            algo,
            proto,
            channels,
            ..
        }) => (algo as i32 * 3 + proto as i32, i32::from(channels)),
    }
}

impl Run {
    fn parse(table: &PathBuf, nodes: u64, stdout: String) -> Run {
        let bytes = std::fs::read(table).unwrap();
        let t = Table::from_bytes(&bytes).unwrap();
        let mut shapes: BTreeMap<(u32, u64), Shape> = BTreeMap::new();
        let (mut disagreements, mut unavailable_written) = (None, None);
        for l in stdout.lines() {
            let f: Vec<&str> = l.split_whitespace().collect();
            match f.as_slice() {
                ["call", coll, bytes, cell, ch] => {
                    let (coll, bytes): (u32, u64) = (coll.parse().unwrap(), bytes.parse().unwrap());
                    let got: (i32, i32) = (cell.parse().unwrap(), ch.parse().unwrap());
                    let s = shapes.entry((coll, bytes)).or_default();
                    s.calls += 1;
                    if got != table_answer(&t, nodes, coll, bytes) {
                        s.explored += 1;
                    }
                }
                ["disagreements", n] => disagreements = Some(n.parse().unwrap()),
                ["unavailable_written", n] => unavailable_written = Some(n.parse().unwrap()),
                _ => {}
            }
        }
        Run {
            shapes,
            disagreements: disagreements.unwrap_or_else(|| panic!("no summary: {stdout}")),
            unavailable_written: unavailable_written.unwrap(),
            stdout,
        }
    }

    fn total_explored(&self) -> u32 {
        self.shapes.values().map(|s| s.explored).sum()
    }

    fn warns(&self) -> Vec<&str> {
        self.stdout
            .lines()
            .filter(|l| l.starts_with("WARN"))
            .collect()
    }
}

const AR: Coll = Coll::AllReduce;
const AG: Coll = Coll::AllGather;
const RS: Coll = Coll::ReduceScatter;
/// The stand-in's default commHash.
const COMM_ID: u64 = 0xE491_0E00_1122_3344;

/// Two ranks of each of 24 communicators (commHashes), F = 0.05 at 6
/// nodes (interpolated): the ranks agree on every call; a communicator
/// explores a shape on every call there or on none (the cell drawn once at
/// init); different communicators draw different shapes; and only where
/// the table could not confirm its answer.
#[test]
fn two_ranks_explore_identically_per_communicator() {
    let s = Stand::new("0.05");
    let mut drawn: BTreeMap<(u32, u64), u32> = BTreeMap::new();
    let ids = 24u64;
    for id in 0..ids {
        let comm = COMM_ID ^ id.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let r = s.run_as(6, 1260, Some("0.05"), comm, "same");
        assert_eq!(r.disagreements, 0, "{}", r.stdout);
        assert_eq!(r.unavailable_written, 0);
        assert!(r.warns().is_empty(), "{}", r.stdout);
        assert!(
            r.stdout
                .contains("exploration 0.05: this communicator explores"),
            "{}",
            r.stdout
        );
        for (&shape, sh) in &r.shapes {
            assert!(
                sh.explored == 0 || sh.explored == sh.calls,
                "{comm:#x} {shape:?}: {sh:?}"
            );
            *drawn.entry(shape).or_default() += u32::from(sh.explored > 0);
        }
    }
    let d = |coll: Coll, bytes: u64| drawn.get(&(coll as u32, bytes)).copied().unwrap_or(0);
    // Unmeasured Tree/LL (gain 1.1, cost bound 0.1): NCCL's own choice,
    // drawn by about half the communicators (F / 0.1).
    for b in [6, 1024] {
        assert!((3..=21).contains(&d(AR, b)), "{b}: {drawn:?}");
    }
    // Unmeasured default: the 4-node context's Ring/Simple/8, drawn by
    // about a fifth (F / 0.25).
    assert!((1..=15).contains(&d(AR, 1 << 20)), "{drawn:?}");
    // No context at 6 nodes: the 4-node AllGather setting, likewise.
    assert!((1..=15).contains(&d(AG, 1024)), "{drawn:?}");
    // The neighbour's setting at 64 KiB is Tree/LL128, which NCCL marked
    // unavailable: never written.
    assert_eq!(d(AR, 65536), 0);
    // Nothing to borrow at 64 MiB (the neighbour leaves NCCL alone).
    assert_eq!(d(AR, 64 << 20), 0);
    // The only ReduceScatter context is gated on regBuff: never lent.
    assert!((0..6).all(|i| d(RS, [6, 1024, 4096, 65536, 1 << 20, 64 << 20][i]) == 0));
}

/// Ranks whose call sequences differ as real ranks' do never disagree:
/// an extra call on one rank (ncclGroupSimulateEnd runs the selection on
/// the calling rank alone), an extra call per shape, a context created
/// after the other rank's has made 37 calls, and numPipeOps varying by
/// call with regBuff differing per rank (NCCL computes it from each rank's
/// own registrations). At F = 0.1, over 8 communicators each, with
/// exploration happening. (The call-count schedule this replaced chose
/// differently on the two ranks in every one of these.)
#[test]
fn ranks_with_different_call_sequences_never_disagree() {
    let s = Stand::new("0.1");
    for scenario in ["extra-one", "extra-per-size", "late", "state"] {
        let mut explored = 0;
        for id in 0..8u64 {
            let comm = COMM_ID ^ (id << 17);
            let r = s.run_as(6, 2520, Some("0.1"), comm, scenario);
            assert_eq!(r.disagreements, 0, "{scenario} {comm:#x}:\n{}", r.stdout);
            assert_eq!(r.unavailable_written, 0, "{scenario}");
            explored += r.total_explored();
        }
        assert!(explored > 0, "{scenario}: nothing explored");
    }
}

/// The same uneven call sequences on a table whose exploration plan (format
/// 1.1) lists candidates at 6 nodes: what the plan makes a communicator
/// try is drawn at init from its id and the table, so the ranks still
/// agree on every call.
#[test]
fn ranks_with_different_call_sequences_never_disagree_on_a_planned_table() {
    use dyncc_tables::{size_bucket, PlanCandidate};
    let at = |bucket: u8, rank: u8, decision: Decision, cost_bound: f32| PlanCandidate {
        // The AllReduce context over 5-7 nodes (the table's second).
        context: 1,
        nodes: 6,
        bucket,
        last_bucket: bucket,
        rank,
        decision,
        gain: 0.1,
        spread: 0.05,
        cost_bound,
    };
    let mib = size_bucket(1 << 20);
    let s = Stand::with_table(explore_table_with(
        "0.1",
        &[
            // Where the table leaves NCCL alone: two settings to try.
            at(mib, 0, force(Algo::Tree, Proto::Simple, 0), 0.1),
            at(mib, 1, force(Algo::Ring, Proto::LL128, 4), 0.3),
            // Where it forces Tree/LL unconfirmed: NCCL's own choice, and a
            // setting tried over the force (the plan may list one there).
            at(size_bucket(1024), 0, Decision::Default, 0.1),
            at(
                size_bucket(1024),
                1,
                force(Algo::Ring, Proto::Simple, 0),
                0.1,
            ),
        ],
    ));
    for scenario in ["extra-one", "extra-per-size", "late", "state"] {
        let mut explored = 0;
        for id in 0..8u64 {
            let comm = COMM_ID ^ (id << 17);
            let r = s.run_as(6, 2520, Some("0.1"), comm, scenario);
            assert_eq!(r.disagreements, 0, "{scenario} {comm:#x}:\n{}", r.stdout);
            assert!(r.warns().is_empty(), "{}", r.stdout);
            explored += r.total_explored();
        }
        assert!(explored > 0, "{scenario}: nothing explored");
    }
}

/// NCCL computes regBuff per rank (src/enqueue.cc:2145 at v2.30.7-1, from
/// the rank's own registration cache; `NCCL_LOCAL_REGISTER` is per
/// process): rank 0 registered its buffers (regBuff 1 on every call), rank
/// 1 did not (0). At 4 nodes the table's ReduceScatter context is gated to
/// `regBuff != 0` and forces Ring/LL: rank 0 ran Ring/LL and rank 1 NCCL's
/// choice on every ReduceScatter call (a hang). Now that forced rule is
/// left to NCCL on both ranks; ungated contexts answer as before. With
/// exploration off and on.
#[test]
fn ranks_registered_differently_never_disagree_on_a_reg_buff_gated_table() {
    let s = Stand::new("0.1");
    for explore in [None, Some("0.1")] {
        let r = s.run_as(4, 2520, explore, COMM_ID, "regbuff");
        assert_eq!(r.disagreements, 0, "{explore:?}:\n{}", r.stdout);
        // Rank 0's answers (regBuff 1) are the table's for every regBuff:
        // ReduceScatter left to NCCL, AllReduce and AllGather forced.
        assert_eq!(r.total_explored(), 0, "{explore:?}: {:?}", r.shapes);
        let rs = r
            .stdout
            .lines()
            .filter(|l| l.starts_with("call 3 "))
            .count();
        let rs_nccl = r
            .stdout
            .lines()
            .filter(|l| l.starts_with("call 3 ") && l.ends_with(" -1 0"))
            .count();
        assert!(rs > 0 && rs == rs_nccl, "{rs} {rs_nccl}:\n{}", r.stdout);
        assert!(
            r.stdout
                .lines()
                .any(|l| l.starts_with("call 2 ") && !l.ends_with(" -1 0")),
            "{}",
            r.stdout
        );
    }
}

/// At 4 nodes every decision is measured: nothing explores.
#[test]
fn a_measured_confirmed_decision_never_explores() {
    let s = Stand::new("0.1");
    let r = s.run(4, 4200, Some("0.1"));
    assert_eq!(r.disagreements, 0);
    assert_eq!(r.total_explored(), 0, "{:?}", r.shapes);
    assert!(
        r.stdout.contains("exploration 0.1: nothing to explore"),
        "{}",
        r.stdout
    );
}

/// `DYNCC_EXPLORE` is a switch: `0`, `off` (and unset) explore nothing and
/// say nothing; any other value, a number out of range or not a number
/// included, explores at the table's share exactly as `1` does, and the
/// init line says the share is the table's. (Out-of-range values were
/// refused with a WARN, so the rank given one ran the table's answers while
/// ranks given a good value explored: they disagreed.)
#[test]
fn explore_values_only_switch_exploration_on() {
    let s = Stand::new("0.1");
    for off in ["0", "off", "0.0"] {
        let r = s.run(6, 2100, Some(off));
        assert!(r.warns().is_empty(), "{off}: {}", r.stdout);
        assert!(!r.stdout.contains("exploration"), "{off}: {}", r.stdout);
        assert_eq!(r.total_explored(), 0, "{off}: {:?}", r.shapes);
    }
    let r = s.run(6, 2100, None);
    assert!(r.warns().is_empty());
    assert!(!r.stdout.contains("exploration"), "{}", r.stdout);
    assert_eq!(r.total_explored(), 0, "{:?}", r.shapes);
    assert_eq!(r.unavailable_written, 0);
    let on = s.run(6, 2100, Some("1"));
    assert!(on.total_explored() > 0, "{}", on.stdout);
    for v in ["0.5", "-1", "lots", "1e-12", "0.1"] {
        let r = s.run(6, 2100, Some(v));
        assert!(r.warns().is_empty(), "{v}: {}", r.stdout);
        assert_eq!(r.shapes, on.shapes, "{v}");
        assert!(r.stdout.contains("exploration 0.1: "), "{v}: {}", r.stdout);
        assert_eq!(
            r.stdout.contains(&format!(
                "DYNCC_EXPLORE={v} switches exploration on at the table's share 0.1"
            )),
            v != "0.1",
            "{v}: {}",
            r.stdout
        );
    }
}

/// A table whose share is too small for the draw ever to pick a cell (or
/// not a share) explores nothing, on every rank holding it, and the init
/// line says why and how to fix it.
#[test]
fn a_table_share_that_cannot_explore_explores_nothing() {
    for bad in ["1e-10", "0.5", "lots"] {
        let s = Stand::with_table(explore_table(bad));
        let r = s.run(6, 700, Some("1"));
        assert!(
            r.stdout.contains(&format!(
                "exploration off: the table's explore_share={bad} is not a share"
            )) && r.stdout.contains("dyncc compile --explore F"),
            "{}",
            r.stdout
        );
        assert!(
            !r.stdout.contains("this communicator explores"),
            "{}",
            r.stdout
        );
        assert_eq!(r.total_explored(), 0, "{:?}", r.shapes);
        assert_eq!(r.disagreements, 0);
    }
}

/// Per communicator, the calls of rank 0 in one process and of rank 0 in
/// another whose `DYNCC_EXPLORE` differs: how many differ.
fn split_calls(a: &Run, b: &Run) -> usize {
    let calls = |r: &Run| -> Vec<String> {
        r.stdout
            .lines()
            .filter(|l| l.starts_with("call "))
            .map(str::to_string)
            .collect()
    };
    let (a, b) = (calls(a), calls(b));
    assert_eq!(a.len(), b.len());
    a.iter().zip(&b).filter(|(x, y)| x != y).count()
}

/// Issue 42: two processes holding ranks of one communicator (the same
/// commHash, the same table) with different `DYNCC_EXPLORE` values, as a
/// job whose environment differs per node has: 0.1 and 0.02 chose
/// differently on 4,041 of 9,000 calls, 0.1 and a value refused with a WARN
/// (0.2, "abc", 1e-12) on 5,783. The share is the table's, so they now
/// choose alike on every call, while exploring.
#[test]
fn ranks_given_different_explore_values_choose_alike() {
    let s = Stand::with_table(explore_table_with(
        "0.05",
        &[plan_at(
            size_bucket(1 << 20),
            0,
            force(Algo::Tree, Proto::Simple, 0),
            0.1,
        )],
    ));
    for other in ["0.02", "abc", "1e-12", "0.2"] {
        let (mut split, mut explored) = (0, 0);
        for id in 0..6u64 {
            let comm = COMM_ID ^ id.wrapping_mul(0x9E37_79B9_7F4A_7C15);
            let a = s.run_as(6, 1500, Some("0.1"), comm, "extra-one");
            let b = s.run_as(6, 1500, Some(other), comm, "same");
            assert_eq!(a.disagreements + b.disagreements, 0);
            split += split_calls(&a, &b);
            explored += a.total_explored();
        }
        assert_eq!(split, 0, "0.1 vs {other}: {split} calls chose differently");
        assert!(explored > 0, "0.1 vs {other}: nothing explored");
    }
}

/// A plan candidate of the table's AllReduce context over 5-7 nodes, at 6
/// nodes.
fn plan_at(
    bucket: u8,
    rank: u8,
    decision: Decision,
    cost_bound: f32,
) -> dyncc_tables::PlanCandidate {
    dyncc_tables::PlanCandidate {
        context: 1,
        nodes: 6,
        bucket,
        last_bucket: bucket,
        rank,
        decision,
        gain: 0.1,
        spread: 0.05,
        cost_bound,
    }
}

/// Issue 42: at F = 0.1 a cell whose cost bound is at most F was explored
/// by every communicator, so no job ran the table's answer there and no
/// gain could be read. Over 40 communicators, every shape that some
/// explore is run with the table's answer by others, at most about half
/// explore it, and the cheap cells (a derived NCCL's-choice probe at cost
/// 0.1, a planned setting at 0.05) are explored by some.
#[test]
fn every_explored_cell_keeps_a_baseline() {
    let s = Stand::with_table(explore_table_with(
        "0.1",
        &[plan_at(
            size_bucket(1 << 20),
            0,
            force(Algo::Tree, Proto::Simple, 0),
            0.05,
        )],
    ));
    let n = 40u32;
    let mut explored: BTreeMap<(u32, u64), u32> = BTreeMap::new();
    let mut seen: BTreeMap<(u32, u64), u32> = BTreeMap::new();
    for id in 0..u64::from(n) {
        let comm = COMM_ID ^ id.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let r = s.run_as(6, 84, Some("1"), comm, "same");
        assert_eq!(r.disagreements, 0);
        for (&shape, sh) in &r.shapes {
            *seen.entry(shape).or_default() += 1;
            *explored.entry(shape).or_default() += u32::from(sh.explored > 0);
        }
    }
    for (shape, &e) in &explored {
        assert_eq!(seen[shape], n);
        // Half at most, within 4 standard deviations over 40.
        assert!(
            e < n,
            "{shape:?}: every communicator explored, none ran the table's answer"
        );
        assert!(e <= 32, "{shape:?}: {e} of {n} explored");
    }
    for shape in [(AR as u32, 6), (AR as u32, 1024), (AR as u32, 1 << 20)] {
        assert!(explored[&shape] >= 8, "{shape:?}: {explored:?}");
    }
}

/// Issue 42: NCCL 2.27 (tuner v4, profiler v4) passes the tuner no
/// communicator id, so the profiler cannot link a record to the tuner's
/// answer: 390 of 510 calls explored and every record was "unknown". Now
/// a tuner without the id never explores (decided by the interface NCCL
/// loaded, alike on every rank), and the init line says why; the same
/// table through v6 explores.
#[test]
fn no_exploration_where_records_cannot_be_linked() {
    let s = Stand::new("0.1");
    let v4 = s.run_with(
        6,
        2100,
        Some("1"),
        COMM_ID,
        "same",
        &[("EXPLORE_TUNER", "v4")],
    );
    assert_eq!(v4.total_explored(), 0, "{:?}", v4.shapes);
    assert_eq!(v4.disagreements, 0);
    assert!(
        v4.stdout
            .contains("exploration off: this NCCL's tuner interface (v3/v4"),
        "{}",
        v4.stdout
    );
    let v6 = s.run(6, 2100, Some("1"));
    assert!(v6.total_explored() > 0, "{}", v6.stdout);
}

/// `dyncc query` says, per candidate of the plan cell serving a call, the
/// chance a communicator tries it (rank weight x min(1/2, F / cost
/// bound)), F the table's share (the golden 1.1 table carries none: the
/// default 0.02, which query and the plugin both use; the job's
/// `DYNCC_EXPLORE=0.1` only switches exploration on). Over 300
/// communicators (commHashes) the plugin tries each about that often
/// (within 4 standard deviations of a binomial share). At 3 nodes, 1 MiB,
/// where the table forces ring/ll128, tree/ll128 is a candidate that the
/// stand-in's NCCL marks unavailable, so the plugin writes nothing and
/// NCCL's choice runs there too.
#[test]
fn query_chances_are_what_the_plugin_draws() {
    let golden = crate::support::cli::root().join("tables/golden/allreduce_plan_v1.1.tbl");
    let s = Stand::with_table(std::fs::read(&golden).unwrap());
    let (mib, big) = (1u64 << 20, 64u64 << 20);
    // What query says at (nodes, bytes), per setting.
    let chances = |nodes: u64, bytes: u64| -> BTreeMap<String, f64> {
        let o = crate::support::cli::dyncc_output(&[
            "query",
            golden.to_str().unwrap(),
            "--coll",
            "allreduce",
            "--bytes",
            &bytes.to_string(),
            "--nodes",
            &nodes.to_string(),
            "--ranks",
            &(nodes * 8).to_string(),
            "--json",
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let c: BTreeMap<String, f64> = j["explore"]["candidates"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c["setting"].as_str().unwrap().to_string(),
                    c["chance"].as_f64().unwrap(),
                )
            })
            .collect();
        assert_eq!(c.len(), 2, "{j}");
        c
    };
    // Per (nodes, bytes, cell written: algo x 3 + proto, -1 NCCL's
    // choice), the communicators that ran it.
    let n = 300u32;
    let mut seen: BTreeMap<(u64, u64, i32), u32> = BTreeMap::new();
    for nodes in [3, 8] {
        for id in 0..u64::from(n) {
            let comm = COMM_ID ^ id.wrapping_mul(0x9E37_79B9_7F4A_7C15);
            let r = s.run_as(nodes, 42, Some("0.1"), comm, "same");
            assert_eq!(r.disagreements, 0, "{}", r.stdout);
            for bytes in [mib, big] {
                let cell = r
                    .stdout
                    .lines()
                    .find_map(|l| {
                        let f: Vec<&str> = l.split_whitespace().collect();
                        (f.len() == 5 && f[..3] == ["call", "4", &bytes.to_string()])
                            .then(|| f[3].parse::<i32>().unwrap())
                    })
                    .unwrap_or_else(|| panic!("no AllReduce call of {bytes} B: {}", r.stdout));
                *seen.entry((nodes, bytes, cell)).or_default() += 1;
            }
        }
    }
    let got =
        |nodes: u64, bytes: u64, cell: i32| seen.get(&(nodes, bytes, cell)).copied().unwrap_or(0);
    let cell = |algo: Algo, proto: Proto| algo as i32 * 3 + proto as i32;
    let (c3, c3_big, c8) = (chances(3, mib), chances(3, big), chances(8, mib));
    for (nodes, bytes, written, p) in [
        (
            3,
            big,
            cell(Algo::Ring, Proto::Simple),
            c3_big["ring/simple"],
        ),
        (
            3,
            big,
            cell(Algo::Tree, Proto::Simple),
            c3_big["tree/simple"],
        ),
        (3, mib, -1, c3["NCCL's choice"] + c3["tree/ll128"]),
        (8, mib, -1, c8["NCCL's choice"]),
        (8, mib, cell(Algo::Ring, Proto::LL), c8["ring/ll"]),
    ] {
        let (count, f) = (got(nodes, bytes, written), f64::from(n));
        assert!(
            (f64::from(count) / f - p).abs() <= 4.0 * (p * (1.0 - p) / f).sqrt() + 1.0 / f,
            "cell {written} at {nodes} nodes, {bytes} B: {count} of {n} communicators, query says \
             {p}: {seen:?}"
        );
    }
    // Every other communicator runs the table's answer.
    let ring_ll128 = cell(Algo::Ring, Proto::LL128);
    for nodes in [3, 8] {
        let mine: u32 = seen
            .iter()
            .filter(|((m, b, _), _)| (*m, *b) == (nodes, mib))
            .map(|(_, c)| c)
            .sum();
        assert_eq!(mine, n);
        assert!(got(nodes, mib, ring_ll128) > 0, "{seen:?}");
    }
    assert_eq!(
        got(8, big, -1),
        n,
        "no plan cell at 8 nodes, 64 MiB: {seen:?}"
    );
}

/// README's nightly recipe, run as written: publish a table under its
/// content's name and move the link onto it.
fn publish(table: &[u8], shared: &std::path::Path) {
    let next = shared.join("cluster-next.tbl");
    std::fs::write(&next, table).unwrap();
    let st = Command::new("sh")
        .arg("-c")
        .arg(
            "set -e; cd \"$1\"; d=$(sha256sum cluster-next.tbl | cut -c1-16); \
             cp cluster-next.tbl cluster-$d.tbl; \
             ln -sfn cluster-$d.tbl cluster.tbl.new && mv -T cluster.tbl.new cluster.tbl",
        )
        .arg("sh")
        .arg(shared)
        .status()
        .unwrap();
    assert!(st.success());
}

/// The job script's `readlink -f /shared/cluster.tbl`.
fn resolve(shared: &std::path::Path) -> String {
    let o = Command::new("readlink")
        .arg("-f")
        .arg(shared.join("cluster.tbl"))
        .output()
        .unwrap();
    assert!(o.status.success());
    String::from_utf8(o.stdout).unwrap().trim().to_string()
}

/// Issue 42: README's nightly recipe moved the new table over the path
/// jobs load (`mv cluster-next.tbl /shared/cluster.tbl`), so a process
/// starting after it got the new table while one that started before kept
/// the old: the ranks of one job chose differently. Now a table is
/// published under a new name and a link moved onto it, and the job
/// resolves the link once: two processes (ranks of one communicator)
/// whose inits a publication falls between choose alike on every call.
/// A process resolving the link itself, or the old `mv`, does not: the
/// two tables really answer differently.
#[test]
fn a_table_published_while_a_job_starts_reaches_no_rank_of_it() {
    let s = Stand::new("0.1");
    let old = explore_table("0.1");
    let mut b = TableBuilder::new();
    b.context(
        spec(Coll::AllReduce, (4, 4)),
        &[rule(
            u64::MAX,
            force(Algo::Ring, Proto::LL, 2),
            Basis::Measured,
            1.2,
        )],
    )
    .unwrap();
    let new = b.build().unwrap();
    let shared = tempfile::tempdir().unwrap();
    publish(&old, shared.path());
    // The job script, once, before its ranks start.
    let job_table = resolve(shared.path());
    let with = |table: &str| {
        let r = s.run_with(4, 420, None, COMM_ID, "same", &[("DYNCC_TABLE", table)]);
        assert_eq!(r.disagreements, 0);
        r
    };
    let first = with(&job_table);
    publish(&new, shared.path());
    let second = with(&job_table);
    assert_eq!(split_calls(&first, &second), 0, "{}", second.stdout);
    assert!(job_table.contains("cluster-"), "{job_table}");
    // Resolved again (the next job), or the path loaded directly after the
    // old recipe's `mv`: the new table, other answers.
    let next_job = with(&resolve(shared.path()));
    assert_ne!(resolve(shared.path()), job_table);
    let split = split_calls(&first, &next_job);
    assert!(
        split > 0,
        "the two tables answer alike: the test shows nothing"
    );
    let direct = shared.path().join("direct.tbl");
    std::fs::write(&direct, &old).unwrap();
    let before = with(direct.to_str().unwrap());
    std::fs::rename(shared.path().join("cluster-next.tbl"), &direct).unwrap();
    let after = with(direct.to_str().unwrap());
    assert_eq!(split_calls(&before, &after), split);
}

/// Chunk lines of a run: (collective, bytes, cell, channels, chunk).
fn chunks(r: &Run) -> Vec<(u32, u64, i32, i32, u64)> {
    r.stdout
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            match f.as_slice() {
                ["chunk", c, b, cell, ch, chunk] => Some((
                    c.parse().unwrap(),
                    b.parse().unwrap(),
                    cell.parse().unwrap(),
                    ch.parse().unwrap(),
                    chunk.parse().unwrap(),
                )),
                _ => None,
            }
        })
        .collect()
}

/// Issue 41: an exploring communicator answered getChunkSize from the
/// table whatever getCollInfo had answered, so where it drew NCCL's own
/// choice (the baseline every gain is read against) and NCCL chose the
/// force's algorithm and protocol, NCCL's calls ran the table's 512 KiB
/// chunk, and a candidate of the same algorithm and protocol (Ring/Simple
/// on 4 channels) ran it too, each measured as if it had not. Now the
/// chunk is that of what the communicator answered: the table's on the
/// table's force, NCCL's on NCCL's choice and on a candidate without one;
/// the two ranks agree on every chunk.
/// AllReduce at 5-7 nodes forced to Ring/Simple/8ch/512K everywhere
/// (interpolated, share 0.1), with a planned candidate Ring/Simple/4ch (no
/// chunk) at 1 MiB.
fn chunked_table() -> Vec<u8> {
    let k512 = dyncc_tables::Chunk::from_bytes(512 << 10).unwrap();
    let chunked = Setting::new(Algo::Ring, Proto::Simple)
        .with_channels(8)
        .with_chunk(k512)
        .unwrap();
    let mut b = TableBuilder::new();
    b.meta("platform", "explore-standin");
    b.meta(dyncc_tables::META_EXPLORE, "0.1");
    b.context(
        spec(Coll::AllReduce, (5, 7)),
        &[rule(
            u64::MAX,
            Decision::Force(chunked),
            Basis::Interpolated,
            1.2,
        )],
    )
    .unwrap();
    let bucket = size_bucket(1 << 20);
    b.plan(&[dyncc_tables::PlanCandidate {
        context: 0,
        nodes: 6,
        bucket,
        last_bucket: bucket,
        rank: 0,
        decision: force(Algo::Ring, Proto::Simple, 4),
        gain: 0.1,
        spread: 0.05,
        cost_bound: 0.05,
    }]);
    b.build().unwrap()
}

#[test]
fn an_exploring_communicator_answers_the_chunk_of_what_it_answered() {
    let s = Stand::with_table(chunked_table());
    const NCCL: u64 = 131_072;
    let ring_simple = Algo::Ring as i32 * 3 + Proto::Simple as i32;
    let (mut forced, mut nccl, mut candidate) = (0, 0, 0);
    for id in 0..40u64 {
        let comm = COMM_ID ^ id.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let r = s.run_as(6, 84, Some("1"), comm, "chunk");
        assert_eq!(r.disagreements, 0, "{}", r.stdout);
        let lines = chunks(&r);
        assert_eq!(lines.len(), 84, "{}", r.stdout);
        for (coll, bytes, cell, ch, chunk) in lines {
            let what = format!("comm {id}: coll {coll} {bytes} B cell {cell} {ch}ch");
            match (coll == AR as u32, cell, ch) {
                (true, c, 8) if c == ring_simple => {
                    forced += 1;
                    assert_eq!(chunk, 512 << 10, "{what}: the table's force");
                }
                (true, c, 4) if c == ring_simple => {
                    candidate += 1;
                    assert_eq!(chunk, NCCL, "{what}: a candidate without a chunk");
                }
                (true, -1, _) => {
                    nccl += 1;
                    assert_eq!(chunk, NCCL, "{what}: NCCL's own choice");
                }
                _ => assert_eq!(chunk, NCCL, "{what}"),
            }
        }
    }
    assert!(
        forced > 0 && nccl > 0 && candidate > 0,
        "forced {forced}, NCCL's {nccl}, candidate {candidate}"
    );
}

/// Issue 41: getChunkSize's answer on an exploring communicator is a
/// function of the table, the communicator and the call's arguments, never
/// of this rank's own calls: over 12 communicators whose ranks' sequences
/// differ as real ranks' do (an extra call, extra calls at each shape's
/// first, a context created late, numPipeOps and regBuff per rank) on the
/// chunked table, the two ranks answer every common call's chunk alike.
#[test]
fn ranks_with_different_call_sequences_answer_the_same_chunks() {
    let s = Stand::with_table(chunked_table());
    for scenario in ["extra-one", "extra-per-size", "late", "state", "regbuff"] {
        for id in 0..12u64 {
            let comm = COMM_ID ^ id.wrapping_mul(0x9E37_79B9_7F4A_7C15);
            let r = s.run_as(6, 168, Some("1"), comm, scenario);
            assert_eq!(r.disagreements, 0, "{scenario}, comm {id}: {}", r.stdout);
            assert!(
                chunks(&r).iter().any(|&(_, _, _, _, c)| c == 512 << 10),
                "{scenario}: the table's chunk answered somewhere"
            );
        }
    }
}
