//! `dyncc plot --diff OLD NEW`: what changes for jobs when table OLD is
//! replaced by NEW, over message size x node count, drawn with the decision
//! map's grid and axis. Each cell is resolved in both tables the way the
//! plugin resolves a call; its colour says what kind of change it is
//! (NCCL's choice -> a setting, a setting -> NCCL's choice, one setting ->
//! another, or unchanged), and under each map a strip of its own, on a
//! diverging scale, says how much faster or slower NEW expects to be there.
//! The kinds and the effect never share a channel, as in the decision map.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use dyncc_tables::{bucket_lower_bound, bucket_upper_bound, Coll, Decision, Lookup, Table};

use super::{esc, size_axis, size_range, CELL_W, FONT, GAIN_ROW_H, LEFT, ROW_H};
use crate::audit::plane::{live_buckets, patches, plane, Patch, Probe};
use crate::audit::text::{fmt_decision, fmt_span};
use crate::units::{fmt_bytes, fmt_gain};

/// What a call in one cell gets from NEW compared with OLD.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// The same decision (its expected gain may still have moved).
    Unchanged,
    /// OLD left it to NCCL, NEW forces a setting.
    Taken,
    /// OLD forced a setting, NEW leaves it to NCCL.
    Returned,
    /// Both force a setting, a different one.
    Switched,
}

impl Kind {
    pub fn of(old: Decision, new: Decision) -> Kind {
        match (old, new) {
            (o, n) if o == n => Kind::Unchanged,
            (Decision::Default, _) => Kind::Taken,
            (_, Decision::Default) => Kind::Returned,
            _ => Kind::Switched,
        }
    }

    /// The SVG class of a cell of this kind, which tests and style sheets
    /// can select on.
    pub fn class(self) -> &'static str {
        match self {
            Kind::Unchanged => "unchanged",
            Kind::Taken => "changed taken",
            Kind::Returned => "changed returned",
            Kind::Switched => "changed switched",
        }
    }

    /// Colours from a palette readable with the common colour-vision
    /// deficiencies (Paul Tol's "bright"), none of them on the effect
    /// strip's brown-teal scale, so a kind is never read as an effect.
    fn fill(self) -> &'static str {
        match self {
            Kind::Unchanged => "#eeeeee",
            Kind::Taken => "#4477aa",
            Kind::Returned => "#ee6677",
            Kind::Switched => "#aa3377",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Kind::Unchanged => "same decision in both",
            Kind::Taken => "NCCL's choice -> a setting (NEW takes over)",
            Kind::Returned => "a setting -> NCCL's choice (NEW gives it back)",
            Kind::Switched => "one setting -> another",
        }
    }
}

/// A point jobs measured that decided something (`plot --diff --data`):
/// marked on the change map, so a round of the loop is one picture of what
/// its jobs measured and what the table changed.
#[derive(Clone, Debug)]
pub struct TracedMark {
    pub coll: Coll,
    pub nodes: u32,
    pub ppn: u32,
    pub bytes: u64,
    pub communicators: usize,
}

/// One row of a panel: a node span and what each table answers there.
struct Row {
    patch: Patch,
    old: Box<[Lookup; 256]>,
    new: Box<[Lookup; 256]>,
}

impl Row {
    fn kind(&self, b: u8) -> Kind {
        Kind::of(self.old[b as usize].decision, self.new[b as usize].decision)
    }

    /// Expected speedup of NEW over OLD in bucket `b` (> 1 is faster).
    fn effect(&self, b: u8) -> f64 {
        self.new[b as usize].gain as f64 / self.old[b as usize].gain as f64
    }
}

