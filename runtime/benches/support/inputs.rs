//! The random `getCollInfo` inputs of the benchmark and of the callgrind
//! instruction count (shared with `#[path]`).

/// How many distinct inputs are cycled through.
pub const N_INPUTS: usize = 4096;

/// Random (coll, nBytes) pairs: the five tunable collectives, sizes
/// log-uniform from 8 B to 16 GiB (log2 size uniform in [3, 34), then a
/// uniform mantissa), so every size bucket a real job uses is hit about
/// equally and none is zero.
pub fn random_inputs() -> Vec<(i32, usize)> {
    let mut x = 0x2545f4914f6cdd1du64;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    (0..N_INPUTS)
        .map(|_| {
            let coll = (next() % 5) as i32;
            // 2^(3 + 31 * u) for u uniform in [0, 1): 8 B ..= 16 GiB.
            let u = (next() >> 11) as f64 / (1u64 << 53) as f64;
            let n = 2f64.powf(3.0 + 31.0 * u) as usize;
            (coll, n)
        })
        .collect()
}

/// The random inputs are what the doc says (checked every time the random
/// benchmarks start, so the figure cannot silently measure something else).
pub fn check_random_inputs(inputs: &[(i32, usize)]) {
    assert!(inputs
        .iter()
        .all(|&(_, n)| (8..=16usize << 30).contains(&n)));
    for coll in 0..5 {
        assert!(inputs.iter().filter(|&&(c, _)| c == coll).count() > N_INPUTS / 7);
    }
    // Each power-of-two octave from 8 B up gets roughly 1/31 of the calls.
    for l in 3..34u32 {
        let k = inputs
            .iter()
            .filter(|&&(_, n)| 63 - (n as u64).leading_zeros() == l)
            .count();
        assert!(k > N_INPUTS / 31 / 2, "octave 2^{l}: {k}");
    }
}
