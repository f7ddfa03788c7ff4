//! NCCL's tuner-example CSV (`optimize_config.py`: `collective,size_bytes,
//! algorithm,protocol,channels,nodes,ranks,pipeOps,regBuff,cost_metric,
//! bandwidth_gbps,latency_us`, extra columns such as `platform` allowed),
//! read at the speed of the disk: a multi-gigabyte sweep is cut into chunks
//! of whole lines, the chunks' rows are parsed on every core
//! (`parse_chunk`), and the parsed rows are taken in file order by one
//! `Sink`, so what is read (cells, their order, the report, the first bad
//! line) does not depend on the number of threads.
//!
//! Rows are split at commas and trimmed, as the `csv` crate does; a file
//! with quotes or lone carriage returns (which only a real CSV parser reads
//! right) is read by the `csv` crate from the first chunk that has one on.
//! Every row carries its own knobs and shape; labelling a row (see
//! `super::run`) is done once per distinct set of columns and reused.

use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::io::{BufRead, Read};
use std::rc::Rc;
use std::sync::{mpsc, Arc, Mutex};

use sha2::{Digest as _, Sha256};

use super::fold::{MixHasher, Time};
use super::knobs;
use super::repeats::SeenRows;
use super::run::{Labeller, Shown, ShownKnobs};
use super::{quote, FileCtx, FileOutput, Format};
use crate::record::{Algo, Collective, Config, PartialState, Proto, Run};

/// Columns a tuner CSV must have (besides a time: `latency_us` or `cost_metric`).
const TUNER_REQUIRED: [&str; 7] = [
    "collective",
    "size_bytes",
    "algorithm",
    "protocol",
    "channels",
    "nodes",
    "ranks",
];

/// Bytes per chunk handed to a parsing thread: large enough that handing
/// it over costs nothing next to parsing it, small enough that the chunks
/// in flight stay a few MB.
const CHUNK: usize = 1 << 20;

/// Reads a tuner-schema CSV, streaming (a few chunks in memory at a
/// time). A row with the wrong number of fields is an error naming its
/// line; a UTF-8 BOM is accepted; the header line seen again (two files
/// concatenated) starts a new section.
pub(crate) fn read_tuner<R: BufRead>(ctx: &mut FileCtx, rd: R) -> anyhow::Result<FileOutput> {
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(8);
    read_tuner_with(ctx, rd, threads, CHUNK)
}

/// [`read_tuner`] on `threads` threads, in chunks of about `chunk` bytes
/// (what it reads does not depend on either).
fn read_tuner_with<R: BufRead>(
    ctx: &mut FileCtx,
    mut rd: R,
    threads: usize,
    chunk: usize,
) -> anyhow::Result<FileOutput> {
    let mut sink = Sink::new(ctx)?;
    let mut chunks = Chunks {
        size: chunk.max(1),
        ..Default::default()
    };
    // The header (and blank lines before it) is read here, line by line.
    let mut line = 0u32;
    let (header, first) = loop {
        let Some(mut chunk) = chunks.next(&mut rd, Vec::new())? else {
            return sink.finish(ctx, chunks.bytes);
        };
        if needs_csv_parser(&chunk) {
            return read_rest_with_csv(ctx, sink, chunk, chunks, rd);
        }
        let mut at = 0usize;
        while sink.header.is_none() && at < chunk.len() {
            let end = memchr::memchr(b'\n', &chunk[at..]).map_or(chunk.len(), |i| at + i + 1);
            line += 1;
            let fields = split(&chunk[at..end]);
            at = end;
            if sink.header_record(ctx, line, &fields)? == Flow::Stop {
                let read = chunks.bytes - (chunk.len() - at + chunks.carry.len()) as u64;
                return sink.finish(ctx, read);
            }
        }
        if let Some(h) = sink.header.clone() {
            chunk.drain(..at);
            break (h, chunk);
        }
    };
    if chunks.eof || threads == 1 {
        // One chunk, or one core: no threads.
        let mut chunk = first;
        loop {
            line = sink.take(ctx, line, parse_chunk(&header, chunk))?.0;
            let Some(next) = chunks.next(&mut rd, Vec::new())? else {
                break;
            };
            if needs_csv_parser(&next) {
                return read_rest_with_csv(ctx, sink, next, chunks, rd);
            }
            chunk = next;
        }
        return sink.finish(ctx, chunks.bytes);
    }
    parallel(ctx, sink, &header, first, line, chunks, rd, threads)
}

