//! The learning loop end to end, through the built plugin: a sparse sweep
//! compiles a table; three production rounds at node counts the sweep
//! skipped (500 calls per collective and size; 8 jobs per count and round,
//! each its own communicator) run it in tests/c/world.c with
//! `DYNCC_EXPLORE=0.02` and `DYNCC_TRACE`, each followed by a recompile
//! from the sweep and every round's traces so far, whose table the next
//! round runs; each table is also run without exploration and scored. Worlds: a
//! `dyncc simulate` H100 profile (every collective, 1 KiB to 64 MiB), and
//! one built from the shipped real DGX-2V sweep. Times are the world's
//! noise-free truth for what ran, so the figures are exact; each split
//! prints its figures (`-- --nocapture`), which README quotes.

use std::path::{Path, PathBuf};

use crate::support::cli::dyncc;
use std::os::unix::process::CommandExt;

use crate::world_c::{run_world, simulate_colls, trace_files, WorldRound, PPN, SIMULATED_NCCL};

const CALLS: u32 = 500;

/// Compiles from the test's temporary directory with paths relative to
/// it, as `dyncc`: the table records its command line (argv[0] included),
/// and its digest keys which cells each communicator explores, so the same
/// command line makes every run of a test, in any checkout, draw the same
/// cells (absolute temporary and build paths did not).
pub(crate) fn compile(inputs: &[PathBuf], out: &Path) -> serde_json::Value {
    compile_with(inputs, out, &[])
}

/// [`compile`] with more arguments (`--explore 0.1`).
pub(crate) fn compile_with(inputs: &[PathBuf], out: &Path, extra: &[&str]) -> serde_json::Value {
    let root = out.parent().and_then(Path::parent).unwrap();
    let rel = |p: &Path| p.strip_prefix(root).unwrap_or(p).to_path_buf();
    let o = dyncc()
        .arg0("dyncc")
        .current_dir(root)
        .arg("compile")
        .args(inputs.iter().map(|p| rel(p)))
        .arg("-o")
        .arg(rel(out))
        .args(extra)
        .arg("--json")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// Where the rounds run: the world's truth, its ranks per node and the
/// NCCL version it claims.
pub(crate) struct World<'a> {
    pub(crate) truth: &'a Path,
    pub(crate) ppn: u32,
    pub(crate) nccl: &'a str,
}

impl World<'_> {
    /// A round at `nodes` with `table`, plus `env`.
    pub(crate) fn round(&self, nodes: u32, table: &Path, env: &[(&str, &str)]) -> WorldRound {
        self.round_of(nodes, table, env, CALLS)
    }

    /// [`World::round`] with `calls` per (collective, size).
    pub(crate) fn round_of(
        &self,
        nodes: u32,
        table: &Path,
        env: &[(&str, &str)],
        calls: u32,
    ) -> WorldRound {
        let job = nodes.to_string();
        let mut all = vec![
            ("DYNCC_TABLE", table.to_str().unwrap()),
            ("WORLD_NCCL_VERSION", self.nccl),
            ("WORLD_JOB", job.as_str()),
        ];
        all.extend_from_slice(env);
        run_world(self.truth, nodes, self.ppn, calls, &all)
    }
}

