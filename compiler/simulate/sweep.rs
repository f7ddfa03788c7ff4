//! A simulated sweep: the grid of runs (nodes x collective x configuration x
//! repeat), one nccl-tests log per run as a real sweep would leave behind,
//! the optional CSV, the ground truth beside it, and the default-gap figures.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Normal};
use serde::Serialize;

use super::format::{self, Row, RunHeader};
use super::nccl_model::NcclModel;
use super::op::Op;
use super::physics;
use super::profile::Profile;
use crate::record::{Algo, Coll, Proto};

/// Channel setting of a forced run.
#[derive(Clone, Copy, PartialEq, Eq, Debug, PartialOrd, Ord, Hash)]
pub enum Ch {
    /// Not forced: NCCL's channel rule decides.
    Auto,
    /// `NCCL_MIN_NCHANNELS = NCCL_MAX_NCHANNELS = n`.
    Fixed(u32),
}

impl Ch {
    pub fn label(self) -> String {
        match self {
            Ch::Auto => "auto".into(),
            Ch::Fixed(n) => n.to_string(),
        }
    }
}

/// What to simulate.
#[derive(Clone, Debug)]
pub struct Spec {
    pub profile: Profile,
    pub nodes: Vec<u32>,
    pub colls: Vec<Coll>,
    pub min_bytes: u64,
    pub max_bytes: u64,
    pub channels: Vec<Ch>,
    /// Chunk sizes, bytes, each forced setting also runs at with the dyncc
    /// plugin answering `getChunkSize` (`DYNCC_SWEEP_CHUNK`), as `dyncc plan
    /// --chunks` sweeps do; empty: NCCL's chunk only.
    pub chunks: Vec<u64>,
    pub repeats: u32,
    pub seed: u64,
}

impl Spec {
    /// Requested sizes: doubling from min to max.
    pub fn sizes(&self) -> Vec<u64> {
        let mut v = Vec::new();
        let mut s = self.min_bytes.max(1);
        while s <= self.max_bytes {
            v.push(s);
            s = match s.checked_mul(2) {
                Some(x) => x,
                None => break,
            };
        }
        v
    }
}

/// One run = one log file.
#[derive(Clone, Debug)]
pub struct Run {
    pub nnodes: u32,
    pub coll: Coll,
    /// `None`: default run (nothing forced).
    pub config: Option<(Algo, Proto, Ch)>,
    /// The chunk the plugin is asked to answer, bytes (0: NCCL's, no plugin).
    pub chunk: u64,
    pub repeat: u32,
}

impl Run {
    /// Path relative to the output directory.
    pub fn rel_path(&self, profile: &str) -> PathBuf {
        let name = match self.config {
            None => format!("default_r{}.log", self.repeat),
            Some((a, p, c)) => format!(
                "{}_{}_c{}_r{}.log",
                a.name(),
                p.name(),
                c.label(),
                self.repeat
            ),
        };
        let dir = PathBuf::from(profile)
            .join(format!("n{}", self.nnodes))
            .join(self.coll.name());
        // A `chunk=BYTES` folder, as a `dyncc plan --chunks` sweep files its
        // chunk runs: a label that agrees with the plugin's line.
        match self.chunk {
            0 => dir.join(name),
            k => dir.join(format!("chunk={k}")).join(name),
        }
    }

    fn knobs(&self) -> String {
        match self.config {
            None => "NCCL_ALGO=default NCCL_PROTO=default".into(),
            Some((a, p, c)) => {
                let mut s = format!("NCCL_ALGO={} NCCL_PROTO={}", a.env_name(), p.env_name());
                if let Ch::Fixed(n) = c {
                    s.push_str(&format!(" NCCL_MIN_NCHANNELS={n} NCCL_MAX_NCHANNELS={n}"));
                }
                s
            }
        }
    }
}

/// What a run forces: `None` for NCCL's default.
type Forced = Option<(Algo, Proto, Ch)>;

/// Every run of the sweep, in a stable order: per node count, collective
/// and repeat, NCCL's default, the forced settings, then each forced setting
/// again per chunk its protocol runs as set (`dyncc plan --chunks`'s order).
pub fn plan(spec: &Spec) -> Vec<Run> {
    let mut runs = Vec::new();
    for &nnodes in &spec.nodes {
        for &coll in &spec.colls {
            let cfgs = physics::configs(&spec.profile, nnodes, coll);
            for repeat in 0..spec.repeats {
                runs.push(Run {
                    nnodes,
                    coll,
                    config: None,
                    chunk: 0,
                    repeat,
                });
                for chunk in std::iter::once(0).chain(spec.chunks.iter().copied()) {
                    for &(a, p) in &cfgs {
                        if chunk != 0 && p.chunk_at_most(chunk).is_nccl() {
                            // Below the protocol's grain: NCCL's chunk would run.
                            continue;
                        }
                        for &c in &spec.channels {
                            runs.push(Run {
                                nnodes,
                                coll,
                                config: Some((a, p, c)),
                                chunk,
                                repeat,
                            });
                        }
                    }
                }
            }
        }
    }
    runs
}

