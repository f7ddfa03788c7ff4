//! `dyncc export`: the table's decisions as a rule file for NVIDIA's
//! example tuner plugin (`plugins/tuner/example`, read from
//! `NCCL_TUNER_CONFIG_FILE`), for sites that must run that plugin.
//!
//! The example matches rules linearly with exact nNodes/nRanks (or -1 for
//! any), so dyncc resolves its own first-match contexts into disjoint
//! regions first and writes one rule per region and node count; what the
//! format cannot say is listed in the file's header.

use std::fmt::Write as _;
use std::path::PathBuf;

use dyncc_tables::{
    bucket_is_empty, bucket_lower_bound, bucket_upper_bound, Coll, Comm, Decision, RegBuff,
    Setting, Table,
};

use crate::audit::files::{open, read_table, write_output_or_stdout};
use crate::audit::plane::patches;
use crate::audit::text::fmt_span;

/// Export formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ExportFormat {
    /// CSV rules for NVIDIA's example tuner plugin (NCCL_TUNER_CONFIG_FILE).
    NcclCsv,
}

/// Write the table's decisions as rules for NVIDIA's example tuner plugin.
///
/// The CSV (collective_type,min_bytes,max_bytes,algorithm,protocol,
/// channels,nNodes,nRanks,numPipeOps,regBuff) is what
/// plugins/tuner/example reads from NCCL_TUNER_CONFIG_FILE. It cannot say
/// everything a dyncc table says; the file's header lists what was lost.
/// Read the WARNING it prints: that plugin limits every call no rule
/// matches to ONE channel.
///
/// Examples:
///   dyncc export cluster.tbl --format nccl-csv -o nccl_tuner.conf
///   NCCL_TUNER_PLUGIN=example NCCL_TUNER_CONFIG_FILE=$PWD/nccl_tuner.conf ./train
#[derive(clap::Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct ExportArgs {
    /// The table (written by `dyncc compile`).
    pub table: PathBuf,
    /// Output format.
    #[arg(long, value_enum, default_value_t = ExportFormat::NcclCsv)]
    pub format: ExportFormat,
    /// Write here (atomically) instead of stdout.
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// Node ranges are written one rule per node count, up to this count.
    #[arg(long, default_value_t = 64)]
    pub max_nodes: u32,
    /// Ranks-per-node ranges are written one rule per value, up to this value.
    #[arg(long, default_value_t = 16)]
    pub max_ppn: u32,
}

/// The rules and what could not be expressed.
#[derive(Clone, Debug, Default)]
pub struct Csv {
    pub rows: Vec<String>,
    pub lost: Vec<String>,
    /// Rules whose channels are -1 (NCCL's choice in dyncc; ONE channel in the example plugin).
    pub default_channel_rows: usize,
}

fn expand(
    lo: u32,
    hi: u32,
    max: u32,
    what: &str,
    lost: &mut Vec<String>,
    region: &str,
) -> Vec<u32> {
    let top = hi.min(max.max(lo));
    if hi > top {
        lost.push(format!(
            "{region}: {what} {} written only up to {top}; above that the example plugin leaves NCCL alone \
             (raise --max-{})",
            fmt_span(lo, hi),
            if what == "nodes" { "nodes" } else { "ppn" }
        ));
    }
    (lo..=top).collect()
}