/// Parses chunks on `threads` threads while this one reads the next and
/// takes the parsed ones in order.
#[allow(clippy::too_many_arguments)]
fn parallel<R: BufRead>(
    ctx: &mut FileCtx,
    mut sink: Sink,
    header: &Header,
    first: Vec<u8>,
    first_line: u32,
    mut chunks: Chunks,
    mut rd: R,
    threads: usize,
) -> anyhow::Result<FileOutput> {
    let in_flight_max = 2 * threads + 2;
    std::thread::scope(|s| -> anyhow::Result<FileOutput> {
        let (work_tx, work_rx) = mpsc::channel::<(usize, Vec<u8>)>();
        let work_rx = Arc::new(Mutex::new(work_rx));
        let (done_tx, done_rx) = mpsc::channel::<(usize, Parsed)>();
        for _ in 0..threads {
            let work_rx = work_rx.clone();
            let done_tx = done_tx.clone();
            s.spawn(move || loop {
                let job = work_rx.lock().map(|rx| rx.recv());
                let Ok(Ok((i, chunk))) = job else { return };
                if done_tx.send((i, parse_chunk(header, chunk))).is_err() {
                    return;
                }
            });
        }
        drop(done_tx);
        let mut sent = 0usize;
        let mut taken = 0usize;
        let mut line = first_line;
        let mut ready: HashMap<usize, Parsed> = HashMap::new();
        let mut free: Vec<Vec<u8>> = Vec::new();
        let mut next = Some(first);
        let mut fallback: Option<Vec<u8>> = None;
        // Takes the parsed chunks that are next in order.
        let take = |sink: &mut Sink,
                    ctx: &mut FileCtx,
                    ready: &mut HashMap<usize, Parsed>,
                    taken: &mut usize,
                    line: &mut u32,
                    free: &mut Vec<Vec<u8>>|
         -> anyhow::Result<()> {
            while let Some(p) = ready.remove(taken) {
                let (l, buf) = sink.take(ctx, *line, p)?;
                *line = l;
                free.push(buf);
                *taken += 1;
            }
            Ok(())
        };
        loop {
            // Keep the threads fed; take what is done.
            while sent - taken < in_flight_max {
                let Some(chunk) = next.take() else { break };
                if work_tx.send((sent, chunk)).is_err() {
                    anyhow::bail!("a parsing thread stopped");
                }
                sent += 1;
                match chunks.next(&mut rd, free.pop().unwrap_or_default())? {
                    Some(c) if needs_csv_parser(&c) => fallback = Some(c),
                    c => next = c,
                }
            }
            if taken == sent {
                break;
            }
            let Ok((i, p)) = done_rx.recv() else {
                anyhow::bail!("a parsing thread stopped");
            };
            ready.insert(i, p);
            take(&mut sink, ctx, &mut ready, &mut taken, &mut line, &mut free)?;
        }
        drop(work_tx);
        match fallback {
            Some(c) => read_rest_with_csv(ctx, sink, c, chunks, rd),
            None => sink.finish(ctx, chunks.bytes),
        }
    })
}

/// Cuts a reader into chunks of whole lines.
#[derive(Default)]
struct Chunks {
    /// Bytes per chunk (more when a line is longer).
    size: usize,
    /// The start of a line not yet whole.
    carry: Vec<u8>,
    eof: bool,
    /// Newlines in the chunks handed out so far.
    lines: u32,
    /// Bytes read so far.
    bytes: u64,
}

impl Chunks {
    /// The next chunk (in `buf`, reused), ending at a newline unless it is
    /// the file's end; `None` at the end.
    fn next<R: BufRead>(
        &mut self,
        rd: &mut R,
        mut buf: Vec<u8>,
    ) -> std::io::Result<Option<Vec<u8>>> {
        buf.clear();
        buf.append(&mut self.carry);
        let mut want = self.size;
        loop {
            while !self.eof && buf.len() < want {
                let avail = rd.fill_buf()?;
                if avail.is_empty() {
                    self.eof = true;
                    break;
                }
                let n = avail.len().min(want - buf.len());
                buf.extend_from_slice(&avail[..n]);
                rd.consume(n);
                self.bytes += n as u64;
            }
            if self.eof {
                break;
            }
            if let Some(i) = memchr::memrchr(b'\n', &buf) {
                self.carry.extend_from_slice(&buf[i + 1..]);
                buf.truncate(i + 1);
                break;
            }
            // One line longer than a chunk: read on to its end.
            want = buf.len() + self.size;
        }
        if buf.is_empty() {
            return Ok(None);
        }
        self.lines += count_newlines(&buf);
        Ok(Some(buf))
    }
}

fn count_newlines(b: &[u8]) -> u32 {
    memchr::memchr_iter(b'\n', b).count() as u32
}

/// Whether a chunk has what splitting at commas and newlines would read
/// wrong: quotes (a quoted field may hold commas and newlines) or a
/// carriage return that does not end a line (the `csv` crate ends a record
/// there).
fn needs_csv_parser(chunk: &[u8]) -> bool {
    memchr::memchr(b'"', chunk).is_some()
        || memchr::memchr_iter(b'\r', chunk).any(|i| chunk.get(i + 1) != Some(&b'\n'))
}

/// The fields of one line, trimmed of ASCII whitespace (as the `csv` crate
/// with `Trim::All`).
fn split(line: &[u8]) -> Vec<&[u8]> {
    let mut fields = Vec::new();
    split_into(line, &mut fields);
    fields
}

/// [`split`] into `fields` (cleared first), commas found by `memchr`.
fn split_into<'a>(line: &'a [u8], fields: &mut Vec<&'a [u8]>) {
    fields.clear();
    let mut start = 0;
    for comma in memchr::memchr_iter(b',', line) {
        fields.push(line[start..comma].trim_ascii());
        start = comma + 1;
    }
    fields.push(line[start..].trim_ascii());
}

