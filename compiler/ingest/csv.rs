//! CSV inputs: NCCL's tuner-example schema (`optimize_config.py`:
//! `collective,size_bytes,algorithm,protocol,channels,nodes,ranks,pipeOps,
//! regBuff,cost_metric,bandwidth_gbps,latency_us`, extra columns such as
//! `platform` allowed) and NVIDIA's raw `data/<nodes>.csv` seven-column
//! layout (no header; 30 rows of sizes 8 B doubling; columns Tree/LL,
//! Tree/LL128, Tree/Simple, Ring/LL, Ring/LL128, Ring/Simple, default; us).

use std::cell::RefCell;
use std::collections::VecDeque;
use std::hash::Hasher as _;
use std::io::BufRead;
use std::rc::Rc;
use std::sync::Arc;

use sha2::{Digest as _, Sha256};

use super::knobs::{self, Assumptions};
use super::run::{Labeller, Shown, ShownKnobs};
use super::{quote, FileCtx, FileOutput, Format};
use crate::record::{Algo, Collective, Config, Measurement, PartialState, Proto, Run};

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

/// Reads a tuner-schema CSV, streaming (one row in memory at a time). Every
/// row carries its own knobs and shape. Parsed by the `csv` crate (quoted
/// fields, line numbers); a row with the wrong number of fields is an
/// error naming its line; a UTF-8 BOM is accepted; the header line seen
/// again (two files concatenated) starts a new section.
pub(crate) fn read_tuner<R: BufRead>(ctx: &mut FileCtx, rd: R) -> anyhow::Result<FileOutput> {
    let labeller = Labeller::new(ctx, None)?;
    let mut out = FileOutput::empty(Format::TunerCsv);
    out.report.knobs = "per row (algorithm, protocol, channels columns)".into();
    let newlines = Rc::new(RefCell::new(LineIndex::default()));
    let mut rdr = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .trim(csv::Trim::All)
        .from_reader(Newlines {
            inner: rd,
            offset: 0,
            index: newlines.clone(),
        });
    // The csv crate's own line numbers drift (it can report a record at the
    // previous record's line); its byte offsets are exact.
    let line_of = |rec: &csv::ByteRecord| -> u32 {
        let byte = rec.position().map(|p| p.byte()).unwrap_or(0);
        newlines.borrow_mut().line_at(byte)
    };
    let mut rec = csv::ByteRecord::new();
    let next =
        |rdr: &mut csv::Reader<Newlines<R>>, rec: &mut csv::ByteRecord| -> anyhow::Result<bool> {
            match rdr.read_byte_record(rec) {
                Ok(b) => Ok(b),
                Err(e) => match e.into_kind() {
                    csv::ErrorKind::Io(io) => Err(io.into()),
                    k => Err(anyhow::anyhow!("{k:?}")),
                },
            }
        };
    let field = |rec: &csv::ByteRecord, i: usize| -> String {
        String::from_utf8_lossy(rec.get(i).unwrap_or(b"")).into_owned()
    };
    // The header: the first non-empty record.
    loop {
        if !next(&mut rdr, &mut rec)? {
            out.bytes = rdr.position().byte();
            ctx.bad(0, "empty file; expected a tuner CSV header")?;
            return Ok(out);
        }
        if rec.iter().any(|f| !f.is_empty()) {
            break;
        }
    }
    let header_line = line_of(&rec);
    let mut headers: Vec<String> = (0..rec.len()).map(|i| field(&rec, i)).collect();
    if let Some(h) = headers.first_mut() {
        // Spreadsheets write a UTF-8 byte-order mark.
        *h = h.trim_start_matches('\u{feff}').trim().to_string();
    }
    let header_rec = rec.clone();
    let col = |name: &str| headers.iter().position(|h| h.eq_ignore_ascii_case(name));
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
            header_line,
            format!(
                "the tuner CSV header lacks {}; it has: {}; expected collective,size_bytes,\
                 algorithm,protocol,channels,nodes,ranks,pipeOps,regBuff,cost_metric,\
                 bandwidth_gbps,latency_us",
                what.join(", "),
                quote(&headers.join(","))
            ),
        )?;
        out.bytes = rdr.position().byte();
        return Ok(out);
    }
    let need = |name: &str| col(name).unwrap_or(0);
    let c_coll = need("collective");
    let c_size = need("size_bytes");
    let c_algo = need("algorithm");
    let c_proto = need("protocol");
    let c_ch = need("channels");
    let c_nodes = need("nodes");
    let c_ranks = need("ranks");
    let c_lat = col("latency_us");
    let c_cost = col("cost_metric");
    let c_pipe = col("pipeOps");
    let c_reg = col("regBuff");
    let c_platform = col("platform");
    let c_gpu = col("gpu");
    let c_ver = col("nccl_version");
    let c_inplace = col("in_place");
    let ncols = headers.len();
    let mut interned: Vec<Arc<str>> = Vec::new();
    let mut intern = |s: &str| -> Arc<str> {
        if let Some(a) = interned.iter().find(|a| &***a == s) {
            return a.clone();
        }
        let a: Arc<str> = s.into();
        interned.push(a.clone());
        a
    };
    let mut section = (header_line, Sha256::new());
    let mut vals: Vec<String> = Vec::with_capacity(ncols);
    let mut seen_rows = SeenRows::default();
    loop {
        if !next(&mut rdr, &mut rec)? {
            break;
        }
        let line = line_of(&rec);
        if rec.iter().all(|f| f.is_empty()) {
            continue;
        }
        if rec == header_rec {
            // The header again: another file's rows follow.
            let (l, h) = std::mem::replace(&mut section, (line, Sha256::new()));
            seen_rows.end_section(&mut out);
            out.end_section(l, h.finalize().into());
            continue;
        }
        out.report.rows += 1;
        let mut row = std::collections::hash_map::DefaultHasher::new();
        for f in rec.iter() {
            section.1.update(f);
            section.1.update(b"\x1f");
            row.write(f);
            row.write_u8(0x1f);
        }
        section.1.update(b"\n");
        let row = row.finish();
        if rec.len() != ncols {
            ctx.bad(
                line,
                format!(
                    "{} fields; expected {ncols}, one per header column ({})",
                    rec.len(),
                    quote(&headers.join(","))
                ),
            )?;
            continue;
        }
        // The fields, into strings kept from row to row (no allocation per
        // field once they have grown).
        vals.resize(ncols, String::new());
        for (i, v) in vals.iter_mut().enumerate() {
            v.clear();
            v.push_str(&String::from_utf8_lossy(rec.get(i).unwrap_or(b"")));
        }
        let get = |i: usize| vals.get(i).map(String::as_str).unwrap_or("");
        macro_rules! bad {
            ($($t:tt)*) => {{ ctx.bad(line, format!($($t)*))?; continue; }};
        }
        let Some(collective) = Collective::parse(get(c_coll)) else {
            bad!("collective {:?}: expected allreduce, allgather, reducescatter, broadcast or reduce", quote(get(c_coll)))
        };
        let Ok(nbytes) = get(c_size).parse::<u64>() else {
            bad!(
                "size_bytes {:?}: expected a whole number of bytes",
                quote(get(c_size))
            )
        };
        let algo = match get(c_algo) {
            a if a.eq_ignore_ascii_case("default") || a == "-1" => None,
            a => match Algo::parse(a) {
                Some(x) => Some(x),
                None => bad!("algorithm {:?}: expected tree, ring, collnet_direct, collnet_chain, nvls, nvls_tree, pat or default", quote(a)),
            },
        };
        let proto = match get(c_proto) {
            p if p.eq_ignore_ascii_case("default") || p == "-1" => None,
            p => match Proto::parse(p) {
                Some(x) => Some(x),
                None => bad!(
                    "protocol {:?}: expected ll, ll128, simple or default",
                    quote(p)
                ),
            },
        };
        let channels = match knobs::parse_channels(get(c_ch)) {
            Ok(c) => c,
            Err(e) => bad!("{e}"),
        };
        let Some(nnodes) = get(c_nodes).parse::<u32>().ok().filter(|&n| n > 0) else {
            bad!(
                "nodes {:?}: expected a positive whole number",
                quote(get(c_nodes))
            )
        };
        let Some(nranks) = get(c_ranks).parse::<u32>().ok().filter(|&n| n > 0) else {
            bad!(
                "ranks {:?}: expected a positive whole number",
                quote(get(c_ranks))
            )
        };
        let lat = c_lat.map(get).filter(|s| !s.is_empty());
        let (tname, tval) = match lat {
            Some(v) => ("latency_us", v),
            None => ("cost_metric", c_cost.map(get).unwrap_or("")),
        };
        let time_us = match tval.parse::<f64>() {
            Ok(t) if t.is_finite() && t > 0.0 => match super::check_time(t) {
                Ok(t) => t,
                Err(e) => bad!("{tname} {e}"),
            },
            _ => bad!(
                "{tname} {:?}: expected a positive time in microseconds",
                quote(tval)
            ),
        };
        // An empty or absent state column leaves the state to the labels.
        let pipe_ops = match c_pipe.map(get).filter(|s| !s.is_empty()) {
            None => None,
            Some(v) => match v.parse::<u32>() {
                Ok(p) if p > 0 => Some(p),
                _ => bad!("pipeOps {:?}: expected a positive whole number", quote(v)),
            },
        };
        let reg_buff = match c_reg.map(get).filter(|s| !s.is_empty()) {
            None => None,
            Some("0") => Some(false),
            Some("1") => Some(true),
            Some(v) => bad!("regBuff {:?}: expected 0 or 1", quote(v)),
        };
        let in_place = matches!(c_inplace.map(get), Some("1" | "true" | "yes"));
        // Every row is a run of its own: its columns show everything.
        let mut shown = Shown::new(ShownKnobs::Stated(Config {
            algo,
            proto,
            channels,
        }));
        shown.collective = Some(collective);
        shown.nranks = Some(nranks);
        shown.nnodes = Some(nnodes);
        shown.platform = c_platform
            .map(get)
            .filter(|s| !s.is_empty())
            .map(&mut intern);
        shown.gpu = c_gpu.map(get).filter(|s| !s.is_empty()).map(&mut intern);
        shown.nccl_version = c_ver.map(get).and_then(super::knobs::parse_nccl_version);
        shown.state = PartialState { pipe_ops, reg_buff };
        let labelled = labeller.label(ctx, line, shown)?;
        let Some(run) = labelled.run else { continue };
        seen_rows.push(row, out.records.len());
        out.records.push(
            &run,
            Measurement {
                nbytes,
                time_us,
                in_place,
                dtype: None,
                source: ctx.source(line),
                flags: labelled.flags,
            },
        );
    }
    let (l, h) = section;
    seen_rows.end_section(&mut out);
    out.end_section(l, h.finalize().into());
    out.bytes = rdr.position().byte();
    if let Some(n) = seen_rows.note(&ctx.path) {
        out.notes.push(n);
    }
    Ok(out)
}

