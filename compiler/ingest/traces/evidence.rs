//! The evidence rule: what a traced comparison of a setting with NCCL's
//! choice rests on ([`Evidence`], from per-communicator [`Side`]s), and
//! whether it clears the bar ([`judge`]). Compile and `eval --traces` both
//! judge by it.

use serde::Serialize;

use dyncc_tables::TraceRecord;

pub mod rule {
    //! The rule a traced comparison meets before it decides a point (compile)
    //! or scores a table (`eval --traces`): one definition, [`evidence`](super::evidence) and
    //! [`judge`](super::judge). A trace is evidence, never an order:
    //!
    //! - each side (NCCL's choice, the setting) holds at least [`MIN_CALLS`]
    //!   calls;
    //! - the gain is read within each communicator that ran both sides, with
    //!   the noise of its own calls' spread plus a job-to-job floor
    //!   ([`GAIN_SD_FLOOR`], or the spread of the gains between communicators
    //!   where it is larger), and across communicators that ran one side each
    //!   (per-communicator geometric means; the noise from the spread between
    //!   communicators of a side, pooled over the sides, never below
    //!   [`BETWEEN_SD_FLOOR`]), needing [`MIN_COMMS_ACROSS`] communicators in
    //!   all; both pooled by inverse variance; its sd is never below
    //!   [`SD_FLOOR`], whatever the counts;
    //! - a setting wins where its gain clears the margin by `z` sds, falls
    //!   short where it misses the margin by `z` sds, loses where it is slower
    //!   than NCCL's choice by `z` sds; at a point the sweep measured, `z` is
    //!   at least [`Z_SWEPT`].

    /// Fewest calls on each side of a comparison.
    /// Defined by the tables crate, which the plugin reads too: it stops
    /// recording a shape once each side has this many.
    pub const MIN_CALLS: u64 = dyncc_tables::trace::MIN_CALLS_PER_SIDE;
    /// Fewest communicators (both sides together, at least one each) where
    /// sides are paired across communicators.
    pub const MIN_COMMS_ACROSS: usize = 3;
    /// Least job-to-job sd of one communicator's gain (ln).
    pub const GAIN_SD_FLOOR: f64 = 0.02;
    /// Least sd of one communicator's geometric mean time between
    /// communicators at one shape (ln).
    pub const BETWEEN_SD_FLOOR: f64 = 0.03;
    /// Least sd of any traced gain (ln), however many calls and
    /// communicators.
    pub const SD_FLOOR: f64 = 0.01;
    /// Least `z` at a point the sweep measured too.
    pub const Z_SWEPT: f64 = 2.0;
}

/// What a comparison of one setting with NCCL's choice at one point rests
/// on: the gain (ln t(NCCL's choice) / t(setting)), its sd, and the counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Evidence {
    pub ln_gain: f64,
    pub sd: f64,
    /// Calls of NCCL's choice, and of the setting.
    pub nccl_calls: u64,
    pub calls: u64,
    /// Communicators that ran NCCL's choice, and the setting.
    pub nccl_comms: usize,
    pub comms: usize,
    /// Communicators that ran both (compared within themselves).
    pub paired: usize,
}

/// How a comparison stands against the rule ([`rule`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Faster than NCCL's choice past the margin and `z` sds.
    Wins,
    /// Short of the margin by `z` sds (not worth forcing), not slower.
    Short,
    /// Slower than NCCL's choice by `z` sds.
    Loses,
    /// Within the noise.
    Unclear,
    /// Fewer calls or communicators than the rule asks.
    TooLittle,
}

impl Verdict {
    /// Whether the evidence decides (either way).
    pub fn decides(self) -> bool {
        matches!(self, Verdict::Wins | Verdict::Short | Verdict::Loses)
    }

    /// The verdict in words, as the report and `query` print it.
    pub fn describe(self) -> &'static str {
        match self {
            Verdict::TooLittle => "too few calls or communicators",
            Verdict::Unclear => "within the noise",
            Verdict::Wins => "wins",
            Verdict::Short => "short of the margin",
            Verdict::Loses => "loses",
        }
    }
}

/// The bar a comparison is judged against: the margin (ln) and `z`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bar {
    pub ln_margin: f64,
    pub z: f64,
}

impl Bar {
    /// Compile's bar for `--margin` (a fraction) and `--noise-z`.
    pub fn new(margin: f64, z: f64) -> Bar {
        Bar {
            ln_margin: (1.0 + margin).ln(),
            z,
        }
    }

    /// The stricter bar at a point the sweep measured too.
    pub fn swept(self) -> Bar {
        Bar {
            z: self.z.max(rule::Z_SWEPT),
            ..self
        }
    }
}

