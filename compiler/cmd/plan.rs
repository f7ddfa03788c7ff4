//! `dyncc plan`: writes the sweep script that feeds `dyncc compile`. It
//! runs nccl-tests under NCCL's default and under every algorithm x
//! protocol (x channel count) NCCL can run for each collective at each
//! node count, with repeats interleaved, and records with every log what
//! ran: `# dyncc:` knob headers, NCCL_DEBUG=INFO (INIT,ENV,TUNING) so the
//! ingest can check NCCL honoured the knobs, and `-J` JSON (with the full
//! environment) where the nccl-tests build supports it.

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::bail;
use dyncc_tables::{Algo, Coll, Machine, Proto, Refusal};
use serde::Serialize;

use crate::units::{fmt_bytes, parse_bytes};

/// How the script starts nccl-tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Launcher {
    /// srun inside an sbatch/salloc allocation (the script carries #SBATCH lines).
    Slurm,
    /// OpenMPI mpirun (-x exports the knobs to every rank; HOSTFILE=... to pick hosts).
    Mpirun,
    /// No launcher: one process driving all GPUs of this node (-g); single node only.
    Local,
}

/// Write a sweep script that measures what `dyncc compile` needs.
///
/// The script runs nccl-tests once under NCCL's own choice and once per
/// algorithm x protocol (x pinned channel count) that NCCL can run for
/// each collective at each node count, repeated with repeats interleaved
/// (so drift does not pose as a difference). Combinations NCCL rejects
/// are left out: Tree is allreduce only; Broadcast/Reduce run Ring only;
/// NVLS/NVLSTree/PAT/CollNet are Simple only; PAT needs 1 GPU per node,
/// NVLS several and CollNet at most 8; NVLSTree and CollNet need more than
/// one node; NVLS needs NVSwitch (--nvls) and CollNet a SHARP-style network
/// (--collnet), and NVLS runs across nodes only with CollNet.
///
/// With Slurm, the --launcher-args that request resources (account,
/// partition, qos, constraint, ...) also become #SBATCH lines, so a site
/// that requires them accepts `sbatch sweep.sh`.
///
/// Logs land in OUT/logs/<coll>/nodes=N/NCCL_ALGO=A/NCCL_PROTO=P/channels=C/repeat=R.log
/// with `# dyncc:` knob headers and NCCL INFO output; -J JSON (nccl-tests
/// 2.17.3 or later) in OUT/json/...; failed runs in OUT/failed/ (a run NCCL
/// refuses is recorded, not fatal). Re-running the script skips finished
/// runs. The estimate of the duration is rough (an alpha-beta model of a
/// typical InfiniBand GPU cluster).
///
/// Examples:
///   dyncc plan --launcher slurm --nodes 1,2,4,8 --nccl-tests ~/nccl-tests/build -o sweep.sh
///   dyncc plan --launcher mpirun --nodes 2,4 --channels 0,4,8,16 --nccl-tests /opt/nt -o sweep.sh
///   dyncc plan --launcher local --nodes 1 --gpus-per-node 4 --nccl-tests ./build -o sweep.sh
///   then: sbatch sweep.sh (or bash sweep.sh); dyncc compile dyncc-sweep/logs -o cluster.tbl
#[derive(clap::Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct PlanArgs {
    /// slurm, mpirun, or local (single node, no launcher).
    #[arg(long, value_enum)]
    pub launcher: Launcher,
    /// Node counts to measure, e.g. 1,2,4,8.
    #[arg(long, value_delimiter = ',', required = true)]
    pub nodes: Vec<u32>,
    /// GPUs (ranks) per node.
    #[arg(long, default_value_t = 8)]
    pub gpus_per_node: u32,
    /// Collectives: allreduce, allgather, reducescatter, broadcast, reduce.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "allreduce,allgather,reducescatter"
    )]
    pub colls: Vec<String>,
    /// Smallest message size (nccl-tests -b).
    #[arg(long, default_value = "8")]
    pub min_bytes: String,
    /// Largest message size (nccl-tests -e).
    #[arg(long, default_value = "4GiB")]
    pub max_bytes: String,
    /// Size step factor (nccl-tests -f).
    #[arg(long, default_value_t = 2)]
    pub step_factor: u32,
    /// Runs of every setting; repeats are interleaved.
    #[arg(long, default_value_t = 3)]
    pub repeats: u32,
    /// Timed iterations per size (nccl-tests -n).
    #[arg(long, default_value_t = 20)]
    pub iters: u32,
    /// Warm-up iterations per size (nccl-tests -w).
    #[arg(long, default_value_t = 5)]
    pub warmup: u32,
    /// Algorithms to force (default: all NCCL can run per collective and node count).
    #[arg(long, value_delimiter = ',')]
    pub algos: Vec<String>,
    /// Protocols to force.
    #[arg(long, value_delimiter = ',', default_value = "ll,ll128,simple")]
    pub protos: Vec<String>,
    /// Channel counts to pin (NCCL_MIN_NCHANNELS = NCCL_MAX_NCHANNELS); 0 = NCCL's choice.
    #[arg(long, value_delimiter = ',', default_value = "0")]
    pub channels: Vec<u32>,
    /// The machines have NVSwitch with NVLink SHARP (H100/B200 SXM): also sweep NVLS and NVLSTree.
    #[arg(long)]
    pub nvls: bool,
    /// The network has CollNet (SHARP) support: also sweep CollNetDirect and CollNetChain.
    #[arg(long)]
    pub collnet: bool,
    /// Directory holding all_reduce_perf etc. on the cluster (the script's
    /// NCCL_TESTS_DIR overrides it; the script checks it before running).
    #[arg(long, default_value = "nccl-tests/build")]
    pub nccl_tests: PathBuf,
    /// Where the script puts the logs (the script's DYNCC_OUT overrides it).
    #[arg(long, default_value = "dyncc-sweep")]
    pub out_dir: String,
    /// Platform label recorded in every log (e.g. dgx-h100-ib); compile keeps platforms apart.
    #[arg(long)]
    pub platform: Option<String>,
    /// Extra launcher arguments, e.g. "--partition=gpu --account=ml" or "--mca btl ^openib".
    #[arg(long, default_value = "", allow_hyphen_values = true)]
    pub launcher_args: String,
    /// Where to write the script (atomically, executable).
    #[arg(short, long)]
    pub output: PathBuf,
    /// Print a JSON summary.
    #[arg(long)]
    pub json: bool,
}

