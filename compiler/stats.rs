//! The few robust statistics the pipeline uses, defined once.

/// Median (mean of the middle two for an even count); `None` when empty.
/// Sorts `v` in place.
pub fn median(v: &mut [f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// Linearly interpolated quantile `q` in [0, 1]; `None` when empty. Sorts
/// `v` in place.
pub fn quantile(v: &mut [f64], q: f64) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let pos = q.clamp(0.0, 1.0) * (v.len() - 1) as f64;
    let (i, f) = (pos.floor() as usize, pos.fract());
    Some(if i + 1 < v.len() {
        v[i] * (1.0 - f) + v[i + 1] * f
    } else {
        v[i]
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_quantile_of_small_sets() {
        assert_eq!(median(&mut []), None);
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(quantile(&mut [4.0, 1.0, 2.0, 3.0], 0.25), Some(1.75));
        assert_eq!(quantile(&mut [5.0], 0.25), Some(5.0));
    }
}
