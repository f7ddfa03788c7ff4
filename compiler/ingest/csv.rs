//! CSV inputs: NCCL's tuner-example schema (`optimize_config.py`:
//! `collective,size_bytes,algorithm,protocol,channels,nodes,ranks,pipeOps,
//! regBuff,cost_metric,bandwidth_gbps,latency_us`, extra columns such as
//! `platform` allowed) and NVIDIA's raw `data/<nodes>.csv` seven-column
//! layout (no header; 30 rows of sizes 8 B doubling; columns Tree/LL,
//! Tree/LL128, Tree/Simple, Ring/LL, Ring/LL128, Ring/Simple, default; us).

use std::io::BufRead;
use std::sync::Arc;

use super::knobs::Assumptions;
use super::{FileCtx, FileOutput, Format};
use crate::record::{Algo, Collective, Proto, Record};

/// Reads a tuner-schema CSV. Every row carries its own knobs and shape.
pub(crate) fn read_tuner<R: BufRead>(ctx: &mut FileCtx, rd: R) -> anyhow::Result<FileOutput> {
    let assume = Assumptions::from_pairs(&ctx.opts.assume).map_err(|e| anyhow::anyhow!(e))?;
    let mut out = FileOutput::empty(Format::TunerCsv);
    out.report.knobs = "per row (algorithm, protocol, channels columns)".into();
    // Lines are read here (not by the csv crate's reader) so every error
    // names the exact line; fields are split by `split_csv_line`.
    let mut rd = rd;
    let mut buf = String::new();
    let mut lineno = 0u32;
    let headers: Vec<String> = loop {
        buf.clear();
        let n = read_line_lossy(&mut rd, &mut buf)?;
        out.bytes += n as u64;
        if n == 0 {
            ctx.bad(0, "empty file; expected a tuner CSV header")?;
            return Ok(out);
        }
        lineno += 1;
        if !buf.trim().is_empty() {
            break split_csv_line(buf.trim_end_matches(['\n', '\r']));
        }
    };
    let col = |name: &str| headers.iter().position(|h| h.eq_ignore_ascii_case(name));
    let missing: Vec<&str> = [
        "collective",
        "size_bytes",
        "algorithm",
        "protocol",
        "channels",
        "nodes",
        "ranks",
    ]
    .into_iter()
    .filter(|n| col(n).is_none())
    .collect();
    if !missing.is_empty() || (col("latency_us").is_none() && col("cost_metric").is_none()) {
        let what = if missing.is_empty() {
            "neither a `latency_us` nor a `cost_metric` column, so there is no time to read"
                .to_string()
        } else {
            format!("no `{}` column", missing.join("`, `"))
        };
        ctx.bad(
            lineno,
            format!(
                "the tuner CSV header has {what}; expected collective,size_bytes,algorithm,\
                 protocol,channels,nodes,ranks,pipeOps,regBuff,cost_metric,bandwidth_gbps,\
                 latency_us"
            ),
        )?;
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
    let mut interned: Vec<Arc<str>> = Vec::new();
    let mut intern = |s: &str| -> Arc<str> {
        if let Some(a) = interned.iter().find(|a| &***a == s) {
            return a.clone();
        }
        let a: Arc<str> = s.into();
        interned.push(a.clone());
        a
    };
    loop {
        buf.clear();
        let n = read_line_lossy(&mut rd, &mut buf)?;
        if n == 0 {
            break;
        }
        out.bytes += n as u64;
        lineno += 1;
        let rec = split_csv_line(buf.trim_end_matches(['\n', '\r']));
        let line = lineno;
        if rec.iter().all(|f| f.is_empty()) {
            continue;
        }
        out.report.rows += 1;
        let get = |i: usize| rec.get(i).map(String::as_str).unwrap_or("");
        macro_rules! bad {
            ($($t:tt)*) => {{ ctx.bad(line, format!($($t)*))?; continue; }};
        }
        let Some(collective) = Collective::parse(get(c_coll)) else {
            bad!("collective {:?}: expected allreduce, allgather, reducescatter, broadcast or reduce", get(c_coll))
        };
        let Ok(nbytes) = get(c_size).parse::<u64>() else {
            bad!(
                "size_bytes {:?}: expected a whole number of bytes",
                get(c_size)
            )
        };
        let algo = match get(c_algo) {
            a if a.eq_ignore_ascii_case("default") || a == "-1" => None,
            a => match Algo::parse(a) {
                Some(x) => Some(x),
                None => bad!("algorithm {a:?}: expected tree, ring, collnet_direct, collnet_chain, nvls, nvls_tree, pat or default"),
            },
        };
        let proto = match get(c_proto) {
            p if p.eq_ignore_ascii_case("default") || p == "-1" => None,
            p => match Proto::parse(p) {
                Some(x) => Some(x),
                None => bad!("protocol {p:?}: expected ll, ll128, simple or default"),
            },
        };
        let channels = match get(c_ch).parse::<i64>() {
            Ok(-1) => None,
            Ok(c) if c > 0 && c <= u32::MAX as i64 => Some(c as u32),
            _ => bad!(
                "channels {:?}: expected a positive count or -1 (NCCL's choice)",
                get(c_ch)
            ),
        };
        let Some(nnodes) = get(c_nodes).parse::<u32>().ok().filter(|&n| n > 0) else {
            bad!("nodes {:?}: expected a positive whole number", get(c_nodes))
        };
        let Some(nranks) = get(c_ranks).parse::<u32>().ok().filter(|&n| n > 0) else {
            bad!("ranks {:?}: expected a positive whole number", get(c_ranks))
        };
        let lat = c_lat.map(get).filter(|s| !s.is_empty());
        let (tname, tval) = match lat {
            Some(v) => ("latency_us", v),
            None => ("cost_metric", c_cost.map(get).unwrap_or("")),
        };
        let time_us = match tval.parse::<f64>() {
            Ok(t) if t.is_finite() && t > 0.0 => t,
            _ => bad!("{tname} {tval:?}: expected a positive time in microseconds"),
        };
        let pipe_ops = match c_pipe.map(get).filter(|s| !s.is_empty()) {
            None => 1,
            Some(v) => match v.parse::<u32>() {
                Ok(p) if p > 0 => p,
                _ => bad!("pipeOps {v:?}: expected a positive whole number"),
            },
        };
        let reg_buff = match c_reg.map(get).filter(|s| !s.is_empty()) {
            None | Some("0") => false,
            Some("1") => true,
            Some(v) => bad!("regBuff {v:?}: expected 0 or 1"),
        };
        let in_place = matches!(c_inplace.map(get), Some("1" | "true" | "yes"));
        let platform = c_platform
            .map(get)
            .filter(|s| !s.is_empty())
            .map(&mut intern)
            .or_else(|| assume.platform.clone());
        let gpu = c_gpu
            .map(get)
            .filter(|s| !s.is_empty())
            .map(&mut intern)
            .or_else(|| assume.gpu.clone());
        let nccl_version = c_ver
            .map(get)
            .and_then(super::knobs::parse_nccl_version)
            .or(assume.nccl_version);
        out.records.push(Record {
            collective,
            nbytes,
            nranks,
            nnodes,
            gpu,
            nccl_version,
            platform,
            algo,
            proto,
            channels,
            time_us,
            in_place,
            dtype: None,
            pipe_ops,
            reg_buff,
            source: ctx.source(line),
            flags: 0,
        });
    }
    Ok(out)
}

/// Reads one line into `buf` (cleared by the caller), replacing invalid
/// UTF-8 so a stray byte is reported as a bad value, not an I/O error.
fn read_line_lossy<R: BufRead>(rd: &mut R, buf: &mut String) -> std::io::Result<usize> {
    let mut bytes = Vec::new();
    let n = rd.read_until(b'\n', &mut bytes)?;
    buf.push_str(&String::from_utf8_lossy(&bytes));
    Ok(n)
}

/// Splits one CSV line: fields trimmed, double-quoted fields unquoted
/// (`""` inside quotes is a quote).
pub fn split_csv_line(l: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut q = false;
    let mut chars = l.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' if q && chars.peek() == Some(&'"') => {
                cur.push('"');
                chars.next();
            }
            '"' => q = !q,
            ',' if !q => out.push(std::mem::take(&mut cur).trim().to_string()),
            c => cur.push(c),
        }
    }
    out.push(cur.trim().to_string());
    out
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

