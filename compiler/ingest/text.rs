//! nccl-tests text logs, every era: old (no root column, float error
//! column, rank lines without Group), middle (2.1x), and 2.17+ (version line,
//! several collectives per file between `Collective test starting/concluded`
//! markers, `N/A` in #wrong, exponent and inf/nan numbers, `-I` and `-S`
//! columns, `-d all`/`-o all` rows, linear steps, zero-size rows).
//!
//! Launcher prefixes are stripped (srun `-l` labels `N: `, OpenMPI
//! `[1,0]<stdout>:` tags and `--timestamp-output` stamps, fused `[N]` rank
//! tags); NCCL INFO/WARN lines and launcher noise are skipped, except for
//! what they tell us: the NCCL version banner, `... set by environment to`
//! knob lines and the per-collective `Bytes -> Algo` choice lines (used to
//! flag runs where NCCL ignored a forced knob).
//!
//! Shape: nRanks = number of `# Rank` lines of one job, nNodes = distinct
//! hosts among them, GPU from the same lines. Rank ids restarting at 0 (or
//! several header blocks before any row) mean independent jobs interleaved
//! in one file: never read as one bigger job. If the jobs have the same
//! shape the rows are read as repeats of that shape (and reported);
//! otherwise the rows cannot be attributed and the block is unresolved.
//!
//! Runs: a file may concatenate several runs (each process prints its own
//! `# nThread` header, and with NCCL_DEBUG=INFO its own banner and
//! `set by environment` lines). Knobs, the NCCL version and the other
//! `NCCL_*` variables (the run's setup) are resolved per run section; a
//! section split off by a second table header of the same process inherits
//! them.
//!
//! The file is streamed line by line; only the parsed rows of the file are
//! kept until its end (knob lines may come anywhere in it).

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, Read};
use std::sync::Arc;

use memchr::memmem;

use sha2::{Digest as _, Sha256};

use super::knobs::{self, Assumptions, KnobSource};
use super::run::{Labeller, Shown, ShownKnobs};
use super::{quote, FileCtx, FileOutput, Format};
use crate::record::{flags, Algo, Collective, Measurement, Proto};

/// Longest line the text reader accepts (nccl-tests lines are < 1 KiB; rank
/// lists of huge jobs stay far below this).
pub const MAX_LINE: usize = 1 << 20;

/// Does the start of a file look like nccl-tests output?
pub fn looks_like_nccl_tests(head: &[u8]) -> bool {
    [
        &b"# nThread"[..],
        b"# Using devices",
        b"Collective test starting",
        b"out-of-place",
        b"# nccl-tests version",
        b" NCCL INFO ",
        b"# dyncc:",
    ]
    .iter()
    .any(|m| memmem::find(head, m).is_some())
}

/// Names launchers give captured output (error-only logs are read, and
/// reported, as logs).
pub fn looks_like_launch_log(name: &str) -> bool {
    name.ends_with(".out")
        || name.ends_with(".log")
        || name.ends_with(".err")
        || name.contains(".dat")
        || name.contains(".out.")
        || name.contains(".log.")
}

/// Column positions of a table, from its header line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Layout {
    /// Tokens in a data row.
    ntok: usize,
    type_i: usize,
    time: [usize; 2],
    /// `#wrong` / `error` column of each half.
    wrong: [usize; 2],
    /// Old format: the error column is a float max error, not a count.
    float_error: bool,
    /// The time columns are `cputime` (`-C 1`): host time.
    cputime: bool,
}

impl Layout {
    const NEW: Layout = Layout {
        ntok: 13,
        type_i: 2,
        time: [5, 9],
        wrong: [8, 12],
        float_error: false,
        cputime: false,
    };
    const OLD: Layout = Layout {
        ntok: 12,
        type_i: 2,
        time: [4, 8],
        wrong: [7, 11],
        float_error: true,
        cputime: false,
    };

    /// From the column-name line (`size count type redop root time ...`),
    /// tokens after the `#`.
    fn from_header(toks: &[&[u8]]) -> Option<Layout> {
        if toks.first() != Some(&&b"size"[..]) || toks.get(1) != Some(&&b"count"[..]) {
            return None;
        }
        let mut time = Vec::new();
        let mut wrong = Vec::new();
        let mut float_error = false;
        let mut cputime = false;
        let mut stamp = 0;
        for (i, t) in toks.iter().enumerate() {
            match *t {
                b"time" => time.push(i),
                b"cputime" => {
                    time.push(i);
                    cputime = true;
                }
                b"#wrong" => wrong.push(i),
                b"error" => {
                    wrong.push(i);
                    float_error = true;
                }
                b"timestamp" => stamp = 1,
                _ => {}
            }
        }
        let type_i = toks.iter().position(|t| *t == b"type")?;
        if time.len() != 2 || wrong.len() != 2 {
            return None;
        }
        Some(Layout {
            // -S prints the timestamp as two tokens (date and time).
            ntok: toks.len() + stamp,
            type_i,
            time: [time[0], time[1]],
            wrong: [wrong[0], wrong[1]],
            float_error,
            cputime,
        })
    }

    fn describe(&self) -> &'static str {
        if self.float_error {
            "size count type redop time algbw busbw error time algbw busbw error"
        } else {
            "size count type redop root time algbw busbw #wrong time algbw busbw #wrong"
        }
    }
}

/// (function, bytes) -> the algorithm and protocol NCCL's INFO lines say it chose.
type ChosenMap = HashMap<(Option<Collective>, u64), (Option<Algo>, Option<Proto>)>;

