//! Logging through NCCL's variadic `ncclDebugLog`, only from `init`.
//!
//! Messages are formatted into a fixed stack buffer (truncated, never
//! allocated) and passed with the constant format `"%s"`, so text from the
//! environment or a table (paths, metadata) can never be read as a format
//! string. Interior NULs are replaced so the C string is never cut short in
//! an unexpected place, and text from outside (paths, table metadata, OS
//! error messages) goes through [`Escaped`], so a newline or an escape
//! sequence in a path cannot forge or garble log lines.

use core::ffi::{c_char, c_int, c_ulong};
use core::fmt::{self, Write};

use crate::ffi::{ncclDebugLogger_t, NCCL_INIT, NCCL_LOG_INFO, NCCL_LOG_WARN, NCCL_TUNING};

/// Longest message passed to NCCL (NCCL's own line buffer is 1024 bytes
/// plus its prefix, so longer text would be cut there anyway).
pub const MSG_CAP: usize = 1024;

/// A NUL-terminated message being formatted on the stack.
pub struct Msg {
    buf: [u8; MSG_CAP],
    len: usize,
    /// Something did not fit: everything after is dropped too, so a
    /// truncated message is always a prefix of the whole text.
    cut: bool,
}

impl Msg {
    /// An empty message.
    pub const fn new() -> Msg {
        Msg {
            buf: [0; MSG_CAP],
            len: 0,
            cut: false,
        }
    }

    /// The text so far (without the terminating NUL).
    pub fn as_str(&self) -> &str {
        // Truncation happens on char boundaries (see write_str), so this is
        // always valid UTF-8; fall back to "" rather than panic.
        core::str::from_utf8(&self.buf[..self.len]).unwrap_or("")
    }

    fn as_c_ptr(&mut self) -> *const c_char {
        let end = self.len.min(MSG_CAP - 1);
        self.buf[end] = 0;
        self.buf.as_ptr().cast()
    }
}

impl Default for Msg {
    fn default() -> Self {
        Msg::new()
    }
}

impl Msg {
    /// Appends as much of `s` as fits (keeping one byte for the NUL), cut
    /// on a char boundary; false if not all of it fit (then or before).
    fn push(&mut self, s: &str) -> bool {
        if self.cut {
            return false;
        }
        let room = (MSG_CAP - 1).saturating_sub(self.len);
        let mut n = s.len().min(room);
        while !s.is_char_boundary(n) {
            n -= 1;
        }
        if let (Some(dst), Some(src)) = (
            self.buf.get_mut(self.len..self.len + n),
            s.as_bytes().get(..n),
        ) {
            dst.copy_from_slice(src);
            self.len += n;
        }
        self.cut = n < s.len();
        !self.cut
    }
}

impl Write for Msg {
    /// Copies `s` in runs between NULs (each NUL becomes `?`); silently
    /// truncates at the buffer's end, on a char boundary.
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let mut parts = s.split('\0');
        if let Some(first) = parts.next() {
            if !self.push(first) {
                return Ok(());
            }
        }
        for part in parts {
            if !self.push("?") || !self.push(part) {
                return Ok(());
            }
        }
        Ok(())
    }
}

/// Where log lines go: NCCL's logger (NULL means nowhere).
#[derive(Clone, Copy)]
pub struct Logger(pub ncclDebugLogger_t);

impl Logger {
    /// Logs an INFO line under NCCL_INIT|NCCL_TUNING, as NCCL's own
    /// "TUNER/Plugin: Using ..." line: plain `NCCL_DEBUG=INFO` (whose
    /// default subsystems include INIT) shows it, and so does
    /// `NCCL_DEBUG_SUBSYS=TUNING`.
    pub fn info(&self, args: fmt::Arguments<'_>) {
        self.emit(
            NCCL_LOG_INFO,
            NCCL_INIT | NCCL_TUNING,
            line!() as c_int,
            args,
        );
    }

