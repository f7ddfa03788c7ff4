//! What the compiler decides at one point, below both the deciding
//! ([`crate::decide`]) and the exploration plan ([`crate::explore`]): the
//! choice per size and why, the choices of one node count or range with
//! what a job may try there, and how a grid config becomes a table
//! decision.

use dyncc_tables::{Basis, Decision, Setting};
use serde::Serialize;

use crate::features::Grid;
use crate::record::Config;

/// Why a cell was left to NCCL, or that it was forced.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Why {
    /// Forced: a candidate wins by more than noise and margin.
    Forced,
    /// NCCL's own choice was measured best, or nothing beats it by the margin.
    DefaultBest,
    /// Something was faster, but not by more than the noise and margin.
    WithinNoise,
    /// The measurement says faster, the model fitted over its neighbours does not.
    ModelDisagrees,
    /// A count only traces measured: the jobs measured it faster, by less
    /// than would stand alone, and pooled with the sweep's reading of it
    /// there the gain no longer clears the margin and the noise.
    ReadingDisagrees,
    /// No default run at this cell: no baseline to claim a gain against.
    NoDefaultRun,
    /// Unmeasured node count: predicted faster, but not by more than the
    /// uncertainty of the prediction and the margin.
    Uncertain,
    /// Unmeasured node count, and too few measured multi-node counts to
    /// calibrate a prediction there on (two to read between or above them,
    /// `nodes::MIN_COUNTS_TO_EXTRAPOLATE_DOWN` to read below them).
    Uncalibrated,
    /// Only NCCL's default was measured: nothing to compare it with.
    OnlyDefaultMeasured,
    /// A node count only traces of jobs measured, at a size they did not,
    /// beyond `--node-reach` of the sweep's counts: nothing to read it off.
    BeyondReach,
    /// Nothing measured or read at this size here: a size only other node
    /// counts' traces measured. The size buckets pass it over.
    NothingHere,
    /// A count only traces measured: the sweep's reading forced a setting
    /// no job measured at this size, and what they measured of it at the
    /// sizes around (`nodes::borrow_across_sizes`) no longer puts it past
    /// the margin.
    TakenBack,
}

/// The choice at one (node count, measured size).
#[derive(Clone, Copy, Debug)]
pub struct Choice {
    /// Index into the grid's configs; 0 = leave NCCL alone.
    pub cfg: usize,
    pub basis: Basis,
    /// Expected speedup over the default (t_default / t_choice).
    pub gain: f64,
    pub why: Why,
}

impl Choice {
    pub(crate) fn default(why: Why, basis: Basis) -> Choice {
        Choice {
            cfg: 0,
            basis,
            gain: 1.0,
            why,
        }
    }
}

/// The choices at one node count (measured) or range of node counts
/// (decided at one point inside it).
#[derive(Clone, Debug)]
pub struct Anchor {
    /// The first node count of the range.
    pub nodes: u32,
    /// Inclusive range of node counts these choices serve.
    pub span: (u32, u32),
    /// Where an unmeasured range was decided (its geometric middle).
    pub at: f64,
    pub measured: bool,
    /// One per grid size.
    pub per_size: Vec<Choice>,
    /// Per grid size, what a job may try there (best first); empty where
    /// the sweep measured this count (nothing for jobs to find out).
    pub plan: Vec<Vec<Candidate>>,
}

/// One setting a job may try at one (node count, size).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Candidate {
    /// Index into the grid's configs; 0 = NCCL's own choice.
    pub cfg: usize,
    /// Predicted ln(t_answer / t_candidate).
    pub ln_gain: f64,
    /// Its uncertainty (sd of the log).
    pub sd: f64,
    /// Predicted extra time over the answer when tried (fraction),
    /// pessimistic and floored: what the plugin's draw is weighed by.
    pub cost: f64,
    /// What it was ranked by: `ln_gain + EXPLORE_Z * sd`.
    pub score: f64,
}

/// Converts a grid config into a table decision, its chunk with it (a
/// config's chunk is on its protocol's grain, as ingest records it; one
/// that is not cannot be forced as measured, so it is left to NCCL).
pub fn to_decision(cfg: &Config) -> Decision {
    match (cfg.algo, cfg.proto) {
        (Some(algo), Some(proto)) => Setting::new(algo, proto)
            .with_channels(
                cfg.channels
                    .map(|c| c.min(dyncc_tables::MAX_CHANNELS as u32) as u8)
                    .unwrap_or(0),
            )
            .with_chunk(cfg.chunk)
            .map_or(Decision::Default, Decision::Force),
        _ => Decision::Default,
    }
}

/// The decided size (an index into `own`, the anchor's decided sizes in
/// order, never empty) nearest to `bytes` in log2.
pub(crate) fn nearest(grid: &Grid, own: &[usize], bytes: u64) -> usize {
    let log = |n: u64| (n.max(1) as f64).log2();
    match own.binary_search_by(|&si| grid.sizes[si].cmp(&bytes)) {
        Ok(k) => k,
        Err(0) => 0,
        Err(k) if k >= own.len() => own.len() - 1,
        Err(k) => {
            let (x, below, above) = (
                log(bytes),
                log(grid.sizes[own[k - 1]]),
                log(grid.sizes[own[k]]),
            );
            if x - below <= above - x {
                k - 1
            } else {
                k
            }
        }
    }
}

/// The grid size index whose decision a bucket starting at `bytes` takes:
/// the nearest of the anchor's decided sizes `own` (never empty).
pub fn nearest_size(grid: &Grid, own: &[usize], bytes: u64) -> usize {
    own[nearest(grid, own, bytes)]
}
