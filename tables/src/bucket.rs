//! Size buckets: the quarter-octave grid every rule boundary sits on.
//!
//! The grid is part of the format: the compiler buckets measured sizes with
//! [`size_bucket`] and the plugin buckets `nBytes` with the same function, so
//! both sides must agree bit for bit.

/// Number of size buckets (the bucket index is a `u8`).
pub const NUM_BUCKETS: usize = 256;

/// The bucket of a message size in bytes.
///
/// `0 -> 0`, `1..=3 -> 1..=3`, then four buckets per power of two:
/// with `l = floor(log2 n)` (`l >= 2`) and `sub` the two bits below the
/// leading one, the bucket is `4*l + sub` (`4 -> 8`, `5 -> 9`, `8 -> 12`,
/// `2^63.. -> 252..=255`). Buckets 4..=7 are never produced (see
/// [`bucket_is_empty`]).
#[inline]
pub const fn size_bucket(n: u64) -> u8 {
    if n < 4 {
        return n as u8;
    }
    let l = 63 - n.leading_zeros();
    let sub = (n >> (l - 2)) & 3;
    (4 * l as u64 + sub) as u8
}

/// True for the buckets no size maps to (4..=7): the small sizes 1..=3 own
/// buckets 1..=3 and the quarter-octave grid starts at 4 -> 8.
#[inline]
pub const fn bucket_is_empty(b: u8) -> bool {
    b >= 4 && b < 8
}

/// Smallest size in bucket `b` (inclusive). For the empty buckets 4..=7 this
/// is 4 and [`bucket_upper_bound`] is 3: an empty range.
pub const fn bucket_lower_bound(b: u8) -> u64 {
    if b < 4 {
        return b as u64;
    }
    if b < 8 {
        return 4;
    }
    let l = (b / 4) as u32;
    let sub = (b % 4) as u64;
    (4 + sub) << (l - 2)
}

/// Largest size in bucket `b` (inclusive). For the empty buckets 4..=7 this
/// is 3 (below the lower bound 4). Bucket 255 ends at `u64::MAX`.
pub const fn bucket_upper_bound(b: u8) -> u64 {
    if b < 4 {
        return b as u64;
    }
    if b < 8 {
        return 3;
    }
    let l = (b / 4) as u32;
    // lower + width - 1; written this way so bucket 255 does not overflow.
    bucket_lower_bound(b) + ((1u64 << (l - 2)) - 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn spec_examples() {
        let cases: &[(u64, u8)] = &[
            (0, 0),
            (1, 1),
            (2, 2),
            (3, 3),
            (4, 8),
            (5, 9),
            (6, 10),
            (7, 11),
            (8, 12),
            (9, 12),
            (10, 13),
            (15, 15),
            (16, 16),
            (1 << 63, 252),
            (u64::MAX, 255),
        ];
        for &(n, b) in cases {
            assert_eq!(size_bucket(n), b, "size {n}");
        }
    }

    #[test]
    fn bounds_tile_the_u64_line_exhaustively() {
        // Every non-empty bucket starts right after the previous one ends,
        // and both of its bounds map back to it.
        let mut next = 0u64;
        for b in 0..=255u8 {
            if bucket_is_empty(b) {
                assert!(bucket_lower_bound(b) > bucket_upper_bound(b));
                continue;
            }
            let (lo, hi) = (bucket_lower_bound(b), bucket_upper_bound(b));
            assert_eq!(
                lo,
                next,
                "bucket {b} must start where {} ended",
                b.wrapping_sub(1)
            );
            assert!(lo <= hi);
            assert_eq!(size_bucket(lo), b);
            assert_eq!(size_bucket(hi), b);
            if lo > 0 {
                assert_eq!(size_bucket(lo - 1), b - if b == 8 { 5 } else { 1 });
            }
            next = hi.wrapping_add(1);
        }
        assert_eq!(bucket_upper_bound(255), u64::MAX);
    }

    proptest! {
        #[test]
        fn every_size_lies_in_its_bucket(n in any::<u64>()) {
            let b = size_bucket(n);
            prop_assert!(!bucket_is_empty(b));
            prop_assert!(bucket_lower_bound(b) <= n && n <= bucket_upper_bound(b));
        }

        #[test]
        fn monotone(a in any::<u64>(), b in any::<u64>()) {
            if a <= b { prop_assert!(size_bucket(a) <= size_bucket(b)); }
        }
    }
}
