//! Which knobs a run used, and the facts a log does not print.
//!
//! nccl-tests text output never records NCCL_ALGO, NCCL_PROTO or the
//! channel count. dyncc establishes each knob separately from these sources,
//! first match wins:
//!
//! 1. the JSON `env` array (`-J` output; complete: a variable that is absent
//!    was not set, so NCCL chose);
//! 2. `NCCL INFO <VAR> set by environment to <value>` lines. When the log
//!    has NCCL INFO output (the `NCCL version` banner or any `set by
//!    environment` line) a knob with no such line was not set: default;
//! 3. `# dyncc: KEY=VALUE ...` header lines (what `dyncc plan` and
//!    `dyncc simulate` write). A header naming any knob is complete: knobs it
//!    does not name are default;
//! 4. path components such as `NCCL_ALGO=Ring/NCCL_PROTO=LL128/run.log`
//!    (partial: only what they name);
//! 5. `--assume KEY=VALUE` (partial), or `--assume default`, which says
//!    every knob not established above was NCCL's own choice.
//!
//! A knob none of these establishes makes the file unresolved: an error in
//! strict mode that tells the user to pass `--assume default` (for ordinary
//! default-only logs) or `--assume NCCL_ALGO=...`; skipped and counted with
//! `--lenient`; reported as "knobs unknown" by `dyncc inspect`. dyncc never
//! silently calls an unlabelled log default.
//!
//! Values: `Ring`, `LL128`, `default`; NCCL's per-function syntax
//! (`allreduce:tree;allgather:ring`) is resolved per collective; lists
//! (`Ring,Tree`) and exclusions (`^LL128`) do not name one configuration and
//! are rejected. Channels: `NCCL_MIN_NCHANNELS` equal to `NCCL_MAX_NCHANNELS`
//! pins the count; `channels=N` (or `-1`/`default`) says it directly.

use std::path::Path;
use std::sync::Arc;

use crate::record::{Algo, Collective, Proto};

/// What one source says about the knobs (raw values; resolved per
/// collective by [`resolve`]).
#[derive(Clone, Debug, Default)]
pub struct KnobSource {
    /// Human name of the source, for reports.
    pub name: &'static str,
    pub algo: Option<String>,
    pub proto: Option<String>,
    pub min_channels: Option<String>,
    pub max_channels: Option<String>,
    pub channels: Option<String>,
    /// A knob this source does not name was not set (NCCL's choice).
    pub complete: bool,
}

impl KnobSource {
    pub fn named(name: &'static str) -> Self {
        KnobSource {
            name,
            ..Default::default()
        }
    }

    /// True when the source names any knob.
    pub fn any(&self) -> bool {
        self.algo.is_some()
            || self.proto.is_some()
            || self.min_channels.is_some()
            || self.max_channels.is_some()
            || self.channels.is_some()
    }

    /// Takes `key=value` if it is a knob; returns false otherwise.
    pub fn set(&mut self, key: &str, value: &str) -> bool {
        let v = Some(value.trim().to_string());
        match key.trim().to_ascii_uppercase().as_str() {
            "NCCL_ALGO" | "ALGO" | "ALGORITHM" => self.algo = v,
            "NCCL_PROTO" | "PROTO" | "PROTOCOL" => self.proto = v,
            "NCCL_MIN_NCHANNELS" | "NCCL_MIN_NRINGS" => self.min_channels = v,
            "NCCL_MAX_NCHANNELS" | "NCCL_MAX_NRINGS" => self.max_channels = v,
            "CHANNELS" | "NCHANNELS" => self.channels = v,
            _ => return false,
        }
        true
    }
}

/// Facts and knobs from `--assume` or `# dyncc:` lines.
#[derive(Clone, Debug, Default)]
pub struct Assumptions {
    pub knobs: KnobSource,
    pub coll: Option<Collective>,
    pub nodes: Option<u32>,
    pub ranks: Option<u32>,
    pub gpus_per_node: Option<u32>,
    pub platform: Option<Arc<str>>,
    pub gpu: Option<Arc<str>>,
    pub nccl_version: Option<u32>,
}

impl Assumptions {
    /// Parses `--assume` pairs; unknown keys are an error (likely a typo).
    pub fn from_pairs(pairs: &[(String, String)]) -> Result<Self, String> {
        let mut a = Assumptions {
            knobs: KnobSource::named("--assume"),
            ..Default::default()
        };
        for (k, v) in pairs {
            if !a.set(k, v)? {
                return Err(format!(
                    "unknown key {k:?}; known keys: default, NCCL_ALGO, NCCL_PROTO, \
                     NCCL_MIN_NCHANNELS, NCCL_MAX_NCHANNELS, channels, coll, nodes, ranks, \
                     gpus_per_node, platform, gpu, nccl_version"
                ));
            }
        }
        Ok(a)
    }

