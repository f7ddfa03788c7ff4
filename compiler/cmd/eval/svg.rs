//! `dyncc eval --svg FILE`: where the table wins and where it regresses,
//! over message size x node count, one panel per scenario, collective and
//! ranks per node. Each scored cell is coloured by t(table) / t(NCCL's
//! default) on a diverging scale (teal faster, brown slower, white the
//! same); a regression (more than 5 % slower) is outlined in red, so the
//! cells a user would meet slower stand out whatever the colour scale.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use crate::eval::{Scored, REGRESSION};
use crate::units::fmt_bytes;

const CELL_W: f64 = 14.0;
const CELL_H: f64 = 16.0;
const LEFT: f64 = 70.0;
const TOP_PAD: f64 = 46.0;
const AXIS: f64 = 36.0;
/// Outline of a regression.
pub const REGRESSION_STROKE: &str = "#d7191c";

/// The colour of t(table) / t(default) = `r`: teal for faster (full at
/// 1.5x), brown for slower (full at 1.25x slower), white at 1.
fn shade(r: f64) -> String {
    let (full, rgb) = if r < 1.0 {
        ((1.0 / r).ln() / 1.5f64.ln(), (1u8, 133u8, 113u8))
    } else {
        (r.ln() / 1.25f64.ln(), (166, 97, 26))
    };
    let t = full.clamp(0.0, 1.0);
    let mix = |c: u8| (255.0 + (f64::from(c) - 255.0) * t).round() as u8;
    format!("#{:02x}{:02x}{:02x}", mix(rgb.0), mix(rgb.1), mix(rgb.2))
}

