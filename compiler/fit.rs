//! Fit: per grid, a noise estimate for every (node, size), and one
//! gradient-boosted model per candidate of its log-time advantage over
//! NCCL's default, fitted over all the grid's cells, so a decision at one
//! cell can ask whether the neighbours bear its measurement out. Only the
//! models' values at the measured cells are kept: that is all a decision
//! reads, and the trees are freed with the fit.

use rayon::prelude::*;

use crate::boost::{boost, Params};

use crate::features::{features, Grid, N_FEATURES};
use crate::stats::{median, quantile};

/// The floor of the noise estimate: even perfectly repeatable runs differ
/// this much from one job to the next.
pub(crate) const MIN_SIGMA: f64 = 0.005;
pub(crate) const MAX_SIGMA: f64 = 0.5;

/// The models and noise levels of one grid.
pub struct Fitted {
    /// Per candidate config (index as in the grid; entry 0, the default, is
    /// `None`, as is every candidate no decision reads): its model's
    /// predicted ln(t_default) - ln(t_candidate) per (node, size), NaN
    /// where the pair was not measured.
    advantage: Vec<Option<Vec<f64>>>,
    /// Per (node, size): estimated sd of ln(time) of one measurement.
    sigma: Vec<f64>,
    n_sizes: usize,
}

impl Fitted {
    /// sd of ln(time) of a single sample at (node, size).
    pub fn sigma(&self, node: usize, size: usize) -> f64 {
        self.sigma[node * self.n_sizes + size]
    }

    /// The model's advantage of candidate `cfg` over the default at a
    /// measured (node, size) of the grid (ln ratio; positive = faster
    /// than the default); `None` where it was not fitted or not measured.
    pub fn predict(&self, cfg: usize, node: usize, size: usize) -> Option<f64> {
        let v = self.advantage.get(cfg)?.as_ref()?[node * self.n_sizes + size];
        (!v.is_nan()).then_some(v)
    }
}

/// Fits the models of one grid's candidates that `wanted` names (indexed
/// as the grid's configs; the others are never read, so never fitted), in
/// parallel on the caller's pool and collected in candidate order.
/// `sigma` is [`noise`] of the grid; `done` is called once per candidate
/// (fitted or not) as it is done, for progress.
pub fn fit(grid: &Grid, sigma: Vec<f64>, wanted: &[bool], done: &(dyn Fn() + Sync)) -> Fitted {
    let advantage = (0..grid.configs.len())
        .into_par_iter()
        .map(|c| {
            let m = (c > 0 && wanted.get(c).copied().unwrap_or(false))
                .then(|| fit_candidate(grid, &sigma, c))
                .flatten();
            if c > 0 {
                done();
            }
            m
        })
        .collect();
    Fitted {
        advantage,
        sigma,
        n_sizes: grid.sizes.len(),
    }
}

/// Candidate `c`'s model of its advantage over the default, at every
/// (node, size) (NaN where not both measured); `None` with fewer than
/// four cells measured with both.
fn fit_candidate(grid: &Grid, sigma: &[f64], c: usize) -> Option<Vec<f64>> {
    let ns = grid.sizes.len();
    let mut at: Vec<usize> = Vec::new();
    let mut x: Vec<[f64; N_FEATURES]> = Vec::new();
    let mut y = Vec::new();
    let mut w = Vec::new();
    for ni in 0..grid.nodes.len() {
        for si in 0..ns {
            let (Some(d), Some(m)) = (grid.get(ni, si, 0), grid.get(ni, si, c)) else {
                continue;
            };
            if grid.traced(ni, si).is_some() {
                continue;
            }
            at.push(ni * ns + si);
            x.push(features(grid.sizes[si], grid.nodes[ni], grid.ppn));
            y.push(d.ln_t - m.ln_t);
            // Noisier cells count less.
            let s = sigma[ni * ns + si];
            w.push(1.0 / (s * s).max(1e-4));
        }
    }
    if y.len() < 4 {
        return None;
    }
    // Weights are relative (the learner normalises them to mean 1, so that
    // l2 and the least leaf weight, about three cells, mean the same at any
    // noise level: no leaf may isolate a single, possibly noisy, cell).
    let fitted = boost(&x, &y, &w, &Params::default()).fitted;
    let mut out = vec![f64::NAN; grid.nodes.len() * ns];
    for (i, v) in at.into_iter().zip(fitted) {
        out[i] = v;
    }
    Some(out)
}