/// Resolves `table` into example-plugin rules.
pub fn to_csv(table: &Table, max_nodes: u32, max_ppn: u32) -> Csv {
    let mut csv = Csv::default();
    for coll in Coll::ALL.iter().rev().copied() {
        for p in patches(&[table], coll) {
            let Some(ctx) = table.find_context(
                coll,
                &Comm::new(p.nodes.0 as u64 * p.ppn.0 as u64, p.nodes.0 as u64),
            ) else {
                continue;
            };
            let spec = ctx.spec();
            let rules: Vec<_> = ctx.rules().collect();
            let runs: Vec<(u64, u64, Decision)> = rules
                .iter()
                .enumerate()
                .filter(|(_, r)| r.decision.is_forced())
                .map(|(i, r)| {
                    let first = if i == 0 {
                        0
                    } else {
                        rules[i - 1].last_bucket.saturating_add(1)
                    };
                    let lo = if bucket_is_empty(first) {
                        4
                    } else {
                        bucket_lower_bound(first)
                    };
                    (lo, bucket_upper_bound(r.last_bucket), r.decision)
                })
                .collect();
            // Neighbouring rules that differ only in basis or gain are one CSV rule.
            let mut forced: Vec<(u64, u64, Decision)> = Vec::new();
            for r in runs {
                match forced.last_mut() {
                    Some(last) if last.2 == r.2 && last.1.checked_add(1) == Some(r.0) => {
                        last.1 = r.1
                    }
                    _ => forced.push(r),
                }
            }
            if forced.is_empty() {
                continue;
            }
            let region = format!(
                "{} nodes {} ranks/node {}",
                coll.name(),
                fmt_span(p.nodes.0, p.nodes.1),
                fmt_span(p.ppn.0, p.ppn.1)
            );
            // (nNodes, nRanks) pairs; -1 = any.
            let full = |s: (u32, u32)| s.0 <= 1 && s.1 == u32::MAX;
            let mut shapes: Vec<(i64, i64)> = Vec::new();
            if full(p.ppn) {
                if full(p.nodes) {
                    shapes.push((-1, -1));
                } else {
                    for n in expand(
                        p.nodes.0,
                        p.nodes.1,
                        max_nodes,
                        "nodes",
                        &mut csv.lost,
                        &region,
                    ) {
                        shapes.push((n as i64, -1));
                    }
                }
            } else {
                let ns = expand(
                    p.nodes.0.max(1),
                    p.nodes.1,
                    max_nodes,
                    "nodes",
                    &mut csv.lost,
                    &region,
                );
                let ps = expand(
                    p.ppn.0.max(1),
                    p.ppn.1,
                    max_ppn,
                    "ranks/node",
                    &mut csv.lost,
                    &region,
                );
                for n in ns {
                    for &q in &ps {
                        shapes.push((n as i64, n as i64 * q as i64));
                    }
                }
            }
            let pipe: Vec<i64> = match spec.max_pipe_ops {
                0 => vec![-1],
                m => (1..=m.min(64) as i64).collect(),
            };
            if spec.max_pipe_ops > 64 {
                csv.lost.push(format!(
                    "{region}: numPipeOps <= {} written only up to 64",
                    spec.max_pipe_ops
                ));
            }
            let reg = match spec.reg_buff {
                RegBuff::Any => -1,
                RegBuff::Only0 => 0,
                RegBuff::Only1 => 1,
            };
            for &(n, r) in &shapes {
                for &(lo, hi, d) in &forced {
                    let Decision::Force(Setting {
                        algo,
                        proto,
                        channels,
                        chunk,
                    }) = d
                    else {
                        continue;
                    };
                    if !chunk.is_nccl() {
                        // NCCL's example tuner has no chunk column: the
                        // rule runs at NCCL's chunk, which was not measured.
                        let l = format!(
                            "{region}: chunk size {chunk} of {} dropped (the example \
                             tuner's CSV has no chunk column; the rule runs at NCCL's)",
                            d_name(d)
                        );
                        if !csv.lost.contains(&l) {
                            csv.lost.push(l);
                        }
                    }
                    let ch: i64 = if channels == 0 { -1 } else { channels as i64 };
                    if ch == -1 {
                        csv.default_channel_rows += pipe.len();
                    }
                    for &po in &pipe {
                        csv.rows.push(format!(
                            "{},{lo},{hi},{},{},{ch},{n},{r},{po},{reg}",
                            coll.name(),
                            algo.name(),
                            proto.name()
                        ));
                    }
                }
            }
        }
    }
    csv
}

/// `ring/simple/64K`, as the reports name a decision.
fn d_name(d: Decision) -> String {
    match d {
        Decision::Force(s) => s.to_string(),
        Decision::Default => "default".into(),
    }
}

/// The whole file: header comments, then the rules.
pub fn render(table: &Table, name: &str, csv: &Csv) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# NCCL example tuner rules exported by dyncc {} from {name}",
        env!("CARGO_PKG_VERSION")
    );
    let _ = writeln!(
        s,
        "# table digest {:016x}; {} rules",
        table.digest(),
        csv.rows.len()
    );
    let _ = writeln!(s, "# Use: NCCL_TUNER_PLUGIN=<path>/libnccl-tuner-example.so NCCL_TUNER_CONFIG_FILE=<this file>");
    let _ = writeln!(s, "#");
    let _ = writeln!(s, "# WARNING: the example plugin sets nChannels=1 on entry for every call. Every call no rule");
    let _ = writeln!(
        s,
        "# WARNING: below matches, and every rule with channels=-1 ({} here), runs on ONE channel,",
        csv.default_channel_rows
    );
    let _ = writeln!(s, "# WARNING: not NCCL's choice (NCCL's keep-default value is 0, which the example never writes).");
    let _ = writeln!(
        s,
        "# WARNING: Prefer the dyncc plugin, or patch the example to preset *nChannels = 0."
    );
    let _ = writeln!(s, "#");
    let _ = writeln!(s, "# What this CSV cannot express (the dyncc table can):");
    let _ = writeln!(s, "# - leaving NCCL alone is expressed by absence: sizes and shapes without a rule get NCCL's");
    let _ = writeln!(
        s,
        "#   algorithm and protocol (but one channel, see WARNING);"
    );
    let _ = writeln!(s, "# - node and ranks-per-node ranges: one rule per node count and ranks per node, up to a bound;");
    let _ = writeln!(
        s,
        "# - numPipeOps <= k: one rule per value; expected gains and measured/extrapolated basis;"
    );
    let _ = writeln!(s, "# - a forced setting NCCL has disabled: the example keeps scanning, dyncc leaves NCCL alone.");
    if csv.lost.is_empty() {
        let _ = writeln!(s, "# Nothing of this table was lost within those limits.");
    } else {
        let _ = writeln!(s, "# Lost in this export:");
        for l in &csv.lost {
            for chunk in wrap(l, 90) {
                let _ = writeln!(s, "#   {chunk}");
            }
        }
    }
    let _ = writeln!(s, "#");
    let _ = writeln!(s, "# collective_type,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,nRanks,numPipeOps,regBuff");
    for r in &csv.rows {
        s.push_str(r);
        s.push('\n');
    }
    s
}

