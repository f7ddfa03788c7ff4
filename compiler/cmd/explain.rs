//! `dyncc explain`: the table's decisions as a person reads them. The
//! distilled tree of each collective becomes one rule per leaf ("bytes <
//! 256 KiB and nodes >= 4: tree/ll128, +18.0 % vs default, measured"), and
//! `--contexts` lists the rules the plugin actually indexes, context by
//! context, then what jobs exploring may try (the table's exploration
//! plan, format 1.1), per context. Text, Graphviz dot, or JSON.

use std::fmt::Write as _;
use std::path::PathBuf;

use dyncc_tables::{Coll, Decision, Feature, Table, TreeNode, TreeView, NUM_FEATURES};
use serde::Serialize;

use crate::audit::agreement::{audit_tree, Agreement, TreeAudit};
use crate::audit::colour::colour_hex;
use crate::audit::explore::{self, ContextPlan};
use crate::audit::files::{open, read_table};
use crate::audit::json::{context_json, ContextJson};
use crate::audit::names::{parse_colls, SettingJson};
use crate::audit::text::{condition_text, fmt_decision, fmt_sizes, fmt_span, one_line_summary};
use crate::units::fmt_gain;

/// Output format of `dyncc explain`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Text,
    Dot,
    Json,
}

/// Print a table's decisions as readable rules.
///
/// Each collective's distilled decision tree is printed as one rule per
/// leaf: the conditions on message size and communicator shape, the
/// setting forced (or "NCCL's choice"), the expected gain over NCCL's
/// default and whether it is measured, interpolated or extrapolated. The
/// tree is a readable summary; the per-context rules (--contexts) are what
/// the plugin indexes, and `dyncc query` shows both for one call. A
/// table with an exploration plan (format 1.1) also gets one line per
/// context saying what jobs with DYNCC_EXPLORE may try there (with
/// --contexts, every cell and its candidates).
///
/// Examples:
///   dyncc explain cluster.tbl
///   dyncc explain cluster.tbl --contexts --coll allreduce
///   dyncc explain cluster.tbl --format dot | dot -Tsvg > trees.svg
#[derive(clap::Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct ExplainArgs {
    /// The table (written by `dyncc compile`).
    pub table: PathBuf,
    /// text (rules), dot (Graphviz), or json.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// Same as --format json.
    #[arg(long)]
    pub json: bool,
    /// Also list every context's size rules (what the plugin indexes) and
    /// its exploration plan's cells.
    #[arg(long)]
    pub contexts: bool,
    /// Only this collective (allreduce, all_gather, ReduceScatter, ...).
    #[arg(long)]
    pub coll: Option<String>,
}

/// One condition on the path to a leaf, merged per feature.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Condition {
    pub feature: &'static str,
    /// Feature value >= this (raw, as stored: log2 for sizes).
    pub min: Option<f32>,
    /// Feature value < this.
    pub below: Option<f32>,
    pub text: String,
}

/// One leaf of a tree as a rule.
#[derive(Clone, Debug, Serialize)]
pub struct TreeRule {
    pub leaf: u32,
    pub conditions: Vec<Condition>,
    pub when: String,
    #[serde(flatten)]
    pub setting: SettingJson,
    /// The smallest expected gain of the shapes where the plugin does what
    /// the leaf says ([`crate::audit::evidence`]).
    pub expected_gain: f32,
    /// The largest one.
    pub expected_gain_max: f32,
    /// Every ground of those shapes: "measured", "measured and interpolated".
    pub basis: String,
    pub then: String,
}

/// A collective's tree, raw and as rules.
#[derive(Clone, Debug, Serialize)]
pub struct TreeJson {
    pub collective: &'static str,
    pub nodes: Vec<NodeJson>,
    pub rules: Vec<TreeRule>,
}

/// A stored tree node.
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum NodeJson {
    Split {
        feature: &'static str,
        threshold: f32,
        left: u32,
        right: u32,
    },
    Leaf {
        #[serde(flatten)]
        setting: SettingJson,
        expected_gain: f32,
        basis: &'static str,
    },
}

