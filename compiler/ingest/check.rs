//! Checks the readers share: a time per operation within what can be
//! measured, and a field of the input quoted for a message at a bounded
//! length.

/// The smallest time per operation dyncc accepts, in microseconds. Launching
/// a kernel alone costs a few microseconds, and nccl-tests prints times
/// with two decimals (0.01 us resolution), so a row below 0.1 us is a unit
/// mistake or a corrupted file; taken as a measurement it turns into
/// gains of thousands of percent.
pub const MIN_TIME_US: f64 = 0.1;

/// The largest time per operation dyncc accepts, in microseconds (about
/// 17 minutes). Far above any collective nccl-tests runs; larger values
/// (1e300) would make gains non-finite.
pub const MAX_TIME_US: f64 = 1e9;

/// Checks one time per operation, in microseconds.
pub fn check_time(t: f64) -> Result<f64, String> {
    if t.is_finite() && (MIN_TIME_US..=MAX_TIME_US).contains(&t) {
        return Ok(t);
    }
    Err(format!(
        "{} us: expected a time between {MIN_TIME_US} us (below what nccl-tests can measure) \
         and {MAX_TIME_US} us; is the unit microseconds?",
        crate::units::fmt_num(t)
    ))
}

/// A field of the input for an error message: at most [`QUOTE_MAX`] bytes,
/// so a corrupted multi-gigabyte line does not flood the terminal.
pub fn quote(s: &str) -> String {
    if s.len() <= QUOTE_MAX {
        return s.to_string();
    }
    let mut end = QUOTE_MAX;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}... ({} bytes)", &s[..end], s.len())
}

/// See [`quote`].
pub const QUOTE_MAX: usize = 200;

/// The note for a run that measured several datatypes (`-d all`): cells
/// are per size in bytes, so at each size the datatypes' times are pooled
/// as repeats (they move the same bytes; reductions of wider or narrower
/// types may differ).
pub(crate) fn datatypes_pooled<'a>(types: impl IntoIterator<Item = &'a str>) -> Option<String> {
    let mut t: Vec<&str> = types.into_iter().collect();
    t.sort_unstable();
    t.dedup();
    (t.len() > 1).then(|| {
        format!(
            "{} datatypes in one run ({}; nccl-tests -d all): their times at each size are \
             pooled as repeats of one cell; sweep with one datatype (-d float) to keep them apart",
            t.len(),
            t.join(", ")
        )
    })
}