/// The rule, applied: see [`rule`].
pub fn judge(e: &Evidence, bar: Bar) -> Verdict {
    let across = e.nccl_comms + e.comms - 2 * e.paired;
    if e.nccl_calls < rule::MIN_CALLS
        || e.calls < rule::MIN_CALLS
        || (e.paired == 0 && across < rule::MIN_COMMS_ACROSS)
        || !(e.ln_gain.is_finite() && e.sd.is_finite())
    {
        return Verdict::TooLittle;
    }
    let sd = e.sd.max(rule::SD_FLOOR);
    if e.ln_gain - bar.z * sd > bar.ln_margin {
        Verdict::Wins
    } else if e.ln_gain + bar.z * sd < 0.0 {
        Verdict::Loses
    } else if e.ln_gain + bar.z * sd < bar.ln_margin {
        Verdict::Short
    } else {
        Verdict::Unclear
    }
}

/// The evidence of one setting against NCCL's choice from its
/// communicators' measurements, `(NCCL's choice, the setting)` per
/// communicator (either side may be empty), with `var_call` the variance
/// of one call's ln(time) (the traces' own spread). `None` where no
/// communicator ran either side.
pub fn evidence(per_comm: &[(Side, Side)], var_call: f64) -> Option<Evidence> {
    let mut e = Evidence::default();
    for (n, s) in per_comm {
        e.nccl_calls = e.nccl_calls.saturating_add(n.count);
        e.calls = e.calls.saturating_add(s.count);
        e.nccl_comms += usize::from(n.count > 0);
        e.comms += usize::from(s.count > 0);
        e.paired += usize::from(n.count > 0 && s.count > 0);
    }
    if e.nccl_comms == 0 || e.comms == 0 {
        return None;
    }
    let var_call = if var_call.is_finite() {
        var_call.max(0.0)
    } else {
        0.05f64.powi(2)
    };
    // Within communicators: a gain each, with its calls' noise and the
    // job-to-job spread of gains (observed, never below the floor).
    let within: Vec<(f64, f64)> = per_comm
        .iter()
        .filter(|(n, s)| n.count > 0 && s.count > 0)
        .map(|(n, s)| {
            (
                n.mean_ln() - s.mean_ln(),
                var_call * (1.0 / n.count as f64 + 1.0 / s.count as f64),
            )
        })
        .collect();
    let mut parts: Vec<(f64, f64)> = Vec::new();
    if !within.is_empty() {
        let k = within.len() as f64;
        let mut tau2 = rule::GAIN_SD_FLOOR.powi(2);
        if within.len() >= 2 {
            let mean = within.iter().map(|w| w.0).sum::<f64>() / k;
            let s2 = within.iter().map(|w| (w.0 - mean).powi(2)).sum::<f64>() / (k - 1.0);
            let noise = within.iter().map(|w| w.1).sum::<f64>() / k;
            tau2 = tau2.max(s2 - noise);
        }
        let (mut wsum, mut wg) = (0.0, 0.0);
        for (g, v) in &within {
            let w = 1.0 / (v + tau2);
            wsum += w;
            wg += w * g;
        }
        parts.push((wg / wsum, 1.0 / wsum));
    }
    // Across communicators that ran one side each: per-communicator
    // geometric means, the spread between communicators of a side pooled
    // over both sides.
    let one = |pick: &dyn Fn(&(Side, Side)) -> Option<f64>| -> Vec<f64> {
        per_comm.iter().filter_map(pick).collect()
    };
    let a = one(&|(n, s)| (n.count > 0 && s.count == 0).then(|| n.mean_ln()));
    let b = one(&|(n, s)| (s.count > 0 && n.count == 0).then(|| s.mean_ln()));
    if !a.is_empty() && !b.is_empty() && a.len() + b.len() >= rule::MIN_COMMS_ACROSS {
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
        let ss = |v: &[f64]| {
            let m = mean(v);
            v.iter().map(|x| (x - m).powi(2)).sum::<f64>()
        };
        let dof = (a.len() + b.len() - 2) as f64;
        let s2 = ((ss(&a) + ss(&b)) / dof).max(rule::BETWEEN_SD_FLOOR.powi(2));
        parts.push((
            mean(&a) - mean(&b),
            s2 * (1.0 / a.len() as f64 + 1.0 / b.len() as f64),
        ));
    }
    if parts.is_empty() {
        // Too few communicators to pair across, none that ran both: the
        // counts say so ([`judge`]).
        e.ln_gain = f64::NAN;
        e.sd = f64::INFINITY;
        return Some(e);
    }
    let wsum: f64 = parts.iter().map(|p| 1.0 / p.1.max(1e-300)).sum();
    e.ln_gain = parts.iter().map(|p| p.0 / p.1.max(1e-300)).sum::<f64>() / wsum;
    e.sd = (1.0 / wsum).sqrt().max(rule::SD_FLOOR);
    Some(e)
}

