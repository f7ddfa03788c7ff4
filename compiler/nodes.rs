//! Node counts the sweep did not measure.
//!
//! A candidate's gain over NCCL's default, ln(t_default / t_candidate), is
//! treated as drifting with log2 of the node count. At an unmeasured count it
//! is interpolated linearly in log2 nodes between the measured multi-node
//! counts around it, or carried flat from the nearest one beyond the edge;
//! never across the boundary between one node (intra-node links only) and
//! several. Sizes are matched across node counts either on total bytes or on
//! bytes per rank, whichever predicts the sweep's own node counts better
//! (per rank, between two counts, a size past the largest or smallest one
//! of them measured with the setting reads that count's edge size).
//!
//! The uncertainty of that reading is calibrated on the sweep itself: every
//! measured multi-node count is predicted from the others (an internal
//! leave-one-node-count-out), and the errors give, per size region, how fast
//! gains drift per log2 node (a random walk: the variance of a reading grows
//! with its distance to the measured counts, a Brownian bridge between two).
//! That is the uncertainty of a gain drifting between counts; [`agreed`]
//! finds where the counts on either side measured the same setting fastest,
//! so that the choice did not drift there.
//!
//! [`consistency`] finds runs that sit off the trend of their neighbours; the
//! uncertainty of every decision leaning on them is widened.
//!
//! At a count only jobs' traces measured, they measured some settings at
//! some sizes; [`borrow_across_sizes`] carries what they found to the
//! sizes around, as far as the same cross-validation shows the readings'
//! errors alike across sizes ([`NodeModel::size_corr`]): a count in a
//! regime the sweep's counts do not show is mispredicted over a run of
//! sizes, not at one.

use serde::Serialize;

use crate::features::Grid;

/// A reading counts for calibration only where a decision could hinge on
/// it: the candidate measured or predicted faster than the default.
/// Candidates far slower on both counts are never forced, and their larger
/// errors would only inflate the uncertainty of the ones that could be.
const RELEVANT: f64 = 0.0;

/// Sizes within this many octaves of each other share a drift estimate.
const REGION_OCTAVES: f64 = 2.0;

/// The drift variance never goes below this (ln ratio squared per log2
/// node): two node counts never predict each other perfectly.
const MIN_KAPPA: f64 = 0.01 * 0.01;

/// Predictions below the smallest measured multi-node count (down towards
/// two nodes) need at least this many of them; reading between them or
/// carrying a gain above them needs two. Two nodes often behaves unlike
/// four and eight (one inter-node hop: rings, trees and CollNet change
/// regime there), so a gain carried down to it is the riskiest reading:
/// with only two counts the sweep shows one gap, too little to tell how
/// far gains drift.
pub const MIN_COUNTS_TO_EXTRAPOLATE_DOWN: usize = 3;

/// How sizes line up across node counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Align {
    /// Same total bytes (nccl-tests' `size`): AllReduce curves line up so.
    TotalBytes,
    /// Same bytes per rank: AllGather and ReduceScatter curves line up so.
    BytesPerRank,
}

impl Align {
    pub fn name(self) -> &'static str {
        match self {
            Align::TotalBytes => "total bytes",
            Align::BytesPerRank => "bytes per rank",
        }
    }
}

/// A gain read off the measured node counts.
#[derive(Clone, Copy, Debug)]
pub struct Reading {
    /// Expected ln(t_default / t_candidate).
    pub gain: f64,
    /// Variance from the drift between node counts, in units of the drift
    /// variance per log2 node (multiply by kappa).
    pub drift: f64,
    /// Extra variance from runs off their neighbours' trend that the
    /// reading leans on.
    pub widen_var: f64,
    /// Whether the count lies between measured ones (else beyond them).
    pub between: bool,
    /// Whether it lies below every measured multi-node count.
    pub below: bool,
    /// The measured gains it was read from, at the count below and the
    /// count above (`None` where there is no such count, or the candidate
    /// was not measured there at the matched size, even where that count's
    /// edge size stood in for the reading).
    pub ends: [Option<f64>; 2],
    /// Share of the calibrated variance left once jobs' measurements of
    /// this setting at nearby sizes of the same count were borrowed
    /// ([`borrow_across_sizes`]); 1 where none was.
    pub left: f64,
}

/// The calibrated model of one grid.
#[derive(Clone, Debug)]
pub struct NodeModel {
    pub align: Align,
    /// Per grid size: drift variance per log2 node; `None` when the sweep
    /// has fewer than two multi-node counts to calibrate it on.
    kappa: Option<Vec<f64>>,
    /// Whether readings below the measured multi-node counts are trusted
    /// ([`MIN_COUNTS_TO_EXTRAPOLATE_DOWN`]).
    pub extrapolates_down: bool,
    /// Internal cross-validation: RMS error of the readings, per alignment.
    pub cv: Vec<(Align, f64, usize)>,
    /// Correlation per octave of size between the standardised errors of
    /// one setting's readings at one count (from the same
    /// cross-validation); `None` where too few neighbouring pairs tell.
    pub size_corr: Option<f64>,
}

impl NodeModel {
    /// Standard deviation of a reading at grid size `si`; `None` when the
    /// reading cannot be trusted at all.
    pub fn sd(&self, si: usize, r: &Reading) -> Option<f64> {
        if r.below && !self.extrapolates_down {
            return None;
        }
        let k = self.kappa.as_ref()?.get(si)?;
        Some(((k * r.drift + r.widen_var) * r.left).max(0.0).sqrt())
    }

    /// Whether unmeasured node counts can be decided at all.
    pub fn calibrated(&self) -> bool {
        self.kappa.is_some()
    }
}

/// Extra variance of one configuration's ln(time) at one measured node
/// count, from [`consistency`] (zero when its runs follow the trend).
pub struct Widen {
    n_cfg: usize,
    var: Vec<f64>,
}

