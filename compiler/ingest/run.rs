//! Labels a run: the one place that establishes what a run is ([`Run`]:
//! collective, shape, knobs, GPU, platform, NCCL version, environment) from
//! what an input shows about it ([`Shown`]) and what the user states. Every
//! reader parses its format into a [`Shown`] per run and calls
//! [`Labeller::label`]; a new input format is a parser plus that call.
//!
//! Precedence, per fact, first found wins:
//!
//! 1. what the input shows (rank lines, JSON `config.devices`, a
//!    `Collective test starting` line, CSV columns, NCCL INFO lines);
//! 2. what the user states about the file, most specific first: its
//!    `# dyncc:` line, the `--manifest` row, the `--name-pattern`;
//! 3. what is inferred: the collective a launcher command line or the file
//!    name names, the registered buffers its `-R 1` asks for;
//! 4. `--assume`, for what nothing else says;
//! 5. a platform guessed from a `DGX-1V/` directory;
//! 6. for the call state ([`crate::record::State`]: `numPipeOps`, `regBuff`), what
//!    nccl-tests runs unless told otherwise: one operation, buffers not
//!    registered.
//!
//! Node and rank counts are completed from each other with the GPUs per
//! node (stated, or known for the DGX platforms); a stated `nodes`, `ranks`
//! or `gpus_per_node` that disagrees with the shape the input shows is a
//! problem, never ignored (0 is refused when parsed). Knobs are resolved by
//! [`knobs::resolve`] over the input's facts and every label: all sources
//! naming a knob must agree, so a label never silently overrides the log.

use std::sync::Arc;

use super::knobs::{self, Assumptions, KnobSource};
use super::{FileCtx, UNRESOLVED};
use crate::record::{Collective, Config, PartialState, Run};

/// What an input shows about one run, before any label.
pub(crate) struct Shown {
    /// The collective as the input states it (a `Collective test starting`
    /// line, the JSON `args`, a CSV column).
    pub collective: Option<Collective>,
    /// The collective a launcher command line in the log names: an
    /// inference, below the user's labels.
    pub launcher_collective: Option<Collective>,
    /// What to pass when nothing establishes the collective.
    pub collective_unknown: &'static str,
    pub nranks: Option<u32>,
    pub nnodes: Option<u32>,
    /// Why the shape is not shown and what to pass instead, for when no
    /// label gives it either.
    pub shape_unknown: String,
    pub gpu: Option<Arc<str>>,
    pub nccl_version: Option<u32>,
    pub platform: Option<Arc<str>>,
    /// A platform guessed from where the file lies: used when nothing
    /// states one.
    pub platform_hint: Option<Arc<str>>,
    pub env: Option<Arc<str>>,
    pub knobs: ShownKnobs,
    /// The state of the run's calls, as far as the input shows it (the
    /// CSV's `pipeOps`/`regBuff` columns, nccl-tests `-R` in the JSON
    /// `args`).
    pub state: PartialState,
    /// The state a launcher command line in the log implies (`-R 1`): an
    /// inference, below the user's labels.
    pub state_hint: PartialState,
    /// Problems the reader found with the run itself (jobs of different
    /// shapes interleaved), reported after the collective's.
    pub problems: Vec<String>,
}

impl Shown {
    /// A run the input says nothing about yet: every fact to come from
    /// labels, knobs from `knobs` (the log's facts about them).
    pub fn new(knobs: ShownKnobs) -> Shown {
        Shown {
            collective: None,
            launcher_collective: None,
            collective_unknown:
                "collective unknown; pass --assume coll=allreduce (or the right one)",
            nranks: None,
            nnodes: None,
            shape_unknown: "ranks/nodes unknown; pass --assume ranks=N nodes=M".into(),
            gpu: None,
            nccl_version: None,
            platform: None,
            platform_hint: None,
            env: None,
            knobs,
            state: PartialState::default(),
            state_hint: PartialState::default(),
            problems: Vec::new(),
        }
    }
}

/// What an input shows about a run's knobs.
pub(crate) enum ShownKnobs {
    /// The input names the setting itself (CSV columns): labels do not
    /// apply.
    Stated(Config),
    /// What the log shows (NCCL INFO lines, the JSON `env`), to resolve with
    /// the labels.
    Log(KnobSource),
}

