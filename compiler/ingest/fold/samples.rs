//! The samples of one group, in a few bytes each: a sweep of many repeats
//! is mostly these, so they decide compile's peak memory (the 2 GB, 28M-row
//! sweep: 4 bytes a row, where a [`Sample`] is 16).
//!
//! - A time is kept as the decimal it was printed as, its digits an offset
//!   (4 bytes) from the group's first time at the decimals the group needs
//!   ([`digits_at`]): it reads back as the same `f64` bit for bit. A time
//!   no short decimal reads back as exactly (or too far from the first) is
//!   kept whole, beside the others.
//! - Reading order and lines are kept as arithmetic progressions while they
//!   are one (a sweep's repeats come every N rows, or row after row), as
//!   lists only when they stop being one (a trace in no order).
//!
//! Every sample comes back exactly as pushed ([`Samples::get`]), in the
//! order pushed.

use super::Sample;

/// Decimals a time may be kept at.
const MAX_DECIMALS: u8 = 15;
const POW10: [f64; MAX_DECIMALS as usize + 1] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
];
/// Integers below this convert to `f64` exactly.
const EXACT: u64 = 1 << 53;
/// The offset that stands for a time kept whole.
const WIDE: i32 = i32::MIN;
/// `Samples::decimals` before any time was kept as a decimal.
const NO_BASE: u8 = u8::MAX;
/// Offsets a group holds in one vector; past them, in blocks of this many,
/// so a large group grows without moving what it holds: a vector grown
/// again and again leaves holes in the heap that a sweep of many repeats
/// (every group growing in turn) never fills again, a third more memory.
const BLOCK: usize = 256;

/// The digits of `t` at `decimals` decimals, when they read back as `t`
/// bit for bit: the digits and the power of ten are both exact, so their
/// quotient is the correctly rounded decimal, as parsing it gave.
fn digits_at(t: f64, decimals: u8) -> Option<u64> {
    let p = POW10[usize::from(decimals)];
    let x = t * p;
    if !(x >= 0.0 && x < EXACT as f64) {
        return None;
    }
    let digits = x.round();
    // Far from a whole number: not this many decimals (saves the division
    // below on the scales a search tries first).
    if (x - digits).abs() > 1e-9 * x + 1e-6 {
        return None;
    }
    let d = digits as u64;
    ((d as f64 / p).to_bits() == t.to_bits()).then_some(d)
}

/// The fewest decimals `t` reads back at, and its digits there.
fn fewest_decimals(t: f64) -> Option<(u8, u64)> {
    (0..=MAX_DECIMALS).find_map(|d| digits_at(t, d).map(|m| (d, m)))
}

/// A time as read, with the decimal it reads back from (`fewest_decimals`,
/// packed: the decimals above the 53 bits of digits; `Time::NONE`: no
/// short decimal), found by the reader on its own thread: folding it then
/// takes no division on the thread that folds every row.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Time {
    pub us: f64,
    decimal: u64,
}

impl Time {
    const NONE: u64 = u64::MAX;

    /// `us` and its decimal.
    pub fn read(us: f64) -> Time {
        Time {
            us,
            decimal: fewest_decimals(us).map_or(Time::NONE, |(d, m)| u64::from(d) << 53 | m),
        }
    }

    fn decimal(self) -> Option<(u8, u64)> {
        (self.decimal != Time::NONE)
            .then_some(((self.decimal >> 53) as u8, self.decimal & (EXACT - 1)))
    }
}

/// `first + step * i` for the i-th value (wrapping, so any two values are
/// one): reading orders and lines that come at a fixed stride.
fn stride(first: u32, step: u32, i: usize) -> u32 {
    first.wrapping_add(step.wrapping_mul(i as u32))
}