impl Widen {
    pub fn none(grid: &Grid) -> Widen {
        Widen {
            n_cfg: grid.configs.len(),
            var: vec![0.0; grid.nodes.len() * grid.configs.len()],
        }
    }
    pub fn get(&self, ni: usize, cfg: usize) -> f64 {
        self.var.get(ni * self.n_cfg + cfg).copied().unwrap_or(0.0)
    }
    pub fn set(&mut self, ni: usize, cfg: usize, v: f64) {
        if let Some(x) = self.var.get_mut(ni * self.n_cfg + cfg) {
            *x = x.max(v);
        }
    }
}

/// A measured gain, read at one size.
#[derive(Clone, Copy, Debug)]
pub struct GainPoint {
    pub gain: f64,
    /// Extra variance from runs off their neighbours' trend.
    pub widen: f64,
}

impl GainPoint {
    fn blend(a: GainPoint, b: GainPoint, w: f64) -> GainPoint {
        let (u, v) = ((1.0 - w) * (1.0 - w), w * w);
        GainPoint {
            gain: (1.0 - w) * a.gain + w * b.gain,
            widen: u * a.widen + v * b.widen,
        }
    }
}

/// log2 of grid size `si` (bytes; 0 read as 1), the axis sizes are read
/// along.
fn log2_size(grid: &Grid, si: usize) -> f64 {
    (grid.sizes[si].max(1) as f64).log2()
}

/// Measured gain of `cfg` at node index `ni`, at log2 size `ls`, read
/// linearly in log2 size between the measured sizes around it. `None`
/// outside the sizes measured there.
pub fn gain_at(grid: &Grid, widen: &Widen, ni: usize, cfg: usize, ls: f64) -> Option<GainPoint> {
    let point = |si: usize| -> Option<GainPoint> {
        let d = grid.get(ni, si, 0)?;
        let m = grid.get(ni, si, cfg)?;
        Some(GainPoint {
            gain: d.ln_t - m.ln_t,
            widen: widen.get(ni, 0) + widen.get(ni, cfg),
        })
    };
    // Exact size, or the measured sizes on either side; sizes only other
    // node counts' traces measured are not this count's (passed over, with
    // no list built: this runs for every reading).
    let own = |si: &usize| !grid.foreign(ni, *si);
    let hi = grid
        .sizes
        .partition_point(|&s| (s.max(1) as f64).log2() < ls - 1e-9);
    let hi_si = (hi..grid.sizes.len()).find(own)?;
    if (log2_size(grid, hi_si) - ls).abs() < 1e-9 {
        return point(hi_si);
    }
    let lo_si = (0..hi).rev().find(own)?;
    let (a, b) = (point(lo_si)?, point(hi_si)?);
    let w = (ls - log2_size(grid, lo_si)) / (log2_size(grid, hi_si) - log2_size(grid, lo_si));
    Some(GainPoint::blend(a, b, w))
}

/// Which measured counts a reading may lean on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Neighbours {
    /// The sweep's counts, and counts only traces measured where they
    /// measured this setting at this size.
    Any,
    /// The sweep's counts only: the reading the sweep alone gives.
    Swept,
}

/// Reads the gain of `cfg` at `nodes` (not itself measured, or excluded)
/// and grid size `si` off the measured multi-node counts `lean` allows,
/// leaving out node index `exclude`.
#[allow(clippy::too_many_arguments)]
pub fn read(
    grid: &Grid,
    widen: &Widen,
    align: Align,
    nodes: f64,
    si: usize,
    cfg: usize,
    exclude: Option<usize>,
    lean: Neighbours,
) -> Option<Reading> {
    if nodes < 2.0 {
        return None;
    }
    let lk = nodes.log2();
    let ls = log2_size(grid, si);
    // `edge`: past the sizes count `ni` measured, read its edge size.
    let at = |ni: usize, edge: bool| -> Option<(GainPoint, f64)> {
        let ln = (grid.nodes[ni] as f64).log2();
        let ls_n = match align {
            Align::TotalBytes => ls,
            // Same bytes per rank: the total scales with the node count.
            Align::BytesPerRank if !edge => ls + ln - lk,
            Align::BytesPerRank => {
                // The edge of what a gain can be read at: both NCCL's
                // choice and the setting measured (a setting swept over
                // fewer sizes than the default has a nearer edge).
                let measured =
                    |si: &usize| grid.get(ni, *si, 0).is_some() && grid.get(ni, *si, cfg).is_some();
                let first = (0..grid.sizes.len()).find(measured)?;
                let last = (0..grid.sizes.len()).rev().find(measured)?;
                (ls + ln - lk).clamp(log2_size(grid, first), log2_size(grid, last))
            }
        };
        Some((gain_at(grid, widen, ni, cfg, ls_n)?, ln))
    };
    // A count only traces measured stands beside this one only where its
    // traces measured this setting at this size.
    let multi = |ni: usize| {
        grid.nodes[ni] >= 2
            && Some(ni) != exclude
            && (grid.swept(ni) || (lean == Neighbours::Any && at(ni, false).is_some()))
    };
    let lo = (0..grid.nodes.len())
        .rev()
        .find(|&ni| multi(ni) && (grid.nodes[ni] as f64) < nodes);
    let hi = (0..grid.nodes.len()).find(|&ni| multi(ni) && (grid.nodes[ni] as f64) > nodes);
    let (mut below, mut above) = (
        lo.and_then(|ni| at(ni, false)),
        hi.and_then(|ni| at(ni, false)),
    );
    // Sizes matched per rank: between two counts, this count's largest
    // sizes match sizes past the largest the count above measured (and
    // its smallest, sizes below the smallest of the count below). Gains
    // level off towards either end (all bandwidth, all latency), so that
    // count's edge size completes the bridge, rather than the count being
    // passed over and the other side's gain carried flat as if nothing lay
    // beyond. Beyond every count, nothing is read past the sizes measured,
    // nor where both sides fall past their counts' sizes (the two counts
    // then measured no size of this count in common: nothing to bridge).
    //
    // `ends` are the gains at the matched sizes only: an edge size stands
    // in for the reading, never as the count having measured the setting
    // there ([`agreed`] must not take an edge for a measured winner and
    // drop the reading's uncertainty).
    let ends = [below.map(|e| e.0.gain), above.map(|e| e.0.gain)];
    if let (Some(l), Some(h), Align::BytesPerRank) = (lo, hi, align) {
        match (below, above) {
            (Some(_), None) => above = at(h, true),
            (None, Some(_)) => below = at(l, true),
            _ => {}
        }
    }
    match (below, above) {
        (Some((pl, ll)), Some((ph, lh))) => {
            let w = (lk - ll) / (lh - ll);
            let p = GainPoint::blend(pl, ph, w);
            Some(Reading {
                gain: p.gain,
                drift: (lk - ll) * (lh - lk) / (lh - ll),
                widen_var: p.widen,
                between: true,
                below: false,
                ends,
                left: 1.0,
            })
        }
        (Some((p, l)), None) | (None, Some((p, l))) => Some(Reading {
            gain: p.gain,
            drift: (lk - l).abs(),
            widen_var: p.widen,
            between: lo.is_some() && hi.is_some(),
            below: lo.is_none(),
            ends,
            left: 1.0,
        }),
        (None, None) => None,
    }
}

