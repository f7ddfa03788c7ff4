//! The harness of the runtime's fuzz targets (`runtime/fuzz/`): the parsers
//! of what the plugin reads from outside besides the table (which the
//! table crate fuzzes): its environment variables and NCCL version strings
//! and codes. The targets include this file (`#[path]`) and call one
//! function each; `runtime/tests/fuzz_replay.rs` replays the committed
//! inputs (`runtime/testdata/fuzz/<target>/`) through the same functions.

use std::ffi::OsString;
use std::fmt::Write as _;
use std::os::unix::ffi::OsStringExt as _;

use dyncc_runtime::log::{Escaped, Msg, MSG_CAP};
use dyncc_runtime::nccl_version::{NcclVersion, VersionCheck};
use dyncc_runtime::plugin::{Config, MismatchPolicy};

/// `DYNCC_TABLE`, `DYNCC_STRICT` and `DYNCC_NCCL_MISMATCH` (the first
/// three lines of `data`, any bytes; a missing line is an unset variable):
/// the configuration says what the documented rules say, and the WARN a
/// bad value gets is one line of at most [`MSG_CAP`] bytes.
pub fn env(data: &[u8]) {
    let mut lines = data.splitn(3, |&b| b == b'\n');
    let vals: Vec<Option<OsString>> = (0..3)
        .map(|_| lines.next().map(|l| OsString::from_vec(l.to_vec())))
        .collect();
    let [table, strict, mismatch] = [&vals[0], &vals[1], &vals[2]];
    let cfg = Config::from_vars(|name| match name {
        "DYNCC_TABLE" => table.clone(),
        "DYNCC_STRICT" => strict.clone(),
        "DYNCC_NCCL_MISMATCH" => mismatch.clone(),
        _ => None,
    });
    assert_eq!(
        cfg.table.is_none(),
        table.as_ref().is_none_or(|t| t.is_empty())
    );
    let off = strict.as_ref().is_some_and(|s| {
        let s = s.to_string_lossy();
        ["0", "false", "no", "off"].contains(&s.trim().to_ascii_lowercase().as_str())
    });
    assert_eq!(cfg.strict, !off, "DYNCC_STRICT={strict:?}");
    if cfg.bad_nccl_mismatch.is_some() {
        assert_eq!(cfg.nccl_mismatch, MismatchPolicy::Warn);
    }
    // What init writes for a bad value and a table path: one line.
    let mut msg = Msg::new();
    let _ = write!(
        msg,
        "dyncc: DYNCC_NCCL_MISMATCH={} is not one of warn, off, ignore; table {}",
        Escaped(cfg.bad_nccl_mismatch.as_deref().unwrap_or("")),
        Escaped(&cfg.table.as_deref().unwrap_or_default().to_string_lossy()),
    );
    let text = msg.as_str();
    assert!(text.len() < MSG_CAP);
    assert!(!text.contains(|c: char| c.is_control()), "{text:?}");
}

/// A version string (the table's `nccl_version` list, lossy UTF-8) and a
/// code (`ncclGetVersion`'s integer, the first four bytes): what parses
/// prints back to itself, a decoded code encodes back to the code, and the
/// mismatch check and the INFO line's text hold for any list.
pub fn nccl_version(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    for part in text.split(',') {
        if let Some(v) = NcclVersion::parse(part) {
            assert_eq!(NcclVersion::parse(&v.to_string()), Some(v), "{part:?}");
        }
    }
    let code = i32::from_le_bytes(std::array::from_fn(|i| data.get(i).copied().unwrap_or(0)));
    let running = NcclVersion::from_code(code);
    if let Some(v) = running {
        let back = if code >= 10000 {
            v.major * 10000 + v.minor * 100 + v.patch
        } else {
            v.major * 1000 + v.minor * 100 + v.patch
        };
        assert_eq!(back as i32, code, "{v}");
    } else {
        assert!(code <= 0, "code {code} not decoded");
    }
    let check = VersionCheck::new(running, Some(&text));
    let swept_parses = text.split(',').any(|p| NcclVersion::parse(p).is_some());
    if check.is_mismatch() {
        assert!(running.is_some() && swept_parses);
    }
    let shown = format!("{} {}", check.running_shown(), check.swept_shown());
    assert!(!shown.contains(|c: char| c.is_control()), "{shown:?}");
}
