//! Which knobs a run used, and the facts a log does not print.
//!
//! nccl-tests text output never records NCCL_ALGO, NCCL_PROTO or the
//! channel count. dyncc establishes each knob of each run from two kinds of
//! source:
//!
//! * what the log itself shows (facts): the JSON `env` array (`-J`) and
//!   `NCCL INFO <VAR> set by environment to <value>` lines of that run;
//! * what the user says (explicit labels), in this order: a `# dyncc:
//!   KEY=VALUE ...` line in the file, the `--manifest` row matching the file,
//!   a `--name-pattern` matching its name, `NCCL_ALGO=Ring/` path
//!   components, `--assume KEY=VALUE`.
//!
//! Per knob: every source that names it must agree (after resolving NCCL's
//! per-function syntax for the collective), otherwise the file is an error
//! naming both sources, so a label never silently overrides another or the
//! log. A knob nobody names is NCCL's default when either the run shows NCCL
//! printed its environment (some `set by environment` line in that run, or
//! a JSON `env` array) or an explicit label names another knob of the run
//! (a label describes how the run was made: what it does not force was not
//! forced) or says `default` (`--assume default`). The `NCCL version`
//! banner alone proves nothing: `NCCL_DEBUG_SUBSYS=INIT,NET` prints it but no
//! environment lines. Otherwise the knob is unknown: an error in strict mode
//! that lists the labels that fix it; skipped and counted with `--lenient`;
//! reported as "knobs unknown" by `dyncc inspect`. dyncc never silently calls
//! an unlabelled log default.
//!
//! Values: `Ring`, `LL128`, `default`; NCCL's per-function syntax
//! (`allreduce:tree;allgather:ring`) is resolved per collective; lists
//! (`Ring,Tree`) and exclusions (`^LL128`) do not name one configuration and
//! are rejected. Channels: `NCCL_MIN_NCHANNELS` equal to `NCCL_MAX_NCHANNELS`
//! pins the count; `channels=N` (or `-1`/`default`) says it directly; a count
//! above [`MAX_CHANNELS`] is refused.
//!
//! The chunk size: no NCCL variable sets a collective's, only a tuner can,
//! so a run's chunk is NCCL's unless the dyncc plugin's sweep init line
//! (`NCCL INFO dyncc: sweep chunk=BYTES`, from `DYNCC_SWEEP_CHUNK`, which
//! `dyncc plan --chunks` sets) or a `chunk=BYTES` label says otherwise; a
//! knob nobody names is NCCL's chunk without a word in the report, so
//! plain sweeps read as before. A label and the log that disagree are an
//! error, as for the other knobs.

use std::path::Path;
use std::sync::Arc;

use crate::record::{Algo, Collective, PartialState, Proto};

/// What one source says about the knobs (raw values; resolved per
/// collective by [`resolve`]).
#[derive(Clone, Debug, Default)]
pub struct KnobSource {
    /// Human name of the source, for reports (`path`, `manifest m.csv:3`).
    pub name: String,
    /// What it names was shown by the log itself (environment lines, JSON
    /// `env`), not stated by a user.
    pub fact: bool,
    /// Line of the file each knob was read from (facts), by [`KnobSource::set`] key.
    pub lines: Vec<(&'static str, u32)>,
    pub algo: Option<String>,
    pub proto: Option<String>,
    pub min_channels: Option<String>,
    pub max_channels: Option<String>,
    pub channels: Option<String>,
    /// The chunk size in bytes (the plugin's sweep line, or `chunk=`).
    pub chunk: Option<String>,
    /// A knob this source does not name was not set (NCCL's choice).
    pub complete: bool,
}

impl KnobSource {
    pub fn named(name: impl Into<String>) -> Self {
        KnobSource {
            name: name.into(),
            ..Default::default()
        }
    }

    /// A source of facts the log shows.
    pub fn fact(name: impl Into<String>) -> Self {
        KnobSource {
            name: name.into(),
            fact: true,
            ..Default::default()
        }
    }

    /// Where `knob` (`NCCL_ALGO`, `NCCL_PROTO`, `channels`) came from:
    /// the source's name and, for a log line, its number.
    pub fn origin(&self, knob: &str) -> String {
        match self.lines.iter().rev().find(|(k, _)| *k == knob) {
            Some((_, l)) => format!("{} line {l}", self.name),
            None => self.name.clone(),
        }
    }

