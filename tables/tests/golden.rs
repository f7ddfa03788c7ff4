//! Golden tables: committed `.tbl` files that today's reader must keep
//! loading and answering the same way.
//!
//! `tables/golden/*_v1.0.tbl`, `*_v1.1.tbl` and `*_v1.2.tbl` are written by `generate()`
//! below. With the
//! `build` feature this test also checks that the builder still produces
//! them byte for byte; to rewrite them after an intentional format change,
//! `make bless` (which runs this test with `DYNCC_BLESS=1`, the one switch
//! every golden-file test obeys).
//!
//! Files of older format versions are never regenerated: they stay as the
//! proof that later readers still load what earlier writers wrote.

use std::path::{Path, PathBuf};

use dyncc_tables::{Algo, Basis, Chunk, Coll, Comm, Decision, Proto, Setting, Table, NUM_FEATURES};

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("golden")
}

fn load(name: &str) -> Vec<u8> {
    let p = golden_dir().join(name);
    std::fs::read(&p).unwrap_or_else(|e| panic!("cannot read golden table {}: {e}", p.display()))
}

const KIB: u64 = 1024;
const MIB: u64 = 1024 * 1024;
const AR: u32 = Coll::AllReduce as u32;

fn force(algo: Algo, proto: Proto, channels: u8) -> Decision {
    Decision::Force(Setting::new(algo, proto).with_channels(channels))
}

/// `force` with a chunk of `bytes` (on the protocol's grain).
fn chunked(algo: Algo, proto: Proto, channels: u8, bytes: u64) -> Decision {
    let s = Setting::new(algo, proto).with_channels(channels);
    Decision::Force(s.with_chunk(Chunk::from_bytes(bytes).unwrap()).unwrap())
}

#[cfg(feature = "build")]
mod gen {
    //! The generator. Everything is fixed (no clock, no paths), so the
    //! output is byte-stable.
    use super::*;
    use dyncc_tables::{size_bucket, ContextSpec, Feature, RegBuff, Rule, TableBuilder, TreeNode};

    fn common_meta(b: &mut TableBuilder, what: &str) {
        b.meta("dyncc_version", "0.1.0")
            // What wrote the v1.0 files, as recorded in them; kept as it
            // was so they stay byte for byte (today: `make bless`).
            .meta(
                "command",
                "DYNCC_REGEN_GOLDEN=1 cargo test -p dyncc-tables --features build --test golden",
            )
            .meta("inputs", "")
            .meta("platform", "golden-fixture")
            .meta("gpu", "none (hand-written fixture)")
            .meta("gpus_per_node", "8")
            .meta("created", "1970-01-01T00:00:00Z")
            .meta("coverage", what);
    }

    fn rule(last: u64, decision: Decision, basis: Basis, gain: f32) -> Rule {
        Rule {
            last_bucket: last as u8,
            decision,
            basis,
            gain,
        }
    }

