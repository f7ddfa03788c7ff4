//! Fuzzes the plugin's environment (DYNCC_TABLE, DYNCC_STRICT, DYNCC_NCCL_MISMATCH); the harness and its checks are
//! runtime/tests/support/fuzz.rs, which `cargo test` replays the seeds through.
#![no_main]

use libfuzzer_sys::fuzz_target;

// Each target calls one of its functions.
#[allow(dead_code)]
#[path = "../../tests/support/fuzz.rs"]
mod harness;

fuzz_target!(|data: &[u8]| harness::env(data));
