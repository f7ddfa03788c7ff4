//! No module-level import circle inside any of the three crates: reads
//! the sources (test modules left out), links each file to the modules its
//! `crate::` and `super::` paths name, and fails on every circle it finds,
//! naming the files and one path around it. A module and its ancestors
//! are not linked (a `mod.rs` declaring and re-exporting its children is
//! the usual shape), so a circle means two modules side by side that each
//! need the other: move what both use to a module below both.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Module = Vec<String>;

/// Every `.rs` file under `dir` in the crate's module tree, by module path
/// (`ingest/traces/shapes.rs` is `[ingest, traces, shapes]`, `lib.rs` and
/// `mod.rs` their directory's). Test-only files (`tests.rs`,
/// `*_tests.rs`), `main.rs` (a binary of its own) and `testutil.rs` are
/// left out.
fn modules(root: &Path, dir: &Path, out: &mut BTreeMap<Module, PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            modules(root, &p, out);
            continue;
        }
        if p.extension().is_none_or(|x| x != "rs") {
            continue;
        }
        let stem = p.file_stem().unwrap().to_str().unwrap();
        if stem == "main" || stem == "tests" || stem.ends_with("_tests") || stem == "testutil" {
            continue;
        }
        let rel = p.strip_prefix(root).unwrap();
        let mut m: Module = rel
            .parent()
            .unwrap()
            .components()
            .map(|c| c.as_os_str().to_str().unwrap().to_string())
            .collect();
        if stem != "mod" && stem != "lib" {
            m.push(stem.to_string());
        }
        out.insert(m, p);
    }
}

/// The source without its test module and comments.
fn code(src: &str) -> String {
    let cut = src
        .find("#[cfg(test)]\nmod tests")
        .or_else(|| src.find("#[cfg(test)]\npub mod tests"))
        .unwrap_or(src.len());
    src[..cut]
        .lines()
        .map(|l| {
            let t = l.trim_start();
            if t.starts_with("//") {
                ""
            } else {
                l.split(" // ").next().unwrap_or("")
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn ident(s: &str) -> (&str, &str) {
    let n = s
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    (&s[..n], &s[n..])
}

/// The paths a use tree starting at `s` names (`a::{b::c, d}` is `a::b::c`
/// and `a::d`), each as its segments after `base`.
fn paths(base: &[String], s: &str, out: &mut Vec<Module>) {
    let mut segs: Module = base.to_vec();
    let mut rest = s;
    loop {
        rest = rest.trim_start();
        if let Some(inner) = rest.strip_prefix('{') {
            // Split the group at its top-level commas.
            let (mut depth, mut start) = (0usize, 0usize);
            for (i, c) in inner.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        paths(&segs, &inner[start..i], out);
                        return;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        paths(&segs, &inner[start..i], out);
                        start = i + 1;
                    }
                    _ => {}
                }
            }
            return;
        }
        let (id, r) = ident(rest);
        if id.is_empty() {
            break;
        }
        segs.push(id.to_string());
        match r.strip_prefix("::") {
            Some(r) => rest = r,
            None => break,
        }
    }
    out.push(segs);
}

/// The modules `m`'s code names, each resolved to the deepest module file
/// its path reaches.
fn links(m: &Module, src: &str, known: &BTreeMap<Module, PathBuf>) -> BTreeSet<Module> {
    let mut named = Vec::new();
    let bytes = src.as_bytes();
    for (i, _) in src.match_indices("crate::") {
        if i > 0
            && (bytes[i - 1].is_ascii_alphanumeric()
                || bytes[i - 1] == b'_'
                || bytes[i - 1] == b'$')
        {
            continue; // `dyncc_tables::`, `$crate::`
        }
        paths(&[], &src[i + "crate::".len()..], &mut named);
    }
    for (i, _) in src.match_indices("super::") {
        if i > 0
            && (bytes[i - 1].is_ascii_alphanumeric()
                || bytes[i - 1] == b'_'
                || bytes[i - 1] == b':')
        {
            continue; // the second `super::` of `super::super::`
        }
        // `super` of `a/b.rs` (`[a, b]`) is `a`; of `a/b/mod.rs` (also
        // `[a, b]`), `a` too.
        let mut base: Module = m.clone();
        let mut rest = &src[i..];
        while let Some(r) = rest.strip_prefix("super::") {
            base.pop();
            rest = r;
        }
        paths(&base, rest, &mut named);
    }
    named
        .into_iter()
        .filter_map(|p| {
            (0..=p.len())
                .rev()
                .map(|n| p[..n].to_vec())
                .find(|q| known.contains_key(q))
        })
        .filter(|t| !t.starts_with(m) && !m.starts_with(t))
        .collect()
}

/// Every circle among `graph`'s modules: its strongly connected components
/// of more than one module (Tarjan's).
fn circles(graph: &BTreeMap<Module, BTreeSet<Module>>) -> Vec<Vec<Module>> {
    struct S<'a> {
        g: &'a BTreeMap<Module, BTreeSet<Module>>,
        index: BTreeMap<&'a Module, usize>,
        low: BTreeMap<&'a Module, usize>,
        stack: Vec<&'a Module>,
        on: BTreeSet<&'a Module>,
        out: Vec<Vec<Module>>,
    }
    fn visit<'a>(s: &mut S<'a>, v: &'a Module) {
        let i = s.index.len();
        s.index.insert(v, i);
        s.low.insert(v, i);
        s.stack.push(v);
        s.on.insert(v);
        for w in s.g.get(v).into_iter().flatten() {
            let Some((w, _)) = s.g.get_key_value(w) else {
                continue;
            };
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if s.on.contains(w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut c = Vec::new();
            loop {
                let w = s.stack.pop().unwrap();
                s.on.remove(w);
                c.push(w.clone());
                if w == v {
                    break;
                }
            }
            if c.len() > 1 {
                c.sort();
                s.out.push(c);
            }
        }
    }
    let mut s = S {
        g: graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !s.index.contains_key(v) {
            visit(&mut s, v);
        }
    }
    s.out
}

