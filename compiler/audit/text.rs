//! How the audit commands write a decision, its expected gain, a span of
//! node counts or sizes, a tree condition and a table, in words.

use dyncc_tables::{Decision, Feature, Table};

use crate::audit::names::feature_label;
use crate::units::{fmt_bytes, fmt_gain};

/// `tree/ll128`, `ring/simple/8ch`, or `default (NCCL's choice)`.
pub fn fmt_decision(d: Decision) -> String {
    match d {
        Decision::Default => "NCCL's choice".to_string(),
        d => d.to_string(),
    }
}

/// `4`, `4-7`, `9+`, `any`.
pub fn fmt_span(lo: u32, hi: u32) -> String {
    if lo <= 1 && hi == u32::MAX {
        "any".into()
    } else if lo == hi {
        lo.to_string()
    } else if hi == u32::MAX {
        format!("{lo}+")
    } else {
        format!("{lo}-{hi}")
    }
}

/// Inclusive byte bounds as `8 B .. <80 KiB`, `256 KiB and up`, `any size`
/// (bucket edges are powers of two and quarter steps, so the exclusive
/// upper edge prints exactly).
pub fn fmt_sizes(lo: u64, hi: u64) -> String {
    if lo == 0 && hi == u64::MAX {
        "any size".into()
    } else if hi == u64::MAX {
        format!("{} and up", fmt_bytes(lo))
    } else {
        format!("{} .. <{}", fmt_bytes(lo), fmt_bytes(hi + 1))
    }
}

/// `tree/ll, +30.0 % vs default, measured` or `NCCL's choice`.
pub fn fmt_then(d: Decision, gain: f32, basis: &str) -> String {
    match d {
        Decision::Default => format!("NCCL's choice ({basis})"),
        d => format!(
            "{}, {} vs default, {basis}",
            fmt_decision(d),
            fmt_gain(gain as f64)
        ),
    }
}

/// The byte size a log2 threshold stands for. Thresholds are log2 of grid
/// sizes (bucket lower bounds) stored as f32, so snapping to the nearest
/// bucket edge recovers the size exactly.
fn pow2_bytes(t: f32) -> u64 {
    let v = 2f64.powf(t as f64);
    if v >= u64::MAX as f64 {
        return u64::MAX;
    }
    let v = v.round().max(0.0) as u64;
    let b = dyncc_tables::size_bucket(v);
    let lo = dyncc_tables::bucket_lower_bound(b);
    let hi = if b == 255 {
        lo
    } else {
        dyncc_tables::bucket_lower_bound(b + 1)
    };
    if v - lo <= hi.saturating_sub(v) {
        lo
    } else {
        hi
    }
}

/// Human text of one merged condition.
pub fn condition_text(f: Feature, min: Option<f32>, below: Option<f32>) -> String {
    let name = feature_label(f);
    match f {
        Feature::Log2Bytes | Feature::Log2BytesPerRank => {
            let b = |t: f32| fmt_bytes(pow2_bytes(t));
            match (min, below) {
                (Some(lo), Some(hi)) => format!("{} <= {name} < {}", b(lo), b(hi)),
                (Some(lo), None) => format!("{name} >= {}", b(lo)),
                (None, Some(hi)) => format!("{name} < {}", b(hi)),
                (None, None) => String::new(),
            }
        }
        _ => {
            // Integer features: x >= t <=> x >= ceil(t); x < t <=> x < ceil(t).
            let c = |t: f32| (t as f64).ceil() as i64;
            match (min, below) {
                (Some(lo), Some(hi)) if c(hi) - c(lo) == 1 => format!("{name} = {}", c(lo)),
                (Some(lo), Some(hi)) => format!("{} <= {name} < {}", c(lo), c(hi)),
                (Some(lo), None) => format!("{name} >= {}", c(lo)),
                (None, Some(hi)) => format!("{name} < {}", c(hi)),
                (None, None) => String::new(),
            }
        }
    }
}

/// `digest 0123..., format 1.0, platform X, 12 contexts ...` on one line.
pub fn one_line_summary(t: &Table) -> String {
    let (ma, mi) = t.version();
    let platform = t
        .meta("platform")
        .filter(|p| !p.is_empty())
        .or(t.meta("gpu").filter(|g| !g.is_empty()));
    format!(
        "digest {:016x}, format {ma}.{mi}, {}{}{}",
        t.digest(),
        platform
            .map(|p| format!("platform {p}, "))
            .unwrap_or_default(),
        t.meta("nccl_version")
            .filter(|v| !v.is_empty())
            .map(|v| format!("swept on NCCL {v}, "))
            .unwrap_or_default(),
        t.coverage()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_conditions_read_naturally() {
        assert_eq!(
            condition_text(Feature::Nodes, Some(3.5), Some(4.5)),
            "nodes = 4"
        );
        assert_eq!(
            condition_text(Feature::Nodes, Some(2.0), Some(8.0)),
            "2 <= nodes < 8"
        );
        assert_eq!(
            condition_text(Feature::Ppn, None, Some(2.0)),
            "ranks/node < 2"
        );
        assert_eq!(
            condition_text(Feature::Log2Bytes, Some(10.0), Some(20.0)),
            "1 KiB <= bytes < 1 MiB"
        );
    }
}
