//! Walking the input paths: every file under them, each file and directory
//! once, read in sorted order; content read twice is counted once
//! ([`super::copies`]), and warm-up outliers are flagged over the whole
//! input.
//!
//! The walk stays in the trees named: a symbolic link to a directory
//! outside the named directory (`/`, an ancestor, `/proc`, a shared mount)
//! is not followed but named as skipped ([`outside_link`], which the trace
//! walk uses too); links inside the tree are followed, each directory
//! walked once. There is no depth limit: without links out, a tree is as
//! deep as the file system lets paths be.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use anyhow::Context as _;

use super::copies::Copies;
use super::outliers::flag_outliers_folded;
use super::read::{read_file_sections, FileRead};
use super::{Dataset, IngestOptions, Skip};

/// Identity of a file or directory on disk: two paths naming the same one
/// (symlinks, a path given twice) are read once.
type FileId = (u64, u64);

fn file_id(m: &std::fs::Metadata) -> FileId {
    use std::os::unix::fs::MetadataExt as _;
    (m.dev(), m.ino())
}

/// Reads every file under `paths` (files, or directories walked
/// recursively in sorted order, each directory and file once), counts
/// identical content once, then flags warm-up outliers. The records come
/// in the order read.
pub fn read_paths(paths: &[PathBuf], opts: &IngestOptions) -> anyhow::Result<Dataset> {
    let mut ds = read_paths_folded(paths, opts)?;
    ds.unfold();
    Ok(ds)
}

/// [`read_paths`], with the measurements folded as they are read
/// ([`Dataset::folded`]): memory grows with the distinct cells of the
/// input, not its rows. What `compile` reads.
pub fn read_paths_folded(paths: &[PathBuf], opts: &IngestOptions) -> anyhow::Result<Dataset> {
    let mut walk = Walk::default();
    for p in paths {
        let meta = std::fs::metadata(p)
            .with_context(|| format!("{}: cannot read it (does it exist?)", p.display()))?;
        if meta.is_dir() {
            // A named directory may itself be a link: its tree is where it leads.
            let root = std::fs::canonicalize(p).unwrap_or_else(|_| p.clone());
            walk.dir(p, &meta, &root)?;
        } else {
            walk.file(p, &meta);
        }
    }
    let files = walk.files;
    let mut ds = Dataset {
        notes: walk.notes,
        skipped: walk.skipped,
        ..Default::default()
    };
    let bar = crate::progress::Progress::new(
        opts.progress,
        walk.bytes,
        "{spinner} reading {msg} [{bar:30}] {binary_bytes}/{binary_total_bytes} \
         ({binary_bytes_per_sec}, {eta} left)",
    );
    // Content is one measurement only under the same labels.
    let mut copies = Copies::default();
    // A log whose runs wrote the JSON read beside it: the same runs.
    let twins = super::copies::written_as_json(&files, &mut ds.notes);
    // Reading order over all files (records of later files come after).
    let mut base: u64 = 0;
    for (i, f) in files.iter().enumerate() {
        bar.set_message(format!(
            "file {}/{}: {}",
            i + 1,
            files.len(),
            f.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        ));
        // Not read at all: what it could not say (its knobs, without
        // NCCL's INFO lines) the JSON's environment says.
        if twins.contains_key(f) {
            continue;
        }
        let FileRead {
            ds: mut d,
            mut fold,
            sections,
        } = match read_file_sections(f, opts, &bar) {
            Ok(d) => d,
            Err(e) => {
                bar.finish();
                return Err(e);
            }
        };
        let pushed = fold.len() as u64;
        let Some(report) = d.reports.first_mut() else {
            ds.absorb(d);
            continue;
        };

        // The same bytes twice: one measurement, not two repeats.
        if !report.sha256.is_empty() && !fold.is_empty() {
            if let Some(first) = copies.same_file(f, &report.sha256, fold.file_keys()) {
                ds.notes.push(format!(
                    "{} has the same content as {} (sha256 {}): counted once",
                    f.display(),
                    first.display(),
                    &report.sha256[..16]
                ));
                report.duplicate_of = Some(first);
                report.records = 0;
                d.anomalies.clear();
                ds.absorb(d);
                continue;
            }
        }
        let drop = copies.repeated_sections(f, sections, &mut ds.notes);
        if !drop.is_empty() {
            fold.drop_ranges(&drop);
            // Rows already counted once (read twice within the section)
            // are not dropped twice.
            report.records = fold.kept();
        }
        let Ok(b) = u32::try_from(base + pushed).map(|_| base as u32) else {
            anyhow::bail!(
                "{}: more than {} measurements in the inputs; compile fewer at a time",
                f.display(),
                u32::MAX
            );
        };
        ds.folded.append(fold.finish(), b);
        base += pushed;
        ds.absorb(d);
    }
    bar.finish();
    if let Some(m) = &opts.manifest {
        ds.notes.extend(m.unused_rows(&files));
    }
    flag_outliers_folded(&mut ds.folded, &mut ds.anomalies);
    Ok(ds)
}