/// One nccl-tests invocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Run {
    #[serde(serialize_with = "ser_coll")]
    pub coll: Coll,
    pub nodes: u32,
    /// None = NCCL's choice.
    #[serde(serialize_with = "ser_algo")]
    pub algo: Option<Algo>,
    #[serde(serialize_with = "ser_proto")]
    pub proto: Option<Proto>,
    /// 0 = NCCL's choice.
    pub channels: u32,
    pub repeat: u32,
}

fn ser_coll<S: serde::Serializer>(c: &Coll, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(c.name())
}
fn ser_algo<S: serde::Serializer>(a: &Option<Algo>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(a.map_or("default", Algo::env_name))
}
fn ser_proto<S: serde::Serializer>(p: &Option<Proto>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(p.map_or("default", Proto::env_name))
}

/// The settings of one (collective, nodes): (algo, proto, channels).
pub fn settings(
    a: &Plan,
    coll: Coll,
    nodes: u32,
    skipped: &mut Vec<String>,
) -> Vec<(Algo, Proto, u32)> {
    let mut out = Vec::new();
    let machine = a.machine(nodes);
    for &algo in &a.algos {
        for &proto in &a.protos {
            if let Some(why) = machine.refusal(coll, algo, proto).map(Refusal::why) {
                if a.explicit_algos {
                    let s = format!(
                        "{} {}/{} at {nodes} node(s): {why}",
                        coll.name(),
                        algo.env_name(),
                        proto.env_name()
                    );
                    if !skipped.contains(&s) {
                        skipped.push(s);
                    }
                }
                continue;
            }
            for &ch in &a.channels {
                out.push((algo, proto, ch));
            }
        }
    }
    out
}

/// A validated plan.
#[derive(Clone, Debug)]
pub struct Plan {
    pub launcher: Launcher,
    pub nodes: Vec<u32>,
    pub gpus_per_node: u32,
    pub colls: Vec<Coll>,
    pub min_bytes: u64,
    pub max_bytes: u64,
    pub step_factor: u32,
    pub repeats: u32,
    pub iters: u32,
    pub warmup: u32,
    pub algos: Vec<Algo>,
    pub explicit_algos: bool,
    pub protos: Vec<Proto>,
    pub channels: Vec<u32>,
    /// `--nvls`: the machines have NVLink SHARP.
    pub nvls: bool,
    /// `--collnet`: the network has CollNet (SHARP).
    pub collnet: bool,
    pub nccl_tests: PathBuf,
    pub out_dir: String,
    pub platform: Option<String>,
    pub launcher_args: Vec<String>,
    /// Where the script is written (named in its own instructions).
    pub output: PathBuf,
    pub command: String,
}

impl Plan {
    pub fn from_args(a: &PlanArgs) -> anyhow::Result<Plan> {
        let mut nodes = a.nodes.clone();
        nodes.sort_unstable();
        nodes.dedup();
        if nodes.contains(&0) {
            bail!("--nodes: 0 is not a node count (e.g. --nodes 1,2,4,8)");
        }
        if a.gpus_per_node == 0 {
            bail!("--gpus-per-node 0: a node needs at least one GPU");
        }
        if a.launcher == Launcher::Local && nodes.iter().any(|n| *n > 1) {
            bail!("--launcher local runs on this node only: use --nodes 1, or --launcher slurm|mpirun for several nodes");
        }
        if a.gpus_per_node == 1 && nodes == [1] {
            bail!("1 node x 1 GPU is one rank: NCCL never asks a tuner about a single-rank communicator. Measure at least 2 ranks");
        }
        nodes.retain(|n| n * a.gpus_per_node > 1);
        let mut colls = Vec::new();
        for c in &a.colls {
            let coll = Coll::parse(c).ok_or_else(|| {
                anyhow::anyhow!(
                    "--colls: `{c}` is not a collective NCCL lets a tuner decide; use allreduce, allgather, reducescatter, broadcast, reduce"
                )
            })?;
            if !colls.contains(&coll) {
                colls.push(coll);
            }
        }
        let min_bytes =
            parse_bytes(&a.min_bytes).map_err(|e| anyhow::anyhow!("--min-bytes {e}"))?;
        let max_bytes =
            parse_bytes(&a.max_bytes).map_err(|e| anyhow::anyhow!("--max-bytes {e}"))?;
        if min_bytes == 0 || min_bytes > max_bytes {
            bail!(
                "--min-bytes {} / --max-bytes {}: need 0 < min <= max",
                a.min_bytes,
                a.max_bytes
            );
        }
        if a.step_factor < 2 {
            bail!(
                "--step-factor {}: use 2 or more (sizes grow by this factor)",
                a.step_factor
            );
        }
        if a.repeats == 0 || a.iters == 0 {
            bail!("--repeats and --iters must be at least 1");
        }
        let explicit_algos = !a.algos.is_empty();
        let algos: Vec<Algo> = if explicit_algos {
            a.algos
                .iter()
                .map(|s| {
                    Algo::parse(s).ok_or_else(|| {
                        anyhow::anyhow!("--algos: `{s}` is not an NCCL algorithm; use tree, ring, collnet_direct, collnet_chain, nvls, nvls_tree, pat")
                    })
                })
                .collect::<anyhow::Result<_>>()?
        } else {
            let mut v = vec![Algo::Tree, Algo::Ring, Algo::Pat];
            if a.nvls {
                v.extend([Algo::Nvls, Algo::NvlsTree]);
            }
            if a.collnet {
                v.extend([Algo::CollNetDirect, Algo::CollNetChain]);
            }
            v
        };
        let protos: Vec<Proto> = a
            .protos
            .iter()
            .map(|s| {
                Proto::parse(s).ok_or_else(|| {
                    anyhow::anyhow!(
                        "--protos: `{s}` is not an NCCL protocol; use ll, ll128, simple"
                    )
                })
            })
            .collect::<anyhow::Result<_>>()?;
        let mut channels = a.channels.clone();
        channels.dedup();
        if channels.iter().any(|c| *c > 64) {
            bail!("--channels: NCCL runs at most 64 channels (MAXCHANNELS); 0 means NCCL's choice");
        }
        let launcher_args = shell_words(&a.launcher_args)?;
        Ok(Plan {
            launcher: a.launcher,
            nodes,
            gpus_per_node: a.gpus_per_node,
            colls,
            min_bytes,
            max_bytes,
            step_factor: a.step_factor,
            repeats: a.repeats,
            iters: a.iters,
            warmup: a.warmup,
            algos,
            explicit_algos,
            protos,
            channels,
            nvls: a.nvls,
            collnet: a.collnet,
            nccl_tests: a.nccl_tests.clone(),
            out_dir: a.out_dir.clone(),
            platform: a.platform.clone(),
            launcher_args,
            output: a.output.clone(),
            command: std::env::args()
                .map(|a| shell_quote(&a))
                .collect::<Vec<_>>()
                .join(" "),
        })
    }

