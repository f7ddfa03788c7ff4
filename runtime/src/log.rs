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
}

impl Msg {
    /// An empty message.
    pub const fn new() -> Msg {
        Msg {
            buf: [0; MSG_CAP],
            len: 0,
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

impl Write for Msg {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for ch in s.chars() {
            let ch = if ch == '\0' { '?' } else { ch };
            let mut enc = [0u8; 4];
            let bytes = ch.encode_utf8(&mut enc).as_bytes();
            // Keep one byte for the NUL; silently truncate the rest.
            if self.len + bytes.len() > MSG_CAP - 1 {
                return Ok(());
            }
            self.buf[self.len..self.len + bytes.len()].copy_from_slice(bytes);
            self.len += bytes.len();
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

/// Text from outside the plugin, shown with control characters escaped
/// (`\n`, `\t`, `\r`, `\x1b`, ... and `\\` for a backslash), so one log
/// call stays one readable line whatever a path or a table contains.
pub struct Escaped<'a>(pub &'a str);

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for ch in self.0.chars() {
            match ch {
                '\\' => f.write_str("\\\\")?,
                '\n' => f.write_str("\\n")?,
                '\r' => f.write_str("\\r")?,
                '\t' => f.write_str("\\t")?,
                c if c.is_control() && (c as u32) < 0x100 => write!(f, "\\x{:02x}", c as u32)?,
                c if c.is_control() => write!(f, "\\u{{{:x}}}", c as u32)?,
                c => f.write_char(c)?,
            }
        }
        Ok(())
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
}
