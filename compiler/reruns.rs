//! Repeats of one setting inside one file that disagree: a sweep rerun
//! appended to the same CSV, or an nccl-tests log holding two runs of the
//! same setting, where one of the runs was slowed (a degraded node, another
//! job on the links). Across files, `pipeline::check_repeats` compares each
//! file's median; inside one file the same rule compares the file's passes.
//!
//! A *pass* of a group (one cell, placement and data type in one file) is a
//! stretch of its samples read one right after another (repeats printed
//! row after row are one pass: one run measuring the cell several times);
//! a sample read after other rows starts the next pass. A rerun appended to
//! a file is then pass 1 of every cell it repeats, the `r`-th sweep of a
//! file that sweeps `R` times is pass `r`. A pass is off when, at
//! [`REPEAT_MIN_CELLS`] cells or more of its file, it is the slower or the
//! faster end of a cell whose passes differ by more than the across-file
//! limit ([`REPEAT_SD`] sd of the difference of two measurements, at least
//! [`REPEAT_MIN_FACTOR`]): a broken run shows at many cells, one noisy or
//! warm-up sample at one.
//!
//! The noise behind the limit is measured within passes (the repeats of a
//! pass, else the roughness of each pass's curve over sizes): the spread
//! between passes is what is being judged, and a rerun 3x slower would
//! otherwise raise the noise estimate until nothing disagrees.
//!
//! Cost: one pass over every sample, on every core, keeping two figures a
//! group; the noise is estimated only when some cell's passes are further
//! apart than [`REPEAT_MIN_FACTOR`], from at most `NOISE_PASSES` passes a
//! group.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rayon::prelude::*;

use crate::fit::{repeat_variance, sigma_from_curves};
use crate::ingest::fold::{Folded, Group, Sample};
use crate::ingest::Skip;
use crate::record::CellKey;

/// Repeats of one cell from two files disagree when the log of their
/// medians' ratio exceeds this many standard deviations of the difference
/// of two measurements (sqrt(2) times the sweep's own noise, see
/// `pipeline::sweep_noise`). Noise of 5 sd or more happens about once in 1.7
/// million cells for normal noise; a broken run must also show it at
/// [`REPEAT_MIN_CELLS`] cells.
pub const REPEAT_SD: f64 = 5.0;

/// Runs of one setting from different jobs (another day, another
/// allocation, other traffic on the links) differ by more than one run's
/// own noise; real sweeps repeated across jobs differ by 10-20 % at places.
/// Below this factor a disagreement is read as that, not as a broken run
/// (the degraded reruns this check exists for are 2-5x off).
pub const REPEAT_MIN_FACTOR: f64 = 1.5;

/// ... at this many cells between the same two files (fewer is a warm-up
/// artefact, not a broken run).
pub const REPEAT_MIN_CELLS: usize = 3;

/// Passes a group contributes to the noise estimate, at most: the first
/// ones (a sweep repeated 700 times in one file does not need all 700 to
/// know its noise).
const NOISE_PASSES: usize = 16;

/// A cell whose repeats disagree, as the repeat checks report and keep it
/// out: the cell, the platform (or GPU) it was measured on, and the
/// sentence that says so (`FILE:LINE: ...`).
pub(crate) struct Disagreeing {
    pub key: CellKey,
    pub platform: Option<String>,
    pub what: String,
}

/// One pass of a group: its median time, first line, index and reading
/// orders (consecutive: `seqs.0..=seqs.1`).
#[derive(Clone, Copy)]
struct Pass {
    median: f64,
    line: u32,
    index: u32,
    seqs: (u32, u32),
}

