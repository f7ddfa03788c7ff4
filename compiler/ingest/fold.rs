//! Measurements folded as they are read: rows that differ only in their
//! time and place in the file share one [`Group`] (everything else about
//! them, once) and keep 16 bytes each ([`Sample`]: time, line, order). A
//! 2 GB CSV of repeats then costs its distinct cells plus 16 bytes a row,
//! not a full [`Record`] a row (about 140 bytes; twice that once compile
//! copied them).
//!
//! Every check compile makes (repeats that disagree, default runs, setups,
//! platforms, warm-up outliers) and the aggregation into [`Cell`]s work on
//! the folded form; [`Folded::into_records`] gives back the records in the
//! order they were read, for the commands that list them.

use std::collections::HashMap;
use std::hash::{Hash as _, Hasher as _};
use std::path::PathBuf;
use std::sync::Arc;

use crate::record::{Cell, CellKey, Collective, Measurement, Record, Run, Source};

/// Everything about a record except its time and where it was read: its
/// run, its size and how it was measured.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct GroupKey {
    pub run: Run,
    pub nbytes: u64,
    pub file: Arc<PathBuf>,
    pub in_place: bool,
    pub dtype: Option<Arc<str>>,
    /// Bit set of [`crate::record::flags`] and [`super::UNRESOLVED`].
    pub flags: u8,
}

impl GroupKey {
    /// The cell the group's measurements fall in.
    pub fn cell(&self) -> CellKey {
        self.run.cell(self.nbytes)
    }
}

/// One measurement of a group: its time and where it was read.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sample {
    pub time_us: f64,
    /// 1-based line in the group's file.
    pub line: u32,
    /// Order of reading over the whole input: records come back sorted by it.
    pub seq: u32,
}

/// Records that differ only in time and line.
#[derive(Clone, Debug)]
pub struct Group {
    pub key: GroupKey,
    pub samples: Vec<Sample>,
}

impl Group {
    /// The sample read first.
    pub fn first(&self) -> Option<&Sample> {
        self.samples.iter().min_by_key(|s| s.seq)
    }

    pub fn source(&self, s: &Sample) -> Source {
        Source {
            file: self.key.file.clone(),
            line: s.line,
        }
    }

    /// The record of one sample.
    pub fn record(&self, s: &Sample) -> Record {
        let k = &self.key;
        Record {
            run: k.run.clone(),
            measurement: Measurement {
                nbytes: k.nbytes,
                time_us: s.time_us,
                in_place: k.in_place,
                dtype: k.dtype.clone(),
                source: self.source(s),
                flags: k.flags,
            },
        }
    }

    pub fn collective(&self) -> Collective {
        self.key.run.collective
    }

    /// Whether `--platform LABEL` selects this group (see
    /// [`Record::is_platform`]).
    pub fn is_platform(&self, label: &str) -> bool {
        self.key.run.is_platform(label)
    }

    pub fn is_default(&self) -> bool {
        self.key.run.is_default()
    }
}

/// Measurements folded into groups.
#[derive(Clone, Debug, Default)]
pub struct Folded {
    pub groups: Vec<Group>,
}

impl Folded {
    /// Folds records (their order is kept: `into_records` gives it back).
    pub fn from_records(records: impl IntoIterator<Item = Record>) -> Folded {
        let mut b = FoldBuilder::default();
        for r in records {
            b.push_record(r);
        }
        b.finish()
    }

    /// The records, in the order they were read.
    pub fn into_records(self) -> Vec<Record> {
        let mut v: Vec<(u32, Record)> = Vec::with_capacity(self.len());
        for g in &self.groups {
            v.extend(g.samples.iter().map(|s| (s.seq, g.record(s))));
        }
        v.sort_unstable_by_key(|e| e.0);
        v.into_iter().map(|e| e.1).collect()
    }