    /// Logs a WARN under NCCL_INIT|NCCL_TUNING, so NCCL's default
    /// subsystem mask (which includes INIT) shows it.
    pub fn warn(&self, args: fmt::Arguments<'_>) {
        self.emit(
            NCCL_LOG_WARN,
            NCCL_INIT | NCCL_TUNING,
            line!() as c_int,
            args,
        );
    }

    fn emit(&self, level: c_int, flags: c_ulong, line: c_int, args: fmt::Arguments<'_>) {
        let Some(log) = self.0 else { return };
        let mut msg = Msg::new();
        let _ = msg.write_fmt(args);
        let text = msg.as_c_ptr();
        // SAFETY: `log` is NCCL's ncclDebugLog (or a test's logger with the
        // same signature). The format is the constant "%s" and the single
        // vararg is a NUL-terminated buffer that outlives the call.
        unsafe { log(level, flags, c"dyncc".as_ptr(), line, c"%s".as_ptr(), text) };
    }
}

/// Longest a text from outside is shown, in bytes after escaping. NCCL
/// cuts a log line at about 1 KB: a long path must not push the facts
/// after it (the table's digest, which ranks compare) off the line.
pub const SHOWN_CAP: usize = 256;

/// Text from outside the plugin, shown with control characters escaped
/// (`\n`, `\t`, `\r`, `\x1b`, ... and `\\` for a backslash), so one log
/// call stays one readable line whatever a path or a table contains. Text
/// that would take more than [`SHOWN_CAP`] bytes is shortened to `...`
/// and its tail (a path's file name and nearest directories), whole
/// characters and escapes only.
pub struct Escaped<'a>(pub &'a str);

