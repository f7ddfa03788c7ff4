//! A table's exploration plan (format 1.1 PLAN, `dyncc_tables::PlanCandidate`)
//! as the audit commands show it: how many cells and candidates
//! (`verify`), each context's cells (`explain`), and for one call the
//! candidates of the cell that serves it with the chance a communicator
//! tries each (`query`).
//!
//! The chance follows the runtime's rule (runtime/src/explore.rs, "The
//! table's plan"): per cell a communicator picks one candidate, rank r of
//! n with weight `n - r` (so `(n - r) / (n(n+1)/2)`), and tries it with
//! `p = min(1/2, F / cost_bound)`, F being the table's share; a picked
//! candidate runs only where it changes the call (NCCL's choice where the
//! table forces a setting, a setting wherever it differs from the table's
//! answer, in the context's `numPipeOps` state). The pick is the tables
//! crate's (`plan_pick_share`, which the plugin's draw also reads); the
//! compiler does not link the runtime, so `min(1/2, F / cost)` and the
//! share's limits are written here again, and a test through the built
//! plugin pins them (`explore_c::query_chances_are_what_the_plugin_draws`).

use std::collections::BTreeMap;

use anyhow::bail;
use dyncc_tables::{
    pipe_ops_allowed, Coll, Comm, ContextView, Decision, PlanCandidate, RegBuff, Table,
};
use serde::Serialize;

use crate::audit::names::SettingJson;
use crate::audit::text::{fmt_decision, fmt_sizes, fmt_span};

/// The share `dyncc compile` writes into a table when `--explore` is not
/// given, and the plugin uses for a table carrying none (runtime
/// `DEFAULT_SHARE`).
pub const DEFAULT_SHARE: f64 = 0.02;

/// The largest share the plugin accepts (runtime `MAX_SHARE`).
pub const MAX_SHARE: f64 = 0.1;

/// The smallest (runtime `Share::MIN`, `2^-32`: one step of a cell's draw).
pub const MIN_SHARE: f64 = 1.0 / 4_294_967_296.0;

/// The share `table` carries (`explore_share`), [`DEFAULT_SHARE`] where it
/// carries none, as the plugin reads it; a value that is not a number is
/// NaN, which [`check_share`] refuses.
pub fn table_share(table: &Table) -> f64 {
    table
        .meta(dyncc_tables::META_EXPLORE)
        .map_or(DEFAULT_SHARE, |v| v.trim().parse().unwrap_or(f64::NAN))
}

/// Checks a share F as the plugin checks the table's `explore_share`.
pub fn check_share(f: f64) -> anyhow::Result<f64> {
    if !(f.is_finite() && (MIN_SHARE..=MAX_SHARE).contains(&f)) {
        bail!(
            "--explore {f}: expected an exploration share between 2^-32 and {MAX_SHARE}, \
             e.g. {DEFAULT_SHARE}"
        );
    }
    Ok(f)
}

/// Plan size of one collective (or a whole table).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PlanCounts {
    pub cells: u32,
    pub candidates: u32,
}

/// One candidate of a cell.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CandidateJson {
    /// 0 = picked most often.
    pub rank: u8,
    /// `tree/ll128`, `ring/simple/16ch`, or `NCCL's choice`.
    pub setting: String,
    /// Its algorithm, protocol and channels.
    #[serde(flatten)]
    pub knobs: SettingJson,
    /// Predicted gain over the table's answer, as a fraction (0.05 = 5 %
    /// faster).
    pub gain: f32,
    /// Spread of that prediction (fraction).
    pub spread: f32,
    /// Predicted extra time of trying it, as a fraction of the call's
    /// (bounded by the compiler).
    pub cost_bound: f32,
}

impl CandidateJson {
    fn new(c: &PlanCandidate) -> CandidateJson {
        CandidateJson {
            rank: c.rank,
            setting: fmt_decision(c.decision),
            knobs: SettingJson::of(c.decision),
            gain: c.gain,
            spread: c.spread,
            cost_bound: c.cost_bound,
        }
    }
}