/// The hash of a row's text (its trimmed fields): what the
/// rows-read-twice rule and the section digests compare. Not keyed (no
/// table an attacker could flood is built on it); 8 bytes at a time, as
/// the rows of a large sweep are hashed at the speed they are parsed.
fn row_hash<'a>(fields: impl Iterator<Item = &'a [u8]>) -> u64 {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    let step = |h: u64, w: u64| (h ^ w).wrapping_mul(K).rotate_left(27);
    // Two lanes (even and odd fields): half the chain of multiplications.
    let (mut even, mut odd) = (0x243f_6a88_85a3_08d3u64, 0x1319_8a2e_0370_7344u64);
    for (i, f) in fields.enumerate() {
        let mut h = if i & 1 == 0 { even } else { odd };
        let mut words = f.chunks_exact(8);
        for w in &mut words {
            h = step(h, u64::from_le_bytes(w.try_into().unwrap_or_default()));
        }
        // The last bytes in a register (a copy to the stack and a load of
        // all eight stalls).
        let mut last = 0u64;
        for (j, &b) in words.remainder().iter().enumerate() {
            last |= u64::from(b) << (8 * j);
        }
        // The field's length ends it ("ab","c" is not "a","bc"), in the
        // byte the remainder (7 bytes at most) leaves free.
        let len = f.len() as u64;
        h = step(h, last ^ len << 56 ^ (len >> 8));
        if i & 1 == 0 {
            even = h;
        } else {
            odd = h;
        }
    }
    let mut h = even ^ odd.rotate_left(32).wrapping_mul(K);
    // Mix the last words into every bit (murmur3's finaliser).
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ h >> 33
}

/// What continues after a header record.
#[derive(PartialEq, Eq)]
enum Flow {
    Go,
    Stop,
}

/// The header: where each column is.
#[derive(Clone)]
struct Header {
    /// The fields as read (trimmed), to find the header again.
    raw: Vec<Vec<u8>>,
    /// The names, a byte-order mark removed, joined for messages.
    joined: String,
    ncols: usize,
    coll: usize,
    size: usize,
    algo: usize,
    proto: usize,
    channels: usize,
    nodes: usize,
    ranks: usize,
    latency: Option<usize>,
    cost: Option<usize>,
    pipe_ops: Option<usize>,
    reg_buff: Option<usize>,
    platform: Option<usize>,
    gpu: Option<usize>,
    version: Option<usize>,
    in_place: Option<usize>,
}

impl Header {
    /// The columns that say what a row's run is.
    fn label_columns(&self) -> impl Iterator<Item = usize> + '_ {
        [
            self.coll,
            self.algo,
            self.proto,
            self.channels,
            self.nodes,
            self.ranks,
        ]
        .into_iter()
        .chain(
            [
                self.pipe_ops,
                self.reg_buff,
                self.platform,
                self.gpu,
                self.version,
            ]
            .into_iter()
            .flatten(),
        )
    }

    fn is_header(&self, fields: &[&[u8]]) -> bool {
        fields.len() == self.raw.len() && fields.iter().zip(&self.raw).all(|(a, b)| *a == &b[..])
    }
}

/// What a row's columns say about its run: the key its labelling is
/// reused under. Strings are ids into a table ([`Strings`]).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct LabelKey {
    collective: Collective,
    config: Config,
    nranks: u32,
    nnodes: u32,
    state: (Option<u32>, Option<bool>),
    platform: Option<u32>,
    gpu: Option<u32>,
    nccl_version: Option<u32>,
}

/// One data row, parsed.
struct RowData {
    key: LabelKey,
    nbytes: u64,
    time_us: f64,
    in_place: bool,
}

#[derive(Clone, Copy)]
enum RowKind {
    /// The header line again.
    Header,
    /// A data row: its label columns are `keys[key]`.
    Data { key: u32, in_place: bool },
    /// A malformed row: what is wrong with it is `bad[_]`.
    Bad(u32),
}

/// One non-blank line of a chunk, small (the thread that takes it is not
/// the one that wrote it: every byte crosses between cores).
struct Row {
    /// Lines before it in its chunk.
    line: u32,
    kind: RowKind,
    hash: u64,
    nbytes: u64,
    /// Read (its decimal found) on the parsing thread.
    time: Time,
}

/// What a chunk's rows refer to.
#[derive(Default)]
struct Refs {
    /// Label columns, parsed (ids name `strings`).
    keys: Vec<LabelKey>,
    /// Why malformed rows are.
    bad: Vec<String>,
    strings: Strings,
}

/// Strings (platform, GPU) by id.
#[derive(Default)]
struct Strings(Vec<Box<str>>);

impl Strings {
    fn id(&mut self, s: &str) -> u32 {
        if let Some(i) = self.0.iter().position(|x| &**x == s) {
            return i as u32;
        }
        self.0.push(s.into());
        (self.0.len() - 1) as u32
    }
}

/// A chunk's rows, parsed (on any thread).
struct Parsed {
    rows: Vec<Row>,
    refs: Refs,
    /// Newlines in the chunk.
    lines: u32,
    /// The chunk's buffer, to reuse.
    buf: Vec<u8>,
}

