//! Measurements folded as they are read: rows that differ only in their
//! time and place in the file share one [`Group`] (everything else about
//! them, once) and keep a few bytes each ([`Samples`]: the time as the
//! decimal it was printed as, reading order and line as strides while they
//! are one). A 2 GB CSV of repeats then costs its distinct cells plus 4
//! bytes a row, not a full [`Record`] a row (about 140 bytes).
//!
//! Every check compile makes (repeats that disagree, default runs, setups,
//! platforms, warm-up outliers) and the aggregation into [`Cell`]s work on
//! the folded form; [`Folded::into_records`] gives back the records in the
//! order they were read, for the commands that list them.

mod samples;

use std::collections::HashMap;
use std::hash::{Hash as _, Hasher as _};
use std::path::PathBuf;
use std::sync::Arc;

pub use samples::{Samples, Time};

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

/// One measurement of a group: its time and where it was read (stored
/// compactly in [`Samples`], handed out by value).
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
    /// In reading order.
    pub samples: Samples,
}

impl Group {
    /// The sample read first.
    pub fn first(&self) -> Option<Sample> {
        self.samples.first()
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
            v.extend(g.samples.iter().map(|s| (s.seq, g.record(&s))));
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
            g.samples.shift_seq(base);
            self.groups.push(g);
        }
    }

    /// The robust aggregate of every trusted sample per cell (median of
    /// repeats; both placements count): see [`super::aggregate`]. Cells come
    /// sorted by key; each names the first place it was read.
    pub fn cells(&self) -> Vec<Cell> {
        let mut order: Vec<(CellKey, u32)> = self
            .groups
            .iter()
            .enumerate()
            .filter(|(_, g)| g.key.flags & super::UNTRUSTED == 0)
            .map(|(i, g)| (g.key.cell(), i as u32))
            .collect();
        order.sort_unstable();
        // On every core, in order: the cells come out as one thread makes
        // them. One cell at a time per thread (its groups' times copied
        // together), never the whole sweep's times. Each thread takes a
        // stretch of whole cells and fills its part of one vector (a
        // million cells are not copied from vector to vector).
        let threads = std::thread::available_parallelism()
            .map(|t| t.get())
            .unwrap_or(1);
        let mut parts: Vec<&[(CellKey, u32)]> = Vec::with_capacity(threads);
        let mut rest = &order[..];
        let per = order.len().div_ceil(threads).max(1);
        while !rest.is_empty() {
            let mut end = per.min(rest.len());
            while end < rest.len() && rest[end].0 == rest[end - 1].0 {
                end += 1;
            }
            let (part, tail) = rest.split_at(end);
            parts.push(part);
            rest = tail;
        }
        let counts: Vec<usize> = parts
            .iter()
            .map(|p| p.chunk_by(|a, b| a.0 == b.0).count())
            .collect();
        let mut cells: Vec<Option<Cell>> = Vec::with_capacity(counts.iter().sum());
        cells.resize_with(cells.capacity(), || None);
        std::thread::scope(|s| {
            let mut out = &mut cells[..];
            for (part, &n) in parts.iter().zip(&counts) {
                let (mine, tail) = out.split_at_mut(n);
                out = tail;
                s.spawn(move || {
                    let mut times = Vec::new();
                    for (run, cell) in part.chunk_by(|a, b| a.0 == b.0).zip(mine) {
                        *cell = self.cell(run, &mut times);
                    }
                });
            }
        });
        // In place (`Option<Cell>` is a `Cell` with a niche; `flatten`
        // would copy).
        #[allow(clippy::filter_map_identity)]
        let cells: Vec<Cell> = cells.into_iter().filter_map(|c| c).collect();
        cells
    }

    /// The cell of the groups `run` (one cell key), `None` when none of
    /// their times is usable; `times` is scratch.
    fn cell(&self, run: &[(CellKey, u32)], times: &mut Vec<f64>) -> Option<Cell> {
        times.clear();
        let mut first: Option<(&Group, Sample)> = None;
        for &(_, gi) in run {
            let g = &self.groups[gi as usize];
            let mut first_here = None;
            for (i, t) in g.samples.times().enumerate() {
                if !t.is_finite() || t <= 0.0 {
                    continue;
                }
                times.push(t);
                first_here.get_or_insert(i);
            }
            // Samples are in reading order: the group's first usable one
            // was read first.
            if let Some(i) = first_here {
                let s = g.samples.get(i);
                if first.is_none_or(|(_, f)| s.seq < f.seq) {
                    first = Some((g, s));
                }
            }
        }
        let (g, s) = first?;
        let n = times.len();
        // Unstable is the same order (equal under total_cmp is equal bits),
        // and leaves the median's sort a pass.
        times.sort_unstable_by(f64::total_cmp);
        let med = crate::stats::median(times).unwrap_or(f64::NAN);
        let spread = if n > 1 {
            (times[n - 1] - times[0]) / med
        } else {
            0.0
        };
        Some(Cell {
            key: run[0].0,
            time_us: med,
            n: n as u32,
            spread,
            source: g.source(&s),
            base: crate::record::TimeBase::Sweep,
        })
    }
}