    /// The machines at `nodes` nodes as far as the plan knows them:
    /// `--nvls` and `--collnet` say what the network and NVSwitch offer,
    /// and so does naming an algorithm in `--algos`; what the plan is not
    /// told (NVSwitch for CollNetDirect, PAT, LL128) is assumed, and a run
    /// NCCL refuses anyway lands in failed/.
    pub fn machine(&self, nodes: u32) -> Machine {
        let asked =
            |family: &[Algo]| self.explicit_algos && self.algos.iter().any(|a| family.contains(a));
        Machine {
            nvls: self.nvls || asked(&[Algo::Nvls, Algo::NvlsTree]),
            collnet: self.collnet || asked(&[Algo::CollNetDirect, Algo::CollNetChain]),
            ..Machine::new(nodes, self.gpus_per_node)
        }
    }

    /// Every run, repeats outermost (interleaved), then nodes, collective,
    /// NCCL's default first, then the forced settings.
    pub fn runs(&self, skipped: &mut Vec<String>) -> Vec<Run> {
        let mut out = Vec::new();
        for repeat in 1..=self.repeats {
            for &nodes in &self.nodes {
                for &coll in &self.colls {
                    out.push(Run {
                        coll,
                        nodes,
                        algo: None,
                        proto: None,
                        channels: 0,
                        repeat,
                    });
                    for (algo, proto, channels) in settings(self, coll, nodes, skipped) {
                        out.push(Run {
                            coll,
                            nodes,
                            algo: Some(algo),
                            proto: Some(proto),
                            channels,
                            repeat,
                        });
                    }
                }
            }
        }
        out
    }

    /// Sizes nccl-tests will run.
    pub fn sizes(&self) -> Vec<u64> {
        let mut v = vec![];
        let mut s = self.min_bytes;
        while s <= self.max_bytes {
            v.push(s);
            match s.checked_mul(self.step_factor as u64) {
                Some(n) => s = n,
                None => break,
            }
        }
        v
    }

    /// Rough seconds for one run: launch + NCCL init + per size (warm-up,
    /// out-of-place and in-place timed iterations, one validation each) of
    /// an alpha-beta model of a typical IB cluster (150 GB/s bus bandwidth
    /// in a node, 40 GB/s across nodes), with LL slower on bandwidth and
    /// pinned low channel counts slower still.
    pub fn run_seconds(&self, r: &Run) -> f64 {
        let launch = match self.launcher {
            Launcher::Slurm => 8.0,
            Launcher::Mpirun => 5.0,
            Launcher::Local => 1.0,
        };
        let init = 3.0 + 0.3 * r.nodes as f64;
        let n = (r.nodes * self.gpus_per_node) as f64;
        let (mut alpha, mut bw) = if r.nodes == 1 {
            (8e-6, 150e9)
        } else {
            (20e-6 + 3e-6 * (r.nodes as f64).log2(), 40e9)
        };
        match r.proto {
            Some(Proto::LL) => {
                alpha *= 0.6;
                bw *= 0.3;
            }
            Some(Proto::LL128) => bw *= 0.9,
            Some(Proto::Simple) => alpha *= 1.5,
            None => {}
        }
        if r.channels > 0 {
            bw *= (r.channels as f64 / 8.0).min(1.0);
        }
        let factor = match r.coll {
            Coll::AllReduce => 2.0 * (n - 1.0) / n,
            Coll::AllGather | Coll::ReduceScatter => (n - 1.0) / n,
            Coll::Broadcast | Coll::Reduce => 1.0,
        };
        let per_size: f64 = self
            .sizes()
            .iter()
            .map(|&s| {
                let t = alpha + s as f64 * factor / bw;
                // Iterations plus buffer setup and validation (~4 op times).
                t * (self.warmup + 2 * self.iters + 2) as f64 + 4.0 * t
            })
            .sum();
        launch + init + per_size * 1.3
    }
}