/// `allreduce  nodes 2  ranks/node 8` plus gates.
pub fn context_title(c: &ContextJson) -> String {
    let mut s = format!(
        "#{} {}  nodes {}  ranks/node {}",
        c.index,
        c.collective,
        fmt_span(c.nodes.0, c.nodes.1),
        fmt_span(c.ppn.0, c.ppn.1)
    );
    if c.max_pipe_ops > 0 {
        let _ = write!(s, "  only numPipeOps <= {}", c.max_pipe_ops);
    }
    if c.reg_buff != "any" {
        // NCCL computes regBuff per rank: what the gate would force for one
        // value only is left to NCCL (dyncc_tables::RegBuff::agreed).
        let _ = write!(
            s,
            "  gated on regBuff={} (NCCL computes it per rank: forces nothing)",
            c.reg_buff
        );
    }
    s
}

/// Every leaf of `tree` as a rule, in depth-first (left before right)
/// order, worded from `audit` (the plugin's answers inside each leaf).
pub fn tree_rules(tree: &TreeView, audit: &TreeAudit) -> Vec<TreeRule> {
    let mut out = Vec::new();
    // (node, per-feature [min, below)) on an explicit stack; children have
    // larger indices than parents (validated), so this terminates.
    type Bounds = [(Option<f32>, Option<f32>); NUM_FEATURES];
    let mut stack: Vec<(usize, Bounds)> = vec![(0, [(None, None); NUM_FEATURES])];
    while let Some((i, bounds)) = stack.pop() {
        let Some(node) = tree.node(i) else { continue };
        match node {
            TreeNode::Split {
                feature,
                threshold,
                left,
                right,
            } => {
                let f = feature as usize;
                let mut l = bounds;
                l[f].1 = Some(l[f].1.map_or(threshold, |b| b.min(threshold)));
                let mut r = bounds;
                r[f].0 = Some(r[f].0.map_or(threshold, |b| b.max(threshold)));
                if (right as usize) > i {
                    stack.push((right as usize, r));
                }
                if (left as usize) > i {
                    stack.push((left as usize, l));
                }
            }
            TreeNode::Leaf {
                decision,
                basis,
                gain,
            } => {
                let conditions: Vec<Condition> = Feature::ALL
                    .iter()
                    .filter_map(|&f| {
                        let (min, below) = bounds[f as usize];
                        (min.is_some() || below.is_some()).then(|| Condition {
                            feature: f.name(),
                            min,
                            below,
                            text: condition_text(f, min, below),
                        })
                    })
                    .collect();
                let e = audit.leaf_evidence(
                    i as u32,
                    &dyncc_tables::TreeLeaf {
                        decision,
                        basis,
                        gain,
                    },
                );
                let when = if conditions.is_empty() {
                    "always".to_string()
                } else {
                    conditions
                        .iter()
                        .map(|c| c.text.as_str())
                        .collect::<Vec<_>>()
                        .join(" and ")
                };
                out.push(TreeRule {
                    leaf: i as u32,
                    when,
                    conditions,
                    setting: SettingJson::of(decision),
                    expected_gain: e.gain_min as f32,
                    expected_gain_max: e.gain_max as f32,
                    basis: e.word(),
                    then: e.then(decision),
                });
            }
        }
    }
    out
}

fn node_json(n: TreeNode) -> NodeJson {
    match n {
        TreeNode::Split {
            feature,
            threshold,
            left,
            right,
        } => NodeJson::Split {
            feature: feature.name(),
            threshold,
            left,
            right,
        },
        TreeNode::Leaf {
            decision,
            basis,
            gain,
        } => NodeJson::Leaf {
            setting: SettingJson::of(decision),
            expected_gain: gain,
            basis: basis.name(),
        },
    }
}

pub fn tree_json(tree: &TreeView, audit: &TreeAudit) -> TreeJson {
    TreeJson {
        collective: tree.coll().name(),
        nodes: tree.nodes().map(node_json).collect(),
        rules: tree_rules(tree, audit),
    }
}