/// Node counts as a split names them: `1,2,8,32`.
pub(crate) fn counts(nodes: &[u32]) -> String {
    nodes
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// Gain captured over several rounds: sum(nccl - ran) / sum(nccl - best).
pub(crate) fn captured(rounds: &[WorldRound]) -> f64 {
    let (mut got, mut best) = (0.0, 0.0);
    for r in rounds {
        got += r.summary.nccl_us - r.summary.ran_us;
        best += r.summary.nccl_us - r.summary.best_us;
    }
    got / best
}

/// (collective, size) shapes where what ran was more than 5 % slower than
/// NCCL's default.
pub(crate) fn slower(r: &WorldRound) -> usize {
    r.shapes
        .iter()
        .filter(|s| s.table_us > 1.05 * s.nccl_us)
        .count()
}

/// Turns of the loop at `production` node counts: per table (the sweep's,
/// then each recompile from the sweep and every round's traces so far)
/// the round as it runs without exploration, and per round the exploring
/// jobs' cost.
struct Loop {
    /// `plain[k][i]`: table `k` (0: the sweep's; `k`: after round `k`) at
    /// `production[i]`, run without exploration.
    plain: Vec<Vec<WorldRound>>,
    /// `cost[r][i]`: round `r + 1`'s exploration cost at `production[i]`,
    /// t(round exploring) / t(round) - 1, averaged over the jobs.
    cost: Vec<Vec<f64>>,
    /// Each recompile's report on the traces.
    traces: Vec<serde_json::Value>,
    /// Per round: the exploring jobs' extra time over the same rounds
    /// without exploration, of all their time (pooled over jobs by time:
    /// what the fleet paid in GPU time; `cost` weighs every job alike, as
    /// `eval --traces` weighs every communicator).
    pooled_cost: Vec<f64>,
    /// Per round: the exploration cost `eval --traces` read off the
    /// round's traces (explored calls' excess over the answer at the same
    /// shape, of the traced GPU time).
    traced_cost: Vec<f64>,
}

impl Loop {
    /// The sweep's table.
    fn before(&self) -> &[WorldRound] {
        &self.plain[0]
    }

    /// The table after the last round.
    fn after(&self) -> &[WorldRound] {
        self.plain.last().unwrap()
    }

    /// Shapes more than 5 % slower than NCCL's default, as a share of all
    /// shapes, with table `k`.
    fn regression_share(&self, k: usize) -> f64 {
        let shapes: usize = self.plain[k].iter().map(|r| r.shapes.len()).sum();
        let worse: usize = self.plain[k].iter().map(slower).sum();
        worse as f64 / shapes.max(1) as f64
    }

    /// Mean exploration cost of round `r` (1-based) over the counts.
    fn mean_cost(&self, r: usize) -> f64 {
        let c = &self.cost[r - 1];
        c.iter().sum::<f64>() / c.len() as f64
    }

    /// A line per round, as printed and quoted in README: captured over
    /// all counts and per count, sizes more than 5 % slower, the round's
    /// exploration cost per count.
    fn describe(&self, production: &[u32]) -> String {
        let mut out = format!(
            "sweep's table: captured {:.1} % ({}); regressions {:.2} %",
            100.0 * captured(&self.plain[0]),
            production
                .iter()
                .zip(&self.plain[0])
                .map(|(n, r)| format!(
                    "{n} nodes {:.1} %, {} slower",
                    100.0 * r.captured(),
                    slower(r)
                ))
                .collect::<Vec<_>>()
                .join("; "),
            100.0 * self.regression_share(0)
        );
        for r in 1..self.plain.len() {
            out.push_str(&format!(
                "\n  after round {r}: captured {:.1} % ({}); regressions {:.2} %; exploring cost {} (mean {:+.3} %, pooled {:+.3} %; eval --traces read {:+.3} %); 0 disagreements",
                100.0 * captured(&self.plain[r]),
                production
                    .iter()
                    .zip(&self.plain[r])
                    .map(|(n, w)| format!("{n} nodes {:.1} %, {} slower", 100.0 * w.captured(), slower(w)))
                    .collect::<Vec<_>>()
                    .join("; "),
                100.0 * self.regression_share(r),
                production
                    .iter()
                    .zip(&self.cost[r - 1])
                    .map(|(n, c)| format!("{n}: {:+.3} %", 100.0 * c))
                    .collect::<Vec<_>>()
                    .join(", "),
                100.0 * self.mean_cost(r),
                100.0 * self.pooled_cost[r - 1],
                100.0 * self.traced_cost[r - 1],
            ));
        }
        out
    }
}

/// Jobs per node count in an exploring round, each its own communicator
/// (commHash): exploration is drawn per communicator, so one job explores
/// some cells on every call and the rest not at all; its budget holds in
/// expectation over jobs.
const JOBS: u32 = 8;

/// How a round's jobs measure: how many per node count, calls per
/// (collective, size) each, and the spread of ln(time) between jobs.
#[derive(Clone, Copy)]
struct Fleet {
    jobs: u32,
    calls: u32,
    /// `WORLD_JOB_NOISE`: None, every job sees the same per-call noise.
    job_noise: Option<&'static str>,
    /// Share of the gain at a count a recompile may lose to noise.
    may_lose: f64,
}

/// [`JOBS`] jobs of [`CALLS`] calls, no spread between jobs.
const FEW_LONG_JOBS: Fleet = Fleet {
    jobs: JOBS,
    calls: CALLS,
    job_noise: None,
    may_lose: 0.01,
};

/// The exploration share the rounds run with.
const SHARE: f64 = 0.02;

/// Rounds of the loop each world runs (issue 27 item 8).
const ROUNDS: usize = 3;

/// Where the budget F is held: by every draw's rounds, or by their mean
/// over draws ([`the_loop_over_draws`] asserts it).
#[derive(Clone, Copy, PartialEq)]
enum Budget {
    /// A round's mean cost over its jobs is within F.
    EveryDraw,
    /// Left to the caller: F bounds the expected cost, and one draw's 32
    /// jobs may pay more (a few probes in cells whose bound erred).
    OverDraws,
}

/// Runs [`ROUNDS`] turns of the loop in `world` from `sweep`, in `dir`:
/// each round runs the fleet's exploring jobs per production count with the
/// current table, then recompiles from the sweep and every round's traces
/// so far. What holds for every split and round is asserted here: ranks
/// never disagree, no WARN, exploration's cost, averaged over the jobs at
/// a count (each against the same round, same noise, without it), within
/// its budget F (the expected extra time; one job may pay more), and no
/// recompile captures less at any count than the table before it.
fn rounds(
    world: &World<'_>,
    sweep: &[PathBuf],
    production: &[u32],
    dir: &Path,
    budget: Budget,
    fleet: Fleet,
) -> Loop {
    let t0 = dir.join("t0.tbl");
    compile(sweep, &t0);
    let share = SHARE.to_string();
    let mut table = t0;
    let mut l = Loop {
        plain: vec![production
            .iter()
            .map(|&n| world.round(n, &table, &[]))
            .collect()],
        cost: Vec::new(),
        traces: Vec::new(),
        pooled_cost: Vec::new(),
        traced_cost: Vec::new(),
    };
    let mut inputs = sweep.to_vec();
    for r in 1..=ROUNDS {
        let traces = dir.join(format!("traces-{r}"));
        std::fs::create_dir(&traces).unwrap();
        let trace_dir = traces.to_str().unwrap();
        let mut costs = Vec::new();
        let (mut extra_us, mut all_us) = (0.0, 0.0);
        for (i, &n) in production.iter().enumerate() {
            let plain = &l.plain[r - 1][i];
            let mut cost = 0.0;
            // The plain round runs CALLS per shape, the fleet's jobs their
            // own count: times per call compare.
            let scale = f64::from(fleet.calls) / f64::from(CALLS);
            for j in 0..fleet.jobs {
                // A new communicator per job and round (its commHash).
                let job = (100_000 * r as u32 + 1000 * n + j + 1).to_string();
                let mut env = vec![
                    ("DYNCC_EXPLORE", share.as_str()),
                    ("DYNCC_TRACE", trace_dir),
                    ("WORLD_JOB", job.as_str()),
                ];
                if let Some(sd) = fleet.job_noise {
                    env.push(("WORLD_JOB_NOISE", sd));
                }
                let explored = world.round_of(n, &table, &env, fleet.calls);
                assert_eq!(
                    explored.summary.disagreements, 0,
                    "round {r}, {n} nodes, job {j}: ranks disagreed"
                );
                assert_eq!(
                    explored.summary.calls * u64::from(CALLS),
                    plain.summary.calls * u64::from(fleet.calls)
                );
                assert!(explored.warns().is_empty(), "{:?}", explored.warns());
                let plain_us = plain.summary.ran_us * scale;
                cost += (explored.summary.ran_us / plain_us - 1.0) / f64::from(fleet.jobs);
                extra_us += explored.summary.ran_us - plain_us;
                all_us += explored.summary.ran_us;
            }
            costs.push(cost);
        }
        l.pooled_cost.push(extra_us / all_us);
        // The budget F holds in expectation: over the round's jobs at every
        // count (one count's 8 jobs may pay more: a neighbour's setting is
        // assumed to cost 25 %, the table has no estimate of it; issue 27
        // item 4).
        let mean = costs.iter().sum::<f64>() / costs.len() as f64;
        assert!(
            budget == Budget::OverDraws || mean <= SHARE,
            "round {r}: exploration cost {:.3} % of a round on average over its {} jobs ({costs:?})",
            mean * 100.0,
            fleet.jobs as usize * production.len()
        );
        assert_eq!(
            trace_files(&traces).len(),
            production.len() * fleet.jobs as usize
        );
        // What `eval --traces` reports the round's exploration cost, from
        // the traces alone, against what the world measured.
        let o = dyncc()
            .arg("eval")
            .arg(&table)
            .arg("--traces")
            .arg(&traces)
            .arg("--json")
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        l.traced_cost
            .push(v["exploration"]["share"].as_f64().unwrap());
        inputs.push(traces);
        let next = dir.join(format!("t{r}.tbl"));
        let report = compile(&inputs, &next);
        l.traces.push(report["traces"].clone());
        l.cost.push(costs);
        l.plain.push(
            production
                .iter()
                .map(|&n| world.round(n, &next, &[]))
                .collect(),
        );
        table = next;
    }
    for r in 1..=ROUNDS {
        // `eval --traces` reads the cost from the traces alone, each
        // communicator weighing alike: it agrees within half a point with
        // the world's figure weighed alike, the mean over jobs (every count
        // runs as many). Against the time-pooled figure it need not: in a
        // draw of H100 1, 2, 8, 32 with the cost bound at half an sd, round
        // 2's 64-node jobs paid +3.21 % and carry the most time: pooled
        // +2.17 %, mean +1.53 %, read +1.47 %.
        assert!(
            (l.traced_cost[r - 1] - l.mean_cost(r)).abs() <= 0.005,
            "round {r}: eval --traces read {:.3} %: {}",
            100.0 * l.traced_cost[r - 1],
            l.describe(production)
        );
        for (b, a) in l.plain[r - 1].iter().zip(&l.plain[r]) {
            assert!(
                a.captured() >= b.captured() - fleet.may_lose,
                "round {r} lost gain: {}",
                l.describe(production)
            );
        }
    }
    l
}

/// The simulated H100 world (`dyncc simulate`, every collective, 1 KiB
/// to 64 MiB, 1 to 64 nodes, 3 repeats) in `DIR/sim`.
pub(crate) struct SimWorld {
    sim: PathBuf,
    truth: PathBuf,
}

impl SimWorld {
    pub(crate) fn new(dir: &Path) -> SimWorld {
        let sim = dir.join("sim");
        simulate_colls(
            &sim,
            "1,2,4,8,16,32,64",
            "allreduce,allgather,reducescatter,broadcast,reduce",
            "3",
        );
        let truth = sim.join("truth.csv");
        SimWorld { sim, truth }
    }

    pub(crate) fn world(&self) -> World<'_> {
        World {
            truth: &self.truth,
            ppn: PPN,
            nccl: SIMULATED_NCCL,
        }
    }

    /// The sweep's logs at `nodes`.
    pub(crate) fn swept(&self, nodes: &[u32]) -> Vec<PathBuf> {
        nodes
            .iter()
            .map(|n| self.sim.join("h100").join(format!("n{n}")))
            .collect()
    }
}

