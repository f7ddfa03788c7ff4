//! Which format a file is in, guessed from its name and first bytes.

use std::path::Path;

use super::{csv, text, Format};

/// Guesses the format from the file name and the first bytes.
pub fn detect(path: &Path, head: &[u8]) -> Format {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default();
    let first = head
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .map(|i| head[i]);
    if first == Some(b'{')
        && (name.contains(".json")
            || head.windows(9).any(|w| w == b"\"results\"")
            || head.windows(9).any(|w| w == b"\"version\""))
    {
        return Format::NcclTestsJson;
    }
    let first_line = head.split(|&b| b == b'\n').next().unwrap_or(b"");
    let fl = String::from_utf8_lossy(first_line).to_ascii_lowercase();
    // `dyncc simulate`'s ground truth (true mean times) lives beside the
    // sweep; it is not a measurement (`dyncc eval --truth` reads it).
    if fl.contains("true_us") {
        return Format::Other;
    }
    if fl.contains("collective")
        && fl.contains("size_bytes")
        && fl.contains("algorithm")
        && fl.contains("protocol")
    {
        return Format::TunerCsv;
    }
    // A .csv meant as a tuner CSV whose header misses columns: read it as
    // one, so the error lists what is missing instead of ignoring the file.
    // (Other CSVs about collectives, e.g. issue facts, name no algorithm.)
    if name.ends_with(".csv")
        && fl.contains("collective")
        && (fl.contains("algorithm") || fl.contains("protocol"))
    {
        return Format::TunerCsv;
    }
    if name.ends_with(".csv") && csv::looks_like_nvidia_raw(&name, head) {
        return Format::NvidiaRawCsv;
    }
    if name.ends_with(".md")
        || name.ends_with(".tsv")
        || name.ends_with(".csv")
        || name.ends_with(".py")
        || name.ends_with(".sh")
    {
        return Format::Other;
    }
    if text::looks_like_nccl_tests(head) || text::looks_like_launch_log(&name) {
        return Format::NcclTestsText;
    }
    Format::Other
}