fn parse_chunk(header: &Header, buf: Vec<u8>) -> Parsed {
    let mut rows = Vec::with_capacity(buf.len() / 64);
    let mut refs = Refs::default();
    let mut cache = LabelCache::default();
    let mut line = 0u32;
    let mut fields: Vec<&[u8]> = Vec::with_capacity(header.ncols + 1);
    let mut at = 0usize;
    while at < buf.len() {
        let end = memchr::memchr(b'\n', &buf[at..]).map_or(buf.len(), |i| at + i + 1);
        let text = &buf[at..end];
        at = end;
        let this = line;
        line += 1;
        split_into(text, &mut fields);
        if let Some(mut row) = parse_record(header, &fields, &mut refs, &mut cache) {
            row.line = this;
            rows.push(row);
        }
    }
    let lines = count_newlines(&buf);
    Parsed {
        rows,
        refs,
        lines,
        buf,
    }
}

/// One record after the header: `None` when blank.
fn parse_record(
    header: &Header,
    fields: &[&[u8]],
    refs: &mut Refs,
    cache: &mut LabelCache,
) -> Option<Row> {
    if fields.iter().all(|f| f.is_empty()) {
        return None;
    }
    let mut row = Row {
        line: 0,
        kind: RowKind::Header,
        hash: 0,
        nbytes: 0,
        time: Time::read(0.0),
    };
    if header.is_header(fields) {
        return Some(row);
    }
    row.hash = row_hash(fields.iter().copied());
    match cache.parse(header, fields, refs) {
        Ok((key, d)) => {
            row.kind = RowKind::Data {
                key,
                in_place: d.in_place,
            };
            row.nbytes = d.nbytes;
            row.time = Time::read(d.time_us);
        }
        Err(msg) => {
            refs.bad.push(msg);
            row.kind = RowKind::Bad((refs.bad.len() - 1) as u32);
        }
    }
    Some(row)
}

fn text(b: &[u8]) -> Cow<'_, str> {
    String::from_utf8_lossy(b)
}

/// Parses a data row's values (the messages name the column, the value and
/// what was expected).
fn parse_row(h: &Header, fields: &[&[u8]], strings: &mut Strings) -> Result<RowData, String> {
    if fields.len() != h.ncols {
        return Err(format!(
            "{} fields; expected {}, one per header column ({})",
            fields.len(),
            h.ncols,
            quote(&h.joined)
        ));
    }
    let get = |i: usize| text(fields.get(i).copied().unwrap_or(b""));
    let coll = get(h.coll);
    let Some(collective) = Collective::parse(&coll) else {
        return Err(format!(
            "collective {:?}: expected allreduce, allgather, reducescatter, broadcast or reduce",
            quote(&coll)
        ));
    };
    let nbytes = parse_size(h, fields)?;
    let algo = match &*get(h.algo) {
        a if a.eq_ignore_ascii_case("default") || a == "-1" => None,
        a => match Algo::parse(a) {
            Some(x) => Some(x),
            None => return Err(format!("algorithm {:?}: expected tree, ring, collnet_direct, collnet_chain, nvls, nvls_tree, pat or default", quote(a))),
        },
    };
    let proto = match &*get(h.proto) {
        p if p.eq_ignore_ascii_case("default") || p == "-1" => None,
        p => match Proto::parse(p) {
            Some(x) => Some(x),
            None => {
                return Err(format!(
                    "protocol {:?}: expected ll, ll128, simple or default",
                    quote(p)
                ))
            }
        },
    };
    let channels = knobs::parse_channels(&get(h.channels))?;
    let nodes = get(h.nodes);
    let Some(nnodes) = nodes.parse::<u32>().ok().filter(|&n| n > 0) else {
        return Err(format!(
            "nodes {:?}: expected a positive whole number",
            quote(&nodes)
        ));
    };
    let ranks = get(h.ranks);
    let Some(nranks) = ranks.parse::<u32>().ok().filter(|&n| n > 0) else {
        return Err(format!(
            "ranks {:?}: expected a positive whole number",
            quote(&ranks)
        ));
    };
    let time_us = parse_time(h, fields)?;
    // An empty or absent state column leaves the state to the labels.
    let pipe_ops = match h.pipe_ops.map(get).filter(|s| !s.is_empty()) {
        None => None,
        Some(v) => match v.parse::<u32>() {
            Ok(p) if p > 0 => Some(p),
            _ => {
                return Err(format!(
                    "pipeOps {:?}: expected a positive whole number",
                    quote(&v)
                ))
            }
        },
    };
    let reg_buff = match h.reg_buff.map(get).filter(|s| !s.is_empty()).as_deref() {
        None => None,
        Some("0") => Some(false),
        Some("1") => Some(true),
        Some(v) => return Err(format!("regBuff {:?}: expected 0 or 1", quote(v))),
    };
    let in_place = parse_in_place(h, fields);
    let mut id = |c: Option<usize>| c.map(get).filter(|s| !s.is_empty()).map(|s| strings.id(&s));
    let platform = id(h.platform);
    let gpu = id(h.gpu);
    let nccl_version = h
        .version
        .map(get)
        .and_then(|v| knobs::parse_nccl_version(&v));
    Ok(RowData {
        key: LabelKey {
            collective,
            config: Config {
                algo,
                proto,
                channels,
                chunk: dyncc_tables::Chunk::NCCL,
            },
            nranks,
            nnodes,
            state: (pipe_ops, reg_buff),
            platform,
            gpu,
            nccl_version,
        },
        nbytes,
        time_us,
        in_place,
    })
}

