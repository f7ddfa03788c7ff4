//! A validated table that owns its bytes.
//!
//! `dyncc_tables::Table` borrows its bytes; the plugin cache and the C API
//! need one value that holds both, validated once (CRC and all) and then
//! reused. The bytes live in a heap allocation that never moves, and the
//! `Table` view is only handed out with a lifetime tied to `&self`.

use core::ptr::NonNull;

use dyncc_tables::{Error, Table};

/// Bytes plus the `Table` that was validated over them.
pub struct OwnedTable {
    /// Leaked `Box<[u8]>`, reclaimed in `Drop`.
    bytes: NonNull<[u8]>,
    /// Borrows `bytes`; the 'static is a lie confined to this module.
    table: Table<'static>,
}

// SAFETY: the bytes are immutable after construction and exclusively owned
// by this value; `Table` is a read-only view over them.
unsafe impl Send for OwnedTable {}
// SAFETY: as above: shared access is read-only.
unsafe impl Sync for OwnedTable {}

impl OwnedTable {
    /// Takes the bytes and validates them.
    pub fn new(bytes: Box<[u8]>) -> Result<OwnedTable, (Error, Box<[u8]>)> {
        let raw = NonNull::from(Box::leak(bytes));
        // SAFETY: `raw` comes from a live leaked Box that nothing else
        // references; it stays valid and unchanged until `Drop` (or the
        // error path below) reclaims it, and the 'static view never escapes
        // with a lifetime longer than `&self`.
        let slice: &'static [u8] = unsafe { raw.as_ref() };
        match Table::from_bytes(slice) {
            Ok(table) => Ok(OwnedTable { bytes: raw, table }),
            Err(e) => {
                // SAFETY: `raw` came from Box::leak above and no reference
                // to it survives (the Err does not borrow the bytes).
                let b = unsafe { Box::from_raw(raw.as_ptr()) };
                Err((e, b))
            }
        }
    }

    /// The validated table, borrowed from `self`.
    pub fn table(&self) -> &Table<'_> {
        &self.table
    }
}

impl Drop for OwnedTable {
    fn drop(&mut self) {
        // SAFETY: `bytes` came from Box::leak in `new`; `self.table` (a view
        // without Drop) is never used after this.
        drop(unsafe { Box::from_raw(self.bytes.as_ptr()) });
    }
}