/// The SVG document: one panel per collective and ranks-per-node span
/// either table has a context for.
pub fn render(
    old: &Table,
    new: &Table,
    names: (&str, &str),
    colls: &[Coll],
    min_b: Option<u64>,
    max_b: Option<u64>,
    traced: &[TracedMark],
) -> String {
    let mut marked = 0usize;
    let mut panels: Vec<(Coll, (u32, u32), Vec<Row>)> = Vec::new();
    let (mut first, mut last) = (u8::MAX, 0u8);
    let mut kinds: Vec<Kind> = Vec::new();
    // Each (old, new) decision pair that changes, for the legend's list.
    let mut pairs: BTreeMap<(Kind, String, String), ()> = BTreeMap::new();
    let mut ln_max: f64 = 0.05_f64.ln_1p();
    for &coll in colls {
        let mut by_ppn: BTreeMap<(u32, u32), Vec<Row>> = BTreeMap::new();
        for p in patches(&[old, new], coll) {
            let row = Row {
                patch: p,
                old: plane(old, &p, Probe::PLAIN),
                new: plane(new, &p, Probe::PLAIN),
            };
            for b in live_buckets() {
                let k = row.kind(b);
                if k != Kind::Unchanged {
                    first = first.min(b);
                    last = last.max(b);
                    pairs.insert(
                        (
                            k,
                            fmt_decision(row.old[b as usize].decision),
                            fmt_decision(row.new[b as usize].decision),
                        ),
                        (),
                    );
                }
                if !kinds.contains(&k) {
                    kinds.push(k);
                }
                let e = row.effect(b);
                if e.is_finite() && e > 0.0 {
                    ln_max = ln_max.max(e.ln().abs());
                }
            }
            by_ppn.entry(p.ppn).or_default().push(row);
        }
        for (ppn, rows) in by_ppn {
            panels.push((coll, ppn, rows));
        }
    }
    kinds.sort();
    let (x0, x1) = size_range(first, last, min_b, max_b);
    let cols: Vec<u8> = live_buckets().filter(|b| (x0..=x1).contains(b)).collect();
    let plot_w = cols.len() as f64 * CELL_W;
    let width = (LEFT + plot_w + 24.0).max(600.0);
    // Effect on a diverging scale of its own: brown slower, white the
    // same, teal faster, log ratio over the largest either way.
    let effect_fill = |e: f64| -> String {
        let t = if e.is_finite() && e > 0.0 {
            (e.ln() / ln_max).clamp(-1.0, 1.0)
        } else {
            0.0
        };
        let (end, t) = if t < 0.0 {
            ((140.0, 81.0, 10.0), -t)
        } else {
            ((1.0, 102.0, 94.0), t)
        };
        let mix = |b: f64| (255.0 + (b - 255.0) * t).round() as u8;
        format!("#{:02x}{:02x}{:02x}", mix(end.0), mix(end.1), mix(end.2))
    };

    let mut body = String::new();
    let mut y = 58.0;
    if panels.is_empty() {
        let _ = writeln!(
            body,
            "<text x=\"{LEFT}\" y=\"{y}\" {FONT} font-size=\"13\">Neither table has contexts{}: NCCL decides every call with both.</text>",
            if colls.len() == 1 { format!(" for {}", colls[0].name()) } else { String::new() }
        );
        y += 30.0;
    }
    for (coll, ppn, rows) in &panels {
        let _ = writeln!(
            body,
            "<text x=\"{LEFT}\" y=\"{y}\" {FONT} font-size=\"13\" font-weight=\"bold\">{} \u{2014} {} ranks per node</text>",
            coll.name(),
            fmt_span(ppn.0, ppn.1)
        );
        y += 8.0;
        let top = y;
        // Largest node counts at the top, like a y axis.
        for (i, row) in rows.iter().rev().enumerate() {
            let ry = top + i as f64 * ROW_H;
            let _ = writeln!(
                body,
                "<text x=\"{}\" y=\"{}\" {FONT} font-size=\"11\" text-anchor=\"end\">{}</text>",
                LEFT - 6.0,
                ry + ROW_H / 2.0 + 4.0,
                fmt_span(row.patch.nodes.0, row.patch.nodes.1)
            );
            // Merge neighbours that have the same pair of decisions.
            let same = |a: u8, b: u8| {
                row.old[a as usize].decision == row.old[b as usize].decision
                    && row.new[a as usize].decision == row.new[b as usize].decision
            };
            let mut k = 0;
            while k < cols.len() {
                let mut j = k + 1;
                while j < cols.len() && same(cols[k], cols[j]) {
                    j += 1;
                }
                let b = cols[k];
                let kind = row.kind(b);
                let (od, nd) = (
                    fmt_decision(row.old[b as usize].decision),
                    fmt_decision(row.new[b as usize].decision),
                );
                let (lo, hi) = (
                    fmt_bytes(bucket_lower_bound(b)),
                    fmt_bytes(bucket_upper_bound(cols[j - 1]).saturating_add(1)),
                );
                let tip = if kind == Kind::Unchanged {
                    format!("{lo}..{hi}: {od} in both")
                } else {
                    format!("{lo}..{hi}: {od} -> {nd}")
                };
                let (x, w) = (LEFT + k as f64 * CELL_W, (j - k) as f64 * CELL_W);
                let _ = writeln!(
                    body,
                    "<rect class=\"{}\" x=\"{x:.1}\" y=\"{ry:.1}\" width=\"{w:.1}\" height=\"{ROW_H}\" fill=\"{}\"><title>{}</title></rect>",
                    kind.class(),
                    kind.fill(),
                    esc(&tip)
                );
                k = j;
            }
            let _ = writeln!(body, "<line x1=\"{LEFT}\" y1=\"{ry:.1}\" x2=\"{:.1}\" y2=\"{ry:.1}\" stroke=\"#ffffff\" stroke-width=\"1\"/>", LEFT + plot_w);
            // What jobs measured in this row, one ring per point.
            for m in traced.iter().filter(|m| {
                m.coll == *coll
                    && (row.patch.nodes.0..=row.patch.nodes.1).contains(&m.nodes)
                    && (row.patch.ppn.0..=row.patch.ppn.1).contains(&m.ppn)
            }) {
                let b = dyncc_tables::size_bucket(m.bytes);
                let Some(ci) = cols.iter().position(|&c| c == b) else {
                    continue;
                };
                marked += 1;
                let _ = writeln!(
                    body,
                    "<circle class=\"traced\" cx=\"{:.1}\" cy=\"{:.1}\" r=\"3.5\" fill=\"none\" stroke=\"#111111\" stroke-width=\"1.4\"><title>{}</title></circle>",
                    LEFT + (ci as f64 + 0.5) * CELL_W,
                    ry + ROW_H / 2.0,
                    esc(&format!(
                        "jobs measured {} at {} nodes: {} communicator{}",
                        fmt_bytes(m.bytes),
                        m.nodes,
                        m.communicators,
                        if m.communicators == 1 { "" } else { "s" }
                    ))
                );
            }
        }
        let h = rows.len() as f64 * ROW_H;
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
        // The effect, same rows and columns, on its own scale.
        let _ = writeln!(
            body,
            "<text x=\"{LEFT}\" y=\"{y:.1}\" {FONT} font-size=\"11\" fill=\"#444\">{}: expected effect of NEW over OLD (by the tables' own gains)</text>",
            coll.name()
        );
        y += 6.0;
        let etop = y;
        for (i, row) in rows.iter().rev().enumerate() {
            let ry = etop + i as f64 * GAIN_ROW_H;
            let mut k = 0;
            while k < cols.len() {
                let e = row.effect(cols[k]);
                let mut j = k + 1;
                while j < cols.len() && (row.effect(cols[j]) - e).abs() <= 1e-6 {
                    j += 1;
                }
                let (x, w) = (LEFT + k as f64 * CELL_W, (j - k) as f64 * CELL_W);
                let _ = writeln!(
                    body,
                    "<rect class=\"effect\" x=\"{x:.1}\" y=\"{ry:.1}\" width=\"{w:.1}\" height=\"{GAIN_ROW_H}\" fill=\"{}\"><title>{}</title></rect>",
                    effect_fill(e),
                    esc(&format!(
                        "{}..{}: {}",
                        fmt_bytes(bucket_lower_bound(cols[k])),
                        fmt_bytes(bucket_upper_bound(cols[j - 1]).saturating_add(1)),
                        fmt_gain(e)
                    ))
                );
                k = j;
            }
        }
        let eh = rows.len() as f64 * GAIN_ROW_H;
        let _ = writeln!(body, "<rect x=\"{LEFT}\" y=\"{etop:.1}\" width=\"{plot_w:.1}\" height=\"{eh:.1}\" fill=\"none\" stroke=\"#555\" stroke-width=\"0.8\"/>");
        y = etop + eh + 36.0;
    }

    // Legend: the kinds drawn, each changed decision pair, the effect scale.
    let mut legend = String::new();
    let _ = writeln!(legend, "<text x=\"{LEFT}\" y=\"{y:.1}\" {FONT} font-size=\"12\" font-weight=\"bold\">legend</text>");
    y += 10.0;
    for k in &kinds {
        let _ = writeln!(legend, "<rect x=\"{LEFT}\" y=\"{y:.1}\" width=\"14\" height=\"14\" fill=\"{}\" stroke=\"#555\" stroke-width=\"0.5\"/>", k.fill());
        let _ = writeln!(
            legend,
            "<text x=\"{:.1}\" y=\"{:.1}\" {FONT} font-size=\"11\">{}</text>",
            LEFT + 20.0,
            y + 11.0,
            esc(k.label())
        );
        y += 20.0;
    }
    if !traced.is_empty() {
        let _ = writeln!(legend, "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3.5\" fill=\"none\" stroke=\"#111111\" stroke-width=\"1.4\"/>", LEFT + 7.0, y + 7.0);
        let _ = writeln!(
            legend,
            "<text x=\"{:.1}\" y=\"{:.1}\" {FONT} font-size=\"11\">a point jobs measured (--data; {marked} drawn): what this round of the loop read</text>",
            LEFT + 20.0,
            y + 11.0
        );
        y += 20.0;
    }
    if pairs.is_empty() && !panels.is_empty() {
        let _ = writeln!(
            legend,
            "<text x=\"{LEFT}\" y=\"{:.1}\" {FONT} font-size=\"11\">no decision differs: every call gets the same decision from both tables</text>",
            y + 11.0
        );
        y += 20.0;
    } else if !pairs.is_empty() {
        let _ = writeln!(
            legend,
            "<text x=\"{LEFT}\" y=\"{:.1}\" {FONT} font-size=\"11\" fill=\"#444\">changes drawn (OLD -> NEW):</text>",
            y + 11.0
        );
        y += 18.0;
        for (k, o, n) in pairs.keys() {
            let _ = writeln!(
                legend,
                "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"10\" height=\"10\" fill=\"{}\"/>",
                LEFT + 8.0,
                y + 2.0,
                k.fill()
            );
            let _ = writeln!(
                legend,
                "<text x=\"{:.1}\" y=\"{:.1}\" {FONT} font-size=\"11\">{}</text>",
                LEFT + 24.0,
                y + 11.0,
                esc(&format!("{o} -> {n}"))
            );
            y += 16.0;
        }
        y += 6.0;
    }
    let _ = writeln!(
        legend,
        "<text x=\"{LEFT}\" y=\"{:.1}\" {FONT} font-size=\"11\">expected effect:</text>",
        y + 11.0
    );
    let steps = 9;
    for i in 0..steps {
        let t = -1.0 + 2.0 * i as f64 / (steps - 1) as f64;
        let x = LEFT + 100.0 + i as f64 * 16.0;
        let _ = writeln!(legend, "<rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"16\" height=\"14\" fill=\"{}\" stroke=\"#999\" stroke-width=\"0.3\"/>", effect_fill((t * ln_max).exp()));
    }
    for (x, anchor, e) in [
        (LEFT + 100.0, "start", (-ln_max).exp()),
        (LEFT + 100.0 + steps as f64 * 8.0, "middle", 1.0),
        (LEFT + 100.0 + steps as f64 * 16.0, "end", ln_max.exp()),
    ] {
        let _ = writeln!(
            legend,
            "<text x=\"{x:.1}\" y=\"{:.1}\" {FONT} font-size=\"10\" text-anchor=\"{anchor}\">{}</text>",
            y + 26.0,
            esc(&fmt_gain(e))
        );
    }
    y += 50.0;

    let title = format!(
        "dyncc change map: {} -> {}  (digests {:016x} -> {:016x})",
        names.0,
        names.1,
        old.digest(),
        new.digest()
    );
    // Wide enough for the title (about 8 px a character at 14 px bold).
    let width = width.max(28.0 + title.chars().count() as f64 * 8.0);
    let mut s = String::new();
    let _ = writeln!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width:.0}\" height=\"{y:.0}\" viewBox=\"0 0 {width:.0} {y:.0}\">"
    );
    let _ = writeln!(s, "<rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>");
    let _ = writeln!(
        s,
        "<text x=\"14\" y=\"24\" {FONT} font-size=\"14\" font-weight=\"bold\">{}</text>",
        esc(&title)
    );
    let _ = writeln!(
        s,
        "<text x=\"14\" y=\"40\" {FONT} font-size=\"11\" fill=\"#444\">colour = kind of change (hover a cell for both decisions); the expected effect is drawn under each map</text>"
    );
    s.push_str(&body);
    s.push_str(&legend);
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::testutil;
    use dyncc_tables::*;

    #[test]
    fn kinds_follow_the_pair_of_decisions() {
        let t = testutil::force(Algo::Tree, Proto::LL, 0);
        let r = testutil::force(Algo::Ring, Proto::LL, 0);
        assert_eq!(Kind::of(t, t), Kind::Unchanged);
        assert_eq!(
            Kind::of(Decision::Default, Decision::Default),
            Kind::Unchanged
        );
        assert_eq!(Kind::of(Decision::Default, t), Kind::Taken);
        assert_eq!(Kind::of(t, Decision::Default), Kind::Returned);
        assert_eq!(Kind::of(t, r), Kind::Switched);
    }

    #[test]
    fn identical_tables_draw_no_change() {
        let b = testutil::sample();
        let t = Table::from_bytes(&b).unwrap();
        let s = render(&t, &t, ("a", "a"), &Coll::ALL, None, None, &[]);
        assert!(!s.contains("class=\"changed"), "{s}");
        assert!(s.contains("no decision differs"));
        assert!(s.contains("class=\"unchanged\""));
    }
}
