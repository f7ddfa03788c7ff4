//! Traced points into cells: per point (sizes in one table bucket pooled),
//! the deciding NCCL that measured it, each setting judged against NCCL's
//! choice by the evidence rule, and the cells on the trace time base that
//! the grids let decide the point; what NCCL ran alone at a count the sweep
//! skipped, as a mark; and what the report says of it all ([`TraceNotes`]).

use std::collections::{BTreeMap, BTreeSet};

use dyncc_tables::Setting;

use super::evidence::Side;
use super::evidence::{evidence, judge, rule, var_call, Bar, Evidence, Verdict};
use super::files::TraceFile;
use super::notes::{Deployed, Finding, TraceCounts, TraceNotes, TracedGain, TracedPoint};
use super::paths::OtherPaths;
use super::points::{PointKey, SweepView};
use super::shapes::{most_run, AtShape, Overridden, Readings};
use crate::record::{Cell, Config, Source, TimeBase};

/// The cells traces contribute, and what the report says of them; `bar` is
/// compile's (`--margin`, `--noise-z`).
pub fn cells(files: &[TraceFile], sweep: &SweepView, bar: Bar) -> (Vec<Cell>, TraceNotes) {
    let mut notes = TraceNotes::default();
    notes.read.files = files.len();
    let readings = Readings::new(files, &mut notes.read);
    for f in files {
        if sweep.nccl_version != 0 && f.nccl_version > sweep.nccl_version {
            let e = notes
                .read
                .newer_than_sweep
                .entry(version(f.nccl_version))
                .or_insert_with(|| (0, f.path.display().to_string()));
            e.0 += 1;
        }
    }
    // Per point, per communicator (file, index): sizes in one bucket are
    // one point, so one communicator's shapes there pool.
    let mut by_point: BTreeMap<PointKey, BTreeMap<(usize, u16), AtShape>> = BTreeMap::new();
    let mut paths = OtherPaths::default();
    for (fi, file) in files.iter().enumerate() {
        paths.add_file(files, fi, &readings);
        for ((ci, s), at) in readings.classify(fi) {
            paths.add_classic((fi, ci), &s, &at);
            let others = at
                .others
                .values()
                .fold(0u64, |n, o| n.saturating_add(o.side.count));
            let all = at.nccl.count.saturating_add(others);
            notes.read.collectives = notes
                .read
                .collectives
                .saturating_add(all.saturating_add(at.unknown));
            notes.read.unknown = notes.read.unknown.saturating_add(at.unknown);
            for why in Overridden::ALL {
                let n = at.overridden[why as usize];
                if n > 0 {
                    let e = notes.read.overridden.entry(why.describe()).or_default();
                    e.0 = e.0.saturating_add(n);
                    e.1.insert(file.path.display().to_string());
                }
            }
            if all == 0 {
                continue;
            }
            let key = PointKey {
                coll: s.coll,
                nodes: s.nodes,
                ranks: s.ranks,
                n_bytes: sweep.snap(s.coll, s.n_bytes),
            };
            by_point
                .entry(key)
                .or_default()
                .entry((fi, ci))
                .or_default()
                .merge(&at);
        }
    }
    let mut out = Vec::new();
    // Points both measured, per (traces' NCCL, sweep's NCCL) that differ.
    let mut versus_sweep: BTreeMap<(u32, u32), usize> = BTreeMap::new();
    for (key, parts) in by_point {
        let mut parts: Vec<Part> = parts
            .into_iter()
            .map(|((file, _), at)| Part { file, at })
            .collect();
        // Drift: where NCCL versions measured the point, the version with
        // the most communicators there decides it (ties: the newer). A
        // version number is no evidence: a newer NCCL's traces decide only
        // with the communicators any trace needs.
        let mut per_version: BTreeMap<u32, usize> = BTreeMap::new();
        for p in &parts {
            *per_version.entry(files[p.file].nccl_version).or_default() += 1;
        }
        let deciding = per_version
            .iter()
            .max_by_key(|(v, n)| (**n, **v))
            .map_or(0, |(v, _)| *v);
        let choices = |v: u32, parts: &[Part]| -> BTreeSet<Setting> {
            parts
                .iter()
                .filter(|p| files[p.file].nccl_version == v)
                .filter_map(|p| p.at.nccl_choice())
                .collect()
        };
        let older: BTreeSet<u32> = per_version
            .keys()
            .copied()
            .filter(|&v| v != deciding)
            .collect();
        for &v in &older {
            let (was, now) = (choices(v, &parts), choices(deciding, &parts));
            if was != now && !was.is_empty() && !now.is_empty() {
                notes.read.drift.push(format!(
                    "{} at {} nodes x {} ranks, {}: NCCL {} chose {} ({} communicator{}), NCCL {} \
                     chooses {} ({} communicator{}); the one with more communicators decides",
                    key.coll.name(),
                    key.nodes,
                    key.ranks,
                    crate::units::fmt_bytes(key.n_bytes),
                    version(v),
                    names(&was),
                    per_version[&v],
                    if per_version[&v] == 1 { "" } else { "s" },
                    version(deciding),
                    names(&now),
                    per_version[&deciding],
                    if per_version[&deciding] == 1 { "" } else { "s" },
                ));
            }
        }
        // Only points with something to compare count as set aside.
        let comparable = |parts: &[Part]| {
            parts.iter().any(|p| p.at.nccl.count > 0)
                && parts.iter().any(|p| !p.at.others.is_empty())
        };
        if !older.is_empty() {
            if comparable(&parts) {
                notes.read.older_nccl_points += 1;
            }
            parts.retain(|p| files[p.file].nccl_version == deciding);
        }
        let replaced = sweep.points.contains(&key);
        if replaced && sweep.nccl_version != 0 && deciding != 0 && sweep.nccl_version != deciding {
            *versus_sweep
                .entry((deciding, sweep.nccl_version))
                .or_default() += 1;
            if sweep.nccl_version > deciding {
                // Once per point (older traces may have counted it).
                if older.is_empty() && comparable(&parts) {
                    notes.read.older_nccl_points += 1;
                }
                continue;
            }
        }
        let ppn = key.ranks / key.nodes.max(1);
        if key.nodes == 0 || key.ranks % key.nodes != 0 {
            // The table decides per ranks per node: a communicator whose
            // ranks do not divide evenly over its nodes has no place in
            // it. Named, not dropped in silence.
            let e = notes
                .read
                .uneven
                .entry(format!("{} nodes x {} ranks", key.nodes, key.ranks))
                .or_insert_with(|| (0, files[parts[0].file].path.display().to_string()));
            e.0 += 1;
            continue;
        }
        out.extend(nccl_ran(files, &parts, key, ppn, sweep));
        if let Some((cells, point)) = point_cells(
            files,
            &parts,
            key,
            ppn,
            replaced,
            deciding,
            sweep,
            bar,
            &mut notes.read,
        ) {
            out.extend(cells);
            notes.points.push(point);
        }
    }
    out.extend(paths.marks());
    for ((traced, swept), n) in versus_sweep {
        notes.read.drift.push(format!(
            "{n} point(s) measured by the sweep with NCCL {} and by jobs with NCCL {}: the {} \
             measurements decide them",
            version(swept),
            version(traced),
            if traced > swept { "jobs'" } else { "sweep's" }
        ));
    }
    (out, notes)
}