/// The models, one per node count.
pub struct Models {
    by_nodes: BTreeMap<u32, NcclModel>,
}

impl Models {
    pub fn new(spec: &Spec) -> Models {
        Models {
            by_nodes: spec
                .nodes
                .iter()
                .map(|&n| (n, NcclModel::new(&spec.profile, n)))
                .collect(),
        }
    }

    pub fn get(&self, nnodes: u32) -> &NcclModel {
        &self.by_nodes[&nnodes]
    }
}

/// What a run executes at `nbytes` on `model`'s nodes: the forced
/// (algorithm, protocol) with its channels resolved, or NCCL's default.
pub fn executed(
    model: &NcclModel,
    coll: Coll,
    config: Option<(Algo, Proto, Ch)>,
    nbytes: u64,
) -> Option<Op> {
    let forced = |algo, proto, channels| Op {
        coll,
        nnodes: model.nnodes,
        nbytes,
        algo,
        proto,
        channels,
    };
    match config {
        None => model.choose(coll, nbytes),
        Some((a, p, Ch::Auto)) => Some(forced(a, p, model.channels(a, p, nbytes))),
        Some((a, p, Ch::Fixed(n))) => Some(forced(a, p, n)),
    }
}

fn fnv1a(s: &str) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for b in s.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x100000001b3);
    }
    h
}

/// Simulates one run: its rows, noise included. Seeded by (seed, path), so a
/// run's numbers do not depend on what else is in the sweep.
pub fn simulate_run(spec: &Spec, models: &Models, run: &Run) -> Vec<Row> {
    let prof = &spec.profile;
    let key = run.rel_path(&prof.name);
    let mut rng = ChaCha8Rng::seed_from_u64(spec.seed ^ fnv1a(&key.to_string_lossy()));
    let nranks = prof.gpus_per_node * run.nnodes;
    let model = models.get(run.nnodes);
    let std = Normal::new(0.0, 1.0).unwrap();
    // Run-to-run variation: one factor for the whole job.
    let job: f64 = (prof.physics.noise_large * std.sample(&mut rng)).exp();
    let mut rows = Vec::new();
    for (i, req) in spec.sizes().into_iter().enumerate() {
        let (size, count) = format::size_count(run.coll, req, nranks);
        let op = executed(model, run.coll, run.config, size).unwrap_or(Op {
            coll: run.coll,
            nnodes: run.nnodes,
            nbytes: size,
            algo: Algo::Ring,
            proto: Proto::LL,
            channels: 1,
        });
        let t = physics::true_time_chunked(prof, op, answered(op.proto, run.chunk)) * job;
        let mut oop = physics::noisy(prof, size, t, &mut rng);
        let ip = physics::noisy(prof, size, t * 0.995, &mut rng);
        if i == 0 && rng.random::<f64>() < prof.physics.outlier_prob {
            // First size after start-up: caches cold, connections being set up.
            oop *= 3.0 + 12.0 * rng.random::<f64>();
        }
        rows.push(Row {
            size,
            count,
            oop_us: oop,
            ip_us: ip,
        });
    }
    rows
}

/// The chunk the plugin answers on protocol `p` when a run asks `chunk`
/// bytes (0: NCCL's): what `dyncc compile` records as the run's chunk.
pub fn answered(p: Proto, chunk: u64) -> u64 {
    p.chunk_at_most(chunk).bytes() as u64
}

/// One ground-truth line.
#[derive(Clone, Debug, Serialize)]
pub struct Truth {
    pub platform: String,
    pub collective: &'static str,
    pub nodes: u32,
    pub ranks: u32,
    pub size_bytes: u64,
    /// `default` for a default run.
    pub algorithm: &'static str,
    pub protocol: &'static str,
    /// Forced channels, or -1 when not forced.
    pub channels: i64,
    /// Noise-free time (the median of the simulated samples), µs.
    pub true_us: f64,
    /// What actually ran: for a default row, NCCL's emulated choice.
    pub ran_algorithm: &'static str,
    pub ran_protocol: &'static str,
    pub ran_channels: u32,
    /// The chunk the plugin answered, bytes (0: NCCL's); a column of
    /// truth.csv only in a sweep that varies it, so other sweeps' truth
    /// reads as before.
    #[serde(skip)]
    pub chunk: u64,
}

