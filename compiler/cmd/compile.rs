//! `dyncc compile`: arguments, run, and the human-readable report.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{bail, Context};

use crate::cmd::common::{DecideArgs, RunArgs};
use crate::ingest;
use crate::pipeline::{compile_dataset, CompileOptions};
use crate::report::Report;
use crate::units::fmt_bytes;

/// Compile NCCL sweep measurements into a decision table.
///
/// Reads nccl-tests logs (text or -J JSON) and tuner CSVs from files or
/// directories, fits a model per candidate setting, and writes a table that
/// forces a setting only where the measurements say it beats NCCL's own
/// choice by more than the noise and --margin. It prints where it forces
/// what, the expected gain, and where it leaves NCCL alone and why.
///
/// Node counts the sweep did not measure are decided too: a candidate's
/// gain is read off the measured multi-node counts around it (linearly in
/// log2 nodes) and forced only where it clears the margin plus --noise-z
/// times its uncertainty, calibrated by how well the sweep's own node
/// counts predict each other (between two counts that both measured it
/// fastest, the margin alone). Counts up to --node-reach times beyond the
/// measured ones are decided (down towards 2 nodes only from three
/// multi-node counts or more); one node is never read off several.
///
/// Trace files of jobs (`DYNCC_TRACE`: what ran and its GPU time, with
/// `DYNCC_EXPLORE` measuring what the table could not confirm) are read
/// beside the sweep: a setting's gain is read within each job against
/// NCCL's own choice at the same shape, never against the sweep's times,
/// and where jobs measured a point they decide it. The report says what
/// the traces changed against the table the jobs ran.
///
/// Examples:
///   dyncc compile datasets/real/nvidia-dgx1v-allreduce.csv -o dgx1v.tbl
///   dyncc compile sweeps/ -o cluster.tbl --no-extrapolate
///   dyncc compile sweeps/ -o cluster.tbl --dry-run --json
///   dyncc compile sweeps/ /shared/traces/*/ -o cluster-next.tbl
#[derive(clap::Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct CompileArgs {
    /// Sweep files or directories (nccl-tests text or JSON logs, tuner CSV),
    /// and trace files or directories of jobs (`DYNCC_TRACE`).
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
    /// Where to write the table (written atomically; nothing is written on error).
    #[arg(short, long)]
    pub output: PathBuf,
    #[command(flatten)]
    pub decide: DecideArgs,
    #[command(flatten)]
    pub run: RunArgs,
    /// Compile only records of this platform label or GPU model (trace
    /// files of another platform are left out too).
    #[arg(long)]
    pub platform: Option<String>,
    /// Use trace files of jobs on another platform than the sweep's (the
    /// table's `platform` the jobs ran), or of a table compiled from another
    /// sweep (its `sweep` fingerprint); without it they are refused.
    #[arg(long)]
    pub foreign_traces: bool,
    #[command(flatten)]
    pub ingest: ingest::args::IngestArgs,
    /// The exploration share F the table carries: jobs run with
    /// `DYNCC_EXPLORE=1` explore at F (between 2^-32 and 0.1), whatever
    /// value each rank's environment holds.
    #[arg(long, value_name = "F", default_value_t = crate::audit::explore::DEFAULT_SHARE)]
    pub explore: f64,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Read, check and compile everything, and print the report, but write
    /// nothing (not even the table).
    #[arg(long)]
    pub dry_run: bool,
}