/// The rows of one run section of a tuner CSV, by a hash of their full
/// text, to find stretches of it read twice (`cat a.csv; tail -n +2 a.csv`,
/// a sweep script's output appended twice). The rule: a row counts once
/// when it lies in a stretch of [`STRETCH`] consecutive rows that all
/// repeat, word for word and in order, an earlier stretch of the section.
/// A row (or two) that prints the same as earlier ones (nccl-tests-like
/// decimals, a latency floor) is a real repeat whose time happened to
/// print alike: it stays. A whole section repeated after the header is the
/// section digest's to find (see `read_paths_folded`).
/// Consecutive rows that, repeated word for word in order, are a stretch
/// read twice rather than repeats printed alike: on a 1M-row sweep of
/// 38,850 cells repeated (3 decimals), 8 pairs of rows coincide with an
/// earlier pair by chance, no three rows do.
const STRETCH: usize = 3;

#[derive(Default)]
struct SeenRows {
    /// Per row of the section, by reading order: the hash of its text
    /// (8 bytes a row; the first rows are found by sorting at the end of
    /// the section, not kept in a map).
    hashes: Vec<u64>,
    /// Reading order of the section's first row.
    base: u32,
    /// Rows counted once so far, and the line of the first.
    dropped: usize,
    first_line: Option<u32>,
}

