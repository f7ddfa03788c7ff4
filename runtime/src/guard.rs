//! The C boundary, at the bottom of the crate: what every function NCCL or
//! a C caller enters uses to keep Rust's failures on this side (as
//! rustls-ffi's `ffi_panic_boundary!` and its null-checked argument
//! helpers do).
//!
//! - [`ffi_guard`]: a panic becomes a value the entry point returns,
//!   never an unwind into C (undefined behaviour) or an abort of the job;
//! - [`c_bytes`] and [`write_out`]: the NULL checks on what C hands over;
//! - [`PLUGIN_NAME`]: the one name NCCL prints for both halves.
//!
//! The log NCCL gives at init is [`crate::log`]'s `Logger`. Nothing here
//! depends on anything above it.

use core::ffi::{c_char, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// The name NCCL prints ("TUNER/Plugin: Using dyncc (v6)", and the
/// profiler's likewise).
pub const PLUGIN_NAME: &CStr = c"dyncc";

/// Runs `f`, turning a panic into `on_panic`: every function NCCL or a C
/// caller enters goes through this, so a bug can never unwind into C
/// (undefined behaviour) or abort the job. Free when nothing panics.
#[inline(always)]
pub(crate) fn ffi_guard<R>(on_panic: R, f: impl FnOnce() -> R) -> R {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(on_panic)
}

/// The bytes of a NUL-terminated string C passed, `None` for NULL.
///
/// # Safety
/// `p` is NULL or a NUL-terminated string that outlives `'a` (NCCL passes
/// static strings such as `ncclFuncToString`'s, or the communicator's
/// name, valid for the call).
pub(crate) unsafe fn c_bytes<'a>(p: *const c_char) -> Option<&'a [u8]> {
    if p.is_null() {
        return None;
    }
    // SAFETY: non-NULL and, per the caller, NUL-terminated and live.
    Some(unsafe { CStr::from_ptr(p) }.to_bytes())
}

/// Writes `v` through an out-pointer C passed, unless it is NULL; whether
/// it was written.
///
/// # Safety
/// `p` is NULL or valid for a write of `T`.
#[inline(always)]
pub(crate) unsafe fn write_out<T>(p: *mut T, v: T) -> bool {
    if p.is_null() {
        return false;
    }
    // SAFETY: non-NULL and, per the caller, writable.
    unsafe { p.write(v) };
    true
}
