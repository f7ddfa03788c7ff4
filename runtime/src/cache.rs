//! The process-wide table cache: one loaded table per path, shared by every
//! communicator.
//!
//! NCCL calls `init` once per communicator (hundreds in a large job, some
//! concurrently), so the file is read and validated once and reference
//! counted; the last `finalize` frees it, so `dlclose` leaves nothing
//! behind. A static `std::sync::Mutex` needs no heap and no destructor, so
//! unloading the library is safe; it is taken only by `init` and
//! `finalize`, never on the `getCollInfo` path.
//!
//! Init is bounded: the file is opened with `O_NONBLOCK` (a FIFO does not
//! block the open), `fstat`ed, and refused unless it is a regular file no
//! longer than the format allows ([`dyncc_tables::MAX_TABLE_LEN`]), all
//! before a byte is read. The cache lock is never held across file I/O:
//! the first communicator to ask for a path marks it "loading", reads and
//! validates without the lock, then publishes the table; communicators
//! asking for the same path meanwhile wait for that one load (so 512
//! concurrent inits still read the file once), while every other path and
//! every `finalize` proceed.

use std::ffi::OsStr;
use std::io::Read as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::sync::{Condvar, Mutex, MutexGuard};

use dyncc_tables::{Error, MAX_TABLE_LEN};

use crate::owned::OwnedTable;

/// Why a configured table could not be loaded.
#[derive(Debug)]
pub enum LoadError {
    /// The file could not be opened or read.
    Io(std::io::Error),
    /// The path is not a regular file (a FIFO, device, directory or
    /// socket): refused before reading, since reading one can block
    /// forever (a FIFO) or never end (`/dev/zero`).
    NotRegular {
        /// What it is instead ("a FIFO", "a character device", ...).
        kind: &'static str,
    },
    /// The file is longer than any table can be: refused from its size,
    /// before reading.
    TooLarge {
        /// Its size in bytes.
        size: u64,
    },
    /// The bytes are not a valid table.
    Invalid(Error),
}

impl core::fmt::Display for LoadError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            LoadError::Io(e) => write!(f, "{e}"),
            LoadError::NotRegular { kind } => write!(
                f,
                "it is {kind}, not a regular file (a table is a file written by `dyncc compile`)"
            ),
            LoadError::TooLarge { size } => write!(
                f,
                "it is {size} bytes, larger than any dyncc table can be ({MAX_TABLE_LEN} bytes); \
                 not read"
            ),
            LoadError::Invalid(e) => write!(f, "{e}"),
        }
    }
}

/// One cached table.
struct Ready {
    /// Digest of the bytes (`Table::digest`), computed once at load.
    digest: u64,
    table: OwnedTable,
}

struct Entry {
    path: Box<OsStr>,
    id: u64,
    refs: usize,
    /// `None` while the first communicator that asked reads the file.
    ready: Option<Ready>,
}

struct Cache {
    entries: Vec<Entry>,
    next_id: u64,
}

static CACHE: Mutex<Cache> = Mutex::new(Cache {
    entries: Vec::new(),
    next_id: 1,
});

/// Signalled when a load finishes (successfully or not).
static LOADED: Condvar = Condvar::new();

fn lock() -> MutexGuard<'static, Cache> {
    // A panic while holding the lock (caught at the FFI boundary) must not
    // take the plugin down for the rest of the process: the cache's own
    // invariants hold between statements that can panic.
    CACHE.lock().unwrap_or_else(|e| e.into_inner())
}

/// A counted reference to a cached table; give it back with [`release`].
#[derive(Debug, PartialEq, Eq)]
pub struct Handle(u64);