    /// Takes one pair. `Ok(false)` for an unknown key, `Err` for a bad value.
    pub fn set(&mut self, key: &str, value: &str) -> Result<bool, String> {
        let num = |v: &str| -> Result<u32, String> {
            v.trim()
                .parse::<u32>()
                .map_err(|_| format!("{key}={v}: expected a whole number"))
        };
        match key.trim().to_ascii_lowercase().as_str() {
            "default" => {
                self.knobs.complete = true;
            }
            "coll" | "collective" => {
                self.coll = Some(Collective::parse(strip_binary_suffix(value)).ok_or_else(|| {
                    format!("{key}={value}: expected a collective such as allreduce, allgather, reducescatter, broadcast, reduce, alltoall, sendrecv")
                })?)
            }
            "nodes" | "nnodes" => self.nodes = Some(num(value)?),
            "ranks" | "nranks" => self.ranks = Some(num(value)?),
            "gpus_per_node" | "gpus-per-node" | "ppn" => self.gpus_per_node = Some(num(value)?),
            "platform" => self.platform = Some(value.trim().into()),
            "gpu" => self.gpu = Some(value.trim().into()),
            "nccl_version" | "nccl" => self.nccl_version = Some(parse_nccl_version(value).ok_or_else(|| format!("{key}={value}: expected a version like 2.23.4 or a code like 22304"))?),
            // Recorded by dyncc plan scripts; not needed to read the rows.
            "repeat" | "rep" | "seed" | "profile" => {}
            _ => {
                if !self.knobs.set(key, value) {
                    return Ok(false);
                }
                // Validate the value's shape now (per-collective forms are
                // resolved later).
                check_knob_syntax(key, value)?;
            }
        }
        Ok(true)
    }

    /// Parses the `KEY=VALUE` words of a `# dyncc:` line; unknown keys are
    /// kept out (forward compatible), bad values are errors.
    pub fn parse_header_line(&mut self, rest: &str) -> Result<(), String> {
        for word in rest.split_whitespace() {
            if word.eq_ignore_ascii_case("default") {
                self.knobs.complete = true;
                continue;
            }
            if let Some((k, v)) = word.split_once('=') {
                self.set(k, v)?;
            }
        }
        if self.knobs.any() {
            self.knobs.complete = true;
        }
        Ok(())
    }
}

fn check_knob_syntax(key: &str, value: &str) -> Result<(), String> {
    let k = key.to_ascii_uppercase();
    if k.contains("CHANNELS") || k.contains("NRINGS") {
        let v = value.trim();
        if v.eq_ignore_ascii_case("default") || v == "-1" || v.parse::<u32>().is_ok() {
            return Ok(());
        }
        return Err(format!(
            "{key}={value}: expected a channel count, -1 or default"
        ));
    }
    Ok(())
}

/// `all_reduce_perf_mpi` -> `all_reduce_perf`.
pub fn strip_binary_suffix(s: &str) -> &str {
    let s = s.trim();
    let s = s.rsplit('/').next().unwrap_or(s);
    s.strip_suffix("_mpi").unwrap_or(s)
}

/// `2.23.4`, `2.23.4-1`, `2.18.1+cuda12.1` or a code `22304` -> 22304.
pub fn parse_nccl_version(s: &str) -> Option<u32> {
    let s = s.trim();
    if let Ok(code) = s.parse::<u32>() {
        return Some(code);
    }
    let s = s.split(['+', '-']).next()?;
    let mut it = s.split('.');
    let ma: u32 = it.next()?.parse().ok()?;
    let mi: u32 = it.next()?.parse().ok()?;
    let pa: u32 = it.next().unwrap_or("0").parse().ok()?;
    Some(ma * 10000 + mi * 100 + pa)
}

/// Knobs found in path components (`NCCL_ALGO=Ring/NCCL_PROTO=LL128/x.log`).
pub fn from_path(path: &Path) -> KnobSource {
    let mut src = KnobSource::named("path");
    for comp in path.components() {
        let c = comp.as_os_str().to_string_lossy();
        let c = strip_ext(&c);
        for part in c.split([',', ' ', '+', '&', ';']) {
            if let Some((k, v)) = part.split_once('=') {
                src.set(k, v);
            }
        }
    }
    src
}

