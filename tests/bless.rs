//! One switch regenerates golden files: every test that can rewrite a
//! committed file it compares against reads `DYNCC_BLESS` (what `make
//! bless` sets), never a name of its own.

use std::path::Path;

use crate::support::cli::root;

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            if !p.ends_with("target") {
                rust_files(&p, out);
            }
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn golden_files_have_one_regeneration_switch() {
    let root = root();
    let mut files = Vec::new();
    for d in ["compiler", "tests", "benches", "tables", "runtime"] {
        rust_files(&root.join(d), &mut files);
    }
    let mut blessing = Vec::new();
    let mut others = Vec::new();
    for f in &files {
        let src = std::fs::read_to_string(f).unwrap();
        // Environment variables read: `var("NAME")` / `var_os("NAME")`.
        for (i, _) in src
            .match_indices("var(\"")
            .chain(src.match_indices("var_os(\""))
        {
            let name = src[i..].split('"').nth(1).unwrap_or("");
            let rel = f.strip_prefix(&root).unwrap().display().to_string();
            if name == "DYNCC_BLESS" {
                blessing.push(rel);
            } else if [
                "BLESS",
                "REGEN",
                "GOLDEN",
                "UPDATE",
                "SNAPSHOT",
                "OVERWRITE",
            ]
            .iter()
            .any(|w| name.contains(w))
            {
                others.push(format!("{rel}: {name}"));
            }
        }
    }
    assert!(
        others.is_empty(),
        "tests that regenerate files under another switch than DYNCC_BLESS: {others:?}"
    );
    // The header and the golden tables; `make bless` runs both.
    assert!(blessing.len() >= 2, "DYNCC_BLESS read only in {blessing:?}");
    let make = std::fs::read_to_string(root.join("Makefile")).unwrap();
    for test in ["header_is_current", "--test golden"] {
        assert!(
            make.contains("DYNCC_BLESS=1 $(CARGO) test") && make.contains(test),
            "`make bless` does not run {test}"
        );
    }
}