/// One cell: the node counts and sizes it serves, its ranked candidates.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CellJson {
    pub context: u32,
    /// Node counts served: its first up to the next its context's plan
    /// lists, or the context's last (inclusive).
    pub nodes: (u32, u32),
    /// Size buckets served (inclusive).
    pub buckets: (u8, u8),
    pub from_bytes: u64,
    pub to_bytes: u64,
    pub candidates: Vec<CandidateJson>,
}

/// Inclusive byte bounds of a bucket run (the empty buckets 4..=7 start
/// at 4 bytes, as the rules' ranges do).
fn run_bytes(first: u8, last: u8) -> (u64, u64) {
    let lo = if dyncc_tables::bucket_is_empty(first) {
        4
    } else {
        dyncc_tables::bucket_lower_bound(first)
    };
    (lo, dyncc_tables::bucket_upper_bound(last))
}

/// `64 KiB .. <16 MiB`.
fn cell_sizes(c: &CellJson) -> String {
    fmt_sizes(c.from_bytes, c.to_bytes)
}

/// The last node count a cell listed at (`context`, `nodes`) serves: one
/// below the next node count its context's plan lists, else the
/// context's last.
fn served_to(table: &Table, context: u32, nodes: u32) -> u32 {
    table
        .plan_next_nodes(context, nodes)
        .map(|n| n - 1)
        .or_else(|| table.context(context).map(|c| c.spec().nodes.1))
        .unwrap_or(nodes)
}

/// The cell whose candidates (rank order) are `cands`.
fn cell_json(table: &Table, cands: &[PlanCandidate]) -> Option<CellJson> {
    let c = cands.first()?;
    let (from_bytes, to_bytes) = run_bytes(c.bucket, c.last_bucket);
    Some(CellJson {
        context: c.context,
        nodes: (c.nodes, served_to(table, c.context, c.nodes)),
        buckets: (c.bucket, c.last_bucket),
        from_bytes,
        to_bytes,
        candidates: cands.iter().map(CandidateJson::new).collect(),
    })
}

/// Every cell of the plan, in file order (context, nodes, bucket).
pub fn cells(table: &Table) -> Vec<CellJson> {
    let all: Vec<PlanCandidate> = table.plan().collect();
    all.chunk_by(|a, b| (a.context, a.nodes, a.bucket) == (b.context, b.nodes, b.bucket))
        .filter_map(|cell| cell_json(table, cell))
        .collect()
}

/// Cells and candidates per collective (only collectives with a plan).
pub fn counts(table: &Table) -> BTreeMap<&'static str, PlanCounts> {
    let mut out: BTreeMap<&'static str, PlanCounts> = BTreeMap::new();
    for c in cells(table) {
        let Some(ctx) = table.context(c.context) else {
            continue;
        };
        let e = out.entry(ctx.spec().coll.name()).or_default();
        e.cells += 1;
        e.candidates += c.candidates.len() as u32;
    }
    out
}

/// One context's plan, summed up.
#[derive(Clone, Debug, Serialize)]
pub struct ContextPlan {
    pub context: u32,
    pub collective: &'static str,
    pub cells: u32,
    pub candidates: u32,
    /// Node counts served, per listed node count (`2-7`, `8-16`).
    pub nodes: Vec<String>,
    /// Sizes served, adjacent bucket runs merged (`64 KiB .. <1 GiB`).
    pub sizes: Vec<String>,
    /// The cells themselves.
    pub plan: Vec<CellJson>,
}

impl ContextPlan {
    /// `3 cells, 6 candidates at nodes 2-7, 8-16 over 64 KiB .. <1 GiB`.
    pub fn summary(&self) -> String {
        format!(
            "{} cell{}, {} candidate{} at nodes {} over {}",
            self.cells,
            if self.cells == 1 { "" } else { "s" },
            self.candidates,
            if self.candidates == 1 { "" } else { "s" },
            self.nodes.join(", "),
            self.sizes.join(", ")
        )
    }
}