/// A run as labelled.
pub(crate) struct Labelled {
    /// `None`: its rows cannot become records (unresolved and not kept, or
    /// no collective to file them under).
    pub run: Option<Run>,
    /// [`UNRESOLVED`] when kept (for `inspect`) despite problems, else 0.
    pub flags: u8,
    /// How the knobs were established (`NCCL_ALGO=Ring (# dyncc), ...`),
    /// when they were resolved from a log and its labels.
    pub how: Option<String>,
    /// What could not be established, joined; `None` when everything was.
    pub problem: Option<String>,
}

/// The user's statements about one file, read once per file.
pub(crate) struct Labeller {
    /// The file's `# dyncc:` line, its manifest row, its name pattern:
    /// most specific first.
    sets: Vec<Assumptions>,
    assume: Assumptions,
    /// Knobs named by path components (`NCCL_ALGO=Ring/`).
    path: KnobSource,
    /// The collective the file name names.
    name_collective: Option<Collective>,
    /// A name pattern matched but read a bad value.
    pattern_error: Option<String>,
}

impl Labeller {
    /// The labels of `ctx`'s file, with its `# dyncc:` lines (`header`) when
    /// the format has them.
    pub fn new(ctx: &FileCtx, header: Option<&Assumptions>) -> anyhow::Result<Labeller> {
        let assume = Assumptions::from_pairs(&ctx.opts.assume).map_err(|e| anyhow::anyhow!(e))?;
        let sets = header
            .into_iter()
            .chain(ctx.labels.sets())
            .cloned()
            .collect();
        Ok(Labeller {
            sets,
            assume,
            path: knobs::from_path(&ctx.path),
            name_collective: ctx
                .path
                .file_name()
                .and_then(|n| collective_from_name(&n.to_string_lossy())),
            pattern_error: ctx.labels.pattern_error.clone(),
        })
    }

    /// The user's statements in precedence order (`--assume` last).
    fn stated(&self) -> impl Iterator<Item = &Assumptions> {
        self.sets.iter().chain(std::iter::once(&self.assume))
    }

    /// The first statement of a fact.
    fn fact<T>(&self, f: impl Fn(&Assumptions) -> Option<T>) -> Option<T> {
        self.stated().find_map(f)
    }

    /// Stated shape values (`nodes`, `ranks`, `gpus_per_node`) that
    /// disagree with the shape the input shows: the input wins the
    /// precedence, so a label that contradicts it is a mistake to report,
    /// never one to ignore (as knobs: all sources must agree).
    fn shape_disagreements(&self, shown: &Shown) -> Vec<String> {
        let mut out = Vec::new();
        let per_node = match (shown.nranks, shown.nnodes) {
            (Some(r), Some(n)) if n > 0 && r % n == 0 => Some(r / n),
            _ => None,
        };
        let nodes = |n: u32| format!("{n} node{}", if n == 1 { "" } else { "s" });
        let shows = match (shown.nranks, shown.nnodes, per_node) {
            (Some(r), Some(n), Some(g)) => format!("{r} ranks on {}, {g} per node", nodes(n)),
            (Some(r), Some(n), None) => format!("{r} ranks on {}", nodes(n)),
            (Some(r), None, _) => format!("{r} ranks"),
            (None, Some(n), _) => nodes(n),
            (None, None, _) => return out,
        };
        for a in self.stated() {
            for (key, stated, seen) in [
                ("nodes", a.nodes, shown.nnodes),
                ("ranks", a.ranks, shown.nranks),
                ("gpus_per_node", a.gpus_per_node, per_node),
            ] {
                if let (Some(v), Some(seen)) = (stated, seen) {
                    if v != seen {
                        out.push(format!(
                            "{} {key}={v} disagrees with the file, which shows {shows}; \
                             drop or correct that label",
                            a.knobs.name
                        ));
                    }
                }
            }
        }
        out
    }

