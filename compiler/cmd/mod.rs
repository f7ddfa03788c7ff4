//! One file per subcommand, as ripgrep keeps its flags: the arguments (whose
//! doc comment is the command's `--help`), `run`, and the printing. The
//! work itself lives in the pipeline's modules (`ingest`, `pipeline`,
//! `eval`, `simulate`, `audit`). Commands are leaves: none imports another
//! (a test below holds to it); what two share goes in `audit` or the
//! pipeline's modules. The one exception is [`common`], the arguments
//! several commands take, kept here beside the commands because its doc
//! comments are their `--help`.

pub mod common;
pub mod compile;
pub mod diff;
pub mod eval;
pub mod explain;
pub mod export;
pub mod inspect;
pub mod plan;
pub mod plot;
pub mod plugin_path;
pub mod query;
pub mod simulate;
pub mod verify;

#[cfg(test)]
mod tests {
    //! Commands are leaves: what two commands share lives below them
    //! (`audit`, the pipeline's modules), so that changing one command's
    //! output cannot change another's. Only `common`, the arguments several
    //! commands take, is shared inside `cmd/`.

    use std::path::{Path, PathBuf};

    /// Modules of `cmd/` any file may use.
    const SHARED: &[&str] = &["common"];

    fn cmd_dir() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("compiler/cmd")
    }

    /// Every `.rs` file under `dir`, with the command it belongs to
    /// (`cmd/plan.rs` and `cmd/plan/*.rs` belong to `plan`; `mod.rs` and
    /// the shared modules to none).
    fn files(dir: &Path, owner: Option<&str>, out: &mut Vec<(PathBuf, Option<String>)>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            let stem = p.file_stem().unwrap().to_str().unwrap().to_string();
            let own = owner.map(str::to_string).or_else(|| {
                (stem != "mod" && !SHARED.contains(&stem.as_str())).then(|| stem.clone())
            });
            if p.is_dir() {
                files(&p, own.as_deref(), out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push((p, own));
            }
        }
    }

    /// The command modules (`cmd/X.rs` or `cmd/X/`).
    fn commands() -> Vec<String> {
        let mut v = Vec::new();
        files(&cmd_dir(), None, &mut v);
        let mut c: Vec<String> = v.into_iter().filter_map(|(_, o)| o).collect();
        c.sort();
        c.dedup();
        c
    }

    /// The first identifier of each path after `prefix` in `src`
    /// (`cmd::explain::x` and `cmd::{explain::x, plot}` both name
    /// `explain`, the second also `plot`), comments left out.
    fn named_after(src: &str, prefix: &str) -> Vec<String> {
        let ident = |s: &str| -> String {
            s.trim_start()
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect()
        };
        let mut out = Vec::new();
        for line in src.lines() {
            let code = line.split("//").next().unwrap_or("");
            let mut rest = code;
            while let Some(i) = rest.find(prefix) {
                let before = rest[..i].chars().last();
                rest = &rest[i + prefix.len()..];
                if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                    continue; // e.g. `subcmd::`
                }
                let mut after = rest;
                while let Some(r) = after.strip_prefix("super::") {
                    after = r;
                }
                if let Some(group) = after.strip_prefix('{') {
                    let group = group.split('}').next().unwrap_or("");
                    out.extend(group.split(',').map(ident));
                } else {
                    out.push(ident(after));
                }
            }
        }
        out
    }

    /// The other commands a file names through `cmd::` or `super::`.
    fn imported_commands(src: &str, owner: Option<&str>, commands: &[String]) -> Vec<String> {
        let mut named = named_after(src, "cmd::");
        named.extend(named_after(src, "super::"));
        let mut v: Vec<String> = named
            .into_iter()
            .filter(|n| commands.contains(n) && Some(n.as_str()) != owner)
            .collect();
        v.sort();
        v.dedup();
        v
    }

    #[test]
    fn no_command_imports_another() {
        let commands = commands();
        assert!(commands.len() >= 10, "found only {commands:?}");
        let mut found = Vec::new();
        let mut all = Vec::new();
        files(&cmd_dir(), None, &mut all);
        for (path, owner) in all {
            let mut src = std::fs::read_to_string(&path).unwrap();
            if path == cmd_dir().join("mod.rs") {
                // This file's tests spell imports as the scanner's examples.
                src.truncate(src.find("#[cfg(test)]").unwrap_or(src.len()));
            }
            for other in imported_commands(&src, owner.as_deref(), &commands) {
                found.push(format!("{} uses cmd::{other}", path.display()));
            }
        }
        assert!(
            found.is_empty(),
            "commands must not import each other (move what they share into audit/ or the \
             pipeline's modules):\n{}",
            found.join("\n")
        );
    }

    #[test]
    fn no_library_module_imports_a_command() {
        let commands = commands();
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("compiler");
        let mut found = Vec::new();
        let mut stack = vec![root.clone()];
        while let Some(dir) = stack.pop() {
            for e in std::fs::read_dir(&dir).unwrap() {
                let p = e.unwrap().path();
                if p == cmd_dir() {
                    continue;
                }
                if p.is_dir() {
                    stack.push(p);
                } else if p.extension().is_some_and(|x| x == "rs")
                    && p != root.join("main.rs")
                    && p != root.join("cli.rs")
                {
                    let src = std::fs::read_to_string(&p).unwrap();
                    for c in named_after(&src, "cmd::") {
                        if commands.contains(&c) {
                            found.push(format!("{} uses cmd::{c}", p.display()));
                        }
                    }
                }
            }
        }
        assert!(
            found.is_empty(),
            "only the command line (main.rs, cli.rs) dispatches to commands:\n{}",
            found.join("\n")
        );
    }

    #[test]
    fn the_scan_sees_every_spelling_of_an_import() {
        let cmds: Vec<String> = ["explain", "plot", "query"].map(String::from).into();
        let seen = |src: &str| imported_commands(src, Some("query"), &cmds);
        assert_eq!(seen("use crate::cmd::explain::parse_coll;"), ["explain"]);
        assert_eq!(
            seen("use crate::cmd::{explain::x, plot};"),
            ["explain", "plot"]
        );
        assert_eq!(seen("let c = crate::cmd::plot::colour_hex(d);"), ["plot"]);
        assert_eq!(seen("use super::explain;"), ["explain"]);
        assert_eq!(seen("use super::super::plot::x;"), ["plot"]);
        assert!(seen("use super::*;\nuse crate::cmd::common::DecideArgs;").is_empty());
        assert!(seen("use crate::cmd::query::Call; // cmd::explain in a comment").is_empty());
    }
}
