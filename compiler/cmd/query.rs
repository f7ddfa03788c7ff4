//! `dyncc query`: one call, answered exactly as the plugin answers it
//! (`Table::specialise(nRanks, nNodes)` then `Specialised::decide`, the
//! plugin's own path), with the context and rule that produced it, the
//! path through the collective's explain tree, what a job exploring may
//! try on it (the table's exploration plan, format 1.1) and, given the
//! sweep data, the measured cells nearest to the call (and given jobs'
//! traces, what they measured near it: [`crate::audit::traced`]).

use std::path::PathBuf;

use anyhow::{bail, Context};
use dyncc_tables::{Coll, Comm, Decision, Feature, Table};
use serde::Serialize;

use crate::audit::agreement::{audit_tree, TreeAudit};
use crate::audit::evidence::{ground_at, sweep_sizes, Ground, BEYOND_THE_SWEEP};
use crate::audit::explore::{self, CallPlan, PlanCall, DEFAULT_SHARE};
use crate::audit::files::{open, read_table};
use crate::audit::json::{context_json, RuleJson};
use crate::audit::names::{feature_label, parse_coll, SettingJson};
use crate::audit::text::{condition_text, fmt_decision, fmt_sizes, fmt_span, fmt_then};
use crate::audit::traced::{self, TracedEvidence};
use crate::ingest::args::IngestArgs;
use crate::record::{Cell, Collective, Config};
use crate::units::{fmt_bytes, fmt_gain, parse_bytes};

/// Show the decision for one collective call, and why.
///
/// The answer is computed the way the plugin computes it inside NCCL
/// (specialise the table to the communicator's nRanks and nNodes, then
/// index by collective and size), so it is exactly what a job using this
/// table gets. Also shown: the table context and size rule used, the path
/// through the collective's explain tree, what a job with DYNCC_EXPLORE
/// may try on this call instead (the table's exploration plan: each
/// candidate, its predicted gain over the table's answer and cost, and the
/// share of communicators that try it), and with --data the measured
/// cells nearest to the call and their times; trace directories
/// (DYNCC_TRACE) given beside the sweep add what jobs measured near the
/// call, judged as the compile that made the table judged it (its margin
/// and noise-z; traces of another platform or sweep only with
/// --foreign-traces): the setting that decides,
/// any short of the evidence rule and why, and what NCCL runs on its own
/// at a count the sweep skipped.
///
/// Examples:
///   dyncc query cluster.tbl --coll allreduce --bytes 4MiB --nodes 16 --ranks 128
///   dyncc query cluster.tbl --coll all_gather --bytes 64K --nodes 2 --ranks 16 --data sweeps/
///   dyncc query cluster.tbl --coll allreduce --bytes 4MiB --nodes 3 --ranks 24 --explore 0.05
///   dyncc query cluster.tbl --coll allreduce --bytes 4MiB --nodes 3 --ranks 24 --data sweeps/ traces/
///   dyncc query cluster.tbl --batch calls.csv  # lines coll,bytes,nodes,ranks, then pipe_ops,reg_buff if given
#[derive(clap::Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct QueryArgs {
    /// The table (written by `dyncc compile`).
    pub table: PathBuf,
    /// Collective: allreduce, allgather, reducescatter, broadcast, reduce (any spelling).
    #[arg(long, required_unless_present = "batch")]
    pub coll: Option<String>,
    /// Message size as NCCL passes it to a tuner (nccl-tests `size`): 4096, 256K, 4MiB.
    #[arg(long, required_unless_present = "batch")]
    pub bytes: Option<String>,
    /// Number of nodes of the communicator (nNodes).
    #[arg(long, required_unless_present = "batch")]
    pub nodes: Option<u64>,
    /// Number of ranks of the communicator (nRanks), e.g. nodes x GPUs per node.
    #[arg(long, required_unless_present = "batch")]
    pub ranks: Option<u64>,
    /// numPipeOps NCCL passes (1 for a single operation).
    #[arg(long, default_value_t = 1, allow_negative_numbers = true)]
    pub pipe_ops: i32,
    /// regBuff NCCL passes (0 = buffer not registered). No answer depends on
    /// it: NCCL computes it per rank, so what a table gated on it would
    /// force for one value only is left to NCCL.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    pub reg_buff: i32,
    /// Sweep files or directories to show the nearest measured cells from,
    /// and jobs' trace files or directories (DYNCC_TRACE) to show what jobs
    /// measured near the call, read against the sweep as `dyncc compile`
    /// reads them.
    #[arg(long, num_args = 1..)]
    pub data: Vec<PathBuf>,
    /// Show trace files of jobs on another platform than the table's, or
    /// of a table compiled from another sweep; without it they are refused,
    /// as `dyncc compile` refuses them.
    #[arg(long)]
    pub foreign_traces: bool,
    /// How to read and label the --data inputs, as for `dyncc compile`
    /// (they are always read leniently: what cannot be read is counted).
    #[command(flatten)]
    pub ingest: IngestArgs,
    /// Answer every call in FILE (CSV lines `coll,bytes,nodes,ranks[,pipe_ops,reg_buff]`;
    /// `#` comments), one JSON object per line.
    #[arg(long, conflicts_with_all = ["coll", "bytes", "nodes", "ranks"])]
    pub batch: Option<PathBuf>,
    /// The share F the chances of trying the plan's candidates are worked
    /// out for (default: the table's own, which the plugin explores at).
    #[arg(long, value_name = "F")]
    pub explore: Option<f64>,
    /// Print a JSON object.
    #[arg(long)]
    pub json: bool,
}