/// `2 h 10 min`, `14 min`, `45 s`.
pub fn fmt_duration(secs: f64) -> String {
    let s = secs.round() as u64;
    if s >= 3600 {
        format!("{} h {:02} min", s / 3600, (s % 3600).div_ceil(60).min(59))
    } else if s >= 60 {
        format!("{} min", s.div_ceil(60))
    } else {
        format!("{s} s")
    }
}

/// Splits `--launcher-args` into words as a POSIX shell would.
fn shell_words(s: &str) -> anyhow::Result<Vec<String>> {
    shlex::split(s).ok_or_else(|| {
        anyhow::anyhow!(
            "--launcher-args: cannot split `{s}` into shell words (an unbalanced quote or a \
             trailing backslash?); quote it like a shell command line, e.g. \
             --launcher-args \"--partition=gpu --account='my acct'\""
        )
    })
}

/// Quotes a word for bash, leaving plainly safe words (`--partition=gpu`,
/// paths) as they are so the script reads like one written by hand.
pub fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c))
    {
        return s.to_string();
    }
    // Only a NUL byte cannot be quoted, and command-line words, paths and
    // labels (all this quotes) cannot hold one.
    shlex::try_quote(s)
        .expect("a command-line word holds no NUL byte")
        .into_owned()
}

/// Long sbatch options (without `--`) that request resources of the
/// allocation (`sbatch --help`); with `--launcher-args` they also go on
/// #SBATCH lines, since sbatch refuses a job that lacks, say, the account a
/// site requires. All but `exclusive` take a value.
const SBATCH_LONG: &[&str] = &[
    "account",
    "partition",
    "qos",
    "reservation",
    "constraint",
    "clusters",
    "gres",
    "gpus",
    "mem",
    "mem-per-cpu",
    "mem-per-gpu",
    "cpus-per-task",
    "cpus-per-gpu",
    "exclude",
    "nodelist",
    "time",
    "time-min",
    "exclusive",
    "licenses",
    "wckey",
    "comment",
    "switches",
    "network",
    "begin",
    "mail-type",
    "mail-user",
];

/// The short forms of [`SBATCH_LONG`] options (all take a value).
const SBATCH_SHORT: &[(char, &str)] = &[
    ('A', "account"),
    ('p', "partition"),
    ('q', "qos"),
    ('C', "constraint"),
    ('M', "clusters"),
    ('G', "gpus"),
    ('c', "cpus-per-task"),
    ('x', "exclude"),
    ('w', "nodelist"),
    ('t', "time"),
    ('L', "licenses"),
];

/// The `--launcher-args` options that belong on #SBATCH lines, one line's
/// words each (an option and its value), in the order given.
fn sbatch_lines(words: &[String]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < words.len() {
        let w = &words[i];
        i += 1;
        let (known, needs_value) = if let Some(long) = w.strip_prefix("--") {
            match long.split_once('=') {
                Some((name, _)) => (SBATCH_LONG.contains(&name), false),
                None => (SBATCH_LONG.contains(&long), long != "exclusive"),
            }
        } else if let Some(short) = w.strip_prefix('-') {
            let mut cs = short.chars();
            match (cs.next(), cs.as_str()) {
                (Some(c), rest) if SBATCH_SHORT.iter().any(|(s, _)| *s == c) => {
                    (true, rest.is_empty())
                }
                _ => (false, false),
            }
        } else {
            (false, false)
        };
        if !known {
            continue;
        }
        let mut line = vec![w.clone()];
        if needs_value && i < words.len() {
            line.push(words[i].clone());
            i += 1;
        }
        out.push(line);
    }
    out
}

fn binary(c: Coll) -> &'static str {
    match c {
        Coll::Broadcast => "broadcast_perf",
        Coll::Reduce => "reduce_perf",
        Coll::AllGather => "all_gather_perf",
        Coll::ReduceScatter => "reduce_scatter_perf",
        Coll::AllReduce => "all_reduce_perf",
    }
}