/// The simulated H100 world: a sweep of 1, 2, 8 and 32 nodes, a round at
/// 4 and 16 (between its counts) and 64 (above); at least 70 % of the gain
/// at each count after one round, and no more than 0.5 % of the shapes
/// more than 5 % slower than NCCL's default. Two more splits are reported
/// (README's table) and held to what holds for every split.
#[test]
fn a_production_round_with_exploration_then_a_recompile_captures_the_gain_at_skipped_counts() {
    let d = tempfile::tempdir().unwrap();
    let h100 = SimWorld::new(d.path());
    let world = h100.world();
    let swept = |nodes: &[u32]| h100.swept(nodes);
    let production = [4, 16, 64];
    let dir = d.path().join("split-1-2-8-32");
    std::fs::create_dir(&dir).unwrap();
    let l = rounds(
        &world,
        &swept(&[1, 2, 8, 32]),
        &production,
        &dir,
        Budget::EveryDraw,
        FEW_LONG_JOBS,
    );
    eprintln!(
        "H100 world, sweep 1,2,8,32 (production 4,16,64): {}",
        l.describe(&production)
    );
    // Every round's traces reach the recompile: all its communicators.
    for (r, t) in l.traces.iter().enumerate() {
        assert_eq!(
            t["communicators"],
            (r + 1) * production.len() * JOBS as usize,
            "{t}"
        );
    }
    assert!(
        l.traces[0]["added"].as_u64().unwrap() > 0,
        "{}",
        l.traces[0]
    );
    for r in 0..=ROUNDS {
        assert!(
            l.regression_share(r) <= 0.005,
            "table {r}: {:.2} % of the shapes more than 5 % slower than NCCL's default",
            100.0 * l.regression_share(r)
        );
    }
    // Each count on its own: no count captures less after the round, and
    // the round buys something over all. (With exploration drawn per
    // communicator, rank-consistent by construction, one round of 8 jobs
    // per count compares fewer shapes than the per-call schedule did, which
    // could hang a job: 4 nodes reaches 53.3 %, where that schedule reached
    // 85 %; README "Learning from your jobs" says so.)
    for (b, a) in l.before().iter().zip(l.after()) {
        assert!(
            a.captured() >= b.captured() - 0.005,
            "{}",
            l.describe(&production)
        );
    }
    assert!(
        captured(&l.plain[1]) > captured(l.before()) + 0.02,
        "{}",
        l.describe(&production)
    );
    // Later rounds go on learning at the count the sweep reads worst (4
    // nodes, between 2 and 8): each round's table leaves other cells
    // unconfirmed, which the next round's jobs explore. Round 3 closes a
    // quarter of what round 1 left there at least (with the cost bound at
    // half an sd, 92.2 -> 95.9 %; at one sd, 71.7 -> 93.3 %).
    let r1 = l.plain[1][0].captured();
    assert!(
        l.after()[0].captured() > r1 + 0.25 * (1.0 - r1),
        "{}",
        l.describe(&production)
    );
    for (sweep, production) in [
        (&[1, 2, 16][..], &[4, 8, 32, 64][..]),
        (&[1, 2, 4], &[8, 16, 32]),
    ] {
        let name = counts(sweep);
        let dir = d.path().join(format!("split-{name}"));
        std::fs::create_dir(&dir).unwrap();
        let l = rounds(
            &world,
            &swept(sweep),
            production,
            &dir,
            Budget::EveryDraw,
            FEW_LONG_JOBS,
        );
        eprintln!(
            "H100 world, sweep {name} (production {}): {}",
            counts(production),
            l.describe(production)
        );
    }
}