/// One job's rank lines.
#[derive(Default, Debug)]
struct Job {
    ranks: u32,
    last_rank: Option<u32>,
    /// A set: a 100k-rank job would make a list quadratic.
    hosts: std::collections::HashSet<Box<[u8]>>,
    gpu: Option<Arc<str>>,
    elided: bool,
    /// Its ranks per `Group` (NCCL_TESTS_SPLIT: several communicators).
    groups: super::groups::Groups,
}

#[derive(Debug)]
struct RawRow {
    line: u32,
    size: u64,
    dtype: Arc<str>,
    time: [Option<f64>; 2],
    wrong: [bool; 2],
}

/// One test section (a header block and its table).
#[derive(Default, Debug)]
struct Block {
    line: u32,
    /// What this run's NCCL INFO lines say about the knobs (facts).
    info: KnobSource,
    /// The run's other `NCCL_*` variables from `set by environment` lines.
    env: BTreeMap<String, String>,
    nccl_version: Option<u32>,
    /// The section has NCCL INFO output of its own (banner or environment).
    own_info: bool,
    /// The section starts a new process (`# nThread`, `# nccl-tests
    /// version`, `Collective test starting`): it inherits nothing.
    new_run: bool,
    /// Digest of its data rows, to count a section seen twice once.
    digest: Sha256,
    coll: Option<Collective>,
    jobs: Vec<Job>,
    /// `# nThread` lines seen before any row (more than one: interleaved).
    headers: u32,
    layouts: u32,
    footers: u32,
    layout: Option<Layout>,
    /// How nccl-tests timed it (`-C`, `-z`, `-G`, from its header lines).
    timing: super::timing::Timing,
    elided: bool,
    concluded: bool,
    rows: Vec<RawRow>,
    /// (nRanks, nNodes) of the communicators NCCL's INFO lines created
    /// (`comm 0x... rank R nRanks N nNodes M ...`).
    comms: std::collections::BTreeSet<(u32, u32)>,
}

impl Block {
    fn new() -> Block {
        Block {
            info: KnobSource::fact("NCCL INFO"),
            ..Default::default()
        }
    }
    fn finished(&self) -> bool {
        !self.rows.is_empty()
            && (self.concluded || (self.layouts > 0 && self.footers >= self.layouts))
    }
    fn started(&self) -> bool {
        self.headers > 0 || !self.jobs.is_empty() || self.layout.is_some() || !self.rows.is_empty()
    }
    fn in_table(&self) -> bool {
        self.layout.is_some() && self.footers < self.layouts
    }
}

/// Everything file-level the text gives.
struct State {
    blocks: Vec<Block>,
    cur: Block,
    header: Assumptions,
    launcher_coll: Option<Collective>,
    /// The options after the binary on the launcher command line (`-R 1`).
    launcher_args: Vec<String>,
    /// (function, bytes) -> what NCCL chose, from `Bytes -> Algo` lines.
    chosen: ChosenMap,
    dtypes: Vec<Arc<str>>,
    first_error: Option<(u32, String)>,
    zero_rows: usize,
    rows: usize,
    in_ranks: bool,
}

/// Reads one nccl-tests text log.
pub(crate) fn read<R: BufRead>(ctx: &mut FileCtx, mut rd: R) -> anyhow::Result<FileOutput> {
    // `--assume` is checked before any line is read.
    Assumptions::from_pairs(&ctx.opts.assume).map_err(|e| anyhow::anyhow!(e))?;
    let mut st = State {
        blocks: Vec::new(),
        cur: Block::new(),
        header: Assumptions {
            knobs: KnobSource::named("# dyncc"),
            ..Default::default()
        },
        launcher_coll: None,
        launcher_args: Vec::new(),
        chosen: HashMap::new(),
        dtypes: Vec::new(),
        first_error: None,
        zero_rows: 0,
        rows: 0,
        in_ranks: false,
    };
    let mut out = FileOutput::empty(Format::NcclTestsText);
    let mut buf = Vec::with_capacity(256);
    let mut lineno = 0u32;
    loop {
        buf.clear();
        // At most MAX_LINE + 1 bytes per line: a file whose newlines are
        // gone (or a binary dump) must not be read whole into memory.
        let n = (&mut rd)
            .take(MAX_LINE as u64 + 1)
            .read_until(b'\n', &mut buf)?;
        if n == 0 {
            break;
        }
        out.bytes += n as u64;
        lineno += 1;
        if buf.len() > MAX_LINE {
            ctx.bad(
                lineno,
                format!(
                    "line longer than {} KiB; expected nccl-tests text output (a binary or \
                     corrupted file?); the rest of the file is not read",
                    MAX_LINE >> 10
                ),
            )?;
            break;
        }
        if let Some(i) = memchr::memchr(0, &buf) {
            ctx.bad(
                lineno,
                format!(
                    "binary data (a NUL byte at column {}); expected nccl-tests text output; \
                     the rest of the file is not read",
                    i + 1
                ),
            )?;
            break;
        }
        line(ctx, &mut st, lineno, &buf)?;
    }
    let cur = std::mem::take(&mut st.cur);
    if cur.started() {
        st.blocks.push(cur);
    }
    finish(ctx, st, out)
}

