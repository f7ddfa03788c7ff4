//! Progress of long work on stderr (files and bytes read; anything counted
//! to a known total): one place for when and how dyncc shows it. A bar is
//! drawn only when the command allows it (not with `--quiet`), only when
//! stderr is a terminal (never in a pipe or a log file, never on stdout
//! where the report goes), and only once the work has taken about a second:
//! quick work stays silent instead of flashing a bar.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// How long work runs before its progress is shown.
pub const SHOW_AFTER: Duration = Duration::from_secs(1);

/// Overrides [`SHOW_AFTER`], in milliseconds (tests show a bar at once).
pub const SHOW_AFTER_ENV: &str = "DYNCC_PROGRESS_AFTER_MS";

/// Progress of one piece of work, counted to a known total. Cloning it
/// gives another handle on the same bar (for threads).
#[derive(Clone)]
pub struct Progress(Arc<Inner>);

struct Inner {
    bar: ProgressBar,
    /// Whether the bar may ever be drawn.
    allowed: bool,
    /// Whether it is drawn (to stderr) now.
    drawn: AtomicBool,
    since: Instant,
    after: Duration,
}

impl Progress {
    /// Progress of `total` units, drawn with the indicatif `template` (see
    /// [`ProgressStyle::with_template`]) when `allowed` and stderr is a
    /// terminal, once the work has taken [`SHOW_AFTER`].
    pub fn new(allowed: bool, total: u64, template: &str) -> Progress {
        let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::hidden());
        if let Ok(style) = ProgressStyle::with_template(template) {
            bar.set_style(style.progress_chars("=> "));
        }
        let after = std::env::var(SHOW_AFTER_ENV)
            .ok()
            .and_then(|v| v.parse().ok())
            .map_or(SHOW_AFTER, Duration::from_millis);
        Progress(Arc::new(Inner {
            bar,
            allowed,
            drawn: AtomicBool::new(false),
            since: Instant::now(),
            after,
        }))
    }

    /// Progress never shown.
    pub fn hidden() -> Progress {
        Progress::new(false, 0, "")
    }

    /// Counts `n` more units done.
    pub fn inc(&self, n: u64) {
        self.0.bar.inc(n);
        self.maybe_show();
    }

    /// Sets what the bar says beside the count (the file being read).
    pub fn set_message(&self, msg: impl Into<std::borrow::Cow<'static, str>>) {
        self.0.bar.set_message(msg);
        self.maybe_show();
    }

    /// Ends the work: the bar, if drawn, is cleared.
    pub fn finish(&self) {
        self.0.bar.finish_and_clear();
    }

    fn maybe_show(&self) {
        let p = &self.0;
        if !p.allowed || p.drawn.load(Ordering::Relaxed) || p.since.elapsed() < p.after {
            return;
        }
        if !p.drawn.swap(true, Ordering::Relaxed) {
            // Hidden by indicatif itself when stderr is not a terminal.
            p.bar.set_draw_target(ProgressDrawTarget::stderr());
            // Drawn now: work that ends before the next update or tick
            // (a quick read on a busy machine) would otherwise show nothing.
            // Before the steady tick: once its ticker runs, `tick` is a no-op.
            p.bar.tick();
            p.bar.enable_steady_tick(Duration::from_millis(200));
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.bar.finish_and_clear();
    }
}