/// A world from a real sweep (the shipped DGX-2V or DGX-1V AllReduce
/// sweep: every size with NCCL's default and six forced settings) as
/// `truth.csv`, each setting at its median time, under the CSV's platform.
/// The CSV does not say what NCCL's default ran; the world takes the forced
/// setting whose time is nearest the default's. Nor how many channels a
/// kernel ran: the world claims `ran_channels` (the Coll events' count).
/// Returns the truth file.
pub(crate) fn world_from_real_sweep(csv: &Path, dir: &Path, ran_channels: u32) -> PathBuf {
    use std::collections::BTreeMap;
    let text = std::fs::read_to_string(csv).unwrap();
    let mut lines = text.lines();
    let head: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |name: &str| head.iter().position(|h| *h == name).unwrap();
    let cpl = col("platform");
    let mut platform = String::new();
    let (cn, cr, cb, ca, cp, cc, ct) = (
        col("nodes"),
        col("ranks"),
        col("size_bytes"),
        col("algorithm"),
        col("protocol"),
        col("channels"),
        col("cost_metric"),
    );
    // (nodes, ranks, bytes) -> (algorithm, protocol, channels) -> times.
    type Point = (u32, u32, u64);
    type Setting = (String, String, i64);
    let mut times: BTreeMap<Point, BTreeMap<Setting, Vec<f64>>> = BTreeMap::new();
    for l in lines {
        let f: Vec<&str> = l.split(',').collect();
        // "DGX-2V" -> "dgx2v": the label the world's rows carry.
        let label: String = f[cpl]
            .chars()
            .filter(char::is_ascii_alphanumeric)
            .map(|c| c.to_ascii_lowercase())
            .collect();
        assert!(
            platform.is_empty() || platform == label,
            "{}: one platform per world",
            csv.display()
        );
        platform = label;
        times
            .entry((
                f[cn].parse().unwrap(),
                f[cr].parse().unwrap(),
                f[cb].parse().unwrap(),
            ))
            .or_default()
            .entry((f[ca].into(), f[cp].into(), f[cc].parse().unwrap()))
            .or_default()
            .push(f[ct].parse().unwrap());
    }
    let mut out = String::from(
        "platform,collective,nodes,ranks,size_bytes,algorithm,protocol,channels,true_us,\
         ran_algorithm,ran_protocol,ran_channels\n",
    );
    for ((n, r, b), settings) in times {
        let median = |v: &Vec<f64>| {
            let mut v = v.clone();
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let key = ("default".to_string(), "default".to_string(), -1);
        let Some(td) = settings.get(&key).map(median) else {
            continue;
        };
        let forced: Vec<_> = settings
            .iter()
            .filter(|(k, _)| k.0 != "default")
            .map(|(k, v)| (k, median(v)))
            .collect();
        let Some((ran, _)) = forced
            .iter()
            .min_by(|a, b| (a.1 - td).abs().total_cmp(&(b.1 - td).abs()))
        else {
            continue;
        };
        out.push_str(&format!(
            "{platform},allreduce,{n},{r},{b},default,default,-1,{td},{},{},{ran_channels}\n",
            ran.0, ran.1
        ));
        for ((a, p, c), t) in &forced {
            out.push_str(&format!(
                "{platform},allreduce,{n},{r},{b},{a},{p},{c},{t},{a},{p},{ran_channels}\n"
            ));
        }
    }
    let truth = dir.join("truth.csv");
    std::fs::write(&truth, out).unwrap();
    truth
}

/// The shipped DGX-2V AllReduce sweep (real).
pub(crate) fn dgx2v_csv() -> PathBuf {
    crate::support::cli::root().join("datasets/real/nvidia-dgx2v-allreduce.csv")
}

/// The world whose truth [`world_from_real_sweep`] built from
/// [`dgx2v_csv`] (16 channels claimed): 16 GPUs per node; the CSV names no
/// NCCL version, so the world claims none either.
pub(crate) fn dgx2v(truth: &Path) -> World<'_> {
    World {
        truth,
        ppn: 16,
        nccl: "0",
    }
}

pub(crate) fn dgx1v_csv() -> PathBuf {
    crate::support::cli::root().join("datasets/real/nvidia-dgx1v-allreduce.csv")
}

