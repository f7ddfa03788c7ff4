//! CSV inputs: NVIDIA's raw `data/<nodes>.csv` seven-column
//! layout (no header; 30 rows of sizes 8 B doubling; columns Tree/LL,
//! Tree/LL128, Tree/Simple, Ring/LL, Ring/LL128, Ring/Simple, default; us).
//! NCCL's tuner-example schema is [`super::tuner`]'s.

use std::io::BufRead;
use std::sync::Arc;

use super::knobs::{self, Assumptions};
use super::run::{platform_gpus_per_node, Labeller, Shown, ShownKnobs};
use super::{quote, FileCtx, FileOutput, Format};
use crate::record::{Algo, Collective, Config, Measurement, Proto, Run};

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
                    chunk: dyncc_tables::Chunk::NCCL,
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
