//! `dyncc plot`: a decision map per collective and ranks-per-node, as a
//! hand-written SVG. x is the message size (log scale), y the node count;
//! each cell is coloured by the decision the plugin makes there and hatched
//! when the decision is interpolated or extrapolated rather than measured;
//! under it, the expected gain over NCCL's default on a scale of its own, so
//! decision and gain never share a visual channel. `--diff OLD NEW` draws
//! what changes between two tables on the same grid (`changes.rs`).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;

use dyncc_tables::{
    bucket_lower_bound, size_bucket, Basis, Coll, Decision, Lookup, Setting, Table,
};

use crate::audit::colour::colour_hex;
use crate::audit::files::{open, read_table, write_output_or_stdout};
use crate::audit::names::{parse_colls, SettingJson};
use crate::audit::plane::{live_buckets, patches, plane, Patch, Probe};
use crate::audit::text::fmt_span;
use crate::units::{fmt_bytes, fmt_gain};

mod changes;

/// Draw a table's decision map as SVG.
///
/// One panel per collective and ranks-per-node: x = message size (log
/// scale), y = node count (one row per node range the table
/// distinguishes; a dot marks the counts the sweep measured). Colour =
/// decision (legend below), hatching = interpolated (/) or extrapolated
/// (x) rather than measured. Grey = NCCL's own choice where the sweep
/// measured it best (or no setting beat it past the noise); white = NCCL's
/// own choice where nothing was confidently better (predicted node counts,
/// sizes beyond the sweep). Under each panel, the expected gain over NCCL's
/// default on its own scale (white: none, dark: the table's largest). Open
/// it in a browser, or convert it with `rsvg-convert map.svg -o map.png`.
///
/// With --diff OLD NEW, draws instead what changes for jobs when OLD is
/// replaced by NEW (what `dyncc diff` lists), on the same grid: blue =
/// NEW forces a setting where OLD left NCCL's choice, red = NEW gives a
/// setting back to NCCL, purple = NEW forces another setting, light grey
/// = the same decision in both; rows are the node ranges either table
/// distinguishes. Hover a cell for both decisions. Under each map, the
/// expected effect of NEW over OLD by the tables' own gains, on a scale
/// of its own (brown slower, white the same, teal faster); the legend
/// lists every change. With --data SWEEP TRACES, each point the jobs
/// measured that decided something is ringed: one picture per round of
/// the loop, what its jobs read and what the table changed.
///
/// Examples:
///   dyncc plot cluster.tbl -o map.svg
///   dyncc plot cluster.tbl --coll allgather --min-bytes 1K --max-bytes 1GiB -o ag.svg
///   dyncc plot --diff cluster.tbl cluster-next.tbl -o changes.svg
///   dyncc plot --diff cluster.tbl cluster-next.tbl --data sweep/ traces/ -o round.svg
#[derive(clap::Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct PlotArgs {
    /// The table (written by `dyncc compile`).
    #[arg(required_unless_present = "diff")]
    pub table: Option<PathBuf>,
    /// Draw what changes from table OLD (what jobs use today) to table NEW
    /// instead of one table's decisions.
    #[arg(long, num_args = 2, value_names = ["OLD", "NEW"], conflicts_with = "table")]
    pub diff: Option<Vec<PathBuf>>,
    /// Where to write the SVG (atomically).
    #[arg(short, long)]
    pub output: PathBuf,
    /// Only this collective.
    #[arg(long)]
    pub coll: Option<String>,
    /// Smallest size on the x axis (default: 8 B or the smallest forced size).
    #[arg(long)]
    pub min_bytes: Option<String>,
    /// Largest size on the x axis (default: 4 GiB or the largest forced size).
    #[arg(long)]
    pub max_bytes: Option<String>,
    /// With --diff: the sweep NEW was compiled from and the jobs' trace
    /// files it read; each point the jobs measured that decided something
    /// is ringed on the change map (read as compile read it), so one
    /// picture per round shows what the round measured and what changed.
    #[arg(long, num_args = 1.., value_name = "SWEEP_AND_TRACES", requires = "diff")]
    pub data: Vec<PathBuf>,
    /// With --data: use trace files of another platform or sweep than
    /// NEW's (refused without it, as compile refuses them).
    #[arg(long, requires = "data")]
    pub foreign_traces: bool,
    /// How to read and label the --data inputs, as for `dyncc compile`.
    #[command(flatten)]
    pub ingest: crate::ingest::args::IngestArgs,
}

