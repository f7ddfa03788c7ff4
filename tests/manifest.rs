//! The root crate's manifest declares only what the code uses: every
//! `[dependencies]` entry is named in compiler/ (a dependency nobody uses
//! still costs build time and audit surface; `thiserror` was one).

use std::path::Path;

/// Every `.rs` file under `dir`, concatenated.
fn sources(dir: &Path) -> String {
    let mut all = String::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                all += &std::fs::read_to_string(&p).unwrap();
            }
        }
    }
    all
}

#[test]
fn every_dependency_of_the_compiler_is_used() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let manifest: toml::Table = std::fs::read_to_string(root.join("Cargo.toml"))
        .unwrap()
        .parse()
        .unwrap();
    let code = sources(&root.join("compiler"));
    let deps = manifest["dependencies"].as_table().unwrap();
    assert!(!deps.is_empty());
    let unused: Vec<&String> = deps
        .keys()
        .filter(|name| {
            let krate = name.replace('-', "_");
            ![
                format!("{krate}::"),
                format!("use {krate}"),
                format!("{krate}!"),
            ]
            .iter()
            .any(|pat| code.contains(pat.as_str()))
        })
        .collect();
    assert!(
        unused.is_empty(),
        "Cargo.toml [dependencies] lists crates compiler/ never uses: {unused:?} \
         (remove them, or move test-only ones to [dev-dependencies])"
    );
}
