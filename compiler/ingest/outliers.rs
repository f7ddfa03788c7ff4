//! Warm-up outliers: a sample far above the same run's neighbouring sizes
//! and its own repeats is flagged, reported and kept out of fitting.

use std::collections::HashMap;
use std::path::Path;

use super::{fold, Anomaly, Dataset, UNRESOLVED};
use crate::record::{flags, CellKey};

/// Flags warm-up artefacts: a sample more than [`OUTLIER_FACTOR`] times
/// the median of the same configuration at the adjacent sizes in the same
/// file AND (when the size has other samples there, e.g. the other
/// placement) more than that factor times their median.
pub fn flag_outliers(ds: &mut Dataset) {
    let rows = !ds.records.is_empty();
    let mut f = ds.take_folded();
    flag_outliers_folded(&mut f, &mut ds.anomalies);
    if rows {
        ds.records = f.into_records();
    } else {
        ds.folded = f;
    }
}

/// [`flag_outliers`] on folded measurements: flagged samples move to a
/// group flagged [`flags::WARMUP_OUTLIER`]; one anomaly each, in reading
/// order.
pub fn flag_outliers_folded(f: &mut fold::Folded, anomalies: &mut Vec<Anomaly>) {
    // Group by cell key without size; sizes sorted within.
    // Warm-up artefacts are a property of one run: compare a sample with its
    // own file's neighbours and repeats, never with other runs or hardware
    // that happen to share a cell key.
    let mut families: HashMap<(CellKey, &Path, Option<&str>), Vec<usize>> = HashMap::new();
    for (gi, g) in f.groups.iter().enumerate() {
        if g.key.flags & (UNRESOLVED | flags::WRONG_DATA) != 0 || g.samples.is_empty() {
            continue;
        }
        let mut k = g.key.cell();
        k.nbytes = 0;
        families
            .entry((k, g.key.file.as_path(), g.key.run.gpu.as_deref()))
            .or_default()
            .push(gi);
    }
    /// A sample found off: its group, its index there, the neighbours' median.
    struct Off {
        group: usize,
        sample: usize,
        nmed: f64,
    }
    let mut off: Vec<Off> = Vec::new();
    let groups = &f.groups;
    for (_, mut members) in families {
        members.sort_by_key(|&gi| groups[gi].key.nbytes);
        // Per size, the groups there.
        let mut by_size: Vec<&[usize]> = Vec::new();
        let mut rest = &members[..];
        while let Some(&first) = rest.first() {
            let s = groups[first].key.nbytes;
            let n = rest
                .iter()
                .take_while(|&&gi| groups[gi].key.nbytes == s)
                .count();
            by_size.push(&rest[..n]);
            rest = &rest[n..];
        }
        // Each size's times sorted once (unstable is the same order: equal
        // is equal bits); a median of two neighbours then merges two runs.
        let sorted: Vec<Vec<f64>> = by_size
            .iter()
            .map(|gs| {
                let mut v: Vec<f64> = gs
                    .iter()
                    .flat_map(|&gi| groups[gi].samples.times())
                    .collect();
                v.sort_unstable_by(f64::total_cmp);
                v
            })
            .collect();
        for (j, here) in by_size.iter().enumerate() {
            let mut neigh: Vec<f64> = Vec::new();
            if j > 0 {
                neigh.extend(&sorted[j - 1]);
            }
            if j + 1 < by_size.len() {
                neigh.extend(&sorted[j + 1]);
            }
            let Some(nmed) = crate::stats::median(&mut neigh) else {
                continue;
            };
            for &gi in here.iter() {
                for (si, s) in groups[gi].samples.iter().enumerate() {
                    if s.time_us <= OUTLIER_FACTOR * nmed {
                        continue;
                    }
                    let mut others: Vec<f64> = here
                        .iter()
                        .flat_map(|&o| {
                            groups[o]
                                .samples
                                .iter()
                                .enumerate()
                                .filter(move |&(oi, _)| (o, oi) != (gi, si))
                                .map(|(_, x)| x.time_us)
                        })
                        .collect();
                    let off_repeats = match crate::stats::median(&mut others) {
                        Some(m) => s.time_us > OUTLIER_FACTOR * m,
                        None => true,
                    };
                    if off_repeats {
                        off.push(Off {
                            group: gi,
                            sample: si,
                            nmed,
                        });
                    }
                }
            }
        }
    }
    if off.is_empty() {
        return;
    }
    off.sort_unstable_by_key(|o| f.groups[o.group].samples.get(o.sample).seq);
    for o in &off {
        let g = &f.groups[o.group];
        let s = g.samples.get(o.sample);
        anomalies.push(Anomaly {
            file: (*g.key.file).clone(),
            line: s.line,
            kind: "warmup-outlier",
            detail: format!(
                "{} {} B {}: {:.1} us is more than {}x the {:.1} us at adjacent sizes; kept out of fitting",
                g.key.run.collective.name(),
                g.key.nbytes,
                if g.key.in_place { "in-place" } else { "out-of-place" },
                s.time_us,
                OUTLIER_FACTOR,
                o.nmed
            ),
        });
    }
    // Move each flagged sample into its group's flagged twin.
    let mut moved: HashMap<usize, Vec<usize>> = HashMap::new();
    for o in &off {
        moved.entry(o.group).or_default().push(o.sample);
    }
    // Flagged groups already there (flagged before, e.g. read twice).
    let mut twins: HashMap<fold::GroupKey, usize> = f
        .groups
        .iter()
        .enumerate()
        .filter(|(_, g)| g.key.flags & flags::WARMUP_OUTLIER != 0)
        .map(|(i, g)| (g.key.clone(), i))
        .collect();
    for (gi, mut idx) in moved {
        idx.sort_unstable();
        let mut key = f.groups[gi].key.clone();
        key.flags |= flags::WARMUP_OUTLIER;
        let samples = &mut f.groups[gi].samples;
        let mut taken = Vec::with_capacity(idx.len());
        for &si in idx.iter().rev() {
            taken.push(samples.remove(si));
        }
        let at = match twins.get(&key) {
            Some(&t) => t,
            None => {
                f.groups.push(fold::Group {
                    key: key.clone(),
                    samples: Default::default(),
                });
                twins.insert(key, f.groups.len() - 1);
                f.groups.len() - 1
            }
        };
        f.groups[at].samples.extend(taken);
        f.groups[at].samples.sort_by_seq();
    }
    f.groups.retain(|g| !g.samples.is_empty());
}