/// `nodes 33-44  ranks/node 8  5 GiB and up  plugin: NCCL's choice  (tree:
/// nvls/simple; beyond the sweep's sizes)`: one region where the tree and
/// the plugin disagree.
pub fn region_text(r: &crate::audit::agreement::Disagreement) -> String {
    let nodes = match (r.nodes, r.nodes_to) {
        (a, b) if a == b => a.to_string(),
        (a, u32::MAX) => format!("{a}+"),
        (a, b) => format!("{a}-{b}"),
    };
    format!(
        "nodes {nodes:<9} ranks/node {:<4} {:<28} plugin: {:<22} (tree: {}{})",
        r.ppn,
        fmt_sizes(r.from_bytes, r.to_bytes),
        r.plugin,
        r.tree,
        r.beyond.map(|b| format!("; {b}")).unwrap_or_default()
    )
}

/// The whole explanation as text.
pub fn render_text(table: &Table, name: &str, colls: &[Coll], contexts: bool) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "{name}: {}", one_line_summary(table));
    let mut any_tree = false;
    for &coll in colls {
        let Some(tree) = table.tree(coll) else {
            continue;
        };
        any_tree = true;
        let Some(audit) = audit_tree(table, coll) else {
            continue;
        };
        let rules = tree_rules(&tree, &audit);
        let _ = writeln!(
            s,
            "\n{}: {} rules (distilled tree of {} nodes)",
            coll.name(),
            rules.len(),
            tree.len()
        );
        let w = rules.iter().map(|r| r.when.len()).max().unwrap_or(0);
        for r in &rules {
            let _ = writeln!(s, "  {:<w$}  : {}", r.when, r.then);
        }
        {
            let ag = &audit.agreement;
            let _ = writeln!(
                s,
                "  (this tree gives the plugin's decision at {}{})",
                ag.text(),
                if ag.regions.is_empty() {
                    ""
                } else {
                    "; every place it does not, beyond the sweep included, and what the plugin does there:"
                }
            );
            for r in &ag.regions {
                let _ = writeln!(s, "    {}", region_text(r));
            }
        }
    }
    let no_tree: Vec<&str> = colls
        .iter()
        .filter(|c| table.tree(**c).is_none() && table.contexts().any(|x| x.spec().coll == **c))
        .map(|c| c.name())
        .collect();
    let with_contexts: Vec<Coll> = colls
        .iter()
        .copied()
        .filter(|c| table.contexts().any(|x| x.spec().coll == *c))
        .collect();
    if !any_tree {
        let _ = writeln!(
            s,
            "\nthis table stores no distilled trees; its per-context rules follow"
        );
    } else if !no_tree.is_empty() {
        let _ = writeln!(s, "\nno distilled tree for: {}", no_tree.join(", "));
    }
    if any_tree {
        let _ = writeln!(
            s,
            "\n(the trees are readable summaries of the decisions; the per-context rules below{} are what the plugin \
             indexes, and `dyncc query` shows both for one call)",
            if contexts { "" } else { " (--contexts)" }
        );
    }
    if contexts || !any_tree {
        let _ = writeln!(
            s,
            "\ncontexts (the first one matching a communicator's nodes and ranks per node wins):"
        );
        let mut shown = 0;
        for c in table
            .contexts()
            .filter(|c| with_contexts.contains(&c.spec().coll))
        {
            shown += 1;
            let j = context_json(table, &c);
            let _ = writeln!(s, "  {}", context_title(&j));
            for r in &j.rules {
                let d = c
                    .rules()
                    .nth(r.index as usize)
                    .map(|r| r.decision)
                    .unwrap_or(Decision::Default);
                let then = match d {
                    Decision::Default => format!("NCCL's choice ({})", r.basis),
                    // What the plugin does: the gated rule is left to NCCL.
                    d if c.spec().reg_buff.splits(d) => format!(
                        "NCCL's choice (forces {} for regBuff={} only: left to NCCL so ranks agree)",
                        fmt_decision(d),
                        j.reg_buff
                    ),
                    d => format!(
                        "{:<20} {:>8}  {}",
                        fmt_decision(d),
                        fmt_gain(r.expected_gain as f64),
                        r.basis
                    ),
                };
                let _ = writeln!(
                    s,
                    "      {:<28} {then}",
                    fmt_sizes(r.from_bytes, r.to_bytes)
                );
            }
        }
        if shown == 0 {
            let _ = writeln!(s, "  none: the plugin leaves NCCL alone for every call");
        }
    }
    plan_text(&mut s, table, colls, contexts);
    s
}

