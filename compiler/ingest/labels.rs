//! Labels a user gives a sweep of plain logs: a manifest (`--manifest`, a
//! CSV mapping paths or globs to knobs and shape) and file-name patterns
//! (`--name-pattern '{coll}_n{nodes}_{algo}_{proto}.r{repeat}.log'`). Both
//! turn into [`Assumptions`] for one file; [`super::knobs`] says how they
//! combine with what the log shows.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use regex_lite::Regex;

use super::knobs::Assumptions;
use super::quote;

/// One manifest row: which files it labels and what it says.
#[derive(Clone, Debug)]
struct ManifestRow {
    line: u64,
    /// As written (for messages).
    glob: String,
    /// Matched against the file name when the glob has no `/`, else against
    /// the path relative to the manifest's directory.
    re: Regex,
    whole_path: bool,
    pairs: Vec<(String, String)>,
}

/// A parsed `--manifest` CSV.
#[derive(Clone, Debug)]
pub struct Manifest {
    pub path: PathBuf,
    /// The manifest's directory, canonical: globs are relative to it.
    dir: PathBuf,
    rows: Vec<ManifestRow>,
}

/// Columns a manifest may have besides `path` (the `--assume` keys).
pub const MANIFEST_KEYS: &str = "NCCL_ALGO, NCCL_PROTO, channels, chunk, NCCL_MIN_NCHANNELS, \
     NCCL_MAX_NCHANNELS, coll, nodes, ranks, gpus_per_node, platform, gpu, nccl_version, regBuff, \
     pipeOps, repeat";

impl Manifest {
    /// Reads a manifest: a header naming `path` and any of
    /// [`MANIFEST_KEYS`], then one row per file or glob; an empty cell
    /// states nothing.
    pub fn load(path: &Path) -> anyhow::Result<Manifest> {
        let file = crate::input::open(path, &crate::input::MANIFEST)
            .with_context(|| format!("--manifest {}: cannot open it", path.display()))?;
        let dir = path
            .parent()
            .map(|d| {
                if d.as_os_str().is_empty() {
                    Path::new(".")
                } else {
                    d
                }
            })
            .unwrap_or(Path::new("."));
        let dir = dir.canonicalize().with_context(|| {
            format!(
                "--manifest {}: cannot resolve its directory",
                path.display()
            )
        })?;
        Self::parse(path, &dir, file)
    }