    /// True when the source names any knob.
    pub fn any(&self) -> bool {
        self.algo.is_some()
            || self.proto.is_some()
            || self.min_channels.is_some()
            || self.max_channels.is_some()
            || self.channels.is_some()
            || self.chunk.is_some()
    }

    /// Takes `key=value` if it is a knob; returns false otherwise.
    pub fn set(&mut self, key: &str, value: &str) -> bool {
        self.set_at(key, value, 0)
    }

    /// [`KnobSource::set`], remembering the file line it was read from.
    pub fn set_at(&mut self, key: &str, value: &str, line: u32) -> bool {
        let v = Some(value.trim().to_string());
        let knob = match key.trim().to_ascii_uppercase().as_str() {
            "NCCL_ALGO" | "ALGO" | "ALGORITHM" => {
                self.algo = v;
                "NCCL_ALGO"
            }
            "NCCL_PROTO" | "PROTO" | "PROTOCOL" => {
                self.proto = v;
                "NCCL_PROTO"
            }
            "NCCL_MIN_NCHANNELS" | "NCCL_MIN_NRINGS" => {
                self.min_channels = v;
                "channels"
            }
            "NCCL_MAX_NCHANNELS" | "NCCL_MAX_NRINGS" => {
                self.max_channels = v;
                "channels"
            }
            "CHANNELS" | "NCHANNELS" => {
                self.channels = v;
                "channels"
            }
            "CHUNK" | "CHUNK_SIZE" | "DYNCC_SWEEP_CHUNK" => {
                self.chunk = v;
                "chunk"
            }
            _ => return false,
        };
        if line > 0 {
            self.lines.push((knob, line));
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
    /// The state of the run's calls (`regBuff=1`, `pipeOps=N`).
    pub state: PartialState,
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
                     NCCL_MIN_NCHANNELS, NCCL_MAX_NCHANNELS, channels, chunk, coll, nodes, ranks, \
                     gpus_per_node, platform, gpu, nccl_version, regBuff, pipeOps"
                ));
            }
        }
        Ok(a)
    }

    /// Takes one pair. `Ok(false)` for an unknown key, `Err` for a bad value.
    pub fn set(&mut self, key: &str, value: &str) -> Result<bool, String> {
        // A shape of 0 nodes, ranks or GPUs describes no run.
        let num = |v: &str| -> Result<u32, String> {
            match v.trim().parse::<u32>() {
                Ok(0) => Err(format!("{key}={v}: expected a count of at least 1")),
                Ok(n) => Ok(n),
                Err(_) => Err(format!("{key}={v}: expected a whole number")),
            }
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
                if self.state.set(key, value)? {
                    return Ok(true);
                }
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
    if k.contains("CHUNK") {
        return parse_chunk(value)
            .map(|_| ())
            .map_err(|e| format!("{key}={value}: {e}"));
    }
    if k.contains("CHANNELS") || k.contains("NRINGS") {
        return parse_channels(value)
            .map(|_| ())
            .map_err(|e| format!("{key}={value}: {e}"));
    }
    Ok(())
}

/// NCCL's MAXCHANNELS: no NCCL runs more channels than this, so a larger
/// count in an input is a typo or a corrupted file, never a measurement.
pub const MAX_CHANNELS: u32 = 64;

/// `8` -> Some(8); `-1` or `default` -> None (NCCL's choice).
pub fn parse_channels(v: &str) -> Result<Option<u32>, String> {
    let v = v.trim();
    if v.eq_ignore_ascii_case("default") || v == "-1" {
        return Ok(None);
    }
    match v.parse::<u32>() {
        Ok(c) if (1..=MAX_CHANNELS).contains(&c) => Ok(Some(c)),
        Ok(c) => Err(format!(
            "{c} channels: expected 1..={MAX_CHANNELS} (NCCL's MAXCHANNELS), -1 or default"
        )),
        Err(_) => Err(format!(
            "channels {:?}: expected a count 1..={MAX_CHANNELS}, -1 or default",
            super::quote(v)
        )),
    }
}

/// `65536`, `64K` -> Some(65536); `default` or `nccl` -> None (NCCL's
/// chunk, which is what every run without the plugin's sweep chunk ran).
pub fn parse_chunk(v: &str) -> Result<Option<u64>, String> {
    let v = v.trim();
    if v.eq_ignore_ascii_case("default") || v.eq_ignore_ascii_case("nccl") {
        return Ok(None);
    }
    if v.contains('|') {
        return Err(format!(
            "the dyncc plugin's sweep lines of this run name different chunks ({}): its ranks \
             ran with different DYNCC_SWEEP_CHUNK, so no one chunk was measured",
            v.replace('|', ", ")
        ));
    }
    dyncc_tables::Chunk::parse_bytes(v)
        .map(Some)
        .ok_or_else(|| {
            format!(
            "chunk {:?}: expected a size in bytes such as 65536, 64K or 1M (at most 2 GiB), or \
             default",
            super::quote(v)
        )
        })
}

/// `all_reduce_perf_mpi` -> `all_reduce_perf`.
pub fn strip_binary_suffix(s: &str) -> &str {
    let s = s.trim();
    let s = s.rsplit('/').next().unwrap_or(s);
    s.strip_suffix("_mpi").unwrap_or(s)
}

/// Whether nccl-tests registered its buffers (`regBuff` != 0 in the calls
/// NCCL made) when run with the options `args` (the words after the
/// binary): `-R 1` / `-R 2` (local or symmetric registration), also
/// written `-R1`, `--local_register 1` or `--local_register=1`; the last one
/// given counts, as with getopt. NCCL before 2.19 cannot register:
/// nccl-tests ignores `-R` there.
pub fn nccl_tests_registers(args: &[&str], nccl_version: Option<u32>) -> bool {
    let mut level = 0i64;
    let mut i = 0;
    while i < args.len() {
        let w = args[i];
        let value = if w == "-R" || w == "--local_register" {
            i += 1;
            args.get(i).copied()
        } else {
            w.strip_prefix("--local_register=")
                .or_else(|| w.strip_prefix("-R").filter(|v| !v.is_empty()))
        };
        if let Some(v) = value {
            // strtol: leading digits, 0 when none.
            let digits: String = v.trim().chars().take_while(char::is_ascii_digit).collect();
            level = digits.parse().unwrap_or(0);
        }
        i += 1;
    }
    level != 0 && nccl_version.is_none_or(|v| v >= FIRST_REGISTER_NCCL)
}

/// NCCL registers user buffers (`ncclCommRegister`) from 2.19.0 on.
const FIRST_REGISTER_NCCL: u32 = 21900;

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
    // A version too large for a code is no NCCL's (and must not overflow).
    ma.checked_mul(10000)?
        .checked_add(mi.checked_mul(100)?)?
        .checked_add(pa)
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
    /// The chunk size in bytes as given (None: NCCL's); rounded per
    /// protocol by [`Resolved::chunk_of`].
    pub chunk: Option<u64>,
    /// `NCCL_ALGO=Ring (# dyncc), NCCL_PROTO=default (NCCL INFO), ...`
    pub how: String,
}

