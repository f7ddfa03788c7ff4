//! The dyncc NCCL tuner plugin (`libnccl-tuner-dyncc.so`) and the small
//! `dyncc_*` C API.
//!
//! The exported surface is exactly the `ncclTunerPlugin_v2` .. `_v7` and
//! `ncclProfiler_v1` .. `_v7` data symbols NCCL looks up and the `dyncc_*`
//! functions in `include/dyncc.h`. Laid out bottom-up; a module only uses
//! the ones below it:
//!
//! - the C boundary: `guard` (the panic guard, NULL checks, the plugin's
//!   name), [`log`] (NCCL's logger), [`ffi`] and [`profiler_ffi`] (NCCL's
//!   ABIs mirrored);
//! - state: [`cache`] (one loaded table per process, bounded file reads),
//!   `owned` (a validated table owning its bytes), [`explore`]
//!   (`DYNCC_EXPLORE`: which calls explore), [`nccl_version`] (the running
//!   NCCL against the sweep's), [`trace`] (what `DYNCC_TRACE` records: the
//!   tuner's journal, the in-flight pool, the bins, the file writer);
//! - three entry surfaces on top, which never use one another: [`plugin`]
//!   (the tuner), [`profiler`] and [`capi`].
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(missing_docs)]
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod cache;
pub mod capi;
pub mod explore;
pub mod ffi;
mod guard;
pub mod log;
pub mod nccl_version;
mod owned;
pub mod plugin;
pub mod profiler;
pub mod profiler_ffi;
pub mod trace;

pub use capi::*;
pub use plugin::{
    ncclTunerPlugin_v2, ncclTunerPlugin_v3, ncclTunerPlugin_v4, ncclTunerPlugin_v5,
    ncclTunerPlugin_v6, ncclTunerPlugin_v7,
};
pub use profiler::{
    ncclProfiler_v1, ncclProfiler_v2, ncclProfiler_v3, ncclProfiler_v4, ncclProfiler_v5,
    ncclProfiler_v6, ncclProfiler_v7,
};

/// The committed `include/dyncc.h` must equal what cbindgen generates from
/// this crate now.
#[cfg(test)]
mod header {
    #[test]
    fn header_is_current() {
        let generated = include_str!(concat!(env!("OUT_DIR"), "/dyncc.h"));
        let committed_path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../include/dyncc.h");
        if std::env::var_os("DYNCC_BLESS").is_some_and(|v| v == "1") {
            std::fs::write(&committed_path, generated).unwrap();
            return;
        }
        assert!(
            !generated.starts_with("/* cbindgen failed"),
            "cbindgen could not generate the header: {generated}"
        );
        let committed = std::fs::read_to_string(&committed_path).unwrap_or_default();
        if committed != generated {
            let first = committed
                .lines()
                .zip(generated.lines())
                .position(|(a, b)| a != b)
                .unwrap_or(committed.lines().count().min(generated.lines().count()));
            panic!(
                "include/dyncc.h is out of date with runtime/src (first difference at line {}):\n\
                 committed: {:?}\ngenerated: {:?}\n\
                 Regenerate it with `make bless` (DYNCC_BLESS=1, which rewrites every golden \
                 file) and commit it.",
                first + 1,
                committed.lines().nth(first),
                generated.lines().nth(first),
            );
        }
    }
}