/// A setting a traced point holds: its evidence, whether the sweep
/// measured it worth forcing there, and whether jobs measured it (else it
/// is the sweep's measurement, kept beside the jobs').
struct Admitted {
    cfg: Config,
    e: Evidence,
    sweep_forces: bool,
    traced: bool,
}

/// One communicator's measurements at one shape inside a point.
struct Part {
    file: usize,
    at: AtShape,
}

/// At a count the sweep never measured, the mark of the configuration NCCL
/// ran on its own at `key` (one setting in every communicator that let it
/// choose, standing for a configuration the sweep measured): forcing it
/// there runs what NCCL runs anyway, so the plan does not list it. Jobs
/// that only let NCCL choose measure no gain, but they do say this.
fn nccl_ran(
    files: &[TraceFile],
    parts: &[Part],
    key: PointKey,
    ppn: u32,
    sweep: &SweepView,
) -> Option<Cell> {
    // An NCCL older than the sweep's may choose otherwise than the one the
    // table is for (`parts` hold the deciding NCCL that traced the point).
    let version = files[parts.first()?.file].nccl_version;
    if sweep.measured_count(key) || (version != 0 && sweep.nccl_version > version) {
        return None;
    }
    let mut ran = parts
        .iter()
        .flat_map(|p| p.at.nccl_settings.iter())
        .filter(|(_, n)| **n > 0);
    let (&first, &n) = ran.next()?;
    let mut calls = n;
    for (&s, &n) in ran {
        if s != first {
            return None;
        }
        calls = calls.saturating_add(n);
    }
    if calls < rule::MIN_CALLS {
        return None;
    }
    let config = sweep.config_of(key.coll, ppn, first);
    let known = sweep
        .configs
        .get(&(key.coll, ppn))
        .is_some_and(|c| c.contains(&config));
    (known && !config.is_default()).then(|| Cell {
        key: key.cell_key(config),
        time_us: 0.0,
        n: 0,
        spread: 0.0,
        source: Source {
            file: files[parts[0].file].path.clone(),
            line: 0,
        },
        base: TimeBase::NcclRan,
    })
}