impl SeenRows {
    /// Notes the row of hash `row`, the `seq`-th record pushed.
    fn push(&mut self, row: u64, seq: usize) {
        if self.hashes.is_empty() {
            self.base = seq as u32;
        }
        self.hashes.push(row);
    }

    /// Ends a section: drops from `out` its rows that repeat a copied
    /// stretch.
    fn end_section(&mut self, out: &mut FileOutput) {
        let ranges = self.copied();
        if self.first_line.is_none() {
            self.first_line = ranges.first().and_then(|r| out.records.line_of(r.start));
        }
        out.count_once(&ranges);
    }

    /// The reading orders of the section's rows that repeat a copied
    /// stretch, as ranges.
    fn copied(&mut self) -> Vec<std::ops::Range<usize>> {
        let mut h = std::mem::take(&mut self.hashes);
        let n = h.len();
        if n < STRETCH {
            return Vec::new();
        }
        // Each window of STRETCH consecutive rows, hashed in place (window k
        // reads rows k.. only, so rows not yet passed are intact).
        for k in 0..=n - STRETCH {
            let mut w = std::collections::hash_map::DefaultHasher::new();
            for r in &h[k..k + STRETCH] {
                w.write_u64(*r);
            }
            h[k] = w.finish();
        }
        h.truncate(n - STRETCH + 1);
        // A window seen before: sort by (hash, index); all but the first of
        // each run of equal hashes are repeats.
        let mut order: Vec<u32> = (0..h.len() as u32).collect();
        order.sort_unstable_by_key(|&i| (h[i as usize], i));
        let mut repeated = vec![false; h.len()];
        for p in 1..order.len() {
            if h[order[p] as usize] == h[order[p - 1] as usize] {
                repeated[order[p] as usize] = true;
            }
        }
        drop(order);
        drop(h);
        let mut ranges: Vec<std::ops::Range<usize>> = Vec::new();
        for r in 0..n {
            let windows = r.saturating_sub(STRETCH - 1)..=r.min(repeated.len() - 1);
            if !repeated[windows].iter().any(|&x| x) {
                continue;
            }
            let seq = self.base as usize + r;
            self.dropped += 1;
            match ranges.last_mut() {
                Some(x) if x.end == seq => x.end = seq + 1,
                _ => ranges.push(seq..seq + 1),
            }
        }
        ranges
    }

