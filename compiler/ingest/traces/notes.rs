//! What compile's report says of the traces: the points they decided
//! ([`TracedPoint`]), the settings whose evidence fell short or disagrees
//! with the sweep ([`Finding`]), and the figures of the reading itself
//! ([`TraceCounts`]).

use std::collections::BTreeMap;

use serde::Serialize;

use super::evidence::{counts, Evidence, Verdict};
use super::files::Provenance;
use super::points::PointKey;
use crate::record::Config;

/// What the deployed table did at a point, from the traces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Deployed {
    /// It left the calls to NCCL.
    Nccl,
    /// It forced this configuration.
    Forced(Config),
}

/// One point jobs measured a gain at, as compiled.
#[derive(Clone, Debug, Serialize)]
pub struct TracedPoint {
    pub collective: &'static str,
    pub nodes: u32,
    pub ranks: u32,
    pub bytes: u64,
    /// Whether the sweep measured this point too (the traces decide it now).
    pub replaced_sweep: bool,
    /// What the table that ran in the jobs did here.
    #[serde(skip)]
    pub deployed: Deployed,
    pub deployed_name: String,
    /// NCCL's own choice here (what it ran most often).
    pub nccl_choice: Option<String>,
    /// Per setting that met the rule: its gain over NCCL's choice and the
    /// counts behind it.
    pub settings: Vec<TracedGain>,
    /// NCCL version the measurements come from.
    pub nccl_version: u32,
    /// The communicators behind the point, and the trace files that hold
    /// them: what moved the table, for a reviewer to see before shipping.
    pub communicators: usize,
    pub files: Vec<String>,
    #[serde(skip)]
    pub key: PointKey,
}

/// A setting's gain at a traced point.
#[derive(Clone, Debug, Serialize)]
pub struct TracedGain {
    pub config: String,
    /// t(NCCL's choice) / t(setting), from the same jobs.
    pub gain: f64,
    /// Calls of the setting.
    pub count: u64,
    #[serde(flatten)]
    pub evidence: Evidence,
    pub verdict: Verdict,
}

impl TracedGain {
    /// `tree/ll +12.0 % +-2.1 %, 10 vs 490 calls, 1 communicator (paired)`.
    pub fn describe(&self) -> String {
        format!(
            "{} {:+.1} %{}",
            self.config,
            (self.gain - 1.0) * 100.0,
            counts(&self.evidence)
        )
    }
}

/// A setting jobs measured at a point whose evidence did not meet the rule
/// (it decides nothing), or where the sweep and the jobs disagree.
#[derive(Clone, Debug, Serialize)]
pub struct Finding {
    pub collective: &'static str,
    pub nodes: u32,
    pub ranks: u32,
    pub bytes: u64,
    pub config: String,
    /// The jobs' gain (t(NCCL's choice) / t(setting)) and counts.
    pub gain: f64,
    #[serde(flatten)]
    pub evidence: Evidence,
    pub verdict: Verdict,
    /// The sweep's gain at the point and its runs, where it measured it.
    pub sweep_gain: Option<f64>,
    pub sweep_runs: Option<u32>,
    /// Who decides the point: `jobs` or `sweep` (or `nccl` where neither
    /// measured enough).
    pub decides: &'static str,
}

impl Finding {
    /// One line for the report.
    pub fn describe(&self) -> String {
        let sweep = match (self.sweep_gain, self.sweep_runs) {
            (Some(g), Some(n)) => format!(
                "; the sweep measured {:+.1} % ({n} run{})",
                (g - 1.0) * 100.0,
                if n == 1 { "" } else { "s" }
            ),
            _ => String::new(),
        };
        format!(
            "{} {} nodes x {} ranks {} {}: jobs {:+.1} %{} ({}){sweep}: the {} decide{}",
            self.collective,
            self.nodes,
            self.ranks,
            crate::units::fmt_bytes(self.bytes),
            self.config,
            (self.gain - 1.0) * 100.0,
            counts(&self.evidence),
            self.verdict.describe(),
            self.decides,
            if self.decides == "jobs" { "" } else { "s" }
        )
    }
}

/// What reading the traces found, before any decision (the report's
/// figures of the traces themselves).
#[derive(Clone, Debug, Default, Serialize)]
pub struct TraceCounts {
    pub files: usize,
    pub communicators: usize,
    /// Communicators recorded by more than one rank: counted once.
    pub duplicate_ranks: usize,
    pub collectives: u64,
    /// Collectives no tuner answer could be linked to (not used).
    pub unknown: u64,
    /// Points where only one side ran in every communicator and too few
    /// communicators ran to pair across them: nothing to compare.
    pub one_sided_shapes: usize,
    /// Points set aside because a newer NCCL measured them (the sweep's or
    /// other traces').
    pub older_nccl_points: usize,
    /// Drift between NCCL versions, described.
    pub drift: Vec<String>,
    /// Points of communicators whose ranks are not a multiple of their
    /// nodes (not used: a table decides per ranks per node), per shape:
    /// how many points, and a file that holds one.
    pub uneven: BTreeMap<String, (usize, String)>,
    /// Where the traces came from, against the sweep's platform.
    pub provenance: Provenance,
    /// Calls the plugin forced that NCCL ran otherwise ("answered X, ran
    /// Y"), per reason: how many, and the files of the jobs where NCCL
    /// overrode the tuner (each named once). Evidence for neither side.
    pub overridden: BTreeMap<&'static str, (u64, std::collections::BTreeSet<String>)>,
    /// Settings jobs ran that traces may not have forced (the sweep never
    /// measured them for the collective at those ranks per node, or NCCL
    /// cannot run them there), per setting: calls, and a file that holds
    /// some. Counted, never forced: traces never name candidates.
    pub not_candidates: BTreeMap<String, (u64, String)>,
    /// Trace files of an NCCL newer than the sweep's, per version: how
    /// many, and one of them. Named, not preferred: a version decides only
    /// with the communicators any trace needs.
    pub newer_than_sweep: BTreeMap<String, (usize, String)>,
    /// Settings measured whose evidence fell short of the rule (too few
    /// calls or communicators, or within the noise): they decide nothing.
    pub short_of_evidence: Vec<Finding>,
    /// Points the sweep measured where the jobs' gain and the sweep's
    /// disagree (one past the margin, the other not), whoever decides.
    pub disagree_with_sweep: Vec<Finding>,
}

/// What the traces held and the points they measured.
#[derive(Clone, Debug, Default, Serialize)]
pub struct TraceNotes {
    #[serde(flatten)]
    pub read: TraceCounts,
    pub points: Vec<TracedPoint>,
}
