//! Compares the simulator's physics with a real AllReduce sweep in the
//! tuner-example CSV schema (the DGX-1V set in `datasets/real/`): per
//! (nodes, algorithm/protocol) RMS log error, the crossovers side by side,
//! and NCCL's default gap, real versus simulated.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{bail, Context};
use serde::Serialize;

use super::nccl_model::NcclModel;
use super::physics;
use super::profile::Profile;
use crate::record::{Algo, Coll, Proto};

/// Real times: nodes -> (size, Some((algo, proto)) | None for default) -> µs.
pub type RealSweep = BTreeMap<u32, BTreeMap<(u64, Option<(Algo, Proto)>), f64>>;

/// Reads the AllReduce rows of a tuner-schema CSV.
pub fn read_real(path: &Path) -> anyhow::Result<RealSweep> {
    let mut rd = csv::Reader::from_reader(crate::input::open(path, &crate::input::CALIBRATION)?);
    let hdr = rd.headers()?.clone();
    let col = |name: &str| {
        hdr.iter().position(|h| h == name).with_context(|| {
            format!("{}:1: missing column {name:?} (expected the tuner CSV schema: collective,size_bytes,algorithm,protocol,channels,nodes,...,cost_metric)", path.display())
        })
    };
    let (ci, si, ai, pi, ni, ti) = (
        col("collective")?,
        col("size_bytes")?,
        col("algorithm")?,
        col("protocol")?,
        col("nodes")?,
        col("cost_metric")?,
    );
    let mut out = RealSweep::new();
    for (i, rec) in rd.records().enumerate() {
        let line = i + 2;
        let rec =
            rec.with_context(|| format!("{}:{line}: unreadable CSV record", path.display()))?;
        let field = |k: usize| rec.get(k).unwrap_or("");
        if Coll::parse(field(ci)) != Some(Coll::AllReduce) {
            continue;
        }
        let num = |k: usize, what: &str| -> anyhow::Result<f64> {
            field(k).trim().parse::<f64>().map_err(|_| {
                anyhow::anyhow!(
                    "{}:{line}: {what} {:?} is not a number",
                    path.display(),
                    field(k)
                )
            })
        };
        let size = num(si, "size_bytes")? as u64;
        let nodes = num(ni, "nodes")? as u32;
        let t = num(ti, "cost_metric")?;
        let cfg = if field(ai) == "default" {
            None
        } else {
            let a = Algo::parse(field(ai)).with_context(|| {
                format!(
                    "{}:{line}: unknown algorithm {:?}",
                    path.display(),
                    field(ai)
                )
            })?;
            let p = Proto::parse(field(pi)).with_context(|| {
                format!(
                    "{}:{line}: unknown protocol {:?}",
                    path.display(),
                    field(pi)
                )
            })?;
            Some((a, p))
        };
        if t > 0.0 {
            out.entry(nodes).or_default().insert((size, cfg), t);
        }
    }
    if out.is_empty() {
        bail!("{}: no AllReduce rows with a positive time", path.display());
    }
    Ok(out)
}

