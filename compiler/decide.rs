//! Decide: per grid, per node count and per message size, force a
//! candidate only where the evidence says it beats NCCL's default by more
//! than the noise and a margin, inside the measured hull; otherwise leave
//! NCCL alone. Then spread the per-size choices over the table's size
//! buckets and node ranges.

use dyncc_tables::{bucket_lower_bound, size_bucket, Basis, Decision, NUM_BUCKETS};
use serde::Serialize;

use crate::features::Grid;
use crate::fit::Fitted;
use crate::record::Config;

/// What the user can set.
#[derive(Clone, Debug)]
pub struct DecideOptions {
    /// Force only when the expected gain exceeds this fraction (0.03 = 3 %)
    /// on top of the noise.
    pub margin: f64,
    /// How many standard deviations of measurement noise a gain must clear.
    pub z: f64,
    /// Extend decisions beyond the measured node counts, ranks per node and
    /// sizes.
    pub extrapolate: bool,
}

impl Default for DecideOptions {
    fn default() -> Self {
        DecideOptions { margin: 0.03, z: 1.0, extrapolate: false }
    }
}

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
    /// No default run at this cell: no baseline to claim a gain against.
    NoDefaultRun,
    /// Unmeasured node count whose measured neighbours disagree.
    NeighboursDisagree,
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
    fn default(why: Why, basis: Basis) -> Choice {
        Choice { cfg: 0, basis, gain: 1.0, why }
    }
}

/// The choices at one node count: measured, or an interpolated anchor.
#[derive(Clone, Debug)]
pub struct Anchor {
    pub nodes: u32,
    pub measured: bool,
    /// One per grid size.
    pub per_size: Vec<Choice>,
}

/// Every decision of one grid.
#[derive(Clone, Debug)]
pub struct GridDecisions {
    pub anchors: Vec<Anchor>,
}

/// Decides one grid.
pub fn decide(grid: &Grid, fit: &Fitted, opt: &DecideOptions) -> GridDecisions {
    let lm = (1.0 + opt.margin).ln();
    let mut anchors: Vec<Anchor> = (0..grid.nodes.len())
        .map(|ni| Anchor {
            nodes: grid.nodes[ni],
            measured: true,
            per_size: (0..grid.sizes.len()).map(|si| decide_measured(grid, fit, ni, si, lm, opt)).collect(),
        })
        .collect();
    for a in &mut anchors {
        smooth(grid, a, fit, lm, opt);
    }
    // Powers of two between measured node counts: the node counts users
    // most often run. Their decisions come from the models, and only where
    // both measured neighbours agree.
    let mut extra = Vec::new();
    for w in grid.nodes.windows(2) {
        let (lo, hi) = (w[0], w[1]);
        let mut k = lo.next_power_of_two();
        if k == lo {
            k *= 2;
        }
        while k < hi {
            extra.push(k);
            k *= 2;
        }
    }
    for k in extra {
        let li = grid.nodes.iter().rposition(|&n| n < k).unwrap_or(0);
        let ui = grid.nodes.iter().position(|&n| n > k).unwrap_or(grid.nodes.len() - 1);
        let per_size = (0..grid.sizes.len())
            .map(|si| {
                let (l, u) = (anchors[li].per_size[si], anchors[ui].per_size[si]);
                if l.cfg != u.cfg || l.cfg == 0 {
                    let why = if l.cfg == u.cfg { Why::DefaultBest } else { Why::NeighboursDisagree };
                    return Choice::default(why, Basis::Interpolated);
                }
                match fit.predict(l.cfg, grid.sizes[si], k, grid.ppn) {
                    Some(g) if g > lm => {
                        Choice { cfg: l.cfg, basis: Basis::Interpolated, gain: g.exp(), why: Why::Forced }
                    }
                    _ => Choice::default(Why::ModelDisagrees, Basis::Interpolated),
                }
            })
            .collect();
        anchors.push(Anchor { nodes: k, measured: false, per_size });
    }
    anchors.sort_by_key(|a| a.nodes);
    GridDecisions { anchors }
}

fn decide_measured(
    grid: &Grid,
    fit: &Fitted,
    ni: usize,
    si: usize,
    lm: f64,
    opt: &DecideOptions,
) -> Choice {
    let Some(d) = grid.get(ni, si, 0) else {
        return Choice::default(Why::NoDefaultRun, Basis::Measured);
    };
    let sigma = fit.sigma(ni, si);
    let mut best: Option<(f64, usize, f64)> = None;
    let mut why = Why::DefaultBest;
    for c in 1..grid.configs.len() {
        let Some(m) = grid.get(ni, si, c) else { continue };
        let g = d.ln_t - m.ln_t;
        if g <= lm {
            continue;
        }
        let sd = sigma * (1.0 / d.n.max(1) as f64 + 1.0 / m.n.max(1) as f64).sqrt();
        if g <= lm + opt.z * sd {
            why = why.max(Why::WithinNoise);
            continue;
        }
        let gp = fit.predict(c, grid.sizes[si], grid.nodes[ni], grid.ppn).unwrap_or(g);
        if gp <= 0.0 {
            why = why.max(Why::ModelDisagrees);
            continue;
        }
        let score = (g + gp.min(g)) / 2.0;
        if best.is_none_or(|b| score > b.0) {
            best = Some((score, c, g));
        }
    }
    match best {
        Some((_, c, g)) => Choice { cfg: c, basis: Basis::Measured, gain: g.exp(), why: Why::Forced },
        None => Choice::default(why, Basis::Measured),
    }
}

