//! One test per validation error: start from a valid table, break exactly
//! one thing (re-sealing the CRC so the structural check is what fires),
//! and check `from_bytes` names that thing.

use std::vec;
use std::vec::Vec;

use crate::build::{assemble, TableBuilder};
use crate::raw::{kind, HEADER_LEN};
use crate::*;

const CRC_AT: usize = 32;

fn ll() -> Decision {
    Decision::Force(Setting::new(Algo::Tree, Proto::LL))
}

/// Two contexts (allreduce: rules ending at 10 and 255; allgather: one
/// rule), two trees (broadcast: 1 leaf; allreduce: split + 2 leaves) and
/// metadata keys a, b, nccl_enum.
fn fixture() -> Vec<u8> {
    let spec = |coll| ContextSpec {
        coll,
        nodes: (1, 4),
        ppn: (1, 8),
        max_pipe_ops: 0,
        reg_buff: RegBuff::Any,
    };
    let r = |last_bucket, decision| Rule {
        last_bucket,
        decision,
        basis: Basis::Measured,
        gain: 1.5,
    };
    let leaf = |decision| TreeNode::Leaf {
        decision,
        basis: Basis::Measured,
        gain: 1.5,
    };
    let mut b = TableBuilder::new();
    b.meta("a", "1").meta("b", "2");
    b.context(
        spec(Coll::AllReduce),
        &[r(10, ll()), r(255, Decision::Default)],
    )
    .unwrap();
    b.context(spec(Coll::AllGather), &[r(255, ll())]).unwrap();
    b.tree(Coll::Broadcast, &[leaf(ll())]).unwrap();
    b.tree(
        Coll::AllReduce,
        &[
            TreeNode::Split {
                feature: Feature::Log2Bytes,
                threshold: 16.0,
                left: 1,
                right: 2,
            },
            leaf(ll()),
            leaf(Decision::Default),
        ],
    )
    .unwrap();
    b.build().unwrap()
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

fn reseal(b: &mut [u8]) {
    let crc = crc32fast::hash(&b[HEADER_LEN..]);
    put_u32(b, CRC_AT, crc);
}

/// (directory entry offset, section offset) of section `k`.
fn section(b: &[u8], k: u32) -> (usize, usize) {
    let n = u32_at(b, 28) as usize;
    (0..n)
        .map(|i| HEADER_LEN + 12 * i)
        .find(|&e| u32_at(b, e) == k)
        .map(|e| (e, u32_at(b, e + 4) as usize))
        .unwrap()
}

fn ctx(b: &[u8], i: usize) -> usize {
    section(b, kind::CONTEXTS).1 + 32 * i
}
fn rule(b: &[u8], i: usize) -> usize {
    section(b, kind::RULES).1 + 12 * i
}
fn tree_entry(b: &[u8], t: usize) -> usize {
    section(b, kind::TREES).1 + 8 + 12 * t
}
fn node(b: &[u8], k: usize) -> usize {
    let s = section(b, kind::TREES).1;
    s + 8 + 12 * u32_at(b, s) as usize + 16 * k
}
fn meta_entry(b: &[u8], i: usize) -> usize {
    section(b, kind::META).1 + 8 + 16 * i
}

/// Applies `f` to a fresh fixture, reseals and returns the error.
fn broken(f: impl FnOnce(&mut Vec<u8>)) -> Error {
    let mut b = fixture();
    f(&mut b);
    reseal(&mut b);
    Table::from_bytes(&b).expect_err("corrupted table must be rejected")
}

fn err(b: &[u8]) -> Error {
    Table::from_bytes(b).expect_err("must be rejected")
}

#[test]
fn fixture_is_valid() {
    let b = fixture();
    let t = Table::from_bytes(&b).unwrap();
    assert_eq!(t.context_count(), 2);
    assert_eq!(t.meta("b"), Some("2"));
    assert_eq!(t.tree(Coll::AllReduce).unwrap().len(), 3);
}

#[test]
fn header_errors() {
    let b = fixture();
    let have = |n: usize| n as u64;
    assert_eq!(err(&[]), Error::Truncated { need: 40, have: 0 });
    assert_eq!(err(&b[..5]), Error::Truncated { need: 40, have: 5 });
    assert_eq!(err(&b[..9]), Error::Truncated { need: 40, have: 9 });
    assert_eq!(err(&b[..39]), Error::Truncated { need: 40, have: 39 });
    let total = b.len();
    assert_eq!(
        err(&b[..total - 1]),
        Error::Truncated {
            need: have(total),
            have: have(total - 1)
        }
    );
    let mut long = b.clone();
    long.push(0);
    assert_eq!(
        err(&long),
        Error::LengthMismatch {
            header: have(total),
            actual: have(total + 1)
        }
    );
    let mut m = b.clone();
    m[0] = b'X';
    assert_eq!(err(&m), Error::BadMagic);
    assert_eq!(err(b"NOTATABLE"), Error::BadMagic);
}

#[test]
fn newer_and_older_major_are_rejected_before_anything_else() {
    for major in [0u16, 2, 0xFFFF] {
        let mut b = fixture();
        b[8..10].copy_from_slice(&major.to_le_bytes());
        // Even with the rest of the header garbled, the version is reported.
        b.truncate(12);
        let e = Table::from_bytes(&b).unwrap_err();
        assert_eq!(
            e,
            Error::UnsupportedVersion {
                found: major,
                supported: 1
            }
        );
        let msg = std::format!("{e}");
        assert!(
            msg.contains(if major > 1 { "newer" } else { "not supported" }),
            "{msg}"
        );
    }
}

#[test]
fn newer_minor_with_unknown_section_loads() {
    // A 1.1 table may add section kinds; 1.0 readers skip them.
    let good = fixture();
    let t = Table::from_bytes(&good).unwrap();
    let secs: Vec<(u32, &[u8])> = [kind::CONTEXTS, kind::RULES, kind::TREES, kind::META]
        .iter()
        .map(|&k| {
            let (e, off) = section(&good, k);
            (k, &good[off..off + u32_at(&good, e + 8) as usize])
        })
        .chain([(99u32, &b"future"[..])])
        .collect();
    let mut b = assemble(&secs).unwrap();
    b[10..12].copy_from_slice(&1u16.to_le_bytes());
    reseal(&mut b);
    let t2 = Table::from_bytes(&b).unwrap();
    assert_eq!(t2.version(), (1, 1));
    assert_eq!(t2.coverage(), t.coverage());
    assert_eq!(
        t2.lookup(4, &Comm::new(4, 1), 100, 1, 0),
        t.lookup(4, &Comm::new(4, 1), 100, 1, 0)
    );
}

#[test]
fn header_field_errors() {
    let e = broken(|b| put_u32(b, 12, 39));
    assert!(matches!(e, Error::BadHeader { .. }), "{e:?}");
    let e = broken(|b| {
        let n = b.len() as u32;
        put_u32(b, 12, n + 1)
    });
    assert!(matches!(e, Error::BadHeader { .. }), "{e:?}");
    assert_eq!(
        broken(|b| put_u32(b, 24, 2)),
        Error::UnsupportedNcclLayout(2)
    );
    let e = broken(|b| put_u32(b, 28, 65));
    assert_eq!(
        e,
        Error::BadHeader {
            what: "more than 64 sections in the directory"
        }
    );
    let e = broken(|b| put_u32(b, 28, 64));
    assert_eq!(
        e,
        Error::BadHeader {
            what: "section directory runs past the end of the table"
        }
    );
}

#[test]
fn checksum_error() {
    let mut b = fixture();
    let expected = u32_at(&b, CRC_AT);
    let last = b.len() - 1;
    b[last] ^= 0x40;
    match Table::from_bytes(&b) {
        Err(Error::Checksum { expected: e, found }) => {
            assert_eq!(e, expected);
            assert_ne!(found, expected);
        }
        other => panic!("expected a checksum error, got {other:?}"),
    }
}

#[test]
fn section_errors() {
    let k = kind::CONTEXTS;
    let e = broken(|b| {
        let (e, _) = section(b, k);
        put_u32(b, e + 4, 0)
    });
    assert_eq!(
        e,
        Error::BadSection {
            kind: k,
            what: "section lies outside the table body"
        }
    );
    let e = broken(|b| {
        let (e, _) = section(b, k);
        put_u32(b, e + 8, 1 << 20)
    });
    assert_eq!(
        e,
        Error::BadSection {
            kind: k,
            what: "section lies outside the table body"
        }
    );
    let e = broken(|b| {
        let (_, ctx_off) = section(b, kind::CONTEXTS);
        let (e, _) = section(b, kind::RULES);
        put_u32(b, e + 4, ctx_off as u32 + 4)
    });
    assert_eq!(
        e,
        Error::BadSection {
            kind: kind::RULES,
            what: "section overlaps another"
        }
    );
    let e = broken(|b| {
        let (e, _) = section(b, kind::RULES);
        put_u32(b, e, kind::CONTEXTS)
    });
    assert_eq!(
        e,
        Error::BadSection {
            kind: k,
            what: "section appears twice"
        }
    );
    for missing in [kind::CONTEXTS, kind::RULES, kind::TREES, kind::META] {
        let e = broken(|b| {
            let (e, _) = section(b, missing);
            put_u32(b, e, 1000)
        });
        assert_eq!(e, Error::MissingSection { kind: missing });
    }
    let e = broken(|b| {
        let (e, _) = section(b, k);
        let l = u32_at(b, e + 8);
        put_u32(b, e + 8, l - 1)
    });
    assert!(matches!(e, Error::BadSection { kind: 1, .. }), "{e:?}");
    let e = broken(|b| {
        let (e, _) = section(b, kind::RULES);
        let l = u32_at(b, e + 8);
        put_u32(b, e + 8, l - 4)
    });
    assert!(matches!(e, Error::BadSection { kind: 2, .. }), "{e:?}");
    // Dropping context 1 leaves its rule owned by nobody.
    let e = broken(|b| {
        let (e, _) = section(b, k);
        put_u32(b, e + 8, 32)
    });
    assert_eq!(
        e,
        Error::BadSection {
            kind: 2,
            what: "some rules belong to no context"
        }
    );
}

#[test]
fn context_errors() {
    let cases: &[(usize, u32, &str)] = &[
        (0, 5, "collective is not 0..=4 (broadcast..allreduce)"),
        (1, 3, "reg_buff is not 0 (any), 1 (only 0) or 2 (only 1)"),
        (2, 1, "reserved bytes are not zero"),
    ];
    for &(at, v, what) in cases {
        let e = broken(|b| {
            let c = ctx(b, 1);
            b[c + at] = v as u8
        });
        assert_eq!(e, Error::BadContext { index: 1, what });
    }
    let cases: &[(usize, u32, &str)] = &[
        (4, 5, "node range is empty (min > max)"),
        (12, 9, "ranks-per-node range is empty (min > max)"),
        (
            24,
            1,
            "rule ranges do not tile the RULES section in context order",
        ),
        (
            28,
            0,
            "context has no rules (it needs at least one, ending at bucket 255)",
        ),
        (28, 2, "rule range runs past the end of the RULES section"),
    ];
    for &(at, v, what) in cases {
        let e = broken(|b| {
            let c = ctx(b, 1);
            put_u32(b, c + at, v)
        });
        assert_eq!(e, Error::BadContext { index: 1, what }, "field at {at}");
    }
}

#[test]
fn rule_errors() {
    let bad = |index, what| Error::BadRule {
        context: 0,
        index,
        what,
    };
    assert_eq!(
        broken(|b| {
            let r = rule(b, 1);
            b[r] = 10
        }),
        bad(1, "last_bucket values are not strictly increasing")
    );
    assert_eq!(
        broken(|b| {
            let r = rule(b, 1);
            b[r] = 200
        }),
        bad(1, "last rule does not end at bucket 255")
    );
    for packed in [
        0x0000_0007u32,
        0x0000_0300,
        0x0001_FFFF,
        0x0100_0200,
        0xC800_0000,
        0x0000_00FF,
    ] {
        assert_eq!(
            broken(|b| {
                let r = rule(b, 0);
                put_u32(b, r + 4, packed)
            }),
            bad(
                0,
                "decision is not a valid algorithm/protocol/channels encoding"
            ),
            "{packed:#x}"
        );
    }
    assert_eq!(
        broken(|b| {
            let r = rule(b, 0);
            b[r + 1] = 3
        }),
        bad(
            0,
            "basis is not 0 (measured), 1 (interpolated) or 2 (extrapolated)"
        )
    );
    assert_eq!(
        broken(|b| {
            let r = rule(b, 0);
            b[r + 3] = 1
        }),
        bad(0, "reserved bytes are not zero")
    );
    for (g, what) in [
        (f32::NAN, "gain is not finite"),
        (f32::INFINITY, "gain is not finite"),
        (0.0, "gain is not > 0"),
        (-1.0, "gain is not > 0"),
    ] {
        let e = broken(|b| {
            let r = rule(b, 0);
            put_u32(b, r + 8, g.to_bits())
        });
        assert_eq!(e, bad(0, what));
    }
}

#[test]
fn tree_errors() {
    let sec = |what| Error::BadSection {
        kind: kind::TREES,
        what,
    };
    assert_eq!(
        broken(|b| {
            let (e, _) = section(b, kind::TREES);
            put_u32(b, e + 8, 4)
        }),
        sec("shorter than its 8-byte count prefix")
    );
    assert_eq!(
        broken(|b| {
            let (_, s) = section(b, kind::TREES);
            put_u32(b, s + 4, 1)
        }),
        sec("reserved field is not zero")
    );
    assert_eq!(
        broken(|b| {
            let (_, s) = section(b, kind::TREES);
            put_u32(b, s, 1000)
        }),
        sec("entry count runs past the section end")
    );
    assert_eq!(
        broken(|b| {
            let (e, _) = section(b, kind::TREES);
            let l = u32_at(b, e + 8);
            put_u32(b, e + 8, l - 1)
        }),
        sec("node area is not a multiple of the 16-byte node record")
    );
    assert_eq!(
        broken(|b| {
            // Tree 1 keeps its split and first leaf; the last node is orphaned.
            let t = tree_entry(b, 1);
            put_u32(b, t + 8, 2);
            let n = node(b, 1);
            put_u32(b, n + 12, 1)
        }),
        sec("some tree nodes belong to no tree")
    );

    let tree1 = |what| Error::BadTree {
        tree: 1,
        node: 0,
        what,
    };
    let cases: &[(usize, u8, &str)] = &[
        (0, 5, "collective is not 0..=4"),
        (0, 0, "a second tree for the same collective"),
        (2, 1, "reserved bytes are not zero"),
    ];
    for &(at, v, what) in cases {
        let e = broken(|b| {
            let t = tree_entry(b, 1);
            b[t + at] = v
        });
        assert_eq!(e, tree1(what));
    }
    let cases: &[(usize, u32, &str)] = &[
        (4, 0, "node ranges do not tile the node area in tree order"),
        (8, 0, "tree has no nodes"),
        (8, 4, "node range runs past the end of the node area"),
    ];
    for &(at, v, what) in cases {
        let e = broken(|b| {
            let t = tree_entry(b, 1);
            put_u32(b, t + at, v)
        });
        assert_eq!(e, tree1(what));
    }

    // Node 0 of tree 1 (global node 1) is the split; node 1 (global 2) a leaf.
    let split = |what| Error::BadTree {
        tree: 1,
        node: 0,
        what,
    };
    let leaf = |what| Error::BadTree {
        tree: 1,
        node: 1,
        what,
    };
    let child = "child index is not after its parent and inside the tree";
    // (global node, field offset, 4-byte field?, value, expected error)
    let cases: &[(usize, usize, bool, u32, Error)] = &[
        (1, 1, false, 5, split("split feature is not 0..=4")),
        (
            1,
            4,
            true,
            f32::NAN.to_bits(),
            split("split threshold is not finite"),
        ),
        (
            1,
            4,
            true,
            f32::NEG_INFINITY.to_bits(),
            split("split threshold is not finite"),
        ),
        (1, 8, true, 0, split(child)),  // self loop
        (1, 12, true, 3, split(child)), // past the end
        (
            1,
            0,
            false,
            2,
            split("node kind is not 0 (split) or 1 (leaf)"),
        ),
        (1, 2, false, 1, split("reserved bytes are not zero")),
        (2, 1, false, 3, leaf("leaf basis is not 0..=2")),
        (
            2,
            4,
            true,
            0x0000_0009,
            leaf("leaf decision is not a valid encoding"),
        ),
        (2, 8, true, f32::NAN.to_bits(), leaf("gain is not finite")),
        (2, 8, true, 0, leaf("gain is not > 0")),
        (2, 12, true, 1, leaf("leaf's unused word is not zero")),
    ];
    for &(k, at, wide, v, want) in cases {
        let e = broken(|b| {
            let n = node(b, k) + at;
            if wide {
                put_u32(b, n, v)
            } else {
                b[n] = v as u8
            }
        });
        assert_eq!(e, want, "node {k} field {at}");
    }
}

#[test]
fn child_loop_back_to_root_is_rejected() {
    // A split in a deeper position pointing back at the root would loop
    // forever in a naive walk.
    let e = broken(|b| {
        let n = node(b, 1);
        put_u32(b, n + 12, 0)
    });
    assert_eq!(
        e,
        Error::BadTree {
            tree: 1,
            node: 0,
            what: "child index is not after its parent and inside the tree"
        }
    );
}

#[test]
fn meta_errors() {
    let bad = |index, what| Error::BadMeta { index, what };
    let strings_len = |b: &[u8]| {
        let (e, s) = section(b, kind::META);
        u32_at(b, e + 8) as usize - 8 - 16 * u32_at(b, s) as usize
    };
    assert_eq!(
        broken(|b| {
            let m = meta_entry(b, 0);
            let n = strings_len(b) as u32;
            put_u32(b, m, n)
        }),
        bad(0, "key lies outside the string area")
    );
    assert_eq!(
        broken(|b| {
            let m = meta_entry(b, 0);
            put_u32(b, m + 12, u32::MAX)
        }),
        bad(0, "value lies outside the string area")
    );
    // Strings are "a" "1" "b" "2" "nccl_enum" ...: offsets 0, 1, 2, 3, 4.
    let strings = |b: &[u8]| {
        let (_, s) = section(b, kind::META);
        s + 8 + 16 * u32_at(b, s) as usize
    };
    assert_eq!(
        broken(|b| {
            let s = strings(b);
            b[s] = 0xFF
        }),
        bad(0, "key is not UTF-8")
    );
    assert_eq!(
        broken(|b| {
            let s = strings(b);
            b[s + 1] = 0xC0
        }),
        bad(0, "value is not UTF-8")
    );
    assert_eq!(
        broken(|b| {
            let m = meta_entry(b, 1);
            put_u32(b, m + 4, 0)
        }),
        bad(1, "key is empty")
    );
    assert_eq!(
        broken(|b| {
            let s = strings(b);
            b[s + 2] = b'a' // key 1 "b" -> "a", a duplicate
        }),
        bad(1, "keys are not sorted and unique")
    );
    assert_eq!(
        broken(|b| {
            let s = strings(b);
            b[s] = b'z' // key 0 "a" -> "z", after "b"
        }),
        bad(1, "keys are not sorted and unique")
    );
}

#[test]
fn errors_display_in_plain_words() {
    let e = Error::Truncated {
        need: 4096,
        have: 100,
    };
    assert_eq!(
        std::format!("{e}"),
        "table is truncated: it needs 4096 bytes, the file has 100 (was the copy interrupted?)"
    );
    let e = Error::BadRule {
        context: 3,
        index: 2,
        what: "gain is not finite",
    };
    assert_eq!(
        std::format!("{e}"),
        "table context 3, rule 2 is invalid: gain is not finite"
    );
}

#[test]
fn newer_minor_with_longer_header_loads() {
    // A later minor may append header fields; readers start the directory
    // at header_len and the CRC still covers the appended bytes.
    let old = fixture();
    let mut b = old[..HEADER_LEN].to_vec();
    b.extend_from_slice(&[0xAB; 8]);
    b.extend_from_slice(&old[HEADER_LEN..]);
    put_u32(&mut b, 12, 48);
    let total = b.len() as u32;
    put_u32(&mut b, 16, total);
    let n = u32_at(&b, 28) as usize;
    for i in 0..n {
        let e = 48 + 12 * i;
        let off = u32_at(&b, e + 4);
        put_u32(&mut b, e + 4, off + 8);
    }
    reseal(&mut b);
    let t = Table::from_bytes(&b).unwrap();
    let t0 = Table::from_bytes(&old).unwrap();
    assert_eq!(t.coverage(), t0.coverage());
    assert_eq!(t.meta("a"), Some("1"));
    b[44] ^= 1; // inside the appended header bytes: caught by the CRC
    assert!(matches!(Table::from_bytes(&b), Err(Error::Checksum { .. })));
}

/// FORMAT.md: the header's `reserved` (bytes 36..40) "must be zero to
/// load"; 1.0 readers loaded any value (issue 12, item 5).
#[test]
fn nonzero_header_reserved_is_rejected() {
    for v in [1u32, 0x8000_0000, u32::MAX] {
        assert_eq!(
            broken(|b| put_u32(b, 36, v)),
            Error::BadHeader {
                what: "reserved field (bytes 36..40) is not zero"
            },
            "reserved = {v:#x}"
        );
    }
}

/// A header announcing more than MAX_TABLE_LEN bytes is refused from the
/// header alone (the plugin refuses such a file from its size before
/// reading it).
#[test]
fn total_len_over_the_format_limit_is_rejected_before_length_checks() {
    let over = (MAX_TABLE_LEN + 1) as u32;
    let e = broken(|b| put_u32(b, 16, over));
    assert_eq!(
        e,
        Error::BadHeader {
            what: "total_len is over the format's 64 MiB limit"
        }
    );
    // Exactly the limit is allowed by this check (and then fails on length).
    let e = broken(|b| put_u32(b, 16, MAX_TABLE_LEN as u32));
    assert!(matches!(e, Error::Truncated { .. }), "{e:?}");
}

/// NCCL has at most 64 channels (MAXCHANNELS): a rule or tree leaf asking
/// for more is rejected with a message that says so (issue 12, item 4;
/// the plugin handed NCCL 255 channels before).
#[test]
fn channels_over_nccl_maxchannels_are_rejected() {
    let want = "channel count is above 64, NCCL's MAXCHANNELS (NCCL has no more channels)";
    for ch in [65u32, 200, 255] {
        let e = broken(|b| {
            let at = rule(b, 0) + 4;
            let packed = u32_at(b, at) | ch << 16;
            put_u32(b, at, packed)
        });
        assert_eq!(
            e,
            Error::BadRule {
                context: 0,
                index: 0,
                what: want
            },
            "{ch} channels"
        );
        // Tree 0 is broadcast's single leaf.
        let e = broken(|b| {
            let at = node(b, 0) + 4;
            let packed = u32_at(b, at) | ch << 16;
            put_u32(b, at, packed)
        });
        assert_eq!(
            e,
            Error::BadTree {
                tree: 0,
                node: 0,
                what: want
            },
            "{ch} channels in a leaf"
        );
    }
    // 64 itself loads.
    let mut b = fixture();
    let at = rule(&b, 0) + 4;
    let packed = u32_at(&b, at) | 64 << 16;
    put_u32(&mut b, at, packed);
    reseal(&mut b);
    let t = Table::from_bytes(&b).unwrap();
    assert_eq!(
        t.lookup(Coll::AllReduce as u32, &Comm::new(8, 1), 0, 1, 0)
            .decision,
        Decision::Force(Setting::new(Algo::Tree, Proto::LL).with_channels(64))
    );
}

/// The builder refuses what the reader would refuse: more than 64 channels
/// in a rule or a tree leaf.
#[test]
fn builder_refuses_channels_over_nccl_maxchannels() {
    let d = Decision::Force(Setting::new(Algo::Ring, Proto::Simple).with_channels(65));
    let spec = ContextSpec {
        coll: Coll::AllReduce,
        nodes: (1, 4),
        ppn: (1, 8),
        max_pipe_ops: 0,
        reg_buff: RegBuff::Any,
    };
    let rule = Rule {
        last_bucket: 255,
        decision: d,
        basis: Basis::Measured,
        gain: 1.2,
    };
    let e = TableBuilder::new().context(spec, &[rule]).unwrap_err();
    assert!(
        matches!(e, crate::BuildError::Rule { index: 0, what } if what.contains("MAXCHANNELS")),
        "{e:?}"
    );
    let leaf = TreeNode::Leaf {
        decision: d,
        basis: Basis::Measured,
        gain: 1.2,
    };
    let e = TableBuilder::new()
        .tree(Coll::AllReduce, &[leaf])
        .unwrap_err();
    assert!(
        matches!(e, crate::BuildError::Tree { node: 0, what, .. } if what.contains("MAXCHANNELS")),
        "{e:?}"
    );
}

/// The digest is XXH3-64 (seed 0) of the whole image, as FORMAT.md says:
/// the published XXH3 test vectors, and a table's digest equal to the
/// function of its bytes.
#[test]
fn digest_is_xxh3_64_of_the_whole_image() {
    // xxHash's reference values (xxhsum -H3, python xxhash.xxh3_64).
    assert_eq!(digest(b""), 0x2d06_8005_38d3_94c2);
    assert_eq!(digest(b"a"), 0xe6c6_32b6_1e96_4e1f);
    let b = fixture();
    let t = Table::from_bytes(&b).unwrap();
    assert_eq!(t.digest(), digest(&b));
    let mut other = b.clone();
    other[HEADER_LEN + 20] ^= 1;
    assert_ne!(digest(&other), t.digest());
}

/// Five contexts of 1, 7, 3, 12 and 2 rules (25 rules: whole lane groups
/// of the fast rule scan, a tail, context boundaries inside a group), mixing
/// forced and Default decisions, every basis, channels up to 64.
fn many_rules_fixture() -> Vec<u8> {
    let mut b = TableBuilder::new();
    let mut k = 0u32;
    for (c, n) in [1u32, 7, 3, 12, 2].into_iter().enumerate() {
        let rules: Vec<Rule> = (0..n)
            .map(|i| {
                k += 1;
                Rule {
                    last_bucket: if i + 1 == n {
                        255
                    } else {
                        (i * 20 + c as u32) as u8
                    },
                    decision: if k.is_multiple_of(4) {
                        Decision::Default
                    } else {
                        Decision::Force(
                            Setting::new(Algo::ALL[(k % 7) as usize], Proto::ALL[(k % 3) as usize])
                                .with_channels([0, 1, 64][(k % 3) as usize]),
                        )
                    },
                    basis: Basis::ALL[(k % 3) as usize],
                    gain: 0.5 + k as f32 / 8.0,
                }
            })
            .collect();
        let spec = ContextSpec {
            coll: Coll::ALL[c % 5],
            nodes: (1, 1 + c as u32),
            ppn: (1, 8),
            max_pipe_ops: c as u32,
            reg_buff: RegBuff::from_u8((c % 3) as u8).unwrap(),
        };
        b.context(spec, &rules).unwrap();
    }
    b.build().unwrap()
}

/// The CONTEXTS and RULES records of a table image.
fn context_and_rule_records(b: &[u8]) -> (&[crate::raw::ContextRecord], &[crate::raw::RuleRecord]) {
    use zerocopy::FromBytes;
    let sec = |k| {
        let (e, off) = section(b, k);
        &b[off..off + u32_at(b, e + 8) as usize]
    };
    (
        <[crate::raw::ContextRecord]>::ref_from_bytes(sec(kind::CONTEXTS)).unwrap(),
        <[crate::raw::RuleRecord]>::ref_from_bytes(sec(kind::RULES)).unwrap(),
    )
}

/// `from_bytes` decides CONTEXTS and RULES with a fused one-pass scan and
/// walks them rule by rule only to name a problem. The scan must accept
/// exactly what the walk accepts: every byte of both sections set to each
/// of a set of telling values (limits of every field, 255 for
/// `last_bucket`, Default's bytes, float bit patterns), on two tables;
/// whatever the walk rejects, `from_bytes` rejects with the walk's error.
#[test]
fn fast_rule_scan_accepts_exactly_what_the_exact_walk_accepts() {
    use crate::table::{scan_contexts, validate_contexts_exact};
    let values = [
        0u8, 1, 2, 3, 4, 5, 6, 7, 9, 10, 20, 63, 64, 65, 0x7F, 0x80, 0xC8, 0xFE, 0xFF,
    ];
    let mut rejected = 0;
    for base in [fixture(), many_rules_fixture()] {
        let (c0, r0) = context_and_rule_records(&base);
        let forced = r0
            .iter()
            .filter(|r| r.decision.get() != PACKED_DEFAULT)
            .count() as u32;
        assert_eq!(scan_contexts(c0, r0), Some(forced));
        let (ce, co) = section(&base, kind::CONTEXTS);
        let (re, ro) = section(&base, kind::RULES);
        let ranges = [
            co..co + u32_at(&base, ce + 8) as usize,
            ro..ro + u32_at(&base, re + 8) as usize,
        ];
        for at in ranges.into_iter().flatten() {
            for v in values {
                let mut b = base.clone();
                b[at] = v;
                let (c, r) = context_and_rule_records(&b);
                let exact = validate_contexts_exact(c, r);
                let fast = scan_contexts(c, r);
                assert_eq!(
                    fast.is_some(),
                    exact.is_ok(),
                    "byte {at} = {v:#x}: {exact:?}"
                );
                reseal(&mut b);
                match exact {
                    Ok(()) => assert!(Table::from_bytes(&b).is_ok(), "byte {at} = {v:#x}"),
                    Err(e) => {
                        rejected += 1;
                        assert_eq!(err(&b), e, "byte {at} = {v:#x}")
                    }
                }
            }
        }
    }
    assert!(rejected > 1000, "only {rejected} mutations were rejected");
}

/// The same agreement for two whole words changed at once (a context's
/// rule range, a rule's decision and gain, ...), at random.
#[test]
fn fast_rule_scan_agrees_with_the_exact_walk_on_random_word_pairs() {
    use crate::table::{scan_contexts, validate_contexts_exact};
    use proptest::prelude::*;
    let base = many_rules_fixture();
    let (ce, co) = section(&base, kind::CONTEXTS);
    let (re, ro) = section(&base, kind::RULES);
    let words = (u32_at(&base, ce + 8) + u32_at(&base, re + 8)) as usize / 4;
    let word_value = prop_oneof![
        any::<u32>(),
        Just(0u32),
        Just(PACKED_DEFAULT),
        Just(0x00FF),
        (0u32..=0x41_0000).prop_map(|v| v & 0x41_0303),
        (0u32..=255).prop_map(|lb| lb | 0x100),
        Just(1.0f32.to_bits()),
        Just(f32::MAX.to_bits()),
        Just(f32::INFINITY.to_bits()),
        Just(0x8000_0001),
        (0u32..8),
    ];
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(4000));
    runner
        .run(
            &(0..words, word_value.clone(), 0..words, word_value),
            |(i, v, j, w)| {
                let mut b = base.clone();
                let at = |k: usize| {
                    let ctx_words = u32_at(&base, ce + 8) as usize / 4;
                    if k < ctx_words {
                        co + 4 * k
                    } else {
                        ro + 4 * (k - ctx_words)
                    }
                };
                put_u32(&mut b, at(i), v);
                put_u32(&mut b, at(j), w);
                let (c, r) = context_and_rule_records(&b);
                let exact = validate_contexts_exact(c, r);
                prop_assert_eq!(scan_contexts(c, r).is_some(), exact.is_ok(), "{:?}", exact);
                Ok(())
            },
        )
        .unwrap();
}