/// The script.
pub fn script(p: &Plan, runs: &[Run], est: f64, skipped: &[String]) -> String {
    let mut s = String::new();
    let max_nodes = p.nodes.iter().max().copied().unwrap_or(1);
    let _ = writeln!(s, "#!/usr/bin/env bash");
    let _ = writeln!(
        s,
        "# dyncc sweep script, written by dyncc {}:",
        env!("CARGO_PKG_VERSION")
    );
    let _ = writeln!(s, "#   {}", p.command);
    let _ = writeln!(
        s,
        "# {} nccl-tests runs: collectives {}, nodes {}, {} GPUs per node, sizes {} .. {} (x{}), {} repeats",
        runs.len(),
        p.colls.iter().map(|c| c.name()).collect::<Vec<_>>().join(","),
        p.nodes.iter().map(|n| n.to_string()).collect::<Vec<_>>().join(","),
        p.gpus_per_node,
        fmt_bytes(p.min_bytes),
        fmt_bytes(p.max_bytes),
        p.step_factor,
        p.repeats
    );
    let _ = writeln!(
        s,
        "# Estimated duration: {} (rough; alpha-beta model of a typical IB cluster).",
        fmt_duration(est)
    );
    for sk in skipped {
        let _ = writeln!(s, "# Not swept: {sk}");
    }
    let _ = writeln!(s, "#");
    let me = shell_quote(&p.output.display().to_string());
    match p.launcher {
        Launcher::Slurm => {
            let _ = writeln!(
                s,
                "# Submit with `sbatch {me}`, or run `bash {me}` inside `salloc -N {max_nodes}`."
            );
        }
        Launcher::Mpirun => {
            let _ = writeln!(s, "# Run `bash {me}` on a host that can mpirun onto {max_nodes} node(s); set HOSTFILE to an OpenMPI hostfile to choose them.");
        }
        Launcher::Local => {
            let _ = writeln!(s, "# Run `bash {me}` on the GPU node.");
        }
    }
    let _ = writeln!(s, "# Environment: NCCL_TESTS_DIR (nccl-tests binaries), DYNCC_OUT (log directory), RUN_TIMEOUT");
    let _ = writeln!(
        s,
        "# (seconds per run; needs coreutils timeout). Re-running skips the runs that finished."
    );
    let _ = writeln!(
        s,
        "# Afterwards: dyncc compile {}/logs -o cluster.tbl (with DYNCC_OUT set: its logs/)",
        shell_quote(&p.out_dir)
    );
    if p.launcher == Launcher::Slurm {
        let hours = (est * 1.5 / 3600.0).ceil().max(1.0) as u64;
        let _ = writeln!(s, "#SBATCH --job-name=dyncc-sweep");
        let _ = writeln!(s, "#SBATCH --nodes={max_nodes}");
        let _ = writeln!(s, "#SBATCH --ntasks-per-node={}", p.gpus_per_node);
        let _ = writeln!(s, "#SBATCH --gpus-per-node={}", p.gpus_per_node);
        let _ = writeln!(s, "#SBATCH --exclusive");
        let _ = writeln!(s, "#SBATCH --time={hours}:00:00");
        // After dyncc's own lines: sbatch takes the last of a repeated
        // option, so the user's --time (say) wins.
        for line in sbatch_lines(&p.launcher_args) {
            let words: Vec<String> = line.iter().map(|w| shell_quote(w)).collect();
            let _ = writeln!(s, "#SBATCH {}", words.join(" "));
        }
    }
    s.push_str("set -euo pipefail\n\n");
    let _ = writeln!(
        s,
        "NCCL_TESTS_DIR=${{NCCL_TESTS_DIR:-{}}}",
        shell_quote(&p.nccl_tests.display().to_string())
    );
    let _ = writeln!(s, "OUT=${{DYNCC_OUT:-{}}}", shell_quote(&p.out_dir));
    let _ = writeln!(s, "RUN_TIMEOUT=${{RUN_TIMEOUT:-}}");
    let _ = writeln!(s, "GPUS_PER_NODE={}", p.gpus_per_node);
    let _ = writeln!(
        s,
        "LAUNCHER={}",
        match p.launcher {
            Launcher::Slurm => "slurm",
            Launcher::Mpirun => "mpirun",
            Launcher::Local => "local",
        }
    );
    let _ = writeln!(
        s,
        "PLATFORM={}",
        shell_quote(p.platform.as_deref().unwrap_or(""))
    );
    let _ = writeln!(
        s,
        "LAUNCHER_ARGS=({})",
        p.launcher_args
            .iter()
            .map(|a| shell_quote(a))
            .collect::<Vec<_>>()
            .join(" ")
    );
    let _ = writeln!(
        s,
        "TEST_ARGS=(-b {} -e {} -f {} -n {} -w {} -c 1)",
        p.min_bytes, p.max_bytes, p.step_factor, p.iters, p.warmup
    );
    let mut bins: Vec<&str> = p.colls.iter().map(|c| binary(*c)).collect();
    bins.sort_unstable();
    bins.dedup();
    let _ = writeln!(s, "BINARIES=({})", bins.join(" "));
    s.push_str(SCRIPT_BODY);
    s.push_str("RUNS=$(cat <<'DYNCC_RUNS'\n");
    for r in runs {
        let _ = writeln!(
            s,
            "{} {} {} {} {} {} {}",
            r.coll.name(),
            binary(r.coll),
            r.nodes,
            r.algo.map_or("default", Algo::env_name),
            r.proto.map_or("default", Proto::env_name),
            if r.channels == 0 {
                "default".to_string()
            } else {
                r.channels.to_string()
            },
            r.repeat
        );
    }
    s.push_str("DYNCC_RUNS\n)\n");
    let _ = writeln!(s, "ESTIMATE={}", shell_quote(&fmt_duration(est)));
    s.push_str(SCRIPT_MAIN);
    s
}

/// The fixed part of the script: checks and the function that runs one setting.
const SCRIPT_BODY: &str = r##"
die() { echo "dyncc sweep: $*" >&2; exit 1; }

[[ -d "$NCCL_TESTS_DIR" ]] || die "NCCL_TESTS_DIR=$NCCL_TESTS_DIR is not a directory: build nccl-tests (make MPI=1) and set NCCL_TESTS_DIR to its build/ directory"
case $LAUNCHER in
  slurm) command -v srun >/dev/null || die "srun not found: run this under Slurm (sbatch/salloc), or re-plan with --launcher mpirun|local" ;;
  mpirun) command -v mpirun >/dev/null || die "mpirun not found: load your MPI module, or re-plan with --launcher slurm|local" ;;
  local) ;;
  *) die "unknown launcher $LAUNCHER" ;;
esac
if [[ -n "$RUN_TIMEOUT" ]]; then
  command -v timeout >/dev/null || die "RUN_TIMEOUT is set but coreutils timeout is not installed"
fi

# -J JSON output exists since nccl-tests 2.17.3; older builds write text logs only.
declare -A JSON_OK=()
json_ok() {
  if [[ -z "${JSON_OK[$1]:-}" ]]; then
    # Captured first: with pipefail, `... | grep -q` fails whenever grep
    # exits before the binary finishes writing (SIGPIPE), at random.
    local help
    help=$("$NCCL_TESTS_DIR/$1" -h 2>&1 </dev/null || true)
    if [[ $help == *output_file* ]]; then JSON_OK[$1]=1; else JSON_OK[$1]=0; fi
  fi
  [[ "${JSON_OK[$1]}" == 1 ]]
}