impl Resolved {
    /// The run's chunk as the plugin answered it: the largest storable
    /// size on the protocol's grain ([`dyncc_tables::Proto::chunk_at_most`],
    /// the plugin's own rounding), NCCL's below the grain. With the
    /// protocol left to NCCL the chunk differed per call, and the
    /// configuration is partial (never forced) either way.
    pub fn chunk_of(&self) -> dyncc_tables::Chunk {
        match (self.chunk, self.proto) {
            (None, _) => dyncc_tables::Chunk::NCCL,
            (Some(b), Some(p)) => p.chunk_at_most(b),
            (Some(b), None) => dyncc_tables::Chunk::at_most(b),
        }
    }
}

/// Resolves each knob of a run (see the module docs): every source naming
/// it must agree; a knob nobody names is default where some source is
/// complete. Errors say which knob is unknown, bad or contradicted.
pub fn resolve(sources: &[&KnobSource], coll: Collective) -> Result<Resolved, String> {
    let mut how = Vec::new();
    let algo = pick(sources, coll, "NCCL_ALGO", &mut how, |s| {
        s.algo
            .as_deref()
            .map(|v| resolve_name(v, coll, Algo::parse, "algorithm").map(|r| (v.to_string(), r)))
    })?;
    let proto = pick(sources, coll, "NCCL_PROTO", &mut how, |s| {
        s.proto
            .as_deref()
            .map(|v| resolve_name(v, coll, Proto::parse, "protocol").map(|r| (v.to_string(), r)))
    })?;
    let channels = pick(sources, coll, "channels", &mut how, channels_of)?;
    // Only a tuner sets a chunk: unnamed, it is NCCL's, and said nowhere
    // (a plain sweep's report reads as before).
    let chunk = if sources.iter().any(|s| s.chunk.is_some()) {
        pick(sources, coll, "chunk", &mut how, |s| {
            s.chunk
                .as_deref()
                .map(|v| parse_chunk(v).map(|b| (v.to_string(), b)))
        })?
    } else {
        None
    };
    Ok(Resolved {
        algo,
        proto,
        channels,
        chunk,
        how: how.join(", "),
    })
}