    /// allreduce on 2 nodes x 8 ranks: tree/ll below 64 KiB, tree/ll128
    /// below 2 MiB, ring/simple on 16 channels below 256 MiB, Default from
    /// 256 MiB (extrapolated, left to NCCL). Plus the tree that explains it.
    fn allreduce_2x8() -> Vec<u8> {
        let mut b = TableBuilder::new();
        common_meta(&mut b, "allreduce 2x8: 4 rules, 3 forced");
        let spec = ContextSpec {
            coll: Coll::AllReduce,
            nodes: (2, 2),
            ppn: (8, 8),
            max_pipe_ops: 0,
            reg_buff: RegBuff::Any,
        };
        let below = |n: u64| size_bucket(n) as u64 - 1;
        b.context(
            spec,
            &[
                rule(
                    below(64 * KIB),
                    force(Algo::Tree, Proto::LL, 0),
                    Basis::Measured,
                    1.8,
                ),
                rule(
                    below(2 * MIB),
                    force(Algo::Tree, Proto::LL128, 0),
                    Basis::Measured,
                    1.25,
                ),
                rule(
                    below(256 * MIB),
                    force(Algo::Ring, Proto::Simple, 16),
                    Basis::Interpolated,
                    1.1,
                ),
                rule(255, Decision::Default, Basis::Extrapolated, 1.0),
            ],
        )
        .unwrap();
        let split = |threshold: f32, left, right| TreeNode::Split {
            feature: Feature::Log2Bytes,
            threshold,
            left,
            right,
        };
        let leaf = |decision, basis, gain| TreeNode::Leaf {
            decision,
            basis,
            gain,
        };
        b.tree(
            Coll::AllReduce,
            &[
                split(16.0, 1, 2),
                leaf(force(Algo::Tree, Proto::LL, 0), Basis::Measured, 1.8),
                split(21.0, 3, 4),
                leaf(force(Algo::Tree, Proto::LL128, 0), Basis::Measured, 1.25),
                split(28.0, 5, 6),
                leaf(
                    force(Algo::Ring, Proto::Simple, 16),
                    Basis::Interpolated,
                    1.1,
                ),
                leaf(Decision::Default, Basis::Extrapolated, 1.0),
            ],
        )
        .unwrap();
        b.build().unwrap()
    }

    /// Contexts of different specificity, most specific first.
    fn multi_context() -> Vec<u8> {
        let mut b = TableBuilder::new();
        common_meta(&mut b, "6 contexts over allreduce, allgather, broadcast");
        let any = ContextSpec {
            coll: Coll::AllReduce,
            nodes: (0, u32::MAX),
            ppn: (0, u32::MAX),
            max_pipe_ops: 0,
            reg_buff: RegBuff::Any,
        };
        let all = |d: Decision| {
            [rule(
                255,
                d,
                Basis::Measured,
                if d.is_forced() { 1.2 } else { 1.0 },
            )]
        };
        // 0: one node of 8 GPUs, single pipelined op, unregistered buffers.
        b.context(
            ContextSpec {
                nodes: (1, 1),
                ppn: (8, 8),
                max_pipe_ops: 1,
                reg_buff: RegBuff::Only0,
                ..any
            },
            &[
                rule(
                    size_bucket(MIB) as u64 - 1,
                    force(Algo::Ring, Proto::LL, 0),
                    Basis::Measured,
                    1.3,
                ),
                rule(
                    255,
                    force(Algo::Nvls, Proto::Simple, 0),
                    Basis::Measured,
                    1.4,
                ),
            ],
        )
        .unwrap();
        // 1: one node, up to 8 GPUs.
        b.context(
            ContextSpec {
                nodes: (1, 1),
                ppn: (1, 8),
                ..any
            },
            &all(force(Algo::Ring, Proto::LL128, 0)),
        )
        .unwrap();
        // 2: 2..1024 nodes, up to 8 GPUs each.
        b.context(
            ContextSpec {
                nodes: (2, 1024),
                ppn: (1, 8),
                ..any
            },
            &all(force(Algo::Tree, Proto::Simple, 8)),
        )
        .unwrap();
        // 3: allgather anywhere: PAT below 1 MiB, Default above.
        b.context(
            ContextSpec {
                coll: Coll::AllGather,
                ..any
            },
            &[
                rule(
                    size_bucket(MIB) as u64 - 1,
                    force(Algo::Pat, Proto::Simple, 0),
                    Basis::Measured,
                    1.5,
                ),
                rule(255, Decision::Default, Basis::Measured, 1.0),
            ],
        )
        .unwrap();
        // 4: broadcast, registered buffers only.
        b.context(
            ContextSpec {
                coll: Coll::Broadcast,
                reg_buff: RegBuff::Only1,
                ..any
            },
            &all(force(Algo::Ring, Proto::Simple, 4)),
        )
        .unwrap();
        // 5: allreduce catch-all: leave NCCL alone.
        b.context(any, &all(Decision::Default)).unwrap();
        b.build().unwrap()
    }