/// What the type of a non-regular file is called in messages.
fn kind_name(ft: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt as _;
    if ft.is_dir() {
        "a directory"
    } else if ft.is_fifo() {
        "a FIFO (named pipe)"
    } else if ft.is_char_device() {
        "a character device"
    } else if ft.is_block_device() {
        "a block device"
    } else if ft.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

/// Reads `path` if, by `fstat` on the open descriptor, it is a regular file
/// of at most [`MAX_TABLE_LEN`] bytes; never reads more than that.
pub fn read_bounded(path: &OsStr) -> Result<Vec<u8>, LoadError> {
    // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a
    // writer. It changes nothing for the regular file we go on to read.
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(LoadError::Io)?;
    let meta = file.metadata().map_err(LoadError::Io)?;
    if !meta.file_type().is_file() {
        return Err(LoadError::NotRegular {
            kind: kind_name(meta.file_type()),
        });
    }
    if meta.len() > MAX_TABLE_LEN {
        return Err(LoadError::TooLarge { size: meta.len() });
    }
    read_sized(&mut file, meta.len())
}

/// Reads `file`, which `fstat` said is `size` (<= [`MAX_TABLE_LEN`]) bytes
/// long, to its end: one buffer of `size + 1` bytes, one `read` for the
/// whole file and one more that sees end of file. (`std`'s `read_to_end`
/// through `take` reads in growing 8, 16, 32 KiB steps, five `read`s for
/// 64 KiB, and a zeroed buffer would cost a 64 KiB `memset`.) A file that
/// grew after `fstat` fills the spare byte; it is then read on, still never
/// past the format's limit plus one byte.
fn read_sized(file: &mut std::fs::File, size: u64) -> Result<Vec<u8>, LoadError> {
    use std::os::fd::AsRawFd as _;
    let cap = usize::try_from(size.min(MAX_TABLE_LEN)).unwrap_or(0) + 1;
    let mut bytes: Vec<u8> = Vec::with_capacity(cap);
    loop {
        let spare = bytes.spare_capacity_mut();
        if spare.is_empty() {
            break;
        }
        // SAFETY: `spare` is memory `bytes` owns and nothing else
        // references, writable for `spare.len()` bytes; read(2) writes at
        // most that many into it.
        let n = unsafe { libc::read(file.as_raw_fd(), spare.as_mut_ptr().cast(), spare.len()) };
        match usize::try_from(n) {
            Ok(0) => break,
            // SAFETY: read(2) returned n > 0, so it initialised the first
            // n <= spare.len() bytes after the vector's current length.
            Ok(n) => unsafe { bytes.set_len(bytes.len() + n) },
            Err(_) => {
                let e = std::io::Error::last_os_error();
                if e.kind() != std::io::ErrorKind::Interrupted {
                    return Err(LoadError::Io(e));
                }
            }
        }
    }
    if bytes.len() == cap {
        // Grown since fstat: the rest, bounded as before.
        (&mut *file)
            .take((MAX_TABLE_LEN + 1).saturating_sub(cap as u64))
            .read_to_end(&mut bytes)
            .map_err(LoadError::Io)?;
    }
    if bytes.len() as u64 > MAX_TABLE_LEN {
        return Err(LoadError::TooLarge {
            size: bytes.len() as u64,
        });
    }
    Ok(bytes)
}

fn load(path: &OsStr) -> Result<Ready, LoadError> {
    let bytes = read_bounded(path)?;
    let table =
        OwnedTable::new(bytes.into_boxed_slice()).map_err(|(e, _)| LoadError::Invalid(e))?;
    let digest = table.table().digest();
    Ok(Ready { digest, table })
}

/// Loads (or reuses) the table at `path`, runs `f` on it while the cache is
/// locked (with the table's digest and whether this call loaded it), and
/// takes a reference that [`release`] gives back. Returns
/// `Ok((handle, f's result, freshly_loaded))`. File I/O happens without
/// the lock.
pub fn acquire<R>(
    path: &OsStr,
    f: impl FnOnce(&dyncc_tables::Table<'_>, u64, bool) -> R,
) -> Result<(Handle, R, bool), LoadError> {
    let mut cache = lock();
    let (idx, fresh) = loop {
        match cache.entries.iter().position(|e| &*e.path == path) {
            Some(i) if cache.entries[i].ready.is_some() => break (i, false),
            Some(_) => {
                // Another communicator is reading this path: wait for it
                // rather than read the same file again.
                cache = LOADED.wait(cache).unwrap_or_else(|e| e.into_inner());
            }
            None => {
                let id = cache.next_id;
                cache.next_id += 1;
                cache.entries.push(Entry {
                    path: path.into(),
                    id,
                    refs: 0,
                    ready: None,
                });
                drop(cache);
                let loaded = load(path);
                cache = lock();
                let i = cache.entries.iter().position(|e| e.id == id);
                match (loaded, i) {
                    (Ok(ready), Some(i)) => {
                        cache.entries[i].ready = Some(ready);
                        LOADED.notify_all();
                        break (i, true);
                    }
                    (Err(e), Some(i)) => {
                        // Waiters for this path retry (and report) themselves.
                        cache.entries.swap_remove(i);
                        LOADED.notify_all();
                        return Err(e);
                    }
                    // Only this call removes a placeholder it made.
                    (_, None) => unreachable!("placeholder removed by another thread"),
                }
            }
        }
    };
    let entry = &mut cache.entries[idx];
    let Some(ready) = entry.ready.as_ref() else {
        unreachable!("entry chosen only once ready");
    };
    let r = f(ready.table.table(), ready.digest, fresh);
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
    lock().entries.iter().filter(|e| e.ready.is_some()).count()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Seek as _, Write as _};

    /// A temp file holding `len` bytes of a repeating pattern.
    fn file_of(len: usize) -> (std::fs::File, Vec<u8>) {
        let want: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(&want).unwrap();
        f.rewind().unwrap();
        (f, want)
    }

    #[test]
    fn read_bounded_returns_the_whole_file() {
        let dir = tempfile::tempdir().unwrap();
        for len in [0usize, 1, 40, 4096, 64_300, 200_000] {
            let path = dir.path().join(format!("t{len}"));
            let want: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
            std::fs::write(&path, &want).unwrap();
            let got = read_bounded(path.as_os_str()).unwrap();
            assert_eq!(got.len(), len);
            assert!(got == want, "{len} bytes");
        }
    }

    /// The buffer is sized from fstat; a file longer than that by the time
    /// it is read (it grew) is still read to its end, not cut at the size
    /// fstat saw.
    #[test]
    fn a_file_grown_after_fstat_is_read_to_its_end() {
        for (seen, len) in [(0u64, 10usize), (10, 11), (10, 100_000), (64_300, 64_301)] {
            let (mut f, want) = file_of(len);
            let got = read_sized(&mut f, seen).unwrap();
            assert!(got == want, "fstat said {seen}, file has {len}");
        }
    }

    /// ... and one that grew past the format's limit is refused, having
    /// read at most one byte past the limit.
    #[test]
    fn a_file_grown_past_the_limit_after_fstat_is_refused() {
        let mut f = tempfile::tempfile().unwrap();
        f.set_len(MAX_TABLE_LEN + 4096).unwrap();
        match read_sized(&mut f, 100) {
            Err(LoadError::TooLarge { size }) => assert_eq!(size, MAX_TABLE_LEN + 1),
            Err(e) => panic!("{e}"),
            Ok(b) => panic!("read {} bytes of a file past the limit", b.len()),
        }
    }

    /// A file shorter than fstat said (it shrank) is read as it is.
    #[test]
    fn a_file_shrunk_after_fstat_is_read_as_it_is() {
        let (mut f, want) = file_of(1000);
        let got = read_sized(&mut f, 5000).unwrap();
        assert!(got == want);
    }
}
