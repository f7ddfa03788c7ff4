//! `dyncc verify`: is this file a table the plugin will load, and which
//! one? Integrity (magic, format version, length, CRC-32, every record's
//! structure, all via `Table::from_bytes`), the digest the plugin logs at
//! init, the metadata, and a coverage summary, with the exploration plan's
//! size (format 1.1) per collective.

use std::collections::BTreeMap;
use std::path::PathBuf;

use dyncc_tables::{Coll, Table, FORMAT_MAJOR, FORMAT_MINOR};
use serde::Serialize;

use crate::audit::explore;
use crate::audit::files::{invalid_table, read_table};
use crate::audit::text::fmt_span;

/// Check a table's integrity and print its digest, metadata and coverage.
///
/// Validates everything the plugin validates at load (magic, format
/// version, length, CRC-32 of the body, every context, rule, tree node
/// and metadata string). Exits 0 for a valid table; for a corrupt one it
/// prints the precise problem and exits 2. The digest is the one the
/// plugin logs at init on every rank: equal digests, same table. A
/// format 1.1 table may carry an exploration plan (what jobs with
/// DYNCC_EXPLORE try where the table is unsure): its cells and
/// candidates are counted per collective.
///
/// Examples:
///   dyncc verify cluster.tbl
///   dyncc verify cluster.tbl --json | jq .digest
#[derive(clap::Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct VerifyArgs {
    /// The table to check.
    pub table: PathBuf,
    /// Print a JSON object.
    #[arg(long)]
    pub json: bool,
}

/// Per-collective coverage.
#[derive(Clone, Debug, Serialize)]
pub struct CollCoverage {
    pub contexts: u32,
    pub rules: u32,
    pub forced_rules: u32,
    /// Node spans of its contexts (`2`, `3-7`, `9+`).
    pub nodes: Vec<String>,
    /// Ranks-per-node spans of its contexts.
    pub ppn: Vec<String>,
    pub tree: bool,
    /// Exploration-plan cells of its contexts (0 without a plan).
    pub plan_cells: u32,
    /// Candidates over those cells.
    pub plan_candidates: u32,
}

#[derive(Clone, Debug, Serialize)]
pub struct VerifyJson {
    pub table: String,
    pub valid: bool,
    pub error: Option<String>,
    pub bytes: usize,
    pub format_version: Option<String>,
    pub reader_version: String,
    pub digest: Option<String>,
    pub metadata: BTreeMap<String, String>,
    pub contexts: u32,
    pub rules: u32,
    pub forced_rules: u32,
    pub trees: u32,
    /// Whether the table carries an exploration plan (format 1.1 PLAN).
    pub has_plan: bool,
    pub plan_cells: u32,
    pub plan_candidates: u32,
    pub collectives: BTreeMap<&'static str, CollCoverage>,
}

pub fn coverage(t: &Table) -> BTreeMap<&'static str, CollCoverage> {
    let mut out = BTreeMap::new();
    let plan = explore::counts(t);
    for coll in Coll::ALL {
        let ctx: Vec<_> = t.contexts().filter(|c| c.spec().coll == coll).collect();
        if ctx.is_empty() && t.tree(coll).is_none() {
            continue;
        }
        let mut nodes: Vec<String> = Vec::new();
        let mut ppn: Vec<String> = Vec::new();
        for c in &ctx {
            let s = c.spec();
            let n = fmt_span(s.nodes.0, s.nodes.1);
            if !nodes.contains(&n) {
                nodes.push(n);
            }
            let p = fmt_span(s.ppn.0, s.ppn.1);
            if !ppn.contains(&p) {
                ppn.push(p);
            }
        }
        out.insert(
            coll.name(),
            CollCoverage {
                contexts: ctx.len() as u32,
                rules: ctx.iter().map(|c| c.rule_count()).sum(),
                forced_rules: ctx
                    .iter()
                    .map(|c| c.rules().filter(|r| r.decision.is_forced()).count() as u32)
                    .sum(),
                nodes,
                ppn,
                tree: t.tree(coll).is_some(),
                plan_cells: plan.get(coll.name()).map_or(0, |p| p.cells),
                plan_candidates: plan.get(coll.name()).map_or(0, |p| p.candidates),
            },
        );
    }
    out
}

