//! Replays the runtime's fuzz seeds and crash inputs under plain `cargo
//! test`: every file in `runtime/testdata/fuzz/<target>/` goes through the
//! function that cargo-fuzz target calls (`support/fuzz.rs`, the harness of
//! `runtime/fuzz/`), with the same checks.

use std::path::Path;

#[path = "support/fuzz.rs"]
mod fuzz;

#[test]
fn replay_every_fuzz_input_through_its_target() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/fuzz");
    for t in fuzz::TARGETS {
        let (target, mut n) = (t.name, 0);
        for e in std::fs::read_dir(root.join(target)).unwrap() {
            let p = e.unwrap().path();
            eprintln!(
                "replaying {target}/{}",
                p.file_name().unwrap().to_string_lossy()
            );
            (t.run)(&std::fs::read(&p).unwrap());
            n += 1;
        }
        assert!(n > 0, "runtime/testdata/fuzz/{target} holds no seeds");
    }
    let dirs = std::fs::read_dir(&root)
        .unwrap()
        .filter(|e| e.as_ref().unwrap().path().is_dir())
        .count();
    assert_eq!(
        dirs,
        fuzz::TARGETS.len(),
        "a directory of inputs no target replays"
    );
}

/// The environment rules, through the lookup `from_env` uses.
#[test]
fn config_reads_the_documented_values() {
    use dyncc_runtime::plugin::{Config, MismatchPolicy};
    use std::ffi::OsString;
    let cfg = |t: Option<&str>, s: Option<&str>, m: Option<&str>| {
        Config::from_vars(|k| {
            match k {
                "DYNCC_TABLE" => t,
                "DYNCC_STRICT" => s,
                "DYNCC_NCCL_MISMATCH" => m,
                _ => None,
            }
            .map(OsString::from)
        })
    };
    assert_eq!(
        cfg(None, None, None),
        Config {
            table: None,
            strict: true,
            ..Default::default()
        }
    );
    let c = cfg(Some("/t.tbl"), Some(" Off "), Some("IGNORE"));
    assert_eq!(
        (c.table.as_deref(), c.strict, c.nccl_mismatch),
        (Some("/t.tbl".as_ref()), false, MismatchPolicy::Ignore)
    );
    let c = cfg(Some(""), Some("1"), Some("never"));
    assert_eq!(
        (
            c.table,
            c.strict,
            c.nccl_mismatch,
            c.bad_nccl_mismatch.as_deref()
        ),
        (None, true, MismatchPolicy::Warn, Some("never"))
    );
}