    /// No contexts: "leave NCCL alone" everywhere.
    fn empty() -> Vec<u8> {
        let mut b = TableBuilder::new();
        common_meta(&mut b, "no contexts: NCCL decides everything");
        b.build().unwrap()
    }

    /// Format 1.1: allreduce on 2..16 nodes x 8 ranks (tree/ll measured
    /// below 64 KiB, ring/ll128 interpolated below 16 MiB, NCCL's choice
    /// interpolated above) with an exploration plan at two node counts,
    /// and an allgather context without one. See [`super::plan`] for the
    /// cells.
    fn allreduce_plan() -> Vec<u8> {
        let mut b = TableBuilder::new();
        b.meta("dyncc_version", "0.1.0")
            .meta(
                "command",
                "make bless (DYNCC_BLESS=1 cargo test -p dyncc-tables --features build --test golden)",
            )
            .meta("inputs", "")
            .meta("platform", "golden-fixture")
            .meta("gpu", "none (hand-written fixture)")
            .meta("gpus_per_node", "8")
            .meta("created", "1970-01-01T00:00:00Z")
            .meta(
                "coverage",
                "allreduce 2-16x8: 3 rules, 2 forced; 3 plan cells, 6 candidates; allgather 1x8",
            );
        let below = |n: u64| size_bucket(n) as u64 - 1;
        b.context(
            ContextSpec {
                coll: Coll::AllReduce,
                nodes: (2, 16),
                ppn: (8, 8),
                max_pipe_ops: 0,
                reg_buff: RegBuff::Any,
            },
            &[
                rule(
                    below(64 * KIB),
                    force(Algo::Tree, Proto::LL, 0),
                    Basis::Measured,
                    1.5,
                ),
                rule(
                    below(16 * MIB),
                    force(Algo::Ring, Proto::LL128, 0),
                    Basis::Interpolated,
                    1.2,
                ),
                rule(255, Decision::Default, Basis::Interpolated, 1.0),
            ],
        )
        .unwrap();
        b.context(
            ContextSpec {
                coll: Coll::AllGather,
                nodes: (1, 1),
                ppn: (8, 8),
                max_pipe_ops: 0,
                reg_buff: RegBuff::Any,
            },
            &[rule(
                255,
                force(Algo::Ring, Proto::LL, 0),
                Basis::Measured,
                1.3,
            )],
        )
        .unwrap();
        b.plan(&super::plan::candidates());
        b.build().unwrap()
    }

    /// Format 1.2: allreduce on 2 nodes x 8 ranks with chunk sizes: tree/ll
    /// (NCCL's chunk) below 64 KiB, tree/ll128 with 3840-byte chunks below
    /// 1 MiB, ring/simple on 8 channels with 512 KiB chunks below 64 MiB,
    /// ring/simple with 2 MiB chunks from 64 MiB; the tree explains the
    /// same split.
    fn allreduce_chunk() -> Vec<u8> {
        let mut b = TableBuilder::new();
        b.meta("dyncc_version", "0.1.0")
            .meta(
                "command",
                "make bless (DYNCC_BLESS=1 cargo test -p dyncc-tables --features build --test golden)",
            )
            .meta("inputs", "")
            .meta("platform", "golden-fixture")
            .meta("gpu", "none (hand-written fixture)")
            .meta("gpus_per_node", "8")
            .meta("created", "1970-01-01T00:00:00Z")
            .meta("coverage", "allreduce 2x8: 4 rules, 4 forced, 3 with a chunk");
        let below = |n: u64| size_bucket(n) as u64 - 1;
        let c = super::chunk::rules();
        b.context(
            ContextSpec {
                coll: Coll::AllReduce,
                nodes: (2, 2),
                ppn: (8, 8),
                max_pipe_ops: 0,
                reg_buff: RegBuff::Any,
            },
            &[
                rule(below(64 * KIB), c[0], Basis::Measured, 1.4),
                rule(below(MIB), c[1], Basis::Measured, 1.2),
                rule(below(64 * MIB), c[2], Basis::Interpolated, 1.1),
                rule(255, c[3], Basis::Extrapolated, 1.05),
            ],
        )
        .unwrap();
        let split = |threshold: f32, left, right| TreeNode::Split {
            feature: Feature::Log2Bytes,
            threshold,
            left,
            right,
        };
        let leaf = |decision, basis| TreeNode::Leaf {
            decision,
            basis,
            gain: 1.1,
        };
        b.tree(
            Coll::AllReduce,
            &[
                split(16.0, 1, 2),
                leaf(c[0], Basis::Measured),
                split(20.0, 3, 4),
                leaf(c[1], Basis::Measured),
                split(26.0, 5, 6),
                leaf(c[2], Basis::Interpolated),
                leaf(c[3], Basis::Extrapolated),
            ],
        )
        .unwrap();
        b.build().unwrap()
    }