/// The plan of every context of `colls` that has one, in context order.
pub fn by_context(table: &Table, colls: &[Coll]) -> Vec<ContextPlan> {
    let all = cells(table);
    let mut out = Vec::new();
    for ctx in table.contexts().filter(|c| colls.contains(&c.spec().coll)) {
        let mine: Vec<CellJson> = all
            .iter()
            .filter(|c| c.context == ctx.index())
            .cloned()
            .collect();
        if mine.is_empty() {
            continue;
        }
        let mut nodes: Vec<String> = Vec::new();
        for c in &mine {
            let s = fmt_span(c.nodes.0, c.nodes.1);
            if !nodes.contains(&s) {
                nodes.push(s);
            }
        }
        let mut runs: Vec<(u8, u8)> = mine.iter().map(|c| c.buckets).collect();
        runs.sort_unstable();
        let mut merged: Vec<(u8, u8)> = Vec::new();
        for (a, b) in runs {
            match merged.last_mut() {
                Some(m) if a as u16 <= m.1 as u16 + 1 => m.1 = m.1.max(b),
                _ => merged.push((a, b)),
            }
        }
        out.push(ContextPlan {
            context: ctx.index(),
            collective: ctx.spec().coll.name(),
            cells: mine.len() as u32,
            candidates: mine.iter().map(|c| c.candidates.len() as u32).sum(),
            nodes,
            sizes: merged
                .into_iter()
                .map(|(a, b)| {
                    let (lo, hi) = run_bytes(a, b);
                    fmt_sizes(lo, hi)
                })
                .collect(),
            plan: mine,
        });
    }
    out
}

/// One cell's line: `nodes 2-7  64 KiB .. <16 MiB  NCCL's choice (-6.2 %),
/// tree/ll128 (+3.1 %)`.
pub fn cell_line(c: &CellJson) -> String {
    let cands: Vec<String> = c
        .candidates
        .iter()
        .map(|x| format!("{} ({})", x.setting, fmt_fraction(x.gain)))
        .collect();
    format!(
        "nodes {:<8} {:<24} {}",
        fmt_span(c.nodes.0, c.nodes.1),
        cell_sizes(c),
        cands.join(", ")
    )
}

/// A signed fraction as a percentage: `+3.1 %`.
pub fn fmt_fraction(f: f32) -> String {
    format!("{:+.1} %", f as f64 * 100.0)
}

/// The share of communicators that pick rank `rank` of `n` candidates
/// (the plugin's rule, `dyncc_tables::plan_pick`).
pub fn pick_chance(rank: usize, n: usize) -> f64 {
    dyncc_tables::plan_pick_share(rank, n)
}

/// The chance a picked candidate of cost bound `cost` is drawn at share
/// `share` (runtime `Share::chance`: `min(MAX_EXPLORE_CHANCE, F / cost)`,
/// so half the communicators at most leave the table's answer).
pub fn try_chance(share: f64, cost: f32) -> f64 {
    (share / cost as f64).min(dyncc_tables::MAX_EXPLORE_CHANCE)
}

/// One candidate of the cell serving a call, with its chances.
#[derive(Clone, Debug, Serialize)]
pub struct CallCandidate {
    #[serde(flatten)]
    pub candidate: CandidateJson,
    /// Share of communicators that pick it at this cell.
    pub pick: f64,
    /// Chance a communicator that picked it tries it: `min(1/2, F / cost)`.
    pub draw: f64,
    /// Chance a communicator runs it on this call: `pick x draw`, 0 where
    /// it would not change the call.
    pub chance: f64,
    /// Why it never runs on this call (it is the table's answer, or the
    /// call is outside the context's `numPipeOps` gate); null when it can.
    pub never: Option<String>,
}

/// What a job exploring at `share` may try on one call.
#[derive(Clone, Debug, Serialize)]
pub struct CallPlan {
    /// The share F the chances are for.
    pub share: f64,
    /// Whether the table has a plan at all (format 1.1).
    pub table_has_plan: bool,
    /// The plan cell serving the call, when one does.
    pub cell: Option<CellJson>,
    /// Its candidates, in rank order, with their chances.
    pub candidates: Vec<CallCandidate>,
    /// Chance a communicator runs some candidate on this call.
    pub explore_chance: f64,
    /// Expected extra time of this call over the communicators, as a
    /// fraction (`sum pick x draw x cost`, at most F).
    pub expected_cost: f64,
    /// The plan's answer in words.
    pub note: String,
}

