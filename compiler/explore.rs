//! Explore: the exploration plan a table carries (format 1.1 PLAN), so that
//! jobs measure what the sweep could not tell the compiler.
//!
//! Where an answer stands on no measurement at its node count (read
//! between or beyond the sweep's counts, or a count only traces measured,
//! at a size or setting they did not), [`candidates`] lists what a job may
//! try instead, ranked by the reading's gain over the answer plus
//! [`EXPLORE_Z`] sds of its uncertainty (optimism under uncertainty: a
//! setting that may well win is tried before one sure to lose):
//!
//! * elsewhere, every setting of the grid (measured by the sweep for this collective
//!   and ranks per node) whose optimistic gain over the answer clears the
//!   margin, not yet measured at this count and size, and not what NCCL
//!   runs there on its own where jobs traced that (a no-op to force);
//! * NCCL's own choice, alone, wherever the answer forces a setting the
//!   count has not measured against it, whatever the predicted gain: a
//!   confident guess is checked too (its cost bound makes it rare), and
//!   the settings wait for it, since their gains are read against it.
//!
//! Each candidate carries a cost bound, the extra time it is predicted to
//! take over the answer half an sd to the pessimistic side of its reading
//! ([`COST_Z`]; NCCL's own choice at the force's predicted gain, since a force
//! chosen for its reading errs on the optimistic side), floored at
//! [`MIN_COST`]; the plugin tries it with
//! probability `min(1/2, F / bound)` (half the communicators at least keep
//! the answer, the baseline a gain is read against), so the expected extra time per cell is
//! at most F. A setting whose bound passes [`MAX_COST`] is not listed.
//!
//! Traces retire and confirm: a setting measured at a count is no longer
//! a candidate there (its measurement decides), so each round lists the
//! next ones and a cell whose settings are all measured lists none. They
//! also steer: at a count they measured, every reading (the answer's too)
//! is read off the counts around where jobs measured that setting at that
//! size, then corrected by what they measured of it at the sizes around
//! here ([`crate::nodes::borrow_across_sizes`]), so a setting found winning
//! at one size or count is tried first, and cheaply, at the next.
//! [`runs`] spreads the per-size lists over the size buckets as
//! [`crate::decide::buckets`] spreads the choices.

use dyncc_tables::{bucket_lower_bound, size_bucket, Decision, MAX_PLAN_CANDIDATES};

pub use crate::choice::Candidate;
use crate::choice::{nearest_size, to_decision, Anchor, Choice, Why};
use crate::features::Grid;
use crate::nodes::{NodeModel, Reading};

/// Most candidates a cell lists (the format's limit).
pub const MAX_CANDIDATES: usize = MAX_PLAN_CANDIDATES as usize;

/// Uncertainty sds added to a reading's gain when ranking what to try.
pub const EXPLORE_Z: f64 = 1.0;

/// Uncertainty sds a cost bound allows for. The plugin draws a candidate
/// with chance F / bound, so a cell's expected extra time is F times the
/// mean of true cost / bound over its candidates: the budget needs the
/// bound right on average, not at every candidate. The reading's mean
/// (`exp(sd^2 / 2)`, what "expected cost" literally asks) under-costs:
/// candidates are picked for their upside, so their readings err
/// optimistic (DGX-2V 1, 2, 16 spent 2.39 % of F = 2 % in round 1, mean
/// over 10 draws). One sd over-costs: the loop worlds spent 0.2-0.3 % of
/// the 2 % on upward splits and round 1 learnt little. Half an sd spent at
/// most 1.56 % in any split's round (`make loop-draws`) and raised round 1
/// at the skipped counts by 5-22 points.
pub const COST_Z: f64 = 0.5;

/// The smallest cost bound written (the plugin's own floor for NCCL's
/// choice): a reading is unconfirmed, so a probe is never taken as free.
pub const MIN_COST: f64 = 0.05;

/// A setting whose cost bound says it takes more than twice
/// the answer's time is not worth a job's time to try (NCCL's choice
/// excepted: a force is always checked against it).
pub const MAX_COST: f64 = 1.0;

/// Neighbouring size buckets share one run of the plan (its largest cost
/// bound) only where their own bounds lie within this ratio: the draw's
/// chance at any bucket is then at least 1 / RUN_COST_RATIO of its own,
/// and the plan stays a few runs per context rather than one per bucket.
pub const RUN_COST_RATIO: f32 = 1.25;