/// Calls `each` with every pass of `g` (its samples with a usable time), in
/// reading order; stops after `max` passes.
fn passes(g: &Group, max: usize, mut each: impl FnMut(Pass, &[f64])) {
    let mut block: Vec<f64> = Vec::new();
    let mut sorted: Vec<f64> = Vec::new();
    let (mut first_line, mut first_seq) = (0, 0);
    let mut prev: Option<u32> = None;
    let mut index = 0u32;
    let mut flush = |block: &mut Vec<f64>, line: u32, seqs: (u32, u32), index: &mut u32| {
        if block.is_empty() {
            return;
        }
        sorted.clear();
        sorted.extend_from_slice(block);
        let median = crate::stats::median(&mut sorted).unwrap_or(f64::NAN);
        each(
            Pass {
                median,
                line,
                index: *index,
                seqs,
            },
            block,
        );
        *index += 1;
        block.clear();
    };
    for Sample { time_us, line, seq } in g.samples.iter() {
        if let Some(p) = prev.filter(|&p| seq != p.wrapping_add(1)) {
            flush(&mut block, first_line, (first_seq, p), &mut index);
            if index as usize >= max {
                return;
            }
        }
        if block.is_empty() {
            (first_line, first_seq) = (line, seq);
        }
        prev = Some(seq);
        if time_us.is_finite() && time_us > 0.0 {
            block.push(time_us);
        }
    }
    if let Some(p) = prev {
        flush(&mut block, first_line, (first_seq, p), &mut index);
    }
}

/// A group's fastest and slowest passes.
struct Ends {
    group: usize,
    lo: Pass,
    hi: Pass,
}

fn ends(gi: usize, g: &Group) -> Option<Ends> {
    let mut lo: Option<Pass> = None;
    let mut hi: Option<Pass> = None;
    passes(g, usize::MAX, |p, _| {
        if !p.median.is_finite() {
            return;
        }
        if lo.is_none_or(|l| p.median < l.median) {
            lo = Some(p);
        }
        if hi.is_none_or(|h| p.median > h.median) {
            hi = Some(p);
        }
    });
    Some(Ends {
        group: gi,
        lo: lo?,
        hi: hi?,
    })
}

/// Whether ln of a ratio is past `limit` either way (or not a number).
fn far(ln_ratio: f64, limit: f64) -> bool {
    use std::cmp::Ordering::{Equal, Less};
    !matches!(ln_ratio.abs().partial_cmp(&limit), Some(Less | Equal))
}

/// The passes of one group off the others: further than `limit` (ln) from
/// their median with three passes or more; with two, both (which one is
/// off is for [`Found::keep_out`] to say).
fn off_passes(all: &[Pass], limit: f64) -> Vec<Pass> {
    if all.len() < 3 {
        let apart = match all {
            [a, b] => far((a.median / b.median).ln(), limit),
            _ => false,
        };
        return if apart { all.to_vec() } else { Vec::new() };
    }
    let mut meds: Vec<f64> = all.iter().map(|p| p.median).collect();
    let Some(reference) = crate::stats::median(&mut meds) else {
        return Vec::new();
    };
    all.iter()
        .filter(|p| far((p.median / reference).ln(), limit))
        .copied()
        .collect()
}

/// Measurements the checks trust (not flagged, not empty).
fn trusted(g: &Group) -> bool {
    g.key.flags == 0 && !g.samples.is_empty()
}

/// The sd of one measurement's ln(time) within a pass: the repeats of a
/// pass where there are any, else the roughness of each pass's curve over
/// neighbouring sizes (see [`crate::fit::noise`]).
fn noise_within_passes(f: &Folded) -> f64 {
    let mut rep: Vec<f64> = Vec::new();
    // Per pass's curve (file, run, placement, type, pass): ln of its median
    // per size.
    type Curve<'a> = (&'a Path, &'a crate::record::Run, bool, Option<&'a str>, u32);
    let mut curves: HashMap<Curve<'_>, BTreeMap<u64, f64>> = HashMap::new();
    for g in f.groups.iter().filter(|g| trusted(g)) {
        passes(g, NOISE_PASSES, |p, times| {
            if times.len() >= 2 {
                let (lo, hi) = times
                    .iter()
                    .fold((f64::INFINITY, 0.0f64), |(l, h), &t| (l.min(t), h.max(t)));
                rep.push(repeat_variance((hi / lo).ln(), times.len() as u32));
            }
            if p.median.is_finite() {
                curves
                    .entry((
                        g.key.file.as_path(),
                        &g.key.run,
                        g.key.in_place,
                        g.key.dtype.as_deref(),
                        p.index,
                    ))
                    .or_default()
                    .insert(g.key.nbytes, p.median.ln());
            }
        });
    }
    sigma_from_curves(&mut rep, curves.values())
}

