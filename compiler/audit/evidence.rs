//! What a decision rests on and what it is expected to gain, worded once
//! for `compile`, `explain` and `query`, so the same decision at the same
//! shape reads the same in all three.
//!
//! At one shape (a call) the plugin's rule gives one ground and one gain.
//! A statement about a region (a line of `compile`'s report, a leaf of a
//! summary tree, a rule over many sizes) covers shapes whose grounds and
//! gains may differ: it names every ground it covers ("measured and
//! interpolated") and its gain as the range of its shapes' gains, so no
//! shape inside it is described more strongly than the plugin's own rule
//! describes it.

use dyncc_tables::{size_bucket, Basis, Coll, Decision, Lookup, Table};

use crate::units::{fmt_bytes, fmt_gain_range};

/// What one answer rests on, strongest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Ground {
    Measured,
    Interpolated,
    Extrapolated,
    /// A size outside the sweep's measured sizes, left to NCCL by a rule
    /// stored as "measured" (the sweep measured NCCL's default there as
    /// much as anything else, which is to say not at all at this size).
    BeyondSweep,
}

impl Ground {
    pub const ALL: [Ground; 4] = [
        Ground::Measured,
        Ground::Interpolated,
        Ground::Extrapolated,
        Ground::BeyondSweep,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Ground::Measured => "measured",
            Ground::Interpolated => "interpolated",
            Ground::Extrapolated => "extrapolated",
            Ground::BeyondSweep => BEYOND_THE_SWEEP,
        }
    }

    pub fn of_basis(b: Basis) -> Ground {
        match b {
            Basis::Measured => Ground::Measured,
            Basis::Interpolated => Ground::Interpolated,
            Basis::Extrapolated => Ground::Extrapolated,
        }
    }
}

/// The word for a size beyond the sweep's measured sizes.
pub const BEYOND_THE_SWEEP: &str = "beyond the sweep";

/// The sizes the sweep measured at one collective and ranks per node.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SweepSizes {
    pub min_bytes: u64,
    pub max_bytes: u64,
}

impl SweepSizes {
    /// Whether `bytes` falls in a size bucket outside the measured ones
    /// (the buckets `decide` treats as outside).
    pub fn excludes(&self, bytes: u64) -> bool {
        let b = size_bucket(bytes);
        b < size_bucket(self.min_bytes) || b > size_bucket(self.max_bytes)
    }

    /// "beyond the sweep, which measured 8 B..4 GiB at ...".
    pub fn why(&self) -> String {
        format!(
            "{BEYOND_THE_SWEEP}, which measured {}..{} at this collective and ranks per node",
            fmt_bytes(self.min_bytes),
            fmt_bytes(self.max_bytes)
        )
    }
}

/// The sizes the table's `coverage` metadata says the sweep measured for
/// `coll` at `ranks / nodes` ranks per node; `None` when it does not say
/// (or the ranks are not a multiple of the nodes).
pub fn sweep_sizes(table: &Table, coll: Coll, nodes: u64, ranks: u64) -> Option<SweepSizes> {
    if nodes == 0 || !ranks.is_multiple_of(nodes) {
        return None;
    }
    let ppn = u32::try_from(ranks / nodes).ok()?;
    crate::audit::coverage::measured_sizes(table.meta("coverage")?)
        .into_iter()
        .filter(|m| m.collective == coll.name() && m.ppn == ppn)
        .map(|m| SweepSizes {
            min_bytes: m.min_bytes,
            max_bytes: m.max_bytes,
        })
        .reduce(|a, b| SweepSizes {
            min_bytes: a.min_bytes.min(b.min_bytes),
            max_bytes: a.max_bytes.max(b.max_bytes),
        })
}

/// The ground of the plugin's answer `l` at one call; `None` when no rule
/// applied. A "measured" rule at a size outside `sweep` is beyond the sweep.
pub fn ground_at(l: &Lookup, sweep: Option<&SweepSizes>, bytes: u64) -> Option<Ground> {
    let basis = l.basis?;
    Some(match sweep {
        Some(s) if basis == Basis::Measured && s.excludes(bytes) => Ground::BeyondSweep,
        _ => Ground::of_basis(basis),
    })
}