/// The setting (never NCCL's default) measured fastest at both of the
/// measured multi-node counts on either side of an unmeasured one, from
/// every candidate's reading there (`readings[c]`, indexed as the grid's
/// configs); `None` when the two counts differ, or the count is not between
/// two of them. Where they agree, the choice did not drift between them,
/// whatever the size region's calibrated uncertainty says about how far
/// gains drift elsewhere.
pub fn agreed(readings: &[Option<Reading>]) -> Option<usize> {
    let fastest = |side: usize| {
        let mut best: Option<(usize, f64)> = None;
        for (c, r) in readings.iter().enumerate() {
            if let Some(g) = r.as_ref().and_then(|r| r.ends[side]) {
                if g > 0.0 && best.is_none_or(|b| g > b.1) {
                    best = Some((c, g));
                }
            }
        }
        best.map(|b| b.0)
    };
    let c = fastest(0)?;
    (fastest(1)? == c).then_some(c)
}

/// One internal cross-validation error.
struct CvError {
    ni: usize,
    si: usize,
    cfg: usize,
    /// The measured gain less the reading's.
    err: f64,
    drift: f64,
    widen_var: f64,
}

fn cv_errors(grid: &Grid, widen: &Widen, align: Align) -> Vec<CvError> {
    let mut out = Vec::new();
    for ni in 0..grid.nodes.len() {
        // The sweep's own counts and sizes: a count or size only traces
        // measured says nothing of how well the sweep reads between counts.
        if grid.nodes[ni] < 2 || !grid.swept(ni) {
            continue;
        }
        for si in (0..grid.sizes.len()).filter(|&si| grid.swept_size(si)) {
            for c in 1..grid.configs.len() {
                let Some(p) = gain_at(grid, widen, ni, c, log2_size(grid, si)) else {
                    continue;
                };
                let Some(r) = read(
                    grid,
                    widen,
                    align,
                    grid.nodes[ni] as f64,
                    si,
                    c,
                    Some(ni),
                    // Read off the sweep's other counts alone: a traced
                    // point as a neighbour would make the calibration move
                    // with every round's traces (which measure where
                    // readings were least sure), so a round could widen
                    // every reading's uncertainty and drop forces no job
                    // measured.
                    Neighbours::Swept,
                ) else {
                    continue;
                };
                if p.gain.max(r.gain) <= RELEVANT {
                    continue;
                }
                out.push(CvError {
                    ni,
                    si,
                    cfg: c,
                    err: p.gain - r.gain,
                    drift: r.drift,
                    widen_var: r.widen_var,
                });
            }
        }
    }
    out
}

/// Calibrates the node-count model of one grid: picks the size alignment
/// that predicts the sweep's own multi-node counts best, and the drift
/// variance per size region.
pub fn calibrate(grid: &Grid, widen: &Widen) -> NodeModel {
    // The sweep's multi-node counts (traces never lend it a calibration).
    let multi = (0..grid.nodes.len())
        .filter(|&ni| grid.nodes[ni] >= 2 && grid.swept(ni))
        .count();
    let mut cv = Vec::new();
    let mut best: Option<(Align, f64, Vec<CvError>)> = None;
    for align in [Align::TotalBytes, Align::BytesPerRank] {
        let errs = cv_errors(grid, widen, align);
        let drift: f64 = errs.iter().map(|e| e.drift).sum();
        let sq: f64 = errs.iter().map(|e| e.err.powi(2)).sum();
        let kappa = if drift > 0.0 {
            (sq / drift).max(MIN_KAPPA)
        } else {
            f64::INFINITY
        };
        let rms = if errs.is_empty() {
            f64::NAN
        } else {
            (sq / errs.len() as f64).sqrt()
        };
        cv.push((align, rms, errs.len()));
        // Total bytes (nccl-tests' own axis) is kept unless bytes per rank
        // predicts clearly better: by more than twice the standard error of
        // a variance estimated from n errors, sqrt(2/n).
        let clearly = |b: &(Align, f64, Vec<CvError>)| {
            let n = errs.len().min(b.2.len()).max(1) as f64;
            kappa < b.1 * (1.0 - 2.0 * (2.0 / n).sqrt())
        };
        if best.as_ref().is_none_or(clearly) {
            best = Some((align, kappa, errs));
        }
    }
    let (align, pooled, errs) = best.expect("two alignments tried");
    if multi < 2 || errs.is_empty() || !pooled.is_finite() {
        return NodeModel {
            align,
            kappa: None,
            extrapolates_down: false,
            cv,
            size_corr: None,
        };
    }
    let lsz: Vec<f64> = grid
        .sizes
        .iter()
        .map(|&s| (s.max(1) as f64).log2())
        .collect();
    let kappa: Vec<f64> = (0..grid.sizes.len())
        .map(|si| {
            let (mut ex, mut dr) = (0.0, 0.0);
            for e in &errs {
                if (lsz[e.si] - lsz[si]).abs() <= REGION_OCTAVES {
                    ex += e.err.powi(2);
                    dr += e.drift;
                }
            }
            if dr > 0.0 {
                (ex / dr).max(MIN_KAPPA)
            } else {
                pooled
            }
        })
        .collect();
    let size_corr = size_correlation(grid, &errs, &kappa);
    NodeModel {
        align,
        kappa: Some(kappa),
        extrapolates_down: multi >= MIN_COUNTS_TO_EXTRAPOLATE_DOWN,
        cv,
        size_corr,
    }
}

