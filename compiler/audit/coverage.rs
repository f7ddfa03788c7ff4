//! The sizes a table's `coverage` metadata says its sweep measured, read
//! back (`report::Coverage::meta_text` writes the entries); below both
//! the compile report and the audit's evidence, which read them.

/// The sizes a sweep measured for one collective at one ranks per node, as
/// the table's `coverage` metadata records them.
#[derive(Clone, Debug, PartialEq)]
pub struct MeasuredSizes {
    pub collective: String,
    pub ppn: u32,
    /// The node counts measured (empty when the entry does not list them).
    pub nodes: Vec<u32>,
    pub min_bytes: u64,
    pub max_bytes: u64,
}

/// Reads the `coverage` metadata
/// ([`Coverage::meta_text`](crate::report::Coverage::meta_text) entries
/// joined by `; `); entries it cannot read are left out. Sizes are as printed (one
/// decimal above 1 KiB), so exact for the powers of two sweeps use.
pub fn measured_sizes(meta: &str) -> Vec<MeasuredSizes> {
    meta.split("; ")
        .filter_map(|e| {
            let mut w = e.split_whitespace();
            let collective = w.next()?.to_string();
            (w.next()? == "ppn").then_some(())?;
            let ppn = w.next()?.parse().ok()?;
            let (list, sizes) = e.rsplit_once("] ")?;
            let (lo, hi) = sizes.split_once("..")?;
            let nodes = list
                .rsplit_once('[')
                .map(|(_, l)| l.split(", ").filter_map(|n| n.parse().ok()).collect())
                .unwrap_or_default();
            Some(MeasuredSizes {
                collective,
                ppn,
                nodes,
                min_bytes: crate::units::parse_bytes(lo).ok()?,
                max_bytes: crate::units::parse_bytes(hi).ok()?,
            })
        })
        .collect()
}