fn strip_ext(s: &str) -> &str {
    for ext in [".log", ".out", ".txt", ".json", ".csv", ".err"] {
        if let Some(x) = s.strip_suffix(ext) {
            return x;
        }
    }
    s
}

/// Resolved knobs of one collective.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolved {
    pub algo: Option<Algo>,
    pub proto: Option<Proto>,
    pub channels: Option<u32>,
    /// `NCCL_ALGO=Ring (# dyncc), NCCL_PROTO=default (NCCL INFO), ...`
    pub how: String,
}

/// Resolves each knob from the first source (in priority order) that
/// establishes it. Errors say which knob is unknown or bad.
pub fn resolve(sources: &[&KnobSource], coll: Collective) -> Result<Resolved, String> {
    let mut how = Vec::new();
    let algo = pick(
        sources,
        |s| s.algo.as_deref(),
        "NCCL_ALGO",
        &mut how,
        |v| resolve_name(v, coll, Algo::parse, "algorithm"),
    )?;
    let proto = pick(
        sources,
        |s| s.proto.as_deref(),
        "NCCL_PROTO",
        &mut how,
        |v| resolve_name(v, coll, Proto::parse, "protocol"),
    )?;
    let mut channels = None;
    let mut found = false;
    for s in sources {
        if s.channels.is_some() || s.min_channels.is_some() || s.max_channels.is_some() {
            channels = channels_of(s)?;
            how.push(format!(
                "channels={} ({})",
                channels
                    .map(|c| c.to_string())
                    .unwrap_or_else(|| "default".into()),
                s.name
            ));
            found = true;
            break;
        }
        if s.complete {
            how.push(format!("channels=default ({})", s.name));
            found = true;
            break;
        }
    }
    if !found {
        return Err(unknown_msg("the channel count"));
    }
    Ok(Resolved {
        algo,
        proto,
        channels,
        how: how.join(", "),
    })
}

fn unknown_msg(what: &str) -> String {
    format!(
        "knobs unknown: nothing in the file or its path says {what} the run used (nccl-tests \
         does not print it); if these are ordinary runs with NCCL's own choice pass \
         `--assume default`, otherwise `--assume NCCL_ALGO=.. NCCL_PROTO=..`, a `# dyncc: \
         NCCL_ALGO=..` line or a NCCL_ALGO=../ directory"
    )
}

fn pick<T>(
    sources: &[&KnobSource],
    get: impl Fn(&KnobSource) -> Option<&str>,
    name: &str,
    how: &mut Vec<String>,
    parse: impl Fn(&str) -> Result<Option<T>, String>,
) -> Result<Option<T>, String> {
    for s in sources {
        if let Some(v) = get(s) {
            let r = parse(v).map_err(|e| format!("{name}={v} ({}): {e}", s.name))?;
            how.push(format!(
                "{name}={} ({})",
                if r.is_some() { v } else { "default" },
                s.name
            ));
            return Ok(r);
        }
        if s.complete {
            how.push(format!("{name}=default ({})", s.name));
            return Ok(None);
        }
    }
    Err(unknown_msg(if name == "NCCL_ALGO" {
        "which algorithm"
    } else {
        "which protocol"
    }))
}

fn resolve_name<T>(
    v: &str,
    coll: Collective,
    parse: impl Fn(&str) -> Option<T>,
    what: &str,
) -> Result<Option<T>, String> {
    let v = v.trim().trim_matches(['"', '\'']);
    let list = if v.contains(':') {
        // Per-function syntax: `allreduce:tree;allgather:ring`.
        let mut found = None;
        for entry in v.split(';') {
            let Some((f, l)) = entry.split_once(':') else {
                return Err(format!("expected FUNC:{what} entries separated by ';'"));
            };
            let fc = Collective::parse(f).ok_or_else(|| format!("{f:?} is not a collective"))?;
            if fc == coll {
                found = Some(l.trim());
            }
        }
        match found {
            Some(l) => l,
            None => return Ok(None),
        }
    } else {
        v
    };
    if list.is_empty() || list.eq_ignore_ascii_case("default") {
        return Ok(None);
    }
    if list.starts_with('^') {
        return Err(format!(
            "an exclusion leaves NCCL a choice of several; dyncc needs one forced {what} or default"
        ));
    }
    if list.contains(',') {
        return Err(format!(
            "a list leaves NCCL a choice; dyncc needs one forced {what} or default"
        ));
    }
    parse(list)
        .map(Some)
        .ok_or_else(|| format!("{list:?} is not a known {what}"))
}

