//! Every crate of the workspace declares only what its code uses: each
//! `[dependencies]` entry is named as a crate by the crate's sources, each
//! `[dev-dependencies]` entry by its tests, benches or sources, each
//! `[build-dependencies]` entry by its build script (a dependency nobody
//! uses still costs build time and audit surface; `thiserror` was one).
//!
//! "Named as a crate" means a path rooted at the crate (`use csv::Reader`,
//! `csv::Reader::from_path`, `::csv::Writer`, `csv!`) in code: a mention in
//! a comment or a string, or a path through a local module of the same name
//! (`ingest::csv::read_tuner`, `mod csv;` then `csv::read_tuner`), does not
//! count.

use std::path::Path;

use crate::support::cli::root;

/// Every `.rs` file under `dir` (or `dir` itself), with its text.
fn sources(dir: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        if d.is_file() {
            out.push((
                d.display().to_string(),
                std::fs::read_to_string(&d).unwrap(),
            ));
            continue;
        }
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries {
            let p = e.unwrap().path();
            if p.is_dir() || p.extension().is_some_and(|x| x == "rs") {
                stack.push(p);
            }
        }
    }
    out
}

/// `src` with comments, string literals and char literals blanked out
/// (lifetimes kept), so only code is searched.
fn code_only(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let mut depth = 0;
                while i < b.len() {
                    if b[i..].starts_with(b"/*") {
                        depth += 1;
                        i += 2;
                    } else if b[i..].starts_with(b"*/") {
                        depth -= 1;
                        i += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        i += 1;
                    }
                }
                out.push(' ');
            }
            b'r' if !prev_is_ident(b, i)
                && matches!(b.get(i + 1), Some(b'"' | b'#'))
                && b[i + 1..].iter().find(|&&c| c != b'#') == Some(&b'"') =>
            {
                let hashes = b[i + 1..].iter().take_while(|&&c| c == b'#').count();
                let close: Vec<u8> = std::iter::once(b'"')
                    .chain(std::iter::repeat_n(b'#', hashes))
                    .collect();
                i += 2 + hashes;
                while i < b.len() && !b[i..].starts_with(&close) {
                    i += 1;
                }
                i += close.len();
                out.push_str("\"\"");
            }
            b'"' => {
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
                out.push_str("\"\"");
            }
            // A char literal ('a', '\n', '\u{1F600}', '"'); a lifetime ('a) has no closing quote.
            b'\'' if b.get(i + 1) == Some(&b'\\') || src[i + 1..].chars().nth(1) == Some('\'') => {
                i += 1;
                while i < b.len() && b[i] != b'\'' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
                out.push_str("' '");
            }
            _ => {
                let c = src[i..].chars().next().unwrap();
                out.push(c);
                i += c.len_utf8();
            }
        }
    }
    out
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

fn prev_is_ident(b: &[u8], i: usize) -> bool {
    i > 0 && is_ident(b[i - 1])
}

/// Whether `code` (already [`code_only`]) names the crate `krate` in a path
/// rooted at it. A file that declares or imports a local item of that name
/// (`mod csv;`, `use super::csv;`, `use super::{csv, json};`) is not read
/// for bare `krate::` paths, which mean that item there.
fn names_crate(code: &str, krate: &str) -> bool {
    let b = code.as_bytes();
    // Whole-identifier occurrences of `krate`.
    let hits: Vec<usize> = code
        .match_indices(krate)
        .map(|(i, _)| i)
        .filter(|&i| !prev_is_ident(b, i) && !b.get(i + krate.len()).is_some_and(|&c| is_ident(c)))
        .collect();
    let after = |i: usize| code[i + krate.len()..].trim_start();
    let before = |i: usize| code[..i].trim_end();
    // A path that starts at `krate` (`krate::`, `::krate::`), not one that
    // passes through it (`super::krate::`, `ingest::krate::`).
    let rooted = |i: usize| {
        let pre = before(i);
        match pre.strip_suffix("::") {
            Some(p) => !p
                .trim_end()
                .bytes()
                .last()
                .is_some_and(|c| is_ident(c) || c == b'>'),
            None => !pre.ends_with('.'),
        }
    };
    // `use` statements: rooted at the crate, or importing a local item of that name.
    let mut shadowed = hits.iter().any(|&i| {
        let pre = before(i);
        pre.ends_with("mod") && !prev_is_ident(pre.as_bytes(), pre.len() - 3)
    });
    for (u, _) in code.match_indices("use ") {
        if prev_is_ident(b, u) {
            continue;
        }
        let end = code[u..].find(';').map_or(code.len(), |e| u + e);
        for &i in hits.iter().filter(|&&i| i > u && i < end) {
            if rooted(i) && after(i).starts_with("::") && before(i).ends_with("use") {
                return true;
            }
            if !after(i).starts_with("::") && !before(i).ends_with("use") {
                shadowed = true;
            }
        }
        // `use krate;` / `use krate as k;`
        if hits
            .iter()
            .any(|&i| i > u && i < end && before(i).ends_with("use"))
        {
            return true;
        }
    }
    if code.contains(&format!("extern crate {krate}")) {
        return true;
    }
    hits.iter().any(|&i| {
        let a = after(i);
        let pre = before(i);
        let bare = !pre.ends_with("::");
        rooted(i) && (a.starts_with("::") && !(shadowed && bare) || a.starts_with('!'))
    })
}

