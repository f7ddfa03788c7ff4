//! Bounded reading of every file a command names: tables, `query --batch`
//! files, `eval --truth` files, `simulate --calibrate` and `--profile-file`
//! files, `--manifest` files, trace files, and the sweeps `ingest` streams
//! ([`open_sweep`]).
//!
//! Each is opened with `O_NONBLOCK` (so opening a FIFO returns at once
//! instead of waiting for a writer), `fstat`ed, and refused unless it is a
//! regular file no longer than the limit of its [`Kind`], all before a byte
//! is read; reading then stops one byte past the limit, so a file that grows
//! while it is read is refused too. A FIFO would otherwise block forever,
//! `/dev/zero` or a 10 GB sparse file would be read until memory runs out.

use std::io::Read;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

/// What kind of file a command reads: names it in messages and bounds it.
#[derive(Debug)]
pub struct Kind {
    /// What the file is, e.g. "table", "--batch file".
    pub what: &'static str,
    /// The most bytes read.
    pub limit: u64,
    /// What such a file is, for the messages.
    pub expected: &'static str,
}

/// A decision table: the format's own limit, as the plugin's loader.
pub const TABLE: Kind = Kind {
    what: "table",
    limit: dyncc_tables::MAX_TABLE_LEN,
    expected: "a table written by `dyncc compile SWEEPS -o FILE.tbl`",
};

/// `query --batch`: one call per line (~30 bytes), so half a million calls.
pub const BATCH: Kind = Kind {
    what: "--batch file",
    limit: 16 << 20,
    expected: "one call per line, coll,bytes,nodes,ranks[,pipe_ops,reg_buff]; split a longer \
               list into several files",
};

/// `eval --truth`: `dyncc simulate`'s truth.csv, about 0.5 MB for the
/// default sweep; the limit leaves room for sweeps 500 times larger.
pub const TRUTH: Kind = Kind {
    what: "--truth file",
    limit: 256 << 20,
    expected: "the truth.csv written by `dyncc simulate`",
};

/// `simulate --calibrate`: a real sweep in the tuner CSV schema (the
/// shipped ones are about 100 KB).
pub const CALIBRATION: Kind = Kind {
    what: "--calibrate file",
    limit: 64 << 20,
    expected: "a sweep CSV in the tuner schema (collective,size_bytes,algorithm,protocol,\
               channels,nodes,...,cost_metric)",
};

/// `compile --manifest` (and every command reading sweeps): one row per
/// file or glob.
pub const MANIFEST: Kind = Kind {
    what: "--manifest file",
    limit: 16 << 20,
    expected: "a CSV with a `path` column and one row per sweep file or glob",
};

/// A trace file (`dyncc inspect`): the format's own limit.
pub const TRACE: Kind = Kind {
    what: "trace file",
    limit: dyncc_tables::trace::MAX_TRACE_LEN as u64,
    expected: "a trace file the plugin wrote with DYNCC_TRACE=DIR (dyncc-HOST-PID-NONCE.trace)",
};

/// `simulate --profile-file`: one hardware profile (about 1 KB).
pub const PROFILE: Kind = Kind {
    what: "--profile-file",
    limit: 1 << 20,
    expected: "one profile in TOML or JSON, as `dyncc simulate --list-profiles --json` prints",
};

/// A sweep file (an nccl-tests log, JSON or CSV), streamed: the limit only
/// keeps a runaway file (a log a job never stopped writing) from being read
/// for hours; README's 2 GB sweep reads in seconds.
pub const SWEEP: Kind = Kind {
    what: "sweep file",
    limit: 1 << 40,
    expected: "an nccl-tests log, JSON or CSV file",
};

/// `n` bytes in the largest binary unit that divides it, for limits.
fn size(n: u64) -> String {
    match n {
        n if n >= 1 << 40 && n % (1 << 40) == 0 => format!("{} TiB", n >> 40),
        n if n >= 1 << 30 && n % (1 << 30) == 0 => format!("{} GiB", n >> 30),
        n if n >= 1 << 20 && n % (1 << 20) == 0 => format!("{} MiB", n >> 20),
        n if n >= 1 << 10 && n % (1 << 10) == 0 => format!("{} KiB", n >> 10),
        n => format!("{n} bytes"),
    }
}

/// What the type of a file that is not regular is called in messages.
pub(crate) fn type_name(t: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt as _;
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO (named pipe)"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

impl Kind {
    fn too_large(&self, path: &Path, bytes: &str) -> anyhow::Error {
        anyhow::anyhow!(
            "{} ({}) is {bytes}, over the {} limit for a {}; not read. Expected {}",
            path.display(),
            self.what,
            size(self.limit),
            self.what,
            self.expected
        )
    }
}

/// A file opened by [`open`]: reads fail, with the message naming the file
/// and the limit, once more than the kind's limit would be read.
#[derive(Debug)]
pub struct Bounded {
    file: std::fs::File,
    path: PathBuf,
    kind: &'static Kind,
    read: u64,
}

impl Read for Bounded {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        // One byte past the limit tells a file at the limit from a longer one.
        let room = (self.kind.limit + 1).saturating_sub(self.read);
        let want = buf.len().min(usize::try_from(room).unwrap_or(usize::MAX));
        let n = self.file.read(&mut buf[..want])?;
        self.read += n as u64;
        if self.read > self.kind.limit {
            let e = self.kind.too_large(
                &self.path,
                &format!("longer than {} bytes", self.kind.limit),
            );
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("{e}"),
            ));
        }
        Ok(n)
    }
}