/// Folds the records of one file as a reader pushes them, keeping what the
/// content checks need: a digest of what the records were labelled as, for
/// the whole file and per run section.
#[derive(Default)]
pub struct FoldBuilder {
    /// The groups' keys, in the order their first record was pushed.
    keys: Vec<GroupKey>,
    /// Per group, its samples (apart from the keys: pushing a sample
    /// touches only these, a few bytes per group).
    samples: Vec<Samples>,
    /// Per group, the hash of what its records are labelled as (cell and
    /// placement), fed to the digests per record.
    labels: Vec<u64>,
    /// The groups by key: indices into `keys`, hashed by the key they
    /// point at, so each key is stored once (a map owning its keys held a
    /// second copy of every one: a third of the memory of a sweep of
    /// distinct cells).
    index: hashbrown::HashTable<u32>,
    hasher: std::collections::hash_map::RandomState,
    /// Per group, the hash of its key ([`FoldBuilder::hash_of`], 32 bits
    /// of it: 4 bytes a group): the index grows by rehashing every key it
    /// holds, and a key (run, file, strings) is slow to hash (a sweep of a
    /// million distinct cells hashed each key three times).
    hashes: Vec<u32>,
    /// Groups by a reader's run id ([`FoldBuilder::push_run`]): a lookup
    /// that hashes a few integers, not a whole [`Run`].
    by_run: HashMap<RunGroup, u32, std::hash::BuildHasherDefault<MixHasher>>,
    pushed: usize,
    file_keys: u64,
    section_keys: u64,
    section_start: usize,
}

/// A group as a reader that numbers its runs names it.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct RunGroup {
    nbytes: u64,
    /// The run id, the top bit set when in place.
    run: u32,
    flags: u8,
}

/// A fast hash for keys of a few integers made by this program (not for
/// input an attacker chooses the hash of: it is not keyed).
#[derive(Default)]
pub struct MixHasher(u64);

impl std::hash::Hasher for MixHasher {
    fn finish(&self) -> u64 {
        // Fold the high bits down: hashbrown takes the top bits and the low.
        let h = self.0;
        (h ^ (h >> 29)).wrapping_mul(0xbf58_476d_1ce4_e5b9) ^ (h >> 32)
    }

    fn write(&mut self, bytes: &[u8]) {
        for c in bytes.chunks(8) {
            let mut b = [0u8; 8];
            b[..c.len()].copy_from_slice(c);
            self.write_u64(u64::from_le_bytes(b));
        }
    }

    fn write_u8(&mut self, i: u8) {
        self.write_u64(u64::from(i));
    }

    fn write_u32(&mut self, i: u32) {
        self.write_u64(u64::from(i));
    }

    fn write_u64(&mut self, i: u64) {
        self.0 = (self.0.rotate_left(5) ^ i).wrapping_mul(0x517c_c1b7_2722_0a95);
    }

    fn write_usize(&mut self, i: usize) {
        self.write_u64(i as u64);
    }
}

