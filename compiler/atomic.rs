//! Output that never destroys data. Everything dyncc writes goes to a
//! temporary file in the destination's directory and is renamed over the
//! target only when complete, so an interrupted or failed run never leaves
//! a half-written file or destroys the previous one; only a regular file is
//! ever replaced (never a device node, FIFO, directory or symbolic link);
//! and [`check_output`] refuses an output path that is one of the inputs.
//!
//! `-o -` (or `-o /dev/stdout`) names standard output where a command's
//! output can be piped ([`names_stdout`], [`write_or_stdout`]): the bytes
//! are streamed there, since a pipe has nothing to replace atomically.
//!
//! A writer killed between creating its temporary file and the rename
//! leaves `.dyncc-HOST-PID-XXXXXX.tmp` behind; the next write into that
//! directory removes such files that are provably stale (`is_stale`).

use std::io::Write;
use std::path::Path;

use anyhow::{bail, Context};

/// What kind of file `meta` describes, for error messages (the special
/// kinds named as every command's reader names them).
fn kind(meta: &std::fs::Metadata) -> &'static str {
    let t = meta.file_type();
    if t.is_symlink() {
        "a symbolic link"
    } else if t.is_file() {
        "a regular file"
    } else {
        crate::input::type_name(t)
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

/// Whether `-o PATH` names standard output: `-`, `/dev/stdout` or
/// `/dev/fd/1` (a pipe or terminal, not a file to replace).
pub fn names_stdout(path: &Path) -> bool {
    ["-", "/dev/stdout", "/dev/fd/1"]
        .iter()
        .any(|s| path == Path::new(s))
}

/// Refuses `-o -` (or `-o /dev/stdout`) for binary output (`what`, e.g.
/// "the table") when standard output is a terminal: the bytes would only
/// garble the screen (and can set terminal modes), and the user surely
/// meant a pipe or a file. Checked before any work is done.
pub fn check_binary_stdout(path: &Path, what: &str, ext: &str) -> anyhow::Result<()> {
    use std::io::IsTerminal;
    refuse_binary_on_terminal(path, std::io::stdout().is_terminal(), what, ext)
}

/// The decision of [`check_binary_stdout`], given whether stdout is a
/// terminal (apart, so that it can be tested without one).
fn refuse_binary_on_terminal(
    path: &Path,
    stdout_is_terminal: bool,
    what: &str,
    ext: &str,
) -> anyhow::Result<()> {
    if names_stdout(path) && stdout_is_terminal {
        bail!(
            "-o {}: standard output is a terminal, and {what} is binary; redirect it \
             (`... -o - > out.{ext}`, or pipe it: `... -o - | ...`) or write a file with `-o FILE.{ext}`",
            path.display()
        );
    }
    Ok(())
}

/// Writes `bytes` to standard output when `path` names it
/// ([`names_stdout`]), else to the file at `path` with [`write_atomic`].
pub fn write_or_stdout(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    if !names_stdout(path) {
        return write_atomic(path, bytes);
    }
    let mut out = std::io::stdout().lock();
    out.write_all(bytes)
        .and_then(|()| out.flush())
        .context("cannot write to standard output")
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
    if names_stdout(output) {
        return Ok(()); // A stream replaces nothing.
    }
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
    remove_stale_temporaries(dir);
    let mut tmp = tempfile::Builder::new()
        .prefix(&format!(
            "{TEMP_PREFIX}{}-{}-",
            this_host(),
            std::process::id()
        ))
        .suffix(TEMP_SUFFIX)
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

const TEMP_PREFIX: &str = ".dyncc-";
const TEMP_SUFFIX: &str = ".tmp";

/// How old a temporary file of unknown owner must be to count as stale: no
/// write of a table, map or sweep takes a day.
const STALE_AGE: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// This host's name as temporary file names carry it: only letters,
/// digits and dots (`-` separates the fields of the name).
fn this_host() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes into buf, which we
    // own; a name that does not fit is truncated, not overrun.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    let name = if rc == 0 {
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        String::from_utf8_lossy(&buf[..end]).into_owned()
    } else {
        String::new()
    };
    let name: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if name.is_empty() {
        "unknown".into()
    } else {
        name
    }
}

