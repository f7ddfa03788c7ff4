//! What every command shares as a command line tool: shell completions and
//! man pages generated from the one clap tree, a JSON error object on stdout
//! for every `--json` failure (with the exit code unchanged), and the schema
//! version on every JSON object.

use serde_json::Value;

use crate::support::cli::{dyncc_output, root};

fn json_of(out: &std::process::Output, what: &str) -> Value {
    let s = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(&s).unwrap_or_else(|e| {
        panic!(
            "{what}: stdout is not one JSON document ({e}): {s:?}; stderr {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

#[test]
fn completions_name_every_command() {
    let bash = dyncc_output(&["completions", "bash"]);
    assert_eq!(bash.status.code(), Some(0));
    let text = String::from_utf8_lossy(&bash.stdout);
    assert!(text.contains("complete -F _dyncc"), "{text}");
    for cmd in [
        "compile",
        "query",
        "plot",
        "plugin-path",
        "completions",
        "man",
    ] {
        assert!(text.contains(cmd), "bash completion lacks {cmd}");
    }
    for shell in ["zsh", "fish", "elvish", "powershell"] {
        let o = dyncc_output(&["completions", shell]);
        assert_eq!(o.status.code(), Some(0), "{shell}");
        assert!(
            String::from_utf8_lossy(&o.stdout).contains("plugin-path"),
            "{shell}"
        );
    }
    let bad = dyncc_output(&["completions", "tcsh"]);
    assert_eq!(bad.status.code(), Some(2));
}

#[test]
fn man_pages_are_written_for_every_command() {
    let one = dyncc_output(&["man"]);
    assert_eq!(one.status.code(), Some(0));
    let page = String::from_utf8_lossy(&one.stdout);
    assert!(page.contains(".TH dyncc 1"), "{page}");
    assert!(page.contains("compile"), "the top page lists the commands");

    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("man1");
    let o = dyncc_output(&["man", "-o", dir.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    for name in [
        "dyncc.1",
        "dyncc-compile.1",
        "dyncc-query.1",
        "dyncc-plugin-path.1",
    ] {
        let p = dir.join(name);
        let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        assert!(text.starts_with(".ie") || text.contains(".TH"), "{name}");
    }
    let compile = std::fs::read_to_string(dir.join("dyncc-compile.1")).unwrap();
    assert!(
        compile.contains("margin"),
        "the page holds the command's options"
    );
}

/// Every command that takes `--json`, made to fail: stdout is one JSON
/// error object and the exit code is the one without `--json` (2).
#[test]
fn every_json_failure_is_a_json_error_object() {
    let d = tempfile::tempdir().unwrap();
    let missing = d.path().join("nothere.tbl");
    let m = missing.to_str().unwrap();
    let out = d.path().join("o.tbl");
    let o = out.to_str().unwrap();
    let full = d.path().join("full");
    std::fs::create_dir(&full).unwrap();
    std::fs::write(full.join("x"), "x").unwrap();
    let f = full.to_str().unwrap();
    let cases: Vec<(Vec<&str>, Option<&str>)> = vec![
        (vec!["inspect", m], Some(m)),
        (vec!["compile", m, "-o", o], Some(m)),
        (vec!["eval", m, m], Some(m)),
        (vec!["explain", m], Some(m)),
        (
            vec![
                "query",
                m,
                "--coll",
                "allreduce",
                "--bytes",
                "1M",
                "--nodes",
                "2",
                "--ranks",
                "16",
            ],
            Some(m),
        ),
        (vec!["diff", m, m], Some(m)),
        (vec!["verify", m], Some(m)),
        (vec!["simulate", "-o", f], Some(f)),
        (
            vec![
                "plan",
                "--launcher",
                "slurm",
                "--nodes",
                "0",
                "--gpus-per-node",
                "8",
            ],
            None,
        ),
        // A usage error: clap's, still JSON.
        (vec!["query", m], None),
    ];
    for (args, file) in cases {
        let mut with = args.clone();
        with.push("--json");
        let plain = dyncc_output(&args);
        let json = dyncc_output(&with);
        assert_eq!(plain.status.code(), Some(2), "{args:?}: {plain:?}");
        assert_eq!(json.status.code(), Some(2), "{with:?}");
        let v = json_of(&json, &format!("{with:?}"));
        assert_eq!(v["ok"], Value::Bool(false), "{with:?}: {v}");
        assert_eq!(v["schema_version"], Value::from(1), "{with:?}: {v}");
        let kind = v["kind"].as_str().unwrap_or_default();
        assert!(["usage", "io", "input"].contains(&kind), "{with:?}: {v}");
        let msg = v["message"].as_str().unwrap_or_default();
        assert!(!msg.is_empty(), "{with:?}: {v}");
        // The same words as stderr, which still says it to a person.
        let err = String::from_utf8_lossy(&json.stderr);
        assert!(
            err.contains(msg.split_whitespace().next().unwrap()),
            "{with:?}: {err}"
        );
        if let Some(file) = file {
            assert_eq!(v["file"].as_str(), Some(file), "{with:?}: {v}");
        }
        assert!(v.get("hint").is_some(), "{with:?}: {v}");
    }
}

/// A file named in a message with its line: the object gives both.
#[test]
fn a_json_error_names_the_file_and_line() {
    let d = tempfile::tempdir().unwrap();
    let csv = d.path().join("sweep.csv");
    std::fs::write(
        &csv,
        "collective,size_bytes,algorithm,protocol,channels,nodes,ranks,latency_us\n\
         allreduce,1024,default,default,-1,1,8,10.0\n\
         allreduce,2048,default,default,-1,1,8\n",
    )
    .unwrap();
    let out = d.path().join("o.tbl");
    let o = dyncc_output(&[
        "compile",
        csv.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(2));
    let v = json_of(&o, "compile of a short row");
    assert_eq!(v["file"].as_str(), Some(csv.to_str().unwrap()), "{v}");
    assert_eq!(v["line"], Value::from(3), "{v}");
    assert_eq!(v["kind"], "input", "{v}");
}

#[test]
fn json_outputs_carry_the_schema_version() {
    let golden = root().join("tables/golden/allreduce_2x8_v1.0.tbl");
    let g = golden.to_str().unwrap();
    for args in [
        vec!["verify", g, "--json"],
        vec!["explain", g, "--json"],
        vec![
            "query",
            g,
            "--coll",
            "allreduce",
            "--bytes",
            "1M",
            "--nodes",
            "2",
            "--ranks",
            "16",
            "--json",
        ],
        vec!["diff", g, g, "--json"],
        vec!["plugin-path", "--json"],
    ] {
        let o = dyncc_output(&args);
        let v = json_of(&o, &format!("{args:?}"));
        assert_eq!(v["schema_version"], Value::from(1), "{args:?}: {v}");
        // The command's own output, not an error object.
        assert!(
            v.get("ok").is_none() || args[0] == "plugin-path",
            "{args:?}: {v}"
        );
    }
}