/// Does a source, by not naming a knob, say it was not set?
fn is_complete(s: &KnobSource) -> bool {
    // A user's label describes how the run was made: what it does not
    // force was not forced. A log's facts are complete only when NCCL
    // printed its environment (`complete`, set by the reader).
    s.complete || (!s.fact && s.any())
}

/// One value of a knob per source: the raw text and what it means.
type Named<T> = Option<Result<(String, Option<T>), String>>;

fn pick<T: PartialEq + Copy + std::fmt::Debug>(
    sources: &[&KnobSource],
    coll: Collective,
    name: &str,
    how: &mut Vec<String>,
    get: impl Fn(&KnobSource) -> Named<T>,
) -> Result<Option<T>, String> {
    let mut first: Option<(&KnobSource, String, Option<T>)> = None;
    for s in sources {
        let Some(r) = get(s) else { continue };
        let (raw, v) = r.map_err(|e| format!("{name} from {}: {e}", s.origin(name)))?;
        match &first {
            None => first = Some((s, raw, v)),
            Some((f, fraw, fv)) if *fv != v => {
                return Err(contradiction(name, coll, (f, fraw), (s, &raw)));
            }
            Some(_) => {}
        }
    }
    if let Some((s, raw, v)) = first {
        how.push(format!(
            "{name}={} ({})",
            if v.is_some() { raw.as_str() } else { "default" },
            s.origin(name)
        ));
        return Ok(v);
    }
    if let Some(s) = sources.iter().find(|s| is_complete(s)) {
        how.push(format!("{name}=default ({})", s.name));
        return Ok(None);
    }
    Err(unknown_msg(name))
}

fn contradiction(
    name: &str,
    coll: Collective,
    a: (&KnobSource, &str),
    b: (&KnobSource, &str),
) -> String {
    // Which of the two the log says, if either: that one is what NCCL ran.
    let (fact, label) = if b.0.fact && !a.0.fact {
        (b, a)
    } else {
        (a, b)
    };
    let way_out = if fact.0.fact {
        format!(
            "the log shows what NCCL ran: correct or remove the label ({}) for this file",
            label.0.name
        )
    } else {
        "correct or remove one of the two labels for this file".to_string()
    };
    format!(
        "{name} contradicts itself for {}: {name}={} from {} but {name}={} from {}; {way_out}",
        coll.name(),
        super::quote(fact.1),
        fact.0.origin(name),
        super::quote(label.1),
        label.0.origin(name),
    )
}

/// What to do about a knob nothing establishes. Every remedy named here
/// works as written when appended to the failing command (tests/ingest_labels.rs
/// runs each one).
pub fn unknown_msg(knob: &str) -> String {
    let what = match knob {
        "NCCL_ALGO" => "which algorithm (NCCL_ALGO)",
        "NCCL_PROTO" => "which protocol (NCCL_PROTO)",
        _ => "the channel count",
    };
    format!(
        "knobs unknown: nothing says {what} this run used (nccl-tests does not print it, and \
         the log has no \"set by environment\" lines, which NCCL_DEBUG=INFO prints only with \
         ENV in NCCL_DEBUG_SUBSYS). Label it: `--assume default` if NCCL chose (nothing \
         forced); `--assume NCCL_ALGO=Ring --assume NCCL_PROTO=LL` with the run's values; a \
         first line `# dyncc: NCCL_ALGO=Ring NCCL_PROTO=LL` in the file; a directory \
         `NCCL_ALGO=Ring/NCCL_PROTO=LL/` around it; or, for a folder of many settings, \
         `--manifest FILE` or `--name-pattern PATTERN` (see `dyncc inspect --help`)"
    )
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
            let fc = Collective::parse(f)
                .ok_or_else(|| format!("{:?} is not a collective", super::quote(f)))?;
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
        .ok_or_else(|| format!("{:?} is not a known {what}", super::quote(list)))
}

