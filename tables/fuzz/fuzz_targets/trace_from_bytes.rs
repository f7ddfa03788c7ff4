//! Fuzzes `Trace::from_bytes` and every accessor on arbitrary bytes.
//! Built with `--cfg fuzzing`, so the reader skips the CRC check and the
//! fuzzer reaches the structural checks. Run from `tables/`:
//! `cargo fuzz run trace_from_bytes -s none -- -max_total_time=60`.
#![no_main]

use dyncc_tables::Trace;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(t) = Trace::from_bytes(data) {
        let _ = t.head();
        assert_eq!(t.comms().count(), t.n_comms());
        for r in t.records() {
            assert!((r.comm as usize) < t.n_comms());
            let _ = r.geomean_ns();
        }
        assert_eq!(t.records().count(), t.n_records());
    }
});
