//! One file as a format reader sees it: a [`FileCtx`] in (the user's
//! labels, strict or lenient, where problems go), a [`FileOutput`] out (the
//! records folded, the report, the run sections).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{fold, Anomaly, FileLabels, FileReport, Format, IngestOptions, Skip};
use crate::record::Source;

/// Per-file context: where to send problems, strict or lenient.
pub(crate) struct FileCtx<'a> {
    pub path: Arc<PathBuf>,
    pub opts: &'a IngestOptions,
    pub labels: FileLabels,
    pub skipped: Vec<Skip>,
    pub anomalies: Vec<Anomaly>,
}

impl<'a> FileCtx<'a> {
    pub fn new(path: &Path, opts: &'a IngestOptions) -> Self {
        FileCtx {
            path: Arc::new(path.to_path_buf()),
            opts,
            labels: FileLabels::default(),
            skipped: Vec::new(),
            anomalies: Vec::new(),
        }
    }

    /// A malformed input at `line`: an error when strict, a [`Skip`] when
    /// lenient.
    pub fn bad(&mut self, line: u32, msg: impl Into<String>) -> anyhow::Result<()> {
        let msg = msg.into();
        if self.opts.lenient {
            self.skipped.push(Skip {
                file: (*self.path).clone(),
                line,
                reason: msg,
            });
            Ok(())
        } else {
            anyhow::bail!(
                "{}:{}: {}; fix the input or pass --lenient to skip it",
                self.path.display(),
                line,
                msg
            )
        }
    }

    /// Something skipped that is never an error (error-only logs, ...).
    pub fn skip(&mut self, line: u32, msg: impl Into<String>) {
        self.skipped.push(Skip {
            file: (*self.path).clone(),
            line,
            reason: msg.into(),
        });
    }

    pub fn anomaly(&mut self, line: u32, kind: &'static str, detail: impl Into<String>) {
        self.anomalies.push(Anomaly {
            file: (*self.path).clone(),
            line,
            kind,
            detail: detail.into(),
        });
    }

    /// The file's knobs or shape cannot be established. Returns whether to
    /// keep its records (flagged [`UNRESOLVED`], for `inspect`); otherwise an
    /// error when strict, a [`Skip`] when lenient.
    ///
    /// [`UNRESOLVED`]: super::UNRESOLVED
    pub fn unresolved(&mut self, line: u32, msg: &str) -> anyhow::Result<bool> {
        if self.opts.keep_unresolved {
            self.anomaly(line, "unresolved", msg);
            return Ok(true);
        }
        self.bad(line, msg)?;
        Ok(false)
    }

    pub fn source(&self, line: u32) -> Source {
        Source {
            file: self.path.clone(),
            line,
        }
    }
}

/// What a format reader returns for one file.
pub(crate) struct FileOutput {
    /// The file's records, folded as they are pushed.
    pub records: fold::FoldBuilder,
    pub report: FileReport,
    pub bytes: u64,
    /// Run sections whose content is checked against every other's.
    pub sections: Vec<Section>,
    /// What the reader says about the file as a whole (rows counted once).
    pub notes: Vec<String>,
    /// Records pushed and then dropped as the same rows read twice.
    pub counted_once: usize,
}

/// One run section of a file: its data rows' digest and its records.
pub(crate) struct Section {
    pub line: u32,
    pub digest: [u8; 32],
    /// The section's records, by order pushed.
    pub records: std::ops::Range<usize>,
    /// What its records were labelled as (collective, size, shape, knobs,
    /// placement, in order).
    pub keys: u64,
}

impl FileOutput {
    pub fn empty(format: Format) -> Self {
        FileOutput {
            records: Default::default(),
            report: FileReport {
                file: PathBuf::new(),
                format,
                sha256: String::new(),
                duplicate_of: None,
                rows: 0,
                records: 0,
                zero_size_rows: 0,
                knobs: String::new(),
                resolved: true,
            },
            bytes: 0,
            sections: Vec::new(),
            notes: Vec::new(),
            counted_once: 0,
        }
    }

    /// Drops the records of `ranges` (reading order): rows read twice.
    pub fn count_once(&mut self, ranges: &[std::ops::Range<usize>]) {
        self.records.drop_ranges(ranges);
        self.counted_once += ranges.iter().map(|r| r.len()).sum::<usize>();
    }

    /// Ends a run section starting at `line` with data rows of `digest`:
    /// the records pushed since the previous one.
    pub fn end_section(&mut self, line: u32, digest: [u8; 32]) {
        let (records, keys) = self.records.end_section();
        self.sections.push(Section {
            line,
            digest,
            records,
            keys,
        });
    }
}

/// Reads all of `rd` into a buffer, counting bytes (for small formats).
pub(crate) fn read_all<R: Read>(mut rd: R) -> std::io::Result<Vec<u8>> {
    let mut v = Vec::new();
    rd.read_to_end(&mut v)?;
    Ok(v)
}
