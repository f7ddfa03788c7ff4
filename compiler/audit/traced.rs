//! What jobs measured near one call, for `dyncc query --data SWEEP TRACES`
//! (and inside a changed region, for `dyncc diff --data`):
//! the points compile reads from the same traces (through the pipeline's
//! one reading, [`crate::pipeline::trace_cells`]), at the traced
//! communicator shape nearest the call and the traced sizes around it. A
//! decision at a count jobs ran rests on these; a setting short of the
//! evidence rule is shown with why it decides nothing.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use serde::Serialize;

use dyncc_tables::Table;

use crate::ingest::args::IngestArgs;

use crate::decide::DecideOptions;
use crate::ingest::traces::{Finding, TraceNotes, TracedGain, TracedPoint, Verdict};
use crate::record::{Cell, Collective, TimeBase};
use crate::units::fmt_bytes;

/// Jobs' measurements at one size of the traced shape nearest a call.
#[derive(Clone, Debug, Serialize)]
pub struct TracedSize {
    pub bytes: u64,
    /// The setting jobs that let NCCL choose saw it run here, at a count
    /// the sweep skipped (forcing it runs the same, so the plan does not
    /// list it).
    pub nccl_runs: Option<String>,
    /// Where a setting met the evidence rule: NCCL's choice, what the
    /// jobs' table did and each setting's gain over NCCL's choice.
    pub point: Option<TracedPoint>,
    /// Settings measured here whose evidence decides nothing (too few
    /// calls or communicators, or within the noise), or where jobs and the
    /// sweep disagree.
    pub findings: Vec<Finding>,
}

/// The bar traces are judged by: the table's own (`margin` and `noise_z`
/// in its metadata, as `dyncc compile` wrote them), so `query` reads the
/// jobs' evidence as the compile that made the table read it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct TraceBar {
    pub margin: f64,
    pub noise_z: f64,
    /// Whether the table said its noise_z (tables compiled before it was
    /// recorded did not: compile's default is used, and the text says so).
    pub noise_z_from_table: bool,
}

impl TraceBar {
    /// The bar `table` was compiled with. A value compile would not take
    /// is an error naming the key: a table with an edited or damaged bar
    /// would have its evidence judged by another.
    pub fn of_table(table: &Table<'_>) -> anyhow::Result<TraceBar> {
        // Compile's own bounds on --margin and --noise-z.
        let read = |key: &str, default: f64, max: f64| -> anyhow::Result<(f64, bool)> {
            let Some(v) = table.meta(key).filter(|v| !v.is_empty()) else {
                return Ok((default, false));
            };
            match v.parse::<f64>() {
                Ok(x) if x.is_finite() && (0.0..max).contains(&x) => Ok((x, true)),
                _ => anyhow::bail!(
                    "the table's metadata {key} = {v:?} is not a number compile takes, so the \
                     traces cannot be judged by the bar the table was compiled with; recompile \
                     the table (`dyncc compile SWEEP TRACES -o TABLE`)"
                ),
            }
        };
        let defaults = DecideOptions::default();
        let (margin, _) = read("margin", defaults.margin, 1.0)?;
        let (noise_z, noise_z_from_table) = read("noise_z", defaults.z, f64::INFINITY)?;
        Ok(TraceBar {
            margin,
            noise_z,
            noise_z_from_table,
        })
    }

    /// Compile's options with this bar.
    pub fn decide(&self) -> DecideOptions {
        DecideOptions {
            margin: self.margin,
            z: self.noise_z,
            ..DecideOptions::default()
        }
    }
}

/// What jobs that let NCCL choose saw it run at a call's shape and size
/// bucket, where most of their communicators saw a path the tuner cannot
/// choose ([`crate::record::TimeBase::OtherPath`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct OtherPathSeen {
    /// NCCL's own calls on a symmetric kernel or the copy engines, and on
    /// a classic pair.
    pub calls: u64,
    pub classic_calls: u64,
    /// Communicators that saw it mostly run that path, and mostly a
    /// classic pair.
    pub communicators: u32,
    pub classic_communicators: u32,
}

