//! The process-wide table cache: one loaded table per path, shared by every
//! communicator.
//!
//! NCCL calls `init` once per communicator (hundreds in a large job, some
//! concurrently), so the file is read and validated once and reference
//! counted; the last `finalize` frees it, so `dlclose` leaves nothing
//! behind. The mutex is taken only by `init` and `finalize`, never on the
//! `getCollInfo` path. A static `std::sync::Mutex` needs no heap and no
//! destructor, so unloading the library is safe.

use std::ffi::OsStr;
use std::sync::{Mutex, MutexGuard};

use dyncc_tables::Error;

use crate::owned::OwnedTable;

/// Why a configured table could not be loaded.
pub enum LoadError {
    /// The file could not be read.
    Io(std::io::Error),
    /// The bytes are not a valid table.
    Invalid(Error),
}

struct Entry {
    path: Box<OsStr>,
    id: u64,
    refs: usize,
    /// FNV-1a of the bytes, computed once at load (it is a serial pass
    /// over the whole table, so not once per communicator).
    digest: u64,
    table: OwnedTable,
}

struct Cache {
    entries: Vec<Entry>,
    next_id: u64,
}

static CACHE: Mutex<Cache> = Mutex::new(Cache {
    entries: Vec::new(),
    next_id: 1,
});

fn lock() -> MutexGuard<'static, Cache> {
    // A panic while holding the lock (caught at the FFI boundary) must not
    // take the plugin down for the rest of the process: the cache's own
    // invariants hold between statements that can panic.
    CACHE.lock().unwrap_or_else(|e| e.into_inner())
}

/// A counted reference to a cached table; give it back with [`release`].
#[derive(Debug, PartialEq, Eq)]
pub struct Handle(u64);

/// Loads (or reuses) the table at `path`, runs `f` on it while the cache is
/// locked (with the table's digest), and takes a reference that
/// [`release`] gives back. Returns `Ok((handle, f's result, freshly_loaded))`.
pub fn acquire<R>(
    path: &OsStr,
    f: impl FnOnce(&dyncc_tables::Table<'_>, u64) -> R,
) -> Result<(Handle, R, bool), LoadError> {
    let mut cache = lock();
    let (idx, fresh) = match cache.entries.iter().position(|e| &*e.path == path) {
        Some(i) => (i, false),
        None => {
            let bytes = std::fs::read(path).map_err(LoadError::Io)?;
            let table = OwnedTable::new(bytes.into_boxed_slice())
                .map_err(|(e, _)| LoadError::Invalid(e))?;
            let id = cache.next_id;
            cache.next_id += 1;
            let digest = table.table().digest();
            cache.entries.push(Entry {
                path: path.into(),
                id,
                refs: 0,
                digest,
                table,
            });
            (cache.entries.len() - 1, true)
        }
    };
    let entry = &cache.entries[idx];
    let r = f(entry.table.table(), entry.digest);
    let entry = &mut cache.entries[idx];
    entry.refs += 1;
    Ok((Handle(entry.id), r, fresh))
}

/// Gives back a reference taken by [`acquire`]; frees the table when it was
/// the last one.
pub fn release(h: Handle) {
    let mut cache = lock();
    if let Some(i) = cache.entries.iter().position(|e| e.id == h.0) {
        cache.entries[i].refs -= 1;
        if cache.entries[i].refs == 0 {
            cache.entries.swap_remove(i);
        }
    }
    if cache.entries.is_empty() {
        // Free the Vec's buffer too: nothing may outlive the last context.
        cache.entries = Vec::new();
    }
}

/// Number of tables loaded right now (for tests).
pub fn loaded_tables() -> usize {
    lock().entries.len()
}