/// Where the runtime's exploration is documented, for the notes.
const DERIVED: &str =
    "the plugin derives what it may try from the table's rule and the neighbouring \
                       contexts (runtime/README.md, \"Exploration\")";

/// One call as the plan is read for it (NCCL's getCollInfo arguments
/// that matter: `regBuff` never does).
#[derive(Clone, Copy, Debug)]
pub struct PlanCall {
    pub coll: Coll,
    pub bytes: u64,
    pub nodes: u64,
    pub ranks: u64,
    pub pipe_ops: i32,
}

/// The plan cell serving `call`, which the table answers `decided`, read
/// as the plugin reads it: under the collective's own context (the first
/// matching), never one gated on `regBuff`; chances at share `share`.
pub fn for_call(table: &Table, call: &PlanCall, decided: Decision, share: f64) -> CallPlan {
    let PlanCall {
        coll,
        bytes,
        nodes,
        ranks,
        pipe_ops,
    } = *call;
    let mut out = CallPlan {
        share,
        table_has_plan: table.has_plan(),
        cell: None,
        candidates: Vec::new(),
        explore_chance: 0.0,
        expected_cost: 0.0,
        note: String::new(),
    };
    if !table.has_plan() {
        out.note = format!("this table has no exploration plan (format 1.0): {DERIVED}");
        return out;
    }
    let own: Option<ContextView> = table
        .specialise(&Comm::new(ranks, nodes))
        .context(coll)
        .and_then(|i| table.context(i));
    let Some(own) = own else {
        out.note = format!(
            "the plan has no cell for this call: no {} context covers the communicator, so {DERIVED}",
            coll.name()
        );
        return out;
    };
    if own.spec().reg_buff != RegBuff::Any {
        out.note = format!(
            "context #{} is gated on regBuff, which NCCL computes per rank: the plugin never explores under it",
            own.index()
        );
        return out;
    }
    let bucket = dyncc_tables::size_bucket(bytes);
    let cell = u32::try_from(nodes)
        .ok()
        .map(|n| table.plan_cell(own.index(), n, bucket));
    let Some(cell) = cell.filter(|c| !c.is_empty()) else {
        out.note = format!(
            "the plan has no cell for this call (context #{}, {nodes} nodes, this size): {DERIVED}",
            own.index()
        );
        return out;
    };
    let cands: Vec<PlanCandidate> = (0..cell.len()).filter_map(|r| cell.get(r)).collect();
    let Some(json) = cell_json(table, &cands) else {
        return out;
    };
    let n = json.candidates.len();
    let max_pipe_ops = own.spec().max_pipe_ops;
    for (r, (c, cj)) in cands.iter().zip(&json.candidates).enumerate() {
        let never = match c.decision {
            Decision::Default if !decided.is_forced() => {
                Some("the table already leaves this call to NCCL".to_string())
            }
            Decision::Default => None,
            d if d == decided => Some("it is the table's answer".to_string()),
            _ if !pipe_ops_allowed(max_pipe_ops, pipe_ops) => Some(format!(
                "tried only at numPipeOps <= {max_pipe_ops}, this call has {pipe_ops}"
            )),
            _ => None,
        };
        let (pick, draw) = (pick_chance(r, n), try_chance(share, c.cost_bound));
        let chance = if never.is_some() { 0.0 } else { pick * draw };
        out.explore_chance += chance;
        out.expected_cost += chance * c.cost_bound as f64;
        out.candidates.push(CallCandidate {
            candidate: cj.clone(),
            pick,
            draw,
            chance,
            never,
        });
    }
    out.note = format!(
        "plan cell of context #{} (nodes {}, {}): a communicator picks one candidate by rank and tries it \
         with p = min(1/2, F / cost bound)",
        json.context,
        fmt_span(json.nodes.0, json.nodes.1),
        cell_sizes(&json)
    );
    out.cell = Some(json);
    out
}