/// Noise of one sample's ln(time) at every (node, size) of the grid,
/// indexed `node * sizes + size`.
///
/// With repeats, the spread of the repeats gives it directly (range / d_n,
/// the expected range of n normal samples). Single runs carry no spread, so
/// it comes from roughness: for independent noise of sd s on a smooth curve,
/// the second difference of neighbouring sizes has variance 6 s^2. Real
/// curvature only makes the estimate larger, which errs towards caution.
pub fn noise(grid: &Grid) -> Vec<f64> {
    let (nn, ns, nc) = (grid.nodes.len(), grid.sizes.len(), grid.configs.len());
    let mut out = vec![MIN_SIGMA; nn * ns];
    for ni in 0..nn {
        // Per size: variance estimates from repeats, and from roughness.
        let mut rep: Vec<Vec<f64>> = vec![Vec::new(); ns];
        let mut rough: Vec<Vec<f64>> = vec![Vec::new(); ns];
        // The sweep's sizes only, in order: a size only traces measured is
        // no neighbour of the sweep's (it would shift the windows and break
        // the roughness triples of the sweep's sizes around it).
        let cols: Vec<usize> = (0..ns).filter(|&si| grid.swept_size(si)).collect();
        // Traced points carry their own noise (from their counts) and are
        // no neighbour of a sweep's: their times are on another base.
        let swept = |si: usize| grid.traced(ni, si).is_none();
        for c in 0..nc {
            for (k, &si) in cols.iter().enumerate().filter(|&(_, &si)| swept(si)) {
                let Some(m) = grid.get(ni, si, c) else {
                    continue;
                };
                if m.n >= 2 {
                    rep[si].push(repeat_variance((1.0 + m.spread.max(0.0)).ln(), m.n));
                } else if k >= 1 && k + 1 < cols.len() && swept(cols[k - 1]) && swept(cols[k + 1]) {
                    if let (Some(a), Some(b)) =
                        (grid.get(ni, cols[k - 1], c), grid.get(ni, cols[k + 1], c))
                    {
                        rough[si].push(roughness_variance([a.ln_t, m.ln_t, b.ln_t]));
                    }
                }
            }
        }
        // Pool a window of neighbouring sizes: noise varies slowly. Repeats
        // measure noise directly: their median. Roughness also picks up the
        // curves' real bends (protocol switches, the latency-to-bandwidth
        // knee), so it uses the lower quartile, which stays unbiased while
        // up to three quarters of the estimates are bent; 0.1015 is the
        // lower quartile of chi-square(1).
        for (k, &si) in cols.iter().enumerate() {
            let window = &cols[k.saturating_sub(2)..=(k + 2).min(cols.len() - 1)];
            let mut r: Vec<f64> = window
                .iter()
                .flat_map(|&j| rep[j].iter().copied())
                .collect();
            let mut q: Vec<f64> = window
                .iter()
                .flat_map(|&j| rough[j].iter().copied())
                .collect();
            out[ni * ns + si] = sigma_of(&mut r, &mut q);
        }
        for si in 0..ns {
            if let Some(sd) = grid.traced(ni, si) {
                out[ni * ns + si] = sd.clamp(MIN_SIGMA, MAX_SIGMA);
            }
        }
    }
    out
}

/// The variance of one sample's ln(time) that `n` repeats spanning
/// `ln_range` (ln of max/min) show: range / d_n, squared.
pub(crate) fn repeat_variance(ln_range: f64, n: u32) -> f64 {
    let s = ln_range / range_factor(n);
    s * s
}

