//! Fuzzes `Table::from_bytes` followed by every read path (lookup,
//! specialise + decide, contexts, trees, metadata) on arbitrary bytes.
//!
//! Built with `--cfg fuzzing`, so the reader skips the CRC check and the
//! fuzzer reaches the structural checks. Half the inputs (first byte odd)
//! get a valid magic, version, length and NCCL layout patched in, so most
//! effort goes past the header. Run from `tables/`:
//! `cargo fuzz run from_bytes -s none -- -max_total_time=60`.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../tests/support/harness.rs"]
mod harness;

fuzz_target!(|data: &[u8]| {
    harness::exercise_patched(data);
});
