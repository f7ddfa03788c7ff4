//! `dyncc plan`: writes the sweep script that feeds `dyncc compile`. It
//! runs nccl-tests under NCCL's default and under every algorithm x
//! protocol (x channel count) NCCL can run for each collective at each
//! node count, with repeats interleaved, and records with every log what
//! ran: `# dyncc:` knob headers, NCCL_DEBUG=INFO (INIT,ENV,TUNING) so the
//! ingest can check NCCL honoured the knobs, and `-J` JSON (with the full
//! environment) where the nccl-tests build supports it. This file holds the
//! arguments and their checks, `run` and the printing; the plan, the
//! launchers and the script are in [`crate::plan`].

use std::io::Write;
use std::path::PathBuf;

use anyhow::bail;
use dyncc_tables::{Algo, Coll, Proto, Refusal};
use serde::Serialize;

use crate::plan::{fmt_duration, script, shell_quote, split_launcher_args, Launcher, Plan};
use crate::units::parse_bytes;

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
/// (--collnet), and NVLS runs across nodes only with CollNet. Naming NVLS or
/// CollNet in --algos without its flag is refused.
///
/// With Slurm, the --launcher-args that request resources (account,
/// partition, qos, constraint, ...) also become #SBATCH lines, so a site
/// that requires them accepts `sbatch sweep.sh`.
///
/// NCCL has no variable for a collective's chunk size; only a tuner's
/// getChunkSize (NCCL 2.30+) sets it. With --chunks 64K,256K,1M each forced
/// setting also runs once per chunk under the dyncc plugin with no table
/// and DYNCC_SWEEP_CHUNK=BYTES: the plugin answers every getChunkSize with
/// that chunk (rounded down to the protocol's grain) and leaves algorithm,
/// protocol and channels to NCCL_ALGO/NCCL_PROTO/the channel variables. Its
/// init line (NCCL_DEBUG=INFO) records the chunk in the log, which compile
/// reads as the run's knob, so a chunk that wins becomes a decision that
/// forces it. The plugin must be on the nodes: --plugin-dir, else this
/// dyncc's `dyncc plugin-path`, else the script asks `dyncc plugin-path`
/// there (DYNCC_PLUGIN_DIR overrides); a chunk run whose log lacks the
/// plugin's line lands in failed/. A chunk below a protocol's grain
/// (LL128: 1920 bytes) is not run with it.
///
/// Logs land in `OUT/logs/<coll>/nodes=N/NCCL_ALGO=A/NCCL_PROTO=P/channels=C/repeat=R.log`
/// (`.../channels=C/chunk=BYTES/repeat=R.log` for a chunk run)
/// with `# dyncc:` knob headers and NCCL INFO output; -J JSON (nccl-tests
/// 2.17.3 or later) in OUT/json/...; failed runs in OUT/failed/ (a run NCCL
/// refuses is recorded, not fatal). Re-running the script skips finished
/// runs. The estimate of the duration is rough (an alpha-beta model of a
/// typical InfiniBand GPU cluster); a sweep estimated over --max-hours is
/// refused.
///
/// Examples:
///   dyncc plan --launcher slurm --nodes 1,2,4,8 --nccl-tests ~/nccl-tests/build -o sweep.sh
///   dyncc plan --launcher mpirun --nodes 2,4 --channels 0,4,8,16 --nccl-tests /opt/nt -o sweep.sh
///   dyncc plan --launcher local --nodes 1 --gpus-per-node 4 --nccl-tests ./build -o sweep.sh
///   dyncc plan --launcher slurm --nodes 2,4,8 --chunks 64K,256K,1M --nccl-tests ~/nt -o sweep.sh
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
    /// Algorithms to force (default: all NCCL can run per collective and node
    /// count); nvls and nvls_tree need --nvls, collnet_* need --collnet.
    #[arg(long, value_delimiter = ',')]
    pub algos: Vec<String>,
    /// Protocols to force.
    #[arg(long, value_delimiter = ',', default_value = "ll,ll128,simple")]
    pub protos: Vec<String>,
    /// Channel counts to pin (NCCL_MIN_NCHANNELS = NCCL_MAX_NCHANNELS); 0 = NCCL's choice.
    #[arg(long, value_delimiter = ',', default_value = "0")]
    pub channels: Vec<u32>,
    /// Chunk sizes to sweep, e.g. 64K,256K,1M (bytes; K = 1024, M = 1024^2):
    /// each forced setting runs again per chunk with the dyncc plugin
    /// answering NCCL's getChunkSize with it (NCCL 2.30+).
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    pub chunks: Vec<String>,
    /// Directory holding libnccl-tuner-dyncc.so on the cluster, for
    /// --chunks (default: this dyncc's `dyncc plugin-path`; the script's
    /// DYNCC_PLUGIN_DIR overrides).
    #[arg(long, value_name = "DIR")]
    pub plugin_dir: Option<PathBuf>,
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
    /// Refuse a sweep whose estimated duration exceeds this many hours (a
    /// week by default): a plan that long is usually a typo in --nodes or
    /// --repeats, and its script and Slurm --time would be absurd.
    #[arg(long, default_value_t = 168, value_name = "HOURS")]
    pub max_hours: u32,
    /// Where to write the script (atomically, executable); `-` pipes it to
    /// stdout (the summary then goes to stderr).
    #[arg(short, long)]
    pub output: PathBuf,
    /// Print a JSON summary.
    #[arg(long)]
    pub json: bool,
}