/// `<digits>.csv` whose first line is seven comma-separated numbers.
pub fn looks_like_nvidia_raw(name: &str, first_line: &[u8]) -> bool {
    let Some(stem) = name.strip_suffix(".csv") else {
        return false;
    };
    if stem.is_empty() || !stem.bytes().all(|b| b.is_ascii_digit()) {
        return false;
    }
    let l = String::from_utf8_lossy(first_line);
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

/// Reads NVIDIA's `data/<nodes>.csv`: AllReduce, one run per column.
pub(crate) fn read_nvidia_raw<R: BufRead>(ctx: &mut FileCtx, rd: R) -> anyhow::Result<FileOutput> {
    let assume = Assumptions::from_pairs(&ctx.opts.assume).map_err(|e| anyhow::anyhow!(e))?;
    let mut out = FileOutput::empty(Format::NvidiaRawCsv);
    out.report.knobs = "per column (Tree/LL .. Ring/Simple, default)".into();
    let path = ctx.path.clone();
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let nnodes: u32 = stem
        .parse()
        .ok()
        .filter(|&n| n > 0)
        .or(assume.nodes)
        .unwrap_or(0);
    // platform from `<platform>/data/<n>.csv` (or the parent dir).
    let mut dir = path.parent();
    if dir.and_then(|d| d.file_name()).is_some_and(|n| n == "data") {
        dir = dir.and_then(|d| d.parent());
    }
    let dir_platform: Option<Arc<str>> = dir
        .and_then(|d| d.file_name())
        .map(|n| n.to_string_lossy().as_ref().into());
    let platform = assume.platform.clone().or_else(|| {
        dir_platform
            .clone()
            .filter(|p| platform_gpus_per_node(p).is_some())
    });
    let gpn = assume
        .gpus_per_node
        .or_else(|| platform.as_deref().and_then(platform_gpus_per_node));
    let nranks = assume.ranks.or(gpn.map(|g| g * nnodes.max(1)));
    let mut keep = true;
    let mut unresolved = false;
    if nnodes == 0 || nranks.is_none() {
        unresolved = true;
        keep = ctx.unresolved(
            0,
            "ranks unknown: NVIDIA's raw data/<nodes>.csv does not say how many GPUs a node has; \
             put it under a DGX-1V/ or DGX-2V/ directory or pass --assume gpus_per_node=N",
        )?;
    }
    out.report.resolved = !unresolved;
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
        let fields: Vec<&str> = l.split(',').map(str::trim).collect();
        let vals: Option<Vec<f64>> = fields.iter().map(|f| f.parse::<f64>().ok()).collect();
        let vals = match vals {
            Some(v) if v.len() == 7 && v.iter().all(|x| x.is_finite() && *x >= 0.0) => v,
            _ => {
                ctx.bad(lineno, format!("expected 7 comma-separated times in us (Tree/LL, Tree/LL128, Tree/Simple, Ring/LL, Ring/LL128, Ring/Simple, default), found {l:?}"))?;
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
        if !keep {
            continue;
        }
        for (j, &t) in vals.iter().enumerate() {
            if t == 0.0 {
                missing += 1;
                continue;
            }
            let (algo, proto) = NVIDIA_RAW_COLUMNS[j];
            out.records.push(Record {
                collective: Collective::AllReduce,
                nbytes,
                nranks: nranks.unwrap_or(0),
                nnodes,
                gpu: assume.gpu.clone(),
                nccl_version: assume.nccl_version,
                platform: platform.clone(),
                algo,
                proto,
                channels: None,
                time_us: t,
                in_place: false,
                dtype: None,
                pipe_ops: 1,
                reg_buff: false,
                source: ctx.source(lineno),
                flags: if unresolved { super::UNRESOLVED } else { 0 },
            });
        }
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