/// Variance of one call's ln(time), pooled over `sides`; 5 % squared when
/// none ran twice.
pub fn var_call<'a>(sides: impl Iterator<Item = &'a Side>) -> f64 {
    let (mut ss, mut dof) = (0.0, 0.0);
    for s in sides {
        ss += s.ss();
        dof += s.count.saturating_sub(1) as f64;
    }
    if dof > 0.0 && (ss / dof).is_finite() {
        ss / dof
    } else {
        0.05f64.powi(2)
    }
}

/// ` +-2.1 %, 10 vs 490 calls, 3 vs 5 communicators (1 paired)`: the
/// counts behind a traced comparison.
pub fn counts(e: &Evidence) -> String {
    let sd = if e.sd.is_finite() {
        format!(" +-{:.1} %", e.sd * 100.0)
    } else {
        String::new()
    };
    let comms = if e.paired == e.comms && e.paired == e.nccl_comms {
        format!(
            "{} communicator{} running both",
            e.paired,
            if e.paired == 1 { "" } else { "s" }
        )
    } else {
        format!(
            "{} vs {} communicators ({} running both)",
            e.comms, e.nccl_comms, e.paired
        )
    };
    format!("{sd}, {} vs {} calls, {comms}", e.calls, e.nccl_calls)
}

/// Pooled log GPU times of one side of a comparison.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Side {
    pub count: u64,
    pub sum_ln: f64,
    pub sum_ln2: f64,
}

impl Side {
    pub fn add(&mut self, r: &TraceRecord) {
        self.merge(&Side {
            count: r.count,
            sum_ln: r.sum_ln,
            sum_ln2: r.sum_ln2,
        });
    }

    /// Adds another side's collectives (counts saturate: a file may claim
    /// any count).
    pub fn merge(&mut self, o: &Side) {
        self.count = self.count.saturating_add(o.count);
        self.sum_ln += o.sum_ln;
        self.sum_ln2 += o.sum_ln2;
    }

    pub fn mean_ln(&self) -> f64 {
        self.sum_ln / self.count.max(1) as f64
    }

    /// Variance of the mean of ln(time): the sample variance over the
    /// count; infinite with fewer than two collectives (no spread known).
    pub fn var_of_mean(&self) -> f64 {
        if self.count < 2 {
            return f64::INFINITY;
        }
        let n = self.count as f64;
        self.ss() / (n - 1.0) / n
    }

    /// Sum of squared deviations from the mean (for pooled variances).
    pub(super) fn ss(&self) -> f64 {
        let n = self.count as f64;
        (self.sum_ln2 - n * self.mean_ln().powi(2)).max(0.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn side(count: u64, ln: f64, sd: f64) -> Side {
        Side {
            count,
            sum_ln: count as f64 * ln,
            sum_ln2: count as f64 * ln * ln + (count as f64 - 1.0) * sd * sd,
        }
    }

    #[test]
    fn the_noise_floor_is_never_divided_away() {
        // A million calls a side, no spread, one communicator.
        let big = [(side(1_000_000, 7.0, 0.0), side(1_000_000, 6.9, 0.0))];
        let e = evidence(&big, var_call(big.iter().flat_map(|p| [&p.0, &p.1]))).unwrap();
        assert!(e.sd >= rule::GAIN_SD_FLOOR * 0.999, "{e:?}");
        // A hundred communicators each side, across: never below SD_FLOOR.
        let mut many = vec![(side(100, 7.0, 0.0), Side::default()); 100];
        many.extend(vec![(Side::default(), side(100, 6.99, 0.0)); 100]);
        let e = evidence(&many, 0.0).unwrap();
        assert!(e.sd >= rule::SD_FLOOR, "{e:?}");
        assert_eq!((e.nccl_comms, e.comms, e.paired), (100, 100, 0));
        assert_eq!(judge(&e, Bar::new(0.03, 0.5)), Verdict::Short);
    }

    #[test]
    fn pairing_across_communicators_needs_enough_of_them() {
        let two = [
            (side(500, 7.0, 0.02), Side::default()),
            (Side::default(), side(500, 6.0, 0.02)),
        ];
        let e = evidence(&two, 0.02f64.powi(2)).unwrap();
        assert_eq!(judge(&e, Bar::new(0.03, 0.5)), Verdict::TooLittle);
        let three = [two[0], two[0], two[1]];
        let e = evidence(&three, 0.02f64.powi(2)).unwrap();
        assert!((e.ln_gain - 1.0).abs() < 1e-9, "{e:?}");
        assert_eq!(judge(&e, Bar::new(0.03, 0.5)), Verdict::Wins);
    }
}
