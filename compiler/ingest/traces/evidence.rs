//! The evidence rule: what a traced comparison of a setting with NCCL's
//! choice rests on ([`Evidence`], from per-communicator [`Side`]s), and
//! whether it clears the bar ([`judge`]). Compile and `eval --traces` both
//! judge by it.

use serde::Serialize;

use dyncc_tables::TraceRecord;

pub mod rule {
    //! The rule a traced comparison meets before it decides a point (compile)
    //! or scores a table (`eval --traces`, `query --data`): one definition,
    //! [`evidence`](super::evidence) and [`judge`](super::judge). A trace is
    //! evidence, never an order, and the unit of evidence is the
    //! communicator, as a run is the sweep's:
    //!
    //! - a communicator's calls are repeats inside one run (as a nccl-tests
    //!   row's iterations are): a side counts only with at least
    //!   [`MIN_CALLS`] calls in that communicator, and more calls never make
    //!   one communicator weigh more than one sweep run;
    //! - a communicator that ran both sides gives one gain; communicators
    //!   that ran one side each are compared across (per-communicator
    //!   geometric means, needing [`MIN_COMMS_ACROSS`] of them);
    //! - the spread between units is estimated from the units themselves and
    //!   never below what the sweep's own runs show between runs (a gain
    //!   from one communicator is as uncertain as a gain from one run of
    //!   each side in the sweep), so one communicator counts as a one-run
    //!   sweep; both readings pooled by inverse variance;
    //! - a setting wins where its gain clears the margin by `z` sds, falls
    //!   short where it misses the margin by `z` sds, loses where it is
    //!   slower than NCCL's choice by `z` sds;
    //! - at a point the sweep measured with R runs, the jobs change nothing
    //!   unless their communicators outweigh those runs ([`Evidence::units`](super::Evidence::units)
    //!   greater than R), and then the sweep's runs and the communicators are
    //!   pooled ([`Evidence::pooled`](super::Evidence::pooled)) before the same judgement.

    /// Fewest calls on each side inside one communicator for it to count.
    /// Defined by the tables crate, which the plugin reads too: it stops
    /// recording a shape once each side has this many.
    pub const MIN_CALLS: u64 = dyncc_tables::trace::MIN_CALLS_PER_SIDE;
    /// Fewest communicators (both sides together, at least one each) where
    /// sides are compared across communicators.
    pub const MIN_COMMS_ACROSS: usize = 3;
    /// One sweep run's sd of ln(time) where the sweep shows none (no
    /// repeats to read it from).
    pub const RUN_SD_DEFAULT: f64 = 0.02;
    /// Least sd of one run's ln(time) taken from a sweep (the fit's floor).
    pub const RUN_SD_FLOOR: f64 = crate::fit::MIN_SIGMA;
}

/// What a comparison of one setting with NCCL's choice at one point rests
/// on: the gain (ln t(NCCL's choice) / t(setting)), its sd, and the counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Evidence {
    pub ln_gain: f64,
    pub sd: f64,
    /// Calls of NCCL's choice, and of the setting, in the communicators
    /// that count.
    pub nccl_calls: u64,
    pub calls: u64,
    /// Communicators that ran NCCL's choice, and the setting (each with at
    /// least [`rule::MIN_CALLS`] calls of it).
    pub nccl_comms: usize,
    pub comms: usize,
    /// Communicators that ran both (compared within themselves).
    pub paired: usize,
    /// What the communicators weigh, in sweep runs: the number of one-run
    /// sweeps whose gain would be as certain (never more than the
    /// communicators compared).
    pub units: f64,
    /// Sweep runs pooled in ([`Evidence::pooled`]); 0 where the jobs alone
    /// measured the point.
    #[serde(skip_serializing_if = "is_zero")]
    pub sweep_runs: f64,
}

fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

impl Evidence {
    /// Whether the jobs' communicators outweigh `runs` of the sweep.
    pub fn outweighs(&self, runs: f64) -> bool {
        self.units > runs
    }

    /// The jobs' evidence pooled with the sweep's gain at the same point
    /// (`ln_gain`, `sd`, over `runs` runs), by inverse variance: the sweep's
    /// runs and the communicators on one scale.
    pub fn pooled(mut self, ln_gain: f64, sd: f64, runs: f64) -> Evidence {
        if !(ln_gain.is_finite() && sd.is_finite() && sd > 0.0) {
            return self;
        }
        if !(self.ln_gain.is_finite() && self.sd.is_finite() && self.sd > 0.0) {
            return self;
        }
        let (wt, ws) = (1.0 / (self.sd * self.sd), 1.0 / (sd * sd));
        self.ln_gain = (self.ln_gain * wt + ln_gain * ws) / (wt + ws);
        self.sd = (1.0 / (wt + ws)).sqrt();
        self.sweep_runs = runs;
        self
    }
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
}

