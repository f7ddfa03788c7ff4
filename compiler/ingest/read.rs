//! Reading one file: opened through the bounded reader, hashed while it is
//! read, its format detected, the user's labels for it looked up, and its
//! content handed to the reader of its format.

use std::io::{BufRead, BufReader};
use std::path::Path;

use super::detect::detect;
use super::digest::Hashing;
use super::{
    csv, fold, json, text, tuner, Dataset, FileCtx, FileOutput, Format, IngestOptions, Section,
};

/// Reads one file, detecting its format from its name and first bytes.
pub fn read_file(path: &Path, opts: &IngestOptions) -> anyhow::Result<Dataset> {
    read_file_sections(path, opts, &crate::progress::Progress::hidden()).map(FileRead::into_dataset)
}

/// One file read: what it gave (without its measurements), its
/// measurements folded, and its run sections.
pub(super) struct FileRead {
    pub(super) ds: Dataset,
    pub(super) fold: fold::FoldBuilder,
    pub(super) sections: Vec<Section>,
}

impl FileRead {
    fn into_dataset(self) -> Dataset {
        let mut ds = self.ds;
        ds.records = self.fold.finish().into_records();
        ds
    }
}

pub(super) fn read_file_sections(
    path: &Path,
    opts: &IngestOptions,
    progress: &crate::progress::Progress,
) -> anyhow::Result<FileRead> {
    let unreadable = |msg: String| -> anyhow::Result<FileRead> {
        let mut ctx = FileCtx::new(path, opts);
        ctx.bad(0, msg)?;
        Ok(FileRead {
            ds: Dataset {
                skipped: ctx.skipped,
                ..Default::default()
            },
            fold: Default::default(),
            sections: Vec::new(),
        })
    };
    // Opening a FIFO blocks until some writer appears (forever, for a stale
    // `mkfifo`), and devices never end: only regular files are read, through
    // the one bounded reader every command uses.
    let file = match crate::input::open_sweep(path) {
        Ok(f) => f,
        Err(msg) => return unreadable(msg),
    };
    let mut rd = BufReader::with_capacity(1 << 16, Hashing::new(file, progress));
    let head = match rd.fill_buf() {
        Ok(h) => h.to_vec(),
        Err(e) => return unreadable(format!("cannot read the file: {e}")),
    };
    let format = detect(path, &head);
    let mut read = read_format(path, &mut rd, format, opts)?;
    if format != Format::Other {
        // A reader may stop early (a corrupted tail): the digest still
        // covers the whole file.
        let drained = std::io::copy(&mut rd, &mut std::io::sink());
        if let (Ok(_), Some(rep)) = (drained, read.ds.reports.first_mut()) {
            rep.sha256 = rd.into_inner().digest();
        }
    }
    Ok(read)
}

/// Reads `rd` (the content of `path`) as `format`.
pub fn read_with_format<R: BufRead>(
    path: &Path,
    rd: R,
    format: Format,
    opts: &IngestOptions,
) -> anyhow::Result<Dataset> {
    read_format(path, rd, format, opts).map(FileRead::into_dataset)
}

fn read_format<R: BufRead>(
    path: &Path,
    rd: R,
    format: Format,
    opts: &IngestOptions,
) -> anyhow::Result<FileRead> {
    let mut ctx = FileCtx::new(path, opts);
    let mut ds = Dataset::default();
    let nothing = |ds: Dataset| FileRead {
        ds,
        fold: Default::default(),
        sections: Vec::new(),
    };
    if format == Format::Other {
        ds.ignored.push(path.to_path_buf());
        return Ok(nothing(ds));
    }
    if let Some(m) = &opts.manifest {
        match m.labels_for(path) {
            Ok(l) => ctx.labels.manifest = l,
            Err(e) => {
                ctx.bad(0, format!("{e:#}"))?;
                ds.skipped = ctx.skipped;
                return Ok(nothing(ds));
            }
        }
    }
    for p in &opts.name_patterns {
        match p.labels_for(path) {
            Ok(Some(l)) => {
                ctx.labels.pattern = Some(l);
                break;
            }
            Ok(None) => {}
            Err(e) => {
                ctx.labels.pattern_error = Some(e);
                break;
            }
        }
    }
    let res = match format {
        Format::NcclTestsText => text::read(&mut ctx, rd),
        Format::TunerCsv => tuner::read_tuner(&mut ctx, rd),
        Format::NvidiaRawCsv => csv::read_nvidia_raw(&mut ctx, rd),
        Format::NcclTestsJson => json::read(&mut ctx, rd),
        Format::Other => unreachable!("returned above"),
    };
    let out = match res {
        Ok(o) => o,
        Err(e) if opts.lenient && is_io(&e) => {
            ctx.skip(0, format!("cannot read the file: {e:#}"));
            FileOutput::empty(format)
        }
        Err(e) if is_io(&e) => {
            return Err(e.context(format!(
                "{}: cannot read the file; pass --lenient to skip it",
                path.display()
            )))
        }
        Err(e) => return Err(e),
    };
    ds.files = 1;
    ds.rows = out.report.rows;
    ds.bytes = out.bytes;
    let mut report = out.report;
    report.file = path.to_path_buf();
    report.records = out.records.len() - out.counted_once;
    ds.reports.push(report);
    ds.skipped = ctx.skipped;
    ds.anomalies = ctx.anomalies;
    ds.notes = out.notes;
    Ok(FileRead {
        ds,
        fold: out.records,
        sections: out.sections,
    })
}

fn is_io(e: &anyhow::Error) -> bool {
    e.chain()
        .any(|c| c.downcast_ref::<std::io::Error>().is_some())
}