/// Strips launcher prefixes and surrounding whitespace.
fn strip_prefixes(mut l: &[u8]) -> &[u8] {
    // OpenMPI --tag-output `[1,0]<stdout>:` and --timestamp-output
    // `Thu Jul 18 15:41:05 2024<stdout>:`.
    let win = &l[..l.len().min(80)];
    // memchr first: almost no line has a `<`, and it is much cheaper.
    if let Some(p) =
        memchr::memchr(b'<', win).and_then(|i| memmem::find(&win[i..], b"<std").map(|p| p + i))
    {
        let rest = &l[p..];
        if rest.starts_with(b"<stdout>:") || rest.starts_with(b"<stderr>:") {
            l = &rest[9..];
        }
    }
    // srun -l: `0: `, ` 12: `.
    let mut i = 0;
    while i < l.len() && l[i] == b' ' {
        i += 1;
    }
    let d0 = i;
    while i < l.len() && l[i].is_ascii_digit() {
        i += 1;
    }
    if i > d0 && i < l.len() && l[i] == b':' && (i + 1 == l.len() || l[i + 1].is_ascii_whitespace())
    {
        l = &l[i + 1..];
    }
    l.trim_ascii()
}

/// Splits on whitespace into `toks`; `[N]` launcher tags fused into tokens
/// (`-1[0]`) are dropped. Returns the number of tokens (capped).
fn tokenize<'a>(l: &'a [u8], toks: &mut [&'a [u8]; 40]) -> usize {
    let mut n = 0;
    let mut i = 0;
    let len = l.len();
    while i < len {
        while i < len && l[i].is_ascii_whitespace() {
            i += 1;
        }
        if i >= len {
            break;
        }
        let s = i;
        while i < len && !l[i].is_ascii_whitespace() && l[i] != b'[' {
            i += 1;
        }
        if i > s {
            if n < toks.len() {
                toks[n] = &l[s..i];
            }
            n += 1;
        }
        if i < len && l[i] == b'[' {
            // Skip a `[digits]` tag; anything else in brackets is a token.
            let t = i + 1;
            let mut j = t;
            while j < len && l[j].is_ascii_digit() {
                j += 1;
            }
            if j > t && j < len && l[j] == b']' {
                i = j + 1;
            } else {
                let s = i;
                while i < len && !l[i].is_ascii_whitespace() {
                    i += 1;
                }
                if n < toks.len() {
                    toks[n] = &l[s..i];
                }
                n += 1;
            }
        }
    }
    n
}

fn parse_u64(t: &[u8]) -> Option<u64> {
    if t.is_empty() || t.len() > 19 {
        return None;
    }
    let mut v = 0u64;
    for &b in t {
        if !b.is_ascii_digit() {
            return None;
        }
        v = v * 10 + (b - b'0') as u64;
    }
    Some(v)
}

fn parse_f64(t: &[u8]) -> Option<f64> {
    std::str::from_utf8(t).ok()?.parse::<f64>().ok()
}

fn is_int(t: &[u8]) -> bool {
    let t = t.strip_prefix(b"-").unwrap_or(t);
    !t.is_empty() && t.iter().all(u8::is_ascii_digit)
}

fn line(ctx: &mut FileCtx, st: &mut State, no: u32, raw: &[u8]) -> anyhow::Result<()> {
    let l = strip_prefixes(raw);
    if l.is_empty() {
        return Ok(());
    }
    if l[0] == b'#' {
        return meta(ctx, st, no, l);
    }
    if l[0].is_ascii_digit() && try_row(ctx, st, no, l)? {
        return Ok(());
    }
    if let Some(p) = memmem::find(l, b"NCCL INFO ") {
        info(st, no, &l[p + 10..]);
        return Ok(());
    }
    if memmem::find(l, b"NCCL WARN").is_some() {
        if st.first_error.is_none() {
            st.first_error = Some((no, String::from_utf8_lossy(l).into_owned()));
        }
        return Ok(());
    }
    if st.in_ranks && (l == b"..." || l == b"\xe2\x80\xa6") {
        st.cur.elided = true;
        return Ok(());
    }
    // Launcher command lines name the binary: `srun ... all_reduce_perf -b 8`.
    if let Some(p) = memmem::find(l, b"_perf") {
        let end = p + 5;
        let boundary =
            end == l.len() || !l[end].is_ascii_alphanumeric() || l[end..].starts_with(b"_mpi");
        if boundary {
            let start = l[..p]
                .iter()
                .rposition(|b| b.is_ascii_whitespace() || *b == b'/' || *b == b'\'' || *b == b'"')
                .map(|i| i + 1)
                .unwrap_or(0);
            if let Ok(s) = std::str::from_utf8(&l[start..end]) {
                if let Some(c) = Collective::parse(s) {
                    st.launcher_coll = Some(c);
                    st.launcher_args = String::from_utf8_lossy(&l[end..])
                        .split_whitespace()
                        .map(str::to_string)
                        .collect();
                }
            }
        }
    }
    if st.first_error.is_none() {
        let low = String::from_utf8_lossy(l).to_ascii_lowercase();
        if low.contains("fail") || low.contains("error") || low.contains("abort") {
            st.first_error = Some((no, String::from_utf8_lossy(l).into_owned()));
        }
    }
    Ok(())
}

/// Starts a new block if the current one already holds a finished or
/// started table.
fn new_block_if_used(st: &mut State, no: u32) {
    if !st.cur.rows.is_empty() || st.cur.concluded {
        let b = std::mem::replace(&mut st.cur, Block::new());
        st.blocks.push(b);
    }
    if !st.cur.started() {
        st.cur.line = no;
    }
}

