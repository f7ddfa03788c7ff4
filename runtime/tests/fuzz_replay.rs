//! Replays the runtime's fuzz seeds and crash inputs under plain `cargo
//! test`: every file in `runtime/testdata/fuzz/<target>/` goes through the
//! function that cargo-fuzz target calls (`support/fuzz.rs`, the harness of
//! `runtime/fuzz/`), with the same checks.

use std::path::Path;

#[path = "support/fuzz.rs"]
mod fuzz;

fn inputs() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/fuzz")
}

/// Runs every input of `target` (its directory of inputs) through `run`.
fn replay(target: &str, run: fn(&[u8])) {
    let mut n = 0;
    for e in std::fs::read_dir(inputs().join(target)).unwrap() {
        let p = e.unwrap().path();
        eprintln!(
            "replaying {target}/{}",
            p.file_name().unwrap().to_string_lossy()
        );
        run(&std::fs::read(&p).unwrap());
        n += 1;
    }
    assert!(n > 0, "runtime/testdata/fuzz/{target} holds no seeds");
}

#[test]
fn replay_runtime_env_inputs() {
    replay("runtime_env", fuzz::env);
}

#[test]
fn replay_nccl_version_inputs() {
    replay("nccl_version", fuzz::nccl_version);
}

/// Every directory of inputs is a target replayed above and listed in
/// runtime/fuzz/Cargo.toml.
#[test]
fn every_input_directory_is_a_target() {
    let fuzz_toml =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/Cargo.toml"))
            .unwrap();
    let mut dirs: Vec<String> = std::fs::read_dir(inputs())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    dirs.sort();
    assert_eq!(dirs, ["nccl_version", "runtime_env"]);
    for d in &dirs {
        assert!(
            fuzz_toml.contains(&format!("name = \"{d}\"")),
            "runtime/fuzz builds no target {d}"
        );
    }
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