/// The channel count a source names, if it names one.
fn channels_of(s: &KnobSource) -> Named<u32> {
    if s.channels.is_none() && s.min_channels.is_none() && s.max_channels.is_none() {
        return None;
    }
    let r = (|| {
        if let Some(c) = &s.channels {
            return Ok((c.clone(), parse_channels(c)?));
        }
        let lo = s
            .min_channels
            .as_deref()
            .map(parse_channels)
            .transpose()?
            .flatten();
        let hi = s
            .max_channels
            .as_deref()
            .map(parse_channels)
            .transpose()?
            .flatten();
        match (lo, hi) {
            (None, None) => Ok(("default".into(), None)),
            (Some(a), Some(b)) if a == b => Ok((a.to_string(), Some(a))),
            _ => Err(format!(
                "NCCL_MIN_NCHANNELS={} and NCCL_MAX_NCHANNELS={} do not pin one channel count; \
                 dyncc records pinned counts (MIN = MAX) or NCCL's choice",
                s.min_channels.as_deref().unwrap_or("unset"),
                s.max_channels.as_deref().unwrap_or("unset"),
            )),
        }
    })();
    Some(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_knobs_beat_completeness_and_must_agree() {
        let mut info = KnobSource::fact("NCCL INFO");
        info.complete = true;
        info.set_at("NCCL_ALGO", "Ring", 12);
        let mut path = KnobSource::named("path");
        path.proto = Some("LL128".into());
        let r = resolve(&[&info, &path], Collective::AllReduce).unwrap();
        assert_eq!(r.algo, Some(Algo::Ring));
        // A label naming the protocol beats "not printed, so default".
        assert_eq!(r.proto, Some(Proto::LL128));
        assert_eq!(r.channels, None);
        // A label alone is complete: what it does not name was not forced.
        let r = resolve(&[&path], Collective::AllReduce).unwrap();
        assert_eq!(
            (r.algo, r.proto, r.channels),
            (None, Some(Proto::LL128), None)
        );
        // Nothing named, nothing complete: unknown.
        let fact = KnobSource::fact("NCCL INFO");
        let e = resolve(&[&fact], Collective::AllReduce).unwrap_err();
        assert!(e.contains("--assume default"), "{e}");
        // The log and a label disagree: an error naming both.
        let mut lab = KnobSource::named("--assume");
        lab.algo = Some("Tree".into());
        let e = resolve(&[&info, &lab], Collective::AllReduce).unwrap_err();
        assert!(
            e.contains("NCCL INFO line 12") && e.contains("--assume"),
            "{e}"
        );
    }

    /// The chunk: the plugin's line and a label must agree (as bytes, in
    /// any spelling); unnamed it is NCCL's without a word; a bad value is
    /// an error naming its source; the protocol's grain rounds it.
    #[test]
    fn the_chunk_is_a_knob_only_where_named() {
        let mut info = KnobSource::fact("NCCL INFO");
        info.complete = true;
        info.set_at("NCCL_PROTO", "LL128", 3);
        let r = resolve(&[&info], Collective::AllReduce).unwrap();
        assert_eq!(r.chunk, None);
        assert!(!r.how.contains("chunk"), "{}", r.how);
        assert_eq!(r.chunk_of(), dyncc_tables::Chunk::NCCL);
        info.set_at("chunk", "65536", 9);
        let mut lab = KnobSource::named("--assume");
        lab.set("chunk", "64K");
        let r = resolve(&[&info, &lab], Collective::AllReduce).unwrap();
        assert_eq!(r.chunk, Some(65536));
        assert!(
            r.how.contains("chunk=65536 (NCCL INFO line 9)"),
            "{}",
            r.how
        );
        assert_eq!(r.chunk_of().bytes(), 61440, "LL128's grain");
        lab.set("chunk", "256K");
        let e = resolve(&[&info, &lab], Collective::AllReduce).unwrap_err();
        assert!(
            e.contains("chunk contradicts itself")
                && e.contains("NCCL INFO line 9")
                && e.contains("--assume"),
            "{e}"
        );
        lab.set("chunk", "lots");
        let e = resolve(&[&lab], Collective::AllReduce).unwrap_err();
        assert!(
            e.contains("chunk from --assume") && e.contains("64K"),
            "{e}"
        );
        let p = |k: &str, v: &str| vec![(k.to_string(), v.to_string())];
        assert!(Assumptions::from_pairs(&p("chunk", "0"))
            .unwrap_err()
            .contains("65536, 64K or 1M"));
        let a = Assumptions::from_pairs(&p("chunk", "1M")).unwrap();
        assert_eq!(a.knobs.chunk.as_deref(), Some("1M"));
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
        s.max_channels = Some("65".into());
        s.min_channels = Some("65".into());
        assert!(resolve(&[&s], Collective::AllReduce)
            .unwrap_err()
            .contains("MAXCHANNELS"));
        s.min_channels = Some("8".into());
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