    pub fn generate() -> Vec<(&'static str, Vec<u8>)> {
        vec![
            ("allreduce_2x8_v1.0.tbl", allreduce_2x8()),
            ("multi_context_v1.0.tbl", multi_context()),
            ("empty_v1.0.tbl", empty()),
            ("allreduce_plan_v1.1.tbl", allreduce_plan()),
            ("allreduce_chunk_v1.2.tbl", allreduce_chunk()),
        ]
    }

    /// Writes `bytes` to `path` atomically (temp file in the same dir + rename).
    fn write_atomic(path: &Path, bytes: &[u8]) {
        let tmp = path.with_extension("tbl.tmp");
        std::fs::write(&tmp, bytes).unwrap();
        std::fs::rename(&tmp, path).unwrap();
    }

    #[test]
    fn golden_tables_match_the_generator() {
        let regen = std::env::var_os("DYNCC_BLESS").is_some_and(|v| v == "1");
        for (name, bytes) in generate() {
            let path = golden_dir().join(name);
            if regen {
                write_atomic(&path, &bytes);
                continue;
            }
            assert!(
                load(name) == bytes,
                "golden table {name} differs from what the builder writes today. If the format \
                 changed on purpose, bump the version, add new golden files and keep the old \
                 ones; to rewrite the current ones run `make bless` (DYNCC_BLESS=1)"
            );
        }
    }

    #[test]
    fn generator_is_deterministic() {
        assert_eq!(generate(), generate());
    }
}

/// The exploration plan of `allreduce_plan_v1.1.tbl`, as the generator
/// writes it and the known-answer test reads it back.
mod plan {
    use super::*;
    use dyncc_tables::{size_bucket, PlanCandidate};

    pub const TREE_LL128: Decision = Decision::Force(Setting::new(Algo::Tree, Proto::LL128));
    pub const RING_SIMPLE: Decision = Decision::Force(Setting::new(Algo::Ring, Proto::Simple));
    pub const TREE_SIMPLE: Decision = Decision::Force(Setting::new(Algo::Tree, Proto::Simple));
    pub const RING_LL: Decision = Decision::Force(Setting::new(Algo::Ring, Proto::LL));

    /// First and last bucket of the forced interpolated rule (64 KiB ..
    /// <16 MiB) and of the default rule's run the plan lists (16 MiB ..
    /// <1 GiB).
    pub fn forced_run() -> (u8, u8) {
        (size_bucket(64 * KIB), size_bucket(16 * MIB) - 1)
    }
    pub fn default_run() -> (u8, u8) {
        (size_bucket(16 * MIB), size_bucket(1024 * MIB) - 1)
    }

    fn cand(
        nodes: u32,
        run: (u8, u8),
        rank: u8,
        decision: Decision,
        gain: f32,
        spread: f32,
        cost_bound: f32,
    ) -> PlanCandidate {
        PlanCandidate {
            context: 0,
            nodes,
            bucket: run.0,
            last_bucket: run.1,
            rank,
            decision,
            gain,
            spread,
            cost_bound,
        }
    }

