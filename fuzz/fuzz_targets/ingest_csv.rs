//! Fuzzes the tuner CSV reader; the harness and its checks are
//! tests/support/fuzz.rs, which `cargo test` replays the seeds through.
#![no_main]

use dyncc::ingest::Format;
use libfuzzer_sys::fuzz_target;

// Each target calls one of its functions.
#[allow(dead_code)]
#[path = "../../tests/support/fuzz.rs"]
mod harness;

fuzz_target!(|data: &[u8]| harness::ingest(Format::TunerCsv, data));
