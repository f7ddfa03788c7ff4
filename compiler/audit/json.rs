//! A table's contexts and their size rules as the JSON reports write them
//! (`explain --json`, `query --json`), and as the text reports read them.

use dyncc_tables::{ContextView, Rule, Table};
use serde::Serialize;

use crate::audit::evidence::{rule_evidence, sweep_sizes, SweepSizes};
use crate::audit::names::SettingJson;

/// One size rule of a context.
#[derive(Clone, Debug, Serialize)]
pub struct RuleJson {
    pub index: u32,
    pub from_bytes: u64,
    pub to_bytes: u64,
    #[serde(flatten)]
    pub setting: SettingJson,
    pub expected_gain: f32,
    /// What the rule rests on, worded by [`crate::audit::evidence`]: a
    /// "measured" rule reaching past the sweep's sizes says so.
    pub basis: String,
}

/// One context.
#[derive(Clone, Debug, Serialize)]
pub struct ContextJson {
    pub index: u32,
    pub collective: &'static str,
    pub nodes: (u32, u32),
    pub ppn: (u32, u32),
    /// 0 = any numPipeOps.
    pub max_pipe_ops: u32,
    /// any, 0 or 1.
    pub reg_buff: &'static str,
    pub rules: Vec<RuleJson>,
}

/// Rule `index` of a context, given the last bucket of the rule before it.
fn rule_json(index: u32, prev_last: Option<u8>, r: &Rule, sweep: Option<&SweepSizes>) -> RuleJson {
    let first = prev_last.map_or(0, |p| p.saturating_add(1));
    let (lo, hi) = (
        dyncc_tables::bucket_lower_bound(first),
        dyncc_tables::bucket_upper_bound(r.last_bucket),
    );
    // Rules starting in the empty buckets 4..=7 really start at 4 bytes.
    let lo = if dyncc_tables::bucket_is_empty(first) {
        4
    } else {
        lo
    };
    RuleJson {
        index,
        from_bytes: lo,
        to_bytes: hi,
        setting: SettingJson::of(r.decision),
        expected_gain: r.gain,
        basis: rule_evidence(sweep, lo, hi, r.basis, r.gain as f64).word(),
    }
}

/// A context's regBuff gate as the reports write it.
fn reg_buff_name(r: dyncc_tables::RegBuff) -> &'static str {
    match r {
        dyncc_tables::RegBuff::Any => "any",
        dyncc_tables::RegBuff::Only0 => "0",
        dyncc_tables::RegBuff::Only1 => "1",
    }
}

/// A context of `table` and its rules.
pub fn context_json(table: &Table, c: &ContextView) -> ContextJson {
    let s = c.spec();
    // A context of one ranks per node reads its sweep's sizes (any node
    // count stands for the shape: the sizes are per ranks per node).
    let sweep = (s.ppn.0 == s.ppn.1)
        .then(|| sweep_sizes(table, s.coll, 1, s.ppn.0 as u64))
        .flatten();
    let mut prev = None;
    let rules = c
        .rules()
        .enumerate()
        .map(|(i, r)| {
            let j = rule_json(i as u32, prev, &r, sweep.as_ref());
            prev = Some(r.last_bucket);
            j
        })
        .collect();
    ContextJson {
        index: c.index(),
        collective: s.coll.name(),
        nodes: s.nodes,
        ppn: s.ppn,
        max_pipe_ops: s.max_pipe_ops,
        reg_buff: reg_buff_name(s.reg_buff),
        rules,
    }
}