    /// Nodes 2 (serving 2..=7): over the forced interpolated rule NCCL's
    /// choice then tree/ll128; over the default rule ring/simple then
    /// tree/simple. Nodes 8 (serving 8..=16): over the forced rule NCCL's
    /// choice then ring/ll. Values are exact in f32.
    pub fn candidates() -> Vec<PlanCandidate> {
        let (f, d) = (forced_run(), default_run());
        vec![
            cand(2, f, 0, Decision::Default, -0.0625, 0.125, 0.25),
            cand(2, f, 1, TREE_LL128, 0.03125, 0.0625, 0.125),
            cand(2, d, 0, RING_SIMPLE, 0.0625, 0.0625, 0.0625),
            cand(2, d, 1, TREE_SIMPLE, 0.015625, 0.125, 0.125),
            cand(8, f, 0, Decision::Default, 0.0, 0.125, 0.125),
            cand(8, f, 1, RING_LL, -0.03125, 0.25, 0.5),
        ]
    }
}

#[test]
fn allreduce_plan_answers_known_plan_lookups() {
    use dyncc_tables::size_bucket;
    let bytes = load("allreduce_plan_v1.1.tbl");
    let t = Table::from_bytes(&bytes).unwrap();
    assert_eq!(t.version(), (1, 1));
    assert!(t.has_plan());
    assert_eq!(t.plan_len(), 6);
    // Every candidate reads back as written (fields, order).
    assert_eq!(t.plan().collect::<Vec<_>>(), plan::candidates());
    let (f0, f1) = plan::forced_run();
    let (d0, d1) = plan::default_run();
    let decisions = |nodes: u32, bucket: u8| {
        let c = t.plan_cell(0, nodes, bucket);
        (0..c.len())
            .map(|r| c.get(r).unwrap().decision)
            .collect::<Vec<_>>()
    };
    let forced_2 = [Decision::Default, plan::TREE_LL128];
    let default_2 = [plan::RING_SIMPLE, plan::TREE_SIMPLE];
    let forced_8 = [Decision::Default, plan::RING_LL];
    // Inside the runs, at their edges, for every node count a cell serves.
    for nodes in 2..=7 {
        for b in [f0, size_bucket(MIB), f1] {
            assert_eq!(decisions(nodes, b), forced_2, "{nodes} nodes, bucket {b}");
        }
        for b in [d0, d1] {
            assert_eq!(decisions(nodes, b), default_2, "{nodes} nodes, bucket {b}");
        }
    }
    for nodes in [8, 12, 16] {
        for b in [f0, f1] {
            assert_eq!(decisions(nodes, b), forced_8, "{nodes} nodes, bucket {b}");
        }
        // Nodes 8 lists no cell over the default rule: 2's does not reach.
        assert!(decisions(nodes, d0).is_empty(), "{nodes} nodes");
    }
    // Outside the runs, below the first node count, in another context
    // and past the context's node range.
    for nodes in [2, 8] {
        assert!(decisions(nodes, f0 - 1).is_empty());
        assert!(decisions(nodes, 0).is_empty());
        assert!(decisions(nodes, 255).is_empty());
    }
    assert!(decisions(2, d1 + 1).is_empty());
    assert!(decisions(1, f0).is_empty());
    assert!(t.plan_cell(1, 1, f0).is_empty());
    assert!(t.plan_cell(7, 2, f0).is_empty());
    // Candidate fields of one cell.
    let c = t.plan_cell(0, 3, size_bucket(4 * MIB)).get(1).unwrap();
    assert_eq!(
        (c.nodes, c.bucket, c.last_bucket, c.rank, c.decision),
        (2, f0, f1, 1, plan::TREE_LL128)
    );
    assert_eq!((c.gain, c.spread, c.cost_bound), (0.03125, 0.0625, 0.125));
    let c = t.plan_cell(0, 16, f1).get(1).unwrap();
    assert_eq!((c.nodes, c.rank, c.cost_bound), (8, 1, 0.5));
    assert_eq!(
        t.plan_cell(0, 16, f1).packed(1),
        Some((plan::RING_LL.to_packed(), 0.5))
    );
    assert!(t.plan_cell(0, 16, f1).get(2).is_none());
    // The table's answers are unchanged by the plan.
    let comm = t.specialise(&Comm::new(16, 2));
    assert_eq!(
        comm.decide(AR, 32 * KIB, 1, 0),
        force(Algo::Tree, Proto::LL, 0)
    );
    assert_eq!(
        comm.decide(AR, 4 * MIB, 1, 0),
        force(Algo::Ring, Proto::LL128, 0)
    );
    assert_eq!(comm.decide(AR, 64 * MIB, 1, 0), Decision::Default);
    assert_eq!(
        t.specialise(&Comm::new(8, 1))
            .decide(Coll::AllGather as u32, 4 * MIB, 1, 0),
        force(Algo::Ring, Proto::LL, 0)
    );
    assert_eq!(t.meta("platform"), Some("golden-fixture"));
}