/// The files to read, each once.
#[derive(Default)]
struct Walk {
    files: Vec<PathBuf>,
    /// Their bytes, for progress.
    bytes: u64,
    seen: HashSet<FileId>,
    notes: Vec<String>,
    /// Directory links out of the tree, not followed.
    skipped: Vec<Skip>,
}

/// Why the directory link `link` is not followed, when it leads out of the
/// tree named as `root` (canonical): to `/`, an ancestor, `/proc`, another
/// mount... A link to `/` walked the whole file system, other directories'
/// files read through `/proc/PID/cwd`. `None`: the link leads inside the
/// tree (the walk's each-directory-once rule keeps that finite).
pub(crate) fn outside_link(link: &Path, root: &Path) -> Option<Skip> {
    if !std::fs::symlink_metadata(link).is_ok_and(|m| m.file_type().is_symlink()) {
        return None;
    }
    let target = std::fs::canonicalize(link).ok()?;
    if target.starts_with(root) {
        return None;
    }
    let what = if root.starts_with(&target) {
        "an ancestor of the directory named"
    } else {
        "outside the directory named"
    };
    Some(Skip {
        file: link.to_path_buf(),
        line: 0,
        reason: format!(
            "a link to the directory {}, {what}: not followed (the walk stays in the tree \
             named); name {} itself to read it",
            target.display(),
            target.display()
        ),
    })
}

impl Walk {
    fn file(&mut self, p: &Path, meta: &std::fs::Metadata) {
        if self.seen.insert(file_id(meta)) {
            self.files.push(p.to_path_buf());
            if meta.is_file() {
                self.bytes += meta.len();
            }
        } else {
            self.notes.push(format!(
                "{}: the same file as one already read (given twice, or reached through a \
                 symlink): read once",
                p.display()
            ));
        }
    }

    fn dir(&mut self, dir: &Path, meta: &std::fs::Metadata, root: &Path) -> anyhow::Result<()> {
        // A directory reached again (a symlink loop, or two paths into one
        // tree) would be walked again, and again: read each one once.
        if !self.seen.insert(file_id(meta)) {
            self.notes.push(format!(
                "{}: a directory already read (a symlink loop, or given twice): read once",
                dir.display()
            ));
            return Ok(());
        }
        let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
            .with_context(|| format!("{}: cannot list directory", dir.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .collect();
        entries.sort();
        for p in entries {
            let name = p
                .file_name()
                .map(|n| n.to_string_lossy())
                .unwrap_or_default();
            if name.starts_with('.') {
                continue;
            }
            // A dangling symlink is left to `read_file`, which reports it.
            match std::fs::metadata(&p) {
                Ok(m) if m.is_dir() => match outside_link(&p, root) {
                    Some(skip) => self.skipped.push(skip),
                    None => self.dir(&p, &m, root)?,
                },
                Ok(m) => self.file(&p, &m),
                Err(_) => self.files.push(p),
            }
        }
        Ok(())
    }
}
