//! Replays every file in `tables/testdata/fuzz/` through the fuzz target's
//! code (`support/harness.rs`), so a crash the fuzzer found once stays
//! fixed under plain `cargo test`. Files named `corrupt-*.tbl` are
//! hand-made broken tables (see `make_seeds.py` there) and must also be
//! rejected with the specific error listed below; crash inputs from
//! `cargo fuzz` go in as `crash-<what broke>` with a line in the README.

use std::path::Path;

use dyncc_tables::{Error, Table};

#[path = "support/harness.rs"]
mod harness;

fn dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/fuzz")
}

#[test]
fn replay_every_input() {
    let mut n = 0;
    for entry in std::fs::read_dir(dir()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "py" || e == "md") {
            continue;
        }
        let data = std::fs::read(&path).unwrap();
        // A panic here names the file via the test output.
        eprintln!("replaying {}", path.display());
        harness::exercise_patched(&data);
        harness::exercise(&data);
        n += 1;
    }
    assert!(
        n >= 8,
        "expected the hand-made seeds at least, found {n} inputs"
    );
}

#[test]
fn corrupt_seeds_give_their_specific_error() {
    let check = |name: &str, ok: &dyn Fn(Error) -> bool| {
        let data = std::fs::read(dir().join(name)).unwrap();
        let e = Table::from_bytes(&data).expect_err(name);
        assert!(ok(e), "{name}: unexpected error {e:?} ({e})");
    };
    check("corrupt-truncated.tbl", &|e| {
        matches!(
            e,
            Error::Truncated {
                need: 811,
                have: 100
            }
        )
    });
    check("corrupt-bad-magic.tbl", &|e| e == Error::BadMagic);
    check("corrupt-bad-crc.tbl", &|e| {
        matches!(e, Error::Checksum { .. })
    });
    check("corrupt-newer-major.tbl", &|e| {
        e == Error::UnsupportedVersion {
            found: 2,
            supported: 1,
        }
    });
    check(
        "corrupt-child-loop.tbl",
        &|e| matches!(e, Error::BadTree { tree: 0, node: 2, what } if what.contains("child index")),
    );
    check("corrupt-section-overlap.tbl", &|e| {
        e == Error::BadSection {
            kind: 2,
            what: "section overlaps another",
        }
    });
    check("corrupt-nan-gain.tbl", &|e| {
        e == Error::BadRule {
            context: 0,
            index: 0,
            what: "gain is not finite",
        }
    });
    check("corrupt-section-count.tbl", &|e| {
        matches!(e, Error::BadHeader { .. })
    });
    check("corrupt-header-reserved.tbl", &|e| {
        e == Error::BadHeader {
            what: "reserved field (bytes 36..40) is not zero",
        }
    });
    check(
        "corrupt-channels-200.tbl",
        &|e| matches!(e, Error::BadRule { context: 0, index: 0, what } if what.contains("MAXCHANNELS")),
    );
}