fn meta(ctx: &mut FileCtx, st: &mut State, no: u32, l: &[u8]) -> anyhow::Result<()> {
    let body = l[1..].trim_ascii();
    let mut toks: [&[u8]; 40] = [&[]; 40];
    if body.starts_with(b"Rank ") {
        let n = tokenize(body, &mut toks).min(40);
        rank_line(st, &toks[..n]);
        return Ok(());
    }
    if body.starts_with(b"...") && st.in_ranks {
        st.cur.elided = true;
        return Ok(());
    }
    st.in_ranks = false;
    if body.starts_with(b"size ") {
        let n = tokenize(body, &mut toks).min(40);
        if let Some(lay) = Layout::from_header(&toks[..n]) {
            if !st.cur.rows.is_empty() && st.cur.footers >= st.cur.layouts {
                // A table header after a finished table without new header
                // lines: a new section of the same job setup.
                new_block_if_used(st, no);
            }
            if let Some(old) = st.cur.layout {
                if old != lay {
                    ctx.bad(
                        no,
                        "a second table header with different columns in one section",
                    )?;
                }
            }
            st.cur.layout = Some(lay);
            st.cur.layouts += 1;
            st.cur.timing.cputime = lay.cputime;
        }
        return Ok(());
    }
    if body.starts_with(b"nThread") {
        new_block_if_used(st, no);
        st.cur.headers += 1;
        st.cur.new_run = true;
        st.cur.timing.graph = super::timing::Timing::graph_field(&String::from_utf8_lossy(body));
        return Ok(());
    }
    if body.starts_with(b"Blocking Enabled") {
        if let Some(z) = super::timing::Timing::blocking_line(&String::from_utf8_lossy(body)) {
            st.cur.timing.blocking = z;
        }
        return Ok(());
    }
    if body.starts_with(b"Using devices") {
        st.in_ranks = true;
        return Ok(());
    }
    if let Some(rest) = body.strip_prefix(b"nccl-tests version") {
        new_block_if_used(st, no);
        st.cur.new_run = true;
        if let Some(p) = memmem::find(rest, b"nccl-library=") {
            let v = &rest[p + 13..];
            let end = v
                .iter()
                .position(|b| !b.is_ascii_digit())
                .unwrap_or(v.len());
            if let Some(code) = parse_u64(&v[..end]) {
                st.cur.nccl_version = Some(code as u32);
            }
        }
        return Ok(());
    }
    if let Some(rest) = body.strip_prefix(b"Collective test starting:") {
        new_block_if_used(st, no);
        st.cur.new_run = true;
        let name = String::from_utf8_lossy(rest.trim_ascii()).into_owned();
        st.cur.coll = Collective::parse(knobs::strip_binary_suffix(&name));
        return Ok(());
    }
    if body.starts_with(b"Collective test concluded") {
        st.cur.concluded = true;
        return Ok(());
    }
    if body.starts_with(b"Avg bus bandwidth") {
        st.cur.footers += 1;
        return Ok(());
    }
    if let Some(rest) = body.strip_prefix(b"dyncc:") {
        let s = String::from_utf8_lossy(rest).into_owned();
        if let Err(e) = st.header.parse_header_line(&s) {
            ctx.bad(no, format!("`# dyncc:` line: {e}"))?;
        }
        return Ok(());
    }
    if let Some(rest) = body.strip_prefix(b"error:") {
        if st.first_error.is_none() {
            st.first_error = Some((no, format!("# error:{}", String::from_utf8_lossy(rest))));
        }
    }
    Ok(())
}

