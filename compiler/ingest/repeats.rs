//! The rows-read-twice rule of a CSV file: rows that repeat earlier rows of
//! the same file word for word and in order (`cat a.csv; tail -n +2 a.csv`,
//! `cat a.csv a.csv` with a part of it again, a sweep script's output
//! appended twice) are one measurement, not repeats. The rule: a row counts
//! once when it lies in a stretch of [`STRETCH`] consecutive rows of a
//! section that repeats, word for word and in order, a stretch read earlier
//! in the file (in the same section or an earlier one: a header line
//! between copies does not make them new). A row (or two) that prints the
//! same as earlier ones (nccl-tests-like decimals, a latency floor) is a
//! real repeat whose time happened to print alike: it stays. A section
//! repeated whole is the section digest's to find (see
//! `read_paths_folded`, which counts it once across files too).
//!
//! Memory: 3 bytes a row while reading (24 bits of the row's hash: a
//! stretch is 72 bits of them, so stretches that merely collide do not
//! occur), and at the end a set of the stretches per partition of at most
//! [`PART_ROWS`], on every core.

use std::collections::HashSet;
use std::hash::BuildHasherDefault;

use super::fold::MixHasher;
use super::FileOutput;

/// Consecutive rows that, repeated word for word in order, are a stretch
/// read twice rather than repeats printed alike: on a 1M-row sweep of
/// 38,850 cells repeated (3 decimals), 8 pairs of rows coincide with an
/// earlier pair by chance, no three rows do.
pub(crate) const STRETCH: usize = 3;

/// Stretches in one set at once per thread, at most (about 16 bytes each):
/// the partitions' memory, against a pass over the rows per partition.
const PART_ROWS: usize = 1 << 20;

/// The rows of one file, to find stretches of it read twice.
#[derive(Default)]
pub(crate) struct SeenRows {
    /// Per row kept (in the order its records were pushed: row `i` is
    /// record `i`), 24 bits of the hash of its text: the top 16 here...
    high: Vec<u16>,
    /// ... and the low 8 here.
    low: Vec<u8>,
    /// The file's sections, in order.
    sections: Vec<SectionRows>,
    /// The digests of the sections so far.
    digests: HashSet<[u8; 32]>,
}

/// The rows of one section.
struct SectionRows {
    rows: std::ops::Range<usize>,
    /// The same rows as an earlier section of the file.
    whole_copy: bool,
}

impl SeenRows {
    /// Notes the next row kept, of text hash `hash`.
    pub fn push(&mut self, hash: u64) {
        let h = (hash ^ (hash >> 32)) as u32;
        self.high.push((h >> 16) as u16);
        self.low.push((h >> 8) as u8);
    }

    fn len(&self) -> usize {
        self.high.len()
    }

    /// Ends a section of data rows of `digest`.
    pub fn end_section(&mut self, digest: [u8; 32]) {
        let start = self.sections.last().map_or(0, |s| s.rows.end);
        let rows = start..self.len();
        let whole_copy = !rows.is_empty() && !self.digests.insert(digest);
        self.sections.push(SectionRows { rows, whole_copy });
    }

    /// Ends the file: drops from `out` the rows that repeat a copied
    /// stretch, with a note naming where the first one is.
    pub fn finish(self, out: &mut FileOutput, path: &std::path::Path) {
        let repeated = self.repeated_stretches();
        if repeated.is_empty() {
            return;
        }
        let is_repeated = |w: usize| repeated[w / 64] >> (w % 64) & 1 == 1;
        let mut ranges: Vec<std::ops::Range<usize>> = Vec::new();
        for s in self.sections.iter().filter(|s| !s.whole_copy) {
            let (start, end) = (s.rows.start, s.rows.end);
            if end - start < STRETCH {
                continue;
            }
            for r in start..end {
                // The stretches through row r start at r-2..=r.
                let first = r.saturating_sub(STRETCH - 1).max(start);
                let last = r.min(end - STRETCH);
                if !(first..=last).any(is_repeated) {
                    continue;
                }
                match ranges.last_mut() {
                    Some(x) if x.end == r => x.end = r + 1,
                    _ => ranges.push(r..r + 1),
                }
            }
        }
        let Some(first) = ranges.first() else {
            return;
        };
        let line = out.records.line_of(first.start);
        let dropped: usize = ranges.iter().map(|r| r.len()).sum();
        out.count_once(&ranges);
        if let Some(line) = line {
            out.notes.push(format!(
                "{}:{}: {} row(s) repeat earlier rows exactly, in the same order (the same rows \
                 read twice): each counted once",
                path.display(),
                line,
                dropped
            ));
        }
    }

