//! Replays the ingest fuzz seeds and crash inputs (tests/fuzz_inputs/ingest/)
//! under plain `cargo test`, with the checks of the cargo-fuzz targets in
//! fuzz/ (`ingest_text`, `ingest_csv`, `ingest_json`): strict reading gives Ok
//! or an error, never a panic; lenient reading of in-memory input never
//! fails; every record kept has a finite, positive time; outlier flagging and
//! aggregation run. The table crate replays its own inputs in
//! tables/tests/fuzz_regressions.rs.

use std::io::Cursor;
use std::path::{Path, PathBuf};

use dyncc::ingest::{self, Format, IngestOptions};

fn dir(kind: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fuzz_inputs/ingest")
        .join(kind)
}

/// What every ingest fuzz target checks, for one input.
fn exercise(name: &str, data: &[u8], format: Format) {
    for lenient in [false, true] {
        let opts = IngestOptions {
            lenient,
            keep_unresolved: lenient,
            assume: vec![("default".into(), "1".into())],
            ..Default::default()
        };
        let r = ingest::read_with_format(Path::new(name), Cursor::new(data), format, &opts);
        match r {
            Ok(mut ds) => {
                assert!(
                    ds.records
                        .iter()
                        .all(|r| r.measurement.time_us.is_finite() && r.measurement.time_us > 0.0),
                    "{name}: a record with a non-finite or non-positive time"
                );
                ingest::flag_outliers(&mut ds);
                let _ = ingest::aggregate(&ds.records);
            }
            Err(e) => assert!(!lenient, "{name}: lenient read failed: {e:#}"),
        }
    }
}

#[test]
fn replay_every_ingest_fuzz_input() {
    let mut n = 0;
    for (kind, format) in [
        ("text", Format::NcclTestsText),
        ("csv", Format::TunerCsv),
        ("json", Format::NcclTestsJson),
    ] {
        for e in std::fs::read_dir(dir(kind)).unwrap() {
            let p = e.unwrap().path();
            let data = std::fs::read(&p).unwrap();
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            eprintln!("replaying {kind}/{name}");
            exercise(&name, &data, format);
            n += 1;
        }
    }
    assert!(n >= 4, "expected the committed seeds at least, found {n}");
}

/// The NUL seed: strict reading stops at the binary line with an error that
/// names the line; lenient reading keeps the rows before it.
#[test]
fn binary_data_in_a_log_is_an_error_naming_the_line() {
    let data = std::fs::read(dir("text").join("seed-nul-mid-row.log")).unwrap();
    let e = ingest::read_with_format(
        Path::new("seed.log"),
        Cursor::new(&data),
        Format::NcclTestsText,
        &IngestOptions::default(),
    )
    .unwrap_err();
    assert!(
        format!("{e:#}").contains("seed.log:4: binary data"),
        "{e:#}"
    );
}
