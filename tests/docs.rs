//! The documents a newcomer reads: every relative link in README.md,
//! CHANGELOG.md and the book (docs/) resolves, the book's links stay inside
//! the book (what mdBook renders), every page is in its summary, none names
//! a path a clone lacks, and README keeps its two promised commands and its
//! length.

use std::path::{Path, PathBuf};

use crate::support::cli::root;

fn markdown_under(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            if !p.ends_with("book") {
                markdown_under(&p, out);
            }
        } else if p.extension().is_some_and(|x| x == "md") {
            out.push(p);
        }
    }
}

/// The documents checked: README.md, CHANGELOG.md and docs/**/*.md.
fn documents() -> Vec<PathBuf> {
    let root = root();
    let mut v = vec![root.join("README.md"), root.join("CHANGELOG.md")];
    markdown_under(&root.join("docs"), &mut v);
    v
}

/// The targets of the inline links `[text](target)` and images in `md`,
/// outside code spans and fenced blocks, with their line numbers.
fn links(md: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut fenced = false;
    for (i, line) in md.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced || line.starts_with("    ") {
            continue;
        }
        // Drop code spans, whose brackets are not links.
        let mut text = String::new();
        for (k, part) in line.split('`').enumerate() {
            if k % 2 == 0 {
                text.push_str(part);
            }
        }
        let mut rest = text.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            let target = after[..end].split_whitespace().next().unwrap_or("");
            out.push((i + 1, target.to_string()));
            rest = &after[end..];
        }
    }
    out
}

fn is_external(t: &str) -> bool {
    t.starts_with("http://") || t.starts_with("https://") || t.starts_with("mailto:")
}

#[test]
fn every_relative_link_resolves() {
    let root = root();
    let book = root.join("docs/src");
    let mut broken = Vec::new();
    let mut checked = 0;
    for doc in documents() {
        let md = std::fs::read_to_string(&doc).unwrap();
        let rel = doc.strip_prefix(&root).unwrap().display().to_string();
        for (line, target) in links(&md) {
            if is_external(&target) || target.starts_with('#') || target.is_empty() {
                continue;
            }
            let path = target.split('#').next().unwrap();
            let resolved = doc.parent().unwrap().join(path);
            checked += 1;
            if !resolved.exists() {
                broken.push(format!("{rel}:{line}: {target} does not exist"));
                continue;
            }
            // The book is rendered from docs/src alone: a link out of it
            // would be broken in the HTML.
            if doc.starts_with(&book) {
                let canon = resolved.canonicalize().unwrap();
                if !canon.starts_with(book.canonicalize().unwrap()) {
                    broken.push(format!(
                        "{rel}:{line}: {target} leaves docs/src, which the rendered book \
                         does not hold; name the file as code instead, or include it"
                    ));
                }
            }
        }
    }
    assert!(
        checked > 20,
        "only {checked} links found: is the parser right?"
    );
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn every_book_page_is_in_the_summary() {
    let src = root().join("docs/src");
    let summary = std::fs::read_to_string(src.join("SUMMARY.md")).unwrap();
    let listed: Vec<String> = links(&summary).into_iter().map(|(_, t)| t).collect();
    let mut pages = Vec::new();
    markdown_under(&src, &mut pages);
    for p in pages {
        let rel = p.strip_prefix(&src).unwrap().display().to_string();
        if rel == "SUMMARY.md" {
            continue;
        }
        assert!(
            listed.contains(&rel),
            "docs/src/{rel} is not in docs/src/SUMMARY.md"
        );
    }
}

/// Every markdown file of the repository the checks below read: all of
/// them but build outputs and the published files copied verbatim into
/// tests/data/real/ (other people's notes, which must stay as published;
/// its README.md is ours and is checked).
fn every_markdown_file() -> Vec<PathBuf> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(root).unwrap();
            let name = p.file_name().unwrap().to_string_lossy();
            if p.is_dir() {
                let skip = name == "target"
                    || name.starts_with('.')
                    || rel == Path::new("docs/book")
                    || rel.starts_with("fuzz/corpus");
                if !skip {
                    walk(root, &p, out);
                }
            } else if p.extension().is_some_and(|x| x == "md") {
                let published = rel.starts_with("tests/data/real")
                    && rel != Path::new("tests/data/real/README.md");
                if !published {
                    out.push(p);
                }
            }
        }
    }
    let root = root();
    let mut v = Vec::new();
    walk(&root, &root, &mut v);
    v.sort();
    v
}