# Knobs a run sets; everything else about NCCL's choice is cleared so the
# default runs really are NCCL's default.
CLEAR=(-u NCCL_ALGO -u NCCL_PROTO -u NCCL_MIN_NCHANNELS -u NCCL_MAX_NCHANNELS -u NCCL_TUNER_PLUGIN)

launch() { # nodes binary, with ENVS and ARGS set
  local nodes=$1 bin=$2
  local pre=()
  if [[ -n "$RUN_TIMEOUT" ]]; then pre=(timeout "$RUN_TIMEOUT"); fi
  case $LAUNCHER in
    local)
      env "${CLEAR[@]}" "${ENVS[@]}" "${pre[@]}" "$NCCL_TESTS_DIR/$bin" -g "$GPUS_PER_NODE" "${ARGS[@]}" ;;
    slurm)
      env "${CLEAR[@]}" "${ENVS[@]}" "${pre[@]}" srun --nodes="$nodes" --ntasks-per-node="$GPUS_PER_NODE" \
        --gpus-per-node="$GPUS_PER_NODE" --export=ALL "${LAUNCHER_ARGS[@]}" "$NCCL_TESTS_DIR/$bin" -g 1 "${ARGS[@]}" ;;
    mpirun)
      local xs=() e hf=()
      for e in "${ENVS[@]}"; do xs+=(-x "${e%%=*}"); done
      if [[ -n "${HOSTFILE:-}" ]]; then hf=(--hostfile "$HOSTFILE"); fi
      env "${CLEAR[@]}" "${ENVS[@]}" "${pre[@]}" mpirun -np $((nodes * GPUS_PER_NODE)) -npernode "$GPUS_PER_NODE" \
        "${hf[@]}" "${xs[@]}" "${LAUNCHER_ARGS[@]}" "$NCCL_TESTS_DIR/$bin" -g 1 "${ARGS[@]}" ;;
  esac
}

for bin in "${BINARIES[@]}"; do
  [[ -x "$NCCL_TESTS_DIR/$bin" ]] || die "$NCCL_TESTS_DIR/$bin is missing or not executable: build nccl-tests, or set NCCL_TESTS_DIR"
done

"##;

/// The main loop.
const SCRIPT_MAIN: &str = r##"
total=$(grep -c . <<< "$RUNS")
echo "dyncc sweep: $total runs, estimated $ESTIMATE; logs in $OUT/logs" >&2
i=0 ok=0 failed=0 skipped=0
while read -r coll bin nodes algo proto ch rep; do
  i=$((i + 1))
  rel="$coll/nodes=$nodes/NCCL_ALGO=$algo/NCCL_PROTO=$proto/channels=$ch/repeat=$rep"
  log="$OUT/logs/$rel.log" json="$OUT/json/$rel.json" bad="$OUT/failed/$rel.log"
  if [[ -s "$log" ]]; then skipped=$((skipped + 1)); continue; fi
  dir=$(dirname "$log")
  mkdir -p "$dir"
  # Hidden while running: dyncc skips dot files, so a killed run is never read.
  tmp="$dir/.repeat=$rep.log.partial"
  ENVS=(NCCL_DEBUG=INFO "NCCL_DEBUG_SUBSYS=INIT,ENV,TUNING")
  if [[ $algo != default ]]; then ENVS+=("NCCL_ALGO=$algo"); fi
  if [[ $proto != default ]]; then ENVS+=("NCCL_PROTO=$proto"); fi
  if [[ $ch != default ]]; then ENVS+=("NCCL_MIN_NCHANNELS=$ch" "NCCL_MAX_NCHANNELS=$ch"); fi
  ARGS=("${TEST_ARGS[@]}")
  if json_ok "$bin"; then
    mkdir -p "$(dirname "$json")"
    rm -f "$json"
    ARGS+=(-J "$json")
  fi
  {
    echo "# dyncc: NCCL_ALGO=$algo NCCL_PROTO=$proto NCCL_MIN_NCHANNELS=$ch NCCL_MAX_NCHANNELS=$ch repeat=$rep"
    echo "# dyncc: coll=$coll nodes=$nodes gpus_per_node=$GPUS_PER_NODE launcher=$LAUNCHER${PLATFORM:+ platform=$PLATFORM}"
  } > "$tmp"
  start=$SECONDS
  rc=0
  # stdin from /dev/null: srun and mpirun forward stdin to a rank and would
  # swallow the rest of the run list this loop reads.
  launch "$nodes" "$bin" >> "$tmp" 2>&1 </dev/null || rc=$?
  if [[ $rc == 0 ]] && grep -q '^# Avg bus bandwidth' "$tmp"; then
    mv "$tmp" "$log"
    ok=$((ok + 1))
    echo "[$i/$total] $coll nodes=$nodes $algo/$proto channels=$ch repeat=$rep: ok ($((SECONDS - start)) s)" >&2
  else
    echo "# dyncc: status=failed exit=$rc" >> "$tmp"
    mkdir -p "$(dirname "$bad")"
    mv "$tmp" "$bad"
    rm -f "$json"
    failed=$((failed + 1))
    echo "[$i/$total] $coll nodes=$nodes $algo/$proto channels=$ch repeat=$rep: FAILED (exit $rc), log in $bad" >&2
  fi
done <<< "$RUNS"
echo "dyncc sweep: $ok ran, $failed failed (NCCL refused or crashed; see $OUT/failed), $skipped already done" >&2
echo "next: dyncc compile $OUT/logs -o cluster.tbl" >&2
"##;

#[derive(Serialize)]
struct PlanJson<'a> {
    script: String,
    runs: usize,
    estimated_seconds: f64,
    estimated: String,
    launcher: Launcher,
    nodes: &'a [u32],
    sizes: usize,
    not_swept: &'a [String],
    settings: Vec<SettingJson>,
}

