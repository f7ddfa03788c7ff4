//! Human units: byte sizes in and out (`4MiB`, `256 KiB`), percentages.

/// Formats a byte count with binary units: `8 B`, `256 KiB`, `1.5 MiB`.
pub fn fmt_bytes(n: u64) -> String {
    const UNITS: [&str; 7] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else if (v - v.round()).abs() < 1e-9 {
        format!("{} {}", v.round() as u64, UNITS[u])
    } else {
        format!("{:.1} {}", v, UNITS[u])
    }
}

/// Parses `4096`, `4K`, `4KiB`, `4KB`, `4 MiB`, `1G`, `0.5M`: suffixes are
/// powers of 1024, as nccl-tests reads them.
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let v: f64 = num.parse().map_err(|_| {
        format!("`{s}` is not a size: expected a number with an optional unit, e.g. 4096, 256K, 4MiB, 1G")
    })?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        other => {
            return Err(format!(
                "`{s}`: unknown size unit `{other}` (use B, K, M, G or T, with or without iB)"
            ))
        }
    };
    let bytes = v * mult as f64;
    if !(bytes.is_finite() && bytes >= 0.0 && bytes <= u64::MAX as f64) {
        return Err(format!("`{s}` is out of range"));
    }
    Ok(bytes.round() as u64)
}

/// A number as read back in a message: `12.5`, `0.001`, but `1e300`, not
/// 301 digits, and `1e-9`, not eleven of them.
pub fn fmt_num(v: f64) -> String {
    if v == 0.0 || !v.is_finite() || (1e-4..1e15).contains(&v.abs()) {
        format!("{v}")
    } else {
        format!("{v:e}")
    }
}

/// `+12.3 %` for a speedup ratio of 1.123.
pub fn fmt_gain(ratio: f64) -> String {
    format!("{:+.1} %", (ratio - 1.0) * 100.0)
}

/// `+4.1 %`, or `+4.1 to +5.6 %` when the ends of a range of speedup
/// ratios print apart: how compile, query and diff show a region whose
/// cells expect different gains.
pub fn fmt_gain_range(lo: f64, hi: f64) -> String {
    let (a, b) = (fmt_gain(lo), fmt_gain(hi));
    if a == b || hi < lo {
        a
    } else {
        format!("{} to {b}", a.trim_end_matches(" %"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gain_ranges_print_one_figure_when_their_ends_agree() {
        assert_eq!(fmt_gain_range(1.041, 1.056), "+4.1 to +5.6 %");
        assert_eq!(fmt_gain_range(0.96, 1.02), "-4.0 to +2.0 %");
        assert_eq!(fmt_gain_range(1.041, 1.0412), "+4.1 %");
    }

    #[test]
    fn sizes_round_trip() {
        assert_eq!(fmt_bytes(8), "8 B");
        assert_eq!(fmt_bytes(262144), "256 KiB");
        assert_eq!(fmt_bytes(3 << 19), "1.5 MiB");
        assert_eq!(parse_bytes("4MiB").unwrap(), 4 << 20);
        assert_eq!(parse_bytes("256K").unwrap(), 256 << 10);
        assert_eq!(parse_bytes("4096").unwrap(), 4096);
        assert_eq!(parse_bytes("1 GiB").unwrap(), 1 << 30);
        assert!(parse_bytes("lots").is_err());
        assert!(parse_bytes("4 parsecs").is_err());
    }

    /// A time of 1e300 was printed with all its 301 digits.
    #[test]
    fn huge_and_tiny_numbers_are_printed_short() {
        assert_eq!(fmt_num(1e300), "1e300");
        assert_eq!(fmt_num(-2.5e20), "-2.5e20");
        assert_eq!(fmt_num(1e-9), "1e-9");
        assert_eq!(fmt_num(12.5), "12.5");
        assert_eq!(fmt_num(1e9), "1000000000");
        assert_eq!(fmt_num(0.0), "0");
        assert_eq!(fmt_num(f64::INFINITY), "inf");
    }
}