/// Fewest pairs of neighbouring sizes [`size_correlation`] estimates from:
/// a correlation from n pairs has a standard error of about 1/sqrt(n).
const MIN_SIZE_PAIRS: usize = 16;

/// How alike one setting's reading errors are at neighbouring sizes of one
/// count, per octave: from the cross-validation's errors (each standardised
/// by its calibrated sd), the pooled correlation of every pair of
/// neighbouring sizes read for the same setting at the same held-out count,
/// taken per octave of their distance. A count whose regime the sweep's
/// others mispredict (NCCL changing algorithm there, a link saturating) is
/// mispredicted alike over a run of sizes, which is what lets one size's
/// measurement correct its neighbours' readings.
fn size_correlation(grid: &Grid, errs: &[CvError], kappa: &[f64]) -> Option<f64> {
    let z = |e: &CvError| {
        let v = kappa[e.si] * e.drift + e.widen_var;
        (v > 0.0).then(|| e.err / v.sqrt())
    };
    let mut order: Vec<&CvError> = errs.iter().collect();
    order.sort_by_key(|e| (e.ni, e.cfg, e.si));
    let (mut cross, mut own, mut octaves, mut n) = (0.0, 0.0, 0.0, 0usize);
    for w in order.windows(2) {
        let (a, b) = (w[0], w[1]);
        if (a.ni, a.cfg) != (b.ni, b.cfg) {
            continue;
        }
        let (Some(za), Some(zb)) = (z(a), z(b)) else {
            continue;
        };
        cross += za * zb;
        own += (za * za + zb * zb) / 2.0;
        octaves += log2_size(grid, b.si) - log2_size(grid, a.si);
        n += 1;
    }
    if n < MIN_SIZE_PAIRS || own <= 0.0 {
        return None;
    }
    let r = (cross / own).clamp(0.0, 1.0);
    let per = octaves / n as f64;
    Some(if per > 0.0 { r.powf(1.0 / per) } else { r })
}

/// At a count only traces measured, moves each setting's readings (read
/// off the sweep, per size: `reads[si][cfg]`) by what the jobs measured of
/// that setting at the nearest sizes on either side: the reading errors of
/// neighbouring sizes are correlated ([`NodeModel::size_corr`], an
/// Ornstein-Uhlenbeck process along log2 size), so a measured error at
/// one size predicts part of it at the next, and takes the same part of
/// its variance away. A reading where the jobs measured the setting (and
/// NCCL's choice) stays as it is: the measurement decides there.
pub fn borrow_across_sizes(
    grid: &Grid,
    model: &NodeModel,
    ni: usize,
    reads: &mut [Vec<Option<Reading>>],
) {
    let Some(rho) = model.size_corr.filter(|&r| r > 0.0) else {
        return;
    };
    for c in 1..grid.configs.len() {
        // The standardised errors the jobs measured: (log2 size, z).
        let known: Vec<(usize, f64)> = (0..grid.sizes.len())
            .filter_map(|si| {
                let (d, m) = (grid.get(ni, si, 0)?, grid.get(ni, si, c)?);
                let r = reads.get(si)?.get(c)?.as_ref()?;
                let sd = model.sd(si, r)?;
                (sd > 0.0).then(|| (si, ((d.ln_t - m.ln_t) - r.gain) / sd))
            })
            .collect();
        if known.is_empty() {
            continue;
        }
        for si in 0..grid.sizes.len() {
            if known.iter().any(|k| k.0 == si) {
                continue;
            }
            let Some(Some(r)) = reads.get(si).and_then(|v| v.get(c)) else {
                continue;
            };
            let Some(sd) = model.sd(si, r) else { continue };
            let below = known.iter().rev().find(|k| k.0 < si);
            let above = known.iter().find(|k| k.0 > si);
            let corr =
                |k: &(usize, f64)| rho.powf((log2_size(grid, si) - log2_size(grid, k.0)).abs());
            // The process is Markov: the nearest measured size on each side
            // carries all the others say.
            let (mean, left) = match (below, above) {
                (Some(lo), Some(hi)) => {
                    let (a, b) = (corr(lo), corr(hi));
                    let ab = rho.powf(log2_size(grid, hi.0) - log2_size(grid, lo.0));
                    let det = 1.0 - ab * ab;
                    if det <= 1e-9 {
                        // Errors alike over the whole span: read between
                        // the two, linearly in log2 size.
                        let w = (log2_size(grid, si) - log2_size(grid, lo.0))
                            / (log2_size(grid, hi.0) - log2_size(grid, lo.0));
                        ((1.0 - w) * lo.1 + w * hi.1, 0.0)
                    } else {
                        let wa = (a - b * ab) / det;
                        let wb = (b - a * ab) / det;
                        (wa * lo.1 + wb * hi.1, 1.0 - (a * wa + b * wb))
                    }
                }
                (Some(k), None) | (None, Some(k)) => {
                    let a = corr(k);
                    (a * k.1, 1.0 - a * a)
                }
                (None, None) => continue,
            };
            let mut moved = *r;
            moved.gain += mean * sd;
            moved.left = r.left * left.clamp(0.0, 1.0);
            reads[si][c] = Some(moved);
        }
    }
}

/// A configuration at a node count whose runs sit off the trend of the
/// node counts around it at most sizes, while the other configurations
/// there follow it.
#[derive(Clone, Debug, Serialize)]
pub struct OffTrend {
    pub nodes: u32,
    /// Neighbouring node counts the trend was read from.
    pub between: (u32, u32),
    pub config: String,
    /// Median offset: ln(t_measured) - ln(t_trend), relative to the other
    /// configurations at the same node count (negative = faster).
    pub offset: f64,
    /// Share of sizes whose offset has that sign and exceeds the noise.
    pub share: f64,
    pub sizes: usize,
}