/// The `size_bytes` column.
fn parse_size(h: &Header, fields: &[&[u8]]) -> Result<u64, String> {
    let size = text(fields.get(h.size).copied().unwrap_or(b""));
    size.parse::<u64>().map_err(|_| {
        format!(
            "size_bytes {:?}: expected a whole number of bytes",
            quote(&size)
        )
    })
}

/// The time: `latency_us`, or `cost_metric` where that is empty or absent.
fn parse_time(h: &Header, fields: &[&[u8]]) -> Result<f64, String> {
    let get = |i: usize| text(fields.get(i).copied().unwrap_or(b""));
    let lat = h.latency.map(get).filter(|s| !s.is_empty());
    let (tname, tval) = match lat {
        Some(v) => ("latency_us", v),
        None => ("cost_metric", h.cost.map(get).unwrap_or_default()),
    };
    match tval.parse::<f64>() {
        Ok(t) if t.is_finite() && t > 0.0 => {
            super::check_time(t).map_err(|e| format!("{tname} {e}"))
        }
        _ => Err(format!(
            "{tname} {:?}: expected a positive time in microseconds",
            quote(&tval)
        )),
    }
}

fn parse_in_place(h: &Header, fields: &[&[u8]]) -> bool {
    matches!(
        h.in_place.and_then(|i| fields.get(i)).copied(),
        Some(b"1" | b"true" | b"yes")
    )
}

/// What a chunk's rows' label columns parsed to, by their text: a sweep
/// repeats a few hundred of them.
#[derive(Default)]
struct LabelCache {
    /// Index in [`Refs::keys`].
    parsed: HashMap<Box<[u8]>, u32, std::hash::BuildHasherDefault<MixHasher>>,
    text: Vec<u8>,
}

impl LabelCache {
    /// Parses a row, its label columns from the cache when they were seen
    /// (the errors are the same, in the same order: a row whose label
    /// columns parsed can only be wrong in its size or time).
    fn parse(
        &mut self,
        h: &Header,
        fields: &[&[u8]],
        refs: &mut Refs,
    ) -> Result<(u32, RowData), String> {
        let add = |refs: &mut Refs, d: &RowData| {
            refs.keys.push(d.key);
            (refs.keys.len() - 1) as u32
        };
        if fields.len() != h.ncols {
            let d = parse_row(h, fields, &mut refs.strings)?;
            return Ok((add(refs, &d), d));
        }
        self.text.clear();
        for c in h.label_columns() {
            self.text.extend_from_slice(fields[c]);
            self.text.push(0x1f);
        }
        if let Some(&k) = self.parsed.get(&self.text[..]) {
            let d = RowData {
                key: refs.keys[k as usize],
                nbytes: parse_size(h, fields)?,
                time_us: parse_time(h, fields)?,
                in_place: parse_in_place(h, fields),
            };
            return Ok((k, d));
        }
        let d = parse_row(h, fields, &mut refs.strings)?;
        let k = add(refs, &d);
        self.parsed.insert(self.text[..].into(), k);
        Ok((k, d))
    }
}

/// How a [`Refs`]'s ids resolve in the [`Sink`]: filled as they are first
/// needed, in file order.
#[derive(Default)]
struct View {
    /// Global string ids, by the refs' ids.
    ids: Vec<u32>,
    /// Labels, by the refs' keys (`None`: not yet, or labelled anew at
    /// every row).
    labelled: Vec<Option<Labelled>>,
}

/// A run as labelled, reused for every row of the same columns.
#[derive(Clone, Copy)]
struct Labelled {
    /// Index in [`Sink::runs`].
    run: u32,
    flags: u8,
}

/// Takes the parsed rows in file order: sections, labels, records, the
/// rows-read-twice rule.
struct Sink {
    out: FileOutput,
    labeller: Labeller,
    header: Option<Header>,
    /// The header lacked columns (reported): nothing more is read.
    refused: bool,
    /// The current section's first line and the digest of its rows.
    section: (u32, Sha256),
    seen_rows: SeenRows,
    runs: Vec<Run>,
    labelled: HashMap<LabelKey, Labelled, std::hash::BuildHasherDefault<MixHasher>>,
    /// Strings by global id.
    strings: Vec<Arc<str>>,
}

impl Sink {
    fn new(ctx: &FileCtx) -> anyhow::Result<Sink> {
        let mut out = FileOutput::empty(Format::TunerCsv);
        out.report.knobs = "per row (algorithm, protocol, channels columns)".into();
        Ok(Sink {
            out,
            labeller: Labeller::new(ctx, None)?,
            header: None,
            refused: false,
            section: (0, Sha256::new()),
            seen_rows: SeenRows::default(),
            runs: Vec::new(),
            labelled: HashMap::default(),
            strings: Vec::new(),
        })
    }