impl PlanArgs {
    /// The plan these arguments ask for, or what is wrong with them.
    pub fn plan(&self) -> anyhow::Result<Plan> {
        let a = self;
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
        // The machine's features are stated by their flags, never implied by
        // naming an algorithm: a sweep of NVLS on a machine without NVLink
        // SHARP would only fill failed/.
        for algo in algos.iter().filter(|_| explicit_algos) {
            let (feature, flag) = match algo {
                Algo::Nvls | Algo::NvlsTree if !a.nvls => (Refusal::NoNvls, "--nvls"),
                Algo::CollNetDirect | Algo::CollNetChain if !a.collnet => {
                    (Refusal::NoCollNet, "--collnet")
                }
                _ => continue,
            };
            bail!(
                "--algos {}: {}; add {flag} if these machines have it (otherwise leave {} out)",
                algo.name(),
                feature.why(),
                algo.name()
            );
        }
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
        let mut chunks = Vec::new();
        for c in &a.chunks {
            let b = dyncc_tables::Chunk::parse_bytes(c).ok_or_else(|| {
                anyhow::anyhow!(
                    "--chunks: `{c}` is not a chunk size; give bytes such as 65536, 64K or 1M \
                     (at most 2 GiB), comma-separated"
                )
            })?;
            if !chunks.contains(&b) {
                chunks.push(b);
            }
        }
        // Where the plugin is, as `dyncc plugin-path` finds it beside this
        // command; the cluster's copy may be elsewhere (--plugin-dir).
        let plugin_dir = match (&a.plugin_dir, chunks.is_empty()) {
            (_, true) => String::new(),
            (Some(d), false) => d.display().to_string(),
            (None, false) => std::env::current_exe()
                .ok()
                .and_then(|exe| crate::installed::find(&exe).ok())
                .map(|p| p.dir.display().to_string())
                .unwrap_or_default(),
        };
        let launcher_args = split_launcher_args(&a.launcher_args)?;
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
            chunks,
            plugin_dir,
            nvls: a.nvls,
            collnet: a.collnet,
            nccl_tests: a.nccl_tests.clone(),
            out_dir: a.out_dir.clone(),
            platform: a.platform.clone(),
            launcher_args,
            max_hours: a.max_hours,
            output: a.output.clone(),
            command: std::env::args()
                .map(|a| shell_quote(&a))
                .collect::<Vec<_>>()
                .join(" "),
        })
    }
}

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
    settings: Vec<SweptSettingsJson>,
}

#[derive(Serialize)]
/// The settings a plan sweeps for one (collective, node count).
struct SweptSettingsJson {
    collective: &'static str,
    nodes: u32,
    forced: Vec<String>,
}

