//! Output that never destroys data. Everything dyncc writes goes to a
//! temporary file in the destination's directory and is renamed over the
//! target only when complete, so an interrupted or failed run never leaves
//! a half-written file or destroys the previous one; only a regular file is
//! ever replaced (never a device node, FIFO, directory or symbolic link);
//! and [`check_output`] refuses an output path that is one of the inputs.

use std::io::Write;
use std::path::Path;

use anyhow::{bail, Context};

/// What kind of file `meta` describes, for error messages.
fn kind(meta: &std::fs::Metadata) -> &'static str {
    let t = meta.file_type();
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if t.is_block_device() || t.is_char_device() {
            return "a device node";
        }
        if t.is_fifo() {
            return "a FIFO";
        }
        if t.is_socket() {
            return "a socket";
        }
    }
    if t.is_dir() {
        "a directory"
    } else if t.is_symlink() {
        "a symbolic link"
    } else if t.is_file() {
        "a regular file"
    } else {
        "not a regular file"
    }
}

/// Refuses to replace anything but a regular file (or nothing) at `path`:
/// renaming over a device node, FIFO or symbolic link would silently turn
/// it into a plain file (as root, `-o /dev/sda` would), and a directory
/// cannot be replaced at all.
pub fn check_replaceable(path: &Path) -> anyhow::Result<()> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e).with_context(|| format!("cannot inspect {}", path.display())),
    };
    if meta.file_type().is_file() {
        return Ok(());
    }
    let hint = if meta.file_type().is_symlink() {
        match std::fs::read_link(path) {
            Ok(to) => format!(
                " (to {}); write to the file itself, or remove the link first",
                to.display()
            ),
            Err(_) => "; remove the link first".to_string(),
        }
    } else {
        "; choose the path of a regular file (use --dry-run to check without writing)".to_string()
    };
    bail!(
        "{} is {}: dyncc only ever replaces regular files{hint}",
        path.display(),
        kind(&meta)
    )
}

/// Checks, before anything is written, that writing `output` destroys
/// nothing: it is not (the same file as) any of `inputs`, and it is a
/// regular file or does not exist ([`check_replaceable`]). `inputs` are the
/// paths given on the command line and every file read from them; `ext` is
/// the extension of what the command writes (`tbl`, `svg`, `csv`), for the
/// path the error suggests instead.
pub fn check_output<'a>(
    output: &Path,
    inputs: impl IntoIterator<Item = &'a Path>,
    ext: &str,
) -> anyhow::Result<()> {
    check_replaceable(output)?;
    let Ok(out) = std::fs::metadata(output) else {
        return Ok(()); // Nothing there yet, so it is no input.
    };
    for input in inputs {
        let Ok(inp) = std::fs::metadata(input) else {
            continue;
        };
        if same_file(&out, &inp) {
            let suggestion = output.with_extension(ext);
            let suggestion = if suggestion == output {
                output.with_extension(format!("new.{ext}"))
            } else {
                suggestion
            };
            bail!(
                "-o {} is an input of this command ({}): writing there would replace that \
                 input with the output; choose another path, e.g. `-o {}`",
                output.display(),
                input.display(),
                suggestion.display()
            );
        }
    }
    Ok(())
}

#[cfg(unix)]
fn same_file(a: &std::fs::Metadata, b: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    (a.dev(), a.ino()) == (b.dev(), b.ino())
}

#[cfg(not(unix))]
fn same_file(_: &std::fs::Metadata, _: &std::fs::Metadata) -> bool {
    false
}

/// Writes `bytes` to `path` atomically (see the module doc).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    write_atomic_steps(
        path,
        bytes,
        |file, bytes| file.write_all(bytes),
        |tmp, path| tmp.persist(path).map(drop).map_err(|e| e.error),
    )
}