    /// A record before the header is known: the first non-blank one is it.
    fn header_record(
        &mut self,
        ctx: &mut FileCtx,
        line: u32,
        fields: &[&[u8]],
    ) -> anyhow::Result<Flow> {
        if fields.iter().all(|f| f.is_empty()) {
            return Ok(Flow::Go);
        }
        let mut names: Vec<String> = fields.iter().map(|f| text(f).into_owned()).collect();
        if let Some(h) = names.first_mut() {
            // Spreadsheets write a UTF-8 byte-order mark.
            *h = h.trim_start_matches('\u{feff}').trim().to_string();
        }
        let col = |name: &str| names.iter().position(|h| h.eq_ignore_ascii_case(name));
        let missing: Vec<&str> = TUNER_REQUIRED
            .into_iter()
            .filter(|n| col(n).is_none())
            .collect();
        if !missing.is_empty() || (col("latency_us").is_none() && col("cost_metric").is_none()) {
            let mut what: Vec<String> = missing.iter().map(|m| format!("`{m}`")).collect();
            if col("latency_us").is_none() && col("cost_metric").is_none() {
                what.push("a time (`latency_us` or `cost_metric`)".into());
            }
            ctx.bad(
                line,
                format!(
                    "the tuner CSV header lacks {}; it has: {}; expected collective,size_bytes,\
                     algorithm,protocol,channels,nodes,ranks,pipeOps,regBuff,cost_metric,\
                     bandwidth_gbps,latency_us",
                    what.join(", "),
                    quote(&names.join(","))
                ),
            )?;
            self.refused = true;
            return Ok(Flow::Stop);
        }
        let need = |name: &str| col(name).unwrap_or(0);
        self.header = Some(Header {
            raw: fields.iter().map(|f| f.to_vec()).collect(),
            joined: names.join(","),
            ncols: names.len(),
            coll: need("collective"),
            size: need("size_bytes"),
            algo: need("algorithm"),
            proto: need("protocol"),
            channels: need("channels"),
            nodes: need("nodes"),
            ranks: need("ranks"),
            latency: col("latency_us"),
            cost: col("cost_metric"),
            pipe_ops: col("pipeOps"),
            reg_buff: col("regBuff"),
            platform: col("platform"),
            gpu: col("gpu"),
            version: col("nccl_version"),
            in_place: col("in_place"),
        });
        self.section = (line, Sha256::new());
        Ok(Flow::Go)
    }

    /// Takes a chunk's rows; its first line is `line + 1`. Returns the
    /// line its last ends and the chunk's buffer.
    fn take(&mut self, ctx: &mut FileCtx, line: u32, p: Parsed) -> anyhow::Result<(u32, Vec<u8>)> {
        let mut view = View::default();
        for row in &p.rows {
            self.row(ctx, line + 1 + row.line, row, &p.refs, &mut view)?;
        }
        Ok((line + p.lines, p.buf))
    }

    fn global(&mut self, s: &str) -> u32 {
        if let Some(i) = self.strings.iter().position(|x| &**x == s) {
            return i as u32;
        }
        self.strings.push(s.into());
        (self.strings.len() - 1) as u32
    }

    /// One non-blank record after the header, referring to `refs`, whose
    /// strings and labels `view` resolves as they are first needed.
    fn row(
        &mut self,
        ctx: &mut FileCtx,
        line: u32,
        row: &Row,
        refs: &Refs,
        view: &mut View,
    ) -> anyhow::Result<()> {
        let hash = row.hash;
        let (k, in_place) = match row.kind {
            RowKind::Header => {
                // The header again: another file's rows follow.
                let (l, h) = std::mem::replace(&mut self.section, (line, Sha256::new()));
                let digest: [u8; 32] = h.finalize().into();
                self.seen_rows.end_section(digest);
                self.out.end_section(l, digest);
                return Ok(());
            }
            RowKind::Bad(i) => {
                self.out.report.rows += 1;
                self.section.1.update(hash.to_le_bytes());
                return ctx.bad(line, refs.bad[i as usize].clone());
            }
            RowKind::Data { key, in_place } => (key as usize, in_place),
        };
        self.out.report.rows += 1;
        self.section.1.update(hash.to_le_bytes());
        if view.labelled.len() < refs.keys.len() {
            view.labelled.resize(refs.keys.len(), None);
        }
        let labelled = match view.labelled[k] {
            Some(l) => l,
            None => {
                while view.ids.len() < refs.strings.0.len() {
                    let g = self.global(&refs.strings.0[view.ids.len()]);
                    view.ids.push(g);
                }
                let mut key = refs.keys[k];
                key.platform = key.platform.map(|i| view.ids[i as usize]);
                key.gpu = key.gpu.map(|i| view.ids[i as usize]);
                let Some(l) = self.label(ctx, line, key)? else {
                    return Ok(());
                };
                if self.labelled.contains_key(&key) {
                    view.labelled[k] = Some(l);
                }
                l
            }
        };
        self.seen_rows.push(hash);
        self.out.records.push_run(
            labelled.run,
            &self.runs[labelled.run as usize],
            &ctx.path,
            row.nbytes,
            in_place,
            labelled.flags,
            row.time,
            line,
        );
        Ok(())
    }

