//! The trusted records aggregated into cells.

use super::fold;
use crate::record::{Cell, Record};

/// Aggregates the trusted records into cells (median of repeats; both
/// placements count). Records flagged warm-up outlier, wrong data, knob
/// ignored or unresolved are left out. Cells come sorted by key.
pub fn aggregate(records: &[Record]) -> Vec<Cell> {
    fold::Folded::from_records(records.iter().cloned()).cells()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingest::test_util::rec;
    use crate::record::{flags, Config};

    #[test]
    fn aggregate_takes_median_of_both_placements_and_drops_flagged() {
        let mut rs = vec![rec(8, 10.0, false), rec(8, 12.0, true), rec(8, 11.0, false)];
        let mut bad = rec(8, 1000.0, true);
        bad.measurement.flags = flags::WRONG_DATA;
        rs.push(bad);
        let cells = aggregate(&rs);
        assert_eq!(cells.len(), 1);
        assert_eq!(cells[0].n, 3);
        assert_eq!(cells[0].time_us, 11.0);
        assert!((cells[0].spread - 2.0 / 11.0).abs() < 1e-12);
        assert_eq!(cells[0].key.config, Config::DEFAULT);
    }
}