/// A truth line with its chunk column, for sweeps that vary the chunk
/// (`eval --truth` reads the column when it is there).
#[derive(Serialize)]
struct TruthAtChunk<'a> {
    platform: &'a str,
    collective: &'static str,
    nodes: u32,
    ranks: u32,
    size_bytes: u64,
    algorithm: &'static str,
    protocol: &'static str,
    channels: i64,
    true_us: f64,
    ran_algorithm: &'static str,
    ran_protocol: &'static str,
    ran_channels: u32,
    chunk: u64,
}

impl<'a> From<&'a Truth> for TruthAtChunk<'a> {
    fn from(t: &'a Truth) -> Self {
        TruthAtChunk {
            platform: &t.platform,
            collective: t.collective,
            nodes: t.nodes,
            ranks: t.ranks,
            size_bytes: t.size_bytes,
            algorithm: t.algorithm,
            protocol: t.protocol,
            channels: t.channels,
            true_us: t.true_us,
            ran_algorithm: t.ran_algorithm,
            ran_protocol: t.ran_protocol,
            ran_channels: t.ran_channels,
            chunk: t.chunk,
        }
    }
}

/// Ground truth for every (nodes, collective, size, configuration) of the sweep.
pub fn truth(spec: &Spec, models: &Models) -> Vec<Truth> {
    let prof = &spec.profile;
    let mut out = Vec::new();
    for &nnodes in &spec.nodes {
        let model = models.get(nnodes);
        let nranks = prof.gpus_per_node * nnodes;
        for &coll in &spec.colls {
            // (forced setting or NCCL's default, the chunk answered).
            let mut cfgs: Vec<(Forced, u64)> = vec![(None, 0)];
            for chunk in std::iter::once(0).chain(spec.chunks.iter().copied()) {
                for (a, p) in physics::configs(prof, nnodes, coll) {
                    if chunk != 0 && p.chunk_at_most(chunk).is_nccl() {
                        continue;
                    }
                    for &c in &spec.channels {
                        cfgs.push((Some((a, p, c)), answered(p, chunk)));
                    }
                }
            }
            for req in spec.sizes() {
                let (size, _) = format::size_count(coll, req, nranks);
                if size == 0 {
                    continue;
                }
                for &(cfg, chunk) in &cfgs {
                    let Some(op) = executed(model, coll, cfg, size) else {
                        continue;
                    };
                    let (algorithm, protocol, channels) = match cfg {
                        None => ("default", "default", -1),
                        Some((a, p, c)) => (
                            a.name(),
                            p.name(),
                            match c {
                                Ch::Auto => -1,
                                Ch::Fixed(n) => n as i64,
                            },
                        ),
                    };
                    out.push(Truth {
                        platform: prof.name.clone(),
                        collective: coll.name(),
                        nodes: nnodes,
                        ranks: nranks,
                        size_bytes: size,
                        algorithm,
                        protocol,
                        channels,
                        true_us: physics::true_time_chunked(prof, op, chunk),
                        ran_algorithm: op.algo.name(),
                        ran_protocol: op.proto.name(),
                        ran_channels: op.channels,
                        chunk,
                    });
                }
            }
        }
    }
    out
}

/// How far NCCL's emulated default is from the best, over noise-free truth.
#[derive(Clone, Debug, Serialize)]
pub struct Gap {
    pub profile: String,
    /// `None`: every node count together.
    pub nodes: Option<u32>,
    pub cells: usize,
    /// Geometric mean of default / best (algorithm, protocol) with NCCL's own
    /// channel count: the figure comparable to real sweeps, which do not pin channels.
    pub geomean: f64,
    /// Fraction of cells where the default is ≥ 1.2x slower than that best.
    pub frac_over_1_2: f64,
    pub max: f64,
    /// Geometric mean of default / best of everything simulated, pinned channel counts included.
    pub geomean_all: f64,
}