    /// [`Manifest::load`] on the manifest's content: `path` names it in
    /// messages, `dir` (canonical) is where its globs are rooted.
    pub fn parse(path: &Path, dir: &Path, content: impl std::io::Read) -> anyhow::Result<Manifest> {
        let mut rd = csv::ReaderBuilder::new()
            .has_headers(true)
            .flexible(false)
            .trim(csv::Trim::All)
            .from_reader(content);
        let loc = |line: u64| format!("{}:{line}", path.display());
        let headers = rd
            .headers()
            .with_context(|| format!("{}: cannot read the manifest header", loc(1)))?
            .clone();
        let headers: Vec<String> = headers
            .iter()
            .map(|h| h.trim_start_matches('\u{feff}').to_string())
            .collect();
        let Some(c_path) = headers.iter().position(|h| h.eq_ignore_ascii_case("path")) else {
            anyhow::bail!(
                "{}: the manifest header has no `path` column; expected e.g. \
                 `path,NCCL_ALGO,NCCL_PROTO,nodes,ranks` (columns: path, {MANIFEST_KEYS})",
                loc(1)
            );
        };
        // Check the column names now: a typo would otherwise label nothing.
        for (i, h) in headers.iter().enumerate() {
            // `set` answers Ok(false) only for an unknown key ("1" may be a
            // bad value for a known one; that is checked per row).
            if i != c_path && matches!(Assumptions::default().set(h, "1"), Ok(false)) {
                anyhow::bail!(
                    "{}: unknown manifest column `{}`; expected path, {MANIFEST_KEYS}",
                    loc(1),
                    quote(h)
                );
            }
        }
        let mut rows = Vec::new();
        for rec in rd.records() {
            let rec = rec.map_err(|e| {
                let line = e.position().map(|p| p.line()).unwrap_or(0);
                anyhow::anyhow!(
                    "{}: {}; expected {} comma-separated fields like the header",
                    loc(line),
                    csv_error_kind(&e),
                    headers.len()
                )
            })?;
            let line = rec.position().map(|p| p.line()).unwrap_or(0);
            if rec.iter().all(str::is_empty) {
                continue;
            }
            let glob = rec.get(c_path).unwrap_or("").to_string();
            if glob.is_empty() {
                anyhow::bail!("{}: empty `path`; expected a file path or glob", loc(line));
            }
            let mut pairs = Vec::new();
            for (i, v) in rec.iter().enumerate() {
                if i != c_path && !v.is_empty() {
                    pairs.push((headers[i].clone(), v.to_string()));
                }
            }
            Assumptions::from_pairs(&pairs).map_err(|e| anyhow::anyhow!("{}: {e}", loc(line)))?;
            let whole_path = glob.contains('/');
            let re = Regex::new(&glob_to_regex(glob.trim_start_matches("./"))).map_err(|e| {
                anyhow::anyhow!(
                    "{}: path {:?} is not a usable glob: {e}",
                    loc(line),
                    quote(&glob)
                )
            })?;
            rows.push(ManifestRow {
                line,
                glob,
                re,
                whole_path,
                pairs,
            });
        }
        Ok(Manifest {
            path: path.to_path_buf(),
            dir: dir.to_path_buf(),
            rows,
        })
    }

    /// The labels for `file`: every matching row, merged. Two rows that
    /// match and disagree are an error naming both.
    pub fn labels_for(&self, file: &Path) -> anyhow::Result<Option<Assumptions>> {
        let name = file
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let rel = file
            .canonicalize()
            .ok()
            .and_then(|c| c.strip_prefix(&self.dir).ok().map(Path::to_path_buf))
            .map(|p| p.to_string_lossy().into_owned());
        let mut merged: Vec<(String, String, u64)> = Vec::new();
        let mut lines = Vec::new();
        for r in &self.rows {
            let hit = if r.whole_path {
                rel.as_deref().is_some_and(|p| r.re.is_match(p))
            } else {
                r.re.is_match(&name)
            };
            if !hit {
                continue;
            }
            lines.push(r.line);
            for (k, v) in &r.pairs {
                match merged.iter().find(|(mk, _, _)| mk.eq_ignore_ascii_case(k)) {
                    Some((_, mv, ml)) if !mv.eq_ignore_ascii_case(v) => anyhow::bail!(
                        "{} matches rows {ml} ({k}={mv}) and {} ({k}={v}) of the manifest {}, which \
                         disagree; make the globs select each file once",
                        file.display(),
                        r.line,
                        self.path.display()
                    ),
                    Some(_) => {}
                    None => merged.push((k.clone(), v.clone(), r.line)),
                }
            }
        }
        if lines.is_empty() {
            return Ok(None);
        }
        let pairs: Vec<(String, String)> = merged.into_iter().map(|(k, v, _)| (k, v)).collect();
        let mut a = Assumptions::from_pairs(&pairs).map_err(|e| anyhow::anyhow!("{e}"))?;
        a.knobs.name = format!(
            "manifest {}:{}",
            self.path.display(),
            lines
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(",")
        );
        Ok(Some(a))
    }

    /// Rows that matched none of `files` (a typo in a glob labels nothing).
    pub fn unused_rows(&self, files: &[PathBuf]) -> Vec<String> {
        self.rows
            .iter()
            .filter(|r| !files.iter().any(|f| self.labels_for_row(r, f)))
            .map(|r| {
                format!(
                    "{}:{}: `{}` matches no input file",
                    self.path.display(),
                    r.line,
                    quote(&r.glob)
                )
            })
            .collect()
    }