/// The world whose truth [`world_from_real_sweep`] built from
/// [`dgx1v_csv`] (8 channels claimed): 8 GPUs per node, 1-32 nodes; no
/// NCCL version, as for DGX-2V.
pub(crate) fn dgx1v(truth: &Path) -> World<'_> {
    World {
        truth,
        ppn: 8,
        nccl: "0",
    }
}

/// The sweep's rows at `nodes` only.
pub(crate) fn sweep_rows(csv: &Path, nodes: &[u32], out: &Path) {
    let text = std::fs::read_to_string(csv).unwrap();
    let mut lines = text.lines();
    let head = lines.next().unwrap();
    let cn = head.split(',').position(|h| h == "nodes").unwrap();
    let mut s = format!("{head}\n");
    for l in lines {
        let n: u32 = l.split(',').nth(cn).unwrap().parse().unwrap();
        if nodes.contains(&n) {
            s.push_str(l);
            s.push('\n');
        }
    }
    std::fs::write(out, s).unwrap();
}

/// The loop in a world built from a real cluster's sweep (DGX-2V). With a
/// sweep of 1, 2 and 16 nodes the table is worse than NCCL at 4 nodes (two
/// sizes more than 5 % slower): one round with exploration finds out and
/// mends it, and finds the gain at 4 and 8. Two more splits are reported
/// (README's table) and held to what holds for every split.
#[test]
fn a_round_in_a_world_from_a_real_sweep_mends_what_the_sparse_sweep_got_wrong() {
    let d = tempfile::tempdir().unwrap();
    let real = dgx2v_csv();
    let truth = world_from_real_sweep(&real, d.path(), 16);
    let world = dgx2v(&truth);
    let split = |sweep: &[u32], production: &[u32], draw: &str| -> Loop {
        real_split("DGX-2V", &world, &real, sweep, production, d.path(), draw)
    };
    let production = [4, 8, 32, 64];
    let l = split(&[1, 2, 16], &production, "");
    let lines = l.describe(&production);
    assert!(
        slower(&l.before()[0]) > 0,
        "the sparse table was fine at 4 nodes: {lines}"
    );
    for ((n, b), a) in production.iter().zip(l.before()).zip(l.after()) {
        // The round never adds a size slower than NCCL, nor loses gain.
        assert!(slower(a) <= slower(b), "{lines}");
        assert!(a.captured() >= b.captured() - 0.005, "{lines}");
        // At 4 nodes, where the sparse table lost to NCCL, it mends some.
        if *n == 4 {
            assert!(a.captured() > b.captured() + 0.2, "{lines}");
            assert!(slower(a) < slower(b), "{lines}");
        }
    }
    split(&[1, 2, 8, 32], &[4, 16, 64], "");
    split(&[1, 2, 4], &[8, 16, 32], "");
    // Not tuned to one draw: the split that lost gain at 16 nodes under
    // other digests, again under three more, held to the same assertions
    // (every round, every count).
    for draw in ["-draw2", "-draw3", "-draw4"] {
        split(&[1, 2, 8, 32], &[4, 16, 64], draw);
    }
}

/// The loop in a world from the other shipped real sweep, DGX-1V (8 GPUs
/// per node, 1-32 nodes): a sparse, a between and an upward split, each
/// held to what [`rounds`] asserts for every split and round (no rank
/// disagreement, no WARN, cost within F, no count losing gain).
#[test]
fn the_loop_in_a_world_from_the_dgx1v_sweep() {
    let d = tempfile::tempdir().unwrap();
    let real = dgx1v_csv();
    let truth = world_from_real_sweep(&real, d.path(), 8);
    let world = dgx1v(&truth);
    for (sweep, production) in [
        (&[1, 2, 8, 32][..], &[4, 16][..]),
        (&[1, 2, 16], &[4, 8, 32]),
        (&[1, 2, 4], &[8, 16, 32]),
    ] {
        real_split("DGX-1V", &world, &real, sweep, production, d.path(), "");
    }
}

/// One split of a world from a real sweep (`real`, the CSV the world was
/// built from): its rows at `sweep` compile the first table, then
/// [`rounds`] at `production`, printed. `draw`: another table command line
/// (its directory), so another digest and other cells and candidates drawn
/// per communicator.
fn real_split(
    label: &str,
    world: &World<'_>,
    real: &Path,
    sweep: &[u32],
    production: &[u32],
    root: &Path,
    draw: &str,
) -> Loop {
    let name = counts(sweep);
    let dir = root.join(format!("split-{name}{draw}"));
    std::fs::create_dir(&dir).unwrap();
    let rows = dir.join("sweep.csv");
    sweep_rows(real, sweep, &rows);
    let l = rounds(
        world,
        &[rows],
        production,
        &dir,
        Budget::EveryDraw,
        FEW_LONG_JOBS,
    );
    eprintln!(
        "{label} world, sweep {name} (production {}){draw}: {}",
        counts(production),
        l.describe(production)
    );
    l
}