impl OffTrend {
    /// One line for `compile` and `inspect`.
    pub fn describe(&self, coll: &str, ppn: u32) -> String {
        format!(
            "{coll} ppn {ppn}: the {} runs at {} nodes are {:.0} % {} than the trend of {} and {} \
             nodes at {:.0} % of {} sizes, while the other settings follow it; decisions leaning \
             on them are less certain",
            self.config,
            self.nodes,
            // Time taken, relative to the trend: 0.88x is "12 % faster".
            100.0 * (self.offset.exp() - 1.0).abs(),
            if self.offset < 0.0 {
                "faster"
            } else {
                "slower"
            },
            self.between.0,
            self.between.1,
            100.0 * self.share,
            self.sizes
        )
    }
}

/// The runs off their neighbours' trend in aggregated cells, described
/// (what `dyncc inspect` shows before anything is compiled).
pub fn off_trend_notes(cells: &[crate::record::Cell]) -> Vec<String> {
    let (grids, _) = crate::features::build_grids(cells);
    let mut out = Vec::new();
    for g in &grids {
        let sigma = crate::fit::noise(g);
        let ns = g.sizes.len();
        let (found, _) = consistency(g, &|ni, si| sigma[ni * ns + si]);
        out.extend(found.iter().map(|o| o.describe(g.coll.name(), g.ppn)));
    }
    out
}

/// An offset smaller than this (ln ratio) is not worth a report.
const OFF_TREND_MIN: f64 = 0.05;
/// ... and it must show at this share of sizes.
const OFF_TREND_SHARE: f64 = 0.6;