    fn labels_for_row(&self, r: &ManifestRow, file: &Path) -> bool {
        if r.whole_path {
            file.canonicalize()
                .ok()
                .and_then(|c| c.strip_prefix(&self.dir).ok().map(Path::to_path_buf))
                .is_some_and(|p| r.re.is_match(&p.to_string_lossy()))
        } else {
            file.file_name()
                .is_some_and(|n| r.re.is_match(&n.to_string_lossy()))
        }
    }
}

fn csv_error_kind(e: &csv::Error) -> String {
    match e.kind() {
        csv::ErrorKind::UnequalLengths {
            expected_len, len, ..
        } => format!("{len} fields where the header has {expected_len}"),
        csv::ErrorKind::Utf8 { .. } => "invalid UTF-8".into(),
        _ => quote(&e.to_string()),
    }
}

/// `*` (within a path component), `?`, `**` (any depth); the rest literal.
fn glob_to_regex(g: &str) -> String {
    let mut out = String::from("^");
    let mut it = g.chars().peekable();
    while let Some(c) = it.next() {
        match c {
            '*' if it.peek() == Some(&'*') => {
                it.next();
                if it.peek() == Some(&'/') {
                    it.next();
                    out.push_str("(?:.*/)?");
                } else {
                    out.push_str(".*");
                }
            }
            '*' => out.push_str("[^/]*"),
            '?' => out.push_str("[^/]"),
            c => out.push_str(&regex_lite::escape(c.encode_utf8(&mut [0; 4]))),
        }
    }
    out.push('$');
    out
}

/// A `--name-pattern`: fields in braces are read from the file name.
#[derive(Clone, Debug)]
pub struct NamePattern {
    pub pattern: String,
    re: Regex,
    /// Capture group name -> `--assume` key.
    fields: Vec<(String, &'static str)>,
    /// Components of the path the pattern spans (1 + its `/`s).
    components: usize,
}

/// Fields a name pattern may use, and the `--assume` key each sets.
pub const PATTERN_FIELDS: [(&str, &str, bool); 12] = [
    // (field, key, digits only)
    ("coll", "coll", false),
    ("algo", "NCCL_ALGO", false),
    ("proto", "NCCL_PROTO", false),
    ("channels", "channels", true),
    ("nodes", "nodes", true),
    ("ranks", "ranks", true),
    ("ppn", "gpus_per_node", true),
    ("gpus_per_node", "gpus_per_node", true),
    ("repeat", "repeat", true),
    ("platform", "platform", false),
    ("gpu", "gpu", false),
    ("nccl", "nccl_version", false),
];

impl NamePattern {
    /// Parses `{coll}_n{nodes}_{algo}_{proto}.r{repeat}.log`: `{field}`
    /// reads a field ([`PATTERN_FIELDS`]), `*` matches anything within a
    /// path component, everything else is literal.
    pub fn parse(p: &str) -> anyhow::Result<NamePattern> {
        let mut re = String::from("(?:^|/)");
        let mut fields = Vec::new();
        let mut rest = p;
        while !rest.is_empty() {
            if let Some(r) = rest.strip_prefix('{') {
                let Some(end) = r.find('}') else {
                    anyhow::bail!("--name-pattern {p:?}: a `{{` without its `}}`");
                };
                let field = &r[..end];
                let Some(&(_, key, digits)) = PATTERN_FIELDS.iter().find(|f| f.0 == field) else {
                    anyhow::bail!(
                        "--name-pattern {p:?}: unknown field {{{}}}; expected one of {}",
                        quote(field),
                        PATTERN_FIELDS
                            .iter()
                            .map(|f| format!("{{{}}}", f.0))
                            .collect::<Vec<_>>()
                            .join(" ")
                    );
                };
                let group = format!("f{}", fields.len());
                // Names are matched as names, so `{coll}_{algo}` splits
                // `all_reduce_ring` at the right underscore.
                let value = match field {
                    "coll" => "(?i:all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|send_?recv|broadcast|bcast|reduce|gather|scatter|hypercube)",
                    "algo" => "(?i:collnet_?direct|collnet_?chain|collnet|nvls_?tree|nvls|tree|ring|pat|default)",
                    "proto" => "(?i:ll128|ll|simple|default)",
                    _ if digits => "[0-9]+",
                    _ => "[^/]+?",
                };
                re.push_str(&format!("(?P<{group}>{value})"));
                fields.push((group, key));
                rest = &r[end + 1..];
            } else if let Some(r) = rest.strip_prefix('*') {
                re.push_str("[^/]*");
                rest = r;
            } else {
                let c = rest.chars().next().expect("not empty");
                re.push_str(&regex_lite::escape(&rest[..c.len_utf8()]));
                rest = &rest[c.len_utf8()..];
            }
        }
        re.push('$');
        if fields.is_empty() {
            anyhow::bail!(
                "--name-pattern {p:?}: no {{field}}; expected e.g. \
                 '{{coll}}_n{{nodes}}_{{algo}}_{{proto}}.r{{repeat}}.log'"
            );
        }
        let re = Regex::new(&re).map_err(|e| anyhow::anyhow!("--name-pattern {p:?}: {e}"))?;
        Ok(NamePattern {
            pattern: p.to_string(),
            re,
            fields,
            components: p.matches('/').count() + 1,
        })
    }