pub(super) fn short_bytes(n: u64) -> String {
    fmt_bytes(n).replace(' ', "").replace("iB", "")
}

pub(super) fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The x axis under a panel spanning `top..axis_y`: a tick every 3
/// octaves (12 buckets), labelled with the size, and the axis title.
pub(super) fn size_axis(body: &mut String, cols: &[u8], top: f64, axis_y: f64) {
    for (k, &b) in cols.iter().enumerate() {
        if b % 12 != 0 || b < 12 {
            continue;
        }
        let x = LEFT + k as f64 * CELL_W;
        let _ = writeln!(body, "<line x1=\"{x:.1}\" y1=\"{top:.1}\" x2=\"{x:.1}\" y2=\"{axis_y:.1}\" stroke=\"#000000\" stroke-opacity=\"0.12\" stroke-width=\"0.8\"/>");
        let _ = writeln!(body, "<line x1=\"{x:.1}\" y1=\"{axis_y:.1}\" x2=\"{x:.1}\" y2=\"{:.1}\" stroke=\"#555\" stroke-width=\"0.8\"/>", axis_y + 4.0);
        let _ = writeln!(
            body,
            "<text x=\"{x:.1}\" y=\"{:.1}\" {FONT} font-size=\"10\" text-anchor=\"middle\">{}</text>",
            axis_y + 15.0,
            short_bytes(bucket_lower_bound(b))
        );
    }
    let plot_w = cols.len() as f64 * CELL_W;
    let _ = writeln!(
        body,
        "<text x=\"{:.1}\" y=\"{:.1}\" {FONT} font-size=\"11\" text-anchor=\"middle\">message size (bytes, log scale)</text>",
        LEFT + plot_w / 2.0,
        axis_y + 30.0
    );
}

/// The buckets on the x axis: 8 B .. 4 GiB, widened to `first..=last`
/// (the sizes that matter: forced, or changed) unless they are open-ended;
/// `--min-bytes` and `--max-bytes` override.
pub(super) fn size_range(first: u8, last: u8, min_b: Option<u64>, max_b: Option<u64>) -> (u8, u8) {
    let mut x0 = size_bucket(8);
    let mut x1 = size_bucket(4 << 30);
    if first != u8::MAX {
        x0 = x0.min(first.max(8));
        if last < size_bucket(1 << 40) {
            x1 = x1.max(last);
        }
    }
    if let Some(m) = min_b {
        x0 = size_bucket(m).max(8);
    }
    if let Some(m) = max_b {
        x1 = size_bucket(m).max(x0);
    }
    (x0, x1)
}

pub(super) const LEFT: f64 = 64.0;
pub(super) const CELL_W: f64 = 5.0;
pub(super) const ROW_H: f64 = 22.0;
pub(super) const GAIN_ROW_H: f64 = 10.0;
/// NCCL's own choice where the sweep measured it best (or within the noise).
const NCCL_BEST: &str = "#d0d0d0";
/// NCCL's own choice where nothing was confidently better.
const NCCL_UNSURE: &str = "#ffffff";
pub(super) const FONT: &str = "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\"";

/// One row of a panel: a node span and its answers per size bucket.
type Row = (Patch, Box<[Lookup; 256]>);

/// One panel: a collective at one ranks-per-node span.
struct Panel {
    coll: Coll,
    ppn: (u32, u32),
    rows: Vec<Row>,
}

