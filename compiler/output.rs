//! What every `--json` output carries: the schema version at the top of each
//! object, and, when a command fails, the error as a JSON object on stdout
//! (so `dyncc ... --json | jq` never reads empty input), with the exit code
//! unchanged.

use serde::Serialize;

/// The version of the JSON outputs' shape. Raised when a field is removed,
/// renamed or changes meaning; new fields do not raise it.
pub const SCHEMA_VERSION: u32 = 1;

/// `value` with `schema_version` as its first field.
#[derive(Serialize)]
struct Versioned<'a, T: Serialize + ?Sized> {
    schema_version: u32,
    #[serde(flatten)]
    value: &'a T,
}

/// `value` as pretty JSON, with `schema_version` first when it is an object
/// (the outputs' top level always is; a list is printed as it is).
pub fn pretty<T: Serialize + ?Sized>(value: &T) -> serde_json::Result<String> {
    serde_json::to_string_pretty(&Versioned {
        schema_version: SCHEMA_VERSION,
        value,
    })
    .or_else(|_| serde_json::to_string_pretty(value))
}

/// The same on one line (JSON Lines outputs such as `query --batch`).
pub fn line<T: Serialize + ?Sized>(value: &T) -> serde_json::Result<String> {
    serde_json::to_string(&Versioned {
        schema_version: SCHEMA_VERSION,
        value,
    })
    .or_else(|_| serde_json::to_string(value))
}

/// A failure as `--json` prints it.
#[derive(Debug, Serialize, PartialEq)]
pub struct ErrorJson {
    pub schema_version: u32,
    /// Always `false`: tells an error from a command's own output.
    pub ok: bool,
    /// `usage` (the command line), `io` (a file could not be read or
    /// written) or `input` (an input, or a finding, the command refused).
    pub kind: &'static str,
    /// The whole message, as stderr prints it after `error: `.
    pub message: String,
    /// The first file the message names, when it names one.
    pub file: Option<String>,
    /// The line of that file, when the message gives one (`FILE:LINE`).
    pub line: Option<u64>,
    /// What the message says to do: its part after the first `; `, or
    /// for a usage error the `--help` to read.
    pub hint: Option<String>,
}

/// Whether the command line asked for JSON (before `--`, so a file named
/// `--json` after it does not count).
pub fn wants_json<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> bool {
    args.iter()
        .map(|a| a.as_ref())
        .take_while(|a| *a != "--")
        .any(|a| a == "--json")
}

/// The JSON of a command's error; `args` (the command line) help tell a
/// file named in the message from other words.
pub fn error_json(e: &anyhow::Error, args: &[String]) -> ErrorJson {
    let message = format!("{e:#}");
    let kind = if e
        .chain()
        .any(|c| c.downcast_ref::<std::io::Error>().is_some())
    {
        "io"
    } else {
        "input"
    };
    let (file, line) = named_file(&message, args).unzip();
    ErrorJson {
        schema_version: SCHEMA_VERSION,
        ok: false,
        kind,
        hint: message
            .split_once("; ")
            .map(|(_, h)| h.trim().to_string())
            .filter(|h| !h.is_empty()),
        file,
        line: line.flatten(),
        message,
    }
}

/// The JSON of a usage error clap found.
pub fn usage_json(e: &clap::Error, args: &[String]) -> ErrorJson {
    let message = e.render().to_string();
    let message = message
        .trim()
        .trim_start_matches("error: ")
        .lines()
        .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more information"))
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    let sub = args.get(1).filter(|a| !a.starts_with('-'));
    ErrorJson {
        schema_version: SCHEMA_VERSION,
        ok: false,
        kind: "usage",
        message,
        file: None,
        line: None,
        hint: Some(match sub {
            Some(s) => format!("see `dyncc {s} --help`"),
            None => "see `dyncc --help`".to_string(),
        }),
    }
}

/// The first file `message` names: a word that is one of the command's
/// arguments, names something on disk, or is followed by `:LINE`.
fn named_file(message: &str, args: &[String]) -> Option<(String, Option<u64>)> {
    let seps = |c: char| c.is_whitespace() || "(),;`'\"".contains(c);
    for word in message.split(seps) {
        let word = word.trim_end_matches(['.', ':']);
        if word.is_empty() {
            continue;
        }
        // FILE:LINE[:...] or FILE[:...]
        let mut parts = word.splitn(3, ':');
        let path = parts.next().unwrap_or_default();
        let line = parts.next().and_then(|l| l.parse::<u64>().ok());
        if path.is_empty() || path.starts_with('-') {
            continue;
        }
        // An argument of the command (past its name) that is a path, or a
        // path-like word that exists or comes with a line number.
        let looks_like_path = path.contains('/') || path.contains('.');
        let exists = std::path::Path::new(path).exists();
        let is_arg = args.iter().skip(2).any(|a| a == path);
        if (is_arg && (looks_like_path || exists))
            || (looks_like_path && (exists || line.is_some()))
        {
            return Some((path.to_string(), line));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize)]
    struct Report {
        a: u32,
        b: &'static str,
    }

    #[test]
    fn objects_carry_the_schema_version_first() {
        let s = pretty(&Report { a: 1, b: "x" }).unwrap();
        assert!(
            s.starts_with("{\n  \"schema_version\": 1,\n  \"a\": 1"),
            "{s}"
        );
        let l = line(&Report { a: 2, b: "y" }).unwrap();
        assert_eq!(l, r#"{"schema_version":1,"a":2,"b":"y"}"#);
        // A list cannot hold a field; it is printed as it is.
        assert_eq!(line(&[1, 2]).unwrap(), "[1,2]");
    }

    #[test]
    fn an_error_names_its_file_line_and_hint() {
        let e = anyhow::anyhow!(
            "sweep/a.csv:12: expected 9 fields, found 3; fix the row or pass --lenient"
        );
        let j = error_json(&e, &["dyncc".into(), "compile".into(), "sweep".into()]);
        assert_eq!(j.kind, "input");
        assert_eq!(j.file.as_deref(), Some("sweep/a.csv"));
        assert_eq!(j.line, Some(12));
        assert_eq!(j.hint.as_deref(), Some("fix the row or pass --lenient"));
        assert!(!j.ok);
    }

    #[test]
    fn an_io_error_is_io_and_names_the_argument() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "No such file");
        let e = anyhow::Error::new(io).context("nothere.tbl: cannot read it");
        let j = error_json(&e, &["dyncc".into(), "verify".into(), "nothere.tbl".into()]);
        assert_eq!(j.kind, "io");
        assert_eq!(j.file.as_deref(), Some("nothere.tbl"));
        assert_eq!(j.line, None);
    }

    #[test]
    fn plain_words_are_not_files() {
        let e = anyhow::anyhow!("no measurements found: nothing to compile");
        let j = error_json(&e, &["dyncc".into(), "compile".into()]);
        assert_eq!(j.file, None);
        assert_eq!(j.hint, None);
    }

    #[test]
    fn json_is_asked_for_before_the_double_dash_only() {
        assert!(wants_json(&["dyncc", "verify", "t.tbl", "--json"]));
        assert!(!wants_json(&["dyncc", "verify", "--", "--json"]));
        assert!(!wants_json(&["dyncc", "verify", "t.tbl"]));
    }
}
