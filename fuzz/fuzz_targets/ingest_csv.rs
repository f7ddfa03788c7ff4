//! Fuzz the ingest csv parser: any bytes, strict and lenient, must give
//! Ok or a clean error, never a panic; lenient keeps every record sane.
#![no_main]

use std::io::Cursor;
use std::path::Path;

use dyncc::ingest::{self, Format, IngestOptions};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for lenient in [false, true] {
        let opts = IngestOptions {
            lenient,
            keep_unresolved: lenient,
            assume: vec![("default".into(), "1".into())],
            ..Default::default()
        };
        let r = ingest::read_with_format(Path::new("t.csv"), Cursor::new(data), Format::TunerCsv, &opts);
        if let Ok(mut ds) = r {
            assert!(ds.records.iter().all(|r| r.measurement.time_us.is_finite() && r.measurement.time_us > 0.0));
            ingest::flag_outliers(&mut ds);
            let _ = ingest::aggregate(&ds.records);
        } else if lenient {
            // Lenient reading only fails on I/O, which a Cursor never does.
            panic!("lenient read failed: {:?}", r.err());
        }
    }
});
