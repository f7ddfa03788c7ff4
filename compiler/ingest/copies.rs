//! Content read twice counts once: a file whose bytes (under the same
//! labels) were read before, and a run section repeated within or across
//! files (a log concatenated with itself, pasted into another). Identical
//! rows under different labels are kept, and said: a copy or a mislabel.

use std::collections::HashMap;
use std::ops::Range;
use std::path::{Path, PathBuf};

use super::file::Section;

/// What the walk has read so far, by content.
#[derive(Default)]
pub(super) struct Copies {
    /// (sha256, labels of the file's records) -> the first file.
    files: HashMap<(String, u64), PathBuf>,
    /// A section's digest -> the first file, its line and labels.
    sections: HashMap<[u8; 32], FirstSection>,
}

struct FirstSection {
    file: PathBuf,
    line: u32,
    keys: u64,
}

impl Copies {
    /// The file read before with the same bytes (`sha256`) and labels
    /// (`keys`), if any; else `path` is remembered as the first.
    pub(super) fn same_file(&mut self, path: &Path, sha256: &str, keys: u64) -> Option<PathBuf> {
        let id = (sha256.to_string(), keys);
        if let Some(first) = self.files.get(&id) {
            return Some(first.clone());
        }
        self.files.insert(id, path.to_path_buf());
        None
    }

    /// The records of `sections` (of `path`) that repeat a section read
    /// before under the same labels: they are counted once. Each repeat,
    /// and each same content under other labels, goes into `notes`.
    pub(super) fn repeated_sections(
        &mut self,
        path: &Path,
        sections: Vec<Section>,
        notes: &mut Vec<String>,
    ) -> Vec<Range<usize>> {
        let mut drop = Vec::new();
        for sec in sections {
            if sec.records.is_empty() {
                continue;
            }
            match self.sections.get(&sec.digest) {
                Some(first) if first.keys != sec.keys => notes.push(format!(
                    "{}:{}: the same {} rows as {}:{} but labelled differently: kept both; \
                     is one a copy of the other, or mislabelled?",
                    path.display(),
                    sec.line,
                    sec.records.len(),
                    first.file.display(),
                    first.line
                )),
                Some(first) => {
                    notes.push(format!(
                        "{}:{}: the same {} rows as {}:{}: counted once",
                        path.display(),
                        sec.line,
                        sec.records.len(),
                        first.file.display(),
                        first.line
                    ));
                    drop.push(sec.records);
                }
                None => {
                    self.sections.insert(
                        sec.digest,
                        FirstSection {
                            file: path.to_path_buf(),
                            line: sec.line,
                            keys: sec.keys,
                        },
                    );
                }
            }
        }
        drop
    }
}

/// The line nccl-tests prints (on stdout, before its header) when `-J`
/// writes the run's JSON too.
const WRITING_JSON: &[u8] = b"# Writing JSON output to ";

/// How much of a log is searched for [`WRITING_JSON`] lines and the runs
/// they belong to.
const SCAN: u64 = 4 << 20;

/// The logs among `files` whose every run says it wrote its results to a
/// JSON file that is among `files` too (nccl-tests `-J`: the same
/// measurement twice), each with that JSON: read once, from the JSON,
/// which also records the run's environment. A log only part of whose runs
/// wrote such a JSON gets a note instead (its other runs are needed).
pub(super) fn written_as_json(
    files: &[PathBuf],
    notes: &mut Vec<String>,
) -> HashMap<PathBuf, PathBuf> {
    let jsons: Vec<&PathBuf> = files
        .iter()
        .filter(|f| {
            f.extension()
                .is_some_and(|e| e.eq_ignore_ascii_case("json"))
        })
        .collect();
    let mut out = HashMap::new();
    if jsons.is_empty() {
        return out;
    }
    let canon = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    let jsons: Vec<(&PathBuf, PathBuf)> = jsons.into_iter().map(|j| (j, canon(j))).collect();
    for log in files.iter().filter(|f| {
        f.extension()
            .is_none_or(|e| !e.eq_ignore_ascii_case("json"))
    }) {
        let mut head = Vec::new();
        let Ok(f) = std::fs::File::open(log) else {
            continue;
        };
        if std::io::Read::read_to_end(&mut std::io::Read::take(f, SCAN), &mut head).is_err() {
            continue;
        }
        let runs = memchr::memmem::find_iter(&head, b"# nccl-tests version").count();
        let dir = log.parent().unwrap_or(Path::new("."));
        let mut found = Vec::new();
        for at in memchr::memmem::find_iter(&head, WRITING_JSON) {
            let rest = &head[at + WRITING_JSON.len()..];
            let end = rest.iter().position(|&b| b == b'\n').unwrap_or(rest.len());
            let named = String::from_utf8_lossy(&rest[..end]).trim().to_string();
            let named = Path::new(&named);
            let want = canon(&dir.join(named));
            // The path as the job's working directory saw it: the same
            // file, or one of that name beside the log.
            if let Some((j, _)) = jsons.iter().find(|(j, c)| {
                *c == want || (j.file_name() == named.file_name() && j.parent() == log.parent())
            }) {
                found.push((*j).clone());
            }
        }
        let Some(first) = found.first() else { continue };
        if found.len() >= runs.max(1) {
            notes.push(format!(
                "{} says nccl-tests wrote its results to {} too (`# Writing JSON output to`), \
                 which is read: the run counted once, from the JSON",
                log.display(),
                first.display()
            ));
            out.insert(log.clone(), first.clone());
        } else {
            notes.push(format!(
                "{}: {} of its {runs} runs wrote their results to JSON files that are read too \
                 ({}, ...): those runs are counted twice; leave the log or the JSON out",
                log.display(),
                found.len(),
                first.display()
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn section(line: u32, digest: u8, records: Range<usize>, keys: u64) -> Section {
        Section {
            line,
            digest: [digest; 32],
            records,
            keys,
        }
    }

    #[test]
    fn a_file_read_again_under_the_same_labels_is_the_first_one() {
        let mut c = Copies::default();
        assert_eq!(c.same_file(Path::new("a.log"), "ab", 1), None);
        assert_eq!(c.same_file(Path::new("b.log"), "ab", 2), None);
        assert_eq!(
            c.same_file(Path::new("c.log"), "ab", 1),
            Some(PathBuf::from("a.log"))
        );
    }

    #[test]
    fn a_section_repeated_is_dropped_and_one_relabelled_is_kept_and_said() {
        let mut c = Copies::default();
        let mut notes = Vec::new();
        let first = vec![section(1, 7, 0..4, 9), section(20, 8, 4..4, 9)];
        assert!(c
            .repeated_sections(Path::new("a.log"), first, &mut notes)
            .is_empty());
        let again = vec![section(3, 7, 0..4, 9), section(30, 7, 4..8, 5)];
        let drop = c.repeated_sections(Path::new("b.log"), again, &mut notes);
        assert_eq!(drop, vec![0..4]);
        assert_eq!(notes.len(), 2, "{notes:?}");
        assert!(notes[0].ends_with("the same 4 rows as a.log:1: counted once"));
        assert!(notes[1].contains("but labelled differently: kept both"));
    }
}