pub fn check(path: &std::path::Path, bytes: &[u8]) -> VerifyJson {
    let mut j = VerifyJson {
        table: path.display().to_string(),
        valid: false,
        error: None,
        bytes: bytes.len(),
        format_version: None,
        reader_version: format!("{FORMAT_MAJOR}.{FORMAT_MINOR}"),
        digest: None,
        metadata: BTreeMap::new(),
        contexts: 0,
        rules: 0,
        forced_rules: 0,
        trees: 0,
        has_plan: false,
        plan_cells: 0,
        plan_candidates: 0,
        collectives: BTreeMap::new(),
    };
    match Table::from_bytes(bytes) {
        Err(e) => j.error = Some(e.to_string()),
        Ok(t) => {
            let (ma, mi) = t.version();
            let cov = t.coverage();
            j.valid = true;
            j.format_version = Some(format!("{ma}.{mi}"));
            j.digest = Some(format!("{:016x}", t.digest()));
            j.metadata = t
                .meta_entries()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            j.contexts = cov.contexts;
            j.rules = cov.rules;
            j.forced_rules = cov.forced_rules;
            j.trees = cov.trees;
            j.collectives = coverage(&t);
            j.has_plan = t.has_plan();
            j.plan_cells = j.collectives.values().map(|c| c.plan_cells).sum();
            j.plan_candidates = t.plan_len() as u32;
        }
    }
    j
}

/// Prints the check; `problem` is why the table did not validate.
fn print_human(j: &VerifyJson, problem: Option<&dyncc_tables::Error>) {
    let Some(digest) = &j.digest else {
        if let Some(e @ dyncc_tables::Error::UnsupportedVersion { found, supported }) = problem {
            if found > supported {
                eprintln!(
                    "error: {}",
                    invalid_table(std::path::Path::new(&j.table), e)
                );
                return;
            }
        }
        eprintln!(
            "error: {} is corrupt or not a dyncc table: {}\n\
             The plugin would refuse to load it (and fail communicator creation unless DYNCC_STRICT=0). \
             Copy the table again from where it was compiled, or re-create it with `dyncc compile`.",
            j.table,
            j.error.as_deref().unwrap_or("unknown error")
        );
        return;
    };
    println!("{}: valid dyncc table", j.table);
    println!(
        "  format      {} (this dyncc reads {})",
        j.format_version.as_deref().unwrap_or("?"),
        j.reader_version
    );
    println!("  size        {} bytes, CRC-32 ok", j.bytes);
    println!(
        "  digest      {digest}  (the plugin logs this at init; equal on every rank = same table)"
    );
    println!(
        "  contents    {} contexts, {} rules ({} forcing a choice), {} trees",
        j.contexts, j.rules, j.forced_rules, j.trees
    );
    if j.has_plan {
        println!(
            "  plan        {} cells, {} candidates (what jobs with DYNCC_EXPLORE try; `dyncc explain` lists them)",
            j.plan_cells, j.plan_candidates
        );
    } else {
        println!(
            "  plan        none (with DYNCC_EXPLORE the plugin derives what to try from the rules and neighbouring contexts)"
        );
    }
    if !j.collectives.is_empty() {
        println!("\ncoverage:");
        for (c, v) in &j.collectives {
            println!(
                "  {:<14} {:>3} contexts, {:>4} rules ({:>3} forcing), nodes {}, ranks/node {}{}{}",
                c,
                v.contexts,
                v.rules,
                v.forced_rules,
                if v.nodes.is_empty() {
                    "-".into()
                } else {
                    v.nodes.join(",")
                },
                if v.ppn.is_empty() {
                    "-".into()
                } else {
                    v.ppn.join(",")
                },
                if v.tree { ", tree" } else { "" },
                if v.plan_cells > 0 {
                    format!(
                        ", plan {} cells, {} candidates",
                        v.plan_cells, v.plan_candidates
                    )
                } else {
                    String::new()
                }
            );
        }
    }
    println!("\nmetadata:");
    if j.metadata.is_empty() {
        println!("  (none)");
    }
    for (k, v) in &j.metadata {
        let mut lines = v.lines();
        println!("  {:<14} {}", k, lines.next().unwrap_or(""));
        for l in lines {
            println!("  {:<14} {l}", "");
        }
    }
}

pub fn run(a: VerifyArgs) -> anyhow::Result<i32> {
    let bytes = read_table(&a.table)?;
    let j = check(&a.table, &bytes);
    if a.json {
        println!("{}", crate::output::pretty(&j)?);
    } else {
        print_human(&j, Table::from_bytes(&bytes).err().as_ref());
    }
    Ok(if j.valid { 0 } else { 2 })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::testutil;

    #[test]
    fn valid_and_corrupt() {
        let mut bytes = testutil::sample();
        let j = check(std::path::Path::new("t.tbl"), &bytes);
        assert!(j.valid && j.error.is_none());
        assert_eq!(j.contexts, 3);
        assert_eq!(
            j.metadata.get("platform").map(String::as_str),
            Some("test-rig")
        );
        assert_eq!(j.collectives["allreduce"].nodes, ["2", "4", "3"]);
        assert!(!j.has_plan && j.plan_cells == 0 && j.plan_candidates == 0);
        let n = bytes.len();
        bytes[n - 1] ^= 0x55;
        let j = check(std::path::Path::new("t.tbl"), &bytes);
        assert!(!j.valid);
        assert!(j.error.unwrap().contains("CRC-32"));
    }
}