    /// Labels the run of a row's columns `key` (global string ids): once
    /// per distinct columns, except where labelling finds a problem, which
    /// is reported at every row it affects. `None`: the row is not kept.
    fn label(
        &mut self,
        ctx: &mut FileCtx,
        line: u32,
        key: LabelKey,
    ) -> anyhow::Result<Option<Labelled>> {
        if let Some(l) = self.labelled.get(&key) {
            return Ok(Some(*l));
        }
        let string = |i: Option<u32>| i.map(|i| self.strings[i as usize].clone());
        let mut shown = Shown::new(ShownKnobs::Stated(key.config));
        shown.collective = Some(key.collective);
        shown.nranks = Some(key.nranks);
        shown.nnodes = Some(key.nnodes);
        shown.platform = string(key.platform);
        shown.gpu = string(key.gpu);
        shown.nccl_version = key.nccl_version;
        shown.state = PartialState {
            pipe_ops: key.state.0,
            reg_buff: key.state.1,
        };
        let labelled = self.labeller.label(ctx, line, shown)?;
        let Some(run) = labelled.run else {
            return Ok(None);
        };
        self.runs.push(run);
        let l = Labelled {
            run: (self.runs.len() - 1) as u32,
            flags: labelled.flags,
        };
        if labelled.problem.is_none() {
            self.labelled.insert(key, l);
        }
        Ok(Some(l))
    }

    /// Ends the file, `bytes` long.
    fn finish(mut self, ctx: &mut FileCtx, bytes: u64) -> anyhow::Result<FileOutput> {
        self.out.bytes = bytes;
        if self.header.is_none() {
            if !self.refused {
                ctx.bad(0, "empty file; expected a tuner CSV header")?;
            }
            return Ok(self.out);
        }
        let (l, h) = std::mem::replace(&mut self.section, (0, Sha256::new()));
        let digest: [u8; 32] = h.finalize().into();
        self.seen_rows.end_section(digest);
        self.out.end_section(l, digest);
        self.seen_rows.finish(&mut self.out, &ctx.path);
        Ok(self.out)
    }
}

/// Reads the rest of the file with the `csv` crate (quoted fields, lone
/// carriage returns): `chunk` (starting at a line) and what follows.
fn read_rest_with_csv<R: BufRead>(
    ctx: &mut FileCtx,
    mut sink: Sink,
    chunk: Vec<u8>,
    chunks: Chunks,
    rd: R,
) -> anyhow::Result<FileOutput> {
    let base_line = chunks.lines - count_newlines(&chunk);
    let base_bytes = chunks.bytes - (chunk.len() + chunks.carry.len()) as u64;
    let stream = std::io::Cursor::new(chunk)
        .chain(std::io::Cursor::new(chunks.carry))
        .chain(rd);
    let newlines = Rc::new(RefCell::new(LineIndex::default()));
    let mut rdr = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .trim(csv::Trim::All)
        .from_reader(Newlines {
            inner: stream,
            offset: 0,
            index: newlines.clone(),
        });
    let mut rec = csv::ByteRecord::new();
    let mut refs = Refs::default();
    let mut cache = LabelCache::default();
    let mut view = View::default();
    loop {
        let more = match rdr.read_byte_record(&mut rec) {
            Ok(b) => b,
            Err(e) => match e.into_kind() {
                csv::ErrorKind::Io(io) => return Err(io.into()),
                k => anyhow::bail!("{k:?}"),
            },
        };
        if !more {
            break;
        }
        // The csv crate's own line numbers drift (it can report a record at
        // the previous record's line); its byte offsets are exact.
        let byte = rec.position().map(|p| p.byte()).unwrap_or(0);
        let line = base_line + newlines.borrow_mut().line_at(byte);
        let fields: Vec<&[u8]> = rec.iter().collect();
        let Some(header) = &sink.header else {
            if sink.header_record(ctx, line, &fields)? == Flow::Stop {
                let bytes = base_bytes + rdr.position().byte();
                return sink.finish(ctx, bytes);
            }
            continue;
        };
        let Some(row) = parse_record(header, &fields, &mut refs, &mut cache) else {
            continue;
        };
        sink.row(ctx, line, &row, &refs, &mut view)?;
        refs.bad.clear();
    }
    let bytes = base_bytes + rdr.position().byte();
    sink.finish(ctx, bytes)
}

/// Where the newlines are in the bytes read so far but not yet asked about:
/// bounded by the csv reader's read-ahead, not the file.
#[derive(Default)]
struct LineIndex {
    /// Byte offsets of newlines not yet passed.
    pending: VecDeque<u64>,
    /// Newlines passed.
    passed: u32,
}

impl LineIndex {
    /// The 1-based line of the byte at `offset` (offsets asked in order).
    fn line_at(&mut self, offset: u64) -> u32 {
        // With CRLF line ends the csv crate puts a record's start at the `\n`.
        while self.pending.front().is_some_and(|&n| n <= offset) {
            self.pending.pop_front();
            self.passed += 1;
        }
        self.passed + 1
    }
}

/// Notes where the newlines are as bytes pass to the csv reader.
struct Newlines<R> {
    inner: R,
    offset: u64,
    index: Rc<RefCell<LineIndex>>,
}