/// Bytes `c` takes once escaped.
fn shown_len(c: char) -> usize {
    match c {
        '\\' | '\n' | '\r' | '\t' => 2,
        c if c.is_control() && (c as u32) < 0x100 => 4,
        // \u{...}: 4 + hex digits
        c if c.is_control() => 4 + (32 - (c as u32).leading_zeros()).div_ceil(4) as usize,
        c => c.len_utf8(),
    }
}

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut rest = self.0;
        let total: usize = rest.chars().map(shown_len).sum();
        if total > SHOWN_CAP {
            // Drop whole characters from the front until the tail and
            // the "..." fit.
            let mut drop = total - (SHOWN_CAP - 3);
            let mut start = rest.len();
            for (i, c) in rest.char_indices() {
                if drop == 0 {
                    start = i;
                    break;
                }
                drop = drop.saturating_sub(shown_len(c));
            }
            f.write_str("...")?;
            rest = &rest[start..];
        }
        // Runs of plain text are written whole; only the characters that
        // need it are written one by one.
        while let Some(i) = rest.find(|c: char| c == '\\' || c.is_control()) {
            let (plain, tail) = rest.split_at(i);
            f.write_str(plain)?;
            let mut chars = tail.chars();
            let Some(ch) = chars.next() else { break };
            match ch {
                '\\' => f.write_str("\\\\")?,
                '\n' => f.write_str("\\n")?,
                '\r' => f.write_str("\\r")?,
                '\t' => f.write_str("\\t")?,
                c if (c as u32) < 0x100 => write!(f, "\\x{:02x}", c as u32)?,
                c => write!(f, "\\u{{{:x}}}", c as u32)?,
            }
            rest = chars.as_str();
        }
        f.write_str(rest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaped_shows_control_characters_as_escapes() {
        let mut m = Msg::new();
        write!(m, "{}", Escaped("/t/a\nWARN fake\x1b[31m\t\\b\u{85}é")).unwrap();
        assert_eq!(m.as_str(), "/t/a\\nWARN fake\\x1b[31m\\t\\\\b\\x85é");
    }

    #[test]
    fn msg_truncates_on_char_boundary_and_replaces_nul() {
        let mut m = Msg::new();
        write!(m, "a\0b").unwrap();
        assert_eq!(m.as_str(), "a?b");
        let mut m = Msg::new();
        for _ in 0..2000 {
            write!(m, "é").unwrap();
        }
        assert!(m.as_str().len() < MSG_CAP);
        assert!(m.as_str().chars().all(|c| c == 'é'));
    }

    /// `Msg` and `Escaped` copy runs of text, not one char at a time: the
    /// message is the whole text, escaped, NULs as `?`, cut at the last
    /// char boundary that fits (and nothing written after a cut shows).
    #[test]
    fn run_wise_writing_gives_the_text_cut_at_a_char_boundary() {
        fn escape_charwise(s: &str) -> std::string::String {
            let mut out = std::string::String::new();
            for ch in s.chars() {
                match ch {
                    '\\' => out.push_str("\\\\"),
                    '\n' => out.push_str("\\n"),
                    '\r' => out.push_str("\\r"),
                    '\t' => out.push_str("\\t"),
                    c if c.is_control() && (c as u32) < 0x100 => {
                        out.push_str(&std::format!("\\x{:02x}", c as u32))
                    }
                    c if c.is_control() => out.push_str(&std::format!("\\u{{{:x}}}", c as u32)),
                    c => out.push(c),
                }
            }
            out
        }
        let alphabet = [
            'a', 'Z', ' ', 'é', '€', '😀', '\0', '\n', '\\', '\u{85}', '\x1b', '\u{2028}',
        ];
        let mut state = 0x2545_F491_4F6C_DD1Du64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for _ in 0..300 {
            let mut m = Msg::new();
            let mut whole = std::string::String::new();
            while whole.len() < MSG_CAP + 64 {
                // At most 24 chars of at most 8 escaped bytes: under
                // SHOWN_CAP (shortening is tested on its own).
                let len = (next() % 24) as usize;
                let piece: std::string::String = (0..len)
                    .map(|_| alphabet[(next() % alphabet.len() as u64) as usize])
                    .collect();
                if next() % 2 == 0 {
                    write!(m, "{}", Escaped(&piece)).unwrap();
                    whole.push_str(&escape_charwise(&piece));
                } else {
                    m.write_str(&piece).unwrap();
                    whole.push_str(&piece);
                }
                let whole = whole.replace('\0', "?");
                let mut fit = whole.len().min(MSG_CAP - 1);
                while !whole.is_char_boundary(fit) {
                    fit -= 1;
                }
                assert_eq!(m.as_str(), &whole[..fit]);
            }
        }
    }

    /// A text longer than [`SHOWN_CAP`] once escaped keeps its tail after
    /// "...", whole characters and escapes, at most the cap; shorter ones
    /// are shown whole.
    #[test]
    fn a_long_text_is_shown_as_its_tail() {
        let show = |s: &str| {
            let mut m = Msg::new();
            write!(m, "{}", Escaped(s)).unwrap();
            std::string::String::from(m.as_str())
        };
        let fits = "p".repeat(SHOWN_CAP);
        assert_eq!(show(&fits), fits);
        let path = std::format!("{}/table.tbl", "/dir".repeat(300));
        let shown = show(&path);
        assert!(shown.starts_with("...") && shown.ends_with("dir/dir/table.tbl"));
        assert_eq!(shown.len(), SHOWN_CAP);
        // Escapes and multi-byte characters are never split.
        for unit in ["\n", "é", "😀", "\u{2028}", "\\", "\x1b"] {
            let shown = show(&unit.repeat(400));
            assert!(shown.len() <= SHOWN_CAP, "{unit:?}");
            let tail = &shown[3..];
            let one = show(unit);
            assert!(
                !tail.is_empty() && tail.len() % one.len() == 0,
                "{unit:?}: {tail}"
            );
            assert_eq!(tail, one.repeat(tail.len() / one.len()));
        }
    }
}