/// Judges a point's settings against NCCL's choice ([`evidence`],
/// [`judge`]) and turns those whose evidence decides into cells: NCCL's
/// choice at its geometric mean GPU time over communicators, each setting
/// at that time over its gain. The cells carry the evidence's sd so that
/// the decision reads exactly it: the point's noise figure is the largest
/// sd, NCCL's choice counts as exact, and each setting's count is what
/// brings the noise down to its own sd.
#[allow(clippy::too_many_arguments)]
fn point_cells(
    files: &[TraceFile],
    parts: &[Part],
    key: PointKey,
    ppn: u32,
    replaced: bool,
    version: u32,
    sweep: &SweepView,
    bar: Bar,
    read: &mut TraceCounts,
) -> Option<(Vec<Cell>, TracedPoint)> {
    let var1 =
        var_call(parts.iter().flat_map(|p| {
            std::iter::once(&p.at.nccl).chain(p.at.others.values().map(|o| &o.side))
        }));
    let mut nccl_settings: BTreeMap<Setting, u64> = BTreeMap::new();
    // Per configuration and communicator: the setting's side, and whether
    // the deployed table forced it.
    let mut per_cfg: BTreeMap<Config, (Vec<Side>, u64)> = BTreeMap::new();
    for (i, p) in parts.iter().enumerate() {
        for (s, n) in &p.at.nccl_settings {
            let e = nccl_settings.entry(*s).or_default();
            *e = e.saturating_add(*n);
        }
        for (s, o) in &p.at.others {
            let cfg = sweep.config_of(key.coll, ppn, *s);
            let e = per_cfg
                .entry(cfg)
                .or_insert_with(|| (vec![Side::default(); parts.len()], 0));
            e.0[i].merge(&o.side);
            e.1 = e.1.saturating_add(o.by_table);
        }
    }
    let nccl_comms: Vec<&Side> = parts.iter().map(|p| &p.at.nccl).collect();
    let with_nccl: Vec<f64> = nccl_comms
        .iter()
        .filter(|s| s.count > 0)
        .map(|s| s.mean_ln())
        .collect();
    if with_nccl.is_empty() || per_cfg.is_empty() {
        read.one_sided_shapes += 1;
        return None;
    }
    // NCCL's choice: the geometric mean over communicators (ns).
    let nccl_ln = with_nccl.iter().sum::<f64>() / with_nccl.len() as f64;
    // A file may hold any finite sums: a point whose figures are not times
    // (infinite, zero, NaN) is no measurement.
    let t_ok = |ln_ns: f64| ln_ns.is_finite() && ln_ns.exp().is_normal();
    if !t_ok(nccl_ln) {
        return None;
    }
    let run_sd = sweep.run_sd(key.coll, ppn);
    // Per admitted setting: its evidence, whether the sweep measured it
    // worth forcing, and whether the jobs measured it (else the sweep's
    // measurement, carried onto the jobs' time base).
    let mut admitted: Vec<Admitted> = Vec::new();
    let mut disagreements = Vec::new();
    let mut any_comparable = false;
    for (cfg, (sides, _)) in &per_cfg {
        let pairs: Vec<(Side, Side)> = nccl_comms
            .iter()
            .zip(sides)
            .map(|(n, s)| (**n, *s))
            .filter(|(n, s)| n.count > 0 || s.count > 0)
            .collect();
        // Traces never name candidates: a setting the sweep did not
        // measure here, or that NCCL cannot run at this shape, is counted
        // and never forced.
        if !sweep.names(key, ppn, cfg) {
            let calls = sides.iter().fold(0u64, |n, s| n.saturating_add(s.count));
            let e = read.not_candidates.entry(cfg.to_string()).or_default();
            e.0 = e.0.saturating_add(calls);
            if e.1.is_empty() {
                e.1 = files[parts[0].file].path.display().to_string();
            }
            continue;
        }
        let Some(mut e) = evidence(&pairs, var1, run_sd) else {
            continue;
        };
        let comparable = e.paired > 0 || e.nccl_comms + e.comms >= rule::MIN_COMMS_ACROSS;
        any_comparable |= comparable;
        let sweep_gain = sweep.gain_at(key, ppn, cfg);
        // At a point the sweep measured, the jobs change nothing unless
        // their communicators outweigh the sweep's runs; then both pool.
        let runs = if replaced {
            sweep.runs_at(key, ppn, cfg)
        } else {
            0.0
        };
        let outweighs = !replaced || e.outweighs(runs);
        let jobs_gain = e.ln_gain;
        if replaced && outweighs {
            if let Some((g, sd, r)) = sweep_gain {
                e = e.pooled(g, sd, r);
            }
        }
        let verdict = if !outweighs {
            Verdict::TooLittle
        } else if t_ok(nccl_ln - e.ln_gain) || !e.ln_gain.is_finite() {
            judge(&e, bar)
        } else {
            Verdict::TooLittle
        };
        // The sweep and the jobs disagree where one says the setting is
        // worth forcing and the other not.
        let disagree = sweep_gain.is_some_and(|(g, _, _)| {
            jobs_gain.is_finite() && (g > bar.ln_margin) != (jobs_gain > bar.ln_margin)
        });
        let decides = verdict.decides() && e.sd <= crate::fit::MAX_SIGMA;
        let finding = || Finding {
            collective: key.coll.name(),
            nodes: key.nodes,
            ranks: key.ranks,
            bytes: key.n_bytes,
            config: cfg.to_string(),
            gain: e.ln_gain.exp(),
            evidence: e,
            verdict,
            sweep_gain: sweep_gain.map(|(g, _, _)| g.exp()),
            sweep_runs: sweep_gain.map(|(_, _, n)| n.round() as u32),
            decides: if decides {
                "jobs"
            } else if replaced {
                "sweep"
            } else {
                "table"
            },
        };
        if disagree {
            disagreements.push(finding());
        }
        if decides {
            let sweep_forces = sweep_gain.is_some_and(|(g, _, _)| g > bar.ln_margin);
            admitted.push(Admitted {
                cfg: *cfg,
                e,
                sweep_forces,
                traced: true,
            });
        } else if comparable {
            read.short_of_evidence.push(finding());
        }
    }
    if !any_comparable {
        read.one_sided_shapes += 1;
    }
    // What the deployed table did here: the setting it forced on most
    // calls, if any.
    let deployed = per_cfg
        .iter()
        .filter(|(_, (_, by_table))| *by_table > 0)
        .max_by_key(|(_, (_, by_table))| *by_table)
        .map_or(Deployed::Nccl, |(cfg, _)| Deployed::Forced(*cfg));
    // The jobs decide the point (in place of the sweep or a reading of
    // it) only where their evidence speaks to the decision: a setting that
    // wins, the deployed table's forced setting (confirmed or not), or one
    // the sweep measured worth forcing here. Evidence against settings
    // nobody would force changes nothing, and must not take the point from
    // what the sweep says of the others.
    //
    // At a node count the sweep never measured, every admitted comparison
    // speaks: the decision there sets what the jobs measured against the
    // sweep's reading of the settings they did not (`crate::decide`), so
    // a setting measured losing no longer stands on a reading, and one
    // nobody tried keeps its reading.
    let speaks = (!sweep.measured_count(key) && !admitted.is_empty())
        || admitted.iter().any(|a| {
            judge(&a.e, bar) == Verdict::Wins
                || deployed == Deployed::Forced(a.cfg)
                || a.sweep_forces
        });
    for mut f in disagreements {
        if f.decides == "jobs" && !speaks {
            f.decides = if replaced { "sweep" } else { "table" };
        }
        read.disagree_with_sweep.push(f);
    }
    if !speaks {
        return None;
    }
    // Where the jobs take a point the sweep measured, the sweep's other
    // settings there stay candidates at the sweep's gains: the jobs
    // replace the measurements they outweigh, not the rest.
    if replaced {
        let traced: BTreeSet<Config> = admitted.iter().map(|a| a.cfg).collect();
        for cfg in sweep.configs.get(&(key.coll, ppn)).into_iter().flatten() {
            if cfg.is_default() || traced.contains(cfg) || !sweep.names(key, ppn, cfg) {
                continue;
            }
            let Some((g, sd, r)) = sweep.gain_at(key, ppn, cfg) else {
                continue;
            };
            admitted.push(Admitted {
                cfg: *cfg,
                e: Evidence {
                    ln_gain: g,
                    sd,
                    units: r,
                    sweep_runs: r,
                    ..Evidence::default()
                },
                sweep_forces: g > bar.ln_margin,
                traced: false,
            });
        }
    }
    let first = &files[parts[0].file].path;
    let source = Source {
        file: first.clone(),
        line: 0,
    };
    let sd_point = admitted
        .iter()
        .map(|a| a.e.sd)
        .fold(0.0f64, f64::max)
        .clamp(crate::fit::MIN_SIGMA, crate::fit::MAX_SIGMA);
    let base = TimeBase::Trace { sd_ln: sd_point };
    // NCCL's choice counts as exact: the setting's count carries the sd.
    const EXACT: u32 = 1 << 24;
    // ns -> us.
    let t_nccl = nccl_ln.exp() / 1e3;
    let mut cells = vec![Cell {
        key: key.cell_key(Config::DEFAULT),
        time_us: t_nccl,
        n: EXACT,
        spread: 0.0,
        source: source.clone(),
        base,
    }];
    let mut settings = Vec::new();
    for Admitted { cfg, e, traced, .. } in &admitted {
        let sd = e.sd.max(crate::fit::MIN_SIGMA);
        // sd_point^2 / n >= sd^2: the decision's noise is never below it.
        let n = ((sd_point / sd).powi(2).floor() as u32).clamp(1, EXACT);
        cells.push(Cell {
            key: key.cell_key(*cfg),
            time_us: t_nccl / e.ln_gain.exp(),
            n,
            spread: 0.0,
            source: source.clone(),
            base,
        });
        if *traced {
            settings.push(TracedGain {
                config: cfg.to_string(),
                gain: e.ln_gain.exp(),
                count: e.calls,
                evidence: *e,
                verdict: judge(e, bar),
            });
        }
    }
    let nccl_choice = most_run(&nccl_settings).map(|s| s.to_string());
    let point = TracedPoint {
        collective: key.coll.name(),
        nodes: key.nodes,
        ranks: key.ranks,
        bytes: key.n_bytes,
        replaced_sweep: replaced,
        deployed,
        deployed_name: match deployed {
            Deployed::Nccl => "default".into(),
            Deployed::Forced(c) => c.to_string(),
        },
        nccl_choice,
        settings,
        nccl_version: version,
        communicators: parts.len(),
        files: parts
            .iter()
            .map(|p| files[p.file].path.display().to_string())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect(),
        key,
    };
    Some((cells, point))
}