/// What a reader of a clone cannot open on `line`: the development
/// checkout's shared folder, or an issue number with no link to the
/// tracker that holds it ("issue 44" means nothing outside this project's
/// tracker; "[NCCL issue #1136](https://github.com/NVIDIA/nccl/issues/1136)"
/// resolves).
fn unresolvable(line: &str) -> Option<String> {
    let lower = line.to_lowercase();
    for path in [
        "../shared",
        "shared/reference",
        "shared/datasets",
        "shared/design",
    ] {
        if lower.contains(path) {
            return Some(format!("names `{path}`, which a clone lacks"));
        }
    }
    for (at, word) in lower.match_indices("issue") {
        let rest = lower[at + word.len()..].trim_start_matches('s');
        let rest = rest.strip_prefix(' ').unwrap_or(rest);
        let rest = rest.strip_prefix('#').unwrap_or(rest);
        let number: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
        if !number.is_empty() && !lower.contains(&format!("/issues/{number}")) {
            return Some(format!(
                "names issue {number} without a link to the tracker that holds it"
            ));
        }
    }
    None
}

#[test]
fn unresolvable_names_are_found() {
    assert!(unresolvable("see issue 44").is_some());
    assert!(unresolvable("(issue #1136)").is_some());
    assert!(unresolvable("diff -r ../shared/datasets/real x").is_some());
    assert!(unresolvable("`shared/datasets/real/sweeps/`").is_some());
    assert!(
        unresolvable("[NCCL issue #1136](https://github.com/NVIDIA/nccl/issues/1136)").is_none()
    );
    assert!(unresolvable("cp cluster.tbl /shared/cluster.tbl").is_none());
    assert!(unresolvable("the issue is 3 nodes").is_none());
}

/// Nothing a reader of a clone cannot open, in any committed markdown
/// file: the development checkout's shared folder, the tracker's issue
/// numbers.
#[test]
fn no_document_names_what_a_clone_lacks() {
    let root = root();
    let docs = every_markdown_file();
    assert!(
        docs.len() > 30
            && docs
                .iter()
                .any(|d| d.ends_with("tests/data/real/README.md")),
        "only {} markdown files found: is the walk right?",
        docs.len()
    );
    let mut found = Vec::new();
    for doc in docs {
        let md = std::fs::read_to_string(&doc).unwrap();
        let rel = doc.strip_prefix(&root).unwrap().display().to_string();
        for (i, line) in md.lines().enumerate() {
            if let Some(why) = unresolvable(line) {
                found.push(format!("{rel}:{}: {why}: {line}", i + 1));
            }
        }
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
}

/// README is short, and keeps the two commands the project promises (the
/// main job and the test command, which .ci/run runs).
#[test]
fn readme_is_short_and_keeps_its_promises() {
    let root = root();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let words = readme.split_whitespace().count();
    assert!(
        words <= 1700,
        "README.md is {words} words; the book holds the rest"
    );
    for cmd in [
        "cargo run --release -- compile datasets/real/nvidia-dgx1v-allreduce.csv -o dgx1v.tbl",
        "make test",
        "DYNCC_STRICT",
        "make plugin",
        "LD_LIBRARY_PATH",
        "tests/data/fake-nccl-tests",
    ] {
        assert!(readme.contains(cmd), "README.md lacks `{cmd}`");
    }
    let ci = std::fs::read_to_string(root.join(".ci/run")).unwrap();
    assert!(
        ci.contains("make test"),
        ".ci/run no longer runs `make test`"
    );
}

/// Every DYNCC_* variable the plugin or the command reads is in the book's
/// one table of them.
#[test]
fn every_environment_variable_is_in_the_reference() {
    let root = root();
    let table = std::fs::read_to_string(root.join("docs/src/reference/environment.md")).unwrap();
    let mut missing = Vec::new();
    let mut files = Vec::new();
    fn rust(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                rust(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    rust(&root.join("runtime/src"), &mut files);
    rust(&root.join("compiler"), &mut files);
    for f in files {
        let src = std::fs::read_to_string(&f).unwrap();
        for (at, _) in src.match_indices("\"DYNCC_") {
            let name: String = src[at + 1..]
                .chars()
                .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            // Test-only switches are not the user's.
            if name == "DYNCC_BLESS" || name.starts_with("DYNCC_TEST") || name.len() <= 6 {
                continue;
            }
            if !table.contains(&format!("`{name}`")) && !missing.contains(&name) {
                missing.push(name);
            }
        }
    }
    assert!(
        missing.is_empty(),
        "DYNCC_* variables read but not in docs/src/reference/environment.md: {missing:?}"
    );
}