pub fn run(a: CompileArgs) -> anyhow::Result<i32> {
    let decide = a.decide.options()?;
    if !a.dry_run {
        crate::atomic::check_binary_stdout(&a.output, "the table", "tbl")?;
    }
    // The output must not be an input (checked before reading, and against
    // every file read once the inputs are known).
    crate::atomic::check_output(&a.output, a.paths.iter().map(|p| p.as_path()), "tbl")?;
    // Jobs' trace files (`DYNCC_TRACE`) are measurements too, read apart.
    let mut paths = a.paths.clone();
    let ingest::traces::Found {
        files: trace_files,
        skipped: walk_skipped,
    } = ingest::traces::find(&mut paths);
    if paths.is_empty() {
        bail!(
            "only trace files given ({}); traces add to a sweep, which names the settings to \
             compare: give the sweep the deployed table was compiled from too, e.g. `dyncc \
             compile SWEEP_DIR TRACE_DIR -o t.tbl`",
            trace_files.len()
        );
    }
    // A directory with nothing below it (say, a night without jobs) adds
    // nothing: said, not passed over.
    for p in paths.iter().filter(|p| ingest::traces::holds_nothing(p)) {
        eprintln!(
            "warning: {}: no trace (*.trace) or sweep file in or below this directory; nothing \
             read from it",
            p.display()
        );
    }
    let mut ds = a.ingest.read_sweep(&paths, !a.json && !a.ingest.quiet)?;
    let (traces, skipped) = ingest::traces::read(&trace_files, a.ingest.lenient)?;
    ds.traces = traces;
    ds.foreign_traces = a.foreign_traces;
    ds.skipped.extend(skipped);
    // A link the trace walk left unfollowed is named once, whether or not
    // the sweep walk met it too.
    for s in walk_skipped {
        if !ds.skipped.iter().any(|k| k.file == s.file) {
            ds.skipped.push(s);
        }
    }
    crate::atomic::check_output(
        &a.output,
        ds.reports
            .iter()
            .map(|r| r.file.as_path())
            .chain(ds.skipped.iter().map(|s| s.file.as_path())),
        "tbl",
    )?;
    if ds.measurements() == 0 {
        bail!(
            "no measurements found in {}; expected nccl-tests logs (text or JSON) or a tuner CSV \
             (`dyncc inspect PATH` shows what each file held)",
            paths
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let opts = CompileOptions {
        decide,
        platform: a.platform.clone(),
        command: std::env::args().collect::<Vec<_>>().join(" "),
        lenient: a.ingest.lenient,
        jobs: a.run.jobs()?,
        progress: !a.json && !a.ingest.quiet,
        explore: Some(crate::audit::explore::check_share(a.explore)?),
    };
    let mut c = compile_dataset(ds, &opts)?;
    // The trees' agreement as `explain` measures it, on the table written
    // (one measure: the plugin's answers at the shapes the table decides).
    let agreements = crate::audit::agreement::agreements(&c.bytes);
    for (coll, f) in c.report.trees.iter_mut() {
        if let Some(a) = agreements.get(coll.as_str()) {
            f.points = a.shapes;
            f.disagree = a.disagree;
        }
    }
    if a.dry_run {
        eprintln!(
            "dry run: nothing written (the table would be {} bytes at {})",
            c.bytes.len(),
            a.output.display()
        );
    } else {
        crate::atomic::write_or_stdout(&a.output, &c.bytes)
            .with_context(|| format!("writing the table to {}", a.output.display()))?;
        c.report.table.path = Some(a.output.clone());
    }
    // With `-o -` the table's bytes are stdout's; the report goes to stderr.
    let mut out: Box<dyn Write> = if crate::atomic::names_stdout(&a.output) {
        Box::new(std::io::stderr().lock())
    } else {
        Box::new(std::io::stdout().lock())
    };
    if a.json {
        writeln!(out, "{}", crate::output::pretty(&c.report)?)?;
    } else {
        print_report(&mut out, &c.report)?;
    }
    Ok(0)
}

/// Human-readable report.
fn print_report(w: &mut dyn Write, r: &Report) -> std::io::Result<()> {
    let i = &r.inputs;
    writeln!(
        w,
        "read {} file(s): {} rows, {} records ({} flagged, not fitted), {} cells; {} skipped",
        i.files, i.rows, i.records, i.untrusted, i.cells, i.skipped
    )?;
    const SHOWN: usize = 50;
    for s in r.skipped.iter().take(SHOWN) {
        writeln!(w, "  skipped {}:{}: {}", s.file.display(), s.line, s.reason)?;
    }
    if r.skipped.len() > SHOWN {
        writeln!(
            w,
            "  ... and {} more (--json lists them all)",
            r.skipped.len() - SHOWN
        )?;
    }
    let p = &r.platform;
    writeln!(
        w,
        "platform: {}{}{}",
        p.label.as_deref().unwrap_or("unnamed"),
        p.gpu
            .as_deref()
            .map(|g| format!(", {g}"))
            .unwrap_or_default(),
        p.gpus_per_node
            .map(|g| format!(", {g} GPUs per node"))
            .unwrap_or_default()
            + &p.nccl_version
                .as_deref()
                .map(|v| format!(", NCCL {v}"))
                .unwrap_or_default()
    )?;
    writeln!(w, "\ncoverage:")?;
    for c in &r.coverage {
        writeln!(
            w,
            "  {:<14} {:>3} ranks/node  nodes {:<22} sizes {}..{}  {} configurations, {} cells",
            c.collective,
            c.ppn,
            c.nodes
                .iter()
                .map(|n| n.to_string())
                .collect::<Vec<_>>()
                .join(","),
            fmt_bytes(c.min_bytes),
            fmt_bytes(c.max_bytes),
            c.configs.len(),
            c.cells
        )?;
    }
    writeln!(w, "\nforces (expected gain over NCCL's default):")?;
    if r.forced.is_empty() {
        if r.coverage.iter().all(|c| c.configs.len() <= 1) {
            writeln!(
        w,
                "  nothing: only NCCL's default was measured, so there is nothing to compare it with; \
                 sweep NCCL_ALGO/NCCL_PROTO settings too (`dyncc plan` writes such a sweep)"
            )?;
        } else {
            writeln!(
                w,
                "  nothing: NCCL's own choices are best or within noise everywhere measured"
            )?;
        }
    }
    for f in &r.forced {
        let nodes = if f.nodes.0 == f.nodes.1 {
            format!("{}", f.nodes.0)
        } else if f.nodes.1 == u32::MAX {
            format!("{}+", f.nodes.0)
        } else {
            format!("{}-{}", f.nodes.0, f.nodes.1)
        };
        let ppn = if f.ppn.1 == u32::MAX {
            "any".to_string()
        } else {
            f.ppn.0.to_string()
        };
        writeln!(
            w,
            "  {:<14} nodes {:<7} ppn {:<4} {:>9} .. <{:<9} {:>20}  {:>8}  {}",
            f.collective,
            nodes,
            ppn,
            fmt_bytes(f.from_bytes),
            fmt_bytes(f.to_bytes.saturating_add(1)),
            f.setting.to_string(),
            f.evidence.gain_text(),
            f.basis
        )?;
    }
    writeln!(w, "\nleaves NCCL alone (measured points):")?;
    for (coll, why) in &r.left_alone {
        let parts: Vec<String> = why
            .iter()
            .map(|(k, v)| format!("{v} {}", k.replace('_', " ")))
            .collect();
        writeln!(
            w,
            "  {:<14} {}",
            coll,
            if parts.is_empty() {
                "none".into()
            } else {
                parts.join(", ")
            }
        )?;
    }
    for o in &r.outside {
        writeln!(w, "  {o}")?;
    }
    for o in &r.other_paths {
        writeln!(w, "  {}", o.text())?;
    }
    writeln!(w, "\nnode counts:")?;
    for o in &r.reach {
        writeln!(w, "  {o}")?;
    }
    for n in &r.notes {
        writeln!(w, "note: {n}")?;
    }
    if let Some(t) = &r.traces {
        print_traces(w, t)?;
    }
    writeln!(w, "\nexplain trees:")?;
    for (coll, f) in &r.trees {
        writeln!(
            w,
            "  {:<14} {} leaves, depth {}, gives the plugin's decision at {}",
            coll,
            f.leaves,
            f.depth,
            crate::audit::agreement::agreement_text(f.points, f.disagree)
        )?;
    }
    let t = &r.table;
    if t.plan_cells > 0 {
        writeln!(
            w,
            "\nexploration plan: {} cells, {} candidates (what jobs with DYNCC_EXPLORE try where \
             the table stands on no measurement at their node count; \
             `dyncc explain {} --contexts` lists them)",
            t.plan_cells,
            t.plan_candidates,
            t.path
                .as_ref()
                .filter(|p| !crate::atomic::names_stdout(p))
                .map_or("TABLE".into(), |p| p.display().to_string())
        )?;
    }
    writeln!(
        w,
        "\n{} ({} bytes, {} contexts, digest {})",
        t.path
            .as_ref()
            .map(|p| if crate::atomic::names_stdout(p) {
                "wrote the table to standard output".to_string()
            } else {
                format!("wrote {}", p.display())
            })
            .unwrap_or_else(|| "table".into()),
        t.bytes,
        t.contexts,
        t.digest
    )?;
    Ok(())
}

/// What jobs' traces changed.
fn print_traces(w: &mut dyn Write, t: &crate::report::TraceChanges) -> std::io::Result<()> {
    use crate::report::TraceOutcome;
    writeln!(
        w,
        "\ntraces: {} file(s), {} communicator(s){}, {} collectives ({} not linked to a tuner answer, not used)",
        t.read.files,
        t.read.communicators,
        if t.read.duplicate_ranks > 0 {
            format!(" ({} recorded by more than one rank, counted once)", t.read.duplicate_ranks)
        } else {
            String::new()
        },
        t.read.collectives,
        t.read.unknown
    )?;
    writeln!(
        w,
        "  {} point(s) measured against NCCL's choice in the same jobs: {} added (not in the sweep), {} replacing the sweep's",
        t.points.len(),
        t.added,
        t.replaced
    )?;
    writeln!(
        w,
        "  against the table the jobs ran: {} confirmed, {} reverted to NCCL (lost in production), {} changed, {} new, {} left to NCCL",
        t.confirmed, t.reverted, t.changed, t.new, t.unchanged
    )?;
    if t.read.one_sided_shapes > 0 {
        writeln!(
            w,
            "  {} shape(s) ran one side only (NCCL's choice, or only a forced setting): nothing to compare within a job; DYNCC_EXPLORE measures the other side",
            t.read.one_sided_shapes
        )?;
    }
    if t.nccl_runs_marked > 0 {
        writeln!(
            w,
            "  {} point(s) at node counts the sweep skipped show the one setting NCCL runs there on its own: the exploration plan does not try it there (forcing it runs the same)",
            t.nccl_runs_marked
        )?;
    }
    if t.read.older_nccl_points > 0 {
        writeln!(
            w,
            "  {} point(s) also measured by an older NCCL: the newest NCCL's measurements decide",
            t.read.older_nccl_points
        )?;
    }
    for d in &t.read.drift {
        writeln!(w, "  drift: {d}")?;
    }
    let pv = &t.read.provenance;
    if !pv.foreign_used.is_empty() {
        writeln!(
            w,
            "  used {} trace file(s) of another platform than the sweep's (--foreign-traces): {}",
            pv.foreign_used.len(),
            pv.foreign_used.join(", ")
        )?;
    }
    if !pv.other_sweep_used.is_empty() {
        writeln!(
            w,
            "  used {} trace file(s) of a table compiled from another sweep (--foreign-traces): {}",
            pv.other_sweep_used.len(),
            pv.other_sweep_used.join(", ")
        )?;
    }
    if !pv.unproven_used.is_empty() {
        writeln!(
            w,
            "  used {} trace file(s) that do not say which table and sweep their job ran (--foreign-traces): {}",
            pv.unproven_used.len(),
            pv.unproven_used.join(", ")
        )?;
    }
    for (why, (calls, files)) in &t.read.overridden {
        let names: Vec<&str> = files.iter().map(String::as_str).collect();
        writeln!(
            w,
            "  {calls} call(s) the plugin forced ran otherwise, not used as evidence for either side: {why}; in {}",
            names.join(", ")
        )?;
    }
    for (setting, (calls, file)) in &t.read.not_candidates {
        writeln!(
            w,
            "  {setting}: {calls} call(s) jobs ran of a setting the sweep never measured there or NCCL cannot run (e.g. {file}): counted, never forced",
        )?;
    }
    for (v, (n, file)) in &t.read.newer_than_sweep {
        writeln!(
            w,
            "  {n} trace file(s) of NCCL {v}, newer than the sweep's (e.g. {file}): they decide only with the communicators any trace needs",
        )?;
    }
    if pv.other_platform > 0 {
        writeln!(
            w,
            "  left out {} trace file(s) of another platform than --platform names",
            pv.other_platform
        )?;
    }
    if pv.platform_unknown > 0 {
        writeln!(
            w,
            "  {} trace file(s) do not say their platform (written without a table, or by an older plugin): used",
            pv.platform_unknown
        )?;
    }
    for (shape, (n, file)) in &t.read.uneven {
        writeln!(
            w,
            "  not used: {n} point(s) at {shape} (ranks not a multiple of nodes; a table decides per ranks per node), e.g. {file}"
        )?;
    }
    const SHOWN: usize = 20;
    // Evidence that fell short of the rule, and the sweep against the jobs.
    for (what, list) in [
        (
            "short of evidence (decides nothing; README \"Learning from your jobs\" states the rule)",
            &t.read.short_of_evidence,
        ),
        ("the sweep and the jobs disagree", &t.read.disagree_with_sweep),
    ] {
        if list.is_empty() {
            continue;
        }
        writeln!(w, "  {} setting(s) {what}:", list.len())?;
        for f in list.iter().take(SHOWN) {
            writeln!(w, "    {}", f.describe())?;
        }
        if list.len() > SHOWN {
            writeln!(w, "    ... and {} more (--json lists them all)", list.len() - SHOWN)?;
        }
    }
    let shown: Vec<_> = t
        .points
        .iter()
        .filter(|p| p.outcome != TraceOutcome::Unchanged)
        .collect();
    for p in shown.iter().take(SHOWN) {
        let best = p
            .point
            .settings
            .iter()
            .map(|g| g.describe())
            .collect::<Vec<_>>()
            .join("; ");
        let files = &p.point.files;
        writeln!(
            w,
            "  {:<10} {} {} nodes x {} ranks {}: ran {} -> {} (measured: {}; {} communicator{} in {}{})",
            format!("{:?}", p.outcome).to_lowercase(),
            p.point.collective,
            p.point.nodes,
            p.point.ranks,
            fmt_bytes(p.point.bytes),
            p.point.deployed_name,
            p.decision,
            best,
            p.point.communicators,
            if p.point.communicators == 1 { "" } else { "s" },
            files.iter().take(3).cloned().collect::<Vec<_>>().join(", "),
            if files.len() > 3 {
                format!(" and {} more files", files.len() - 3)
            } else {
                String::new()
            }
        )?;
    }
    if shown.len() > SHOWN {
        writeln!(
            w,
            "  ... and {} more (--json lists them all)",
            shown.len() - SHOWN
        )?;
    }
    Ok(())
}