fn channels_of(s: &KnobSource) -> Result<Option<u32>, String> {
    let p = |v: &str| -> Result<Option<u32>, String> {
        let v = v.trim();
        if v.eq_ignore_ascii_case("default") || v == "-1" {
            return Ok(None);
        }
        v.parse::<u32>().map(Some).map_err(|_| {
            format!(
                "channels {v:?} ({}): expected a count, -1 or default",
                s.name
            )
        })
    };
    if let Some(c) = &s.channels {
        return p(c);
    }
    let lo = s.min_channels.as_deref().map(p).transpose()?.flatten();
    let hi = s.max_channels.as_deref().map(p).transpose()?.flatten();
    match (lo, hi) {
        (None, None) => Ok(None),
        (Some(a), Some(b)) if a == b => Ok(Some(a)),
        _ => Err(format!(
            "NCCL_MIN_NCHANNELS={} and NCCL_MAX_NCHANNELS={} ({}) do not pin one channel count; \
             dyncc records pinned counts (MIN = MAX) or NCCL's choice",
            s.min_channels.as_deref().unwrap_or("unset"),
            s.max_channels.as_deref().unwrap_or("unset"),
            s.name
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_source_wins_and_complete_sources_mean_default() {
        let mut info = KnobSource::named("NCCL INFO");
        info.complete = true;
        info.algo = Some("Ring".into());
        let mut path = KnobSource::named("path");
        path.proto = Some("LL128".into());
        let r = resolve(&[&info, &path], Collective::AllReduce).unwrap();
        assert_eq!(r.algo, Some(Algo::Ring));
        // INFO lines are complete and outrank the path: proto is default.
        assert_eq!(r.proto, None);
        assert_eq!(r.channels, None);
        let r = resolve(&[&path], Collective::AllReduce).unwrap_err();
        assert!(r.contains("--assume default"), "{r}");
    }

    #[test]
    fn per_function_syntax_lists_and_channels() {
        let mut s = KnobSource::named("x");
        s.complete = true;
        s.algo = Some("allreduce:tree;allgather:ring".into());
        s.min_channels = Some("8".into());
        s.max_channels = Some("8".into());
        let r = resolve(&[&s], Collective::AllReduce).unwrap();
        assert_eq!((r.algo, r.channels), (Some(Algo::Tree), Some(8)));
        let r = resolve(&[&s], Collective::ReduceScatter).unwrap();
        assert_eq!(r.algo, None);
        s.algo = Some("Ring,Tree".into());
        assert!(resolve(&[&s], Collective::AllReduce)
            .unwrap_err()
            .contains("list"));
        s.algo = Some("^Tree".into());
        assert!(resolve(&[&s], Collective::AllReduce)
            .unwrap_err()
            .contains("exclusion"));
        s.algo = None;
        s.max_channels = Some("16".into());
        assert!(resolve(&[&s], Collective::AllReduce)
            .unwrap_err()
            .contains("pin"));
    }

    #[test]
    fn path_components_and_versions() {
        let s = from_path(Path::new(
            "/d/NCCL_ALGO=Ring/NCCL_PROTO=LL128,NCCL_MIN_NCHANNELS=4/x.log",
        ));
        assert_eq!(s.algo.as_deref(), Some("Ring"));
        assert_eq!(s.proto.as_deref(), Some("LL128"));
        assert_eq!(s.min_channels.as_deref(), Some("4"));
        let s = from_path(Path::new("runs/NCCL_ALGO=Tree.log"));
        assert_eq!(s.algo.as_deref(), Some("Tree"));
        assert_eq!(parse_nccl_version("2.23.4-1"), Some(22304));
        assert_eq!(parse_nccl_version("2.18.1+cuda12.1"), Some(21801));
        assert_eq!(parse_nccl_version("22902"), Some(22902));
    }

    #[test]
    fn assume_rejects_unknown_keys_and_bad_values() {
        let p = |k: &str, v: &str| vec![(k.to_string(), v.to_string())];
        assert!(Assumptions::from_pairs(&p("nodez", "2"))
            .unwrap_err()
            .contains("unknown key"));
        assert!(Assumptions::from_pairs(&p("nodes", "two"))
            .unwrap_err()
            .contains("whole number"));
        assert!(Assumptions::from_pairs(&p("coll", "allfoo")).is_err());
        let a = Assumptions::from_pairs(&p("coll", "all_reduce_perf_mpi")).unwrap();
        assert_eq!(a.coll, Some(Collective::AllReduce));
    }
}