/// The variance of one sample's ln(time) that three neighbouring sizes of
/// one curve show: their second difference has variance 6 s^2.
pub(crate) fn roughness_variance(ln_t: [f64; 3]) -> f64 {
    let d2 = ln_t[0] - 2.0 * ln_t[1] + ln_t[2];
    d2 * d2 / 6.0
}

/// The noise sd from repeat variances `repeats` where there are any, else
/// from the roughness of each curve (ln time by size, in size order):
/// the one rule the sweep's noise and the within-run noise share.
pub(crate) fn sigma_from_curves<'a>(
    repeats: &mut [f64],
    curves: impl IntoIterator<Item = &'a std::collections::BTreeMap<u64, f64>>,
) -> f64 {
    let mut rough: Vec<f64> = Vec::new();
    if repeats.is_empty() {
        for c in curves {
            let v: Vec<f64> = c.values().copied().collect();
            for w in v.windows(3) {
                rough.push(roughness_variance([w[0], w[1], w[2]]));
            }
        }
    }
    sigma_of(repeats, &mut rough)
}

/// One noise figure (sd of ln time) from variance estimates: the repeats'
/// median when there are any; else the roughness's lower quartile (curves'
/// real bends inflate the others; 0.1015 is the lower quartile of
/// chi-square(1)); else 5 %. Clamped to [MIN_SIGMA, MAX_SIGMA].
pub(crate) fn sigma_of(repeats: &mut [f64], roughness: &mut [f64]) -> f64 {
    let var = if !repeats.is_empty() {
        median(repeats).unwrap_or(0.0)
    } else if roughness.len() >= 4 {
        quantile(roughness, 0.25).unwrap_or(0.0) / 0.1015
    } else {
        0.05 * 0.05
    };
    var.sqrt().clamp(MIN_SIGMA, MAX_SIGMA)
}

/// Expected range of n standard normal samples (d2 constants).
pub(crate) fn range_factor(n: u32) -> f64 {
    match n {
        0 | 1 => 1.0,
        2 => 1.128,
        3 => 1.693,
        4 => 2.059,
        5 => 2.326,
        6 => 2.534,
        7 => 2.704,
        8 => 2.847,
        9 => 2.970,
        _ => 3.078,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::features::build_grids;
    use crate::features::tests::{cell, cfg};
    use crate::record::{Algo, Collective, Config, Proto};

    #[test]
    fn model_learns_where_a_candidate_wins() {
        let mut cells = Vec::new();
        for nodes in [1u32, 2, 4, 8] {
            for k in 3..30 {
                let b = 1u64 << k;
                let base = 10.0 + b as f64 / 1e4;
                cells.push(cell(
                    Collective::AllReduce,
                    nodes,
                    8,
                    b,
                    Config::DEFAULT,
                    base,
                ));
                // Tree/LL is 20 % faster below 64 KiB, 30 % slower above.
                let t = if b < 65536 { base * 0.8 } else { base * 1.3 };
                cells.push(cell(
                    Collective::AllReduce,
                    nodes,
                    8,
                    b,
                    cfg(Algo::Tree, Proto::LL),
                    t,
                ));
            }
        }
        let (grids, _) = build_grids(&cells);
        let g = &grids[0];
        let f = fit(g, noise(g), &vec![true; g.configs.len()], &|| {});
        // Node count 2, 1 KiB and 16 MiB.
        let size = |b: u64| g.sizes.iter().position(|&s| s == b).unwrap();
        let small = f.predict(1, 1, size(1024)).unwrap();
        let large = f.predict(1, 1, size(1 << 24)).unwrap();
        assert!((small - (1.0f64 / 0.8).ln()).abs() < 0.05, "{small}");
        assert!((large - (1.0f64 / 1.3).ln()).abs() < 0.05, "{large}");
        // Smooth noiseless curves: the noise estimate stays small.
        assert!(f.sigma(0, 10) < 0.05, "{}", f.sigma(0, 10));
    }
}