/// What a group of more than one sample needs (a sweep of distinct cells,
/// a sample a group, does without).
#[derive(Clone, Debug, Default)]
struct More {
    /// Per sample after the first (up to [`BLOCK`] of them; then in
    /// `blocks`), its digits less `base` ([`WIDE`]: kept whole). The
    /// first's is 0, unless it is kept whole.
    offsets: Vec<i32>,
    /// The offsets past the first [`BLOCK`] + 1 samples. Boxed: as the
    /// list grows it moves pointers, the blocks stay where they are.
    #[allow(clippy::vec_box)]
    blocks: Vec<Box<[i32; BLOCK]>>,
    /// Strides of reading order and line from the first sample's.
    seq_step: u32,
    line_step: u32,
    /// Every sample's reading order, once it stopped being a stride.
    seqs: Vec<u32>,
    /// Every sample's line, once it stopped being a stride.
    lines: Vec<u32>,
    /// Times kept whole, by the index of their sample (in order).
    wide: Vec<(u32, f64)>,
}

/// The samples of one group, in the order pushed (reading order). Not
/// comparable: one list of samples has more than one encoding (compare
/// [`Samples::iter`]).
#[derive(Clone, Debug)]
pub struct Samples {
    len: u32,
    /// The decimals times are kept at ([`NO_BASE`]: none kept so yet).
    decimals: u8,
    /// The digits offsets count from: the first decimal time's.
    base: u64,
    /// The first sample's reading order and line.
    seq0: u32,
    line0: u32,
    more: Option<Box<More>>,
}

impl Default for Samples {
    fn default() -> Self {
        Samples {
            len: 0,
            decimals: NO_BASE,
            base: 0,
            seq0: 0,
            line0: 0,
            more: None,
        }
    }
}

impl Samples {
    pub fn len(&self) -> usize {
        self.len as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The `i`-th sample pushed.
    ///
    /// Panics when `i` is out of range, as indexing does.
    pub fn get(&self, i: usize) -> Sample {
        assert!(i < self.len(), "sample {i} of {}", self.len);
        let (seq, line) = match self.more.as_deref() {
            None => (self.seq0, self.line0),
            Some(m) => (
                listed(&m.seqs, self.seq0, m.seq_step, i),
                listed(&m.lines, self.line0, m.line_step, i),
            ),
        };
        Sample {
            time_us: self.time(i),
            line,
            seq,
        }
    }

    /// The `i`-th time.
    fn time(&self, i: usize) -> f64 {
        let offset = if i == 0 { 0 } else { self.offset(i - 1) };
        if offset == WIDE || i == 0 {
            let wide = self.more.as_deref().map_or(&[][..], |m| &m.wide);
            if let Ok(at) = wide.binary_search_by_key(&(i as u32), |w| w.0) {
                return wide[at].1;
            }
        }
        let digits = self.base.wrapping_add_signed(i64::from(offset));
        digits as f64 / POW10[usize::from(self.decimals)]
    }

    /// The first sample pushed.
    pub fn first(&self) -> Option<Sample> {
        (!self.is_empty()).then(|| self.get(0))
    }

    /// The samples, in the order pushed.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = Sample> + '_ {
        (0..self.len()).map(|i| self.get(i))
    }