    /// What the pattern reads from `file`'s name, or None if it does not
    /// match. A field with a bad value is an error.
    pub fn labels_for(&self, file: &Path) -> Result<Option<Assumptions>, String> {
        let comps: Vec<String> = file
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        let tail = comps[comps.len().saturating_sub(self.components)..].join("/");
        let Some(caps) = self.re.captures(&tail) else {
            return Ok(None);
        };
        let mut pairs = Vec::new();
        for (group, key) in &self.fields {
            if let Some(m) = caps.name(group) {
                pairs.push((key.to_string(), m.as_str().to_string()));
            }
        }
        let mut a = Assumptions::from_pairs(&pairs)
            .map_err(|e| format!("--name-pattern '{}' read {e}", self.pattern))?;
        a.knobs.name = format!("--name-pattern '{}'", self.pattern);
        Ok(Some(a))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Collective;

    #[test]
    fn name_pattern_reads_fields() {
        let p = NamePattern::parse("{coll}_n{nodes}_{algo}_{proto}.r{repeat}.log").unwrap();
        let a = p
            .labels_for(Path::new("/x/all_reduce_n2_ring_ll128.r0.log"))
            .unwrap()
            .unwrap();
        assert_eq!(a.coll, Some(Collective::AllReduce));
        assert_eq!(a.nodes, Some(2));
        assert_eq!(a.knobs.algo.as_deref(), Some("ring"));
        assert_eq!(a.knobs.proto.as_deref(), Some("ll128"));
        assert!(p.labels_for(Path::new("notes.txt")).unwrap().is_none());
        assert!(NamePattern::parse("{colll}.log").is_err());
        let p = NamePattern::parse("n{nodes}/{algo}/*.log").unwrap();
        let a = p.labels_for(Path::new("a/n4/tree/x.log")).unwrap().unwrap();
        assert_eq!((a.nodes, a.knobs.algo.as_deref()), (Some(4), Some("tree")));
    }

    #[test]
    fn globs() {
        let r = Regex::new(&glob_to_regex("run_*.log")).unwrap();
        assert!(r.is_match("run_1.log") && !r.is_match("run_1.logx") && !r.is_match("a/run_1.log"));
        let r = Regex::new(&glob_to_regex("**/n2/*.log")).unwrap();
        assert!(r.is_match("n2/a.log") && r.is_match("x/y/n2/a.log"));
    }
}