    /// Labels one run (see the module docs). When something cannot be
    /// established the run's rows are an error (strict), skipped
    /// (lenient) or kept flagged [`UNRESOLVED`] (`inspect`), as
    /// [`FileCtx::unresolved`] decides, at `line`.
    pub fn label(&self, ctx: &mut FileCtx, line: u32, shown: Shown) -> anyhow::Result<Labelled> {
        let mut problems: Vec<String> = self.pattern_error.iter().cloned().collect();
        let collective = shown
            .collective
            .or_else(|| self.sets.iter().find_map(|a| a.coll))
            .or(shown.launcher_collective)
            .or(self.name_collective)
            .or(self.assume.coll);
        if collective.is_none() {
            problems.push(shown.collective_unknown.to_string());
        }
        problems.extend(self.shape_disagreements(&shown));
        problems.extend(shown.problems);
        let gpus_per_node = || {
            self.fact(|a| a.gpus_per_node).or_else(|| {
                shown
                    .platform
                    .clone()
                    .or_else(|| self.fact(|a| a.platform.clone()))
                    .or(shown.platform_hint.clone())
                    .as_deref()
                    .and_then(platform_gpus_per_node)
            })
        };
        let mut nranks = shown.nranks.or_else(|| self.fact(|a| a.ranks));
        let nnodes = shown.nnodes.or_else(|| self.fact(|a| a.nodes)).or_else(|| {
            let g = gpus_per_node()?;
            nranks.map(|r| r.div_ceil(g))
        });
        if nranks.is_none() {
            nranks = nnodes.and_then(|n| Some(n * gpus_per_node()?));
        }
        if nranks.is_none() || nnodes.is_none() {
            problems.push(shown.shape_unknown);
        }
        let (config, how) = match shown.knobs {
            ShownKnobs::Stated(c) => (Some(c), None),
            ShownKnobs::Log(log) => {
                let mut sources: Vec<&KnobSource> = vec![&log];
                sources.extend(self.sets.iter().map(|a| &a.knobs));
                sources.push(&self.path);
                sources.push(&self.assume.knobs);
                match collective.map(|c| knobs::resolve(&sources, c)) {
                    Some(Ok(k)) => (
                        Some(Config {
                            algo: k.algo,
                            proto: k.proto,
                            channels: k.channels,
                            chunk: k.chunk_of(),
                        }),
                        Some(k.how),
                    ),
                    Some(Err(e)) => {
                        problems.push(e);
                        (None, None)
                    }
                    None => (None, None),
                }
            }
        };
        let mut flags = 0;
        let problem = (!problems.is_empty()).then(|| problems.join("; "));
        if let Some(msg) = &problem {
            if !ctx.unresolved(line, msg)? {
                return Ok(Labelled {
                    run: None,
                    flags,
                    how,
                    problem,
                });
            }
            flags = UNRESOLVED;
        }
        let run = collective.map(|collective| Run {
            collective,
            nranks: nranks.unwrap_or(0),
            nnodes: nnodes.unwrap_or(0),
            config: config.unwrap_or(Config::DEFAULT),
            gpu: shown.gpu.or_else(|| self.fact(|a| a.gpu.clone())),
            nccl_version: shown.nccl_version.or_else(|| self.fact(|a| a.nccl_version)),
            platform: shown
                .platform
                .or_else(|| self.fact(|a| a.platform.clone()))
                .or(shown.platform_hint),
            env: shown.env,
            // What nccl-tests runs unless told otherwise.
            state: self
                .stated()
                .fold(shown.state, |s, a| s.or(a.state))
                .or(shown.state_hint)
                .or_baseline(),
        });
        Ok(Labelled {
            run,
            flags,
            how,
            problem,
        })
    }
}

/// GPUs per node of the platforms NVIDIA's raw files come from.
pub fn platform_gpus_per_node(platform: &str) -> Option<u32> {
    let p: String = platform
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .collect::<String>()
        .to_ascii_uppercase();
    Some(match p.as_str() {
        "DGX1V" | "DGX1" | "DGX1P" => 8,
        "DGX2V" | "DGX2" | "DGX2H" => 16,
        "DGXA100" | "DGXH100" | "DGXH200" | "DGXB200" => 8,
        _ => return None,
    })
}

/// Collective from a file name (`all_reduce_output.dat.1`, `ag.log` no).
pub fn collective_from_name(name: &str) -> Option<Collective> {
    let k: String = name
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .map(|c| c.to_ascii_lowercase())
        .collect();
    for (pat, c) in [
        ("reducescatter", Collective::ReduceScatter),
        ("allreduce", Collective::AllReduce),
        ("allgather", Collective::AllGather),
        ("alltoall", Collective::AllToAll),
        ("sendrecv", Collective::SendRecv),
        ("broadcast", Collective::Broadcast),
        ("hypercube", Collective::HyperCube),
    ] {
        if k.contains(pat) {
            return Some(c);
        }
    }
    None
}