/// The import graph of the crate whose module root is `root`.
fn graph(
    root: &Path,
) -> (
    BTreeMap<Module, BTreeSet<Module>>,
    BTreeMap<Module, PathBuf>,
) {
    let mut known = BTreeMap::new();
    modules(root, root, &mut known);
    assert!(known.len() > 5, "{}: too few modules found", root.display());
    let mut g = BTreeMap::new();
    for (m, p) in &known {
        let src = std::fs::read_to_string(p).unwrap();
        g.insert(m.clone(), links(m, &code(&src), &known));
    }
    (g, known)
}

fn circles_in(dir: &str) -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let (g, known) = graph(&root);
    circles(&g)
        .into_iter()
        .map(|c| {
            let names: Vec<String> = c
                .iter()
                .map(|m| known[m].strip_prefix(&root).unwrap().display().to_string())
                .collect();
            let edges: Vec<String> = c
                .iter()
                .flat_map(|a| {
                    g[a].iter()
                        .filter(|b| c.contains(b))
                        .map(move |b| format!("{} -> {}", a.join("::"), b.join("::")))
                })
                .collect();
            format!("{dir}: {} ({})", names.join(", "), edges.join("; "))
        })
        .collect()
}

#[test]
fn no_crate_has_an_import_circle() {
    let mut found = Vec::new();
    for dir in ["compiler", "tables/src", "runtime/src"] {
        found.extend(circles_in(dir));
    }
    assert!(
        found.is_empty(),
        "import circles (move what both sides use to a module below both):\n{}",
        found.join("\n")
    );
}

/// The finder finds a circle: two modules that name each other.
#[test]
fn a_circle_of_two_files_is_found() {
    let dir = std::env::temp_dir().join(format!("dyncc-imports-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    let files = [
        (
            "lib.rs",
            "mod a;\nmod b;\nmod c;\nmod sub;\nmod d;\nmod e;\n",
        ),
        ("a.rs", "use crate::b::X;\n"),
        ("b.rs", "pub fn f() { crate::sub::y::g() }\n"),
        ("c.rs", "use crate::{a, d::{self, Z}};\n"),
        ("d.rs", "// use crate::c;\n"),
        ("e.rs", ""),
        ("sub/mod.rs", "pub mod y;\npub use y::g;\n"),
        ("sub/y.rs", "use super::super::a::W;\n"),
    ];
    for (f, s) in files {
        std::fs::write(dir.join(f), s).unwrap();
    }
    let (g, _) = graph(&dir);
    let found = circles(&g);
    std::fs::remove_dir_all(&dir).unwrap();
    let m = |s: &str| s.split("::").map(str::to_string).collect::<Module>();
    assert_eq!(found, vec![vec![m("a"), m("b"), m("sub::y")]]);
    assert!(g[&m("c")].contains(&m("d")) && g[&m("c")].contains(&m("a")));
    assert!(g[&m("d")].is_empty(), "a comment is no import");
}