/// No flip-flopping on noise: a size whose choice differs from two agreeing
/// neighbours takes theirs when theirs is measured there and within the
/// noise of it (and still no worse than the default by the margin).
fn smooth(grid: &Grid, a: &mut Anchor, fit: &Fitted, lm: f64, opt: &DecideOptions) {
    let Some(ni) = grid.nodes.iter().position(|&n| n == a.nodes) else { return };
    for si in 1..a.per_size.len().saturating_sub(1) {
        let (l, m, r) = (a.per_size[si - 1], a.per_size[si], a.per_size[si + 1]);
        if l.cfg != r.cfg || m.cfg == l.cfg {
            continue;
        }
        let (Some(d), Some(cur), Some(alt)) =
            (grid.get(ni, si, 0), grid.get(ni, si, m.cfg), grid.get(ni, si, l.cfg))
        else {
            continue;
        };
        let sd = fit.sigma(ni, si) * 2f64.sqrt();
        let alt_gain = d.ln_t - alt.ln_t;
        let close = alt.ln_t - cur.ln_t <= opt.z * sd;
        let safe = l.cfg == 0 || alt_gain > lm;
        if close && safe {
            a.per_size[si] = if l.cfg == 0 {
                Choice::default(Why::WithinNoise, Basis::Measured)
            } else {
                Choice { cfg: l.cfg, basis: Basis::Measured, gain: alt_gain.exp(), why: Why::Forced }
            };
        }
    }
}

/// One bucket's decision, as the table stores it.
pub type BucketChoice = (Decision, Basis, f32);

/// Converts a grid config into a table decision.
pub fn to_decision(cfg: &Config) -> Decision {
    match (cfg.algo, cfg.proto) {
        (Some(algo), Some(proto)) => Decision::Force {
            algo,
            proto,
            channels: cfg.channels.map(|c| c.min(255) as u8).unwrap_or(0),
        },
        _ => Decision::Default,
    }
}

/// Spreads an anchor's per-size choices over the size buckets: every bucket
/// takes the choice of the nearest measured size (in log space); outside the
/// measured sizes, NCCL's default unless extrapolating.
pub fn buckets(grid: &Grid, a: &Anchor, extrapolate: bool) -> Box<[BucketChoice; NUM_BUCKETS]> {
    let dflt: BucketChoice = (Decision::Default, Basis::Measured, 1.0);
    let mut out = Box::new([dflt; NUM_BUCKETS]);
    if grid.sizes.is_empty() {
        return out;
    }
    let lo_b = size_bucket(grid.sizes[0]) as usize;
    let hi_b = size_bucket(*grid.sizes.last().unwrap_or(&0)) as usize;
    for (b, slot) in out.iter_mut().enumerate() {
        let x = (bucket_lower_bound(b as u8).max(1) as f64).log2();
        let outside = b < lo_b || b > hi_b;
        if outside && !extrapolate {
            continue;
        }
        // Nearest measured size in log2.
        let si = match grid.sizes.binary_search(&bucket_lower_bound(b as u8)) {
            Ok(i) => i,
            Err(i) if i == 0 => 0,
            Err(i) if i >= grid.sizes.len() => grid.sizes.len() - 1,
            Err(i) => {
                let below = (grid.sizes[i - 1] as f64).log2();
                let above = (grid.sizes[i] as f64).log2();
                if x - below <= above - x {
                    i - 1
                } else {
                    i
                }
            }
        };
        let c = a.per_size[si];
        let basis = if outside {
            Basis::Extrapolated
        } else if !a.measured || size_bucket(grid.sizes[si]) as usize != b {
            // Between measured sizes: measured only if both sides agree.
            let other = if bucket_lower_bound(b as u8) < grid.sizes[si] {
                si.checked_sub(1)
            } else {
                Some(si + 1).filter(|&j| j < grid.sizes.len())
            };
            match other {
                Some(j) if a.per_size[j].cfg == c.cfg && a.measured => c.basis,
                _ => Basis::Interpolated,
            }
        } else {
            c.basis
        };
        let d = to_decision(&grid.configs[c.cfg]);
        let gain = if d == Decision::Default { 1.0 } else { c.gain as f32 };
        *slot = (d, if d == Decision::Default && !outside { Basis::Measured } else { basis }, gain);
    }
    out
}