/// The SVG for `scenarios`: (title, scored cells) each.
pub fn render(scenarios: &[(&str, &[Scored])]) -> String {
    // Panels: (scenario, collective, ranks per node) -> cells.
    type Key<'a> = (usize, &'a str, u32);
    let mut panels: BTreeMap<Key<'_>, Vec<&Scored>> = BTreeMap::new();
    for (i, (_, cells)) in scenarios.iter().enumerate() {
        for c in cells.iter() {
            let ppn = c.nranks / c.nnodes.max(1);
            panels
                .entry((i, c.collective.as_str(), ppn))
                .or_default()
                .push(c);
        }
    }
    let mut body = String::new();
    let mut y = 10.0;
    let mut width: f64 = 820.0;
    let mut regressions = 0usize;
    for ((i, coll, ppn), cells) in &panels {
        let sizes: Vec<u64> = cells
            .iter()
            .map(|c| c.nbytes)
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let nodes: Vec<u32> = cells
            .iter()
            .map(|c| c.nnodes)
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let slow = cells.iter().filter(|c| c.vs_default > REGRESSION).count();
        regressions += slow;
        let title = format!(
            "{}: {coll}, {ppn} ranks per node ({} cells, {slow} more than 5 % slower than NCCL's default)",
            scenarios[*i].0,
            cells.len()
        );
        // About 7 px a character at 13 px bold sans-serif.
        width = width.max(LEFT + 7.0 * title.chars().count() as f64);
        let _ = writeln!(
            body,
            "<text x=\"10\" y=\"{:.1}\" font-size=\"13\" font-weight=\"bold\">{}</text>",
            y + 14.0,
            xml(&title)
        );
        let top = y + TOP_PAD - 20.0;
        for (ri, n) in nodes.iter().rev().enumerate() {
            let _ = writeln!(
                body,
                "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"10\" text-anchor=\"end\">{n} node{}</text>",
                LEFT - 4.0,
                top + ri as f64 * CELL_H + 11.0,
                if *n == 1 { "" } else { "s" }
            );
        }
        for c in cells {
            let xi = sizes.binary_search(&c.nbytes).unwrap_or(0);
            let yi = nodes.len() - 1 - nodes.binary_search(&c.nnodes).unwrap_or(0);
            let (x, yy) = (LEFT + xi as f64 * CELL_W, top + yi as f64 * CELL_H);
            let slow = c.vs_default > REGRESSION;
            let stroke = if slow {
                format!(" stroke=\"{REGRESSION_STROKE}\" stroke-width=\"2\" class=\"regression\"")
            } else {
                " stroke=\"#ffffff\" stroke-width=\"0.5\"".to_string()
            };
            let _ = writeln!(
                body,
                "<rect x=\"{x:.1}\" y=\"{yy:.1}\" width=\"{CELL_W}\" height=\"{CELL_H}\" fill=\"{}\"{stroke}><title>{coll} {} on {} nodes x {} ranks: {} ran {:+.1} % vs NCCL's default ({:.1} % of the best measured){}</title></rect>",
                shade(c.vs_default),
                xml(&fmt_bytes(c.nbytes)),
                c.nnodes,
                c.nranks,
                xml(&c.choice),
                100.0 * (1.0 / c.vs_default - 1.0),
                100.0 / c.table,
                if slow { "; a regression" } else { "" }
            );
        }
        let axis_y = top + nodes.len() as f64 * CELL_H + 12.0;
        let step = (sizes.len() / 8).max(1);
        for (xi, s) in sizes.iter().enumerate().step_by(step) {
            let _ = writeln!(
                body,
                "<text x=\"{:.1}\" y=\"{axis_y:.1}\" font-size=\"9\">{}</text>",
                LEFT + xi as f64 * CELL_W,
                xml(&fmt_bytes(*s))
            );
        }
        width = width.max(LEFT + sizes.len() as f64 * CELL_W + 20.0);
        y = axis_y + AXIS - 12.0;
    }
    let legend_y = y + 14.0;
    let mut legend = String::new();
    for (k, r) in [1.0 / 1.5, 1.0 / 1.2, 1.0 / 1.05, 1.0, 1.05, 1.25]
        .iter()
        .enumerate()
    {
        let x = LEFT + k as f64 * 70.0;
        let outline = if *r > REGRESSION {
            format!(" stroke=\"{REGRESSION_STROKE}\" stroke-width=\"2\"")
        } else {
            String::new()
        };
        let _ = writeln!(
            legend,
            "<rect x=\"{x:.1}\" y=\"{legend_y:.1}\" width=\"{CELL_W}\" height=\"{CELL_H}\" fill=\"{}\"{outline}/><text x=\"{:.1}\" y=\"{:.1}\" font-size=\"10\">{:+.0} %</text>",
            shade(*r),
            x + CELL_W + 4.0,
            legend_y + 12.0,
            100.0 * (1.0 / r - 1.0)
        );
    }
    let _ = writeln!(
        legend,
        "<text x=\"{LEFT}\" y=\"{:.1}\" font-size=\"10\">speed of the table's choice vs NCCL's default; outlined red: more than 5 % slower (a regression); {regressions} in all</text>",
        legend_y + CELL_H + 16.0
    );
    let height = legend_y + CELL_H + 30.0;
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width:.0}\" height=\"{height:.0}\" font-family=\"sans-serif\">\n<rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n{body}{legend}</svg>\n"
    )
}

/// Text for an SVG text node or attribute.
fn xml(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(nodes: u32, bytes: u64, vs_default: f64) -> Scored {
        Scored {
            collective: "allreduce".into(),
            nbytes: bytes,
            nnodes: nodes,
            nranks: nodes * 8,
            choice: "ring/ll".into(),
            table: 1.0,
            default: vs_default.recip(),
            vs_default,
            visible: None,
        }
    }

    #[test]
    fn a_regression_is_outlined_and_counted_and_the_rest_are_not() {
        let cells = [cell(2, 1024, 0.8), cell(4, 1024, 1.10), cell(4, 2048, 1.02)];
        let s = render(&[("t.tbl on sweep", &cells)]);
        assert!(s.starts_with("<svg") && s.trim_end().ends_with("</svg>"));
        assert_eq!(s.matches("class=\"regression\"").count(), 1);
        assert!(s.contains("1 more than 5 % slower"));
        assert!(s.contains("on 4 nodes x 32 ranks: ring/ll ran -9.1 %"));
        assert!(s.contains("1 in all"));
        assert_eq!(shade(1.0), "#ffffff");
    }
}