/// Where the answer at one (node count, size) came from, for [`candidates`].
pub struct Site<'a> {
    /// The grid's node index of a count only traces measured (settings
    /// measured there are retired or confirmed); `None` for a range of
    /// unmeasured counts.
    pub traced: Option<usize>,
    /// Every setting's reading at the point the count is read at (indexed
    /// as the grid's configs; 0 is `None`).
    pub readings: &'a [Option<Reading>],
}

/// What a job may try instead of `answer` at size `si`, best first, at
/// most [`MAX_CANDIDATES`].
pub fn candidates(
    grid: &Grid,
    model: &NodeModel,
    site: &Site<'_>,
    si: usize,
    answer: &Choice,
    ln_margin: f64,
) -> Vec<Candidate> {
    if matches!(answer.why, Why::NothingHere | Why::BeyondReach) {
        return Vec::new();
    }
    // Measured against NCCL's choice at this count: decided by the
    // measurement (confirmed or retired). A setting jobs ran where NCCL's
    // choice never ran there is still to be compared.
    let measured = |c: usize| {
        site.traced
            .is_some_and(|ni| grid.get(ni, si, 0).is_some() && grid.get(ni, si, c).is_some())
    };
    // What NCCL runs on its own here (jobs traced it): forcing it runs the
    // same, so trying it measures nothing and only takes a draw from the
    // settings that may differ.
    let nccl_runs = |c: usize| site.traced.is_some_and(|ni| grid.runs_as_nccl(ni, si, c));
    let reading = |c: usize| site.readings.get(c).and_then(Option::as_ref);
    let sd_of = |c: usize| model.sd(si, reading(c)?);
    // The answer's own log gain over NCCL's choice and its uncertainty:
    // measured where the count measured it against the default, else the
    // site's reading of it (at a count traces measured, corrected by what
    // they measured of it at the sizes around). A force of the setting
    // jobs saw NCCL run here is still checked against NCCL's choice: the
    // check measures nothing where the two run alike, but in the loop
    // worlds (built from sweeps whose NCCL default is only nearly the
    // forced setting it is named after) a replay that dropped it measured
    // DGX-2V 1, 2, 4 lower at round 3 (79.6 -> 74.8 % over 20 draws, about
    // the noise of so few), and no GPU has yet shown the two alike.
    let ans_measured = answer.cfg == 0 || (measured(answer.cfg) && measured(0));
    let ans_read = reading(answer.cfg).filter(|_| !ans_measured);
    let ln_ans = ans_read.map_or_else(|| answer.gain.max(f64::MIN_POSITIVE).ln(), |r| r.gain);
    let sd_ans = if ans_measured {
        0.0
    } else {
        sd_of(answer.cfg).unwrap_or(0.0)
    };
    let cost_of = |ln_gain: f64, sd: f64| ((-ln_gain + COST_Z * sd).exp() - 1.0).max(MIN_COST);
    let mut out: Vec<Candidate> = Vec::new();
    for c in 1..grid.configs.len() {
        if c == answer.cfg || measured(c) || nccl_runs(c) {
            continue;
        }
        let Some(r) = reading(c) else {
            continue;
        };
        let Some(sd) = model.sd(si, r) else { continue };
        let ln_gain = r.gain - ln_ans;
        let score = ln_gain + EXPLORE_Z * sd;
        let cost = cost_of(ln_gain, sd);
        if score <= ln_margin || cost > MAX_COST {
            continue;
        }
        out.push(Candidate {
            cfg: c,
            ln_gain,
            sd,
            cost,
            score,
        });
    }
    out.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.cfg.cmp(&b.cfg)));
    // Settings the table writes alike (channel counts past the format's
    // limit) are one candidate.
    let mut seen: Vec<Decision> = vec![to_decision(&grid.configs[answer.cfg])];
    out.retain(|k| {
        let d = to_decision(&grid.configs[k.cfg]);
        let new = !seen.contains(&d);
        seen.push(d);
        new
    });
    // A force no measurement here backs is checked against NCCL's own
    // choice first: that is what confirms it or takes it back (a wrong
    // force is a regression; a better setting is only a missed gain).
    if !ans_measured && !measured(0) {
        // Alone: a setting tried where NCCL's choice has not run has no
        // baseline to be read against (every gain is read off NCCL's
        // choice), while the check always has one (the communicators that
        // keep the answer), so an explored shape always forms a point. With
        // the check one of four, 3 of 8 communicators or fewer tried it, and
        // at F = 0.1 six shapes a round explored had no baseline after two
        // rounds of 8 jobs (issue 42); with it one of two, a check costed at
        // +55 % still left one. The settings follow once it has run.
        out.clear();
        out.insert(
            0,
            Candidate {
                cfg: 0,
                ln_gain: -ln_ans,
                sd: sd_ans,
                // The force was chosen for its reading, so the reading
                // errs high more often than low: NCCL's choice costs at
                // most what the reading predicts, without the sd against
                // it that a setting picked for its upside needs. (With
                // it, a check of a force predicted to win by 22 % +- 12 %
                // was drawn by 4.5 % of communicators, and a wrong force
                // on DGX-2V outlived three rounds in half the draws.)
                cost: cost_of(-ln_ans, 0.0),
                score: -ln_ans + EXPLORE_Z * sd_ans,
            },
        );
    }
    out.truncate(MAX_CANDIDATES);
    out
}