    fn note(&self, path: &std::path::Path) -> Option<String> {
        let line = self.first_line.filter(|_| self.dropped > 0)?;
        Some(format!(
            "{}:{}: {} row(s) repeat earlier rows exactly, in the same order (the same rows \
             read twice): each counted once",
            path.display(),
            line,
            self.dropped
        ))
    }
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

impl<R: std::io::Read> std::io::Read for Newlines<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        let mut ix = self.index.borrow_mut();
        ix.pending
            .extend(memchr::memchr_iter(b'\n', &buf[..n]).map(|i| self.offset + i as u64));
        self.offset += n as u64;
        Ok(n)
    }
}

/// Reads one line into `buf` (cleared by the caller), replacing invalid
/// UTF-8 so a stray byte is reported as a bad value, not an I/O error.
fn read_line_lossy<R: BufRead>(rd: &mut R, buf: &mut String) -> std::io::Result<usize> {
    let mut bytes = Vec::new();
    let n = rd.read_until(b'\n', &mut bytes)?;
    buf.push_str(&String::from_utf8_lossy(&bytes));
    Ok(n)
}

/// The seven configurations of NVIDIA's raw layout, in column order.
pub const NVIDIA_RAW_COLUMNS: [(Option<Algo>, Option<Proto>); 7] = [
    (Some(Algo::Tree), Some(Proto::LL)),
    (Some(Algo::Tree), Some(Proto::LL128)),
    (Some(Algo::Tree), Some(Proto::Simple)),
    (Some(Algo::Ring), Some(Proto::LL)),
    (Some(Algo::Ring), Some(Proto::LL128)),
    (Some(Algo::Ring), Some(Proto::Simple)),
    (None, None),
];