/// [`write_atomic`] with its two fallible steps (writing the temporary file,
/// renaming it into place) passed in, so tests can make each one fail.
/// A failing step drops the temporary file, which deletes it.
fn write_atomic_steps(
    path: &Path,
    bytes: &[u8],
    write: impl FnOnce(&mut std::fs::File, &[u8]) -> std::io::Result<()>,
    rename: impl FnOnce(tempfile::NamedTempFile, &Path) -> std::io::Result<()>,
) -> anyhow::Result<()> {
    check_replaceable(path)?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let mut tmp = tempfile::Builder::new()
        .prefix(".dyncc-")
        .suffix(".tmp")
        .tempfile_in(dir)
        .with_context(|| format!("cannot create a temporary file in {}", dir.display()))?;
    let tmp_path = tmp.path().to_path_buf();
    write(tmp.as_file_mut(), bytes).with_context(|| {
        format!(
            "cannot write {} (for {}); {} is unchanged",
            tmp_path.display(),
            path.display(),
            path.display()
        )
    })?;
    // Temporary files are created 0600; what dyncc writes (tables shipped
    // to every node, sweeps, maps) is meant to be read by others.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        tmp.as_file()
            .set_permissions(std::fs::Permissions::from_mode(0o644))
            .with_context(|| format!("cannot set permissions on {}", tmp_path.display()))?;
    }
    tmp.as_file()
        .sync_all()
        .with_context(|| format!("cannot sync {}", tmp_path.display()))?;
    rename(tmp, path).with_context(|| {
        format!(
            "cannot rename the output into place at {}; it is unchanged",
            path.display()
        )
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(dir: &Path) -> Vec<std::ffi::OsString> {
        let mut v: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn replaces_the_target_and_leaves_no_temporaries() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("out.tbl");
        std::fs::write(&p, b"old").unwrap();
        write_atomic(&p, b"new").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"new");
        assert_eq!(names(d.path()), ["out.tbl"]);
    }

    #[cfg(unix)]
    #[test]
    fn written_files_are_world_readable() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("cluster.tbl");
        write_atomic(&p, b"x").unwrap();
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o644
        );
    }

    /// A write that fails half-way (a full disk) leaves the previous table
    /// whole and no temporary file behind.
    #[test]
    fn failure_to_write_leaves_the_previous_file() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("out.tbl");
        std::fs::write(&p, b"previous table").unwrap();
        let e = write_atomic_steps(
            &p,
            b"a new table, longer than the old one",
            |f, b| {
                f.write_all(&b[..b.len() / 2])?;
                Err(std::io::Error::from_raw_os_error(libc::ENOSPC))
            },
            |tmp, path| tmp.persist(path).map(drop).map_err(|e| e.error),
        )
        .unwrap_err();
        assert!(format!("{e:#}").contains("out.tbl is unchanged"), "{e:#}");
        assert_eq!(std::fs::read(&p).unwrap(), b"previous table");
        assert_eq!(names(d.path()), ["out.tbl"]);
    }

    /// A rename that fails (after the new table was written and synced in
    /// full) leaves the previous table whole and no temporary file behind.
    #[test]
    fn failure_to_rename_leaves_the_previous_file() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("out.tbl");
        std::fs::write(&p, b"previous table").unwrap();
        let mut written = None;
        let e = write_atomic_steps(
            &p,
            b"new table",
            |f, b| f.write_all(b),
            |tmp, _| {
                written = Some(std::fs::read(tmp.path())?);
                Err(std::io::Error::from_raw_os_error(libc::EXDEV))
            },
        )
        .unwrap_err();
        assert_eq!(written.as_deref(), Some(&b"new table"[..]));
        assert!(format!("{e:#}").contains("it is unchanged"), "{e:#}");
        assert_eq!(std::fs::read(&p).unwrap(), b"previous table");
        assert_eq!(names(d.path()), ["out.tbl"]);
    }

    #[cfg(unix)]
    #[test]
    fn only_regular_files_are_replaced() {
        let d = tempfile::tempdir().unwrap();
        // A FIFO stands for any special file (a device node needs root).
        let fifo = d.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo with a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        let e = write_atomic(&fifo, b"x").unwrap_err().to_string();
        assert!(
            e.contains("is a FIFO") && e.contains("regular files"),
            "{e}"
        );
        let dir = d.path().join("dir");
        std::fs::create_dir(&dir).unwrap();
        let e = write_atomic(&dir, b"x").unwrap_err().to_string();
        assert!(e.contains("is a directory"), "{e}");
        let real = d.path().join("real.tbl");
        std::fs::write(&real, b"previous").unwrap();
        let link = d.path().join("link.tbl");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let e = write_atomic(&link, b"x").unwrap_err().to_string();
        assert!(e.contains("symbolic link") && e.contains("real.tbl"), "{e}");
        assert!(std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(std::fs::read(&real).unwrap(), b"previous");
        use std::os::unix::fs::FileTypeExt;
        assert!(std::fs::symlink_metadata(&fifo)
            .unwrap()
            .file_type()
            .is_fifo());
    }

    #[test]
    fn an_input_is_never_the_output() {
        let d = tempfile::tempdir().unwrap();
        let s = d.path().join("s.csv");
        std::fs::write(&s, b"sweep").unwrap();
        let e = check_output(&s, [s.as_path()], "tbl")
            .unwrap_err()
            .to_string();
        assert!(e.contains("is an input") && e.contains("-o"), "{e}");
        assert!(e.contains("s.tbl"), "{e}");
        // The same file under another name (a hard link) is the same input.
        let h = d.path().join("hard.csv");
        std::fs::hard_link(&s, &h).unwrap();
        assert!(check_output(&h, [s.as_path()], "tbl").is_err());
        // A new file, or another existing one, is fine.
        let t = d.path().join("s.tbl");
        check_output(&t, [s.as_path()], "tbl").unwrap();
        std::fs::write(&t, b"old table").unwrap();
        check_output(&t, [s.as_path()], "tbl").unwrap();
    }
}