/// One call, as NCCL's getCollInfo sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Call {
    pub coll: Coll,
    pub bytes: u64,
    /// The communicator, as the plugin's init builds it.
    pub comm: Comm,
    pub pipe_ops: i32,
    pub reg_buff: i32,
}

#[derive(Clone, Debug, Serialize)]
pub struct ContextRef {
    pub index: u32,
    pub nodes: (u32, u32),
    pub ppn: (u32, u32),
    pub max_pipe_ops: u32,
    pub reg_buff: &'static str,
}

#[derive(Clone, Debug, Serialize)]
pub struct Step {
    pub feature: &'static str,
    pub value: f32,
    pub threshold: f32,
    /// The condition tested, e.g. `bytes < 128 KiB`.
    pub test: String,
    pub holds: bool,
}

#[derive(Clone, Debug, Serialize)]
pub struct TreePath {
    pub steps: Vec<Step>,
    pub leaf: u32,
    #[serde(flatten)]
    pub setting: SettingJson,
    /// The leaf as `explain` words it ([`crate::audit::agreement`]): the
    /// smallest and largest expected gain of the shapes where the plugin
    /// does what it says, and every ground they rest on.
    pub expected_gain: f32,
    pub expected_gain_max: f32,
    pub basis: String,
    /// The leaf's line, as `explain` prints it.
    pub then: String,
    /// Whether the summary tree's leaf says what the table decides.
    pub agrees: bool,
}