/// `<digits>.csv` whose first line (after `#` comment lines, e.g. a
/// `# dyncc:` label) is seven comma-separated numbers.
pub fn looks_like_nvidia_raw(name: &str, head: &[u8]) -> bool {
    let Some(stem) = name.strip_suffix(".csv") else {
        return false;
    };
    if stem.is_empty() || !stem.bytes().all(|b| b.is_ascii_digit()) {
        return false;
    }
    let Some(first) = head
        .split(|&b| b == b'\n')
        .find(|l| !l.trim_ascii().is_empty() && !l.trim_ascii_start().starts_with(b"#"))
    else {
        return false;
    };
    let l = String::from_utf8_lossy(first);
    let f: Vec<&str> = l.trim().split(',').collect();
    f.len() == 7 && f.iter().all(|x| x.trim().parse::<f64>().is_ok())
}

/// GPUs per node of the platforms NVIDIA's raw files come from.
pub fn platform_gpus_per_node(platform: &str) -> Option<u32> {
    let p: String = platform
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .collect::<String>()
        .to_ascii_uppercase();
    Some(match p.as_str() {
        "DGX1V" | "DGX1" | "DGX1P" => 8,
        "DGX2V" | "DGX2" | "DGX2H" => 16,
        "DGXA100" | "DGXH100" | "DGXH200" | "DGXB200" => 8,
        _ => return None,
    })
}

/// The run of an NVIDIA raw file (its knobs are the columns'), once labelled.
struct RawShape {
    /// `None`: the rows are not kept.
    run: Option<Run>,
    /// [`super::UNRESOLVED`] when the shape could not be established (rows
    /// kept flagged, for inspect).
    flags: u8,
}

/// Labels an NVIDIA raw file's run: nodes from the name `<nodes>.csv`, the
/// platform (and so GPUs per node) from a `DGX-1V/data/` directory, unless
/// the user states them (`# dyncc:` lines, the manifest row, the name
/// pattern, `--assume`: see [`super::run`]).
fn raw_shape(ctx: &mut FileCtx, header: &Assumptions) -> anyhow::Result<RawShape> {
    let labeller = Labeller::new(ctx, Some(header))?;
    let file_labels = ctx.labels.clone();
    // The knobs are the columns': a label naming one would be overridden.
    for (a, name) in [
        (Some(header), "the `# dyncc:` line"),
        (file_labels.manifest.as_ref(), "the --manifest row"),
        (file_labels.pattern.as_ref(), "the --name-pattern"),
    ] {
        let Some(a) = a else { continue };
        let k = &a.knobs;
        if k.algo.is_some()
            || k.proto.is_some()
            || k.channels.is_some()
            || k.min_channels.is_some()
            || k.max_channels.is_some()
        {
            ctx.bad(
                0,
                format!(
                    "{name} names a knob, but NVIDIA's raw data/<nodes>.csv has one column per \
                     algorithm/protocol (Tree/LL .. Ring/Simple, default); remove the knob from \
                     {name}"
                ),
            )?;
        }
    }
    let path = ctx.path.clone();
    let mut shown = Shown::new(ShownKnobs::Stated(Config::DEFAULT));
    shown.collective = Some(Collective::AllReduce);
    shown.nnodes = path
        .file_stem()
        .and_then(|s| s.to_string_lossy().parse().ok())
        .filter(|&n| n > 0);
    // platform from `<platform>/data/<n>.csv` (or the parent dir).
    let mut dir = path.parent();
    if dir.and_then(|d| d.file_name()).is_some_and(|n| n == "data") {
        dir = dir.and_then(|d| d.parent());
    }
    shown.platform_hint = dir
        .and_then(|d| d.file_name())
        .map(|n| n.to_string_lossy().as_ref().into())
        .filter(|p: &Arc<str>| platform_gpus_per_node(p).is_some());
    shown.shape_unknown = "ranks unknown: NVIDIA's raw data/<nodes>.csv does not say how many \
                           GPUs a node has; put it under a DGX-1V/ or DGX-2V/ directory, label it \
                           (a `# dyncc: gpus_per_node=N` line, --manifest, --name-pattern) or \
                           pass --assume gpus_per_node=N"
        .into();
    let labelled = labeller.label(ctx, 0, shown)?;
    Ok(RawShape {
        run: labelled.run,
        flags: labelled.flags,
    })
}