/// Jobs' measurements near a call.
#[derive(Clone, Debug, Serialize)]
pub struct TracedEvidence {
    /// The bar the evidence was judged by.
    pub bar: TraceBar,
    /// Trace files used though of another platform or sweep than the
    /// table's (`--foreign-traces`).
    pub foreign: Vec<String>,
    pub nodes: u32,
    pub ranks: u32,
    /// Whether jobs measured this exact communicator shape.
    pub exact_shape: bool,
    pub sizes: Vec<TracedSize>,
    /// Where jobs that let NCCL choose at the call's own shape and size
    /// bucket saw it run a symmetric kernel or a copy-engine method in
    /// most of its calls.
    pub other_path: Option<OtherPathSeen>,
    /// Trace files that could not be read (skipped).
    pub skipped: usize,
}

/// What traces say, kept for a run of calls: the points, the findings and
/// the marks of what NCCL runs at counts the sweep skipped.
pub struct Traced {
    notes: TraceNotes,
    marks: Vec<Cell>,
    /// Marks of a path the tuner cannot choose ([`TimeBase::OtherPath`]).
    other_paths: Vec<Cell>,
    skipped: usize,
    bar: TraceBar,
}

/// Where one thing jobs said sits: collective, shape and size.
#[derive(Clone, Copy, PartialEq)]
struct At {
    coll: &'static str,
    nodes: u32,
    ranks: u32,
    bytes: u64,
}

impl At {
    fn point(p: &TracedPoint) -> At {
        At {
            coll: p.collective,
            nodes: p.nodes,
            ranks: p.ranks,
            bytes: p.bytes,
        }
    }

    fn finding(f: &Finding) -> At {
        At {
            coll: f.collective,
            nodes: f.nodes,
            ranks: f.ranks,
            bytes: f.bytes,
        }
    }

    fn mark(c: &Cell) -> At {
        At {
            coll: c.key.collective.name(),
            nodes: c.key.nnodes,
            ranks: c.key.nranks,
            bytes: c.key.nbytes,
        }
    }
}

impl Traced {
    /// From what [`crate::pipeline::trace_cells`] returned (`cells` may
    /// hold every traced cell: only the marks are kept) and the number of
    /// trace files skipped.
    pub fn new(cells: Vec<Cell>, notes: TraceNotes, skipped: usize, bar: TraceBar) -> Traced {
        let (marks, other_paths) = cells
            .into_iter()
            .filter(|c| !c.base.is_time())
            .partition(|c| c.base == TimeBase::NcclRan);
        Traced {
            notes,
            marks,
            other_paths,
            skipped,
            bar,
        }
    }

    /// The points jobs measured that decided a setting's fate (those
    /// compile's report lists).
    pub fn points(&self) -> impl Iterator<Item = &TracedPoint> {
        self.notes.points.iter()
    }

    fn findings(&self) -> impl Iterator<Item = &Finding> {
        let r = &self.notes.read;
        r.short_of_evidence.iter().chain(&r.disagree_with_sweep)
    }