/// The decisions of `allreduce_chunk_v1.2.tbl`, by rule.
mod chunk {
    use super::*;

    pub fn rules() -> [Decision; 4] {
        [
            force(Algo::Tree, Proto::LL, 0),
            chunked(Algo::Tree, Proto::LL128, 0, 3840),
            chunked(Algo::Ring, Proto::Simple, 8, 512 * KIB),
            chunked(Algo::Ring, Proto::Simple, 0, 2 * MIB),
        ]
    }
}

#[test]
fn allreduce_chunk_answers_its_chunks() {
    let bytes = load("allreduce_chunk_v1.2.tbl");
    let t = Table::from_bytes(&bytes).unwrap();
    assert_eq!(t.version(), (1, 2));
    let [ll, ll128, simple8, simple] = chunk::rules();
    let comm = Comm::new(16, 2);
    let s = t.specialise(&comm);
    for (n, want) in [
        (0, ll),
        (64 * KIB - 1, ll),
        (64 * KIB, ll128),
        (MIB - 1, ll128),
        (MIB, simple8),
        (64 * MIB - 1, simple8),
        (64 * MIB, simple),
        (u64::MAX, simple),
    ] {
        assert_eq!(t.lookup(AR, &comm, n, 1, 0).decision, want, "{n} bytes");
        assert_eq!(s.decide(AR, n, 1, 0), want, "{n} bytes (specialised)");
        if n == 0 || (n.wrapping_add(1).is_power_of_two() && n > 1024) {
            continue;
        }
        let mut f = [0.0f32; NUM_FEATURES];
        f[0] = (n as f64).log2() as f32;
        let d = t.tree(Coll::AllReduce).unwrap().eval(&f).unwrap().decision;
        assert_eq!(d, want, "tree at {n} bytes");
    }
    let Decision::Force(r) = simple8 else {
        unreachable!()
    };
    assert_eq!(
        (r.chunk.bytes(), r.to_string().as_str()),
        (512 << 10, "ring/simple/8ch/512K")
    );
}

#[test]
fn tables_without_chunks_keep_their_minor() {
    for (name, minor) in [
        ("allreduce_2x8_v1.0.tbl", 0),
        ("multi_context_v1.0.tbl", 0),
        ("empty_v1.0.tbl", 0),
        ("allreduce_plan_v1.1.tbl", 1),
    ] {
        let bytes = load(name);
        let t = Table::from_bytes(&bytes).unwrap();
        assert_eq!(t.version(), (1, minor), "{name}");
        // A table of 1.0/1.1 forces no chunk.
        for c in Coll::ALL {
            let comm = Comm::new(16, 2);
            for n in [0, 4 * KIB, MIB, 64 * MIB] {
                if let Decision::Force(s) = t.lookup(c as u32, &comm, n, 1, 0).decision {
                    assert!(s.chunk.is_nccl(), "{name}");
                }
            }
        }
    }
}