/// Reads NVIDIA's `data/<nodes>.csv`: AllReduce, one run per column.
/// Leading `#` lines are comments; `# dyncc: KEY=VALUE ...` among them
/// labels the file (facts such as `gpus_per_node=8 platform=DGX-1V`).
pub(crate) fn read_nvidia_raw<R: BufRead>(ctx: &mut FileCtx, rd: R) -> anyhow::Result<FileOutput> {
    let mut out = FileOutput::empty(Format::NvidiaRawCsv);
    out.report.knobs = "per column (Tree/LL .. Ring/Simple, default)".into();
    let mut header = Assumptions {
        knobs: knobs::KnobSource::named("# dyncc"),
        ..Default::default()
    };
    let mut shape: Option<RawShape> = None;
    let mut buf = String::new();
    let mut rd = rd;
    let mut lineno = 0u32;
    let mut idx = 0u32;
    let mut missing = 0usize;
    loop {
        buf.clear();
        let n = read_line_lossy(&mut rd, &mut buf)?;
        if n == 0 {
            break;
        }
        out.bytes += n as u64;
        lineno += 1;
        let l = buf.trim();
        if l.is_empty() {
            continue;
        }
        if let Some(c) = l.strip_prefix('#') {
            if let Some(rest) = c.trim_start().strip_prefix("dyncc:") {
                if shape.is_some() {
                    ctx.bad(lineno, "`# dyncc:` line after the data rows; expected it first, labelling the whole file")?;
                } else if let Err(e) = header.parse_header_line(rest) {
                    ctx.bad(lineno, format!("`# dyncc:` line: {e}"))?;
                }
            }
            continue;
        }
        if shape.is_none() {
            shape = Some(raw_shape(ctx, &header)?);
        }
        let Some(sh) = &shape else { continue };
        let fields: Vec<&str> = l.split(',').map(str::trim).collect();
        let vals: Option<Vec<f64>> = fields.iter().map(|f| f.parse::<f64>().ok()).collect();
        let vals = match vals {
            Some(v)
                if v.len() == 7 && v.iter().all(|&x| x == 0.0 || super::check_time(x).is_ok()) =>
            {
                v
            }
            _ => {
                ctx.bad(lineno, format!("expected 7 comma-separated times in us between {} and {} (Tree/LL, Tree/LL128, Tree/Simple, Ring/LL, Ring/LL128, Ring/Simple, default; 0 = not measured), found {:?}", super::MIN_TIME_US, super::MAX_TIME_US, quote(l)))?;
                idx += 1;
                continue;
            }
        };
        out.report.rows += 1;
        let Some(nbytes) = 8u64.checked_shl(idx).filter(|_| idx < 60) else {
            ctx.bad(lineno, "too many rows: row i is 8 * 2^i bytes")?;
            continue;
        };
        idx += 1;
        let Some(run) = &sh.run else { continue };
        for (j, &t) in vals.iter().enumerate() {
            if t == 0.0 {
                missing += 1;
                continue;
            }
            let (algo, proto) = NVIDIA_RAW_COLUMNS[j];
            let run = Run {
                config: Config {
                    algo,
                    proto,
                    channels: None,
                },
                ..run.clone()
            };
            out.records.push(
                &run,
                Measurement {
                    nbytes,
                    time_us: t,
                    in_place: false,
                    dtype: None,
                    source: ctx.source(lineno),
                    flags: sh.flags,
                },
            );
        }
    }
    if let Some(sh) = &shape {
        out.report.resolved = sh.flags & super::UNRESOLVED == 0;
    }
    if missing > 0 {
        ctx.anomaly(
            0,
            "missing-cells",
            format!("{missing} cells are 0.0 (not measured); skipped"),
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::super::{read_with_format, Format, IngestOptions};

    fn records(rows: &[&str]) -> (usize, Vec<String>) {
        let mut text = String::from(
            "collective,size_bytes,algorithm,protocol,channels,nodes,ranks,latency_us\n",
        );
        for r in rows {
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
}