    fn places(&self) -> impl Iterator<Item = At> + '_ {
        let points = self.notes.points.iter().map(At::point);
        let findings = self.findings().map(At::finding);
        let marks = self.marks.iter().map(At::mark);
        points.chain(findings).chain(marks)
    }

    /// Jobs' measurements at the traced shape nearest (log distance in
    /// nodes and ranks per node, as the sweep's evidence is found) to a
    /// call of `coll` at `bytes` on `nodes` and `ranks`, at the traced
    /// sizes nearest below and above it; None where no trace measured
    /// this collective.
    pub fn near(
        &self,
        coll: Collective,
        bytes: u64,
        nodes: u64,
        ranks: u64,
    ) -> Option<TracedEvidence> {
        let coll = coll.name();
        let lg = |v: f64| v.max(1.0).log2();
        let ppn = ranks as f64 / nodes.max(1) as f64;
        let dist = |a: &At| {
            let appn = a.ranks as f64 / a.nodes.max(1) as f64;
            (lg(a.nodes as f64) - lg(nodes as f64)).abs() + (lg(appn) - lg(ppn)).abs()
        };
        let bucket = dyncc_tables::size_bucket(bytes);
        let other_path = self.other_paths.iter().find_map(|c| match c.base {
            TimeBase::OtherPath {
                ran,
                classic,
                comms,
                classic_comms,
            } if c.key.collective.name() == coll
                && u64::from(c.key.nnodes) == nodes
                && u64::from(c.key.nranks) == ranks
                && dyncc_tables::size_bucket(c.key.nbytes) == bucket =>
            {
                Some(OtherPathSeen {
                    calls: ran,
                    classic_calls: classic,
                    communicators: comms,
                    classic_communicators: classic_comms,
                })
            }
            _ => None,
        });
        // A shape where jobs only said that NCCL ran another path is still
        // the call's own.
        let own = other_path.map(|_| At {
            coll,
            nodes: nodes as u32,
            ranks: ranks as u32,
            bytes,
        });
        let best = self
            .places()
            .filter(|a| a.coll == coll)
            .min_by(|a, b| dist(a).total_cmp(&dist(b)))
            .filter(|a| own.is_none() || dist(a) == 0.0)
            .or(own)?;
        let mut sizes: Vec<u64> = self
            .places()
            .filter(|a| a.coll == coll && a.nodes == best.nodes && a.ranks == best.ranks)
            .map(|a| a.bytes)
            .collect();
        sizes.sort_unstable();
        sizes.dedup();
        let below = sizes.iter().rev().find(|s| **s <= bytes).copied();
        let above = sizes.iter().find(|s| **s >= bytes).copied();
        let mut pick: Vec<u64> = below.into_iter().chain(above).collect();
        pick.dedup();
        let here = |b: u64| At { bytes: b, ..best };
        let sizes = pick
            .into_iter()
            .map(|b| TracedSize {
                bytes: b,
                nccl_runs: (self.marks.iter())
                    .find(|c| At::mark(c) == here(b))
                    .map(|c| c.key.config.to_string()),
                point: (self.notes.points.iter())
                    .find(|p| At::point(p) == here(b))
                    .cloned(),
                findings: self
                    .findings()
                    .filter(|f| At::finding(f) == here(b))
                    .cloned()
                    .collect(),
            })
            .collect();
        let pv = &self.notes.read.provenance;
        Some(TracedEvidence {
            other_path,
            bar: self.bar,
            foreign: pv
                .foreign_used
                .iter()
                .chain(&pv.other_sweep_used)
                .chain(&pv.unproven_used)
                .cloned()
                .collect(),
            nodes: best.nodes,
            ranks: best.ranks,
            exact_shape: best.nodes as u64 == nodes && best.ranks as u64 == ranks,
            sizes,
            skipped: self.skipped,
        })
    }
}

fn verdict_text(v: Verdict) -> String {
    if v.decides() {
        v.describe().to_string()
    } else {
        format!("{}: decides nothing", v.describe())
    }
}

fn gain_line(g: &TracedGain) -> String {
    format!("{}: {}", g.describe(), verdict_text(g.verdict))
}

/// The text `dyncc query` prints for jobs' measurements near a call.
pub fn text(e: Option<&TracedEvidence>, collective: &str) -> String {
    let Some(e) = e else {
        return format!("jobs' measurements: the traces hold no {collective} measurements");
    };
    let mut out = format!(
        "jobs' measurements (traces, read as `dyncc compile` read them for this table, at \
         --margin {} and --noise-z {}{}): {}at {} node{}, {} ranks{}:",
        e.bar.margin,
        e.bar.noise_z,
        if e.bar.noise_z_from_table {
            ""
        } else {
            " (compile's default: the table does not record its own)"
        },
        if e.exact_shape { "" } else { "nearest " },
        e.nodes,
        if e.nodes == 1 { "" } else { "s" },
        e.ranks,
        if e.exact_shape {
            ""
        } else {
            " (no trace of this exact shape)"
        }
    );
    for s in &e.sizes {
        out.push_str(&format!("\n  {}:", fmt_bytes(s.bytes)));
        if let Some(m) = &s.nccl_runs {
            out.push_str(&format!(
                "\n    NCCL runs {m} here on its own (jobs that let it choose): the plan does not try it here"
            ));
        }
        if let Some(p) = &s.point {
            out.push_str(&format!(
                "\n    NCCL's choice {}; the jobs' table ran {}{}",
                p.nccl_choice.as_deref().unwrap_or("(not seen)"),
                p.deployed_name,
                if p.replaced_sweep {
                    "; the jobs decide this point, not the sweep"
                } else {
                    ""
                }
            ));
            for g in &p.settings {
                out.push_str(&format!("\n    {}", gain_line(g)));
            }
        }
        for f in &s.findings {
            out.push_str(&format!(
                "\n    {} {:+.1} %{}: {}; the {} decide{}",
                f.config,
                (f.gain - 1.0) * 100.0,
                crate::ingest::traces::counts(&f.evidence),
                verdict_text(f.verdict),
                f.decides,
                if f.decides == "jobs" { "" } else { "s" }
            ));
        }
    }
    if let Some(o) = e.other_path {
        out.push_str(&format!(
            "\n  NCCL ran a symmetric kernel or a copy-engine method here in most of its own calls \
             in {} of {} communicators ({} of its {} own calls; jobs that let it choose): a \
             classic pair is forced here only where the sweep measured it (a force displaces \
             that path)",
            o.communicators,
            o.communicators.saturating_add(o.classic_communicators),
            o.calls,
            o.calls.saturating_add(o.classic_calls)
        ));
    }
    for f in &e.foreign {
        out.push_str(&format!(
            "\n  (used {f}: another platform or sweep than the table's, --foreign-traces)"
        ));
    }
    if e.skipped > 0 {
        out.push_str(&format!(
            "\n  ({} trace files could not be read and were skipped)",
            e.skipped
        ));
    }
    out
}