/// The SVG document.
pub fn render(
    table: &Table,
    name: &str,
    colls: &[Coll],
    min_b: Option<u64>,
    max_b: Option<u64>,
) -> String {
    let mut panels: Vec<Panel> = Vec::new();
    let mut decisions: Vec<Decision> = Vec::new();
    let (mut first_forced, mut last_forced) = (u8::MAX, 0u8);
    let mut gmax: f32 = 1.0;
    let mut bases = [false; 3];
    for &coll in colls {
        let mut by_ppn: BTreeMap<(u32, u32), Vec<Row>> = BTreeMap::new();
        for p in patches(&[table], coll) {
            let row = plane(table, &p, Probe::PLAIN);
            for b in live_buckets() {
                let l = row[b as usize];
                if l.decision.is_forced() {
                    first_forced = first_forced.min(b);
                    last_forced = last_forced.max(b);
                    gmax = gmax.max(l.gain);
                    if !decisions.contains(&l.decision) {
                        decisions.push(l.decision);
                    }
                    if let Some(bs) = l.basis {
                        bases[bs as usize] = true;
                    }
                }
            }
            by_ppn.entry(p.ppn).or_default().push((p, row));
        }
        for (ppn, rows) in by_ppn {
            panels.push(Panel { coll, ppn, rows });
        }
    }
    decisions.sort_by_key(|d| match d {
        Decision::Default => (0, 0, 0),
        Decision::Force(Setting {
            algo,
            proto,
            channels,
            ..
        }) => (*algo as u8, *proto as u8, *channels),
    });
    let (x0, x1) = size_range(first_forced, last_forced, min_b, max_b);
    let cols: Vec<u8> = live_buckets().filter(|b| (x0..=x1).contains(b)).collect();
    let plot_w = cols.len() as f64 * CELL_W;
    let width = (LEFT + plot_w + 24.0).max(560.0);
    let ln_gmax = (gmax as f64).ln().max(0.05_f64.ln_1p());
    // Gain on its own sequential scale (white -> dark blue), log gain over
    // the table's largest.
    let gain_fill = |g: f32| -> String {
        let t = ((g.max(1.0) as f64).ln() / ln_gmax).clamp(0.0, 1.0);
        let mix = |a: f64, b: f64| (a + (b - a) * t).round() as u8;
        format!(
            "#{:02x}{:02x}{:02x}",
            mix(255.0, 8.0),
            mix(255.0, 48.0),
            mix(255.0, 107.0)
        )
    };
    // What the sweep measured: node counts and sizes per collective and
    // ranks per node (the table's coverage metadata).
    let measured = table
        .meta("coverage")
        .map(crate::report::measured_sizes)
        .unwrap_or_default();
    let measured_count = |coll: Coll, ppn: (u32, u32), nodes: (u32, u32)| {
        nodes.0 == nodes.1
            && ppn.0 == ppn.1
            && measured.iter().any(|m| {
                m.collective == coll.name() && m.ppn == ppn.0 && m.nodes.contains(&nodes.0)
            })
    };
    let measured_size = |coll: Coll, ppn: (u32, u32), b: u8| {
        measured.iter().any(|m| {
            m.collective == coll.name()
                && ppn.0 == ppn.1
                && m.ppn == ppn.0
                && (size_bucket(m.min_bytes)..=size_bucket(m.max_bytes)).contains(&b)
        })
    };
    let mut any_unsure = false;
    let mut any_marked = false;

    let mut body = String::new();
    let mut y = 58.0;
    if panels.is_empty() {
        let _ = writeln!(
            body,
            "<text x=\"{LEFT}\" y=\"{y}\" {FONT} font-size=\"13\">This table has no contexts{}: NCCL decides every call.</text>",
            if colls.len() == 1 { format!(" for {}", colls[0].name()) } else { String::new() }
        );
        y += 30.0;
    }
    for panel in &panels {
        let _ = writeln!(
            body,
            "<text x=\"{LEFT}\" y=\"{y}\" {FONT} font-size=\"13\" font-weight=\"bold\">{} \u{2014} {} ranks per node</text>",
            panel.coll.name(),
            fmt_span(panel.ppn.0, panel.ppn.1)
        );
        y += 8.0;
        let top = y;
        // Largest node counts at the top, like a y axis.
        for (i, (p, row)) in panel.rows.iter().rev().enumerate() {
            let ry = top + i as f64 * ROW_H;
            let counted = measured_count(panel.coll, panel.ppn, p.nodes);
            let _ = writeln!(
                body,
                "<text x=\"{}\" y=\"{}\" {FONT} font-size=\"11\" text-anchor=\"end\">{}</text>",
                LEFT - 6.0 - if counted { 9.0 } else { 0.0 },
                ry + ROW_H / 2.0 + 4.0,
                fmt_span(p.nodes.0, p.nodes.1)
            );
            if counted {
                any_marked = true;
                let _ = writeln!(
                    body,
                    "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3\" fill=\"#222222\"><title>measured by the sweep</title></circle>",
                    LEFT - 8.0,
                    ry + ROW_H / 2.0
                );
            }
            // Merge equal neighbours into one rectangle.
            let mut k = 0;
            while k < cols.len() {
                let l = row[cols[k] as usize];
                let mut j = k + 1;
                while j < cols.len() {
                    let m = row[cols[j] as usize];
                    if m.decision != l.decision
                        || m.basis != l.basis
                        || (m.gain - l.gain).abs() > 1e-6
                        || measured_size(panel.coll, panel.ppn, cols[j])
                            != measured_size(panel.coll, panel.ppn, cols[k])
                    {
                        break;
                    }
                    j += 1;
                }
                let (x, w) = (LEFT + k as f64 * CELL_W, (j - k) as f64 * CELL_W);
                let sure = counted && measured_size(panel.coll, panel.ppn, cols[k]);
                let tip = match l.decision {
                    Decision::Default => format!(
                        "{}..{}: NCCL's choice ({})",
                        fmt_bytes(bucket_lower_bound(cols[k])),
                        fmt_bytes(dyncc_tables::bucket_upper_bound(cols[j - 1]) + 1),
                        if sure {
                            "measured: no setting beat it past the noise"
                        } else {
                            "nothing confidently better here"
                        }
                    ),
                    d => format!(
                        "{}..{}: {d}, {} vs default, {}",
                        fmt_bytes(bucket_lower_bound(cols[k])),
                        fmt_bytes(dyncc_tables::bucket_upper_bound(cols[j - 1]) + 1),
                        fmt_gain(l.gain as f64),
                        l.basis.map(Basis::name).unwrap_or("no rule")
                    ),
                };
                let fill = match l.decision {
                    Decision::Default if sure => NCCL_BEST.to_string(),
                    Decision::Default => {
                        any_unsure = true;
                        NCCL_UNSURE.to_string()
                    }
                    d => colour_hex(d),
                };
                let _ = writeln!(
                    body,
                    "<rect x=\"{x:.1}\" y=\"{ry:.1}\" width=\"{w:.1}\" height=\"{ROW_H}\" fill=\"{fill}\"><title>{}</title></rect>",
                    esc(&tip)
                );
                if l.decision.is_forced() {
                    let pat = match l.basis {
                        Some(Basis::Interpolated) => Some("interp"),
                        Some(Basis::Extrapolated) => Some("extrap"),
                        _ => None,
                    };
                    if let Some(pat) = pat {
                        let _ = writeln!(body, "<rect x=\"{x:.1}\" y=\"{ry:.1}\" width=\"{w:.1}\" height=\"{ROW_H}\" fill=\"url(#{pat})\"/>");
                    }
                    if SettingJson::of(l.decision).channels > 0 {
                        let _ = writeln!(body, "<rect x=\"{x:.1}\" y=\"{ry:.1}\" width=\"{w:.1}\" height=\"{ROW_H}\" fill=\"url(#pinned)\"/>");
                    }
                }
                k = j;
            }
            // Row separator.
            let _ = writeln!(body, "<line x1=\"{LEFT}\" y1=\"{ry:.1}\" x2=\"{:.1}\" y2=\"{ry:.1}\" stroke=\"#ffffff\" stroke-width=\"1\"/>", LEFT + plot_w);
        }
        let h = panel.rows.len() as f64 * ROW_H;
        let _ = writeln!(body, "<rect x=\"{LEFT}\" y=\"{top:.1}\" width=\"{plot_w:.1}\" height=\"{h:.1}\" fill=\"none\" stroke=\"#555\" stroke-width=\"0.8\"/>");
        let _ = writeln!(
            body,
            "<text x=\"14\" y=\"{:.1}\" {FONT} font-size=\"11\" transform=\"rotate(-90 14 {:.1})\" text-anchor=\"middle\">nodes</text>",
            top + h / 2.0,
            top + h / 2.0
        );
        let axis_y = top + h;
        size_axis(&mut body, &cols, top, axis_y);
        y = axis_y + 50.0;
        // The gain, same rows and columns, on its own scale.
        let _ = writeln!(
            body,
            "<text x=\"{LEFT}\" y=\"{y:.1}\" {FONT} font-size=\"11\" fill=\"#444\">{}: expected gain over NCCL's default</text>",
            panel.coll.name()
        );
        y += 6.0;
        let gtop = y;
        for (i, (_, row)) in panel.rows.iter().rev().enumerate() {
            let ry = gtop + i as f64 * GAIN_ROW_H;
            let mut k = 0;
            while k < cols.len() {
                let g = row[cols[k] as usize].gain;
                let mut j = k + 1;
                while j < cols.len() && (row[cols[j] as usize].gain - g).abs() <= 1e-6 {
                    j += 1;
                }
                let (x, w) = (LEFT + k as f64 * CELL_W, (j - k) as f64 * CELL_W);
                let _ = writeln!(
                    body,
                    "<rect x=\"{x:.1}\" y=\"{ry:.1}\" width=\"{w:.1}\" height=\"{GAIN_ROW_H}\" fill=\"{}\"><title>{}</title></rect>",
                    gain_fill(g),
                    esc(&fmt_gain(g as f64))
                );
                k = j;
            }
        }
        let gh = panel.rows.len() as f64 * GAIN_ROW_H;
        let _ = writeln!(body, "<rect x=\"{LEFT}\" y=\"{gtop:.1}\" width=\"{plot_w:.1}\" height=\"{gh:.1}\" fill=\"none\" stroke=\"#555\" stroke-width=\"0.8\"/>");
        y = gtop + gh + 36.0;
    }

    // Legend: decisions, gain strength, basis hatching.
    let mut legend = String::new();
    let _ = writeln!(legend, "<text x=\"{LEFT}\" y=\"{y:.1}\" {FONT} font-size=\"12\" font-weight=\"bold\">legend</text>");
    y += 10.0;
    let mut items: Vec<(String, String)> = vec![(
        NCCL_BEST.into(),
        "NCCL's choice: measured best, or nothing beat it past the noise".into(),
    )];
    if any_unsure {
        items.push((
            NCCL_UNSURE.into(),
            "NCCL's choice: nothing confidently better (not measured here)".into(),
        ));
    }
    for d in &decisions {
        items.push((colour_hex(*d), d.to_string()));
    }
    // Column width from the longest label (about 6.5 px per character at 11 px).
    let col_w = items
        .iter()
        .map(|i| i.1.chars().count())
        .max()
        .unwrap_or(10) as f64
        * 6.5
        + 34.0;
    let per_row = ((width - LEFT) / col_w).floor().max(1.0) as usize;
    for (i, (fill, label)) in items.iter().enumerate() {
        let (cx, cy) = (
            LEFT + (i % per_row) as f64 * col_w,
            y + (i / per_row) as f64 * 20.0,
        );
        let _ = writeln!(legend, "<rect x=\"{cx:.1}\" y=\"{cy:.1}\" width=\"14\" height=\"14\" fill=\"{fill}\" stroke=\"#555\" stroke-width=\"0.5\"/>");
        let _ = writeln!(
            legend,
            "<text x=\"{:.1}\" y=\"{:.1}\" {FONT} font-size=\"11\">{}</text>",
            cx + 20.0,
            cy + 11.0,
            esc(label)
        );
    }
    y += items.len().div_ceil(per_row) as f64 * 20.0 + 10.0;
    let _ = writeln!(
        legend,
        "<text x=\"{LEFT}\" y=\"{:.1}\" {FONT} font-size=\"11\">expected gain:</text>",
        y + 11.0
    );
    for i in 0..8 {
        let g = ((gmax as f64).ln() * i as f64 / 7.0).exp() as f32;
        let x = LEFT + 90.0 + i as f64 * 16.0;
        let _ = writeln!(legend, "<rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"16\" height=\"14\" fill=\"{}\" stroke=\"#999\" stroke-width=\"0.3\"/>", gain_fill(g));
    }
    let _ = writeln!(
        legend,
        "<text x=\"{:.1}\" y=\"{:.1}\" {FONT} font-size=\"10\">+0 %</text>",
        LEFT + 90.0,
        y + 26.0
    );
    let _ = writeln!(
        legend,
        "<text x=\"{:.1}\" y=\"{:.1}\" {FONT} font-size=\"10\" text-anchor=\"end\">{}</text>",
        LEFT + 90.0 + 8.0 * 16.0,
        y + 26.0,
        esc(&fmt_gain(gmax as f64))
    );
    let mut bx = LEFT + 250.0;
    for (pat, label, show) in [
        ("interp", "interpolated", bases[1]),
        ("extrap", "extrapolated", bases[2]),
        (
            "pinned",
            "channels pinned",
            decisions.iter().any(|d| SettingJson::of(*d).channels > 0),
        ),
    ] {
        if !show {
            continue;
        }
        let _ = writeln!(
            legend,
            "<rect x=\"{bx:.1}\" y=\"{y:.1}\" width=\"14\" height=\"14\" fill=\"#bbbbbb\"/>"
        );
        let _ = writeln!(legend, "<rect x=\"{bx:.1}\" y=\"{y:.1}\" width=\"14\" height=\"14\" fill=\"url(#{pat})\" stroke=\"#555\" stroke-width=\"0.5\"/>");
        let _ = writeln!(
            legend,
            "<text x=\"{:.1}\" y=\"{:.1}\" {FONT} font-size=\"11\">{label}</text>",
            bx + 20.0,
            y + 11.0
        );
        bx += 120.0;
    }
    if any_marked {
        // A line of its own: the hatching legend above fills the width.
        y += 40.0;
        let _ = writeln!(
            legend,
            "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3\" fill=\"#222222\"/>",
            LEFT + 7.0,
            y + 7.0
        );
        let _ = writeln!(
            legend,
            "<text x=\"{:.1}\" y=\"{:.1}\" {FONT} font-size=\"11\">node count the sweep measured</text>",
            LEFT + 20.0,
            y + 11.0
        );
        y -= 16.0;
    }
    y += 40.0;

    let title = format!(
        "dyncc decision map: {}  (digest {:016x}{})",
        name,
        table.digest(),
        table
            .meta("platform")
            .filter(|p| !p.is_empty())
            .map(|p| format!(", {p}"))
            .unwrap_or_default()
    );
    let mut s = String::new();
    let _ = writeln!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width:.0}\" height=\"{y:.0}\" viewBox=\"0 0 {width:.0} {y:.0}\">"
    );
    s.push_str(
        "<defs>\n\
         <pattern id=\"interp\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\"><path d=\"M0,6 L6,0\" stroke=\"#ffffff\" stroke-opacity=\"0.55\" stroke-width=\"1\"/></pattern>\n\
         <pattern id=\"extrap\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\"><path d=\"M0,6 L6,0 M0,0 L6,6\" stroke=\"#ffffff\" stroke-opacity=\"0.8\" stroke-width=\"1.2\"/></pattern>\n\
         <pattern id=\"pinned\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\"><circle cx=\"3\" cy=\"3\" r=\"1\" fill=\"#000000\" fill-opacity=\"0.45\"/></pattern>\n\
         </defs>\n",
    );
    let _ = writeln!(s, "<rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>");
    let _ = writeln!(
        s,
        "<text x=\"14\" y=\"24\" {FONT} font-size=\"14\" font-weight=\"bold\">{}</text>",
        esc(&title)
    );
    let _ = writeln!(
        s,
        "<text x=\"14\" y=\"40\" {FONT} font-size=\"11\" fill=\"#444\">colour = decision, hatching = not measured there, dot = measured node count; the gain is drawn under each map</text>"
    );
    s.push_str(&body);
    s.push_str(&legend);
    s.push_str("</svg>\n");
    s
}

