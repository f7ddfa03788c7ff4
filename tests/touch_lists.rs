//! The touch lists in the docs of `Setting` and `Comm` (what a new knob or
//! a new communicator field changes) stay true: every file they name
//! exists, every `file::item` names an item that file defines, and the
//! callers `Comm`'s doc says take one do.

use std::path::{Path, PathBuf};

use crate::support::cli::root;

/// The doc comment right above `pub struct {name}` in `src`.
fn doc_of(src: &str, name: &str) -> String {
    let at = src
        .find(&format!("pub struct {name} {{"))
        .unwrap_or_else(|| panic!("tables/src/nccl.rs: no `pub struct {name}`"));
    let mut lines: Vec<&str> = src[..at]
        .lines()
        .rev()
        .skip_while(|l| l.trim_start().starts_with("#["))
        .take_while(|l| l.trim_start().starts_with("///"))
        .collect();
    lines.reverse();
    lines.join(" ").replace("///", " ")
}

/// The `` `path.rs` `` and `` `path.rs::item` `` spans of a doc.
fn named_files(doc: &str) -> Vec<(String, Option<String>)> {
    doc.split('`')
        .skip(1)
        .step_by(2)
        .filter_map(|span| {
            let (file, item) = match span.split_once("::") {
                Some((f, i)) => (f, Some(i.to_string())),
                None => (span, None),
            };
            (file.ends_with(".rs") || file.ends_with(".md")).then(|| (file.to_string(), item))
        })
        .collect()
}

/// Where a named file is: from the repository root, or (a short name) in
/// the tables crate or the compiler.
fn resolve(root: &Path, file: &str) -> Option<PathBuf> {
    ["", "tables/src", "tables", "compiler"]
        .iter()
        .map(|d| root.join(d).join(file))
        .find(|p| p.is_file())
}

fn check(name: &str) -> usize {
    let root = root();
    let src = std::fs::read_to_string(root.join("tables/src/nccl.rs")).unwrap();
    let doc = doc_of(&src, name);
    let files = named_files(&doc);
    for (file, item) in &files {
        let path = resolve(&root, file).unwrap_or_else(|| {
            panic!("`{name}`'s doc names {file}, which is not in the tree: fix the doc")
        });
        if let Some(item) = item {
            let text = std::fs::read_to_string(&path).unwrap();
            let defines = ["fn ", "struct ", "enum ", "type "]
                .iter()
                .any(|k| text.contains(&format!("{k}{item}")));
            assert!(
                defines,
                "`{name}`'s doc names {file}::{item}, which {} does not define: fix the doc",
                path.display()
            );
        }
    }
    files.len()
}

#[test]
fn setting_doc_names_files_that_exist() {
    assert!(
        check("Setting") >= 5,
        "Setting's doc lists the files a knob touches"
    );
}

#[test]
fn comm_doc_names_files_that_exist_and_its_callers_take_one() {
    assert!(
        check("Comm") >= 5,
        "Comm's doc lists the files a field touches"
    );
    // The callers Comm's doc names pass one to the table, not numbers.
    for f in [
        "runtime/src/plugin.rs",
        "runtime/src/capi.rs",
        "compiler/cmd/query.rs",
    ] {
        let text = std::fs::read_to_string(root().join(f)).unwrap();
        assert!(
            text.contains("Comm::new("),
            "{f} builds no Comm, yet Comm's doc says it passes one"
        );
    }
}