    /// The reading orders, in the order pushed (without decoding times).
    pub fn seqs(&self) -> impl ExactSizeIterator<Item = u32> + '_ {
        let more = self.more.as_deref();
        (0..self.len()).map(move |i| match more {
            None => self.seq0,
            Some(m) => listed(&m.seqs, self.seq0, m.seq_step, i),
        })
    }

    /// The times, in the order pushed (without decoding lines and order).
    pub fn times(&self) -> impl ExactSizeIterator<Item = f64> + '_ {
        (0..self.len()).map(|i| self.time(i))
    }

    /// Adds a sample after the others.
    pub fn push(&mut self, s: Sample) {
        let offset = self.offset_of(s.time_us, None);
        self.push_offset(s, offset);
    }

    /// [`Samples::push`] of a sample whose time was read as `time`.
    pub fn push_read(&mut self, time: Time, line: u32, seq: u32) {
        let offset = self.offset_of(time.us, Some(time.decimal()));
        let s = Sample {
            time_us: time.us,
            line,
            seq,
        };
        self.push_offset(s, offset);
    }

    /// Adds sample `s`, its time kept as `offset`.
    fn push_offset(&mut self, s: Sample, offset: i32) {
        let n = self.len as usize;
        self.len += 1;
        if offset == WIDE {
            let m = self.more.get_or_insert_with(Default::default);
            m.wide.push((n as u32, s.time_us));
        }
        if n == 0 {
            (self.seq0, self.line0) = (s.seq, s.line);
            return;
        }
        let (seq0, line0) = (self.seq0, self.line0);
        let m = self.more.get_or_insert_with(Default::default);
        m.push_offset(n - 1, offset);
        if n == 1 {
            m.seq_step = s.seq.wrapping_sub(seq0);
            m.line_step = s.line.wrapping_sub(line0);
        }
        push_listed(&mut m.seqs, seq0, m.seq_step, n, s.seq);
        push_listed(&mut m.lines, line0, m.line_step, n, s.line);
    }

    /// The offset `t` is kept as ([`WIDE`]: whole), the group's decimals
    /// raised when `t` needs more and every time kept so far takes them;
    /// `known`: [`fewest_decimals`] of `t`, when the reader found it.
    fn offset_of(&mut self, t: f64, known: Option<Option<(u8, u64)>>) -> i32 {
        if self.decimals == NO_BASE {
            let Some((decimals, digits)) = known.unwrap_or_else(|| fewest_decimals(t)) else {
                return WIDE;
            };
            (self.decimals, self.base) = (decimals, digits);
            return 0;
        }
        let offset = |digits: u64, base: u64| {
            i32::try_from(digits as i64 - base as i64)
                .ok()
                .filter(|&o| o != WIDE)
        };
        let decimal = match known {
            Some(decimal) => decimal,
            None => {
                if let Some(d) = digits_at(t, self.decimals) {
                    return offset(d, self.base).unwrap_or(WIDE);
                }
                fewest_decimals(t)
            }
        };
        // At the group's decimals: the same digits scaled (the same
        // decimal, so the same time).
        let here = match decimal {
            Some((d, m)) if d <= self.decimals => m
                .checked_mul(10u64.pow(u32::from(self.decimals - d)))
                .filter(|&m| m < EXACT),
            _ => None,
        };
        if let Some(d) = here {
            return offset(d, self.base).unwrap_or(WIDE);
        }
        match decimal {
            Some((decimals, digits)) if decimals > self.decimals => {
                let scale = 10u64.pow(u32::from(decimals - self.decimals));
                if self.rescale(scale) {
                    self.decimals = decimals;
                    return offset(digits, self.base).unwrap_or(WIDE);
                }
                WIDE
            }
            _ => WIDE,
        }
    }

    /// Multiplies every kept digits by `scale` (more decimals), if they
    /// all still fit; false (and nothing changed) if not.
    fn rescale(&mut self, scale: u64) -> bool {
        let Some(base) = self.base.checked_mul(scale).filter(|&b| b < EXACT) else {
            return false;
        };
        let scaled = |o: i32| -> Option<i32> {
            if o == WIDE {
                return Some(WIDE);
            }
            let o = i64::from(o).checked_mul(scale as i64)?;
            let digits = (base as i64).checked_add(o)?;
            if !(0..EXACT as i64).contains(&digits) {
                return None;
            }
            i32::try_from(o).ok().filter(|&o| o != WIDE)
        };
        if let Some(m) = self.more.as_deref_mut() {
            let n = self.len as usize - 1;
            if !(0..n).all(|i| scaled(m.offset(i)).is_some()) {
                return false;
            }
            for i in 0..n {
                let o = m.offset_mut(i);
                *o = scaled(*o).unwrap_or(WIDE);
            }
        }
        self.base = base;
        true
    }

    /// The offset of the sample after the `i`-th.
    fn offset(&self, i: usize) -> i32 {
        match self.more.as_deref() {
            Some(m) => m.offset(i),
            None => unreachable!("one sample has no offsets"),
        }
    }

    /// Shifts every sample's reading order by `base`.
    pub fn shift_seq(&mut self, base: u32) {
        self.seq0 = self.seq0.wrapping_add(base);
        if let Some(m) = &mut self.more {
            for s in &mut m.seqs {
                *s += base;
            }
        }
    }

    /// Keeps the samples `keep` accepts, in order.
    pub fn retain(&mut self, mut keep: impl FnMut(&Sample) -> bool) {
        let keeps: Vec<bool> = self.iter().map(|s| keep(&s)).collect();
        if keeps.iter().all(|&k| k) {
            return;
        }
        let mut kept = Samples::default();
        for (s, k) in self.iter().zip(keeps) {
            if k {
                kept.push(s);
            }
        }
        kept.shrink_to_fit();
        *self = kept;
    }

    /// Replaces every time `t` with `f(t)`, in order.
    pub fn map_times(&mut self, mut f: impl FnMut(f64) -> f64) {
        let mut mapped = Samples::default();
        for s in self.iter() {
            mapped.push(Sample {
                time_us: f(s.time_us),
                ..s
            });
        }
        mapped.shrink_to_fit();
        *self = mapped;
    }

    /// Removes and returns the `i`-th sample.
    pub fn remove(&mut self, i: usize) -> Sample {
        let s = self.get(i);
        let mut at = 0;
        self.retain(|_| {
            at += 1;
            at - 1 != i
        });
        s
    }

    /// Adds samples after the others (see [`Samples::sort_by_seq`]).
    pub fn extend(&mut self, samples: impl IntoIterator<Item = Sample>) {
        for s in samples {
            self.push(s);
        }
    }

    /// Puts the samples in reading order.
    pub fn sort_by_seq(&mut self) {
        let mut v: Vec<Sample> = self.iter().collect();
        if v.is_sorted_by_key(|s| s.seq) {
            return;
        }
        v.sort_by_key(|s| s.seq);
        let mut sorted = Samples::default();
        sorted.extend(v);
        sorted.shrink_to_fit();
        *self = sorted;
    }

    pub fn shrink_to_fit(&mut self) {
        if let Some(m) = &mut self.more {
            m.offsets.shrink_to_fit();
            m.blocks.shrink_to_fit();
            m.seqs.shrink_to_fit();
            m.lines.shrink_to_fit();
            m.wide.shrink_to_fit();
        }
    }

    #[cfg(test)]
    fn blocks(&self) -> usize {
        self.more.as_deref().map_or(0, |m| m.blocks.len())
    }

    #[cfg(test)]
    fn wide(&self) -> usize {
        self.more.as_deref().map_or(0, |m| m.wide.len())
    }
}