    /// Number of measurements (records).
    pub fn len(&self) -> usize {
        self.groups.iter().map(|g| g.samples.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.groups.iter().all(|g| g.samples.is_empty())
    }

    /// Keeps the groups `keep` accepts.
    pub fn retain(&mut self, keep: impl FnMut(&Group) -> bool) {
        self.groups.retain(keep);
    }

    /// Moves the groups of `other` in, reading order after this one's:
    /// `other`'s sequence numbers are shifted by `base`.
    pub fn append(&mut self, other: Folded, base: u32) {
        for mut g in other.groups {
            for s in &mut g.samples {
                s.seq += base;
            }
            self.groups.push(g);
        }
    }

    /// The robust aggregate of every trusted sample per cell (median of
    /// repeats; both placements count): see [`super::aggregate`]. Cells come
    /// sorted by key; each names the first place it was read.
    pub fn cells(&self) -> Vec<Cell> {
        struct Acc<'a> {
            times: Vec<f64>,
            first: (u32, &'a Group, Sample),
        }
        let mut acc: HashMap<CellKey, Acc<'_>> = HashMap::new();
        for g in &self.groups {
            if g.key.flags & super::UNTRUSTED != 0 {
                continue;
            }
            for s in &g.samples {
                if !s.time_us.is_finite() || s.time_us <= 0.0 {
                    continue;
                }
                let e = acc.entry(g.key.cell()).or_insert_with(|| Acc {
                    times: Vec::new(),
                    first: (s.seq, g, *s),
                });
                e.times.push(s.time_us);
                if s.seq < e.first.0 {
                    e.first = (s.seq, g, *s);
                }
            }
        }
        let mut cells: Vec<Cell> = acc
            .into_iter()
            .map(|(key, mut a)| {
                let n = a.times.len();
                let med = crate::stats::median(&mut a.times).unwrap_or(f64::NAN);
                let spread = if n > 1 {
                    (a.times[n - 1] - a.times[0]) / med
                } else {
                    0.0
                };
                Cell {
                    key,
                    time_us: med,
                    n: n as u32,
                    spread,
                    source: a.first.1.source(&a.first.2),
                }
            })
            .collect();
        cells.sort_by_key(|c| c.key);
        cells
    }
}

/// Folds the records of one file as a reader pushes them, keeping what the
/// content checks need: a digest of what the records were labelled as, for
/// the whole file and per run section.
#[derive(Default)]
pub struct FoldBuilder {
    map: HashMap<GroupKey, Vec<Sample>>,
    pushed: usize,
    file_keys: std::collections::hash_map::DefaultHasher,
    section_keys: std::collections::hash_map::DefaultHasher,
    section_start: usize,
}

impl FoldBuilder {
    /// Adds one measurement of `run`: what every reader calls per row.
    pub fn push(&mut self, run: &Run, m: Measurement) {
        self.push_owned(run.clone(), m);
    }

    /// Adds a record (measurements already read, folded again).
    pub fn push_record(&mut self, r: Record) {
        self.push_owned(r.run, r.measurement);
    }

    fn push_owned(&mut self, run: Run, m: Measurement) {
        let key = GroupKey {
            run,
            nbytes: m.nbytes,
            file: m.source.file,
            in_place: m.in_place,
            dtype: m.dtype,
            flags: m.flags,
        };
        self.push_key(key, m.time_us, m.source.line);
    }

    fn push_key(&mut self, key: GroupKey, time_us: f64, line: u32) {
        // What the content was labelled as: collective, size, shape, knobs,
        // placement, in order.
        for h in [&mut self.file_keys, &mut self.section_keys] {
            key.cell().hash(h);
            key.in_place.hash(h);
        }
        let sample = Sample {
            time_us,
            line,
            seq: self.pushed as u32,
        };
        self.pushed += 1;
        self.map.entry(key).or_default().push(sample);
    }

    /// Records pushed so far.
    pub fn len(&self) -> usize {
        self.pushed
    }

    pub fn is_empty(&self) -> bool {
        self.pushed == 0
    }

    /// Ends a run section: the records pushed since the last one, and the
    /// digest of their labels.
    pub(crate) fn end_section(&mut self) -> (std::ops::Range<usize>, u64) {
        let range = self.section_start..self.pushed;
        self.section_start = self.pushed;
        let keys = std::mem::take(&mut self.section_keys).finish();
        (range, keys)
    }

    /// The digest of the labels of every record pushed.
    pub(crate) fn file_keys(&self) -> u64 {
        self.file_keys.finish()
    }

    /// The line of the record read `seq`-th (a scan: for a note, not per
    /// row).
    pub(crate) fn line_of(&self, seq: usize) -> Option<u32> {
        self.map
            .values()
            .flatten()
            .find(|s| s.seq as usize == seq)
            .map(|s| s.line)
    }

    /// Drops the records whose reading order falls in one of `ranges`.
    pub(crate) fn drop_ranges(&mut self, ranges: &[std::ops::Range<usize>]) {
        if ranges.is_empty() {
            return;
        }
        for v in self.map.values_mut() {
            v.retain(|s| !ranges.iter().any(|r| r.contains(&(s.seq as usize))));
        }
        self.map.retain(|_, v| !v.is_empty());
    }

    /// The groups, in the order their first record was read.
    pub fn finish(self) -> Folded {
        let mut groups: Vec<Group> = self
            .map
            .into_iter()
            .map(|(key, mut samples)| {
                samples.shrink_to_fit();
                Group { key, samples }
            })
            .collect();
        groups.sort_unstable_by_key(|g| g.samples.first().map(|s| s.seq));
        Folded { groups }
    }
}