/// The cells whose repeats inside one file disagree, and what to keep out
/// of them under `--lenient`.
pub(crate) struct Found {
    /// One a cell and file, in the order their files read.
    pub bad: Vec<Disagreeing>,
    /// Each one's file, as `bad`.
    files: Vec<Arc<PathBuf>>,
    /// ln of the factor repeats may differ by.
    limit: f64,
}

/// Which platform (or GPU) a group was measured on, as the repeat checks
/// tell cells apart.
fn platform_of(g: &Group) -> Option<String> {
    g.key
        .run
        .platform
        .as_deref()
        .or(g.key.run.gpu.as_deref())
        .map(String::from)
}

/// Finds the cells whose repeats inside one file disagree (see the module
/// documentation).
pub(crate) fn in_file(f: &Folded) -> Found {
    let floor = REPEAT_MIN_FACTOR.ln();
    let none = Found {
        bad: Vec::new(),
        files: Vec::new(),
        limit: floor,
    };
    let ends_far = |e: &Ends, limit: f64| far((e.hi.median / e.lo.median).ln(), limit);
    // Most groups are one pass (a sweep of distinct cells, or repeats
    // printed row after row): only their samples are read.
    let mut apart: Vec<Ends> = f
        .groups
        .par_iter()
        .enumerate()
        .filter(|(_, g)| trusted(g) && g.samples.len() >= 2)
        .filter_map(|(gi, g)| ends(gi, g))
        .filter(|e| ends_far(e, floor))
        .collect();
    if apart.len() < REPEAT_MIN_CELLS {
        return none;
    }
    let sigma = noise_within_passes(f);
    let limit = (REPEAT_SD * std::f64::consts::SQRT_2 * sigma).max(floor);
    apart.retain(|e| ends_far(e, limit));
    // The rows of the passes off the others, as reading-order ranges.
    let groups = &f.groups;
    type CellOf = (CellKey, Option<String>);
    struct OffRows {
        seqs: (u32, u32),
        apart: usize,
    }
    let mut off_rows: Vec<OffRows> = Vec::new();
    for (ai, e) in apart.iter().enumerate() {
        let g = &groups[e.group];
        let mut all: Vec<Pass> = Vec::new();
        passes(g, usize::MAX, |p, _| all.push(p));
        for p in off_passes(&all, limit) {
            off_rows.push(OffRows {
                seqs: p.seqs,
                apart: ai,
            });
        }
    }
    off_rows.sort_unstable_by_key(|o| o.seqs);
    // Stretches of off rows read one after another (one other row between
    // allowed: the other placement of an nccl-tests line), in one file.
    let mut flagged: HashSet<usize> = HashSet::new();
    let mut at = 0;
    while at < off_rows.len() {
        let file = groups[apart[off_rows[at].apart].group].key.file.as_path();
        let mut end = at + 1;
        let mut last = off_rows[at].seqs.1;
        while end < off_rows.len()
            && off_rows[end].seqs.0 <= last.saturating_add(2)
            && groups[apart[off_rows[end].apart].group].key.file.as_path() == file
        {
            last = last.max(off_rows[end].seqs.1);
            end += 1;
        }
        let stretch = &off_rows[at..end];
        let cells: HashSet<CellOf> = stretch
            .iter()
            .map(|o| {
                let g = &groups[apart[o.apart].group];
                (g.key.cell(), platform_of(g))
            })
            .collect();
        if cells.len() >= REPEAT_MIN_CELLS {
            flagged.extend(stretch.iter().map(|o| o.apart));
        }
        at = end;
    }
    // One report per cell and file: its placement (or type) furthest apart.
    let ratio = |e: &Ends| e.hi.median / e.lo.median;
    let mut worst: HashMap<(&Path, CellOf), &Ends> = HashMap::new();
    for &ai in &flagged {
        let e = &apart[ai];
        let g = &groups[e.group];
        worst
            .entry((g.key.file.as_path(), (g.key.cell(), platform_of(g))))
            .and_modify(|w| {
                if ratio(e) > ratio(w) || (ratio(e) == ratio(w) && e.group < w.group) {
                    *w = e;
                }
            })
            .or_insert(e);
    }
    // In the order the files read (the refusal names the first).
    let mut worst: Vec<((&Path, CellOf), &Ends)> = worst.into_iter().collect();
    worst.sort_by_key(|((file, _), e)| (*file, e.hi.line, e.lo.line, e.group));
    let mut found = Found {
        bad: Vec::with_capacity(worst.len()),
        files: Vec::with_capacity(worst.len()),
        limit,
    };
    for ((_, (key, platform)), e) in worst {
        let g = &groups[e.group];
        let what = format!(
            "{}:{}: {} {} ranks on {} node(s), {} bytes, {}: {:.2} us here but {:.2} us at \
             line {} of the same file ({:.1}x apart); expected repeats of one measurement in \
             one file to agree within {:.2}x (the larger of {REPEAT_SD} sd of the sweep's own \
             noise within a run, {:.1} %, and {REPEAT_MIN_FACTOR}x between runs) (was one run \
             on a degraded node, or sharing the links with another job?)",
            g.key.file.display(),
            e.hi.line,
            key.collective.name(),
            key.nranks,
            key.nnodes,
            key.nbytes,
            key.config,
            e.hi.median,
            e.lo.median,
            e.lo.line,
            ratio(e),
            limit.exp(),
            sigma * 100.0,
        );
        found.bad.push(Disagreeing {
            key,
            platform,
            what,
        });
        found.files.push(g.key.file.clone());
    }
    found
}