/// `Rank  0 Group  0 Pid 4242 on host device  0 [0000:07:00] NVIDIA H100`
/// (old logs have no `Group`).
fn rank_line(st: &mut State, toks: &[&[u8]]) {
    st.in_ranks = true;
    let Some(rank) = toks.get(1).and_then(|t| parse_u64(t)) else {
        return;
    };
    let rank = rank as u32;
    let host = toks
        .iter()
        .position(|t| *t == b"on")
        .and_then(|i| toks.get(i + 1));
    // GPU name: everything after the bracketed PCI id.
    let gpu = toks
        .iter()
        .position(|t| t.starts_with(b"[") && t.ends_with(b"]"))
        .map(|i| {
            toks[i + 1..]
                .iter()
                .map(|t| String::from_utf8_lossy(t))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .filter(|s| !s.is_empty());
    let new_job = match st.cur.jobs.last() {
        None => true,
        Some(j) => j.last_rank.is_some_and(|lr| rank <= lr),
    };
    if new_job {
        st.cur.jobs.push(Job {
            elided: rank != 0,
            ..Default::default()
        });
    }
    let job = st.cur.jobs.last_mut().expect("pushed above");
    if let Some(lr) = job.last_rank {
        if rank != lr + 1 {
            job.elided = true;
        }
    }
    job.last_rank = Some(rank);
    job.ranks += 1;
    let group = toks
        .iter()
        .position(|t| *t == b"Group")
        .and_then(|i| toks.get(i + 1))
        .and_then(|t| parse_u64(t))
        .unwrap_or(0);
    job.groups.add(group as u32, 1, host.map(|h| &h[..]));
    if let Some(h) = host {
        if !job.hosts.contains(*h) {
            job.hosts.insert((*h).into());
        }
    }
    if job.gpu.is_none() {
        job.gpu = gpu.map(|g| Arc::from(g.as_str()));
    }
}

/// `comm 0x55d0c6a0 rank 0 nRanks 8 nNodes 1 localRanks 8 ...`: the
/// communicator's ranks and nodes.
fn comm_shape(rest: &[u8]) -> Option<(u32, u32)> {
    let mut toks: [&[u8]; 40] = [&[]; 40];
    let n = tokenize(rest, &mut toks).min(40);
    let toks = &toks[..n];
    let after = |key: &[u8]| {
        toks.iter()
            .position(|t| *t == key)
            .and_then(|i| toks.get(i + 1))
            .and_then(|t| parse_u64(t))
            .and_then(|v| u32::try_from(v).ok())
            .filter(|&v| v > 0)
    };
    Some((after(b"nRanks")?, after(b"nNodes")?))
}

/// An NCCL INFO line (text after `NCCL INFO `).
fn info(st: &mut State, no: u32, rest: &[u8]) {
    if rest.starts_with(b"comm 0x") {
        if let Some(shape) = comm_shape(rest) {
            st.cur.comms.insert(shape);
        }
        return;
    }
    let banner = rest.strip_prefix(b"NCCL version ");
    let env = memmem::find(rest, b" set by environment to ");
    if (banner.is_some() || env.is_some()) && st.cur.finished() {
        // A new run's NCCL output after a finished table.
        new_block_if_used(st, no);
        st.cur.new_run = true;
    }
    if let Some(v) = banner {
        st.cur.own_info = true;
        let end = v
            .iter()
            .position(|b| b.is_ascii_whitespace())
            .unwrap_or(v.len());
        if st.cur.nccl_version.is_none() {
            st.cur.nccl_version = std::str::from_utf8(&v[..end])
                .ok()
                .and_then(knobs::parse_nccl_version);
        }
        return;
    }
    if let Some(p) = env {
        // NCCL printed its environment in this run: a knob it does not
        // list was not set.
        st.cur.own_info = true;
        st.cur.info.complete = true;
        let var = String::from_utf8_lossy(rest[..p].trim_ascii());
        let var = var.rsplit(' ').next().unwrap_or("");
        let val = &rest[p + 23..];
        let end = val
            .iter()
            .position(|b| b.is_ascii_whitespace())
            .unwrap_or(val.len());
        let val = String::from_utf8_lossy(&val[..end]);
        let val = val.trim_end_matches(['.', ',']);
        if !st.cur.info.set_at(var, val, no) && is_setup_var(var) && !is_dyncc_tuner(var, val) {
            st.cur.env.insert(var.to_string(), val.to_string());
        }
        return;
    }
    if let Some(v) = rest.strip_prefix(SWEEP_CHUNK_LINE.as_bytes()) {
        // The dyncc plugin's init line in a sweep run (`DYNCC_SWEEP_CHUNK`):
        // the chunk its getChunkSize answered, one line per rank.
        let end = v
            .iter()
            .position(|b| !b.is_ascii_digit())
            .unwrap_or(v.len());
        let val = String::from_utf8_lossy(&v[..end]).into_owned();
        let info = &mut st.cur.info;
        let val = match info.chunk.take() {
            // Ranks that answered different chunks: kept, to be an error.
            Some(old) if old.split('|').all(|o| o != val) => format!("{old}|{val}"),
            _ => val,
        };
        info.set_at("chunk", &val, no);
        return;
    }
    if let Some(p) = memmem::find(rest, b" Bytes -> Algo ") {
        let mut toks: [&[u8]; 40] = [&[]; 40];
        let before = &rest[..p];
        let nb = tokenize(before, &mut toks).min(40);
        let Some(bytes) = nb.checked_sub(1).and_then(|i| parse_u64(toks[i])) else {
            return;
        };
        let func = if nb >= 2 {
            let f = toks[nb - 2];
            let f = f.strip_suffix(b":").unwrap_or(f);
            std::str::from_utf8(f).ok().and_then(Collective::parse)
        } else {
            None
        };
        let after = &rest[p + 15..];
        let na = tokenize(after, &mut toks).min(40);
        let a = toks[..na].first().copied().unwrap_or(b"");
        let algo = parse_u64(a)
            .and_then(|i| Algo::from_u8(i as u8))
            .or_else(|| std::str::from_utf8(a).ok().and_then(Algo::parse));
        let proto = toks[..na]
            .iter()
            .position(|t| *t == b"proto")
            .and_then(|i| toks[..na].get(i + 1))
            .and_then(|t| {
                parse_u64(t)
                    .and_then(|i| Proto::from_u8(i as u8))
                    .or_else(|| std::str::from_utf8(t).ok().and_then(Proto::parse))
            });
        st.chosen.insert((func, bytes), (algo, proto));
    }
}

/// How the dyncc plugin's init line starts when `DYNCC_SWEEP_CHUNK` set
/// the chunk (`runtime/src/plugin.rs`, `describe_sweep_chunk`), after
/// `NCCL INFO `; the byte count follows.
pub const SWEEP_CHUNK_LINE: &str = "dyncc: sweep chunk=";

/// `NCCL_TUNER_PLUGIN` naming dyncc's plugin: a sweep's chunk runs load it
/// with no table, where it changes nothing but the chunk, which is a knob
/// of its own (read from its init line), so those runs share the plain
/// runs' setup and compete with them.
pub fn is_dyncc_tuner(var: &str, val: &str) -> bool {
    var == "NCCL_TUNER_PLUGIN" && (val == "dyncc" || val.ends_with("libnccl-tuner-dyncc.so"))
}

/// Whether an `NCCL_*` variable (not a knob) makes runs a different setup:
/// anything but where NCCL writes its debug output.
pub fn is_setup_var(var: &str) -> bool {
    var.starts_with("NCCL_") && !var.starts_with("NCCL_DEBUG")
}

/// Tries `l` as a data row. Ok(false): not a row (noise).
fn try_row(ctx: &mut FileCtx, st: &mut State, no: u32, l: &[u8]) -> anyhow::Result<bool> {
    let mut toks: [&[u8]; 40] = [&[]; 40];
    let n = tokenize(l, &mut toks);
    if n < 2 || parse_u64(toks[0]).is_none() || parse_u64(toks[1]).is_none() {
        return Ok(false);
    }
    let in_table = st.cur.in_table();
    let layout = match st.cur.layout {
        Some(lay) => lay,
        None if n == 13 && is_int(toks[4]) => Layout::NEW,
        None if n == 12 => Layout::OLD,
        None => return Ok(false),
    };
    // A -S timestamp (date and time tokens) the header did not announce.
    let stamped = n > layout.ntok
        && n <= layout.ntok + 2
        && toks[layout.ntok..n.min(40)]
            .iter()
            .all(|t| t.iter().any(u8::is_ascii_digit) && t.iter().any(|&b| b == b'-' || b == b':'));
    if n != layout.ntok && !stamped {
        if in_table {
            ctx.bad(
                no,
                format!(
                    "a data row with {n} fields; expected {} ({})",
                    layout.ntok,
                    layout.describe()
                ),
            )?;
            return Ok(true);
        }
        return Ok(false);
    }
    // Rows outside a table are accepted only when they parse fully.
    let size = parse_u64(toks[0]).unwrap_or(0);
    let mut time = [None, None];
    let mut wrong = [false, false];
    for h in 0..2 {
        let t = toks[layout.time[h]];
        let half = if h == 0 { "out-of-place" } else { "in-place" };
        match parse_f64(t) {
            // A size-0 row is counted, never used: any time will do.
            Some(v) if size == 0 && v.is_finite() && v >= 0.0 => time[h] = Some(v),
            Some(v) if v.is_finite() && v > 0.0 => match super::check_time(v) {
                Ok(v) => time[h] = Some(v),
                Err(e) => {
                    if !in_table {
                        return Ok(false);
                    }
                    ctx.bad(no, format!("{half} time {e}"))?;
                    return Ok(true);
                }
            },
            _ => {
                if !in_table {
                    return Ok(false);
                }
                ctx.bad(
                    no,
                    format!(
                        "{half} time {:?}: expected a positive number of microseconds",
                        quote(&String::from_utf8_lossy(t))
                    ),
                )?;
                return Ok(true);
            }
        }
        let w = toks[layout.wrong[h]];
        wrong[h] = if w == b"0" || w == b"N/A" {
            false
        } else {
            match parse_f64(w) {
                // Old logs print the max error as a float (2e-07 is normal).
                Some(v) if layout.float_error => v.is_nan() || v > 1e-2,
                Some(v) => v != 0.0,
                None => {
                    if !in_table {
                        return Ok(false);
                    }
                    ctx.bad(
                        no,
                        format!(
                            "#wrong {:?}: expected a count or N/A",
                            quote(&String::from_utf8_lossy(w))
                        ),
                    )?;
                    return Ok(true);
                }
            }
        };
    }
    st.rows += 1;
    if size == 0 {
        st.zero_rows += 1;
        return Ok(true);
    }
    let ty = toks[layout.type_i];
    let dtype = match st.dtypes.iter().find(|d| d.as_bytes() == ty) {
        Some(d) => d.clone(),
        None => {
            let d: Arc<str> = String::from_utf8_lossy(ty).as_ref().into();
            st.dtypes.push(d.clone());
            d
        }
    };
    if st.cur.layout.is_none() && !st.cur.started() {
        st.cur.line = no;
    }
    st.cur.digest.update(l);
    st.cur.digest.update(b"\n");
    st.cur.rows.push(RawRow {
        line: no,
        size,
        dtype,
        time,
        wrong,
    });
    Ok(true)
}

fn finish(ctx: &mut FileCtx, st: State, mut out: FileOutput) -> anyhow::Result<FileOutput> {
    out.report.rows = st.rows;
    out.report.zero_size_rows = st.zero_rows;
    let mut knob_desc = Vec::new();
    let mut resolved_all = true;
    if st.rows == 0 {
        let why = match &st.first_error {
            Some((l, e)) => format!("no data rows (failed run?): line {l}: {}", e.trim()),
            None => "no data rows".to_string(),
        };
        ctx.skip(0, why);
        out.report.knobs = "n/a".into();
        return Ok(out);
    }
    let labeller = Labeller::new(ctx, Some(&st.header))?;
    let mut ignored = 0usize;
    let mut blocks = st.blocks;
    // A section that is not a new process continues the previous one.
    for i in 1..blocks.len() {
        let (done, rest) = blocks.split_at_mut(i);
        let (prev, b) = (&done[i - 1], &mut rest[0]);
        if !b.new_run && !b.own_info {
            b.info = prev.info.clone();
            b.env = prev.env.clone();
            b.nccl_version = b.nccl_version.or(prev.nccl_version);
        }
        if !b.new_run {
            // The header lines come once per process.
            b.timing.blocking = b.timing.blocking.max(prev.timing.blocking);
            b.timing.graph |= prev.timing.graph;
        }
    }
    let several = blocks.iter().filter(|b| !b.rows.is_empty()).count() > 1;
    for b in blocks {
        if b.rows.is_empty() {
            continue;
        }
        let shown = shown(ctx, &b, st.launcher_coll, &st.launcher_args);
        let labelled = labeller.label(ctx, b.line, shown)?;
        if let Some(how) = labelled.how {
            knob_desc.push(if several {
                format!("line {}: {how}", b.line)
            } else {
                how
            });
        }
        if let Some(msg) = labelled.problem {
            resolved_all = false;
            if !knob_desc.contains(&msg) {
                knob_desc.push(msg);
            }
        }
        note_if_cut(ctx, &b);
        if let Some(note) = super::check::datatypes_pooled(b.rows.iter().map(|r| &*r.dtype)) {
            ctx.anomaly(b.line, "datatypes-pooled", note);
        }
        let Some(run) = labelled.run else { continue };
        let forced = run.config.algo.is_some() || run.config.proto.is_some();
        for r in &b.rows {
            let mut f = labelled.flags;
            if forced && !st.chosen.is_empty() {
                if let Some((ca, cp)) = chosen_for(&st.chosen, run.collective, r.size, run.nranks) {
                    let (algo, proto) = (run.config.algo, run.config.proto);
                    if (algo.is_some() && ca.is_some() && ca != algo)
                        || (proto.is_some() && cp.is_some() && cp != proto)
                    {
                        f |= flags::KNOB_IGNORED;
                        ignored += 1;
                    }
                }
            }
            for h in 0..2 {
                let Some(t) = r.time[h] else { continue };
                let mut ff = f;
                if r.wrong[h] {
                    ff |= flags::WRONG_DATA;
                    ctx.anomaly(
                        r.line,
                        "wrong-data",
                        format!(
                            "{} B {}: nccl-tests reported wrong elements; kept out of fitting",
                            r.size,
                            if h == 0 { "out-of-place" } else { "in-place" }
                        ),
                    );
                }
                out.records.push(
                    &run,
                    Measurement {
                        nbytes: r.size,
                        time_us: t,
                        in_place: h == 1,
                        dtype: Some(r.dtype.clone()),
                        source: ctx.source(r.line),
                        flags: ff,
                    },
                );
            }
        }
        out.end_section(b.line, b.digest.finalize().into());
    }
    if ignored > 0 {
        ctx.anomaly(
            0,
            "knob-ignored",
            format!(
                "{ignored} rows: the log's own `Bytes -> Algo` lines show NCCL ran a different \
                 algorithm/protocol than the forced knob; flagged and kept out of fitting"
            ),
        );
    }
    out.report.resolved = resolved_all;
    out.report.knobs = knob_desc.join(" | ");
    Ok(out)
}

/// Notes a table that has rows but no `# Avg bus bandwidth` footer (and no
/// `Collective test concluded` marker): nccl-tests prints the footer after
/// the last size, so the run was killed or the file cut at a row boundary.
/// The rows are kept; the note says sizes after the last one may be missing.
/// A section without a table header (bare rows) says nothing either way.
fn note_if_cut(ctx: &mut FileCtx, b: &Block) {
    let Some(last) = b.rows.last() else { return };
    if b.layout.is_none() || b.concluded || b.footers >= b.layouts {
        return;
    }
    ctx.anomaly(
        last.line,
        "truncated",
        format!(
            "the table ends without nccl-tests' `# Avg bus bandwidth` footer: the log looks cut \
             off (run killed or file incomplete); its {} row{} kept, but sizes after {} B \
             (line {}) may be missing",
            b.rows.len(),
            if b.rows.len() == 1 { " is" } else { "s are" },
            last.size,
            last.line
        ),
    );
}

/// What one section of the log shows about its run: the collective, the
/// shape and GPU from its rank lines, the NCCL version, knobs and
/// environment from its NCCL INFO lines; and what the launcher command
/// line (the binary and its options) implies.
fn shown(
    ctx: &mut FileCtx,
    b: &Block,
    launcher: Option<Collective>,
    launcher_args: &[String],
) -> Shown {
    let mut s = Shown::new(ShownKnobs::Log(b.info.clone()));
    s.collective = b.coll;
    s.launcher_collective = launcher;
    if launcher.is_some() {
        let args: Vec<&str> = launcher_args.iter().map(String::as_str).collect();
        s.state_hint.reg_buff = Some(knobs::nccl_tests_registers(&args, b.nccl_version));
    }
    s.collective_unknown = "collective unknown: no `Collective test starting` line, launcher \
                            command or collective in the file name; pass --assume \
                            coll=allreduce (or the right one)";
    let jobs: Vec<&Job> = b.jobs.iter().filter(|j| j.ranks > 0).collect();
    let elided = b.elided || jobs.iter().any(|j| j.elided);
    if !jobs.is_empty() && !elided {
        let shape = |j: &Job| (j.ranks, j.hosts.len() as u32, j.gpu.clone());
        let first = shape(jobs[0]);
        if jobs.len() > 1 || b.headers > 1 {
            if jobs.iter().all(|j| shape(j) == first) {
                ctx.anomaly(
                    b.line,
                    "interleaved-jobs",
                    format!(
                        "{} independent {}-rank jobs are interleaved in this section (rank ids \
                         restart at 0{}); rows read as repeats of one {}-rank, {}-node job, \
                         not one {}-rank job",
                        jobs.len().max(b.headers as usize),
                        first.0,
                        if b.headers > 1 {
                            ", header blocks repeat"
                        } else {
                            ""
                        },
                        first.0,
                        first.1,
                        first.0 as usize * jobs.len()
                    ),
                );
            } else {
                s.problems.push(format!(
                    "{} interleaved jobs of different shapes ({}): rows cannot be \
                     attributed to one of them; split the file per job",
                    jobs.len(),
                    jobs.iter()
                        .map(|j| format!("{} ranks on {} nodes", j.ranks, j.hosts.len()))
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
        }
        s.nranks = Some(first.0);
        s.nnodes = Some(first.1.max(1));
        s.gpu = first.2;
        // NCCL_TESTS_SPLIT: a row measures one communicator's shape.
        let split = jobs[0].groups.split();
        if let Some(note) = split.note() {
            ctx.anomaly(b.line, "split-communicators", note);
        }
        match split {
            super::groups::Split::Same { ranks, nodes, .. } => {
                s.nranks = Some(ranks);
                s.nnodes = Some(nodes);
            }
            super::groups::Split::Mixed(why) => s.problems.push(why),
            super::groups::Split::One => {}
        }
        // NCCL's own INFO lines say each communicator's shape: the rank
        // lines of a split run without a `Group` column list the whole run.
        if let (Some(ranks), Some(nodes)) = (s.nranks, s.nnodes) {
            let fewer: Vec<(u32, u32)> = b
                .comms
                .iter()
                .copied()
                .filter(|&(r, _)| r < ranks)
                .collect();
            match fewer[..] {
                [] => {}
                [(r, n)] => {
                    ctx.anomaly(
                        b.line,
                        "split-communicators",
                        format!(
                            "NCCL's INFO lines show communicators of {r} ranks on {n} nodes, \
                             where the rank lines list {ranks} ranks on {nodes} nodes \
                             (NCCL_TESTS_SPLIT): rows read as {r}-rank, {n}-node collectives"
                        ),
                    );
                    s.nranks = Some(r);
                    s.nnodes = Some(n);
                }
                _ => s.problems.push(format!(
                    "NCCL's INFO lines show communicators of different shapes ({}) in a run \
                     whose rank lines list {ranks} ranks on {nodes} nodes (NCCL_TESTS_SPLIT): \
                     nccl-tests reduces their times into one row, which no single shape \
                     measured; rerun with communicators of one shape",
                    fewer
                        .iter()
                        .map(|(r, n)| format!("{r} ranks on {n} nodes"))
                        .collect::<Vec<_>>()
                        .join(", ")
                )),
            }
        }
    }
    // An elided rank list still names the GPU.
    s.gpu = s.gpu.or_else(|| jobs.iter().find_map(|j| j.gpu.clone()));
    s.shape_unknown = format!(
        "ranks/nodes unknown: {}; pass --assume ranks=N nodes=M (or gpus_per_node=G)",
        if elided {
            "the rank list is elided"
        } else {
            "no `# Rank` lines"
        }
    );
    s.nccl_version = b.nccl_version;
    // The run's setup: its other NCCL_* variables, when it shows them.
    s.env = b.info.complete.then(|| {
        b.env
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" ")
            .into()
    });
    // A run timed otherwise is a setup of its own.
    s.env = super::timing::with_timing(s.env.take(), b.timing);
    s
}

/// What NCCL's INFO lines say it chose for (coll, nbytes). Since 2.24 the
/// bytes are per rank for AllGather/ReduceScatter.
fn chosen_for(
    chosen: &ChosenMap,
    coll: Collective,
    nbytes: u64,
    nranks: u32,
) -> Option<(Option<Algo>, Option<Proto>)> {
    let mut keys = vec![(Some(coll), nbytes), (None, nbytes)];
    if matches!(coll, Collective::AllGather | Collective::ReduceScatter) && nranks > 0 {
        keys.push((Some(coll), nbytes / nranks as u64));
    }
    keys.iter().find_map(|k| chosen.get(k).copied())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingest::run::collective_from_name;

    #[test]
    fn prefixes_are_stripped() {
        assert_eq!(strip_prefixes(b"0: # nThread 1"), b"# nThread 1");
        assert_eq!(strip_prefixes(b" 12:            8  2"), b"8  2");
        assert_eq!(strip_prefixes(b"[1,0]<stdout>:#  Rank  0"), b"#  Rank  0");
        assert_eq!(
            strip_prefixes(b"Thu Jul 18 15:41:05 2024<stdout>:  1024  256"),
            b"1024  256"
        );
        assert_eq!(
            strip_prefixes(b"           8             2     float"),
            b"8             2     float"
        );
        // A hostname with a colon is not a srun label.
        assert_eq!(
            strip_prefixes(b"2e3f:195:195 [0] NCCL INFO x"),
            b"2e3f:195:195 [0] NCCL INFO x"
        );
    }

    #[test]
    fn fused_rank_tags_are_split() {
        let mut t: [&[u8]; 40] = [&[]; 40];
        let n = tokenize(b"8  2  float  sum  -1[0]    1626.5", &mut t);
        assert_eq!(
            &t[..n],
            &[&b"8"[..], b"2", b"float", b"sum", b"-1", b"1626.5"]
        );
        let n = tokenize(b"dev  0 [0000:07:00] NVIDIA H100", &mut t);
        assert_eq!(n, 5);
        assert_eq!(t[2], b"[0000:07:00]");
    }

    #[test]
    fn collective_names() {
        assert_eq!(
            collective_from_name("all_reduce_output.dat.1"),
            Some(Collective::AllReduce)
        );
        assert_eq!(
            collective_from_name("nccl_sendrecv.out"),
            Some(Collective::SendRecv)
        );
        assert_eq!(
            collective_from_name("reduce_scatter.log"),
            Some(Collective::ReduceScatter)
        );
        assert_eq!(collective_from_name("job-n-00004.out"), None);
    }
}