/// The scan's branch-free decision check is `Decision::from_packed`: every
/// algorithm and protocol byte with telling channel and reserved bytes.
#[test]
fn branch_free_decision_check_is_from_packed() {
    for a in 0..=255u32 {
        for p in 0..=255u32 {
            for ch in [0u32, 1, 63, 64, 65, 127, 128, 255] {
                for reserved in [0u32, 1, 0x27, 0x68, 0x80, 0xC7, 0xC8, 0xFF] {
                    let v = a | p << 8 | ch << 16 | reserved << 24;
                    assert_eq!(
                        crate::model::packed_is_valid(v),
                        Decision::from_packed(v).is_some(),
                        "{v:#010x}"
                    );
                }
            }
        }
    }
}

/// The scan's one-comparison gain check is `check_gain`: the edges of the
/// finite positive floats and a sweep of the whole bit space.
#[test]
fn one_comparison_gain_check_is_check_gain() {
    let edges = [
        0u32,
        1,
        2,
        0x0080_0000,
        0x3F80_0000,
        0x7F7F_FFFE,
        0x7F7F_FFFF,
        0x7F80_0000,
        0x7F80_0001,
        0x7FC0_0000,
        0x7FFF_FFFF,
        0x8000_0000,
        0x8000_0001,
        0xBF80_0000,
        0xFF80_0000,
        0xFFFF_FFFF,
    ];
    let sweep = (0..=u32::MAX).step_by(65_521);
    for bits in edges.into_iter().chain(sweep) {
        assert_eq!(
            crate::model::gain_bits_ok(bits),
            crate::model::check_gain(f32::from_bits(bits)).is_ok(),
            "{bits:#010x}"
        );
    }
}

