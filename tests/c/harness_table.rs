//! The table the C harness (tests/c/harness.c) and the runtime's Rust tests
//! expect; its decisions are listed at the top of harness.c. Shared with
//! `#[path]` by tests/plugin_c.rs, runtime/tests and runtime/benches.

#![allow(dead_code)] // each includer uses a subset

use dyncc_tables::{
    size_bucket, Algo, Basis, Chunk, Coll, ContextSpec, Decision, Proto, RegBuff, Rule, Setting,
    TableBuilder,
};

fn force(algo: Algo, proto: Proto, channels: u8) -> Decision {
    Decision::Force(Setting::new(algo, proto).with_channels(channels))
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

/// The harness table's bytes (format 1.2: its AllGather PAT/Simple forces
/// 512 KiB chunks).
pub fn harness_table() -> Vec<u8> {
    let mut b = TableBuilder::new();
    b.meta("gpu", "H100");
    harness_decisions(b, true)
}

/// The harness table's decisions without `gpu` metadata, swept (says its
/// `nccl_version`) on NCCL 2.18.1 and 2.19.3, and without the AllGather
/// chunk (a format 1.0 table).
pub fn versioned_table() -> Vec<u8> {
    let mut b = TableBuilder::new();
    b.meta("nccl_version", "2.18.1,2.19.3");
    harness_decisions(b, false)
}

/// IEEE CRC-32 (as crc32fast), to reseal a deliberately edited table.
pub fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= b as u32;
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// The harness table with bytes at `offset` replaced and the CRC resealed,
/// so only that field is wrong (header layout: tables/src/raw.rs).
pub fn edited(offset: usize, value: &[u8]) -> Vec<u8> {
    let mut t = harness_table();
    t[offset..offset + value.len()].copy_from_slice(value);
    let crc = crc32(&t[40..]);
    t[32..36].copy_from_slice(&crc.to_le_bytes());
    t
}

/// The harness table whose first rule asks for 200 channels (NCCL has at
/// most 64): the builder refuses that, so the byte is edited in.
pub fn channels_200_table() -> Vec<u8> {
    let t = harness_table();
    let sections = u32::from_le_bytes(t[28..32].try_into().unwrap()) as usize;
    let rules = (0..sections)
        .map(|i| 40 + 12 * i)
        .find(|&e| u32::from_le_bytes(t[e..e + 4].try_into().unwrap()) == 2)
        .map(|e| u32::from_le_bytes(t[e + 4..e + 8].try_into().unwrap()) as usize)
        .expect("RULES section");
    // RuleRecord: last_bucket, basis, reserved[2], decision (algo, proto,
    // channels, 0), gain.
    edited(rules + 6, &[200])
}

/// The harness table with the header's reserved field (bytes 36..40) 1.
pub fn reserved_table() -> Vec<u8> {
    edited(36, &1u32.to_le_bytes())
}

fn harness_decisions(mut b: TableBuilder, chunk: bool) -> Vec<u8> {
    let m = Basis::Measured;
    b.meta("platform", "harness-sim")
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
    let pat = Setting::new(Algo::Pat, Proto::Simple);
    let pat = match chunk {
        true => pat
            .with_chunk(Chunk::from_bytes(512 << 10).unwrap())
            .unwrap(),
        false => pat,
    };
    b.context(spec(Coll::AllGather, (1, 4)), &all(Decision::Force(pat)))
        .unwrap();
    b.context(
        spec(Coll::Broadcast, (1, 4)),
        &all(force(Algo::CollNetDirect, Proto::Simple, 2)),
    )
    .unwrap();
    // Gated on numPipeOps (the same on every rank); not on regBuff, which
    // NCCL computes per rank: a gate on it forces nothing (tables'
    // `RegBuff::agreed`), tested in tests/explore_c.rs.
    let rs = ContextSpec {
        max_pipe_ops: 1,
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
