//! How nccl-tests timed a run. By default it times `iters` launches with
//! CUDA events after a barrier: the collective's time. `-C 1` prints the
//! host's time instead (the `cputime` column, JSON `cpu_time`), `-z N`
//! blocks after each iteration (`-z 3` excludes the barrier from the time,
//! `# Blocking Enabled:` in the header), and `-G N` replays a CUDA graph of
//! the iterations (`graph: N` in the `# nThread` line, JSON
//! `config.graph`). Each times something else than a default run, so a run
//! timed otherwise is a setup of its own ([`super::setup`]): never pooled
//! with, or compared against, default runs.
//!
//! The timing travels in the run's `env` (see [`with_timing`]) so that a
//! run whose environment is not shown still carries it.

use std::sync::Arc;

/// How one run was timed: all `false`/0 is nccl-tests' default.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Timing {
    /// `-C 1`: host (CPU) time per iteration.
    pub cputime: bool,
    /// `-z N`: 1 barrier and wait per inner iteration, 2 wait only, 3 wait
    /// and barrier per outer iteration with the barrier excluded.
    pub blocking: u8,
    /// `-G N`: CUDA graph launches.
    pub graph: bool,
}

/// The `env` word that carries a timing: `timing=cputime+blocking3`.
pub const KEY: &str = "timing";
/// The `env` word that says the run's environment itself was not shown
/// (its only words are the timing's).
const UNSHOWN: &str = "env=unshown";

impl Timing {
    /// `cputime`, `blocking3`, `graph`, joined by `+`; `None` for the
    /// default.
    pub fn name(&self) -> Option<String> {
        let mut w = Vec::new();
        if self.cputime {
            w.push("cputime".to_string());
        }
        if self.blocking > 0 {
            w.push(format!("blocking{}", self.blocking));
        }
        if self.graph {
            w.push("graph".to_string());
        }
        (!w.is_empty()).then(|| w.join("+"))
    }

    /// From the options after the binary (`-C 1 -z 3 -G 4`, also `-C1`,
    /// `--report_cputime 1`, `--blocking=3`; the last one given counts, as
    /// with getopt).
    pub fn from_args(args: &[&str]) -> Timing {
        let v = |short, long| option(args, short, long).unwrap_or(0);
        Timing {
            cputime: v("-C", "--report_cputime") != 0,
            blocking: v("-z", "--blocking").clamp(0, 3) as u8,
            graph: v("-G", "--cudagraph") > 0,
        }
    }

    /// A `# Blocking Enabled: ...` header line (text after the `#`).
    pub fn blocking_line(body: &str) -> Option<u8> {
        let rest = body.strip_prefix("Blocking Enabled")?;
        Some(if rest.contains("excludes barrier") {
            3
        } else if rest.contains("no barrier") {
            2
        } else {
            1
        })
    }

    /// The `graph: N` field of a `# nThread ...` header line.
    pub fn graph_field(body: &str) -> bool {
        let mut words = body.split_whitespace();
        while let Some(w) = words.next() {
            if w == "graph:" {
                return words
                    .next()
                    .and_then(|n| n.parse::<i64>().ok())
                    .is_some_and(|n| n > 0);
            }
        }
        false
    }
}

/// The value of the last `short`/`long` option in `args`, strtol-style
/// (leading digits; 0 when none).
fn option(args: &[&str], short: &str, long: &str) -> Option<i64> {
    let mut found = None;
    let mut i = 0;
    while i < args.len() {
        let w = args[i];
        let value = if w == short || w == long {
            i += 1;
            args.get(i).copied()
        } else {
            w.strip_prefix(long)
                .and_then(|r| r.strip_prefix('='))
                .or_else(|| w.strip_prefix(short).filter(|v| !v.is_empty()))
        };
        if let Some(v) = value {
            let digits: String = v.trim().chars().take_while(char::is_ascii_digit).collect();
            found = Some(digits.parse().unwrap_or(0));
        }
        i += 1;
    }
    found
}

/// A run's `env` with its timing added (`None`: the environment not
/// shown; a default timing leaves `env` as it is).
pub fn with_timing(env: Option<Arc<str>>, t: Timing) -> Option<Arc<str>> {
    let Some(name) = t.name() else { return env };
    let word = format!("{KEY}={name}");
    Some(match env.as_deref() {
        None => format!("{UNSHOWN} {word}").into(),
        Some("") => word.into(),
        Some(e) => format!("{e} {word}").into(),
    })
}

/// A run's `env` split into the environment it shows (`None`: not shown)
/// and its timing (`None`: the default).
pub fn split(env: Option<&str>) -> (Option<Arc<str>>, Option<Arc<str>>) {
    let Some(e) = env else { return (None, None) };
    let mut timing = None;
    let mut shown = true;
    let mut rest = Vec::new();
    for w in e.split(' ').filter(|w| !w.is_empty()) {
        if w == UNSHOWN {
            shown = false;
        } else if let Some(t) = w.strip_prefix(KEY).and_then(|r| r.strip_prefix('=')) {
            timing = Some(Arc::from(t));
        } else {
            rest.push(w);
        }
    }
    let env = shown.then(|| Arc::from(rest.join(" ")));
    (env, timing)
}

/// How reports name a timing.
pub fn describe(timing: Option<&str>) -> String {
    let Some(t) = timing else {
        return "timed as by default".into();
    };
    let parts: Vec<&str> = t
        .split('+')
        .map(|w| match w {
            "cputime" => "CPU time (-C 1)",
            "blocking1" => "blocking, barrier timed (-z 1)",
            "blocking2" => "blocking, no barrier (-z 2)",
            "blocking3" => "blocking, barrier excluded (-z 3)",
            "graph" => "CUDA graphs (-G)",
            other => other,
        })
        .collect();
    format!("timed with {}", parts.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timing_options_are_read_as_getopt_reads_them() {
        let t = Timing::from_args(&["-b", "8", "-C", "1", "-z3", "--cudagraph=4"]);
        assert_eq!(t.name().as_deref(), Some("cputime+blocking3+graph"));
        assert_eq!(Timing::from_args(&["-C", "1", "-C", "0"]).name(), None);
        assert_eq!(Timing::from_args(&["-G", "0", "-z", "0"]).name(), None);
    }

    #[test]
    fn timing_travels_in_env_and_comes_back_apart() {
        let cpu = Timing {
            cputime: true,
            ..Default::default()
        };
        for env in [None, Some(""), Some("NCCL_IB_HCA=mlx5_0,mlx5_3")] {
            let e = with_timing(env.map(Arc::from), cpu);
            let (back, t) = split(e.as_deref());
            assert_eq!(back.as_deref(), env, "{e:?}");
            assert_eq!(t.as_deref(), Some("cputime"));
        }
        assert_eq!(with_timing(None, Timing::default()), None);
    }

    #[test]
    fn header_lines_say_how_a_run_was_timed() {
        assert_eq!(
            Timing::blocking_line(
                "Blocking Enabled: wait and barrier after each outer iteration (-n); time \
                 excludes barrier"
            ),
            Some(3)
        );
        assert_eq!(
            Timing::blocking_line(
                "Blocking Enabled: wait after each inner iteration (-m), no barrier"
            ),
            Some(2)
        );
        assert!(Timing::graph_field(
            "nThread 1 nGpus 1 minBytes 8 maxBytes 8 step: 2(factor) warmup iters: 1 iters: 20 \
             agg iters: 1 validation: 1 graph: 4 unalign: 0"
        ));
        assert!(!Timing::graph_field(
            "nThread 1 nGpus 1 graph: 0 unalign: 0"
        ));
    }
}