/// The exploration plan, one line per context (and with `cells` every
/// cell), or one line saying the table has none.
fn plan_text(s: &mut String, table: &Table, colls: &[Coll], cells: bool) {
    if !table.has_plan() {
        let _ = writeln!(
            s,
            "\nexploration plan: none (with DYNCC_EXPLORE the plugin derives what to try from the rules and \
             neighbouring contexts, runtime/README.md)"
        );
        return;
    }
    let plans = explore::by_context(table, colls);
    let _ = writeln!(
        s,
        "\nexploration plan (what jobs with DYNCC_EXPLORE may try, ranked; `dyncc query` gives one call's chances):"
    );
    if plans.is_empty() {
        let _ = writeln!(s, "  none for these collectives");
    }
    for p in &plans {
        let title = table
            .context(p.context)
            .map(|c| context_title(&context_json(table, &c)))
            .unwrap_or_default();
        let _ = writeln!(s, "  {title}: {}", p.summary());
        if cells {
            for c in &p.plan {
                let _ = writeln!(s, "      {}", explore::cell_line(c));
            }
        }
    }
}

fn dot_escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

/// Graphviz: one cluster per collective; leaves coloured by decision.
pub fn render_dot(table: &Table, colls: &[Coll]) -> String {
    let mut s = String::from(
        "digraph dyncc {\n  rankdir=TB;\n  node [fontname=\"Helvetica\", fontsize=10];\n  edge [fontname=\"Helvetica\", fontsize=9];\n",
    );
    for &coll in colls {
        let (Some(tree), Some(audit)) = (table.tree(coll), audit_tree(table, coll)) else {
            continue;
        };
        let c = coll.name();
        let _ = writeln!(s, "  subgraph cluster_{c} {{\n    label=\"{c}\";");
        for (i, n) in tree.nodes().enumerate() {
            match n {
                TreeNode::Split {
                    feature,
                    threshold,
                    left,
                    right,
                } => {
                    let cond = condition_text(feature, None, Some(threshold));
                    let _ = writeln!(
                        s,
                        "    {c}_{i} [shape=box, label=\"{}\"];",
                        dot_escape(&cond)
                    );
                    let _ = writeln!(s, "    {c}_{i} -> {c}_{left} [label=\"yes\"];");
                    let _ = writeln!(s, "    {c}_{i} -> {c}_{right} [label=\"no\"];");
                }
                TreeNode::Leaf {
                    decision,
                    basis,
                    gain,
                } => {
                    let e = audit.leaf_evidence(
                        i as u32,
                        &dyncc_tables::TreeLeaf {
                            decision,
                            basis,
                            gain,
                        },
                    );
                    let (fill, label) = match decision {
                        Decision::Default => (
                            "#eeeeee".to_string(),
                            format!("NCCL's choice\\n{}", e.word()),
                        ),
                        d => (
                            colour_hex(d),
                            format!(
                                "{}\\n{} vs default\\n{}",
                                fmt_decision(d),
                                e.gain_text(),
                                e.word()
                            ),
                        ),
                    };
                    let _ = writeln!(
                        s,
                        "    {c}_{i} [shape=ellipse, style=filled, fillcolor=\"{fill}\", label=\"{}\"];",
                        dot_escape(&label).replace("\\\\n", "\\n")
                    );
                }
            }
        }
        s.push_str("  }\n");
    }
    s.push_str("}\n");
    s
}

#[derive(Serialize)]
struct ExplainJson {
    table: String,
    digest: String,
    platform: Option<String>,
    /// The sweep's NCCL version(s), when the table records them.
    nccl_version: Option<String>,
    trees: Vec<TreeJson>,
    /// Per tree: where it reproduces the plugin's decision and where not.
    agreement: Vec<Agreement>,
    contexts: Vec<ContextJson>,
    /// The exploration plan per context (contexts without one left out);
    /// null when the table has no plan.
    plan: Option<Vec<ContextPlan>>,
}

