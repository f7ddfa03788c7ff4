//! Replays the compiler's fuzz seeds and crash inputs under plain `cargo
//! test`: every file in `tests/fuzz_inputs/<target>/` goes through the
//! function that cargo-fuzz target calls (`support/fuzz.rs`, the one
//! harness of `fuzz/`), with the same checks. The table crate replays its
//! inputs in tables/tests/fuzz_regressions.rs, the runtime its own in
//! runtime/tests/fuzz_replay.rs.

use std::io::Cursor;
use std::path::{Path, PathBuf};

use dyncc::ingest::{self, Format, IngestOptions};

use crate::support::fuzz::TARGETS;

fn dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fuzz_inputs")
        .join(target)
}

#[test]
fn replay_every_fuzz_input_through_its_target() {
    for t in TARGETS {
        let (target, mut n) = (t.name, 0);
        let entries = std::fs::read_dir(dir(target))
            .unwrap_or_else(|e| panic!("tests/fuzz_inputs/{target}: {e} (every target has seeds)"));
        for e in entries {
            let p = e.unwrap().path();
            let data = std::fs::read(&p).unwrap();
            eprintln!(
                "replaying {target}/{}",
                p.file_name().unwrap().to_string_lossy()
            );
            (t.run)(&data);
            n += 1;
        }
        assert!(n > 0, "tests/fuzz_inputs/{target} holds no seeds");
    }
}

/// Every directory of inputs is replayed: one named for no target would
/// hold seeds nothing runs.
#[test]
fn every_input_directory_is_a_target() {
    let names: Vec<&str> = TARGETS.iter().map(|t| t.name).collect();
    for e in
        std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz_inputs")).unwrap()
    {
        let p = e.unwrap().path();
        if p.is_dir() {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            assert!(
                names.contains(&name.as_str()),
                "tests/fuzz_inputs/{name}: no such fuzz target"
            );
        }
    }
}

/// The fuzz crate builds exactly the targets the harness lists.
#[test]
fn the_fuzz_crate_builds_every_target() {
    let manifest: toml::Table =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/Cargo.toml"))
            .unwrap()
            .parse()
            .unwrap();
    let mut bins: Vec<&str> = manifest["bin"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["name"].as_str().unwrap())
        .collect();
    bins.sort_unstable();
    let mut targets: Vec<&str> = TARGETS.iter().map(|t| t.name).collect();
    targets.sort_unstable();
    assert_eq!(bins, targets);
}

/// The NUL seed: strict reading stops at the binary line with an error that
/// names the line; lenient reading keeps the rows before it.
#[test]
fn binary_data_in_a_log_is_an_error_naming_the_line() {
    let data = std::fs::read(dir("ingest_text").join("seed-nul-mid-row.log")).unwrap();
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

/// `NCCL version 99999999.0.0` in a log (or a label) overflowed the
/// version code: a panic in debug builds, a wrong version in release.
/// Found by the `name_pattern` seeds; such a version is now refused.
#[test]
fn a_nccl_version_too_large_for_a_code_is_refused_not_an_overflow() {
    use dyncc::ingest::knobs::parse_nccl_version;
    assert_eq!(parse_nccl_version("99999999.0.0"), None);
    assert_eq!(parse_nccl_version("429497.0.0"), None);
    assert_eq!(parse_nccl_version("2.4294967295.0"), None);
    assert_eq!(parse_nccl_version("429496.72.95"), Some(u32::MAX));
    assert_eq!(parse_nccl_version("2.23.4"), Some(22304));
}
