//! Runs N first `init`s of the ~64 KiB benchmark table through
//! `ncclTunerPlugin_v6` (each followed by its `finalize`, which frees the
//! table, so every `init` opens, reads, validates, digests and specialises
//! it again) for instruction counting under callgrind; see
//! runtime/benches/instructions.sh, which runs this with N and with 0 inits
//! and divides the difference by N. User-space instructions only: the
//! kernel's share (open, fstat, read, close) is not counted.
//!
//! Usage: `callgrind_first_init N`

use std::hint::black_box;

use dyncc_runtime::ncclTunerPlugin_v6;

#[path = "../../tables/benches/support/table_64k.rs"]
mod table_64k;

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .expect("usage: callgrind_first_init N");
    let dir = std::env::temp_dir().join(format!("dyncc-callgrind-init-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("t64k.tbl");
    std::fs::write(&path, table_64k::table_64k()).unwrap();
    // SAFETY: plain environment write before any init reads it; one thread.
    unsafe { std::env::set_var("DYNCC_TABLE", &path) };
    let v6 = black_box(&ncclTunerPlugin_v6);
    let (init, fin) = (v6.init.unwrap(), v6.finalize.unwrap());
    let mut nvl = dyncc_runtime::ffi::ncclNvlDomainInfo_v5_t {
        nNvlDomains: 2,
        minRanksPerNvlDomain: 8,
        maxRanksPerNvlDomain: 8,
    };
    for _ in 0..n {
        let mut ctx = std::ptr::null_mut();
        // SAFETY: writable context pointer and NVL info; NULL logger and
        // constants are allowed.
        let rc = unsafe { init(&mut ctx, 1, 16, 2, None, &mut nvl, std::ptr::null_mut()) };
        assert_eq!(rc, 0);
        assert!(!ctx.is_null());
        // SAFETY: the context init just made; finalized once.
        unsafe { fin(ctx) };
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