#[derive(Clone, Debug, Serialize)]
pub struct MeasuredCell {
    pub config: String,
    pub time_us: f64,
    pub samples: u32,
    pub spread: f64,
    /// time / time of NCCL's default at this cell (None without a default run).
    pub vs_default: Option<f64>,
    pub is_decision: bool,
    pub source: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct MeasuredSize {
    pub bytes: u64,
    pub cells: Vec<MeasuredCell>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Evidence {
    pub nodes: u32,
    pub ranks: u32,
    /// Whether the data has this exact communicator shape.
    pub exact_shape: bool,
    pub sizes: Vec<MeasuredSize>,
    /// Inputs that could not be read (skipped).
    pub skipped: usize,
}

#[derive(Clone, Debug, Serialize)]
pub struct Answer {
    pub collective: &'static str,
    pub bytes: u64,
    pub nodes: u64,
    pub ranks: u64,
    pub num_pipe_ops: i32,
    pub reg_buff: i32,
    #[serde(flatten)]
    pub setting: SettingJson,
    /// Expected speedup over NCCL's default (t_default / t_choice); 1.0 when left alone.
    pub expected_gain: f32,
    /// measured / interpolated / extrapolated, or "beyond the sweep" for a
    /// size outside the sweep's measured sizes (left to NCCL); null when no
    /// rule applies.
    pub basis: Option<&'static str>,
    pub decision: String,
    pub context: Option<ContextRef>,
    pub rule: Option<RuleJson>,
    pub why: String,
    pub tree: Option<TreePath>,
    /// What a job with DYNCC_EXPLORE may try on this call: the table's
    /// plan cell serving it and each candidate's chance, or why none.
    pub explore: CallPlan,
    /// Nearest measured cells (only with --data).
    pub evidence: Option<Evidence>,
    /// Jobs' measurements near the call (only with trace files or
    /// directories in --data).
    pub traced: Option<TracedEvidence>,
}

/// The summary trees' audits ([`audit_tree`]), each computed once for a
/// run of answers (a batch asks the same tree many times).
#[derive(Default)]
pub struct TreeAudits(std::collections::BTreeMap<u32, Option<TreeAudit>>);

impl TreeAudits {
    fn get(&mut self, table: &Table, coll: Coll) -> Option<&TreeAudit> {
        self.0
            .entry(coll as u32)
            .or_insert_with(|| audit_tree(table, coll))
            .as_ref()
    }
}

fn tree_path(
    table: &Table,
    call: &Call,
    decided: Decision,
    audits: &mut TreeAudits,
) -> Option<TreePath> {
    let tree = table.tree(call.coll)?;
    let x = dyncc_tables::tree_features(call.bytes, call.comm.nodes, call.comm.ranks);
    let mut steps = Vec::new();
    let (leaf, l) = tree.walk(&x, |s| {
        steps.push(Step {
            feature: s.feature.name(),
            value: s.value,
            threshold: s.threshold,
            test: condition_text(s.feature, None, Some(s.threshold)),
            holds: s.holds,
        })
    })?;
    let e = audits.get(table, call.coll)?.leaf_evidence(leaf as u32, &l);
    Some(TreePath {
        steps,
        leaf: leaf as u32,
        setting: SettingJson::of(l.decision),
        expected_gain: e.gain_min as f32,
        expected_gain_max: e.gain_max as f32,
        basis: e.word(),
        then: e.then(l.decision),
        agrees: l.decision == decided,
    })
}

/// Answers one call. The decision comes from the plugin's own path
/// (`specialise` + `decide`); the provenance from `lookup`, which the
/// table crate guarantees agrees (checked here anyway). Exploration
/// chances are for the table's share (the default where it is not one).
pub fn answer(table: &Table, call: &Call) -> anyhow::Result<Answer> {
    let share = explore::check_share(explore::table_share(table)).unwrap_or(DEFAULT_SHARE);
    answer_with(table, call, &mut TreeAudits::default(), share)
}

/// [`answer`], reusing `audits` across calls, with exploration chances
/// at share `share`.
pub fn answer_with(
    table: &Table,
    call: &Call,
    audits: &mut TreeAudits,
    share: f64,
) -> anyhow::Result<Answer> {
    let spec = table.specialise(&call.comm);
    let d = spec.decide(call.coll as u32, call.bytes, call.pipe_ops, call.reg_buff);
    let l = table.lookup(
        call.coll as u32,
        &call.comm,
        call.bytes,
        call.pipe_ops,
        call.reg_buff,
    );
    if l.decision != d {
        bail!(
            "internal error: Table::lookup says {} but the plugin path says {}; please report this",
            l.decision,
            d
        );
    }
    let ctx = l.context.and_then(|i| table.context(i));
    let context = ctx.map(|c| {
        let j = context_json(table, &c);
        ContextRef {
            index: j.index,
            nodes: j.nodes,
            ppn: j.ppn,
            max_pipe_ops: j.max_pipe_ops,
            reg_buff: j.reg_buff,
        }
    });
    let rule = match (ctx, l.rule) {
        (Some(c), Some(i)) => context_json(table, &c).rules.into_iter().nth(i as usize),
        _ => None,
    };
    // A size outside the sweep's is left to NCCL by a rule stored as
    // "measured" (the sweep measured NCCL's default there as much as
    // anything else): say the size is beyond the sweep.
    let sweep = sweep_sizes(table, call.coll, call.comm.nodes, call.comm.ranks);
    let beyond =
        sweep.filter(|_| ground_at(&l, sweep.as_ref(), call.bytes) == Some(Ground::BeyondSweep));
    let shape = format!(
        "{} node{} x {} ranks/node",
        call.comm.nodes,
        if call.comm.nodes == 1 { "" } else { "s" },
        if call.comm.nodes > 0 && call.comm.ranks.is_multiple_of(call.comm.nodes) {
            (call.comm.ranks / call.comm.nodes).to_string()
        } else {
            format!(
                "{:.2}",
                call.comm.ranks as f64 / call.comm.nodes.max(1) as f64
            )
        }
    );
    // A measured shape where nothing beat NCCL's default is stored as a
    // context that leaves every size alone: it is covered, not unmeasured.
    let kept_everywhere = ctx.is_some_and(|c| c.rules().all(|r| r.decision == Decision::Default))
        && beyond.is_none()
        && l.basis == Some(dyncc_tables::Basis::Measured);
    // The rule a regBuff-gated context left to NCCL (`Lookup::reg_buff_split`).
    let split = ctx
        .filter(|_| l.reg_buff_split)
        .and_then(|c| c.rule_for_size(call.bytes));
    let why = match (&context, &rule, split) {
        (Some(c), None, Some((i, r))) => {
            format!(
                "context #{} (nodes {}, ranks/node {}), rule {}: it forces {} for regBuff={} only, and NCCL computes \
                 regBuff per rank (ranks of one collective can differ): left to NCCL whatever this call's regBuff, \
                 so every rank agrees",
                c.index,
                fmt_span(c.nodes.0, c.nodes.1),
                fmt_span(c.ppn.0, c.ppn.1),
                i,
                fmt_decision(r.decision),
                c.reg_buff
            )
        }
        (Some(c), Some(_), _) if kept_everywhere => format!(
            "context #{} (nodes {}, ranks/node {}): the sweep measured this shape and NCCL's default is kept \
             at every size (no setting beat it by the margin)",
            c.index,
            fmt_span(c.nodes.0, c.nodes.1),
            fmt_span(c.ppn.0, c.ppn.1),
        ),
        (None, _, _) => format!(
            "no {} context covers {shape}: the table leaves NCCL alone for this communicator (a shape the sweep \
             did not measure, or one compiled without --extrapolate)",
            call.coll.name()
        ),
        (Some(c), None, _) => format!(
            "context #{} (nodes {}, ranks/node {}) matches, but it decides only for {}: this call (numPipeOps {}, \
             regBuff {}) is left to NCCL",
            c.index,
            fmt_span(c.nodes.0, c.nodes.1),
            fmt_span(c.ppn.0, c.ppn.1),
            gate_text(c),
            call.pipe_ops,
            call.reg_buff
        ),
        (Some(c), Some(r), _) => format!(
            "context #{} (nodes {}, ranks/node {}), rule {} (sizes {}): {}",
            c.index,
            fmt_span(c.nodes.0, c.nodes.1),
            fmt_span(c.ppn.0, c.ppn.1),
            r.index,
            fmt_sizes(r.from_bytes, r.to_bytes),
            match &beyond {
                Some(b) => fmt_then(d, l.gain, &b.why()),
                None => fmt_then(d, l.gain, l.basis.map_or("no rule", |b| b.name())),
            }
        ),
    };
    Ok(Answer {
        collective: call.coll.name(),
        bytes: call.bytes,
        nodes: call.comm.nodes,
        ranks: call.comm.ranks,
        num_pipe_ops: call.pipe_ops,
        reg_buff: call.reg_buff,
        setting: SettingJson::of(d),
        expected_gain: l.gain,
        basis: match beyond {
            Some(_) => Some(BEYOND_THE_SWEEP),
            None => l.basis.map(dyncc_tables::Basis::name),
        },
        decision: fmt_decision(d),
        context,
        rule,
        why,
        tree: tree_path(table, call, d, audits),
        explore: explore::for_call(
            table,
            &PlanCall {
                coll: call.coll,
                bytes: call.bytes,
                nodes: call.comm.nodes,
                ranks: call.comm.ranks,
                pipe_ops: call.pipe_ops,
            },
            d,
            share,
        ),
        evidence: None,
        traced: None,
    })
}

/// The gate that sent a call to NCCL: numPipeOps only, since no answer
/// depends on regBuff (a regBuff gate's split rules are worded apart).
fn gate_text(c: &ContextRef) -> String {
    format!("numPipeOps <= {}", c.max_pipe_ops)
}

/// The measured cells nearest to `call`: the closest communicator shape in
/// the data (log distance in nodes and ranks per node), then the measured
/// sizes nearest below and above.
pub fn evidence(
    cells: &[Cell],
    call: &Call,
    decided: Decision,
    skipped: usize,
) -> Option<Evidence> {
    let want = Collective::from_coll(call.coll);
    let mine: Vec<&Cell> = cells.iter().filter(|c| c.key.collective == want).collect();
    let lg = |v: f64| v.max(1.0).log2();
    let ppn = call.comm.ranks as f64 / call.comm.nodes.max(1) as f64;
    let dist = |c: &Cell| {
        let cppn = c.key.nranks as f64 / c.key.nnodes.max(1) as f64;
        (lg(c.key.nnodes as f64) - lg(call.comm.nodes as f64)).abs() + (lg(cppn) - lg(ppn)).abs()
    };
    let best = mine.iter().min_by(|a, b| dist(a).total_cmp(&dist(b)))?;
    let (nodes, ranks) = (best.key.nnodes, best.key.nranks);
    let shape: Vec<&Cell> = mine
        .iter()
        .copied()
        .filter(|c| c.key.nnodes == nodes && c.key.nranks == ranks)
        .collect();
    let mut sizes: Vec<u64> = shape.iter().map(|c| c.key.nbytes).collect();
    sizes.sort_unstable();
    sizes.dedup();
    let below = sizes.iter().rev().find(|s| **s <= call.bytes).copied();
    let above = sizes.iter().find(|s| **s >= call.bytes).copied();
    let mut pick: Vec<u64> = below.into_iter().chain(above).collect();
    pick.dedup();
    let want_cfg = Config::from(decided);
    let sizes = pick
        .into_iter()
        .map(|b| {
            let mut at: Vec<&Cell> = shape
                .iter()
                .copied()
                .filter(|c| c.key.nbytes == b)
                .collect();
            at.sort_by(|x, y| x.time_us.total_cmp(&y.time_us));
            let t_def = at
                .iter()
                .find(|c| c.key.config.is_default())
                .map(|c| c.time_us);
            MeasuredSize {
                bytes: b,
                cells: at
                    .iter()
                    .map(|c| MeasuredCell {
                        config: c.key.config.to_string(),
                        time_us: c.time_us,
                        samples: c.n,
                        spread: c.spread,
                        vs_default: t_def.map(|t| c.time_us / t),
                        is_decision: c.key.config == want_cfg,
                        source: c.source.to_string(),
                    })
                    .collect(),
            }
        })
        .collect();
    Some(Evidence {
        nodes,
        ranks,
        exact_shape: nodes as u64 == call.comm.nodes && ranks as u64 == call.comm.ranks,
        sizes,
        skipped,
    })
}

pub fn print_answer(a: &Answer, data_given: bool) {
    println!(
        "{} of {} on {} node{}, {} ranks (numPipeOps {}, regBuff {})",
        a.collective,
        fmt_bytes(a.bytes),
        a.nodes,
        if a.nodes == 1 { "" } else { "s" },
        a.ranks,
        a.num_pipe_ops,
        a.reg_buff
    );
    match a.setting.algorithm {
        "default" => {
            println!("decision: leave NCCL alone (NCCL's own algorithm, protocol and channels)")
        }
        _ => println!(
            "decision: algorithm {}, protocol {}, channels {}{}",
            a.setting.algorithm,
            a.setting.protocol,
            if a.setting.channels == 0 {
                "NCCL's choice".to_string()
            } else {
                a.setting.channels.to_string()
            },
            // Said only where the table sets one (getChunkSize answers it).
            match a.setting.chunk_bytes {
                0 => String::new(),
                b => format!(", chunk {b} bytes (getChunkSize, NCCL 2.30+)"),
            }
        ),
    }
    match a.basis {
        Some(b) if a.setting.algorithm != "default" => {
            println!(
                "expected: {} vs NCCL's default ({b})",
                fmt_gain(a.expected_gain as f64)
            )
        }
        Some(b) => println!("expected: same as NCCL's default ({b})"),
        None => println!("expected: same as NCCL's default (no rule applies)"),
    }
    println!("why: {}", a.why);
    match &a.tree {
        None => println!(
            "tree: the table stores no explain tree for {}",
            a.collective
        ),
        Some(t) => {
            println!("tree path ({} summary tree):", a.collective);
            for s in &t.steps {
                let f = Feature::ALL
                    .iter()
                    .find(|f| f.name() == s.feature)
                    .copied()
                    .unwrap_or(Feature::Log2Bytes);
                let v = match f {
                    Feature::Log2Bytes | Feature::Log2BytesPerRank => {
                        fmt_bytes(2f64.powf(s.value as f64).round() as u64)
                    }
                    _ => format!("{}", s.value),
                };
                println!(
                    "  {:<24} ({} = {v}): {}",
                    s.test,
                    feature_label(f),
                    if s.holds { "yes" } else { "no" }
                );
            }
            // The leaf speaks for a region; where its shapes differ, this
            // call's own ground and gain (the lines above) are named too.
            let here = a.basis.unwrap_or("no rule");
            let note = if !t.agrees {
                "  [the summary tree differs here; the table's rule above is what the plugin does]"
                    .to_string()
            } else if t.basis == here && t.expected_gain == t.expected_gain_max {
                String::new()
            } else if a.setting.algorithm == "default" {
                format!("  [this call: {here}]")
            } else {
                format!(
                    "  [this call: {}, {here}]",
                    fmt_gain(a.expected_gain as f64)
                )
            };
            println!("  leaf {}: {}{note}", t.leaf, t.then);
        }
    }
    println!("{}", explore::call_plan_text(&a.explore));
    match &a.evidence {
        None if data_given => println!("evidence: the data has no {} measurements", a.collective),
        None => println!(
            "evidence: the table stores decisions, not measurements; pass --data SWEEPS (the files it was compiled \
             from) to see the measured cells nearest to this call"
        ),
        Some(e) => {
            println!(
                "evidence: {}measurements at {} node{}, {} ranks{}:",
                if e.exact_shape { "" } else { "nearest " },
                e.nodes,
                if e.nodes == 1 { "" } else { "s" },
                e.ranks,
                if e.exact_shape { "" } else { " (the data has no cell of this exact shape)" }
            );
            for s in &e.sizes {
                println!("  {}:", fmt_bytes(s.bytes));
                for c in &s.cells {
                    println!(
                        "    {:<20} {:>11.2} us  {:>9}  n={:<3} {}{}",
                        c.config,
                        c.time_us,
                        c.vs_default.map(|v| format!("{:.3}x", v)).unwrap_or_else(|| "-".into()),
                        c.samples,
                        c.source,
                        if c.is_decision { "   <- decision" } else { "" }
                    );
                }
            }
            if e.skipped > 0 {
                println!("  ({} inputs could not be read and were skipped)", e.skipped);
            }
        }
    }
}

/// Checks a call's shape the way NCCL guarantees it.
pub fn make_call(
    coll: &str,
    bytes: &str,
    nodes: u64,
    ranks: u64,
    pipe_ops: i32,
    reg_buff: i32,
) -> anyhow::Result<Call> {
    let coll = parse_coll(coll)?;
    let bytes = parse_bytes(bytes).map_err(|e| anyhow::anyhow!("--bytes {e}"))?;
    if nodes == 0 {
        bail!("--nodes 0: a communicator spans at least one node");
    }
    if ranks < nodes {
        bail!("--ranks {ranks} is less than --nodes {nodes}: every node holds at least one rank (ranks = nodes x GPUs per node, e.g. --nodes 2 --ranks 16)");
    }
    Ok(Call {
        coll,
        bytes,
        comm: Comm::new(ranks, nodes),
        pipe_ops,
        reg_buff,
    })
}

/// The calls of the `--batch` file `path` holding `text`; the error names
/// the first bad line. Blank lines and `#` comments are skipped.
fn parse_batch(path: &std::path::Path, text: &str) -> anyhow::Result<Vec<Call>> {
    let mut calls = Vec::new();
    for (no, line) in text.lines().enumerate() {
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        calls.push(parse_batch_line(t).with_context(|| format!("{}:{}", path.display(), no + 1))?);
    }
    Ok(calls)
}

fn parse_batch_line(line: &str) -> anyhow::Result<Call> {
    let f: Vec<&str> = line.split(',').map(str::trim).collect();
    if !(4..=6).contains(&f.len()) {
        bail!(
            "expected `coll,bytes,nodes,ranks[,pipe_ops,reg_buff]`, found {} fields",
            f.len()
        );
    }
    let num = |s: &str, what: &str| {
        s.parse::<u64>()
            .with_context(|| format!("{what} `{s}` is not a whole number"))
    };
    let int = |s: &str, what: &str| {
        s.parse::<i32>()
            .with_context(|| format!("{what} `{s}` is not an integer"))
    };
    make_call(
        f[0],
        f[1],
        num(f[2], "nodes")?,
        num(f[3], "ranks")?,
        f.get(4)
            .map(|s| int(s, "pipe_ops"))
            .transpose()?
            .unwrap_or(1),
        f.get(5)
            .map(|s| int(s, "reg_buff"))
            .transpose()?
            .unwrap_or(0),
    )
}

pub fn run(a: QueryArgs) -> anyhow::Result<i32> {
    let bytes = read_table(&a.table)?;
    let table = open(&a.table, &bytes)?;
    let share = explore::check_share(a.explore.unwrap_or_else(|| explore::table_share(&table)))?;
    let traced::Data {
        sweep: data,
        traced,
    } = traced::read_data(&table, &a.table, &a.data, &a.ingest, a.foreign_traces)?;
    let with_evidence = |mut ans: Answer, call: &Call, d: Decision| {
        if let Some((cells, _, skipped)) = &data {
            ans.evidence = evidence(cells, call, d, *skipped);
        }
        if let Some(t) = &traced {
            ans.traced = t.near(
                Collective::from_coll(call.coll),
                call.bytes,
                call.comm.nodes,
                call.comm.ranks,
            );
        }
        ans
    };
    let decision_of = |t: &Table, c: &Call| {
        t.specialise(&c.comm)
            .decide(c.coll as u32, c.bytes, c.pipe_ops, c.reg_buff)
    };
    if let Some(batch) = &a.batch {
        // Every line is checked before the first answer is printed: a bad
        // line fails the command with nothing on stdout, never after half
        // the answers went to a consumer that cannot tell.
        let text = crate::input::read_to_string(batch, &crate::input::BATCH)?;
        let calls = parse_batch(batch, &text)?;
        let mut out = std::io::BufWriter::new(std::io::stdout().lock());
        let mut audits = TreeAudits::default();
        for call in &calls {
            let ans = with_evidence(
                answer_with(&table, call, &mut audits, share)?,
                call,
                decision_of(&table, call),
            );
            use std::io::Write;
            writeln!(out, "{}", crate::output::line(&ans)?)?;
        }
        return Ok(0);
    }
    let (Some(coll), Some(b), Some(nodes), Some(ranks)) = (&a.coll, &a.bytes, a.nodes, a.ranks)
    else {
        bail!("--coll, --bytes, --nodes and --ranks are required (or --batch FILE)");
    };
    let call = make_call(coll, b, nodes, ranks, a.pipe_ops, a.reg_buff)?;
    let ans = with_evidence(
        answer_with(&table, &call, &mut TreeAudits::default(), share)?,
        &call,
        decision_of(&table, &call),
    );
    if a.json {
        println!("{}", crate::output::pretty(&ans)?);
    } else {
        print_answer(&ans, data.is_some());
        if traced.is_some() {
            println!("{}", traced::text(ans.traced.as_ref(), ans.collective));
        }
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::testutil;
    use proptest::prelude::*;

    #[test]
    fn answers_with_provenance() {
        let bytes = testutil::sample();
        let t = Table::from_bytes(&bytes).unwrap();
        let a = answer(&t, &make_call("all_reduce", "4K", 2, 16, 1, 0).unwrap()).unwrap();
        assert_eq!(
            (a.setting.algorithm, a.setting.protocol, a.setting.channels),
            ("tree", "ll", 0)
        );
        assert_eq!(a.basis, Some("measured"));
        assert!((a.expected_gain - 1.3).abs() < 1e-6);
        assert_eq!(a.context.as_ref().unwrap().index, 0);
        assert!(a.tree.as_ref().unwrap().agrees);
        let a = answer(&t, &make_call("allreduce", "4MiB", 4, 32, 1, 0).unwrap()).unwrap();
        assert_eq!(
            (a.setting.algorithm, a.setting.protocol, a.setting.channels),
            ("ring", "ll128", 16)
        );
        let a = answer(&t, &make_call("allreduce", "4MiB", 8, 64, 1, 0).unwrap()).unwrap();
        assert_eq!(
            (a.setting.algorithm, a.setting.protocol, a.basis),
            ("default", "default", None)
        );
        assert!(
            a.why
                .contains("no allreduce context covers 8 nodes x 8 ranks/node"),
            "{}",
            a.why
        );
    }

    #[test]
    fn rejects_impossible_shapes() {
        assert!(make_call("allreduce", "4K", 0, 8, 1, 0).is_err());
        assert!(make_call("allreduce", "4K", 4, 2, 1, 0)
            .unwrap_err()
            .to_string()
            .contains("less than --nodes"));
        assert!(make_call("alltoall", "4K", 1, 8, 1, 0)
            .unwrap_err()
            .to_string()
            .contains("allreduce, allgather"));
    }

    /// The sizes at both sides of every rule boundary of the sample table
    /// (where an off-by-one in a rule's shown range would show).
    fn rule_edges() -> Vec<u64> {
        let b = testutil::sample();
        let t = Table::from_bytes(&b).unwrap();
        let mut edges = vec![0];
        for c in t.contexts() {
            for r in c.rules() {
                let hi = dyncc_tables::bucket_upper_bound(r.last_bucket);
                edges.extend([hi, hi.saturating_add(1)]);
            }
        }
        edges
    }

    proptest! {
        /// The provenance `answer` shows describes the call it answered:
        /// the context holds the call's shape, the rule's size range holds
        /// its size and names the decision given; no context means NCCL's
        /// choice. (The decision itself is the plugin's path by
        /// construction; what can drift is the context and rule picked to
        /// explain it, e.g. an off-by-one rule index or size bound.)
        #[test]
        fn answer_provenance_describes_the_call(
            coll in prop_oneof![Just(Coll::AllReduce as u32), 0u32..5],
            // Sizes spread over every power of two, and at the rules' edges.
            bytes in prop_oneof![
                (any::<u64>(), 0u32..64).prop_map(|(raw, shift)| raw >> shift),
                prop::sample::select(rule_edges()),
            ],
            nodes in 1u64..6,
            ppn in prop_oneof![Just(8u64), 1u64..10],
            pipe in -2i32..4,
            reg in -1i32..3,
        ) {
            let b = testutil::sample();
            let t = Table::from_bytes(&b).unwrap();
            let call = Call { coll: Coll::from_nccl(coll).unwrap(), bytes, comm: Comm::new(nodes * ppn, nodes), pipe_ops: pipe, reg_buff: reg };
            let a = answer(&t, &call).unwrap();
            match (&a.context, &a.rule) {
                (None, rule) => {
                    prop_assert!(rule.is_none());
                    prop_assert_eq!((a.setting.algorithm, a.setting.protocol, a.basis), ("default", "default", None));
                }
                (Some(c), rule) => {
                    let within = |v: u64, (lo, hi): (u32, u32)| (lo as u64..=hi as u64).contains(&v);
                    prop_assert!(within(nodes, c.nodes), "context nodes {:?} for {} nodes", c.nodes, nodes);
                    prop_assert!(within(ppn, c.ppn), "context ranks/node {:?} for {}", c.ppn, ppn);
                    // Every rule has a basis; only a call no rule covers has none.
                    prop_assert_eq!(rule.is_some(), a.basis.is_some());
                    if let Some(r) = rule {
                        prop_assert!(
                            (r.from_bytes..=r.to_bytes).contains(&bytes),
                            "rule {} covers {}..={} B, the call is {} B", r.index, r.from_bytes, r.to_bytes, bytes
                        );
                        prop_assert_eq!((r.setting.algorithm, r.setting.protocol, r.setting.channels), (a.setting.algorithm, a.setting.protocol, a.setting.channels));
                        // The rule speaks for all its sizes; it names the call's ground.
                        prop_assert!(a.basis.is_some_and(|b| r.basis.contains(b)), "{} vs {:?}", r.basis, a.basis);
                    } else {
                        prop_assert_eq!(a.setting.algorithm, "default");
                    }
                }
            }
        }
    }
}
