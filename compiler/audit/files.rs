//! Reading a table and writing what a command renders from it, with
//! errors that say what to do next.

use std::path::Path;

use anyhow::Context;
use dyncc_tables::Table;

/// Reads a table file, bounded ([`crate::input`]); the error says what to
/// do next.
pub fn read_table(path: &Path) -> anyhow::Result<Vec<u8>> {
    crate::input::read(path, &crate::input::TABLE)
}

/// Validates a table image; the error names the file and the problem.
pub fn open<'a>(path: &Path, bytes: &'a [u8]) -> anyhow::Result<Table<'a>> {
    Table::from_bytes(bytes).map_err(|e| anyhow::anyhow!("{}", invalid_table(path, &e)))
}

/// What is wrong with the table at `path` that failed validation with `e`,
/// and what to do: one made by a newer dyncc needs a newer dyncc, not
/// another copy or a rebuild.
pub fn invalid_table(path: &Path, e: &dyncc_tables::Error) -> String {
    match *e {
        dyncc_tables::Error::UnsupportedVersion { found, supported } if found > supported => {
            format!(
                "{} was made by a newer dyncc (table format {found}; this dyncc reads format \
                 {supported}); upgrade dyncc to read it, and the plugin before deploying it \
                 (this plugin would refuse it)",
                path.display()
            )
        }
        _ => format!(
            "{} is not a valid dyncc table: {e}. Run `dyncc verify {}` for details; re-create it \
             with `dyncc compile`",
            path.display(),
            path.display()
        ),
    }
}

/// [`write_output`], or standard output when `path` names it (`-o -`,
/// [`crate::atomic::names_stdout`]), for the commands whose output can be
/// piped (`plot`, `export`).
pub fn write_output_or_stdout(path: &Path, bytes: &[u8], mode: u32) -> anyhow::Result<()> {
    if crate::atomic::names_stdout(path) {
        crate::atomic::write_or_stdout(path, bytes)
    } else {
        write_output(path, bytes, mode)
    }
}

/// Writes `bytes` to `path` atomically with mode `mode` (the temporary file
/// `write_atomic` renames is created 0600, too tight for a map or a rule
/// file other users read, or a script).
pub fn write_output(path: &Path, bytes: &[u8], mode: u32) -> anyhow::Result<()> {
    crate::atomic::write_atomic(path, bytes)
        .with_context(|| format!("writing {}", path.display()))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
            .with_context(|| format!("setting the permissions of {}", path.display()))?;
    }
    #[cfg(not(unix))]
    let _ = mode;
    Ok(())
}