/// One run of size buckets listing the same candidates, each at a cost
/// bound within [`RUN_COST_RATIO`] of every bucket's own ([`runs`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Run {
    pub first: u8,
    pub last: u8,
    /// Best first; never empty.
    pub candidates: Vec<Planned>,
}

/// A candidate as the table stores it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Planned {
    pub decision: Decision,
    /// Predicted gain over the answer (fraction: 0.1 = 10 % faster).
    pub gain: f32,
    pub spread: f32,
    pub cost_bound: f32,
}

/// Spreads an anchor's per-size candidates over the size buckets between
/// its first and last decided size (each bucket takes the nearest decided
/// size's, as its decision does), merging neighbours that list the same
/// settings at cost bounds within [`RUN_COST_RATIO`] into runs.
pub fn runs(grid: &Grid, a: &Anchor) -> Vec<Run> {
    if a.plan.iter().all(Vec::is_empty) {
        return Vec::new();
    }
    let own: Vec<usize> = (0..grid.sizes.len())
        .filter(|&si| a.per_size[si].why != Why::NothingHere)
        .collect();
    let (Some(&first), Some(&last)) = (own.first(), own.last()) else {
        return Vec::new();
    };
    let (lo_b, hi_b) = (
        size_bucket(grid.sizes[first]),
        size_bucket(grid.sizes[last]),
    );
    let mut out: Vec<Run> = Vec::new();
    // The last run's smallest cost bound per candidate.
    let mut lows: Vec<f32> = Vec::new();
    for b in lo_b..=hi_b {
        let si = nearest_size(grid, &own, bucket_lower_bound(b));
        let list: Vec<Planned> = a.plan[si]
            .iter()
            .map(|k| Planned {
                decision: to_decision(&grid.configs[k.cfg]),
                gain: (k.ln_gain.exp() - 1.0) as f32,
                spread: k.sd as f32,
                cost_bound: k.cost as f32,
            })
            .collect();
        if list.is_empty() {
            continue;
        }
        // One run: the same settings in the same order, each cost bound
        // within RUN_COST_RATIO of every bucket's own, so the draw's chance
        // (from the run's largest bound) stays within it too. A run over
        // every size listing the same settings, at its most confident
        // size's bound, left a wrong force unchecked (see the test
        // `a_plan_run_draws_each_size_near_its_own_cost_bound`).
        let fits = |r: &Run, lows: &[f32]| {
            r.last + 1 == b
                && r.candidates.len() == list.len()
                && r.candidates
                    .iter()
                    .zip(lows)
                    .zip(&list)
                    .all(|((x, &lo), y)| {
                        x.decision == y.decision
                            && y.cost_bound.max(x.cost_bound)
                                <= RUN_COST_RATIO * y.cost_bound.min(lo)
                    })
        };
        match out.last_mut() {
            Some(r) if fits(r, &lows) => {
                r.last = b;
                for ((x, lo), y) in r.candidates.iter_mut().zip(lows.iter_mut()).zip(&list) {
                    x.gain = x.gain.min(y.gain);
                    x.spread = x.spread.max(y.spread);
                    x.cost_bound = x.cost_bound.max(y.cost_bound);
                    *lo = lo.min(y.cost_bound);
                }
            }
            _ => {
                lows = list.iter().map(|k| k.cost_bound).collect();
                out.push(Run {
                    first: b,
                    last: b,
                    candidates: list,
                });
            }
        }
    }
    out
}