/// Adds `label` to an order-sensitive digest.
fn mix(digest: u64, label: u64) -> u64 {
    (digest.rotate_left(23) ^ label).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

impl FoldBuilder {
    /// Adds one measurement of `run`: what every reader calls per row.
    pub fn push(&mut self, run: &Run, m: Measurement) {
        self.push_owned(run.clone(), m);
    }

    /// Adds one measurement of `run`, which the reader numbers `id` (the
    /// same id for the same run, in this file), read at `line` of `file`:
    /// the group is found by the id, without hashing the run (nor touching
    /// the file's name, unless the group is new).
    #[allow(clippy::too_many_arguments)]
    pub fn push_run(
        &mut self,
        id: u32,
        run: &Run,
        file: &Arc<PathBuf>,
        nbytes: u64,
        in_place: bool,
        flags: u8,
        time: Time,
        line: u32,
    ) {
        let rg = RunGroup {
            nbytes,
            run: id | u32::from(in_place) << 31,
            flags,
        };
        let g = match self.by_run.get(&rg) {
            Some(&g) => g,
            None => {
                let g = self.group_of(GroupKey {
                    run: run.clone(),
                    nbytes,
                    file: file.clone(),
                    in_place,
                    dtype: None,
                    flags,
                });
                self.by_run.insert(rg, g);
                g
            }
        };
        self.push_read(g, time, line);
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
        let g = self.group_of(key);
        self.push_sample(g, m.time_us, m.source.line);
    }

    /// The group of `key`, made when new.
    /// The index's hash of a key, from the 32 bits of it kept per group
    /// (keyed SipHash below: input files choose the keys).
    fn hash_of(short: u32) -> u64 {
        u64::from(short).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ u64::from(short)
    }

    fn group_of(&mut self, key: GroupKey) -> u32 {
        use std::hash::BuildHasher as _;
        let short = self.hasher.hash_one(&key) as u32;
        let hash = Self::hash_of(short);
        let keys = &self.keys;
        if let Some(&g) = self.index.find(hash, |&g| keys[g as usize] == key) {
            return g;
        }
        // What the content was labelled as: collective, size, shape, knobs,
        // placement.
        let mut h = std::collections::hash_map::DefaultHasher::new();
        key.cell().hash(&mut h);
        key.in_place.hash(&mut h);
        let g = self.keys.len() as u32;
        self.labels.push(h.finish());
        self.keys.push(key);
        self.hashes.push(short);
        let hashes = &self.hashes;
        self.index
            .insert_unique(hash, g, |&g| Self::hash_of(hashes[g as usize]));
        self.samples.push(Samples::default());
        g
    }

    fn push_sample(&mut self, g: u32, time_us: f64, line: u32) {
        let seq = self.next_seq(g);
        self.samples[g as usize].push(Sample { time_us, line, seq });
    }

    /// [`FoldBuilder::push_sample`] of a time a reader read.
    fn push_read(&mut self, g: u32, time: Time, line: u32) {
        let seq = self.next_seq(g);
        self.samples[g as usize].push_read(time, line, seq);
    }

    /// The reading order of the next record, of group `g`, its label added
    /// to the digests.
    fn next_seq(&mut self, g: u32) -> u32 {
        let label = self.labels[g as usize];
        self.file_keys = mix(self.file_keys, label);
        self.section_keys = mix(self.section_keys, label);
        let seq = self.pushed as u32;
        self.pushed += 1;
        seq
    }

    /// Records pushed so far.
    pub fn len(&self) -> usize {
        self.pushed
    }

    pub fn is_empty(&self) -> bool {
        self.pushed == 0
    }

    /// Records pushed and not dropped.
    pub fn kept(&self) -> usize {
        self.samples.iter().map(Samples::len).sum()
    }

    /// Ends a run section: the records pushed since the last one, and the
    /// digest of their labels.
    pub(crate) fn end_section(&mut self) -> (std::ops::Range<usize>, u64) {
        let range = self.section_start..self.pushed;
        self.section_start = self.pushed;
        let keys = std::mem::take(&mut self.section_keys);
        (range, keys)
    }

    /// The digest of the labels of every record pushed.
    pub(crate) fn file_keys(&self) -> u64 {
        self.file_keys
    }

    /// The line of the record read `seq`-th (a scan: for a note, not per
    /// row).
    pub(crate) fn line_of(&self, seq: usize) -> Option<u32> {
        self.samples
            .iter()
            .flat_map(Samples::iter)
            .find(|s| s.seq as usize == seq)
            .map(|s| s.line)
    }

    /// Drops the records whose reading order falls in one of `ranges`.
    pub(crate) fn drop_ranges(&mut self, ranges: &[std::ops::Range<usize>]) {
        if ranges.is_empty() {
            return;
        }
        let mut ranges = ranges.to_vec();
        ranges.sort_by_key(|r| r.start);
        let kept = |seq: u32| {
            let seq = seq as usize;
            // The ranges are sorted: the last starting at or before seq.
            let i = ranges.partition_point(|r| r.start <= seq);
            i == 0 || !ranges[i - 1].contains(&seq)
        };
        // Only the groups that lose a sample are made again (their orders
        // looked at, not their times).
        for v in &mut self.samples {
            if v.seqs().all(kept) {
                continue;
            }
            v.retain(|s| kept(s.seq));
        }
    }

    /// The groups, in the order their first record was read.
    pub fn finish(self) -> Folded {
        let FoldBuilder {
            keys,
            samples,
            index,
            by_run,
            labels,
            ..
        } = self;
        // The lookups hold a second copy of every key: free them before
        // the groups are built, or both copies meet at the peak.
        drop((index, by_run, labels));
        let mut groups: Vec<Group> = keys
            .into_iter()
            .zip(samples)
            .filter(|(_, samples)| !samples.is_empty())
            .map(|(key, mut samples)| {
                samples.shrink_to_fit();
                Group { key, samples }
            })
            .collect();
        groups.sort_by_key(|g| g.samples.first().map(|s| s.seq));
        Folded { groups }
    }
}
