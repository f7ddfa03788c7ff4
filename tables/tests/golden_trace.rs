//! Golden trace files: committed `.trace` files that today's reader must
//! keep reading, field for field. Traces outlive releases (a job's trace
//! is compiled by a later dyncc), so every format version's file stays.
//!
//! `tables/golden/trace_v<major>.trace` of the current major is written by
//! [`sample`] with the encoder; with `DYNCC_BLESS=1` (`make bless`) this
//! test rewrites it, else it checks the encoder still writes it byte for
//! byte (with the `alloc` feature: the encoder). Files of older majors are
//! never rewritten, nor are those of the current major's older minors
//! (`trace_v<major>.<minor>.trace`, kept when the minor moved on).

use std::path::{Path, PathBuf};

#[cfg(feature = "alloc")]
use dyncc_tables::trace::{encode_full, TraceHead};
use dyncc_tables::trace::{
    Source, Trace, TraceComm, TraceOtherPaths, TraceRecord, TraceShape, TraceTag, TraceVariant,
};
use dyncc_tables::{size_bucket, Algo, Chunk, Coll, Proto, Setting, TRACE_MAJOR, TRACE_MINOR};

fn golden(major: u16) -> PathBuf {
    golden_named(&format!("trace_v{major}.trace"))
}

fn golden_named(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("golden")
        .join(name)
}

/// The current major's older minors, kept: (file, minor).
const OLDER_MINORS: [(&str, u16); 4] = [
    ("trace_v3.0.trace", 0),
    ("trace_v3.1.trace", 1),
    ("trace_v3.2.trace", 2),
    ("trace_v3.3.trace", 3),
];

/// Minor 4's symmetric-kernel variants: the 12 symmetric collectives of
/// [`other_paths`], by the kernel variant that ran them.
fn variants() -> [TraceVariant; 2] {
    [
        TraceVariant::new(b"AGxLL_R", 9).unwrap(),
        TraceVariant::new(b"ARxLLMC_R", 3).unwrap(),
    ]
}

/// Minor 1's other paths and tags: 12 collectives ran as a symmetric
/// kernel, 5 on the copy engines; the communicator's calls carried two
/// tags.
fn other_paths() -> TraceOtherPaths {
    TraceOtherPaths {
        symmetric: 12,
        copy_engine: 5,
    }
}

fn tags() -> [TraceTag; 2] {
    [
        TraceTag {
            comm: 0,
            tag: 0x101,
        },
        TraceTag {
            comm: 0,
            tag: 0x7000_0000_0000_0001,
        },
    ]
}

fn comm() -> TraceComm<'static> {
    TraceComm {
        comm_id: 0x00c0_ffee_0000_0042,
        n_nodes: 2,
        n_ranks: 16,
        rank: 0,
        name: "dp",
    }
}

fn records() -> [TraceRecord; 2] {
    let r = |source, algo, count: u64, ns: f64| {
        let ln = ns.ln();
        TraceRecord {
            comm: 0,
            coll: Coll::AllReduce,
            n_bytes: 4 << 20,
            setting: Setting::new(algo, Proto::Simple).with_channels(16),
            source,
            count,
            sum_ln: count as f64 * ln,
            sum_ln2: count as f64 * ln * ln,
            min_ns: ns as u64,
            max_ns: ns as u64,
        }
    };
    [
        r(Source::Nccl, Algo::Ring, 490, 1_000_000.0),
        r(Source::Explore, Algo::Tree, 10, 800_000.0),
    ]
}

/// Minor 2's records: the explored one ran with 512 KiB chunks.
fn records_with_chunk() -> [TraceRecord; 2] {
    let [nccl, mut explored] = records();
    let chunk = Chunk::from_bytes(512 << 10).unwrap();
    explored.setting = explored.setting.with_chunk(chunk).unwrap();
    [nccl, explored]
}

/// Major 3's shapes: the tuner answered 2000 calls at the records' shape,
/// of which the records hold 500 (recording stopped once the shape had its
/// evidence), and 300 ran as a symmetric kernel (minor 3).
fn shapes() -> [TraceShape; 1] {
    [TraceShape {
        symmetric: 300,
        copy_engine: 0,
        ..TraceShape::new(0, Coll::AllReduce, size_bucket(4 << 20), 2000)
    }]
}

/// The shapes as a file before minor 3 holds them: no other paths.
fn shapes_before_minor_3() -> [TraceShape; 1] {
    shapes().map(|s| TraceShape {
        symmetric: 0,
        copy_engine: 0,
        ..s
    })
}