#[derive(Serialize)]
struct SettingJson {
    collective: &'static str,
    nodes: u32,
    forced: Vec<String>,
}

pub fn run(a: PlanArgs) -> anyhow::Result<i32> {
    let p = Plan::from_args(&a)?;
    let mut skipped = Vec::new();
    let runs = p.runs(&mut skipped);
    let est: f64 = runs.iter().map(|r| p.run_seconds(r)).sum();
    let text = script(&p, &runs, est, &skipped);
    crate::audit::write_output(&a.output, text.as_bytes(), 0o755)?;
    if a.json {
        let mut settings = Vec::new();
        for &n in &p.nodes {
            for &c in &p.colls {
                settings.push(SettingJson {
                    collective: c.name(),
                    nodes: n,
                    forced: settings_names(&p, c, n),
                });
            }
        }
        let j = PlanJson {
            script: a.output.display().to_string(),
            runs: runs.len(),
            estimated_seconds: est.round(),
            estimated: fmt_duration(est),
            launcher: p.launcher,
            nodes: &p.nodes,
            sizes: p.sizes().len(),
            not_swept: &skipped,
            settings,
        };
        println!("{}", serde_json::to_string_pretty(&j)?);
    } else {
        println!(
            "wrote {} ({} nccl-tests runs, {} sizes each)",
            a.output.display(),
            runs.len(),
            p.sizes().len()
        );
        println!("estimated duration: {} (rough)", fmt_duration(est));
        for &n in &p.nodes {
            for &c in &p.colls {
                println!(
                    "  {:<14} nodes {:<4} default + {}",
                    c.name(),
                    n,
                    settings_names(&p, c, n).join(" ")
                );
            }
        }
        for sk in &skipped {
            println!("not swept: {sk}");
        }
        match p.launcher {
            Launcher::Slurm => println!("next: sbatch {} (or bash it inside an allocation), then dyncc compile {}/logs -o cluster.tbl", a.output.display(), p.out_dir),
            _ => println!("next: bash {}, then dyncc compile {}/logs -o cluster.tbl", a.output.display(), p.out_dir),
        }
    }
    Ok(0)
}