/// Whether process `pid` exists on this host (one of another user counts).
fn pid_alive(pid: libc::pid_t) -> bool {
    // SAFETY: kill with signal 0 sends nothing; it only checks that `pid`
    // exists and may be signalled.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// Whether the temporary file `name` (modified `age` ago) was left by a
/// writer that can no longer finish it: its name says it was made on this
/// host by a process that no longer exists, or it is over a day old (a name
/// of another host, whose processes cannot be checked from here, or of an
/// older dyncc, which did not record its writer). Anything else is left
/// alone: it may be another dyncc writing into the same directory now.
fn is_stale(name: &str, age: std::time::Duration, host: &str) -> bool {
    let Some(fields) = name
        .strip_prefix(TEMP_PREFIX)
        .and_then(|n| n.strip_suffix(TEMP_SUFFIX))
    else {
        return false;
    };
    if age > STALE_AGE {
        return true;
    }
    let mut f = fields.splitn(3, '-');
    match (f.next(), f.next().map(str::parse::<libc::pid_t>), f.next()) {
        (Some(h), Some(Ok(pid)), Some(_)) if h == host && pid > 0 => !pid_alive(pid),
        _ => false,
    }
}

/// Removes the stale temporary files ([`is_stale`]) of earlier writes in
/// `dir`; best effort, since the write itself does not depend on it.
fn remove_stale_temporaries(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let host = this_host();
    let now = std::time::SystemTime::now();
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(name) = name.to_str() else {
            continue;
        };
        if !name.starts_with(TEMP_PREFIX) {
            continue;
        }
        // Only regular files (not links): tempfile creates nothing else.
        let Ok(meta) = e.path().symlink_metadata() else {
            continue;
        };
        if !meta.is_file() {
            continue;
        }
        let age = meta
            .modified()
            .ok()
            .and_then(|m| now.duration_since(m).ok())
            .unwrap_or_default();
        if is_stale(name, age, &host) {
            let _ = std::fs::remove_file(e.path());
        }
    }
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

    /// A writer killed before its rename left `.dyncc-*.tmp` files that
    /// nothing removed. The next write removes those provably stale (its
    /// writer is dead on this host, or it is over a day old) and keeps
    /// those another dyncc may still be writing.
    #[test]
    fn stale_temporaries_of_killed_writers_are_removed_by_the_next_write() {
        let d = tempfile::tempdir().unwrap();
        let host = this_host();
        // A process that has exited (and been reaped): its pid is dead.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let day_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(2 * 86400);
        let make = |name: &str, old: bool| {
            let f = std::fs::File::create(d.path().join(name)).unwrap();
            if old {
                f.set_modified(day_ago).unwrap();
            }
        };
        make(&format!(".dyncc-{host}-{dead}-aB3xYz.tmp"), false); // dead writer
        make(".dyncc-Q8abCd.tmp", true); // an older dyncc's, two days old
        make(".dyncc-otherhost-1-aB3xYz.tmp", true); // another host's, old
        let live = format!(".dyncc-{host}-{}-aB3xYz.tmp", std::process::id());
        make(&live, false); // a live writer (this process)
        make(".dyncc-Q8abCe.tmp", false); // unknown writer, young
        make(".dyncc-otherhost-1-aB3xYz.tmp.keep", true); // not ours
        make("notes.tmp", true); // not ours
        write_atomic(&d.path().join("out.tbl"), b"x").unwrap();
        let mut want = vec![
            live,
            ".dyncc-Q8abCe.tmp".to_string(),
            ".dyncc-otherhost-1-aB3xYz.tmp.keep".to_string(),
            "notes.tmp".to_string(),
            "out.tbl".to_string(),
        ];
        want.sort();
        let got: Vec<String> = names(d.path())
            .into_iter()
            .map(|n| n.into_string().unwrap())
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn temporary_names_say_which_writer_made_them() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("out.tbl");
        let mut seen = None;
        write_atomic_steps(
            &p,
            b"x",
            |f, b| f.write_all(b),
            |tmp, _| {
                seen = Some(
                    tmp.path()
                        .file_name()
                        .unwrap()
                        .to_str()
                        .unwrap()
                        .to_string(),
                );
                Err(std::io::Error::from_raw_os_error(libc::EXDEV))
            },
        )
        .unwrap_err();
        let name = seen.unwrap();
        let prefix = format!(".dyncc-{}-{}-", this_host(), std::process::id());
        assert!(
            name.starts_with(&prefix) && name.ends_with(".tmp"),
            "{name}"
        );
        assert!(!is_stale(&name, std::time::Duration::ZERO, &this_host()));
    }

    /// `-o -` and `-o /dev/stdout` were refused (a symbolic link, or a
    /// file named `-`), so a table could not be piped.
    #[test]
    fn dash_and_dev_stdout_name_standard_output() {
        for p in ["-", "/dev/stdout", "/dev/fd/1"] {
            assert!(names_stdout(Path::new(p)), "{p}");
            check_output(Path::new(p), [Path::new("in.csv")], "tbl").unwrap();
        }
        for p in ["./-", "out.tbl", "/dev/stderr"] {
            assert!(!names_stdout(Path::new(p)), "{p}");
        }
    }

    /// `compile -o -` wrote the table's bytes to a terminal.
    #[test]
    fn binary_output_is_refused_on_a_terminal_only() {
        for p in ["-", "/dev/stdout", "/dev/fd/1"] {
            let e = refuse_binary_on_terminal(Path::new(p), true, "the table", "tbl")
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("is a terminal") && e.contains("-o FILE.tbl") && e.contains("> out.tbl"),
                "{e}"
            );
            assert!(refuse_binary_on_terminal(Path::new(p), false, "the table", "tbl").is_ok());
        }
        // A file is written whatever stdout is.
        assert!(refuse_binary_on_terminal(Path::new("t.tbl"), true, "the table", "tbl").is_ok());
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