/// Draws of the loop averaged: what one split's figures are worth. Which
/// cells and candidates a communicator explores is drawn from the table's
/// digest, so one draw of a split can be lucky or not (a probe of NCCL's
/// choice drawn with chance F / cost in none of 8 jobs); the mean over
/// `DYNCC_LOOP_DRAWS` draws (default 10; each another table command line)
/// per split of the three worlds is what README's loop table quotes. Every
/// draw is held to what [`rounds`] asserts, but for the budget, which
/// holds in expectation: on the mean over draws. Ignored by `cargo test` (about
/// 7 minutes on 2 cores at 10 draws); `make loop-draws` runs it.
#[test]
#[ignore = "minutes: make loop-draws"]
fn the_loop_over_draws() {
    let draws: usize = std::env::var("DYNCC_LOOP_DRAWS")
        .ok()
        .map(|v| v.parse().expect("DYNCC_LOOP_DRAWS: a number of draws"))
        .unwrap_or(10);
    assert!(draws > 0, "DYNCC_LOOP_DRAWS: at least 1");
    let d = tempfile::tempdir().unwrap();
    let sim = SimWorld::new(d.path());
    let h100 = sim.world();
    let real = dgx2v_csv();
    let truth = world_from_real_sweep(&real, d.path(), 16);
    let dgx2v = dgx2v(&truth);
    let real1 = dgx1v_csv();
    let dir1 = d.path().join("dgx1v");
    std::fs::create_dir(&dir1).unwrap();
    let truth1 = world_from_real_sweep(&real1, &dir1, 8);
    let dgx1v = dgx1v(&truth1);
    let splits: [(&str, &World<'_>, &[u32], &[u32]); 9] = [
        ("H100", &h100, &[1, 2, 8, 32], &[4, 16, 64]),
        ("H100", &h100, &[1, 2, 16], &[4, 8, 32, 64]),
        ("H100", &h100, &[1, 2, 4], &[8, 16, 32]),
        ("DGX-2V", &dgx2v, &[1, 2, 8, 32], &[4, 16, 64]),
        ("DGX-2V", &dgx2v, &[1, 2, 16], &[4, 8, 32, 64]),
        ("DGX-2V", &dgx2v, &[1, 2, 4], &[8, 16, 32]),
        ("DGX-1V", &dgx1v, &[1, 2, 8, 32], &[4, 16]),
        ("DGX-1V", &dgx1v, &[1, 2, 16], &[4, 8, 32]),
        ("DGX-1V", &dgx1v, &[1, 2, 4], &[8, 16, 32]),
    ];
    for (name, world, sweep, production) in splits {
        let inputs = |dir: &Path| -> Vec<PathBuf> {
            let rows = dir.join("sweep.csv");
            match name {
                "H100" => return sim.swept(sweep),
                "DGX-2V" => sweep_rows(&real, sweep, &rows),
                _ => sweep_rows(&real1, sweep, &rows),
            }
            vec![rows]
        };
        // Two draws at a time (2 cores; each runs its world processes one
        // by one). A draw's directory sits beside the simulated world, so
        // its compile command lines are relative and its draws repeat.
        let mut loops: Vec<Loop> = Vec::new();
        for first in (0..draws).step_by(2) {
            std::thread::scope(|s| {
                let handles: Vec<_> = (first..draws.min(first + 2))
                    .map(|k| {
                        let dir = d.path().join(format!("{name}-{}-draw{k}", counts(sweep)));
                        let inputs = &inputs;
                        s.spawn(move || {
                            std::fs::create_dir(&dir).unwrap();
                            rounds(
                                world,
                                &inputs(&dir),
                                production,
                                &dir,
                                Budget::OverDraws,
                                FEW_LONG_JOBS,
                            )
                        })
                    })
                    .collect();
                loops.extend(handles.into_iter().map(|h| h.join().unwrap()));
            });
        }
        let n = loops.len() as f64;
        let mut out = format!(
            "{name} world, sweep {} (production {}), mean of {draws} draws:",
            counts(sweep),
            counts(production)
        );
        for k in 0..=ROUNDS {
            let per: Vec<String> = (0..production.len())
                .map(|i| {
                    let c: f64 = loops.iter().map(|l| l.plain[k][i].captured()).sum();
                    format!("{:.1}", 100.0 * c / n)
                })
                .collect();
            let slow: usize = loops
                .iter()
                .map(|l| l.plain[k].iter().map(slower).sum::<usize>())
                .sum();
            let cost = if k == 0 {
                String::new()
            } else {
                let mean: f64 = loops.iter().map(|l| l.mean_cost(k)).sum::<f64>() / n;
                // F bounds the expected cost: the mean over draws.
                assert!(
                    mean <= SHARE,
                    "{name} {}: round {k} cost {:.3} % on average over {draws} draws",
                    counts(sweep),
                    100.0 * mean
                );
                let worst = loops
                    .iter()
                    .flat_map(|l| l.cost[k - 1].iter().copied())
                    .fold(f64::MIN, f64::max);
                let worst_draw = loops
                    .iter()
                    .map(|l| l.mean_cost(k))
                    .fold(f64::MIN, f64::max);
                format!(
                    "; cost mean {:+.2} %, worst draw {:+.2} %, worst count {:+.2} %",
                    100.0 * mean,
                    100.0 * worst_draw,
                    100.0 * worst
                )
            };
            out.push_str(&format!(
                "\n  {}: {} %; sizes >5 % slower than NCCL {:.2} per draw{cost}",
                if k == 0 {
                    "sweep only".to_string()
                } else {
                    format!("round {k}")
                },
                per.join(" / "),
                slow as f64 / n,
            ));
        }
        eprintln!("{out}");
    }
}

/// A (collective, nodes, bytes) shape jobs ran.
type Shape = (String, u64, u64);

/// Every shape some communicator explored in the trace files under `dir`,
/// as `dyncc inspect` reads them, but those where nothing ran that NCCL's
/// own choice did not run there (a probe or a force that runs what NCCL
/// runs: the compile marks the setting as NCCL's own there, no gain to
/// read).
fn explored_shapes(dir: &Path) -> std::collections::BTreeSet<Shape> {
    use std::collections::{BTreeMap, BTreeSet};
    type Ran = (String, String, u64);
    /// Per shape: what explored calls forced ran, what NCCL's choice ran,
    /// whether some communicator explored NCCL's choice (a force's check),
    /// what the table's answer ran.
    #[derive(Default)]
    struct Seen {
        forced: BTreeSet<Ran>,
        nccl: BTreeSet<Ran>,
        checked: bool,
        table: BTreeSet<Ran>,
    }
    let mut at: BTreeMap<Shape, Seen> = BTreeMap::new();
    for f in trace_files(dir) {
        let o = dyncc()
            .arg("inspect")
            .arg(&f)
            .arg("--json")
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let comms = v["comms"].as_array().unwrap();
        for r in v["records"].as_array().unwrap() {
            let c = &comms[r["comm"].as_u64().unwrap() as usize];
            let shape = (
                r["collective"].as_str().unwrap().to_string(),
                c["nodes"].as_u64().unwrap(),
                r["bytes"].as_u64().unwrap(),
            );
            let ran = (
                r["algo"].as_str().unwrap().to_string(),
                r["proto"].as_str().unwrap().to_string(),
                r["channels"].as_u64().unwrap(),
            );
            let e = at.entry(shape).or_default();
            match r["chosen_by"].as_str().unwrap() {
                "explore" => {
                    e.forced.insert(ran);
                }
                "nccl" => {
                    e.nccl.insert(ran);
                }
                "explore-nccl" => {
                    e.nccl.insert(ran);
                    e.checked = true;
                }
                "table" => {
                    e.table.insert(ran);
                }
                _ => {}
            }
        }
    }
    at.into_iter()
        .filter(|(_, e)| {
            (e.checked || !e.forced.is_empty())
                && !(e.forced.is_subset(&e.nccl) && e.table.is_subset(&e.nccl))
        })
        .map(|(shape, _)| shape)
        .collect()
}

/// (collective, nodes, bytes) of every point where a compile read a gain
/// from jobs: the points it decided and those it found short of evidence.
fn traced_points(report: &serde_json::Value) -> std::collections::BTreeSet<Shape> {
    let t = &report["traces"];
    t["points"]
        .as_array()
        .unwrap()
        .iter()
        .chain(t["short_of_evidence"].as_array().unwrap())
        .map(|p| {
            (
                p["collective"].as_str().unwrap().to_string(),
                p["nodes"].as_u64().unwrap(),
                p["bytes"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// Issue 42 item 5: at F = 0.1 a cell whose every candidate's cost bound
/// was <= F was explored by every communicator, so no job ran the table's
/// answer or NCCL's choice there: 12 of 51 shapes formed no point after a
/// round of 8 jobs, and 7 of 8 such cells still none after a second. With
/// the chance capped at 1/2, a force's check (NCCL's choice) was still one
/// candidate of up to four: 6 of 229 shapes round 1 explored had no NCCL
/// side after two rounds (another setting tried beside the answer, never
/// NCCL's choice). Now the check is listed alone until it has run, so a
/// shape explored has both sides in the same round (220 of 220). The
/// simulated H100 world, sweep 1, 2, 8, 32 nodes, rounds at 4, 16 and 64,
/// a table compiled with `--explore 0.1`, 8 jobs per count and round.
#[test]
fn at_the_largest_share_every_explored_shape_forms_a_point_within_two_rounds() {
    let d = tempfile::tempdir().unwrap();

    let h100 = SimWorld::new(d.path());
    let world = h100.world();
    let production = [4u32, 16, 64];
    let dir = d.path().join("share");
    std::fs::create_dir(&dir).unwrap();
    let share = ["--explore", "0.1"];
    let mut inputs = h100.swept(&[1, 2, 8, 32]);
    let mut table = dir.join("t0.tbl");
    compile_with(&inputs, &table, &share);
    let mut explored = Vec::new();
    let mut points = Vec::new();
    for r in 1..=2 {
        let traces = dir.join(format!("traces-{r}"));
        std::fs::create_dir(&traces).unwrap();
        for &n in &production {
            for j in 0..JOBS {
                let job = (100_000 * r + 1000 * n + j + 1).to_string();
                let w = world.round(
                    n,
                    &table,
                    &[
                        ("DYNCC_EXPLORE", "1"),
                        ("DYNCC_TRACE", traces.to_str().unwrap()),
                        ("WORLD_JOB", job.as_str()),
                    ],
                );
                assert_eq!(w.summary.disagreements, 0, "round {r}, {n} nodes, job {j}");
                assert!(w.warns().is_empty(), "{:?}", w.warns());
            }
        }
        explored.push(explored_shapes(&traces));
        inputs.push(traces);
        let next = dir.join(format!("t{r}.tbl"));
        let report = compile_with(&inputs, &next, &share);
        points.push(traced_points(&report));
        table = next;
    }
    let formed: std::collections::BTreeSet<_> = points[0].union(&points[1]).cloned().collect();
    let missing: Vec<_> = explored[0].difference(&formed).collect();
    let second_missing = explored[1].difference(&points[1]).count();
    eprintln!(
        "F = 0.1: round 1 explored {} shapes, {} formed a point after round 1, {} after round 2; \
         round 2 explored {}, {} without a point after round 2",
        explored[0].len(),
        explored[0].intersection(&points[0]).count(),
        explored[0].len() - missing.len(),
        explored[1].len(),
        second_missing,
    );
    assert!(!explored[0].is_empty(), "round 1 explored nothing");
    assert!(
        missing.is_empty(),
        "explored in round 1, no point after round 2: {missing:?}"
    );
}

/// Issue 40 item 7: the loop where jobs are a fleet, not a few long runs.
/// 32 jobs per count, each of 50 calls per (collective, size), so many
/// communicators each measure a little; then the same fleet whose jobs
/// differ by more than a call's noise (each job's time at a shape off by
/// a factor of ln sd 0.08, every call there alike, against 0.03 per
/// call), as placement and contention make real jobs differ. The
/// communicator is the unit of evidence, with the spread between
/// communicators estimated from them: the fleet learns, no table leaves
/// more than 0.5 % of the shapes 5 % slower than NCCL's default, and the
/// spread between jobs forces nothing they did not measure winning.
#[test]
fn a_fleet_of_short_jobs_learns_and_noise_between_jobs_forces_nothing_wrong() {
    let d = tempfile::tempdir().unwrap();
    let h100 = SimWorld::new(d.path());
    let world = h100.world();
    let production = [4, 16, 64];
    for (name, job_noise) in [("fleet", None), ("fleet-noisy", Some("0.08"))] {
        let dir = d.path().join(name);
        std::fs::create_dir(&dir).unwrap();
        let fleet = Fleet {
            jobs: 32,
            calls: 50,
            job_noise,
            // With noise between jobs, a few communicators' lucky draw can
            // pass compile's bar (0.5 sd past the margin) where the sweep's
            // reading agrees: seen, two 50-call jobs measured
            // collnet_direct/simple/16ch +11.0 % +- 5.2 % at reducescatter
            // 2 KiB, 4 nodes, where it is 8 % slower: round 2 forced it
            // (0.40 % of the shapes 5 % slower), round 3 took it back.
            // (Before the sweep's reading corroborated a weak win in place
            // of the fitted model, one job's +14.4 % +- 7.8 % forced a
            // setting 6 % slower, and round 3 kept it.) The more a round
            // explores, the more such draws: with the cost bound at half an
            // sd, 4 nodes went 93.2 -> 90.8 -> 91.7 % over rounds 1-3.
            may_lose: if job_noise.is_some() { 0.03 } else { 0.01 },
        };
        let l = rounds(
            &world,
            &h100.swept(&[1, 2, 8, 32]),
            &production,
            &dir,
            Budget::EveryDraw,
            fleet,
        );
        eprintln!(
            "H100 world, sweep 1,2,8,32 (production 4,16,64), 32 jobs x 50 calls, job noise {}: {}",
            job_noise.unwrap_or("none"),
            l.describe(&production)
        );
        for (r, t) in l.traces.iter().enumerate() {
            assert_eq!(t["communicators"], (r + 1) * production.len() * 32, "{t}");
        }
        for r in 0..=ROUNDS {
            assert!(
                l.regression_share(r) <= 0.005,
                "{name}, table {r}: {:.2} % of the shapes more than 5 % slower than NCCL's default: {}",
                100.0 * l.regression_share(r),
                l.describe(&production)
            );
        }
        assert!(
            captured(l.after()) > captured(l.before()) + 0.02,
            "{name}: {}",
            l.describe(&production)
        );
    }
}

/// Issue 41: the loop finds a chunk win at node counts the sweep skipped.
/// A simulated H100 world of Broadcast, 1 to 64 MiB, each forced setting
/// also run at 64, 128 and 256 KiB chunks (`dyncc simulate --chunks`, as
/// `dyncc plan --chunks` would sweep; what a chunk does there is the
/// simulator's model); the sweep has 2 and 4 nodes, the rounds run at 8
/// and 16. Exploring jobs try chunked settings (the plugin answers each
/// candidate's own chunk through getChunkSize, and its traces record it),
/// and a recompile decides a chunk from what they measured: some point at
/// a production count is decided on a chunked setting the jobs measured,
/// the last table forces it, and the rounds lose no gain anywhere.
#[test]
fn the_loop_finds_a_chunk_win_at_counts_the_sweep_skipped() {
    let d = tempfile::tempdir().unwrap();
    let sim = d.path().join("sim");
    let st = dyncc()
        .args(["simulate", "-o"])
        .arg(&sim)
        .args([
            "--profile",
            "h100",
            "--nodes",
            "2,4,8,16",
            "--colls",
            "allreduce,broadcast",
        ])
        .args(["--min-bytes", "1MiB", "--max-bytes", "64MiB"])
        .args(["--repeats", "3", "--chunks", "64K,128K,256K"])
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    let truth = sim.join("truth.csv");
    let world = World {
        truth: &truth,
        ppn: PPN,
        nccl: SIMULATED_NCCL,
    };
    let swept: Vec<PathBuf> = [2, 4]
        .iter()
        .map(|n| sim.join("h100").join(format!("n{n}")))
        .collect();
    let production = [8, 16];
    let dir = d.path().join("split-2-4");
    std::fs::create_dir(&dir).unwrap();
    let l = rounds(
        &world,
        &swept,
        &production,
        &dir,
        Budget::OverDraws,
        FEW_LONG_JOBS,
    );
    eprintln!(
        "H100 broadcast world with chunks, sweep 2,4 (production 8,16): {}",
        l.describe(&production)
    );
    let chunked = |s: &str| dyncc_tables::Setting::parse(s).is_some_and(|s| !s.chunk.is_nccl());
    let mut found = Vec::new();
    for t in &l.traces {
        for p in t["points"].as_array().unwrap() {
            let decision = p["decision"].as_str().unwrap();
            let measured = p["settings"].as_array().unwrap().iter().any(|s| {
                let c = s["config"].as_str().unwrap_or_default();
                c == decision
                    || dyncc_tables::Setting::parse(c) == dyncc_tables::Setting::parse(decision)
            });
            if chunked(decision)
                && measured
                && production.contains(&(p["nodes"].as_u64().unwrap() as u32))
            {
                found.push(format!("{} nodes {} B: {decision}", p["nodes"], p["bytes"]));
            }
        }
    }
    assert!(
        !found.is_empty(),
        "no chunk decided from the jobs: {:#?}",
        l.traces
    );
    eprintln!("decided on chunks the jobs measured: {found:?}");
    // The last table forces a chunk at a production count.
    let bytes = std::fs::read(dir.join(format!("t{ROUNDS}.tbl"))).unwrap();
    let t = dyncc_tables::Table::from_bytes(&bytes).unwrap();
    let forces_chunk = production.iter().any(|&n| {
        let comm = dyncc_tables::Comm::new(u64::from(n * PPN), u64::from(n));
        (20..=26).any(|k| {
            matches!(
                t.lookup(dyncc_tables::Coll::Broadcast as u32, &comm, 1 << k, 1, 0).decision,
                dyncc_tables::Decision::Force(s) if !s.chunk.is_nccl()
            )
        })
    });
    assert!(
        forces_chunk,
        "the last table forces no chunk at 8 or 16 nodes"
    );
    assert!(
        captured(l.after()) > captured(l.before()),
        "{}",
        l.describe(&production)
    );
}