/// What `--data SWEEP TRACES` holds for a table-reading command: the
/// sweep's measured cells (its NCCL version, the inputs skipped), and the
/// jobs' traces read against it as compile reads them.
pub struct Data {
    pub sweep: Option<(Vec<Cell>, u32, usize)>,
    pub traced: Option<Traced>,
}

/// Reads `data` (sweep files and jobs' trace files, leniently) for
/// `table` (at `table_path`): the traces of the table's platform and sweep
/// only (unless `foreign`), judged by the table's own bar
/// ([`TraceBar::of_table`]), through the pipeline's one reading
/// ([`crate::pipeline::trace_cells`]). Traces without a sweep are an error:
/// they are read against the sweep the table was compiled from.
/// The one read of a sweep beside a table (folded, trusted cells; always
/// lenient here): its cells, the newest NCCL it names, and how many files
/// it skipped.
pub fn read_sweep(
    sweeps: &[PathBuf],
    ingest: &IngestArgs,
) -> anyhow::Result<(Vec<Cell>, u32, usize)> {
    let read = IngestArgs {
        lenient: true,
        ..ingest.clone()
    };
    let mut ds = read.read_sweep(sweeps, false)?;
    let mut trusted = ds.take_folded();
    trusted.retain(|g| g.key.flags == 0);
    let nccl = crate::pipeline::sweep_nccl_version(&trusted);
    Ok((trusted.cells(), nccl, ds.skipped.len()))
}

pub fn read_data(
    table: &Table<'_>,
    table_path: &Path,
    data: &[PathBuf],
    ingest: &IngestArgs,
    foreign: bool,
) -> anyhow::Result<Data> {
    let mut sweeps = data.to_vec();
    let crate::ingest::traces::Found {
        files: trace_files,
        skipped: walk_skipped,
    } = crate::ingest::traces::find(&mut sweeps);
    for s in &walk_skipped {
        warn_skipped(s);
    }
    if !trace_files.is_empty() && sweeps.is_empty() {
        bail!(
            "--data holds only trace files ({}); jobs' measurements are read against the sweep \
             the table was compiled from: give it too, e.g. `--data SWEEP_DIR TRACE_DIR`",
            trace_files.len()
        );
    }
    let sweep = if sweeps.is_empty() {
        None
    } else {
        Some(read_sweep(&sweeps, ingest).context("reading --data")?)
    };
    let traced = match &sweep {
        Some((cells, nccl, _)) if !trace_files.is_empty() => {
            let (mut files, mut skipped) = crate::ingest::traces::read(&trace_files, true)?;
            // Named, as compile's report names them: a count alone does not
            // say which job's traces were left out.
            for s in &skipped {
                warn_skipped(s);
            }
            skipped.extend(walk_skipped.iter().cloned());
            let meta = |k| table.meta(k).filter(|v| !v.is_empty());
            let provenance = crate::ingest::traces::check_provenance(
                &mut files,
                meta("platform"),
                meta("gpu"),
                table.sweep_fingerprint(),
                None,
                foreign,
            )
            .with_context(|| {
                format!(
                    "reading --data's traces against {} (the table's platform and sweep)",
                    table_path.display()
                )
            })?;
            let bar = TraceBar::of_table(table)?;
            let (cells, mut notes) =
                crate::pipeline::trace_cells(cells, *nccl, &files, &bar.decide());
            notes.read.provenance = provenance;
            Some(Traced::new(cells, notes, skipped.len(), bar))
        }
        _ => None,
    };
    Ok(Data { sweep, traced })
}