fn version(code: u32) -> String {
    if code == 0 {
        "(version unknown)".into()
    } else {
        format!("{}.{}.{}", code / 10000, code % 10000 / 100, code % 100)
    }
}

fn names(s: &BTreeSet<Setting>) -> String {
    s.iter()
        .map(Setting::to_string)
        .collect::<Vec<_>>()
        .join(" or ")
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use dyncc_tables::trace::Source as Who;
    use dyncc_tables::{Algo, Coll, Proto};

    use super::*;
    use crate::ingest::traces::files::Comm;
    use crate::ingest::traces::test_util::{file, rec, RING, TREE};

    /// A sweep that measured NCCL's default and Tree/LL (channels left to
    /// NCCL) for AllReduce at 8 ranks per node, at no point: the settings
    /// traces may have forced.
    fn naming_tree() -> SweepView {
        let mut v = SweepView::default();
        v.configs
            .entry((Coll::AllReduce, 8))
            .or_default()
            .extend([Config::DEFAULT, auto(TREE)]);
        v
    }

    fn auto((algo, proto): (Algo, Proto)) -> Config {
        Config {
            algo: Some(algo),
            proto: Some(proto),
            channels: None,
            chunk: dyncc_tables::Chunk::NCCL,
        }
    }

    #[test]
    fn a_gain_is_read_within_each_file_and_pooled() {
        // Two jobs at one point on different time scales (10x apart): Tree
        // wins by 25 % in each; a comparison across files would say 8x.
        let mut a = file(vec![
            rec(0, 4096, RING, Who::Nccl, 100, 1000.0),
            rec(0, 4096, TREE, Who::Explore, 100, 800.0),
        ]);
        let b = TraceFile {
            comms: vec![Comm {
                comm_id: 2,
                ..a.comms[0]
            }],
            records: vec![
                rec(0, 4096, RING, Who::Nccl, 100, 10000.0),
                rec(0, 4096, TREE, Who::Explore, 100, 8000.0),
            ],
            ..a.clone()
        };
        a.path = Arc::new("b.trace".into());
        let (cells, notes) = cells(&[a, b], &naming_tree(), Bar::new(0.03, 0.5));
        assert_eq!(notes.points.len(), 1);
        assert!((notes.points[0].settings[0].gain - 1.25).abs() < 1e-9);
        let t = |cfg: &Config| cells.iter().find(|c| c.key.config == *cfg).unwrap().time_us;
        let tree = auto(TREE);
        assert!((t(&Config::DEFAULT) / t(&tree) - 1.25).abs() < 1e-9);
        assert!(cells
            .iter()
            .all(|c| matches!(c.base, TimeBase::Trace { .. })));
    }
    /// Jobs that let NCCL choose at a count the sweep skipped measure no
    /// gain, but say what NCCL runs there: a mark the plan reads (forcing
    /// it would run the same). Only one setting in every communicator, one
    /// the sweep measured, over enough calls, by an NCCL no older than the
    /// sweep's, and never at a count the sweep measured.
    #[test]
    fn what_nccl_ran_alone_at_a_skipped_count_is_marked_and_nothing_else() {
        let mut v = SweepView::default();
        for b in [4096u64, 8192, 16384] {
            v.sizes.entry(Coll::AllReduce).or_default().insert(b);
            v.points.insert(PointKey {
                coll: Coll::AllReduce,
                nodes: 2,
                ranks: 16,
                n_bytes: b,
            });
        }
        v.configs.entry((Coll::AllReduce, 8)).or_default().extend([
            Config::DEFAULT,
            auto(RING),
            auto(TREE),
        ]);
        let mut f = file(vec![
            // 4096 at 4 nodes: NCCL ran Ring/Simple in both communicators.
            rec(0, 4096, RING, Who::Nccl, 100, 1000.0),
            rec(1, 4096, RING, Who::Nccl, 100, 1000.0),
            // 8192 at 4 nodes: the two communicators' NCCL ran differently.
            rec(0, 8192, RING, Who::Nccl, 100, 1000.0),
            rec(1, 8192, TREE, Who::Nccl, 100, 1000.0),
            // 4096 at 2 nodes, a count the sweep measured.
            rec(2, 4096, RING, Who::Nccl, 100, 1000.0),
            // 16384 at 4 nodes: fewer calls than any evidence needs.
            rec(0, 16384, RING, Who::Nccl, rule::MIN_CALLS - 1, 1000.0),
        ]);
        let comm = f.comms[0];
        f.comms = vec![
            comm,
            Comm { comm_id: 2, ..comm },
            Comm {
                comm_id: 3,
                n_nodes: 2,
                n_ranks: 16,
                ..comm
            },
        ];
        let (cells, notes) = cells(std::slice::from_ref(&f), &v, Bar::new(0.03, 0.5));
        assert!(notes.points.is_empty(), "nothing compared: no point");
        let marks: Vec<_> = cells
            .iter()
            .map(|c| (c.key.nnodes, c.key.nbytes, c.key.config, c.base))
            .collect();
        assert_eq!(marks, vec![(4, 4096, auto(RING), TimeBase::NcclRan)]);
        // Traces of an NCCL older than the sweep's say nothing of what the
        // table's NCCL runs.
        v.nccl_version = f.nccl_version + 1;
        let (older, _) = super::cells(&[f], &v, Bar::new(0.03, 0.5));
        assert!(older.is_empty(), "{older:?}");
    }

    #[test]
    fn a_trace_claiming_absurd_counts_and_sums_is_no_measurement_and_no_panic() {
        let mut big = rec(0, 4096, RING, Who::Nccl, u64::MAX, 1000.0);
        big.sum_ln = 1e300;
        let f = file(vec![
            big,
            rec(0, 4096, RING, Who::Nccl, u64::MAX, 1000.0),
            rec(0, 4096, TREE, Who::Explore, u64::MAX, 800.0),
            rec(0, 8192, RING, Who::Nccl, u64::MAX, 1000.0),
            rec(0, 8192, TREE, Who::Explore, 10, 800.0),
        ]);
        let (cells, notes) = cells(&[f], &naming_tree(), Bar::new(0.03, 0.5));
        assert_eq!(notes.read.collectives, u64::MAX);
        // 4096: an infinite mean is no time; 8192: a plain comparison.
        assert_eq!(notes.points.len(), 1);
        assert_eq!(notes.points[0].bytes, 8192);
        assert!(cells
            .iter()
            .all(|c| c.time_us.is_finite() && c.time_us > 0.0));
    }
}