impl More {
    /// The offset of the sample after the `i`-th.
    fn offset(&self, i: usize) -> i32 {
        match i.checked_sub(BLOCK) {
            None => self.offsets[i],
            Some(j) => self.blocks[j / BLOCK][j % BLOCK],
        }
    }

    fn offset_mut(&mut self, i: usize) -> &mut i32 {
        match i.checked_sub(BLOCK) {
            None => &mut self.offsets[i],
            Some(j) => &mut self.blocks[j / BLOCK][j % BLOCK],
        }
    }

    /// Sets the offset of the sample after the `i`-th, the last pushed.
    fn push_offset(&mut self, i: usize, offset: i32) {
        let v = &mut self.offsets;
        if i < BLOCK {
            // Grow by a quarter, not double: a sweep of many repeats is
            // mostly these vectors, and doubling leaves a third of them
            // empty.
            if v.len() == v.capacity() {
                v.reserve_exact((v.len() / 4).clamp(3, BLOCK - v.len()));
            }
            v.push(offset);
            return;
        }
        let j = i - BLOCK;
        if j.is_multiple_of(BLOCK) {
            self.blocks.push(Box::new([0; BLOCK]));
        }
        if let Some(b) = self.blocks.last_mut() {
            b[j % BLOCK] = offset;
        }
    }
}

/// The `i`-th value of a field kept as a stride (`first`, `step`) or,
/// once a value fell off it, as `list`.
fn listed(list: &[u32], first: u32, step: u32, i: usize) -> u32 {
    match list.get(i) {
        Some(&v) => v,
        None => stride(first, step, i),
    }
}