impl Found {
    /// Keeps out, in each flagged cell's file, the passes off the others
    /// and lists each cell as skipped. The others are the cell's passes'
    /// median with three passes or more; with two, the faster one: a
    /// degraded node or another job's traffic slows a run down, nothing
    /// makes one faster than the hardware is, and two runs in one file are
    /// one job on one allocation. A cell whose kept passes would still
    /// disagree is dropped from that file whole.
    pub(crate) fn keep_out(self, f: &mut Folded, skipped: &mut Vec<Skip>) {
        let limit = self.limit;
        let flagged: HashMap<(&Path, CellKey, Option<String>), usize> = self
            .files
            .iter()
            .zip(&self.bad)
            .enumerate()
            .map(|(i, (file, b))| ((file.as_path(), b.key, b.platform.clone()), i))
            .collect();
        // Per flagged cell: rows kept out and the first line of each pass
        // kept out.
        let mut out: Vec<(usize, BTreeSet<u32>)> = vec![(0, BTreeSet::new()); self.bad.len()];
        for g in f.groups.iter_mut().filter(|g| trusted(g)) {
            let Some(&at) = flagged.get(&(g.key.file.as_path(), g.key.cell(), platform_of(g)))
            else {
                continue;
            };
            let mut all: Vec<Pass> = Vec::new();
            passes(g, usize::MAX, |p, _| all.push(p));
            let mut off = off_passes(&all, limit);
            if off.len() == 2 && all.len() == 2 {
                // Two runs apart: the slower is the one slowed.
                off.retain(|p| p.median >= all[0].median.max(all[1].median));
                off.truncate(1);
            }
            let kept = all
                .iter()
                .filter(|p| !off.iter().any(|o| o.index == p.index));
            let (lo, hi) = kept.fold((f64::INFINITY, 0.0f64), |(l, h), p| {
                (l.min(p.median), h.max(p.median))
            });
            let whole = !lo.is_finite() || far((hi / lo).ln(), limit);
            let before = g.samples.len();
            if whole {
                g.samples.retain(|_| false);
                out[at].1.extend(all.iter().map(|p| p.line));
            } else {
                g.samples
                    .retain(|s| !off.iter().any(|p| (p.seqs.0..=p.seqs.1).contains(&s.seq)));
                out[at].1.extend(off.iter().map(|p| p.line));
            }
            out[at].0 += before - g.samples.len();
        }
        f.groups.retain(|g| !g.samples.is_empty());
        for ((b, file), (rows, lines)) in self.bad.into_iter().zip(self.files).zip(out) {
            let (place, reason) = b.what.split_once(": ").unwrap_or(("", &b.what));
            let line = place
                .rsplit_once(':')
                .map_or(0, |(_, l)| l.parse().unwrap_or(0));
            let lines: Vec<String> = lines.iter().map(u32::to_string).collect();
            skipped.push(Skip {
                file: (*file).clone(),
                line,
                reason: format!(
                    "{reason}; kept out {rows} row(s), the run(s) off the others at line(s) {}",
                    lines.join(", ")
                ),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Measurement, Record, Run, Source};

    /// `passes` runs of one setting over 30 sizes in one file, pass `p`'s
    /// time at size `i` times `factor(p, i)`.
    fn file(passes: usize, factor: impl Fn(usize, usize) -> f64) -> Folded {
        let mut v = Vec::new();
        for p in 0..passes {
            for i in 0..30 {
                let nbytes = 8u64 << i;
                v.push(Record {
                    run: Run::example(),
                    measurement: Measurement {
                        nbytes,
                        time_us: (10.0 + nbytes as f64 / 1e4) * factor(p, i),
                        in_place: false,
                        dtype: None,
                        source: Source {
                            file: Arc::new(PathBuf::from("sweep.csv")),
                            line: (2 + p * 30 + i) as u32,
                        },
                        flags: 0,
                    },
                });
            }
        }
        Folded::from_records(v)
    }

    /// One noisy sample at a cell here and there is noise, however many
    /// cells: a broken run is off at rows read one after another.
    #[test]
    fn scattered_spikes_are_not_a_broken_run() {
        let f = file(2, |p, i| if p == 1 && i % 3 == 0 { 2.0 } else { 1.0 });
        assert!(in_file(&f).bad.is_empty());
        let f = file(2, |p, i| {
            if p == 1 && (10..13).contains(&i) {
                2.0
            } else {
                1.0
            }
        });
        let found = in_file(&f);
        assert_eq!(found.bad.len(), 3);
        assert!(
            found.bad[0].what.starts_with("sweep.csv:42: "),
            "{}",
            found.bad[0].what
        );
        assert!(found.bad[0]
            .what
            .contains("at line 12 of the same file (2.0x apart)"));
        // Two rows off only: a warm-up artefact's size.
        let f = file(2, |p, i| {
            if p == 1 && (10..12).contains(&i) {
                2.0
            } else {
                1.0
            }
        });
        assert!(in_file(&f).bad.is_empty());
    }

    /// With three passes or more the median says which one is off: only
    /// it is kept out, also when it is the faster one.
    #[test]
    fn the_pass_off_the_others_is_kept_out() {
        for (slow, off) in [(3.0, 2), (1.0 / 3.0, 1)] {
            let mut f = file(3, |p, i| if p == off && i < 20 { slow } else { 1.0 });
            let found = in_file(&f);
            assert_eq!(found.bad.len(), 20);
            let mut skipped = Vec::new();
            found.keep_out(&mut f, &mut skipped);
            assert_eq!(skipped.len(), 20);
            assert_eq!(f.len(), 90 - 20);
            let first_off = (2 + off * 30) as u32;
            assert!(
                skipped[0].reason.ends_with(&format!(
                    "kept out 1 row(s), the run(s) off the others at line(s) {first_off}"
                )),
                "{}",
                skipped[0].reason
            );
            for g in &f.groups {
                assert!(g
                    .samples
                    .iter()
                    .all(|s| s.line < first_off || s.line >= first_off + 20));
            }
            assert!(in_file(&f).bad.is_empty());
        }
    }
}