/// Finds runs off the trend of their neighbours: for every interior
/// multi-node count and configuration, ln(time) against the line through
/// the node counts on either side (log2 nodes), less the median of the same
/// residual over all configurations there (what the whole node count shares
/// is real, e.g. another network tier; what one configuration alone shows
/// is its run's). Returns the findings and the widening they imply.
pub fn consistency(grid: &Grid, sigma: &dyn Fn(usize, usize) -> f64) -> (Vec<OffTrend>, Widen) {
    let mut widen = Widen::none(grid);
    let mut found = Vec::new();
    // Trends run through the sweep's counts (a count only traces measured
    // is on another time base).
    let multi: Vec<usize> = (0..grid.nodes.len())
        .filter(|&ni| grid.nodes[ni] >= 2 && grid.swept(ni))
        .collect();
    let nc = grid.configs.len();
    for w in multi.windows(3) {
        let (a, m, b) = (w[0], w[1], w[2]);
        let (la, lm, lb) = (
            (grid.nodes[a] as f64).log2(),
            (grid.nodes[m] as f64).log2(),
            (grid.nodes[b] as f64).log2(),
        );
        let t = (lm - la) / (lb - la);
        // Per size: residual of every configuration measured at all three.
        let mut rel: Vec<Vec<(f64, f64)>> = vec![Vec::new(); nc];
        for si in 0..grid.sizes.len() {
            let res: Vec<Option<f64>> = (0..nc)
                .map(|c| {
                    // A trend in time runs within one base (see
                    // `features::Grid::traced`).
                    if [a, m, b].iter().any(|&ni| grid.traced(ni, si).is_some()) {
                        return None;
                    }
                    let (x, y, z) = (
                        grid.get(a, si, c)?,
                        grid.get(m, si, c)?,
                        grid.get(b, si, c)?,
                    );
                    Some(y.ln_t - ((1.0 - t) * x.ln_t + t * z.ln_t))
                })
                .collect();
            let mut all: Vec<f64> = res.iter().flatten().copied().collect();
            if all.len() < 3 {
                continue;
            }
            all.sort_by(f64::total_cmp);
            let med = all[all.len() / 2];
            for (c, r) in res.iter().enumerate() {
                if let Some(r) = r {
                    rel[c].push((r - med, sigma(m, si)));
                }
            }
        }
        for (c, v) in rel.iter().enumerate() {
            if v.len() < 4 {
                continue;
            }
            let mut xs: Vec<f64> = v.iter().map(|x| x.0).collect();
            xs.sort_by(f64::total_cmp);
            let off = xs[xs.len() / 2];
            if off.abs() < OFF_TREND_MIN {
                continue;
            }
            let agree = v
                .iter()
                .filter(|(r, s)| r.signum() == off.signum() && r.abs() > (2.0 * s).max(0.02))
                .count();
            let share = agree as f64 / v.len() as f64;
            if share < OFF_TREND_SHARE {
                continue;
            }
            found.push(OffTrend {
                nodes: grid.nodes[m],
                between: (grid.nodes[a], grid.nodes[b]),
                config: grid.configs[c].to_string(),
                offset: off,
                share,
                sizes: v.len(),
            });
        }
    }
    // A run off the trend also bends the trend lines of the node counts
    // beside it, which then look off by about half as much the other way:
    // keep, per configuration, only counts more off than their neighbours.
    let off_at = |f: &[OffTrend], cfg: &str, n: u32| {
        f.iter()
            .find(|o| o.config == cfg && o.nodes == n)
            .map_or(0.0, |o| o.offset.abs())
    };
    let keep: Vec<bool> = found
        .iter()
        .map(|o| {
            o.offset.abs() > off_at(&found, &o.config, o.between.0)
                && o.offset.abs() > off_at(&found, &o.config, o.between.1)
        })
        .collect();
    let found: Vec<OffTrend> = found
        .into_iter()
        .zip(keep)
        .filter_map(|(o, k)| k.then_some(o))
        .collect();
    for o in &found {
        if let (Some(ni), Some(c)) = (
            grid.nodes.iter().position(|&n| n == o.nodes),
            grid.configs.iter().position(|c| c.to_string() == o.config),
        ) {
            widen.set(ni, c, o.offset * o.offset);
        }
    }
    (found, widen)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::features::build_grids;
    use crate::features::tests::{cell, cfg};
    use crate::record::{Algo, Cell, Collective, Config, Proto};

    /// Default t = 10 + b/1e4 (x nodes^0.3); Tree/LL wins by `win(nodes)`
    /// below 64 KiB and loses by 30 % above.
    fn sweep(nodes: &[u32], win: impl Fn(u32) -> f64) -> Vec<Cell> {
        let mut v = Vec::new();
        for &n in nodes {
            for k in 3..28 {
                let b = 1u64 << k;
                let t = (10.0 + b as f64 / 1e4) * (n as f64).powf(0.3);
                v.push(cell(Collective::AllReduce, n, 8, b, Config::DEFAULT, t));
                let f = if b < 65536 { 1.0 / win(n) } else { 1.3 };
                v.push(cell(
                    Collective::AllReduce,
                    n,
                    8,
                    b,
                    cfg(Algo::Tree, Proto::LL),
                    t * f,
                ));
            }
        }
        v
    }

    /// What jobs at `n` nodes traced at `b` bytes: NCCL's default at the
    /// sweep helper's time there, Tree/LL `speedup` times faster.
    fn traced_pair(n: u32, b: u64, speedup: f64) -> [Cell; 2] {
        let t = (10.0 + b as f64 / 1e4) * (n as f64).powf(0.3);
        let base = crate::record::TimeBase::Trace { sd_ln: 0.02 };
        let mut d = cell(Collective::AllReduce, n, 8, b, Config::DEFAULT, t);
        d.base = base;
        let mut x = cell(
            Collective::AllReduce,
            n,
            8,
            b,
            cfg(Algo::Tree, Proto::LL),
            t / speedup,
        );
        x.base = base;
        [d, x]
    }

    const SIGMA: f64 = 0.01;

    #[test]
    fn readings_interpolate_in_log2_nodes_and_never_cross_to_one_node() {
        let (grids, _) = build_grids(&sweep(&[1, 2, 8, 32], |n| 1.0 + 0.05 * (n as f64).log2()));
        let g = &grids[0];
        let w = Widen::none(g);
        // 4 nodes lies a third of the way from 2 to 8 in log2... half: 1 of 2 octaves.
        let r = read(g, &w, Align::TotalBytes, 4.0, 5, 1, None, Neighbours::Any).unwrap();
        let expect = (1.0f64 + 0.05).ln() * 0.5 + (1.0f64 + 0.15).ln() * 0.5;
        assert!((r.gain - expect).abs() < 1e-9, "{} vs {expect}", r.gain);
        assert!(r.between);
        assert!((r.drift - 0.5).abs() < 1e-9, "bridge variance 1*1/2");
        // Beyond the largest: flat from it, drift growing with distance.
        let r = read(g, &w, Align::TotalBytes, 128.0, 5, 1, None, Neighbours::Any).unwrap();
        assert!((r.gain - 1.25f64.ln()).abs() < 1e-9);
        assert!((r.drift - 2.0).abs() < 1e-9);
        assert!(!r.between);
        // One node is never read off several.
        assert!(read(g, &w, Align::TotalBytes, 1.0, 5, 1, None, Neighbours::Any).is_none());
        // Leaving out 2 nodes, 2 nodes is read flat from 8 (not from 1).
        let r = read(
            g,
            &w,
            Align::TotalBytes,
            2.0,
            5,
            1,
            Some(1),
            Neighbours::Any,
        )
        .unwrap();
        assert!((r.gain - 1.15f64.ln()).abs() < 1e-9);
    }

    /// Sizes matched on bytes per rank: the largest size at 4 nodes matches
    /// a size past the largest 16 nodes measured. The reading used to pass
    /// 16 over and carry 2 nodes' gain flat (a bridge with one end): on the
    /// DGX-1V sweep at 1, 2 and 16 nodes, Tree/Simple, NCCL's own choice at
    /// 2 nodes and 14 % slower at 16, read +0.0 % at 4 nodes, 2 GiB, where
    /// it is 19 % slower, and a quarter of the communicators tried it.
    #[test]
    fn a_reading_at_the_largest_sizes_leans_on_both_counts_when_sizes_match_per_rank() {
        // Tree/LL loses 30 % at the large sizes at 2 nodes and 10 % at 16,
        // where it was swept up to 32 MiB only (NCCL's choice to 128 MiB).
        let tree = cfg(Algo::Tree, Proto::LL);
        let cells: Vec<Cell> = sweep(&[2, 16], |_| 1.0)
            .into_iter()
            .filter(|c| !(c.key.nnodes == 16 && c.key.config == tree && c.key.nbytes > 1 << 25))
            .map(|mut c| {
                if c.key.nnodes == 16 && c.key.config == tree && c.key.nbytes >= 65536 {
                    c.time_us *= 1.1 / 1.3;
                }
                c
            })
            .collect();
        let (grids, _) = build_grids(&cells);
        let g = &grids[0];
        let w = Widen::none(g);
        let last = g.sizes.len() - 1;
        let r = read(
            g,
            &w,
            Align::BytesPerRank,
            4.0,
            last,
            1,
            None,
            Neighbours::Any,
        )
        .unwrap();
        assert!(r.between);
        // 16 nodes' largest size with Tree/LL measured stands in, a third
        // of the way from 2 nodes (log2 4 between 1 and 4): not 2 nodes'
        // -30 % carried flat.
        let want = (2.0 * (1.0f64 / 1.3).ln() + (1.0f64 / 1.1).ln()) / 3.0;
        assert!((r.gain - want).abs() < 1e-9, "{r:?}");
        assert!((r.drift - 2.0 / 3.0).abs() < 1e-9, "bridge 1*2/3: {r:?}");
        // An edge is no measurement at the matched size: `agreed` must not
        // take it for one (it would drop the reading's uncertainty).
        assert_eq!((r.ends[0].is_some(), r.ends[1]), (true, None), "{r:?}");
        // Likewise the smallest sizes at 8 nodes, past 2 nodes' smallest.
        let r = read(g, &w, Align::BytesPerRank, 8.0, 0, 1, None, Neighbours::Any).unwrap();
        assert!(r.between && (r.drift - 2.0 / 3.0).abs() < 1e-9, "{r:?}");
        assert_eq!((r.ends[0], r.ends[1].is_some()), (None, true), "{r:?}");
        // Beyond every count, nothing is read past the sizes measured: at
        // 64 nodes the smallest sizes match sizes below 16 nodes' smallest.
        assert!(read(
            g,
            &w,
            Align::BytesPerRank,
            64.0,
            0,
            1,
            None,
            Neighbours::Any
        )
        .is_none());
    }

    #[test]
    fn uncertainty_grows_with_distance_and_with_drift() {
        let steady = build_grids(&sweep(&[2, 4, 8, 16, 32], |_| 1.2)).0;
        let drifting = build_grids(&sweep(&[2, 4, 8, 16, 32], |n| {
            if n % 16 == 0 {
                1.3
            } else {
                1.05
            }
        }))
        .0;
        let ms = calibrate(&steady[0], &Widen::none(&steady[0]));
        let md = calibrate(&drifting[0], &Widen::none(&drifting[0]));
        let w = Widen::none(&steady[0]);
        let near = read(&steady[0], &w, ms.align, 40.0, 5, 1, None, Neighbours::Any).unwrap();
        let far = read(&steady[0], &w, ms.align, 128.0, 5, 1, None, Neighbours::Any).unwrap();
        assert!(ms.sd(5, &far).unwrap() > ms.sd(5, &near).unwrap());
        let r = read(
            &drifting[0],
            &w,
            md.align,
            12.0,
            5,
            1,
            None,
            Neighbours::Any,
        )
        .unwrap();
        let rs = read(&steady[0], &w, ms.align, 12.0, 5, 1, None, Neighbours::Any).unwrap();
        assert!(
            md.sd(5, &r).unwrap() > 3.0 * ms.sd(5, &rs).unwrap(),
            "drifting gains must be less certain: {} vs {}",
            md.sd(5, &r).unwrap(),
            ms.sd(5, &rs).unwrap()
        );
    }

    /// Jobs' traces at a count between the sweep's (here measuring a gain
    /// far off the sweep's trend) leave the calibration as the sweep alone
    /// gives it: the uncertainty of every reading stays what it was. As a
    /// neighbour in the calibration's own readings, a round's traces
    /// widened it, and the next recompile dropped forces no job had
    /// measured (H100 world, sweep 1,2,4: 16 nodes 82.1 -> 76.7 % of the
    /// gain in round 3).
    #[test]
    fn the_calibration_does_not_move_with_traced_counts() {
        let cells = sweep(&[2, 8, 32], |n| 1.1 + 0.02 * (n as f64).log2());
        let (plain, _) = build_grids(&cells);
        let mut traced = cells.clone();
        for k in 3..16 {
            traced.extend(traced_pair(4, 1 << k, 1.6));
        }
        let (traced, _) = build_grids(&traced);
        let (p, t) = (&plain[0], &traced[0]);
        let (mp, mt) = (calibrate(p, &Widen::none(p)), calibrate(t, &Widen::none(t)));
        assert_eq!(mp.align, mt.align);
        assert_eq!(format!("{:?}", mp.cv), format!("{:?}", mt.cv));
        let at = |g: &Grid| g.sizes.iter().position(|&b| b == 1 << 10).unwrap();
        let r = |g: &Grid, m: &NodeModel| {
            let rd = read(
                g,
                &Widen::none(g),
                m.align,
                16.0,
                at(g),
                1,
                None,
                Neighbours::Swept,
            )
            .unwrap();
            m.sd(at(g), &rd).unwrap()
        };
        assert_eq!(r(p, &mp), r(t, &mt));
    }

    /// Tree/LL's gain at every count off by one amount at every size (a
    /// regime of the count) reads with errors alike across sizes; off by
    /// an amount of its own per size, with errors unrelated.
    #[test]
    fn reading_errors_alike_across_sizes_are_found_correlated() {
        let irregular =
            |x: u64| ((x.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40) % 1000) as f64 / 1000.0;
        let corr = |per_size: bool| {
            let mut v = Vec::new();
            for n in [2u32, 4, 8, 16, 32, 64] {
                for k in 3..28u64 {
                    let b = 1u64 << k;
                    let t = 10.0 + b as f64 / 1e4;
                    let key = if per_size {
                        u64::from(n) * 100 + k
                    } else {
                        u64::from(n)
                    };
                    let f = 1.0 / (1.2 + 0.3 * irregular(key));
                    v.push(cell(Collective::AllReduce, n, 8, b, Config::DEFAULT, t));
                    v.push(cell(
                        Collective::AllReduce,
                        n,
                        8,
                        b,
                        cfg(Algo::Tree, Proto::LL),
                        t * f,
                    ));
                }
            }
            let (grids, _) = build_grids(&v);
            let g = &grids[0];
            calibrate(g, &Widen::none(g)).size_corr.unwrap()
        };
        let (alike, unrelated) = (corr(false), corr(true));
        assert!(alike > 0.9, "{alike}");
        assert!(unrelated < 0.3, "{unrelated}");
    }

    /// Jobs measured Tree/LL at 4 nodes at 1 KiB only, 60 % faster where
    /// the sweep reads 10 %: its readings at the sizes around move toward
    /// that by the size correlation per octave of distance, and lose that
    /// share of their variance; the measured size keeps its reading.
    #[test]
    fn a_setting_jobs_measured_at_one_size_moves_its_readings_at_the_sizes_around() {
        let mut cells = sweep(&[2, 8, 32], |_| 1.1);
        cells.extend(traced_pair(4, 1 << 10, 1.6));
        let (grids, _) = build_grids(&cells);
        let g = &grids[0];
        let w = Widen::none(g);
        let mut model = calibrate(g, &w);
        model.size_corr = Some(0.5);
        let ni = g.nodes.iter().position(|&n| n == 4).unwrap();
        let reads = || -> Vec<Vec<Option<Reading>>> {
            (0..g.sizes.len())
                .map(|si| {
                    (0..g.configs.len())
                        .map(|c| {
                            (c > 0)
                                .then(|| {
                                    read(g, &w, model.align, 4.0, si, c, None, Neighbours::Swept)
                                })
                                .flatten()
                        })
                        .collect()
                })
                .collect()
        };
        let before = reads();
        let mut after = reads();
        borrow_across_sizes(g, &model, ni, &mut after);
        let at = |b: u64| g.sizes.iter().position(|&s| s == b).unwrap();
        let (m, r0) = (at(1 << 10), before[at(1 << 10)][1].unwrap());
        let sd = model.sd(m, &r0).unwrap();
        let z = (1.6f64.ln() - r0.gain) / sd;
        assert!(z > 1.0, "the jobs measured well off the reading: z {z}");
        assert_eq!(
            after[m][1].unwrap().gain,
            r0.gain,
            "the measured size keeps its reading"
        );
        for (k, rho) in [
            (1u64 << 11, 0.5),
            (1 << 9, 0.5),
            (1 << 12, 0.25),
            (1 << 20, 0.5f64.powi(10)),
        ] {
            let (b0, b1) = (before[at(k)][1].unwrap(), after[at(k)][1].unwrap());
            let sd_k = model.sd(at(k), &b0).unwrap();
            assert!(
                (b1.gain - (b0.gain + rho * z * sd_k)).abs() < 1e-9,
                "{k} bytes"
            );
            assert!((b1.left - (1.0 - rho * rho)).abs() < 1e-9, "{k} bytes");
        }
        // NCCL's default has no reading; no other setting was measured.
        assert!(after.iter().all(|v| v[0].is_none()));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]
        /// Whatever jobs measured, at whatever sizes, and however alike the
        /// errors: every corrected reading is finite, moves by no more than
        /// the largest measured error (in sds), and keeps a share of its
        /// variance between none and all.
        #[test]
        fn corrections_stay_within_what_the_jobs_measured(
            rho in 0.0f64..=1.0,
            measured in proptest::collection::btree_map(3u32..28, 0.4f64..2.5, 1..4),
        ) {
            let mut cells = sweep(&[2, 8, 32], |_| 1.1);
            for (&k, &f) in &measured {
                cells.extend(traced_pair(4, 1 << k, f));
            }
            let (grids, _) = build_grids(&cells);
            let g = &grids[0];
            let w = Widen::none(g);
            let mut model = calibrate(g, &w);
            model.size_corr = Some(rho);
            let ni = g.nodes.iter().position(|&n| n == 4).unwrap();
            let reads: Vec<Vec<Option<Reading>>> = (0..g.sizes.len())
                .map(|si| vec![None, read(g, &w, model.align, 4.0, si, 1, None, Neighbours::Swept)])
                .collect();
            let mut after = reads.clone();
            borrow_across_sizes(g, &model, ni, &mut after);
            let mut zmax: f64 = 0.0;
            for (si, r) in reads.iter().enumerate() {
                if let (Some(r), Some(d), Some(m)) = (r[1], g.get(ni, si, 0), g.get(ni, si, 1)) {
                    zmax = zmax.max(((d.ln_t - m.ln_t) - r.gain).abs() / model.sd(si, &r).unwrap());
                }
            }
            for (si, (b, a)) in reads.iter().zip(&after).enumerate() {
                let (Some(b), Some(a)) = (b[1], a[1]) else { continue };
                proptest::prop_assert!(a.gain.is_finite() && (0.0..=1.0).contains(&a.left));
                let moved = (a.gain - b.gain).abs();
                let bound = zmax * model.sd(si, &b).unwrap();
                proptest::prop_assert!(moved <= bound + 1e-9, "moved {moved} > {bound}");
            }
        }
    }

    #[test]
    fn allgather_curves_are_matched_on_bytes_per_rank() {
        // AllGather whose crossover sits at a fixed size per rank: Ring/LL
        // wins below 8 KiB per rank, i.e. total bytes growing with ranks.
        let mut v = Vec::new();
        for n in [2u32, 4, 8, 16, 32] {
            for k in 6..30 {
                let b = 1u64 << k;
                let per_rank = b / (n as u64 * 8);
                let t = 10.0 + b as f64 / 1e4;
                v.push(cell(Collective::AllGather, n, 8, b, Config::DEFAULT, t));
                let f = if per_rank < 8192 { 0.8 } else { 1.25 };
                v.push(cell(
                    Collective::AllGather,
                    n,
                    8,
                    b,
                    cfg(Algo::Ring, Proto::LL),
                    t * f,
                ));
            }
        }
        let (grids, _) = build_grids(&v);
        let m = calibrate(&grids[0], &Widen::none(&grids[0]));
        assert_eq!(m.align, Align::BytesPerRank, "{:?}", m.cv);
    }

    #[test]
    fn default_runs_off_the_trend_at_one_node_count_are_found_and_widened() {
        let mut cells = sweep(&[2, 4, 8, 16, 32], |_| 1.1);
        // A third configuration, so "the others" have a median.
        let ring: Vec<Cell> = cells
            .iter()
            .filter(|c| c.key.config.is_default())
            .map(|c| {
                let mut x = c.clone();
                x.key.config = cfg(Algo::Ring, Proto::LL);
                x.time_us *= 1.1;
                x
            })
            .collect();
        cells.extend(ring);
        // The default runs at 8 nodes are 12 % faster than the trend.
        for c in &mut cells {
            if c.key.nnodes == 8 && c.key.config.is_default() {
                c.time_us *= 0.88;
            }
        }
        let (grids, _) = build_grids(&cells);
        let g = &grids[0];
        let sig = |_: usize, _: usize| SIGMA;
        let (found, widen) = consistency(g, &sig);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].nodes, 8);
        assert_eq!(found[0].config, "default");
        assert!(found[0].offset < -0.1);
        let ni = g.nodes.iter().position(|&n| n == 8).unwrap();
        assert!(widen.get(ni, 0) > 0.01);
        assert_eq!(widen.get(ni, 1), 0.0);
        // Steady runs: nothing found.
        let (grids, _) = build_grids(&sweep(&[2, 4, 8, 16, 32], |_| 1.1));
        assert!(consistency(&grids[0], &sig).0.is_empty());
    }
}