#[derive(Clone, Debug, Serialize)]
pub struct ConfigError {
    pub nodes: u32,
    pub config: String,
    pub points: usize,
    /// RMS of ln(sim / real).
    pub rms_log: f64,
    /// Mean of ln(sim / real) (bias; > 0 means the simulator is slow).
    pub bias_log: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Crossovers {
    pub nodes: u32,
    pub what: String,
    pub real: Option<u64>,
    pub sim: Option<u64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct DefaultGap {
    pub nodes: u32,
    pub real_geomean: f64,
    pub sim_geomean: f64,
    pub real_frac_1_2: f64,
    pub sim_frac_1_2: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub profile: String,
    pub errors: Vec<ConfigError>,
    pub overall_rms_log: f64,
    pub crossovers: Vec<Crossovers>,
    pub default_gap: Vec<DefaultGap>,
    /// Every compared point: (nodes, config, size, real µs, simulated µs).
    pub points: Vec<(u32, String, u64, f64, f64)>,
}

/// First size from which `b` beats `a` at two consecutive sizes.
fn crossover(sizes: &[u64], a: &dyn Fn(u64) -> f64, b: &dyn Fn(u64) -> f64) -> Option<u64> {
    (0..sizes.len()).find_map(|i| {
        let win = |j: usize| b(sizes[j]) < a(sizes[j]);
        (win(i) && (i + 1 == sizes.len() || win(i + 1))).then_some(sizes[i])
    })
}

/// A time lookup: (algorithm, protocol, size) -> µs.
type TimeFn<'a> = &'a dyn Fn(Algo, Proto, u64) -> f64;
/// Given a time lookup and a size, the times of the two sides of a crossover.
type Pair<'b> = Box<dyn Fn(TimeFn, u64) -> (f64, f64) + 'b>;

const CFGS: [(Algo, Proto); 6] = [
    (Algo::Tree, Proto::LL),
    (Algo::Tree, Proto::LL128),
    (Algo::Tree, Proto::Simple),
    (Algo::Ring, Proto::LL),
    (Algo::Ring, Proto::LL128),
    (Algo::Ring, Proto::Simple),
];

pub fn compare(prof: &Profile, real: &RealSweep) -> Report {
    let mut errors = Vec::new();
    let mut crossovers = Vec::new();
    let mut default_gap = Vec::new();
    let mut points = Vec::new();
    let (mut all_sq, mut all_n) = (0.0, 0usize);
    for (&nodes, cells) in real {
        let model = NcclModel::new(prof, nodes);
        let sim = |algo: Algo, proto: Proto, nbytes: u64| {
            physics::true_time(prof, model.op(Coll::AllReduce, algo, proto, nbytes))
        };
        let sizes: Vec<u64> = {
            let mut v: Vec<u64> = cells.keys().map(|k| k.0).collect();
            v.dedup();
            v
        };
        for (a, p) in CFGS {
            let mut e = Vec::new();
            for &s in &sizes {
                if let Some(&t) = cells.get(&(s, Some((a, p)))) {
                    let m = sim(a, p, s);
                    points.push((nodes, format!("{}/{}", a.name(), p.name()), s, t, m));
                    e.push((m / t).ln());
                }
            }
            if e.is_empty() {
                continue;
            }
            let sq: f64 = e.iter().map(|x| x * x).sum();
            all_sq += sq;
            all_n += e.len();
            errors.push(ConfigError {
                nodes,
                config: format!("{}/{}", a.name(), p.name()),
                points: e.len(),
                rms_log: (sq / e.len() as f64).sqrt(),
                bias_log: e.iter().sum::<f64>() / e.len() as f64,
            });
        }
        let real_t = |a: Algo, p: Proto, s: u64| {
            cells
                .get(&(s, Some((a, p))))
                .copied()
                .unwrap_or(f64::INFINITY)
        };
        let best = |f: TimeFn, a: Algo, s: u64| {
            Proto::ALL
                .iter()
                .map(|&p| f(a, p, s))
                .fold(f64::INFINITY, f64::min)
        };
        let pairs: [(&str, Pair); 5] = [
            (
                "Tree->Ring (best protocol each)",
                Box::new(|f, s| (best(f, Algo::Tree, s), best(f, Algo::Ring, s))),
            ),
            (
                "Ring LL->LL128",
                Box::new(|f, s| (f(Algo::Ring, Proto::LL, s), f(Algo::Ring, Proto::LL128, s))),
            ),
            (
                "Ring LL128->Simple",
                Box::new(|f, s| {
                    (
                        f(Algo::Ring, Proto::LL128, s),
                        f(Algo::Ring, Proto::Simple, s),
                    )
                }),
            ),
            (
                "Tree LL->LL128",
                Box::new(|f, s| (f(Algo::Tree, Proto::LL, s), f(Algo::Tree, Proto::LL128, s))),
            ),
            (
                "Tree LL128->Simple",
                Box::new(|f, s| {
                    (
                        f(Algo::Tree, Proto::LL128, s),
                        f(Algo::Tree, Proto::Simple, s),
                    )
                }),
            ),
        ];
        for (what, g) in pairs.iter() {
            let r = crossover(&sizes, &|s| g(&real_t, s).0, &|s| g(&real_t, s).1);
            let m = crossover(&sizes, &|s| g(&sim, s).0, &|s| g(&sim, s).1);
            crossovers.push(Crossovers {
                nodes,
                what: what.to_string(),
                real: r,
                sim: m,
            });
        }
        // Default gap: real default / best forced; simulated NCCL choice / best.
        let (mut rl, mut sl, mut rk, mut sk, mut n) = (0.0, 0.0, 0usize, 0usize, 0usize);
        for &s in &sizes {
            let Some(&d) = cells.get(&(s, None)) else {
                continue;
            };
            let rb = CFGS
                .iter()
                .map(|&(a, p)| real_t(a, p, s))
                .fold(f64::INFINITY, f64::min);
            let sb = CFGS
                .iter()
                .map(|&(a, p)| sim(a, p, s))
                .fold(f64::INFINITY, f64::min);
            let Some(def) = model.choose(Coll::AllReduce, s) else {
                continue;
            };
            let sd = physics::true_time(prof, def);
            let (rr, sr) = ((d / rb).max(1.0), sd / sb);
            rl += rr.ln();
            sl += sr.ln();
            rk += (rr >= 1.2) as usize;
            sk += (sr >= 1.2) as usize;
            n += 1;
        }
        if n > 0 {
            default_gap.push(DefaultGap {
                nodes,
                real_geomean: (rl / n as f64).exp(),
                sim_geomean: (sl / n as f64).exp(),
                real_frac_1_2: rk as f64 / n as f64,
                sim_frac_1_2: sk as f64 / n as f64,
            });
        }
    }
    Report {
        profile: prof.name.clone(),
        errors,
        overall_rms_log: (all_sq / all_n.max(1) as f64).sqrt(),
        crossovers,
        default_gap,
        points,
    }
}

fn size_str(s: Option<u64>) -> String {
    match s {
        None => "none".into(),
        Some(s) if s >= 1 << 30 => format!("{} GiB", s >> 30),
        Some(s) if s >= 1 << 20 => format!("{} MiB", s >> 20),
        Some(s) if s >= 1 << 10 => format!("{} KiB", s >> 10),
        Some(s) => format!("{s} B"),
    }
}

/// Markdown rendering of the report.
pub fn markdown(r: &Report) -> String {
    let mut s = String::new();
    s.push_str(&format!(
        "Profile `{}`. Overall RMS of ln(sim/real) over every point: {:.3} (a factor of {:.2}).\n\n",
        r.profile,
        r.overall_rms_log,
        r.overall_rms_log.exp()
    ));
    let nodes: Vec<u32> = {
        let mut v: Vec<u32> = r.errors.iter().map(|e| e.nodes).collect();
        v.dedup();
        v
    };
    s.push_str("RMS log error (bias) per configuration and node count:\n\n| config |");
    for n in &nodes {
        s.push_str(&format!(" {n} node{} |", if *n == 1 { "" } else { "s" }));
    }
    s.push_str("\n|---|");
    s.push_str(&"---|".repeat(nodes.len()));
    s.push('\n');
    for (a, p) in CFGS {
        let cfg = format!("{}/{}", a.name(), p.name());
        s.push_str(&format!("| {cfg} |"));
        for n in &nodes {
            match r.errors.iter().find(|e| e.nodes == *n && e.config == cfg) {
                Some(e) => s.push_str(&format!(" {:.2} ({:+.2}) |", e.rms_log, e.bias_log)),
                None => s.push_str(" - |"),
            }
        }
        s.push('\n');
    }
    s.push_str("\nCrossovers (first size from which the second wins at two consecutive sizes), real / simulated:\n\n| crossover |");
    for n in &nodes {
        s.push_str(&format!(" {n}N |"));
    }
    s.push_str("\n|---|");
    s.push_str(&"---|".repeat(nodes.len()));
    s.push('\n');
    let whats: Vec<String> = {
        let mut v: Vec<String> = Vec::new();
        for c in &r.crossovers {
            if !v.contains(&c.what) {
                v.push(c.what.clone());
            }
        }
        v
    };
    for w in &whats {
        s.push_str(&format!("| {w} |"));
        for n in &nodes {
            match r.crossovers.iter().find(|c| c.nodes == *n && &c.what == w) {
                Some(c) => s.push_str(&format!(" {} / {} |", size_str(c.real), size_str(c.sim))),
                None => s.push_str(" - |"),
            }
        }
        s.push('\n');
    }
    s.push_str("\nNCCL default versus best forced (algorithm, protocol), geometric mean over sizes and share of sizes ≥ 1.2x off:\n\n| nodes | real geomean | simulated geomean | real ≥1.2x | simulated ≥1.2x |\n|---|---|---|---|---|\n");
    for g in &r.default_gap {
        s.push_str(&format!(
            "| {} | {:.3} | {:.3} | {:.0} % | {:.0} % |\n",
            g.nodes,
            g.real_geomean,
            g.sim_geomean,
            100.0 * g.real_frac_1_2,
            100.0 * g.sim_frac_1_2
        ));
    }
    s
}