pub fn run(a: PlotArgs) -> anyhow::Result<i32> {
    // The tables this picture reads: one, or OLD and NEW.
    let inputs: Vec<PathBuf> = match (&a.diff, &a.table) {
        (Some(pair), _) => pair.clone(),
        (None, Some(t)) => vec![t.clone()],
        // clap requires one of the two.
        (None, None) => anyhow::bail!("name a table, or --diff OLD NEW"),
    };
    // Writing the SVG over a table would destroy it.
    crate::atomic::check_output(&a.output, inputs.iter().map(|p| p.as_path()), "svg")?;
    let colls = parse_colls(a.coll.as_deref())?;
    let parse = |v: &Option<String>, flag: &str| -> anyhow::Result<Option<u64>> {
        v.as_deref()
            .map(|s| crate::units::parse_bytes(s).map_err(|e| anyhow::anyhow!("{flag} {e}")))
            .transpose()
    };
    let (lo, hi) = (
        parse(&a.min_bytes, "--min-bytes")?,
        parse(&a.max_bytes, "--max-bytes")?,
    );
    if let (Some(l), Some(h)) = (lo, hi) {
        if l > h {
            anyhow::bail!(
                "--min-bytes {} is larger than --max-bytes {}",
                fmt_bytes(l),
                fmt_bytes(h)
            );
        }
    }
    let bytes: Vec<Vec<u8>> = inputs
        .iter()
        .map(|p| read_table(p))
        .collect::<anyhow::Result<_>>()?;
    let tables: Vec<Table> = inputs
        .iter()
        .zip(&bytes)
        .map(|(p, b)| open(p, b))
        .collect::<anyhow::Result<_>>()?;
    let names: Vec<String> = inputs.iter().map(|p| p.display().to_string()).collect();
    let mut traced = Vec::new();
    if let ([_, new], false) = (tables.as_slice(), a.data.is_empty()) {
        let data =
            crate::audit::traced::read_data(new, &inputs[1], &a.data, &a.ingest, a.foreign_traces)?;
        let Some(t) = data.traced else {
            anyhow::bail!(
                "--data holds no trace file NEW could have read: give the sweep NEW was compiled \
                 from and the jobs' DYNCC_TRACE directories, e.g. `--data SWEEP_DIR TRACE_DIR`"
            );
        };
        traced = t
            .points()
            .filter_map(|p| {
                Some(changes::TracedMark {
                    coll: Coll::parse(p.collective)?,
                    nodes: p.nodes,
                    ppn: p.ranks / p.nodes.max(1),
                    bytes: p.bytes,
                    communicators: p.communicators,
                })
            })
            .collect();
    }
    let svg = match tables.as_slice() {
        [old, new] => changes::render(old, new, (&names[0], &names[1]), &colls, lo, hi, &traced),
        [table, ..] => render(table, &names[0], &colls, lo, hi),
        [] => anyhow::bail!("name a table, or --diff OLD NEW"),
    };
    write_output_or_stdout(&a.output, svg.as_bytes(), 0o644)?;
    let what = if a.diff.is_some() {
        "change map"
    } else {
        "map"
    };
    if crate::atomic::names_stdout(&a.output) {
        // The SVG went to stdout; the note must not follow it there.
        eprintln!("wrote the {what} to standard output ({} bytes)", svg.len());
    } else {
        println!(
            "wrote {} ({} bytes); view it in a browser or `rsvg-convert {} -o map.png`",
            a.output.display(),
            svg.len(),
            a.output.display()
        );
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::testutil;

    #[test]
    fn svg_has_a_panel_per_shape_and_a_legend_entry_per_decision() {
        let b = testutil::sample();
        let t = Table::from_bytes(&b).unwrap();
        let s = render(&t, "t.tbl", &Coll::ALL, None, None);
        assert!(s.starts_with("<svg") && s.trim_end().ends_with("</svg>"));
        assert_eq!(s.matches("ranks per node</text>").count(), 1);
        assert!(s.contains(">tree/ll</text>") && s.contains(">ring/ll128/16ch</text>"));
        assert!(s.contains("url(#interp)"), "node 3 is interpolated");
        assert!(s.contains("url(#pinned)"));
        // Every tag that opens closes (a cheap well-formedness check).
        assert_eq!(s.matches("<svg").count(), s.matches("</svg>").count());
        assert_eq!(s.matches("<rect").count(), s.matches("<rect").count());
    }

    /// Decision and gain were one cell's colour and opacity, so a faint
    /// decision read as another; grey meant both "measured, NCCL best" and
    /// "not confident"; measured node counts were not marked.
    #[test]
    fn decision_and_gain_are_drawn_apart_and_nccl_best_apart_from_unsure() {
        let mut b = dyncc_tables::TableBuilder::new();
        b.meta("platform", "test-rig")
            .meta("coverage", "allreduce ppn 8 nodes [2, 4] 8 B..4 GiB");
        testutil::sample_contexts(&mut b);
        let bytes = b.build().unwrap();
        let t = Table::from_bytes(&bytes).unwrap();
        let s = render(&t, "t.tbl", &[Coll::AllReduce], None, None);
        assert!(
            !s.lines()
                .any(|l| l.starts_with("<rect") && l.contains("fill-opacity")),
            "no cell's opacity carries the gain"
        );
        assert!(s.contains("allreduce: expected gain over NCCL's default</text>"));
        // 2 and 4 nodes measured (and marked), 3 predicted.
        assert_eq!(s.matches("<title>measured by the sweep</title>").count(), 2);
        assert!(s.contains(&format!("fill=\"{NCCL_BEST}\"><title>")));
        assert!(s.contains(&format!("fill=\"{NCCL_UNSURE}\"><title>")));
        assert!(s.contains("measured: no setting beat it past the noise"));
        assert!(s.contains("nothing confidently better here"));
        assert!(s.contains(">node count the sweep measured</text>"));
        // Without coverage metadata nothing is claimed measured.
        let bytes0 = testutil::sample();
        let t0 = Table::from_bytes(&bytes0).unwrap();
        let s0 = render(&t0, "t.tbl", &[Coll::AllReduce], None, None);
        assert!(!s0.contains("measured by the sweep"));
        assert!(!s0.contains(&format!("fill=\"{NCCL_BEST}\"><title>")));
    }
}