/// Per-cell default/best ratios: (nodes, coll, size, vs best auto-channel config, vs best of all).
pub fn gap_cells(spec: &Spec, models: &Models) -> Vec<(u32, Coll, u64, f64, f64)> {
    let prof = &spec.profile;
    let mut out = Vec::new();
    for &nnodes in &spec.nodes {
        let model = models.get(nnodes);
        let nranks = prof.gpus_per_node * nnodes;
        for &coll in &spec.colls {
            let cfgs = physics::configs(prof, nnodes, coll);
            for req in spec.sizes() {
                let (size, _) = format::size_count(coll, req, nranks);
                if size == 0 {
                    continue;
                }
                let Some(nccls) = model.choose(coll, size) else {
                    continue;
                };
                let def = physics::true_time(prof, nccls);
                let mut best_auto = f64::INFINITY;
                let mut best_all = f64::INFINITY;
                for &(algo, proto) in &cfgs {
                    let at = |channels| Op {
                        algo,
                        proto,
                        channels,
                        ..nccls
                    };
                    let t = physics::true_time(prof, at(model.channels(algo, proto, size)));
                    best_auto = best_auto.min(t);
                    best_all = best_all.min(t);
                    for ch in &spec.channels {
                        if let Ch::Fixed(n) = ch {
                            best_all = best_all.min(physics::true_time(prof, at(*n)));
                        }
                    }
                }
                out.push((nnodes, coll, size, def / best_auto, def / best_all.min(def)));
            }
        }
    }
    out
}

/// Gap summary per node count and overall.
pub fn gaps(spec: &Spec, models: &Models) -> Vec<Gap> {
    let cells = gap_cells(spec, models);
    let summarise = |nodes: Option<u32>| {
        let sel: Vec<_> = cells
            .iter()
            .filter(|c| nodes.is_none_or(|n| c.0 == n))
            .collect();
        let k = sel.len().max(1) as f64;
        Gap {
            profile: spec.profile.name.clone(),
            nodes,
            cells: sel.len(),
            geomean: (sel.iter().map(|c| c.3.ln()).sum::<f64>() / k).exp(),
            frac_over_1_2: sel.iter().filter(|c| c.3 >= 1.2).count() as f64 / k,
            max: sel.iter().map(|c| c.3).fold(1.0, f64::max),
            geomean_all: (sel.iter().map(|c| c.4.ln()).sum::<f64>() / k).exp(),
        }
    };
    let mut v: Vec<Gap> = spec.nodes.iter().map(|&n| summarise(Some(n))).collect();
    v.push(summarise(None));
    v
}

/// Where a chunk beats NCCL's own for one setting, over noise-free truth:
/// one (nodes, collective, algorithm, protocol) and the sizes it wins at.
#[derive(Clone, Debug, Serialize)]
pub struct ChunkGain {
    pub nodes: u32,
    pub collective: &'static str,
    pub algorithm: &'static str,
    pub protocol: &'static str,
    /// Sizes (bytes) where the best chunk is at least 3 % faster than
    /// NCCL's chunk for the same setting, at NCCL's channel count.
    pub from_bytes: u64,
    pub to_bytes: u64,
    /// The largest gain (NCCL's chunk's time / the best chunk's), its size
    /// and the chunk the plugin answered there.
    pub max_gain: f64,
    pub at_bytes: u64,
    pub chunk: u64,
}

/// Every setting where one of the sweep's chunks wins by 3 % or more
/// somewhere (`dyncc simulate --report --chunks`).
pub fn chunk_gains(spec: &Spec, models: &Models) -> Vec<ChunkGain> {
    let prof = &spec.profile;
    let mut out = Vec::new();
    for &nnodes in &spec.nodes {
        let model = models.get(nnodes);
        let nranks = prof.gpus_per_node * nnodes;
        for &coll in &spec.colls {
            for (a, p) in physics::configs(prof, nnodes, coll) {
                let mut g: Option<ChunkGain> = None;
                for req in spec.sizes() {
                    let (size, _) = format::size_count(coll, req, nranks);
                    if size == 0 {
                        continue;
                    }
                    let op = model.op(coll, a, p, size);
                    let t = physics::true_time(prof, op);
                    let Some((tk, k)) = spec
                        .chunks
                        .iter()
                        .map(|&k| answered(p, k))
                        .filter(|&k| k != 0)
                        .map(|k| (physics::true_time_chunked(prof, op, k), k))
                        .min_by(|x, y| x.0.total_cmp(&y.0))
                    else {
                        continue;
                    };
                    let gain = t / tk;
                    if gain < 1.03 {
                        continue;
                    }
                    let e = g.get_or_insert(ChunkGain {
                        nodes: nnodes,
                        collective: coll.name(),
                        algorithm: a.name(),
                        protocol: p.name(),
                        from_bytes: size,
                        to_bytes: size,
                        max_gain: 0.0,
                        at_bytes: size,
                        chunk: k,
                    });
                    e.to_bytes = size;
                    if gain > e.max_gain {
                        (e.max_gain, e.at_bytes, e.chunk) = (gain, size, k);
                    }
                }
                out.extend(g);
            }
        }
    }
    out
}