pub fn run(a: ExplainArgs) -> anyhow::Result<i32> {
    let bytes = read_table(&a.table)?;
    let table = open(&a.table, &bytes)?;
    let colls = parse_colls(a.coll.as_deref())?;
    let format = if a.json { Format::Json } else { a.format };
    let name = a.table.display().to_string();
    match format {
        Format::Text => print!("{}", render_text(&table, &name, &colls, a.contexts)),
        Format::Dot => {
            if colls.iter().all(|c| table.tree(*c).is_none()) {
                anyhow::bail!(
                    "{name} stores no distilled tree{}: there is nothing to draw. `dyncc explain {name} --contexts` \
                     lists its rules; `dyncc plot` draws its decision map",
                    a.coll.as_ref().map(|c| format!(" for {c}")).unwrap_or_default()
                );
            }
            print!("{}", render_dot(&table, &colls))
        }
        Format::Json => {
            let audits: Vec<_> = colls
                .iter()
                .filter_map(|c| Some((table.tree(*c)?, audit_tree(&table, *c)?)))
                .collect();
            let j = ExplainJson {
                table: name,
                digest: format!("{:016x}", table.digest()),
                platform: table
                    .meta("platform")
                    .filter(|p| !p.is_empty())
                    .map(str::to_string),
                nccl_version: table.meta("nccl_version").map(str::to_string),
                trees: audits.iter().map(|(t, a)| tree_json(t, a)).collect(),
                agreement: audits.into_iter().map(|(_, a)| a.agreement).collect(),
                contexts: table
                    .contexts()
                    .filter(|c| colls.contains(&c.spec().coll))
                    .map(|c| context_json(&table, &c))
                    .collect(),
                plan: table
                    .has_plan()
                    .then(|| explore::by_context(&table, &colls)),
            };
            println!("{}", crate::output::pretty(&j)?);
        }
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::testutil;
    use dyncc_tables::Rule;

    #[test]
    fn leaves_become_rules_with_merged_conditions() {
        let bytes = testutil::sample();
        let t = Table::from_bytes(&bytes).unwrap();
        let audit = audit_tree(&t, Coll::AllReduce).unwrap();
        let rules = tree_rules(&t.tree(Coll::AllReduce).unwrap(), &audit);
        let whens: Vec<&str> = rules.iter().map(|r| r.when.as_str()).collect();
        assert_eq!(
            whens,
            [
                "bytes < 128 KiB and nodes < 4",
                "bytes < 128 KiB and nodes >= 4",
                "bytes >= 128 KiB and nodes < 4",
                "bytes >= 128 KiB and nodes >= 4"
            ]
        );
        // The leaf stores +30 % measured (node 2's rule), but it also holds
        // node 3, where the plugin's rule is +20 % interpolated: the leaf
        // reads as the plugin answers inside it.
        assert_eq!(
            rules[0].then,
            "tree/ll, +20.0 to +30.0 % vs default, measured and interpolated"
        );
        assert_eq!(
            rules[3].then,
            "ring/ll128/16ch, +12.0 % vs default, measured"
        );
        assert_eq!(rules[1].setting.algorithm, "default");
    }

    #[test]
    fn text_without_trees_falls_back_to_contexts() {
        let mut b = dyncc_tables::TableBuilder::new();
        b.context(
            dyncc_tables::ContextSpec {
                coll: Coll::AllGather,
                nodes: (1, 1),
                ppn: (8, 8),
                max_pipe_ops: 0,
                reg_buff: dyncc_tables::RegBuff::Any,
            },
            &[Rule {
                last_bucket: 255,
                decision: testutil::force(dyncc_tables::Algo::Ring, dyncc_tables::Proto::Simple, 0),
                basis: dyncc_tables::Basis::Measured,
                gain: 1.1,
            }],
        )
        .unwrap();
        let bytes = b.build().unwrap();
        let t = Table::from_bytes(&bytes).unwrap();
        let s = render_text(&t, "x.tbl", &Coll::ALL, false);
        assert!(s.contains("stores no distilled trees"), "{s}");
        assert!(s.contains("#0 allgather  nodes 1  ranks/node 8"), "{s}");
        assert!(s.contains("ring/simple"), "{s}");
    }
}