/// The `table` entries of `manifest` that no file in `dirs` names as a crate.
fn unused(manifest: &toml::Table, table: &str, dirs: &[&Path]) -> Vec<String> {
    let Some(deps) = manifest.get(table).and_then(|d| d.as_table()) else {
        return Vec::new();
    };
    let code: Vec<String> = dirs
        .iter()
        .flat_map(|d| sources(d))
        .map(|(_, s)| code_only(&s))
        .collect();
    assert!(!code.is_empty(), "no sources under {dirs:?}");
    deps.keys()
        .filter(|name| {
            let krate = name.replace('-', "_");
            !code.iter().any(|c| names_crate(c, &krate))
        })
        .cloned()
        .collect()
}

#[test]
fn every_dependency_of_every_crate_is_used() {
    let root = root();
    // (crate dir, its library/binary sources, its tests and benches)
    let crates: [(&str, &[&str], &[&str]); 3] = [
        (".", &["compiler"], &["tests", "benches"]),
        (
            "tables",
            &["tables/src"],
            &["tables/tests", "tables/benches"],
        ),
        (
            "runtime",
            &["runtime/src"],
            &["runtime/tests", "runtime/benches"],
        ),
    ];
    let mut problems = Vec::new();
    let mut checked = 0;
    for (dir, src, tests) in crates {
        let manifest: toml::Table = std::fs::read_to_string(root.join(dir).join("Cargo.toml"))
            .unwrap()
            .parse()
            .unwrap();
        let src: Vec<_> = src.iter().map(|d| root.join(d)).collect();
        let all: Vec<_> = src
            .iter()
            .cloned()
            .chain(tests.iter().map(|d| root.join(d)))
            .collect();
        let build = root.join(dir).join("build.rs");
        for (table, dirs) in [
            (
                "dependencies",
                src.iter().map(|p| p.as_path()).collect::<Vec<_>>(),
            ),
            (
                "dev-dependencies",
                all.iter().map(|p| p.as_path()).collect(),
            ),
            ("build-dependencies", vec![build.as_path()]),
        ] {
            checked += manifest
                .get(table)
                .and_then(|d| d.as_table())
                .map_or(0, |t| t.len());
            for name in unused(&manifest, table, &dirs) {
                problems.push(format!("{dir}/Cargo.toml [{table}] {name}"));
            }
        }
    }
    assert!(
        checked >= 20,
        "only {checked} dependencies found: is the manifest layout unchanged?"
    );
    assert!(
        problems.is_empty(),
        "dependencies no code of their crate names as a crate: {problems:?} (remove them, or \
         move test-only ones to [dev-dependencies])"
    );
}

/// The check itself: comments, strings and local modules of the same name
/// are not uses; rooted paths, imports and macros are.
#[test]
fn a_crate_is_named_only_by_code_rooted_at_it() {
    let unused = [
        "// csv::Reader in a comment\nfn f() {}",
        "/* use csv::Reader; /* nested */ */ fn f() {}",
        r#"fn f() { let s = "csv::Reader"; let r = r"csv::x"; }"#,
        "fn f() { crate::ingest::csv::read_tuner(); super::csv::x(); }",
        "mod csv;\nfn f() { csv::read_tuner(); }",
        "use super::{csv, json};\nfn f() { csv::read_tuner(); }",
        "use crate::ingest::csv;\nfn f() { csv::read_tuner(); }",
        "fn f<'csv>(x: &'csv u8) { let c = ':'; x.csv(); }",
        "fn f() { let mycsv = csv_like::x(); }",
    ];
    for src in unused {
        assert!(
            !names_crate(&code_only(src), "csv"),
            "counted as a use: {src}"
        );
    }
    let used = [
        "use csv::ReaderBuilder;",
        "use csv;",
        "fn f() { let r = csv::ReaderBuilder::new(); }",
        "fn f() { let r = ::csv::Writer::from_path(p); }",
        "fn f() { let v: Vec<csv::StringRecord> = csv!(); }",
        "use std::io;\nuse {csv::Reader, std::fs};",
        "mod csv;\nfn f() { ::csv::Reader::from_path(p); }",
    ];
    for src in used {
        assert!(
            names_crate(&code_only(src), "csv"),
            "not counted as a use: {src}"
        );
    }
}