/// What a written sweep holds.
#[derive(Clone, Debug, Serialize)]
pub struct Written {
    pub out_dir: PathBuf,
    pub profile: String,
    pub files: usize,
    pub bytes: u64,
    pub truth_rows: usize,
    pub csv: Option<PathBuf>,
    pub gaps: Vec<Gap>,
}

/// Writes the whole sweep under `out`: logs, `truth.csv`, and `sweep.csv` when asked.
pub fn write(
    spec: &Spec,
    out: &Path,
    csv: bool,
    bar: &indicatif::ProgressBar,
) -> anyhow::Result<Written> {
    let models = Models::new(spec);
    let runs = plan(spec);
    bar.set_length(runs.len() as u64);
    let prof = &spec.profile;
    let sizes = spec.sizes();
    let mut bytes = 0u64;
    let mut csv_w = csv.then(|| {
        let mut w = csv::Writer::from_writer(Vec::new());
        let _ = w.write_record([
            "collective",
            "size_bytes",
            "algorithm",
            "protocol",
            "channels",
            "nodes",
            "ranks",
            "pipeOps",
            "regBuff",
            "cost_metric",
            "bandwidth_gbps",
            "latency_us",
            "platform",
        ]);
        w
    });
    for run in &runs {
        let rows = simulate_run(spec, &models, run);
        let header = RunHeader {
            profile: prof,
            coll: run.coll,
            nnodes: run.nnodes,
            knobs: run.knobs(),
            repeat: run.repeat,
            min_bytes: *sizes.first().unwrap_or(&0),
            max_bytes: *sizes.last().unwrap_or(&0),
            pid_base: 100_000
                + (fnv1a(&run.rel_path(&prof.name).to_string_lossy()) % 3_000_000) as u32,
            chunk: run.chunk,
        };
        let text = format::render(&header, &rows);
        let path = out.join(run.rel_path(&prof.name));
        format::write_atomic(&path, text.as_bytes())?;
        bytes += text.len() as u64;
        // The tuner schema has no chunk column: a chunk run there would read
        // as one at NCCL's chunk, so chunk runs are in the logs only.
        if let Some(w) = csv_w.as_mut().filter(|_| run.chunk == 0) {
            let nranks = prof.gpus_per_node * run.nnodes;
            let (algo, proto, ch) = match run.config {
                None => (
                    "default".to_string(),
                    "default".to_string(),
                    "-1".to_string(),
                ),
                Some((a, p, c)) => (
                    a.name().to_string(),
                    p.name().to_string(),
                    match c {
                        Ch::Auto => "-1".to_string(),
                        Ch::Fixed(n) => n.to_string(),
                    },
                ),
            };
            for r in rows.iter().filter(|r| r.size > 0) {
                let t = r.oop_us.min(r.ip_us);
                w.write_record([
                    run.coll.name().to_string(),
                    r.size.to_string(),
                    algo.clone(),
                    proto.clone(),
                    ch.clone(),
                    run.nnodes.to_string(),
                    nranks.to_string(),
                    "1".into(),
                    "0".into(),
                    format!("{t:.4}"),
                    format!("{:.6}", r.size as f64 / 1000.0 / t),
                    format!("{t:.4}"),
                    prof.name.clone(),
                ])?;
            }
        }
        bar.inc(1);
    }
    let truth_rows = truth(spec, &models);
    let mut tw = csv::Writer::from_writer(Vec::new());
    for t in &truth_rows {
        if spec.chunks.is_empty() {
            tw.serialize(t)?;
        } else {
            tw.serialize(TruthAtChunk::from(t))?;
        }
    }
    let truth_path = out.join("truth.csv");
    format::write_atomic(
        &truth_path,
        &tw.into_inner().map_err(|e| anyhow::anyhow!("{e}"))?,
    )?;
    let csv_path = match csv_w {
        Some(w) => {
            let p = out.join("sweep.csv");
            format::write_atomic(&p, &w.into_inner().map_err(|e| anyhow::anyhow!("{e}"))?)?;
            Some(p)
        }
        None => None,
    };
    Ok(Written {
        out_dir: out.to_path_buf(),
        profile: prof.name.clone(),
        files: runs.len(),
        bytes,
        truth_rows: truth_rows.len(),
        csv: csv_path,
        gaps: gaps(spec, &models),
    })
}