/// `coverage().forced_rules` is counted by the validating scan now: it is
/// still the number of rules whose decision is not Default.
#[test]
fn coverage_counts_forcing_rules() {
    let b = many_rules_fixture();
    let t = Table::from_bytes(&b).unwrap();
    let forced = t
        .contexts()
        .flat_map(|c| c.rules())
        .filter(|r| r.decision.is_forced())
        .count() as u32;
    assert_eq!(t.coverage().rules, 25);
    assert_eq!(t.coverage().forced_rules, forced);
    assert!(0 < forced && forced < 25);
}

/// The same agreement when bucket 255 moves between rules: every pair of
/// rules, one set to end at 255 and the other to a telling `last_bucket`
/// (a context whose last rule no longer ends at 255 while another gains a
/// second 255 keeps the count of 255s; only the per-context check of the
/// last rule tells).
#[test]
fn fast_rule_scan_agrees_with_the_exact_walk_when_bucket_255_moves() {
    use crate::table::{scan_contexts, validate_contexts_exact};
    let base = many_rules_fixture();
    let n = u32_at(&base, section(&base, kind::RULES).0 + 8) as usize / 12;
    let mut rejected = 0;
    for i in 0..n {
        for j in 0..n {
            for v in [0u8, 1, 100, 230, 254, 255] {
                let mut b = base.clone();
                let (rj, ri) = (rule(&b, j), rule(&b, i));
                b[rj] = 255;
                b[ri] = v;
                let (c, r) = context_and_rule_records(&b);
                let exact = validate_contexts_exact(c, r);
                rejected += usize::from(exact.is_err());
                assert_eq!(
                    scan_contexts(c, r).is_some(),
                    exact.is_ok(),
                    "rule {i} ends at {v}, rule {j} at 255: {exact:?}"
                );
            }
        }
    }
    assert!(rejected > 1000, "only {rejected} were rejected");
}

/// The same agreement when RULES is longer or shorter than the contexts'
/// ranges: every prefix of the contexts against every prefix of the rules
/// (rules left to no context, even ones without a 255; ranges running past
/// the end).
#[test]
fn fast_rule_scan_agrees_with_the_exact_walk_on_cut_sections() {
    use crate::table::{scan_contexts, validate_contexts_exact};
    let base = many_rules_fixture();
    let (c, r) = context_and_rule_records(&base);
    let mut rejected = 0;
    for k in 0..=c.len() {
        for m in 0..=r.len() {
            let exact = validate_contexts_exact(&c[..k], &r[..m]);
            rejected += usize::from(exact.is_err());
            assert_eq!(
                scan_contexts(&c[..k], &r[..m]).is_some(),
                exact.is_ok(),
                "{k} contexts, {m} rules: {exact:?}"
            );
        }
    }
    assert_eq!(rejected, (c.len() + 1) * (r.len() + 1) - (c.len() + 1));
}