/// The evidence of one stored rule over sizes `from..=to`: its basis, and
/// where a "measured" rule reaches past the sweep's sizes, beyond the sweep
/// (only that, when the whole rule lies outside them).
pub fn rule_evidence(
    sweep: Option<&SweepSizes>,
    from: u64,
    to: u64,
    basis: Basis,
    gain: f64,
) -> Evidence {
    let Some(s) = sweep.filter(|_| basis == Basis::Measured) else {
        return Evidence::one(Ground::of_basis(basis), gain);
    };
    let (lo, hi) = (size_bucket(s.min_bytes), size_bucket(s.max_bytes));
    let (a, b) = (size_bucket(from), size_bucket(to));
    let mut e = Evidence::default();
    if a <= hi && b >= lo {
        e.add(Ground::Measured, gain);
    }
    if a < lo || b > hi {
        e.add(Ground::BeyondSweep, gain);
    }
    e
}

/// What a statement about one decision over one or more shapes says: the
/// grounds it covers and the range of its expected gains.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Evidence {
    /// Bit `g as u8` set for each ground covered.
    grounds: u8,
    pub gain_min: f64,
    pub gain_max: f64,
}

impl Default for Evidence {
    fn default() -> Self {
        Evidence {
            grounds: 0,
            gain_min: f64::INFINITY,
            gain_max: f64::NEG_INFINITY,
        }
    }
}

impl Evidence {
    /// One shape's (or one rule's) evidence.
    pub fn one(ground: Ground, gain: f64) -> Evidence {
        let mut e = Evidence::default();
        e.add(ground, gain);
        e
    }

    pub fn add(&mut self, ground: Ground, gain: f64) {
        self.grounds |= 1 << ground as u8;
        self.gain_min = self.gain_min.min(gain);
        self.gain_max = self.gain_max.max(gain);
    }

    pub fn merge(&mut self, other: &Evidence) {
        self.grounds |= other.grounds;
        self.gain_min = self.gain_min.min(other.gain_min);
        self.gain_max = self.gain_max.max(other.gain_max);
    }

    pub fn is_empty(&self) -> bool {
        self.grounds == 0
    }

    /// The grounds covered, strongest first.
    pub fn grounds(&self) -> impl Iterator<Item = Ground> + '_ {
        Ground::ALL
            .into_iter()
            .filter(|g| self.grounds & (1 << *g as u8) != 0)
    }

    /// "measured", "measured and interpolated", "measured, interpolated and
    /// extrapolated".
    pub fn word(&self) -> String {
        let names: Vec<&str> = self.grounds().map(Ground::name).collect();
        match names.as_slice() {
            [] => "no rule".into(),
            [one] => (*one).into(),
            [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
        }
    }

    /// "+4.1 %", or "+3.0 to +5.6 %" when the shapes' gains print apart.
    pub fn gain_text(&self) -> String {
        fmt_gain_range(self.gain_min, self.gain_max)
    }

    /// "tree/ll, +4.1 % vs default, measured" or "NCCL's choice (measured)".
    pub fn then(&self, d: Decision) -> String {
        match d {
            Decision::Default => format!("NCCL's choice ({})", self.word()),
            d => format!(
                "{}, {} vs default, {}",
                crate::audit::text::fmt_decision(d),
                self.gain_text(),
                self.word()
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A region names every ground it covers and its gains' range; one
    /// shape reads as one ground and one figure.
    #[test]
    fn a_region_names_every_ground_and_its_gain_range() {
        let one = Evidence::one(Ground::Measured, 1.041);
        assert_eq!(one.word(), "measured");
        assert_eq!(one.gain_text(), "+4.1 %");
        let mut region = one;
        region.add(Ground::Interpolated, 1.056);
        assert_eq!(region.word(), "measured and interpolated");
        assert_eq!(region.gain_text(), "+4.1 to +5.6 %");
        region.add(Ground::BeyondSweep, 1.05);
        assert_eq!(region.word(), "measured, interpolated and beyond the sweep");
        // Gains that print alike read as one figure.
        let mut close = Evidence::one(Ground::Measured, 1.0411);
        close.add(Ground::Measured, 1.0412);
        assert_eq!(close.gain_text(), "+4.1 %");
    }
}