fn settings_names(p: &Plan, c: Coll, n: u32) -> Vec<String> {
    let mut ignore = Vec::new();
    settings(p, c, n, &mut ignore)
        .into_iter()
        .map(|(a, pr, ch)| {
            if ch == 0 {
                format!("{}/{}", a.env_name(), pr.env_name())
            } else {
                format!("{}/{}/{ch}ch", a.env_name(), pr.env_name())
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        a: PlanArgs,
    }

    fn plan(args: &str) -> anyhow::Result<Plan> {
        let t = T::try_parse_from(std::iter::once("plan").chain(args.split_whitespace()))?;
        Plan::from_args(&t.a)
    }

    #[test]
    fn skips_what_nccl_cannot_run() {
        let p = plan("--launcher slurm --nodes 1,2 --gpus-per-node 8 --colls allreduce,allgather,broadcast --nvls --nccl-tests /x -o s.sh").unwrap();
        let mut sk = vec![];
        let names = |c, n| settings_names(&p, c, n);
        let ar1 = names(Coll::AllReduce, 1);
        assert!(ar1.contains(&"Tree/LL".to_string()) && ar1.contains(&"NVLS/Simple".to_string()));
        assert!(
            !ar1.iter().any(|s| s.starts_with("NVLSTree")),
            "NVLSTree needs > 1 node: {ar1:?}"
        );
        assert!(!ar1.iter().any(|s| s == "NVLS/LL"), "NVLS is Simple only");
        assert!(names(Coll::AllReduce, 2).contains(&"NVLSTree/Simple".to_string()));
        assert!(
            !names(Coll::AllGather, 2)
                .iter()
                .any(|s| s.starts_with("Tree") || s.starts_with("PAT")),
            "PAT needs 1 GPU/node"
        );
        assert_eq!(
            names(Coll::Broadcast, 2),
            ["Ring/LL", "Ring/LL128", "Ring/Simple"]
        );
        let runs = p.runs(&mut sk);
        assert!(sk.is_empty(), "default algos are filtered silently");
        assert_eq!(
            runs.iter().filter(|r| r.algo.is_none()).count(),
            3 * 2 * 3,
            "a default run per repeat, node count, collective"
        );
        assert_eq!(runs[0].repeat, 1);
        assert_eq!(runs.last().unwrap().repeat, 3);
    }

    #[test]
    fn explicit_algos_report_what_was_left_out() {
        let p = plan("--launcher mpirun --nodes 2 --gpus-per-node 1 --colls allgather --algos tree,pat --nccl-tests /x -o s.sh").unwrap();
        let mut sk = vec![];
        let runs = p.runs(&mut sk);
        assert!(runs
            .iter()
            .any(|r| r.algo == Some(Algo::Pat) && r.proto == Some(Proto::Simple)));
        assert!(
            sk.iter()
                .any(|s| s.contains("Tree") && s.contains("allgather/reducescatter run Ring")),
            "{sk:?}"
        );
    }

    /// 29 % of a `--collnet` plan was CollNet with LL/LL128 or on one
    /// node, runs NCCL refuses.
    #[test]
    fn collnet_is_planned_with_simple_on_several_nodes_only() {
        let p = plan("--launcher slurm --nodes 1,2,4 --collnet --colls allreduce,allgather,reducescatter --nccl-tests /x -o s.sh").unwrap();
        let runs = p.runs(&mut vec![]);
        let collnet: Vec<&Run> = runs
            .iter()
            .filter(|r| matches!(r.algo, Some(Algo::CollNetDirect | Algo::CollNetChain)))
            .collect();
        assert!(!collnet.is_empty());
        for r in &collnet {
            assert_eq!(r.proto, Some(Proto::Simple), "{r:?}");
            assert!(r.nodes > 1, "{r:?}");
        }
        // Asked for explicitly, the refused ones are named.
        let p = plan("--launcher slurm --nodes 1,2 --algos collnet_direct --nccl-tests /x -o s.sh")
            .unwrap();
        let mut sk = vec![];
        let runs = p.runs(&mut sk);
        assert!(runs
            .iter()
            .all(|r| r.algo.is_none() || (r.nodes == 2 && r.proto == Some(Proto::Simple))));
        assert!(
            sk.iter()
                .any(|s| s.contains("CollNet runs the Simple protocol only")),
            "{sk:?}"
        );
        assert!(
            sk.iter()
                .any(|s| s.contains("CollNet needs more than one node")),
            "{sk:?}"
        );
    }

    /// NCCL runs NVLS across nodes only with CollNet (NVLSTree spans nodes
    /// without it): `--nvls` alone planned NVLS runs at 2+ nodes that
    /// NCCL refuses.
    #[test]
    fn nvls_across_nodes_is_planned_only_with_collnet() {
        let p = plan("--launcher slurm --nodes 1,2 --nvls --nccl-tests /x -o s.sh").unwrap();
        assert!(settings_names(&p, Coll::AllReduce, 1).contains(&"NVLS/Simple".to_string()));
        let ar2 = settings_names(&p, Coll::AllReduce, 2);
        assert!(!ar2.contains(&"NVLS/Simple".to_string()), "{ar2:?}");
        assert!(ar2.contains(&"NVLSTree/Simple".to_string()), "{ar2:?}");
        assert!(!settings_names(&p, Coll::AllGather, 2).contains(&"NVLS/Simple".to_string()));
        let p =
            plan("--launcher slurm --nodes 2 --nvls --collnet --nccl-tests /x -o s.sh").unwrap();
        assert!(settings_names(&p, Coll::AllReduce, 2).contains(&"NVLS/Simple".to_string()));
        // Asked for by name, the refusal is reported.
        let p = plan("--launcher slurm --nodes 2 --algos nvls --nccl-tests /x -o s.sh").unwrap();
        let mut sk = vec![];
        assert!(p.runs(&mut sk).iter().all(|r| r.algo.is_none()));
        assert!(
            sk.iter()
                .any(|s| s.contains("NVLS runs across nodes only with CollNet")),
            "{sk:?}"
        );
    }

    /// NVLSTree is NVLS inside each node, so like NVLS it needs several
    /// GPUs per node; CollNet serves at most 8 per node.
    #[test]
    fn nvls_tree_and_collnet_follow_the_gpus_per_node() {
        let p =
            plan("--launcher mpirun --nodes 2 --gpus-per-node 1 --nvls --nccl-tests /x -o s.sh")
                .unwrap();
        let ar = settings_names(&p, Coll::AllReduce, 2);
        assert!(!ar.iter().any(|s| s.starts_with("NVLS")), "{ar:?}");
        let p =
            plan("--launcher slurm --nodes 2 --gpus-per-node 16 --collnet --nccl-tests /x -o s.sh")
                .unwrap();
        let ar = settings_names(&p, Coll::AllReduce, 2);
        assert!(!ar.iter().any(|s| s.starts_with("CollNet")), "{ar:?}");
        assert!(ar.contains(&"Ring/Simple".to_string()), "{ar:?}");
    }

    #[test]
    fn resource_options_of_the_launcher_args_become_sbatch_lines() {
        let words = shell_words(
            "--partition=gpu -A 'my acct' --mpi=pmix -l --qos high --exclusive --constraint=a100 -t30 --cpu-bind=none",
        )
        .unwrap();
        assert_eq!(
            sbatch_lines(&words),
            [
                vec!["--partition=gpu".to_string()],
                vec!["-A".into(), "my acct".into()],
                vec!["--qos".into(), "high".into()],
                vec!["--exclusive".into()],
                vec!["--constraint=a100".into()],
                vec!["-t30".into()],
            ]
        );
        assert!(shell_words("--account='unbalanced").is_err());
        assert_eq!(shell_quote("my acct"), "'my acct'");
        assert_eq!(shell_quote("--partition=gpu"), "--partition=gpu");
    }

    #[test]
    fn bad_input_says_what_to_do() {
        assert!(plan("--launcher local --nodes 2 --nccl-tests /x -o s.sh")
            .unwrap_err()
            .to_string()
            .contains("--nodes 1"));
        assert!(
            plan("--launcher slurm --nodes 2 --colls alltoall --nccl-tests /x -o s.sh")
                .unwrap_err()
                .to_string()
                .contains("allreduce")
        );
        assert!(plan("--launcher slurm --nodes 2 --channels 99 --nccl-tests /x -o s.sh").is_err());
    }

    #[test]
    fn estimate_grows_with_work() {
        let p1 = plan("--launcher slurm --nodes 2 --nccl-tests /x -o s.sh").unwrap();
        let p2 = plan("--launcher slurm --nodes 2 --repeats 6 --nccl-tests /x -o s.sh").unwrap();
        let est = |p: &Plan| {
            p.runs(&mut vec![])
                .iter()
                .map(|r| p.run_seconds(r))
                .sum::<f64>()
        };
        assert!((est(&p2) / est(&p1) - 2.0).abs() < 1e-9);
        assert_eq!(fmt_duration(7800.0), "2 h 10 min");
        assert_eq!(
            shell_words("--partition=gpu 'a b' \"c\"").unwrap(),
            ["--partition=gpu", "a b", "c"]
        );
    }
}