#[test]
fn every_golden_table_loads() {
    let mut n = 0;
    for entry in std::fs::read_dir(golden_dir()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "tbl") {
            let bytes = std::fs::read(&path).unwrap();
            let t = Table::from_bytes(&bytes)
                .unwrap_or_else(|e| panic!("{} no longer loads: {e}", path.display()));
            assert_eq!(t.version().0, 1, "{}", path.display());
            assert!(t.meta("nccl_enum").is_some());
            n += 1;
        }
    }
    assert!(n >= 3, "expected at least 3 golden tables, found {n}");
}

#[test]
fn allreduce_2x8_answers_known_queries() {
    let bytes = load("allreduce_2x8_v1.0.tbl");
    let t = Table::from_bytes(&bytes).unwrap();
    assert_eq!(t.meta("platform"), Some("golden-fixture"));
    let cov = t.coverage();
    assert_eq!(
        (cov.contexts, cov.rules, cov.forced_rules, cov.trees),
        (1, 4, 3, 1)
    );
    let tree_ll = force(Algo::Tree, Proto::LL, 0);
    let tree_ll128 = force(Algo::Tree, Proto::LL128, 0);
    let ring16 = force(Algo::Ring, Proto::Simple, 16);
    let cases = [
        (0, tree_ll),
        (8, tree_ll),
        (64 * KIB - 1, tree_ll),
        (64 * KIB, tree_ll128),
        (2 * MIB - 1, tree_ll128),
        (2 * MIB, ring16),
        (256 * MIB - 1, ring16),
        (256 * MIB, Decision::Default),
        (u64::MAX, Decision::Default),
    ];
    let comm = t.specialise(&Comm::new(16, 2));
    assert_eq!(comm.context(Coll::AllReduce), Some(0));
    for (n, want) in cases {
        assert_eq!(
            t.lookup(AR, &Comm::new(16, 2), n, 1, 0).decision,
            want,
            "{n} bytes"
        );
        assert_eq!(comm.decide(AR, n, 1, 0), want, "{n} bytes (specialised)");
        // The tree says the same at the size's log2 (f32 cannot tell
        // log2(2^k - 1) from k for large k, so those sizes are skipped).
        if n.wrapping_add(1).is_power_of_two() && n > 1024 {
            continue;
        }
        let mut f = [0.0f32; NUM_FEATURES];
        f[0] = if n == 0 {
            0.0
        } else {
            (n as f64).log2() as f32
        };
        let d = t.tree(Coll::AllReduce).unwrap().eval(&f).unwrap().decision;
        assert_eq!(d, want, "tree at {n} bytes");
    }
    let l = t.lookup(AR, &Comm::new(16, 2), 4 * MIB, 1, 0);
    assert_eq!(
        (l.basis, l.gain, l.context, l.rule),
        (Some(Basis::Interpolated), 1.1, Some(0), Some(2))
    );
    // Other shapes and collectives are left alone.
    for (ranks, nodes) in [(8, 1), (32, 4), (24, 2), (15, 2)] {
        assert!(
            t.specialise(&Comm::new(ranks, nodes)).is_empty(),
            "{ranks} ranks on {nodes} nodes"
        );
    }
    assert_eq!(
        comm.decide(Coll::AllGather as u32, 4096, 1, 0),
        Decision::Default
    );
    assert_eq!(comm.decide(99, 4096, 1, 0), Decision::Default);
}

