//! The harness of every compiler fuzz target: one function per parser of
//! untrusted bytes, each with the checks its target makes. The cargo-fuzz
//! targets in `fuzz/` include this file (`#[path]`) and call one function
//! each; `tests/fuzz_replay.rs` replays the committed seeds and crash
//! inputs (`tests/fuzz_inputs/<target>/`) through the same functions under
//! `cargo test`. It uses only dyncc's public API, so it compiles in both.
//!
//! Every function must return (never panic) on any bytes; a panic is the
//! finding.

use std::io::Cursor;
use std::path::{Path, PathBuf};

use dyncc::ingest::labels::{Manifest, NamePattern};
use dyncc::ingest::{self, knobs, Assumptions, Format, IngestOptions};
use dyncc::record::Collective;

/// A fuzz target: its name (the cargo-fuzz binary, the directory of its
/// inputs) and the function it runs.
pub struct Target {
    pub name: &'static str,
    pub run: fn(&[u8]),
}

impl Target {
    pub const fn new(name: &'static str, run: fn(&[u8])) -> Target {
        Target { name, run }
    }
}

/// Every target: what `fuzz/` builds and what the replay test walks.
pub const TARGETS: [Target; 8] = [
    Target::new("ingest_text", |d| ingest(Format::NcclTestsText, d)),
    Target::new("ingest_csv", |d| ingest(Format::TunerCsv, d)),
    Target::new("ingest_json", |d| ingest(Format::NcclTestsJson, d)),
    Target::new("ingest_nvidia_raw", |d| ingest(Format::NvidiaRawCsv, d)),
    Target::new("detect", detect),
    Target::new("path_knobs", path_knobs),
    Target::new("manifest", manifest),
    Target::new("name_pattern", name_pattern),
];

/// The name a format's input is read under. Names matter: NVIDIA's raw
/// reader takes the node count and platform from `<platform>/data/<nodes>.csv`,
/// so this one reaches its row parser.
pub fn file_name(format: Format) -> &'static str {
    match format {
        Format::NcclTestsText => "all_reduce.log",
        Format::TunerCsv => "t.csv",
        Format::NcclTestsJson => "r.json",
        Format::NvidiaRawCsv => "DGX-1V/data/2.csv",
        Format::Other => "notes.md",
    }
}

/// One ingest reader on `data`, strict and lenient: Ok or a clean error;
/// lenient reading of in-memory input never fails; every record kept has
/// a finite, positive time; outlier flagging and aggregation run.
pub fn ingest(format: Format, data: &[u8]) {
    read_checked(Path::new(file_name(format)), format, data);
}

/// Format detection, then the detected reader: the first line is the file
/// name, the rest its content (what `dyncc` does with every file it walks).
pub fn detect(data: &[u8]) {
    let (name, head) = split_line(data);
    let path = PathBuf::from(String::from_utf8_lossy(name).into_owned());
    let format = ingest::detect(&path, head);
    assert_eq!(
        format,
        ingest::detect(&path, head),
        "detect is not deterministic"
    );
    read_checked(&path, format, head);
}

/// Knobs in a path (`NCCL_ALGO=Ring/NCCL_PROTO=LL128/x.log`) and in a
/// `# dyncc:` line, resolved for every collective: Ok or an error, never a
/// panic.
pub fn path_knobs(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let from_path = knobs::from_path(Path::new(text.as_ref()));
    let mut line = Assumptions::default();
    let line_ok = line.parse_header_line(&text).is_ok();
    for coll in [
        Collective::Broadcast,
        Collective::Reduce,
        Collective::AllGather,
        Collective::ReduceScatter,
        Collective::AllReduce,
        Collective::AllToAll,
    ] {
        let _ = knobs::resolve(&[&from_path], coll);
        if line_ok {
            let _ = knobs::resolve(&[&line.knobs, &from_path], coll);
        }
    }
    for word in text.split(['/', ' ', ',', '=']) {
        let _ = knobs::parse_channels(word);
        let _ = knobs::parse_nccl_version(word);
    }
}

/// A `--manifest` CSV, then the labels it gives a few file names.
pub fn manifest(data: &[u8]) {
    let Ok(m) = Manifest::parse(Path::new("m.csv"), Path::new("/"), Cursor::new(data)) else {
        return;
    };
    let files: Vec<PathBuf> = ["all_reduce.log", "n2/ring_ll.log", "x.json", ""]
        .iter()
        .map(PathBuf::from)
        .collect();
    for f in &files {
        let _ = m.labels_for(f);
    }
    let _ = m.unused_rows(&files);
}

/// A `--name-pattern` (the first line) and the labels it reads from file
/// names (the other lines).
pub fn name_pattern(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let mut lines = text.lines();
    let Ok(p) = NamePattern::parse(lines.next().unwrap_or("")) else {
        return;
    };
    for name in lines {
        let _ = p.labels_for(Path::new(name));
    }
}

fn split_line(data: &[u8]) -> (&[u8], &[u8]) {
    match data.iter().position(|&b| b == b'\n') {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[]),
    }
}

fn read_checked(path: &Path, format: Format, data: &[u8]) {
    for lenient in [false, true] {
        let opts = IngestOptions {
            lenient,
            keep_unresolved: lenient,
            assume: vec![("default".into(), "1".into())],
            ..Default::default()
        };
        match ingest::read_with_format(path, Cursor::new(data), format, &opts) {
            Ok(mut ds) => {
                assert!(
                    ds.records
                        .iter()
                        .all(|r| r.measurement.time_us.is_finite() && r.measurement.time_us > 0.0),
                    "a record with a non-finite or non-positive time"
                );
                ingest::flag_outliers(&mut ds);
                let _ = ingest::aggregate(&ds.records);
            }
            // Lenient reading only fails on I/O, which a Cursor never does.
            Err(e) => assert!(!lenient, "lenient read failed: {e:#}"),
        }
    }
}