/// What the current major writes: fixed facts (no clock, no pid).
#[cfg(feature = "alloc")]
fn sample() -> Vec<u8> {
    let head = TraceHead {
        profiler_abi: 6,
        table_digest: Some(0x3f1c_0d5e_9a7b_2c41),
        nccl_version: 23007,
        pid: 4242,
        host: "node-017",
        job_id: "123456",
        platform: "golden-fixture",
        gpu: "none (hand-written fixture)",
        sweep: Some(0x5eed_0f5e_ed5a_ba5e),
        dropped_table_full: 1,
        dropped_pool_full: 2,
        untimed: 3,
    };
    encode_full(
        &head,
        &[comm()],
        &records_with_chunk(),
        &shapes(),
        &other_paths(),
        &tags(),
        &variants(),
    )
    .unwrap()
}

/// The facts every golden file holds, whatever its major.
fn check_common(t: &Trace<'_>) {
    let h = t.head();
    assert_eq!(h.profiler_abi, 6);
    assert_eq!(h.table_digest, Some(0x3f1c_0d5e_9a7b_2c41));
    assert_eq!(h.nccl_version, 23007);
    assert_eq!((h.pid, h.host, h.job_id), (4242, "node-017", "123456"));
    assert_eq!(
        (h.dropped_table_full, h.dropped_pool_full, h.untimed),
        (1, 2, 3)
    );
    assert_eq!(t.comms().collect::<Vec<_>>(), vec![comm()]);
    // Every file's records; chunks from minor 2 on (checked there).
    let read: Vec<_> = t
        .records()
        .map(|mut r| {
            r.setting = r.setting.without_chunk();
            r
        })
        .collect();
    assert_eq!(read, records().to_vec());
    if t.minor() < 2 {
        assert!(t.records().all(|r| r.setting.chunk.is_nccl()));
    }
}

#[cfg(feature = "alloc")]
#[test]
fn the_current_trace_format_is_written_as_committed() {
    let bytes = sample();
    let p = golden(TRACE_MAJOR);
    if std::env::var_os("DYNCC_BLESS").is_some() {
        std::fs::write(&p, &bytes).unwrap();
    }
    let committed = std::fs::read(&p)
        .unwrap_or_else(|e| panic!("{}: {e} (DYNCC_BLESS=1 writes it)", p.display()));
    assert!(
        committed == bytes,
        "{} drifted: `make bless` after an intended change",
        p.display()
    );
    let t = Trace::from_bytes(&committed).unwrap();
    check_common(&t);
    assert_eq!(t.minor(), TRACE_MINOR);
    assert_eq!(t.records().collect::<Vec<_>>(), records_with_chunk());
    assert_eq!(t.other_paths(), other_paths());
    assert_eq!(t.tags().collect::<Vec<_>>(), tags());
    assert_eq!(t.variants().collect::<Vec<_>>(), variants());
    assert_eq!(t.variants().next().unwrap().name(), "AGxLL_R");
}

/// The current major's files of older minors are read as they were:
/// minor 0 of major 3 has no other paths and no tags, minors before 2 no
/// chunks, minors before 3 no per-shape other paths.
#[test]
fn older_minors_of_the_current_major_are_still_read() {
    for (name, minor) in OLDER_MINORS {
        let p = golden_named(name);
        let bytes = std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        let t = Trace::from_bytes(&bytes).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        check_common(&t);
        assert_eq!(t.minor(), minor, "{}", p.display());
        // Before minor 3 a shape's other paths were reserved: read as 0.
        let want = if minor >= 3 {
            shapes()
        } else {
            shapes_before_minor_3()
        };
        assert_eq!(t.shapes().collect::<Vec<_>>(), want.to_vec());
        // Before minor 4 no variants.
        assert_eq!(t.variants().count(), 0, "{}", p.display());
        if minor == 0 {
            assert_eq!(t.other_paths(), TraceOtherPaths::default());
            assert_eq!(t.tags().count(), 0);
        } else {
            assert_eq!(t.other_paths(), other_paths());
            assert_eq!(t.tags().collect::<Vec<_>>(), tags());
        }
    }
}

#[test]
fn every_committed_trace_version_is_still_read() {
    for major in 1..=TRACE_MAJOR {
        let p = golden(major);
        let bytes = std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        let t = Trace::from_bytes(&bytes).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        check_common(&t);
        // Major 1 had no platform: read as empty.
        let want = if major >= 2 {
            ("golden-fixture", "none (hand-written fixture)")
        } else {
            ("", "")
        };
        assert_eq!((t.head().platform, t.head().gpu), want, "{}", p.display());
        // Majors 1 and 2 had no shapes: read as none.
        let want: Vec<TraceShape> = if major >= 3 {
            shapes().to_vec()
        } else {
            Vec::new()
        };
        assert_eq!(t.shapes().collect::<Vec<_>>(), want, "{}", p.display());
        // Major 3 added the sweep's fingerprint; older files have none.
        let sweep = (major >= 3).then_some(0x5eed_0f5e_ed5a_ba5e);
        assert_eq!(t.head().sweep, sweep, "{}", p.display());
    }
}