#[test]
fn multi_context_first_match_wins() {
    let bytes = load("multi_context_v1.0.tbl");
    let t = Table::from_bytes(&bytes).unwrap();
    assert_eq!(t.context_count(), 6);
    let ctx = |coll: Coll, ranks, nodes| {
        t.find_context(coll, &Comm::new(ranks, nodes))
            .map(|c| c.index())
    };
    assert_eq!(ctx(Coll::AllReduce, 8, 1), Some(0));
    assert_eq!(ctx(Coll::AllReduce, 4, 1), Some(1));
    assert_eq!(ctx(Coll::AllReduce, 16, 2), Some(2));
    assert_eq!(
        ctx(Coll::AllReduce, 32, 2),
        Some(5),
        "16 ppn is outside contexts 0..2"
    );
    assert_eq!(ctx(Coll::AllGather, 32, 2), Some(3));
    assert_eq!(ctx(Coll::Broadcast, 8, 1), Some(4));
    assert_eq!(ctx(Coll::Reduce, 8, 1), None);

    let one_node = t.specialise(&Comm::new(8, 1));
    // Context 0 wins the match but gates numPipeOps and regBuff: Default,
    // not a fall-through to context 1. Its rules force settings for
    // regBuff 0 only, and NCCL computes regBuff per rank: left to NCCL for
    // every regBuff, so ranks that registered differently agree.
    for reg in [0, 1] {
        assert_eq!(one_node.decide(AR, 4 * KIB, 1, reg), Decision::Default);
        assert_eq!(one_node.decide(AR, 4 * MIB, 1, reg), Decision::Default);
        assert_eq!(one_node.decide(AR, 4 * MIB, 2, reg), Decision::Default);
        let l = t.lookup(AR, &Comm::new(8, 1), 4 * MIB, 1, reg);
        assert_eq!(
            (l.decision, l.context, l.rule, l.reg_buff_split),
            (Decision::Default, Some(0), None, true)
        );
    }
    let l = t.lookup(AR, &Comm::new(8, 1), 4 * MIB, 2, 0);
    assert_eq!(
        (l.decision, l.context, l.rule, l.reg_buff_split),
        (Decision::Default, Some(0), None, false)
    );
    assert_eq!(
        one_node.decide(Coll::AllGather as u32, 4 * KIB, 1, 0),
        force(Algo::Pat, Proto::Simple, 0)
    );
    assert_eq!(
        one_node.decide(Coll::AllGather as u32, 4 * MIB, 1, 0),
        Decision::Default
    );
    // Context 4 forces for registered buffers only: NCCL's choice for all.
    assert_eq!(
        one_node.decide(Coll::Broadcast as u32, 4 * MIB, 1, 1),
        Decision::Default
    );
    assert_eq!(
        one_node.decide(Coll::Broadcast as u32, 4 * MIB, 1, 0),
        Decision::Default
    );
    assert_eq!(
        one_node.decide(Coll::Reduce as u32, 4 * MIB, 1, 0),
        Decision::Default
    );
    assert_eq!(
        t.specialise(&Comm::new(16, 2)).decide(AR, KIB, 7, 1),
        force(Algo::Tree, Proto::Simple, 8)
    );
    assert_eq!(
        t.specialise(&Comm::new(32, 4)).decide(AR, KIB, 1, 0),
        force(Algo::Tree, Proto::Simple, 8)
    );
    assert_eq!(
        t.specialise(&Comm::new(32, 2)).decide(AR, KIB, 1, 0),
        Decision::Default
    );
    assert_eq!(
        t.specialise(&Comm::new(32, 2)).context(Coll::AllReduce),
        Some(5)
    );
}

#[test]
fn empty_table_leaves_nccl_alone() {
    let bytes = load("empty_v1.0.tbl");
    let t = Table::from_bytes(&bytes).unwrap();
    assert_eq!(t.context_count(), 0);
    assert!(t.specialise(&Comm::new(16, 2)).is_empty());
    for coll in 0..5 {
        for n in [0, 1, KIB, MIB, u64::MAX] {
            assert_eq!(
                t.lookup(coll, &Comm::new(16, 2), n, 1, 0).decision,
                Decision::Default
            );
        }
    }
    assert_eq!(
        t.meta("coverage"),
        Some("no contexts: NCCL decides everything")
    );
}