/// `12.5 %`.
fn pct(f: f64) -> String {
    format!("{:.1} %", f * 100.0)
}

/// The lines `query` prints for a [`CallPlan`] (no trailing newline).
pub fn call_plan_text(p: &CallPlan) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let Some(_) = &p.cell else {
        let _ = write!(s, "explore: {}", p.note);
        return s;
    };
    let _ = writeln!(s, "explore at share {}: {}", p.share, p.note);
    let w = p
        .candidates
        .iter()
        .map(|c| c.candidate.setting.len())
        .max()
        .unwrap_or(0)
        .max("setting".len());
    let _ = writeln!(
        s,
        "  rank  {:<w$}  {:>13}  {:>7}  {:>10}  {:>6}  tried by",
        "setting", "gain vs table", "spread", "cost bound", "picked"
    );
    for c in &p.candidates {
        let j = &c.candidate;
        let tried = match &c.never {
            Some(why) => format!("never: {why}"),
            None => format!("{} of communicators", pct(c.chance)),
        };
        let _ = writeln!(
            s,
            "  {:<4}  {:<w$}  {:>13}  {:>7}  {:>10}  {:>6}  {tried}",
            j.rank,
            j.setting,
            fmt_fraction(j.gain),
            format!("±{}", pct(j.spread as f64)),
            pct(j.cost_bound as f64),
            pct(c.pick),
        );
    }
    let _ = write!(
        s,
        "  a communicator explores this call with chance {}; expected extra time {} of its time (at most F = {})",
        pct(p.explore_chance),
        pct(p.expected_cost),
        pct(p.share)
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::testutil::{self, force};
    use dyncc_tables::{Algo, Proto};

    /// The runtime's rule, in worked numbers: of 3 candidates the first
    /// is picked by 3/6, the second 2/6, the third 1/6; F / cost caps at 1.
    #[test]
    fn chances_follow_the_runtime_rule() {
        assert_eq!(pick_chance(0, 1), 1.0);
        assert_eq!(
            [0, 1, 2, 3].map(|r| pick_chance(r, 3)),
            [0.5, 2.0 / 6.0, 1.0 / 6.0, 0.0]
        );
        assert_eq!(pick_chance(3, 4), 0.1);
        assert_eq!(try_chance(0.02, 0.25), 0.08);
        assert_eq!(try_chance(0.1, 0.05), 0.5);
        assert!(check_share(0.02).is_ok());
        assert!(check_share(0.2).is_err());
        assert!(check_share(0.0).is_err());
        assert!(check_share(f64::NAN).is_err());
    }

    /// The sample table plus a plan: at nodes 2 of context 0 (2 nodes x 8,
    /// tree/ll up to 64 KiB) NCCL's choice then ring/ll; at context 2
    /// (4 nodes) one cell.
    fn with_plan() -> Vec<u8> {
        let mut b = dyncc_tables::TableBuilder::new();
        testutil::sample_contexts(&mut b);
        let c = |context, nodes, bucket, last_bucket, rank, decision, cost_bound| PlanCandidate {
            context,
            nodes,
            bucket,
            last_bucket,
            rank,
            decision,
            gain: 0.0625,
            spread: 0.125,
            cost_bound,
        };
        let ring_ll = force(Algo::Ring, Proto::LL, 0);
        b.plan(&[
            c(0, 2, 10, 20, 0, Decision::Default, 0.25),
            c(0, 2, 10, 20, 1, ring_ll, 0.125),
            c(0, 2, 30, 31, 0, ring_ll, 0.5),
        ]);
        b.build().unwrap()
    }

    #[test]
    fn cells_serve_node_counts_and_sizes() {
        let bytes = with_plan();
        let t = Table::from_bytes(&bytes).unwrap();
        let all = cells(&t);
        assert_eq!(all.len(), 2);
        // Context 0 is exactly 2 nodes: the cell serves 2 only.
        assert_eq!((all[0].nodes, all[0].buckets), ((2, 2), (10, 20)));
        assert_eq!(all[0].from_bytes, dyncc_tables::bucket_lower_bound(10));
        assert_eq!(all[0].candidates.len(), 2);
        assert_eq!(all[0].candidates[0].setting, "NCCL's choice");
        assert_eq!(
            counts(&t)["allreduce"],
            PlanCounts {
                cells: 2,
                candidates: 3
            }
        );
        let ctx = by_context(&t, &Coll::ALL);
        assert_eq!(ctx.len(), 1);
        assert_eq!(ctx[0].sizes.len(), 2, "{:?}", ctx[0].sizes);
        assert!(
            ctx[0]
                .summary()
                .starts_with("2 cells, 3 candidates at nodes 2 over "),
            "{}",
            ctx[0].summary()
        );
        let none = testutil::sample();
        let t = Table::from_bytes(&none).unwrap();
        assert!(cells(&t).is_empty() && counts(&t).is_empty());
        assert!(by_context(&t, &Coll::ALL).is_empty());
    }

    fn at(bytes: u64, nodes: u64, ranks: u64) -> PlanCall {
        PlanCall {
            coll: Coll::AllReduce,
            bytes,
            nodes,
            ranks,
            pipe_ops: 1,
        }
    }

    /// At a size the table forces tree/ll: NCCL's choice is picked by 2/3
    /// and tried with 0.02 / 0.25, ring/ll by 1/3 with 0.02 / 0.125; where
    /// the table forces ring/ll itself, ring/ll never runs.
    #[test]
    fn a_call_gets_its_cells_candidates_and_chances() {
        let bytes = with_plan();
        let t = Table::from_bytes(&bytes).unwrap();
        let b = dyncc_tables::bucket_lower_bound(12);
        let tree_ll = force(Algo::Tree, Proto::LL, 0);
        let p = for_call(&t, &at(b, 2, 16), tree_ll, 0.02);
        assert!(p.table_has_plan && p.cell.is_some(), "{}", p.note);
        let ch: Vec<f64> = p.candidates.iter().map(|c| c.chance).collect();
        assert!((ch[0] - 2.0 / 3.0 * 0.08).abs() < 1e-12, "{ch:?}");
        assert!((ch[1] - 1.0 / 3.0 * 0.16).abs() < 1e-12, "{ch:?}");
        assert!((p.expected_cost - 0.02).abs() < 1e-9, "{}", p.expected_cost);
        let text = call_plan_text(&p);
        assert!(
            text.contains("NCCL's choice") && text.contains("5.3 %"),
            "{text}"
        );
        // The table leaves NCCL alone: NCCL's choice never runs.
        let p = for_call(&t, &at(b, 2, 16), Decision::Default, 0.02);
        assert!(p.candidates[0].never.is_some() && p.candidates[0].chance == 0.0);
        assert!(p.candidates[1].never.is_none());
        let ring_ll = force(Algo::Ring, Proto::LL, 0);
        let p = for_call(&t, &at(b, 2, 16), ring_ll, 0.02);
        assert_eq!(
            p.candidates[1].never.as_deref(),
            Some("it is the table's answer")
        );
        // Outside the runs, another shape, no plan at all.
        let off = dyncc_tables::bucket_lower_bound(25);
        let p = for_call(&t, &at(off, 2, 16), tree_ll, 0.02);
        assert!(p.cell.is_none() && p.note.contains("no cell"), "{}", p.note);
        let p = for_call(&t, &at(b, 4, 32), tree_ll, 0.02);
        assert!(p.cell.is_none(), "{}", p.note);
        let none = testutil::sample();
        let t = Table::from_bytes(&none).unwrap();
        let p = for_call(&t, &at(b, 2, 16), tree_ll, 0.02);
        assert!(!p.table_has_plan && p.note.contains("no exploration plan"));
        assert!(call_plan_text(&p).contains("neighbouring contexts"));
    }
}