pub fn run(a: PlanArgs) -> anyhow::Result<i32> {
    let p = a.plan()?;
    let mut skipped = Vec::new();
    let runs = p.runs(&mut skipped);
    let est = p.estimate(&runs)?;
    let text = script(&p, &runs, est, &skipped);
    crate::audit::files::write_output_or_stdout(&a.output, text.as_bytes(), 0o755)?;
    // With `-o -` the script is stdout's; the summary goes to stderr.
    let piped = crate::atomic::names_stdout(&a.output);
    let mut out: Box<dyn Write> = if piped {
        Box::new(std::io::stderr().lock())
    } else {
        Box::new(std::io::stdout().lock())
    };
    if a.json {
        let mut settings = Vec::new();
        for &n in &p.nodes {
            for &c in &p.colls {
                settings.push(SweptSettingsJson {
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
        writeln!(out, "{}", crate::output::pretty(&j)?)?;
        return Ok(0);
    }
    // Piped, the script has no name yet: the advice names the README's.
    let (script_name, save, shown) = if piped {
        (
            "the script to standard output".to_string(),
            "save it (`dyncc plan ... -o - > sweep.sh`), then ",
            "sweep.sh".to_string(),
        )
    } else {
        let name = a.output.display().to_string();
        (name.clone(), "", name)
    };
    writeln!(
        out,
        "wrote {script_name} ({} nccl-tests runs, {} sizes each)",
        runs.len(),
        p.sizes().len()
    )?;
    writeln!(out, "estimated duration: {} (rough)", fmt_duration(est))?;
    for &n in &p.nodes {
        for &c in &p.colls {
            writeln!(
                out,
                "  {:<14} nodes {:<4} default + {}",
                c.name(),
                n,
                settings_names(&p, c, n).join(" ")
            )?;
        }
    }
    for sk in &skipped {
        writeln!(out, "not swept: {sk}")?;
    }
    let then = format!("dyncc compile {}/logs -o cluster.tbl", p.out_dir);
    match p.launcher {
        Launcher::Slurm => writeln!(
            out,
            "next: {save}sbatch {shown} (or bash it inside an allocation), then {then}"
        )?,
        _ => writeln!(out, "next: {save}bash {shown}, then {then}")?,
    }
    Ok(0)
}

fn settings_names(p: &Plan, c: Coll, n: u32) -> Vec<String> {
    let mut ignore = Vec::new();
    let settings = p.settings(c, n, &mut ignore);
    let name = |s: &crate::plan::Setting| {
        let (a, pr) = (s.algo.env_name(), s.proto.env_name());
        match s.channels {
            0 => format!("{a}/{pr}"),
            ch => format!("{a}/{pr}/{ch}ch"),
        }
    };
    let mut out: Vec<String> = settings.iter().map(name).collect();
    for &chunk in &p.chunks {
        for s in settings
            .iter()
            .filter(|s| !s.proto.chunk_at_most(chunk).is_nccl())
        {
            out.push(format!("{}/chunk={chunk}", name(s)));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Run;
    use clap::Parser;

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        a: PlanArgs,
    }

    fn plan(args: &str) -> anyhow::Result<Plan> {
        let t = T::try_parse_from(std::iter::once("plan").chain(args.split_whitespace()))?;
        t.a.plan()
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
        let p = plan(
            "--launcher slurm --nodes 1,2 --collnet --algos collnet_direct --nccl-tests /x -o s.sh",
        )
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
        let p =
            plan("--launcher slurm --nodes 2 --nvls --algos nvls --nccl-tests /x -o s.sh").unwrap();
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

    /// `--chunks` runs each forced setting again per chunk, with the
    /// plugin and the chunk in the script, and leaves out a chunk below a
    /// protocol's grain; a bad chunk is refused with what to give.
    #[test]
    fn chunks_run_each_forced_setting_again_under_the_plugin() {
        let base =
            "--launcher slurm --nodes 2 --colls allreduce --algos ring --nccl-tests /x -o s.sh";
        let p = plan(&format!(
            "{base} --chunks 1K,64K --plugin-dir /opt/dyncc/lib"
        ))
        .unwrap();
        assert_eq!(p.chunks, vec![1024, 65536]);
        let mut skipped = Vec::new();
        let runs = p.runs(&mut skipped);
        let plain = plan(base).unwrap().runs(&mut Vec::new()).len();
        let at = |c: u64| runs.iter().filter(|r| r.chunk == c).count();
        // Ring x (LL, LL128, Simple) per repeat; 1K is below LL128's grain.
        assert_eq!((at(0), at(65536), at(1024)), (plain, 3 * 3, 2 * 3));
        assert!(
            skipped.iter().any(|s| s.contains("chunk 1024 with LL128")),
            "{skipped:?}"
        );
        let text = script(&p, &runs, 1.0, &skipped);
        assert!(
            text.contains("allreduce all_reduce_perf 2 Ring LL128 default 1 65536"),
            "run list"
        );
        assert!(text.contains("PLUGIN_DIR=${DYNCC_PLUGIN_DIR:-/opt/dyncc/lib}"));
        assert!(text.contains("\"DYNCC_SWEEP_CHUNK=$chunk\""));
        let e = plan(&format!("{base} --chunks 64K,lots"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("`lots`") && e.contains("64K"), "{e}");
        assert!(plan(&format!("{base} --chunks 0")).is_err());
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
    }
}