impl<R: Read> Read for Newlines<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        let mut ix = self.index.borrow_mut();
        ix.pending
            .extend(memchr::memchr_iter(b'\n', &buf[..n]).map(|i| self.offset + i as u64));
        self.offset += n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::super::{read_with_format, Dataset, Format, IngestOptions};
    use super::*;

    const HEADER: &str =
        "collective,size_bytes,algorithm,protocol,channels,nodes,ranks,latency_us\n";

    fn records(rows: &[&str]) -> (usize, Vec<String>) {
        let mut text = String::from(HEADER);
        for r in rows {
            if *r == "HEADER" {
                text += HEADER;
                continue;
            }
            text += &format!("allreduce,{r},default,default,-1,1,8,10.00\n");
        }
        let ds = read_with_format(
            Path::new("s.csv"),
            text.as_bytes(),
            Format::TunerCsv,
            &IngestOptions::default(),
        )
        .unwrap();
        (ds.records.len(), ds.notes)
    }

    /// A stretch of rows read again counts once; a lone row printing the
    /// same as an earlier one (a real repeat, printed alike) stays.
    #[test]
    fn only_a_stretch_of_rows_read_again_counts_once() {
        let (n, notes) = records(&["8", "16", "8", "32"]);
        assert_eq!(n, 4);
        assert!(notes.is_empty(), "{notes:?}");
        let (n, notes) = records(&["8", "16", "8", "16", "64"]);
        assert_eq!(n, 5);
        assert!(notes.is_empty(), "{notes:?}");
        let (n, notes) = records(&["8", "16", "32", "8", "16", "32"]);
        assert_eq!(n, 3);
        assert_eq!(
            notes,
            [
                "s.csv:5: 3 row(s) repeat earlier rows exactly, in the same order (the same rows \
              read twice): each counted once"
            ]
        );
    }

    /// `cat a.csv; head -4 a.csv`: the second header line started a new
    /// section, and the rows-read-twice rule looked only within a section,
    /// so the rows after it counted as independent repeats.
    #[test]
    fn rows_read_again_after_a_second_header_count_once() {
        let (n, notes) = records(&["8", "16", "32", "64", "HEADER", "8", "16", "32"]);
        assert_eq!(n, 4, "{notes:?}");
        assert_eq!(
            notes,
            [
                "s.csv:7: 3 row(s) repeat earlier rows exactly, in the same order (the same rows \
              read twice): each counted once"
            ]
        );
        // Other rows after the header are new measurements.
        let (n, notes) = records(&["8", "16", "32", "64", "HEADER", "8", "16", "128"]);
        assert_eq!(n, 7);
        assert!(notes.is_empty(), "{notes:?}");
    }

    /// A sweep of `rows` rows with a bad row, a repeated stretch, a second
    /// header and quotes late in the file.
    fn sweep(rows: usize) -> String {
        let mut s = String::from(HEADER);
        for i in 0..rows {
            let coll = ["allreduce", "allgather", "broadcast"][i % 3];
            s += &format!(
                "{coll},{},ring,ll,{},{},{},{}.{:03}\n",
                8u64 << (i % 20),
                1 + i % 4,
                1 + i % 2,
                8 * (1 + i % 2),
                10 + i % 97,
                i % 1000
            );
            if i == rows / 3 {
                s += "allreduce,8,ring,ll,4,1,8,-1\n";
            }
            if i == rows / 2 {
                let copy: Vec<String> = s.lines().skip(10).take(5).map(String::from).collect();
                s += HEADER;
                s += &(copy.join("\n") + "\n");
            }
        }
        s += "\"allreduce\",8,ring,ll,4,1,8,12.5\n";
        s
    }

    fn read(text: &str, threads: usize, chunk: usize, lenient: bool) -> anyhow::Result<Dataset> {
        let opts = IngestOptions {
            lenient,
            ..Default::default()
        };
        let path = Path::new("s.csv");
        let mut ctx = FileCtx::new(path, &opts);
        let out = read_tuner_with(&mut ctx, text.as_bytes(), threads, chunk)?;
        let mut ds = Dataset {
            records: out.records.finish().into_records(),
            notes: out.notes,
            rows: out.report.rows,
            ..Default::default()
        };
        ds.skipped = ctx.skipped;
        Ok(ds)
    }

    /// What is read (records in order, skips, notes, the first error) is
    /// the same on one thread in one chunk as on many threads in chunks of
    /// any size, quotes late in the file included.
    #[test]
    fn reading_does_not_depend_on_threads_or_chunks() {
        let text = sweep(3000);
        let show = |ds: &Dataset| {
            format!(
                "{} rows\n{:?}\n{:?}\n{:?}",
                ds.rows,
                ds.records
                    .iter()
                    .map(|r| format!("{:?} {:?}", r.run, r.measurement))
                    .collect::<Vec<_>>(),
                ds.skipped
                    .iter()
                    .map(|s| format!("{}: {}", s.line, s.reason))
                    .collect::<Vec<_>>(),
                ds.notes
            )
        };
        let one = read(&text, 1, usize::MAX / 2, true).unwrap();
        assert_eq!(one.skipped.len(), 1, "{:?}", one.skipped);
        assert_eq!(one.notes.len(), 1, "{:?}", one.notes);
        let strict_one = read(&text, 1, usize::MAX / 2, false)
            .unwrap_err()
            .to_string();
        for (threads, chunk) in [(1, 100), (2, 1000), (4, 7), (3, 64 << 10)] {
            let many = read(&text, threads, chunk, true).unwrap();
            assert_eq!(
                show(&one),
                show(&many),
                "{threads} threads, chunks of {chunk}"
            );
            let strict = read(&text, threads, chunk, false).unwrap_err().to_string();
            assert_eq!(strict_one, strict);
        }
    }
}