/// The rule, applied: see [`rule`].
pub fn judge(e: &Evidence, bar: Bar) -> Verdict {
    if e.units <= 0.0 || !(e.ln_gain.is_finite() && e.sd.is_finite()) {
        return Verdict::TooLittle;
    }
    let sd = e.sd;
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
/// of one call's ln(time) (the traces' own spread) and `run_sd` the sd of
/// one sweep run's ln(time) (the least spread between units). `None` where
/// no communicator ran either side enough to count.
pub fn evidence(per_comm: &[(Side, Side)], var_call: f64, run_sd: f64) -> Option<Evidence> {
    let counts = |s: &Side| s.count >= rule::MIN_CALLS;
    let units: Vec<(Side, Side)> = per_comm
        .iter()
        .map(|(n, s)| {
            (
                if counts(n) { *n } else { Side::default() },
                if counts(s) { *s } else { Side::default() },
            )
        })
        .filter(|(n, s)| n.count > 0 || s.count > 0)
        .collect();
    let tally = |sides: &[(Side, Side)]| {
        let mut e = Evidence::default();
        for (n, s) in sides {
            e.nccl_calls = e.nccl_calls.saturating_add(n.count);
            e.calls = e.calls.saturating_add(s.count);
            e.nccl_comms += usize::from(n.count > 0);
            e.comms += usize::from(s.count > 0);
            e.paired += usize::from(n.count > 0 && s.count > 0);
        }
        e
    };
    let mut e = tally(&units);
    if e.nccl_comms == 0 || e.comms == 0 {
        // Both sides ran, but not enough in any communicator to count: the
        // comparison is reported with its counts, and decides nothing.
        let mut raw = tally(per_comm);
        if raw.nccl_comms == 0 || raw.comms == 0 {
            return None;
        }
        // What they claim, for the report: the mean gain of those that ran
        // both (none: no figure).
        let claims: Vec<f64> = per_comm
            .iter()
            .filter(|(n, s)| n.count > 0 && s.count > 0)
            .map(|(n, s)| n.mean_ln() - s.mean_ln())
            .collect();
        raw.ln_gain = if claims.is_empty() {
            f64::NAN
        } else {
            claims.iter().sum::<f64>() / claims.len() as f64
        };
        raw.sd = f64::INFINITY;
        return Some(raw);
    }
    let var_call = if var_call.is_finite() {
        var_call.max(0.0)
    } else {
        0.05f64.powi(2)
    };
    let run_var = if run_sd.is_finite() {
        run_sd.max(rule::RUN_SD_FLOOR).powi(2)
    } else {
        rule::RUN_SD_DEFAULT.powi(2)
    };
    // A gain read from one run of each side of the sweep: what one
    // communicator's gain is never more certain than.
    let unit_var = 2.0 * run_var;
    // Within communicators: a gain each, with its calls' noise and the
    // spread of gains between communicators (observed, never below a
    // sweep run's).
    let within: Vec<(f64, f64)> = units
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
        let mut tau2 = unit_var;
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
    // over both sides, never below a sweep run's.
    let one = |pick: &dyn Fn(&(Side, Side)) -> Option<f64>| -> Vec<f64> {
        units.iter().filter_map(pick).collect()
    };
    let a = one(&|(n, s)| (n.count > 0 && s.count == 0).then(|| n.mean_ln()));
    let b = one(&|(n, s)| (s.count > 0 && n.count == 0).then(|| s.mean_ln()));
    if !a.is_empty() && !b.is_empty() && a.len() + b.len() >= rule::MIN_COMMS_ACROSS {
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
        let ss = |v: &[f64]| {
            let m = mean(v);
            v.iter().map(|x| (x - m).powi(2)).sum::<f64>()
        };
        let dof = (a.len() + b.len()).saturating_sub(2) as f64;
        let s2 = if dof > 0.0 {
            ((ss(&a) + ss(&b)) / dof).max(run_var)
        } else {
            run_var
        };
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
    e.sd = (1.0 / wsum).sqrt();
    // In sweep runs: a one-run sweep's gain has variance `unit_var`; never
    // more units than communicators compared.
    let compared = (e.paired + (e.nccl_comms - e.paired).min(e.comms - e.paired)) as f64;
    e.units = (unit_var / (e.sd * e.sd)).min(compared.max(1.0));
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
        let e = evidence(&big, var_call(big.iter().flat_map(|p| [&p.0, &p.1])), 0.02).unwrap();
        assert!(e.sd >= 0.02 * 2f64.sqrt() * 0.999, "{e:?}");
        assert_eq!(e.units, 1.0, "one communicator weighs one sweep run");
        // A hundred communicators each side, across: a hundred runs each.
        let mut many = vec![(side(100, 7.0, 0.0), Side::default()); 100];
        many.extend(vec![(Side::default(), side(100, 6.99, 0.0)); 100]);
        let e = evidence(&many, 0.0, 0.02).unwrap();
        assert!(
            (e.sd - 0.02 * (2.0f64 / 100.0).sqrt()).abs() < 1e-12,
            "{e:?}"
        );
        assert_eq!((e.nccl_comms, e.comms, e.paired), (100, 100, 0));
        assert_eq!(judge(&e, Bar::new(0.03, 0.5)), Verdict::Short);
    }

    #[test]
    fn pairing_across_communicators_needs_enough_of_them() {
        let two = [
            (side(500, 7.0, 0.02), Side::default()),
            (Side::default(), side(500, 6.0, 0.02)),
        ];
        let e = evidence(&two, 0.02f64.powi(2), 0.02).unwrap();
        assert_eq!(judge(&e, Bar::new(0.03, 0.5)), Verdict::TooLittle);
        let three = [two[0], two[0], two[1]];
        let e = evidence(&three, 0.02f64.powi(2), 0.02).unwrap();
        assert!((e.ln_gain - 1.0).abs() < 1e-9, "{e:?}");
        assert_eq!(judge(&e, Bar::new(0.03, 0.5)), Verdict::Wins);
    }

    /// Calls inside one communicator are repeats inside one run: 5,000 of
    /// them decide what 10 do, and one communicator never decides where
    /// the sweep's runs show its gain is within one run's noise.
    #[test]
    fn calls_inside_a_communicator_weigh_as_one_run() {
        let at = |calls: u64| {
            let p = [(side(calls, 7.0, 0.03), side(calls, 6.96, 0.03))];
            evidence(&p, 0.03f64.powi(2), 0.02).unwrap()
        };
        let (ten, many) = (at(10), at(5000));
        assert!(
            (ten.sd - many.sd).abs() / many.sd < 0.15,
            "{ten:?} {many:?}"
        );
        assert_eq!(judge(&many, Bar::new(0.0, 2.0)), Verdict::Unclear);
        // Eight communicators agreeing: eight runs' worth, and it decides.
        let p = vec![(side(50, 7.0, 0.03), side(50, 6.96, 0.03)); 8];
        let e = evidence(&p, 0.03f64.powi(2), 0.02).unwrap();
        assert!((e.units - 8.0).abs() < 0.5, "{e:?}");
        assert_eq!(judge(&e, Bar::new(0.0, 2.0)), Verdict::Wins);
    }

    /// Sides with fewer calls than the rule asks in their communicator do
    /// not count, however many such communicators add up.
    #[test]
    fn communicators_under_the_call_minimum_do_not_add_up() {
        let few = rule::MIN_CALLS - 1;
        let p = vec![(side(few, 7.0, 0.0), side(few, 6.0, 0.0)); 16];
        let e = evidence(&p, 0.0, 0.02).unwrap();
        assert_eq!((e.units, e.paired), (0.0, 16), "{e:?}");
        assert_eq!(judge(&e, Bar::new(0.0, 0.0)), Verdict::TooLittle);
    }

    /// Pooling with the sweep: the sweep's runs keep their weight.
    #[test]
    fn pooled_with_the_sweep_each_side_keeps_its_weight() {
        let p = [(side(500, 7.0, 0.0), side(500, 7.05, 0.0))];
        let e = evidence(&p, 0.0, 0.02).unwrap();
        assert!(!e.outweighs(6.0));
        // The sweep: +18.3 % over 6 runs (sd of its gain 0.02 sqrt(2/6)).
        let s = e.pooled(0.168, 0.02 * (2.0f64 / 6.0).sqrt(), 6.0);
        assert!(s.ln_gain > 0.12, "{s:?}");
    }
}
