//! `DYNCC_EXPLORE` through the built plugin: tests/c/explore.c, a stand-in
//! NCCL whose two ranks of one communicator (8 ranks per node, on a node
//! count the test picks) each call getCollInfo on their own thread for the
//! same sequence of collectives; it compares the two ranks' cost tables and
//! channel counts per call and prints rank 0's answers, which the test
//! compares with the table's own.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use dyncc_tables::{
    size_bucket, Algo, Basis, Coll, ContextSpec, Decision, Proto, RegBuff, Rule, Table,
    TableBuilder,
};

use crate::plugin_c::{compile_c, plugin_lib, HARNESS_LINK_FLAGS};
use crate::support::tools::require_c_compiler;

fn force(algo: Algo, proto: Proto, channels: u8) -> Decision {
    Decision::Force {
        algo,
        proto,
        channels,
    }
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
fn explore_table() -> Vec<u8> {
    let mut b = TableBuilder::new();
    b.meta("platform", "explore-standin");
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
    b.build().unwrap()
}

struct Stand {
    _dir: tempfile::TempDir,
    exe: PathBuf,
    table: PathBuf,
}

impl Stand {
    fn new() -> Stand {
        let cc = require_c_compiler();
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("explore");
        let mut link = HARNESS_LINK_FLAGS.to_vec();
        link.push("-pthread");
        compile_c(cc, &["-O1", "-pthread"], "explore.c", &exe, &link);
        let table = dir.path().join("explore.tbl");
        std::fs::write(&table, explore_table()).unwrap();
        Stand {
            _dir: dir,
            exe,
            table,
        }
    }

    fn run(&self, nodes: u64, calls: u32, explore: Option<&str>) -> Run {
        let mut cmd = Command::new(&self.exe);
        cmd.args([nodes.to_string(), calls.to_string()])
            .env("DYNCC_TEST_PLUGIN_LIB", plugin_lib())
            .env("DYNCC_TABLE", &self.table)
            .env_remove("DYNCC_STRICT")
            .env_remove("DYNCC_NCCL_MISMATCH")
            .env_remove("DYNCC_TRACE")
            .env_remove("DYNCC_EXPLORE");
        if let Some(f) = explore {
            cmd.env("DYNCC_EXPLORE", f);
        }
        let out = cmd.output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "explore {nodes} {calls}: {}\n{stdout}\n{}",
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
    match t.lookup(coll, nodes * 8, nodes, bytes, 1, 0).decision {
        // Tree/LL128 is unavailable: NCCL's choice stands.
        Decision::Force {
            algo: Algo::Tree,
            proto: Proto::LL128,
            ..
        }
        | Decision::Default => (-1, 0),
        Decision::Force {
            algo,
            proto,
            channels,
        } => (algo as i32 * 3 + proto as i32, i32::from(channels)),
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

    fn explored(&self, coll: Coll, bytes: u64) -> Shape {
        self.shapes[&(coll as u32, bytes)]
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

/// Two ranks, thousands of calls, F = 0.05 at 6 nodes (interpolated):
/// the ranks agree on every call, each shape explores at most ceil(nF) of
/// its calls, and exactly where the table could not confirm its answer.
#[test]
fn two_ranks_explore_identically_within_the_share() {
    let s = Stand::new();
    let r = s.run(6, 8400, Some("0.05"));
    assert_eq!(r.disagreements, 0, "{}", r.stdout);
    assert_eq!(r.unavailable_written, 0);
    assert!(r.warns().is_empty(), "{}", r.stdout);
    assert!(
        r.stdout
            .contains("exploration on: at most 0.05 of the calls"),
        "{}",
        r.stdout
    );
    for (&(coll, bytes), sh) in &r.shapes {
        let cap = (f64::from(sh.calls) * 0.05).ceil() as u32;
        assert!(sh.explored <= cap, "{coll} {bytes}: {sh:?}");
    }
    // Unmeasured Tree/LL (gain 1.1): NCCL's own choice explored.
    for b in [6, 1024] {
        assert!(r.explored(AR, b).explored > 0, "{b}: {:?}", r.shapes);
    }
    // Unmeasured default: the 4-node context's Ring/Simple/8 explored.
    assert!(r.explored(AR, 1 << 20).explored > 0, "{:?}", r.shapes);
    // No context at 6 nodes: the 4-node AllGather setting explored.
    assert!(r.explored(AG, 1024).explored > 0, "{:?}", r.shapes);
    // Predicted gain 1.6, above the loss bound: never explored.
    assert_eq!(r.explored(AR, 4096).explored, 0);
    // The neighbour's setting there is Tree/LL128, which NCCL marked
    // unavailable: never written.
    assert_eq!(r.explored(AR, 65536).explored, 0);
    // Nothing to borrow at 64 MiB (the neighbour leaves NCCL alone).
    assert_eq!(r.explored(AR, 64 << 20).explored, 0);
}

/// At 4 nodes every decision is measured: nothing explores.
#[test]
fn a_measured_confirmed_decision_never_explores() {
    let s = Stand::new();
    let r = s.run(4, 4200, Some("0.1"));
    assert_eq!(r.disagreements, 0);
    assert_eq!(r.total_explored(), 0, "{:?}", r.shapes);
    assert!(
        r.stdout.contains("exploration 0.1: nothing to explore"),
        "{}",
        r.stdout
    );
}

/// A share out of range is one WARN for the process (two ranks init), and
/// nothing explores; unset, nothing explores and the init line is as
/// before.
#[test]
fn explore_out_of_range_warns_once_and_explores_nothing() {
    let s = Stand::new();
    for bad in ["0.5", "0", "-1", "lots"] {
        let r = s.run(6, 2100, Some(bad));
        let w = r.warns();
        assert_eq!(w.len(), 1, "{bad}: {}", r.stdout);
        assert!(
            w[0].contains(&format!("DYNCC_EXPLORE={bad}")) && w[0].contains("exploration is off"),
            "{}",
            w[0]
        );
        assert_eq!(r.total_explored(), 0, "{bad}: {:?}", r.shapes);
    }
    let r = s.run(6, 2100, None);
    assert!(r.warns().is_empty());
    assert!(!r.stdout.contains("exploration"), "{}", r.stdout);
    assert_eq!(r.total_explored(), 0, "{:?}", r.shapes);
    assert_eq!(r.unavailable_written, 0);
}