    /// A bit per stretch (by its first row): set when an earlier stretch
    /// of the file (outside sections repeated whole) reads the same.
    fn repeated_stretches(&self) -> Vec<u64> {
        let n = self.len();
        let starts: Vec<std::ops::Range<usize>> = self
            .sections
            .iter()
            .filter(|s| !s.whole_copy && s.rows.len() >= STRETCH)
            .map(|s| s.rows.start..s.rows.end - STRETCH + 1)
            .collect();
        if starts.is_empty() {
            return Vec::new();
        }
        // A set of every stretch at once would cost 16 bytes a row; by
        // partitions of their first row's hash, a fraction of that.
        let parts = n.div_ceil(PART_ROWS).next_power_of_two();
        let threads = std::thread::available_parallelism()
            .map(|t| t.get())
            .unwrap_or(1)
            .min(parts);
        let rows = Rows {
            high: &self.high,
            low: &self.low,
        };
        let starts = &starts;
        let found: Vec<Vec<u32>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads)
                .map(|t| {
                    s.spawn(move || {
                        let mut out = Vec::new();
                        for p in (t..parts).step_by(threads) {
                            out.extend(repeats_in_part(rows, starts, p, parts));
                        }
                        out
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_default())
                .collect()
        });
        let mut bits = vec![0u64; n.div_ceil(64)];
        for w in found.into_iter().flatten() {
            bits[w as usize / 64] |= 1 << (w % 64);
        }
        bits
    }
}

/// The rows' hashes, split in two arrays.
#[derive(Clone, Copy)]
struct Rows<'a> {
    high: &'a [u16],
    low: &'a [u8],
}

impl Rows<'_> {
    /// The 24-bit hash of row `k`.
    fn hash(self, k: usize) -> u128 {
        u128::from(self.high[k]) << 8 | u128::from(self.low[k])
    }
}

/// The partition of a stretch of `parts` (a power of two, at most 2^16
/// for 2^36 rows: beyond, partitions just grow), by its first row's top
/// bits.
fn part_of(parts: usize) -> impl Fn(u16) -> usize {
    let shift = 16u32.saturating_sub(parts.trailing_zeros());
    let mask = parts - 1;
    move |h: u16| (usize::from(h) >> shift) & mask
}

/// The stretches (by first row) of partition `p` of `parts` that repeat
/// an earlier one: each stretch of the partition, in reading order, is
/// looked up among those before it (a set, made once at its size).
fn repeats_in_part(
    rows: Rows<'_>,
    starts: &[std::ops::Range<usize>],
    p: usize,
    parts: usize,
) -> Vec<u32> {
    const _: () = assert!(STRETCH == 3, "a stretch key holds three rows");
    let part = part_of(parts);
    // Made at about its size (the rows' hashes spread the stretches evenly
    // over the partitions; a few more than expected grow it once).
    let stretches: usize = starts.iter().map(|r| r.len()).sum();
    let expected = stretches / parts;
    let mut seen: HashSet<u64, BuildHasherDefault<MixHasher>> =
        HashSet::with_capacity_and_hasher(expected + expected / 32 + 64, Default::default());
    let mut out = Vec::new();
    for r in starts {
        // 64 rows at a time: a mask of those in the partition (a loop the
        // compiler vectorises; every partition passes over every row),
        // then the few found.
        for (c, chunk) in rows.high[r.clone()].chunks(64).enumerate() {
            let mut mask = 0u64;
            for (i, &h) in chunk.iter().enumerate() {
                mask |= u64::from(part(h) == p) << i;
            }
            while mask != 0 {
                let k = r.start + 64 * c + mask.trailing_zeros() as usize;
                mask &= mask - 1;
                // The stretch's 72 bits less its first row's top 8: the
                // partition stands for its top bits, and 64 bits within a
                // partition do not collide by chance (about 10^-8 pairs).
                let key = rows.hash(k) << 48 | rows.hash(k + 1) << 24 | rows.hash(k + 2);
                if !seen.insert(key as u64) {
                    out.push(k as u32);
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file of more rows than one partition holds: a stretch read again
    /// far from where it was first read is found (whichever partition its
    /// rows' hashes fall in), and only it; two rows alike (less than a
    /// stretch) are not.
    #[test]
    fn a_stretch_read_again_is_found_across_partitions() {
        let n = 2 * PART_ROWS + 1000;
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut hashes: Vec<u64> = (0..n)
            .map(|_| {
                // xorshift: distinct rows.
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x
            })
            .collect();
        let copy_at = n - 500;
        let copied = 100..110;
        for (i, k) in copied.clone().enumerate() {
            hashes[copy_at + i] = hashes[k];
        }
        // Two rows alike, then a different one: not a stretch.
        hashes[n - 100] = hashes[5000];
        hashes[n - 99] = hashes[5001];
        let mut seen = SeenRows::default();
        for &h in &hashes {
            seen.push(h);
        }
        seen.end_section([0; 32]);
        let bits = seen.repeated_stretches();
        let found: Vec<usize> = (0..n)
            .filter(|&w| bits[w / 64] >> (w % 64) & 1 == 1)
            .collect();
        let want: Vec<usize> = (copy_at..copy_at + copied.len() - STRETCH + 1).collect();
        assert_eq!(found, want);
    }
}