/// How far off its neighbours a sample must be to count as a warm-up artefact.
pub const OUTLIER_FACTOR: f64 = 10.0;

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::sync::Arc;

    use super::*;
    use crate::ingest::test_util::rec;

    /// A K80 run and an H100 run of the same shape once flagged every K80
    /// row as a warm-up artefact: runs are judged only against themselves.
    #[test]
    fn warmup_outliers_are_not_judged_against_other_runs() {
        let other = |n, t, f: &str| {
            let mut r = rec(n, t, false);
            r.measurement.source.file = Arc::new(PathBuf::from(f));
            r
        };
        let mut ds = Dataset {
            records: vec![
                other(8, 10.0, "h100.log"),
                other(16, 10.0, "h100.log"),
                other(32, 10.0, "h100.log"),
                other(16, 900.0, "k80.log"),
            ],
            ..Default::default()
        };
        flag_outliers(&mut ds);
        assert!(ds.records.iter().all(|r| r.measurement.flags == 0));
    }

    #[test]
    fn warmup_outlier_is_flagged_only_when_off_neighbours_and_repeats() {
        let mut ds = Dataset {
            records: vec![
                rec(8, 500.0, false), // warm-up artefact
                rec(8, 10.0, true),
                rec(16, 10.5, false),
                rec(16, 10.4, true),
                rec(32, 11.0, false),
                rec(32, 11.2, true),
            ],
            ..Default::default()
        };
        flag_outliers(&mut ds);
        assert_eq!(ds.records[0].measurement.flags, flags::WARMUP_OUTLIER);
        assert!(ds.records[1..].iter().all(|r| r.measurement.flags == 0));
        assert_eq!(ds.anomalies.len(), 1);
        // A genuine cliff seen by both placements is not an outlier.
        let mut ds = Dataset {
            records: vec![
                rec(8, 10.0, false),
                rec(16, 500.0, false),
                rec(16, 510.0, true),
            ],
            ..Default::default()
        };
        flag_outliers(&mut ds);
        assert!(ds.records.iter().all(|r| r.measurement.flags == 0));
    }
}