fn wrap(s: &str, width: usize) -> Vec<String> {
    let mut out = vec![String::new()];
    for w in s.split(' ') {
        let cur = out.last_mut().expect("non-empty");
        if !cur.is_empty() && cur.len() + 1 + w.len() > width {
            out.push(w.to_string());
        } else {
            if !cur.is_empty() {
                cur.push(' ');
            }
            cur.push_str(w);
        }
    }
    out
}

pub fn run(a: ExportArgs) -> anyhow::Result<i32> {
    // Writing the export over the table would destroy it.
    if let Some(o) = &a.output {
        crate::atomic::check_output(o, [a.table.as_path()], "csv")?;
    }
    let bytes = read_table(&a.table)?;
    let table = open(&a.table, &bytes)?;
    let ExportFormat::NcclCsv = a.format;
    let csv = to_csv(&table, a.max_nodes, a.max_ppn);
    let text = render(&table, &a.table.display().to_string(), &csv);
    eprintln!(
        "WARNING: NVIDIA's example tuner plugin runs every call that no rule matches, and every rule with channels=-1 \
         ({} of {} rules here), on ONE channel (it presets nChannels=1). Expect large collectives outside the rules \
         to be much slower than with NCCL alone. The dyncc plugin does not have this problem.",
        csv.default_channel_rows,
        csv.rows.len()
    );
    if !csv.lost.is_empty() {
        eprintln!(
            "note: {} region(s) could not be fully expressed; the file's header lists them",
            csv.lost.len()
        );
    }
    match &a.output {
        Some(p) => {
            write_output_or_stdout(p, text.as_bytes(), 0o644)?;
            eprintln!("wrote {} ({} rules)", p.display(), csv.rows.len());
        }
        None => print!("{text}"),
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::testutil;

    #[test]
    fn rows_are_exact_shapes_with_example_names() {
        let b = testutil::sample();
        let t = Table::from_bytes(&b).unwrap();
        let csv = to_csv(&t, 64, 16);
        assert_eq!(
            csv.rows,
            [
                format!("allreduce,0,{},tree,ll,-1,2,16,-1,-1", 65536 + 16383),
                format!("allreduce,0,{},tree,ll,-1,3,24,-1,-1", 65536 + 16383),
                format!(
                    "allreduce,{},{},ring,ll128,16,4,32,-1,-1",
                    1 << 20,
                    u64::MAX
                ),
            ]
        );
        assert_eq!(csv.default_channel_rows, 2);
        assert!(csv.lost.is_empty());
        let text = render(&t, "t.tbl", &csv);
        for l in text.lines() {
            assert!(
                l.len() < 255,
                "the example plugin cuts lines at 255 chars: {l}"
            );
            assert!(l.starts_with('#') || l.split(',').count() == 10, "{l}");
        }
    }

    #[test]
    fn open_node_ranges_are_bounded_and_reported() {
        let mut bld = dyncc_tables::TableBuilder::new();
        bld.context(
            dyncc_tables::ContextSpec {
                coll: Coll::AllGather,
                nodes: (2, u32::MAX),
                ppn: (8, 8),
                max_pipe_ops: 0,
                reg_buff: RegBuff::Only0,
            },
            &[dyncc_tables::Rule {
                last_bucket: 255,
                decision: testutil::force(dyncc_tables::Algo::Ring, dyncc_tables::Proto::Simple, 4),
                basis: dyncc_tables::Basis::Extrapolated,
                gain: 1.1,
            }],
        )
        .unwrap();
        let b = bld.build().unwrap();
        let t = Table::from_bytes(&b).unwrap();
        let csv = to_csv(&t, 5, 16);
        assert_eq!(csv.rows.len(), 4, "{:?}", csv.rows);
        assert_eq!(
            csv.rows[0],
            format!("allgather,0,{},ring,simple,4,2,16,-1,0", u64::MAX)
        );
        assert_eq!(csv.lost.len(), 1);
        assert!(
            csv.lost[0].contains("written only up to 5"),
            "{:?}",
            csv.lost
        );
    }
}