/// Adds the `n`-th value `value` to a field kept as a stride until a value
/// falls off it, then as `list`.
fn push_listed(list: &mut Vec<u32>, first: u32, step: u32, n: usize, value: u32) {
    if !list.is_empty() {
        list.push(value);
        return;
    }
    if stride(first, step, n) == value {
        return;
    }
    list.extend((0..n).map(|i| stride(first, step, i)));
    list.push(value);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(time_us: f64, line: u32, seq: u32) -> Sample {
        Sample { time_us, line, seq }
    }

    /// Every time comes back bit for bit: printed decimals as offsets
    /// (the group's decimals raised as a time needs more), the rest (too
    /// many digits, negative, -0, NaN, infinite, far from the first) kept
    /// whole.
    #[test]
    fn times_come_back_bit_for_bit() {
        let printed = ["4.77", "4.771", "10.00", "1e-3", "477.5", "0", "0.000123"];
        for t in printed {
            let v: f64 = t.parse().unwrap();
            let (decimals, digits) = fewest_decimals(v).unwrap_or_else(|| panic!("{t}"));
            assert_eq!(
                (digits as f64 / POW10[usize::from(decimals)]).to_bits(),
                v.to_bits(),
                "{t}"
            );
        }
        let whole = [
            1.0 / 3.0,
            -2.5,
            -0.0,
            f64::NAN,
            f64::INFINITY,
            1e300,
            // Far from the first at the decimals the group has by then.
            4213090.123 + 9e6,
        ];
        let times: Vec<f64> = printed
            .iter()
            .map(|t| t.parse::<f64>().unwrap())
            .chain(whole)
            .collect();
        let mut s = Samples::default();
        for (i, &t) in times.iter().enumerate() {
            s.push(sample(t, i as u32 + 2, i as u32));
            assert_eq!(s.get(i).time_us.to_bits(), t.to_bits(), "{t}");
        }
        assert_eq!(s.decimals, 6, "raised to the most any printed time has");
        assert_eq!(Some(s.wide()), Some(whole.len()));
        let back: Vec<u64> = s.times().map(f64::to_bits).collect();
        let want: Vec<u64> = times.iter().map(|t| t.to_bits()).collect();
        assert_eq!(back, want);
        // The first kept whole, the next ones decimals.
        let mut s = Samples::default();
        for (i, t) in [f64::NAN, 2.5, 2.25].into_iter().enumerate() {
            s.push(sample(t, 1, i as u32));
        }
        let back: Vec<u64> = s.times().map(f64::to_bits).collect();
        assert_eq!(
            back,
            [f64::NAN.to_bits(), 2.5f64.to_bits(), 2.25f64.to_bits()]
        );
    }

    /// A time whose decimal the reader found (on its own thread) is kept
    /// as the same time as one pushed bare, through raised decimals, times
    /// at fewer decimals than the group's, and times kept whole.
    #[test]
    fn a_time_read_with_its_decimal_comes_back_as_pushed() {
        let times = [
            4.77,
            4.771,
            10.0,
            2.5,
            1.0 / 3.0,
            f64::NAN,
            4213090.123,
            0.000123,
            4.77,
        ];
        let (mut bare, mut read) = (Samples::default(), Samples::default());
        for (i, &t) in times.iter().enumerate() {
            bare.push(sample(t, 3 + i as u32, 7 * i as u32));
            read.push_read(Time::read(t), 3 + i as u32, 7 * i as u32);
        }
        let bits = |s: &Samples| {
            s.iter()
                .map(|x| (x.time_us.to_bits(), x.line, x.seq))
                .collect::<Vec<_>>()
        };
        assert_eq!(bits(&read), bits(&bare));
        let want: Vec<u64> = times.iter().map(|t| t.to_bits()).collect();
        assert_eq!(read.times().map(f64::to_bits).collect::<Vec<_>>(), want);
    }

    /// Raising the decimals would push an earlier time's digits out of
    /// range: the new time is kept whole instead, and both come back.
    #[test]
    fn a_time_that_cannot_share_the_decimals_is_kept_whole() {
        let mut s = Samples::default();
        let times = [4_000_000.0, 1.000001, 4_000_000.5];
        for (i, &t) in times.iter().enumerate() {
            s.push(sample(t, 1, i as u32));
        }
        let back: Vec<f64> = s.times().collect();
        assert_eq!(back, times);
        assert_eq!(Some(s.wide()), Some(1));
        // A 4-second time at 3 decimals (more digits than 32 bits hold)
        // and its repeats: offsets from the first, none kept whole.
        let mut s = Samples::default();
        let times = [4213090.123, 4213090.5, 4199999.999, 4300000.001];
        for (i, &t) in times.iter().enumerate() {
            s.push(sample(t, 1, i as u32));
        }
        let back: Vec<f64> = s.times().collect();
        assert_eq!(back, times);
        assert_eq!(s.wide(), 0, "{s:?}");
    }

    /// Orders and lines at a stride take no list; one off the stride turns
    /// it into a list, and every sample still comes back as pushed.
    #[test]
    fn samples_come_back_as_pushed_at_a_stride_or_not() {
        let mut s = Samples::default();
        let pushed: Vec<Sample> = (0..10)
            .map(|i| sample(1.5 + i as f64, 2 + 38850 * i, 38850 * i))
            .collect();
        s.extend(pushed.iter().copied());
        assert!(
            s.more
                .as_ref()
                .is_some_and(|m| m.seqs.is_empty() && m.lines.is_empty()),
            "a stride needs no list"
        );
        assert_eq!(s.iter().collect::<Vec<_>>(), pushed);
        // A row dropped: still a stride of lines? No: a list, exact.
        let mut off = pushed.clone();
        off.push(sample(7.25, 38850 * 10 + 5, 38850 * 10 + 1));
        off.push(sample(7.5, 38850 * 11 + 5, 38850 * 11));
        let mut s = Samples::default();
        s.extend(off.iter().copied());
        assert_eq!(s.iter().collect::<Vec<_>>(), off);
        // Lines the same for two samples (two placements of one log line).
        let same_line = [sample(1.0, 7, 0), sample(2.0, 7, 1), sample(3.0, 8, 2)];
        let mut s = Samples::default();
        s.extend(same_line);
        assert_eq!(s.iter().collect::<Vec<_>>(), same_line);
    }

    /// A large group (its offsets in blocks) whose decimals are raised
    /// late, then a sample removed: every time comes back.
    #[test]
    fn a_large_group_comes_back_whole() {
        let times: Vec<f64> = (0..3 * BLOCK + 7)
            .map(|i| match i {
                // 3 decimals from here on.
                i if i == 2 * BLOCK + 1 => 1000.125,
                i if i % 97 == 5 => f64::NAN,
                i => 1000.0 + (i % 17) as f64 * 0.25,
            })
            .collect();
        let mut s = Samples::default();
        for (i, &t) in times.iter().enumerate() {
            s.push(sample(t, 2 + i as u32, i as u32));
        }
        let bits = |v: &mut dyn Iterator<Item = f64>| v.map(f64::to_bits).collect::<Vec<_>>();
        assert_eq!(bits(&mut s.times()), bits(&mut times.iter().copied()));
        assert_eq!(s.blocks(), 3, "1 + BLOCK in the vector, the rest in blocks");
        s.remove(BLOCK + 3);
        let mut rest = times.clone();
        rest.remove(BLOCK + 3);
        assert_eq!(bits(&mut s.times()), bits(&mut rest.iter().copied()));
    }

    #[test]
    fn removing_shifting_and_sorting_keep_every_other_sample() {
        let pushed: Vec<Sample> = (0..8).map(|i| sample(i as f64, 10 + i, 3 * i)).collect();
        let mut s = Samples::default();
        s.extend(pushed.iter().copied());
        assert_eq!(s.remove(3), pushed[3]);
        let mut rest = pushed.clone();
        rest.remove(3);
        assert_eq!(s.iter().collect::<Vec<_>>(), rest);
        s.retain(|x| x.seq != 0);
        rest.remove(0);
        assert_eq!(s.iter().collect::<Vec<_>>(), rest);
        s.map_times(|t| t * 2.0);
        rest.iter_mut().for_each(|x| x.time_us *= 2.0);
        assert_eq!(s.iter().collect::<Vec<_>>(), rest);
        s.shift_seq(100);
        let shifted: Vec<u32> = rest.iter().map(|x| x.seq + 100).collect();
        assert_eq!(s.iter().map(|x| x.seq).collect::<Vec<_>>(), shifted);
        s.push(sample(0.5, 1, 50));
        s.sort_by_seq();
        let seqs: Vec<u32> = s.iter().map(|x| x.seq).collect();
        assert!(seqs.is_sorted(), "{seqs:?}");
        assert_eq!(s.seqs().collect::<Vec<_>>(), seqs);
        assert_eq!(s.first(), Some(sample(0.5, 1, 50)));
        assert_eq!(s.len(), rest.len() + 1);
    }
}