/// Opens `path` for reading as a `kind` file: refused, before any byte is
/// read, unless it is a regular file of at most `kind.limit` bytes (see the
/// module doc). The error names the file, what it is, the limit and what
/// was expected.
pub fn open(path: &Path, kind: &'static Kind) -> anyhow::Result<Bounded> {
    // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a
    // writer. It changes nothing for the regular file we go on to read.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| {
            anyhow::anyhow!(
                "cannot open {} ({}): {e}. Expected {}",
                path.display(),
                kind.what,
                kind.expected
            )
        })?;
    let meta = file
        .metadata()
        .map_err(|e| anyhow::anyhow!("cannot inspect {} ({}): {e}", path.display(), kind.what))?;
    if !meta.is_file() {
        anyhow::bail!(
            "{} ({}) is {}, not a regular file; not read (dyncc reads only regular files: a FIFO \
             can block forever, a device never ends). Expected {}",
            path.display(),
            kind.what,
            type_name(meta.file_type()),
            kind.expected
        );
    }
    if meta.len() > kind.limit {
        return Err(kind.too_large(path, &format!("{} bytes", meta.len())));
    }
    Ok(Bounded {
        file,
        path: path.to_path_buf(),
        kind,
        read: 0,
    })
}

/// Opens a sweep file as [`open`] opens any other (no wait on a FIFO,
/// nothing but a regular file within [`SWEEP`]'s limit), saying why not
/// without the file's name: the reader names it as `file:0`, strict or
/// lenient as it reads.
pub fn open_sweep(path: &Path) -> Result<Bounded, String> {
    let kind = &SWEEP;
    // O_NONBLOCK: as in `open`.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| format!("cannot open the file: {e}"))?;
    let meta = file
        .metadata()
        .map_err(|e| format!("cannot inspect the file: {e}"))?;
    if !meta.is_file() {
        return Err(format!(
            "the file is {}, not a regular file; not read (dyncc reads only regular files: a \
             FIFO can block forever, a device never ends); expected {}",
            type_name(meta.file_type()),
            kind.expected
        ));
    }
    if meta.len() > kind.limit {
        return Err(format!(
            "the file is {} bytes, over the {} limit for a {}; not read; expected {}",
            meta.len(),
            size(kind.limit),
            kind.what,
            kind.expected
        ));
    }
    Ok(Bounded {
        file,
        path: path.to_path_buf(),
        kind,
        read: 0,
    })
}

/// Reads all of `path` as a `kind` file (see [`open`]).
pub fn read(path: &Path, kind: &'static Kind) -> anyhow::Result<Vec<u8>> {
    let mut f = open(path, kind)?;
    let len = f.file.metadata().map(|m| m.len()).unwrap_or(0);
    let mut bytes = Vec::with_capacity(usize::try_from(len.min(kind.limit)).unwrap_or(0) + 1);
    f.read_to_end(&mut bytes).map_err(|e| {
        if e.kind() == std::io::ErrorKind::InvalidData {
            anyhow::anyhow!("{e}")
        } else {
            anyhow::anyhow!("cannot read {} ({}): {e}", path.display(), kind.what)
        }
    })?;
    Ok(bytes)
}

/// Reads all of `path` as a `kind` file of UTF-8 text.
pub fn read_to_string(path: &Path, kind: &'static Kind) -> anyhow::Result<String> {
    String::from_utf8(read(path, kind)?).map_err(|e| {
        anyhow::anyhow!(
            "{} ({}) is not UTF-8 text (byte {}); expected {}",
            path.display(),
            kind.what,
            e.utf8_error().valid_up_to(),
            kind.expected
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMALL: Kind = Kind {
        what: "test file",
        limit: 8,
        expected: "a test file",
    };

    #[test]
    fn reads_a_file_up_to_the_limit() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("f");
        std::fs::write(&p, b"12345678").unwrap();
        assert_eq!(read(&p, &SMALL).unwrap(), b"12345678");
        std::fs::write(&p, b"123456789").unwrap();
        let e = read(&p, &SMALL).unwrap_err().to_string();
        assert!(e.contains("9 bytes, over the 8 bytes limit"), "{e}");
    }

    /// `fstat` said the file was small, but it grew before it was read: the
    /// reader still stops one byte past the limit.
    #[test]
    fn a_file_that_grows_while_read_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("f");
        std::fs::write(&p, b"1234").unwrap();
        let mut f = open(&p, &SMALL).unwrap();
        std::fs::write(&p, b"1234567890123").unwrap();
        let mut v = Vec::new();
        let e = f.read_to_end(&mut v).unwrap_err().to_string();
        assert!(e.contains("longer than 8 bytes"), "{e}");
        assert_eq!(f.read, 9, "read one byte past the limit, no more");
    }

    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let d = tempfile::tempdir().unwrap();
        let fifo = d.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo with a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        let e = read(&fifo, &SMALL).unwrap_err().to_string();
        assert!(
            e.contains("is a FIFO (named pipe), not a regular file"),
            "{e}"
        );
    }

    #[test]
    fn limits_are_named_in_binary_units() {
        assert_eq!(size(64 << 20), "64 MiB");
        assert_eq!(size(1 << 20), "1 MiB");
        assert_eq!(size(1500), "1500 bytes");
    }
}