/// One input `--data` could not read, named on stderr.
fn warn_skipped(s: &crate::ingest::Skip) {
    eprintln!(
        "warning: skipped {}:{}: {}",
        s.file.display(),
        s.line,
        s.reason
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::features::tests::{cell, cfg, nccl_ran};
    use dyncc_tables::{Algo, Proto};

    /// Marks at 4 nodes (1, 4 and 16 MiB) and 16 nodes (1 MiB), beside a
    /// timed cell, which is no mark.
    fn traced() -> Traced {
        let ring = cfg(Algo::Ring, Proto::Simple);
        let cells = vec![
            nccl_ran(4, 1 << 20, ring),
            nccl_ran(4, 4 << 20, ring),
            nccl_ran(4, 16 << 20, cfg(Algo::Tree, Proto::LL128)),
            nccl_ran(16, 1 << 20, ring),
            cell(Collective::AllReduce, 8, 8, 1 << 20, ring, 10.0),
        ];
        let bar = TraceBar {
            margin: 0.03,
            noise_z: 0.5,
            noise_z_from_table: true,
        };
        Traced::new(cells, TraceNotes::default(), 0, bar)
    }

    /// A table with `meta` (key, value) pairs beside the sample's.
    fn table_with(meta: &[(&str, &str)]) -> Vec<u8> {
        let mut b = dyncc_tables::TableBuilder::new();
        for (k, v) in meta {
            b.meta(k, v);
        }
        crate::audit::testutil::sample_contexts(&mut b);
        b.build().unwrap()
    }

    #[test]
    fn the_bar_is_the_tables_own_and_a_damaged_one_is_refused() {
        let bytes = table_with(&[("margin", "0.1"), ("noise_z", "2")]);
        let bar = TraceBar::of_table(&Table::from_bytes(&bytes).unwrap()).unwrap();
        assert_eq!(
            (bar.margin, bar.noise_z, bar.noise_z_from_table),
            (0.1, 2.0, true)
        );
        assert_eq!((bar.decide().margin, bar.decide().z), (0.1, 2.0));
        // A table compiled before noise_z was recorded: compile's default,
        // and said.
        let bytes = table_with(&[("margin", "0.1")]);
        let bar = TraceBar::of_table(&Table::from_bytes(&bytes).unwrap()).unwrap();
        assert_eq!(bar.noise_z, DecideOptions::default().z);
        assert!(!bar.noise_z_from_table);
        for (k, v) in [
            ("margin", "1.5"),
            ("margin", "x"),
            ("noise_z", "-1"),
            ("noise_z", "NaN"),
        ] {
            let bytes = table_with(&[(k, v)]);
            let e = TraceBar::of_table(&Table::from_bytes(&bytes).unwrap()).unwrap_err();
            assert!(
                e.to_string().contains(k) && e.to_string().contains("recompile"),
                "{e}"
            );
        }
    }

    #[test]
    fn the_nearest_traced_shape_and_the_sizes_around_the_call() {
        let t = traced();
        // 7 nodes: the timed cell at 8 would be nearest, but it is no
        // mark; of the marks, 4 nodes is nearer than 16.
        let e = t.near(Collective::AllReduce, 8 << 20, 7, 56).unwrap();
        assert_eq!((e.nodes, e.ranks, e.exact_shape), (4, 32, false));
        let sizes: Vec<(u64, Option<&str>)> = e
            .sizes
            .iter()
            .map(|s| (s.bytes, s.nccl_runs.as_deref()))
            .collect();
        assert_eq!(
            sizes,
            [
                (4 << 20, Some("ring/simple")),
                (16 << 20, Some("tree/ll128"))
            ]
        );
        // An exact size is one size; an exact shape says so.
        let e = t.near(Collective::AllReduce, 1 << 20, 16, 128).unwrap();
        assert!(e.exact_shape);
        assert_eq!(e.sizes.len(), 1);
        assert_eq!(e.sizes[0].bytes, 1 << 20);
        // Beyond the traced sizes: the nearest one.
        let e = t.near(Collective::AllReduce, 1 << 30, 4, 32).unwrap();
        assert_eq!(e.sizes.len(), 1);
        assert_eq!(e.sizes[0].bytes, 16 << 20);
        // Another collective: nothing traced.
        assert!(t.near(Collective::AllGather, 1 << 20, 4, 32).is_none());
    }
}
