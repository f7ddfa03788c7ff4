//! The table the C harness (tests/c/harness.c) and the runtime's Rust tests
//! expect; its decisions are listed at the top of harness.c. Shared with
//! `#[path]` by tests/plugin_c.rs, runtime/tests and runtime/benches.

#![allow(dead_code)] // each includer uses a subset

use dyncc_tables::{
    size_bucket, Algo, Basis, Coll, ContextSpec, Decision, Proto, RegBuff, Rule, TableBuilder,
};

fn force(algo: Algo, proto: Proto, channels: u8) -> Decision {
    Decision::Force {
        algo,
        proto,
        channels,
    }
}

fn spec(coll: Coll, nodes: (u32, u32)) -> ContextSpec {
    ContextSpec {
        coll,
        nodes,
        ppn: (1, 8),
        max_pipe_ops: 0,
        reg_buff: RegBuff::Any,
    }
}

fn all(d: Decision) -> [Rule; 1] {
    [Rule {
        last_bucket: 255,
        decision: d,
        basis: Basis::Measured,
        gain: 1.2,
    }]
}

/// The harness table's bytes.
pub fn harness_table() -> Vec<u8> {
    let m = Basis::Measured;
    let mut b = TableBuilder::new();
    b.meta("platform", "harness-sim")
        .meta("gpu", "H100")
        .meta("coverage", "5 contexts (harness)")
        .meta("command", "tests/c/harness_table.rs");
    // Context 0: what the harness's 8x1 communicator gets for AllReduce.
    let ar = [
        Rule {
            last_bucket: size_bucket(64 << 10),
            decision: force(Algo::Tree, Proto::LL, 0),
            basis: m,
            gain: 1.5,
        },
        Rule {
            last_bucket: size_bucket(4 << 20),
            decision: force(Algo::Ring, Proto::LL128, 4),
            basis: m,
            gain: 1.1,
        },
        Rule {
            last_bucket: 255,
            decision: Decision::Default,
            basis: m,
            gain: 1.0,
        },
    ];
    b.context(spec(Coll::AllReduce, (1, 4)), &ar).unwrap();
    b.context(
        spec(Coll::AllReduce, (5, 64)),
        &all(force(Algo::Tree, Proto::Simple, 0)),
    )
    .unwrap();
    b.context(
        spec(Coll::AllGather, (1, 4)),
        &all(force(Algo::Pat, Proto::Simple, 0)),
    )
    .unwrap();
    b.context(
        spec(Coll::Broadcast, (1, 4)),
        &all(force(Algo::CollNetDirect, Proto::Simple, 2)),
    )
    .unwrap();
    let rs = ContextSpec {
        max_pipe_ops: 1,
        reg_buff: RegBuff::Only0,
        ..spec(Coll::ReduceScatter, (1, 4))
    };
    b.context(rs, &all(force(Algo::Nvls, Proto::Simple, 8)))
        .unwrap();
    b.build().unwrap()
}

/// The harness table with one body byte flipped (fails the CRC check).
pub fn corrupt_table() -> Vec<u8> {
    let mut t = harness_table();
    let i = t.len() - 3;
    t[i] ^= 0x5a;
    t
}
