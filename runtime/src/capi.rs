//! The small `dyncc_*` C API, for tests and non-NCCL users: open a table
//! from bytes, look up a decision, close it, version and status strings.
//!
//! Conventions (rustls-ffi style): fallible functions return an `int`
//! status (`DYNCC_OK` = 0); outputs go through out-pointers and are written
//! only on success; every pointer is checked for NULL; panics are caught and
//! become `DYNCC_ERR_PANIC` (or a safe default). The header `include/dyncc.h`
//! is generated from this file by cbindgen (see build.rs).

#![allow(non_snake_case, non_camel_case_types)]

use core::ffi::{c_char, c_int};

use dyncc_tables::{Comm, Decision, Error, Setting};

use crate::guard::ffi_guard;
use crate::owned::OwnedTable;

/// Success.
pub const DYNCC_OK: c_int = 0;
/// A required pointer argument was NULL.
pub const DYNCC_ERR_NULL_ARGUMENT: c_int = 1;
/// The bytes are not a valid dyncc table (bad magic, truncated, checksum
/// mismatch, malformed section, ...).
pub const DYNCC_ERR_INVALID_TABLE: c_int = 2;
/// The table was written by a newer, incompatible dyncc (format major
/// version or NCCL numbering this library does not know).
pub const DYNCC_ERR_UNSUPPORTED_VERSION: c_int = 3;
/// An internal error (a caught panic); the outputs were not written.
pub const DYNCC_ERR_PANIC: c_int = 4;

/// A validated decision table (opaque). Create with `dyncc_table_open`,
/// free with `dyncc_table_close`. Safe to share between threads for
/// lookups.
pub struct dyncc_table {
    inner: OwnedTable,
}

/// The library version, e.g. `"0.1.0"` (static; never free it).
#[unsafe(no_mangle)]
pub extern "C" fn dyncc_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

/// A static, human-readable description of a status code (never NULL,
/// never free it).
#[unsafe(no_mangle)]
pub extern "C" fn dyncc_status_str(status: c_int) -> *const c_char {
    let s: &'static core::ffi::CStr = match status {
        DYNCC_OK => c"ok",
        DYNCC_ERR_NULL_ARGUMENT => c"a required pointer argument was NULL",
        DYNCC_ERR_INVALID_TABLE => c"not a valid dyncc table (corrupt, truncated or not a table)",
        DYNCC_ERR_UNSUPPORTED_VERSION => {
            c"table written by a newer dyncc (unsupported format version or NCCL numbering)"
        }
        DYNCC_ERR_PANIC => c"internal error in dyncc (caught panic)",
        _ => c"unknown dyncc status",
    };
    s.as_ptr()
}

/// Validates `len` bytes at `bytes` as a dyncc table and, on success,
/// stores a new table (holding its own copy of the bytes) in `*out`. On
/// failure `*out` is set to NULL (when `out` is not NULL).
///
/// # Safety
/// `bytes` must be NULL or readable for `len` bytes; `out` must be NULL or
/// writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dyncc_table_open(
    bytes: *const u8,
    len: usize,
    out: *mut *mut dyncc_table,
) -> c_int {
    if out.is_null() {
        return DYNCC_ERR_NULL_ARGUMENT;
    }
    // SAFETY: `out` is non-NULL and, per the contract, writable.
    unsafe { out.write(core::ptr::null_mut()) };
    if bytes.is_null() {
        return DYNCC_ERR_NULL_ARGUMENT;
    }
    let r = ffi_guard(None, || {
        // SAFETY: `bytes` is non-NULL and readable for `len` bytes.
        let copy: Box<[u8]> = unsafe { core::slice::from_raw_parts(bytes, len) }.into();
        Some(OwnedTable::new(copy).map_err(|(e, _)| e))
    });
    match r {
        Some(Ok(inner)) => {
            let t = Box::into_raw(Box::new(dyncc_table { inner }));
            // SAFETY: as above.
            unsafe { out.write(t) };
            DYNCC_OK
        }
        Some(Err(Error::UnsupportedVersion { .. } | Error::UnsupportedNcclLayout(..))) => {
            DYNCC_ERR_UNSUPPORTED_VERSION
        }
        Some(Err(_)) => DYNCC_ERR_INVALID_TABLE,
        None => DYNCC_ERR_PANIC,
    }
}

/// Looks up the decision for one collective call, exactly as the plugin
/// makes it: `coll` is NCCL's `ncclFunc_t`, `nRanks`/`nNodes` the
/// communicator's shape, `nBytes`/`numPipeOps`/`regBuff` as NCCL passes
/// them (no answer depends on `regBuff`: NCCL computes it per rank). On
/// success writes `*algo` and `*proto` (NCCL numbering, or -1 and -1 for
/// "leave NCCL alone") and `*nChannels` (0 = NCCL's choice).
///
/// # Safety
/// `table` must be NULL or a live table from `dyncc_table_open`; the
/// out-pointers must be NULL or writable.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn dyncc_table_lookup(
    table: *const dyncc_table,
    coll: c_int,
    nRanks: usize,
    nNodes: usize,
    nBytes: usize,
    numPipeOps: c_int,
    regBuff: c_int,
    algo: *mut c_int,
    proto: *mut c_int,
    nChannels: *mut c_int,
) -> c_int {
    if table.is_null() || algo.is_null() || proto.is_null() || nChannels.is_null() {
        return DYNCC_ERR_NULL_ARGUMENT;
    }
    // SAFETY: non-NULL and, per the contract, a live dyncc_table.
    let t = unsafe { &*table };
    let r = ffi_guard(None, || {
        let l = t.inner.table().lookup(
            coll as u32,
            &Comm::new(nRanks as u64, nNodes as u64),
            nBytes as u64,
            numPipeOps,
            regBuff,
        );
        match l.decision {
            Decision::Default => Some((-1, -1, 0)),
            Decision::Force(Setting {
                algo,
                proto,
                channels,
                ..
            }) => Some((algo as c_int, proto as c_int, channels as c_int)),
        }
    });
    match r {
        Some((a, p, c)) => {
            // SAFETY: non-NULL and, per the contract, writable.
            unsafe {
                algo.write(a);
                proto.write(p);
                nChannels.write(c);
            }
            DYNCC_OK
        }
        None => DYNCC_ERR_PANIC,
    }
}

/// Frees a table from `dyncc_table_open`. NULL is a no-op.
///
/// # Safety
/// `table` must be NULL or a live table from `dyncc_table_open`, not used
/// afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dyncc_table_close(table: *mut dyncc_table) {
    if table.is_null() {
        return;
    }
    // SAFETY: per the contract, `table` came from Box::into_raw in
    // dyncc_table_open and is closed once.
    ffi_guard((), || drop(unsafe { Box::from_raw(table) }));
}
