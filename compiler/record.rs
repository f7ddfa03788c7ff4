//! The normalised data model every input format is read into: one
//! [`Record`] per measurement, and [`Cell`]s, the robust aggregate of the
//! repeats of one (collective, size, shape, configuration).

use std::path::PathBuf;
use std::sync::Arc;

pub use dyncc_tables::{Algo, Chunk, Coll, Proto};
use serde::Serialize;

/// Every collective nccl-tests can measure. Only the first five reach a
/// tuner ([`Collective::tunable`]); the others are read and reported.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Collective {
    Broadcast,
    Reduce,
    AllGather,
    ReduceScatter,
    AllReduce,
    AllToAll,
    SendRecv,
    Gather,
    Scatter,
    HyperCube,
}

impl Collective {
    /// The collective as NCCL's tuner sees it, if NCCL asks a tuner about it.
    pub fn tunable(self) -> Option<Coll> {
        Some(match self {
            Collective::Broadcast => Coll::Broadcast,
            Collective::Reduce => Coll::Reduce,
            Collective::AllGather => Coll::AllGather,
            Collective::ReduceScatter => Coll::ReduceScatter,
            Collective::AllReduce => Coll::AllReduce,
            _ => return None,
        })
    }

    pub fn from_coll(c: Coll) -> Collective {
        match c {
            Coll::Broadcast => Collective::Broadcast,
            Coll::Reduce => Collective::Reduce,
            Coll::AllGather => Collective::AllGather,
            Coll::ReduceScatter => Collective::ReduceScatter,
            Coll::AllReduce => Collective::AllReduce,
        }
    }

    /// Lower-case name (`allreduce`, `alltoall`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Collective::AllToAll => "alltoall",
            Collective::SendRecv => "sendrecv",
            Collective::Gather => "gather",
            Collective::Scatter => "scatter",
            Collective::HyperCube => "hypercube",
            c => c.tunable().map(Coll::name).unwrap_or("?"),
        }
    }

    /// Parses `allreduce`, `all_reduce_perf`, `AllToAll`, ...
    pub fn parse(s: &str) -> Option<Collective> {
        if let Some(c) = Coll::parse(s) {
            return Some(Collective::from_coll(c));
        }
        let k: String = s
            .trim()
            .chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .map(|c| c.to_ascii_lowercase())
            .collect();
        let k = k.strip_suffix("perf").unwrap_or(&k);
        Some(match k {
            "alltoall" => Collective::AllToAll,
            "sendrecv" => Collective::SendRecv,
            "gather" => Collective::Gather,
            "scatter" => Collective::Scatter,
            "hypercube" => Collective::HyperCube,
            _ => return None,
        })
    }
}

/// Where a measurement came from.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct Source {
    pub file: Arc<PathBuf>,
    /// 1-based line (row number for CSV/JSON).
    pub line: u32,
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.file.display(), self.line)
    }
}

/// Record flags.
pub mod flags {
    /// Orders of magnitude off its neighbours: kept, reported, not fitted.
    pub const WARMUP_OUTLIER: u8 = 1;
    /// nccl-tests reported wrong elements (#wrong > 0).
    pub const WRONG_DATA: u8 = 2;
    /// The log shows NCCL did not run the forced knob (e.g. NVLS ran as Ring).
    pub const KNOB_IGNORED: u8 = 4;
}

/// What a run is: everything the measurements of one run share. Every
/// reader establishes it once per run through one constructor
/// (`ingest::run::Labeller::label`), from what the input shows and what the
/// user states; the measurements then add only their size, time and place.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct Run {
    pub collective: Collective,
    pub nranks: u32,
    pub nnodes: u32,
    /// The knobs: all `None` is NCCL's own choice.
    pub config: Config,
    /// GPU model as printed in the rank lines, e.g. `NVIDIA H100 80GB HBM3`.
    pub gpu: Option<Arc<str>>,
    /// NCCL version code (major*10000 + minor*100 + patch), e.g. 22902.
    pub nccl_version: Option<u32>,
    /// Cluster or platform label, when the input names one (the CSV
    /// `platform` column, `# dyncc: platform=...`), e.g. `DGX-1V`.
    pub platform: Option<Arc<str>>,
    /// The run's other `NCCL_*` variables (`NCCL_IB_HCA=mlx5
    /// NCCL_NET_GDR_LEVEL=PHB`, sorted; empty: none set) when the input
    /// shows the run's environment; `None` when it does not. With
    /// `nccl_version` it is the run's setup: runs of different setups are
    /// not repeats of one measurement (see `ingest::setup`).
    pub env: Option<Arc<str>>,
    /// The state of its calls beside the size (`numPipeOps`, `regBuff`).
    pub state: State,
}

impl Run {
    /// True when nothing was forced: NCCL's own choice.
    pub fn is_default(&self) -> bool {
        self.config.is_default()
    }

    /// Whether `--platform LABEL` selects this run: its platform label or
    /// its GPU model, compared case-insensitively.
    pub fn is_platform(&self, label: &str) -> bool {
        let eq = |v: &Option<Arc<str>>| v.as_deref().is_some_and(|x| x.eq_ignore_ascii_case(label));
        eq(&self.platform) || eq(&self.gpu)
    }

    /// The cell a measurement of `nbytes` of this run falls in.
    pub fn cell(&self, nbytes: u64) -> CellKey {
        CellKey {
            collective: self.collective,
            nbytes,
            nranks: self.nranks,
            nnodes: self.nnodes,
            state: self.state,
            config: self.config,
        }
    }
}

#[cfg(test)]
impl Run {
    /// An allreduce of 8 ranks on one node under NCCL's own choice, all
    /// else unknown: what tests vary.
    pub(crate) fn example() -> Run {
        Run {
            collective: Collective::AllReduce,
            nranks: 8,
            nnodes: 1,
            config: Config::DEFAULT,
            gpu: None,
            nccl_version: None,
            platform: None,
            env: None,
            state: State::BASELINE,
        }
    }
}

/// One measurement, normalised: a run's, at one size.
#[derive(Clone, Debug)]
pub struct Record {
    pub run: Run,
    pub measurement: Measurement,
}

/// What a measurement adds to its run.
#[derive(Clone, Debug)]
pub struct Measurement {
    /// nccl-tests `size`: for AllGather/ReduceScatter the total buffer, the
    /// same `nBytes` NCCL passes a tuner.
    pub nbytes: u64,
    /// Average time per operation in microseconds.
    pub time_us: f64,
    pub in_place: bool,
    /// Data type name (`float`, `double`, ...), when known.
    pub dtype: Option<Arc<str>>,
    pub source: Source,
    /// Bit set of [`flags`] (and `ingest::UNRESOLVED`).
    pub flags: u8,
}

impl Record {
    /// True when nothing was forced: NCCL's own choice.
    pub fn is_default(&self) -> bool {
        self.run.is_default()
    }

    /// Whether `--platform LABEL` selects this record (see [`Run::is_platform`]).
    pub fn is_platform(&self, label: &str) -> bool {
        self.run.is_platform(label)
    }

    pub fn key(&self) -> CellKey {
        self.run.cell(self.measurement.nbytes)
    }
}

/// A configuration a run was made under: a partial
/// [`Setting`](dyncc_tables::Setting), one `Option` per knob (`None`: left to
/// NCCL); all `None` is NCCL's default. The chunk is the format's own
/// [`Chunk`] ([`Chunk::NCCL`]: NCCL's), as a sweep's plugin answered it
/// (`DYNCC_SWEEP_CHUNK`, on the protocol's grain), so a run at a chunk is
/// another candidate than the same setting at NCCL's chunk.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Default)]
pub struct Config {
    pub algo: Option<Algo>,
    pub proto: Option<Proto>,
    pub channels: Option<u32>,
    pub chunk: Chunk,
}

impl Config {
    pub const DEFAULT: Config = Config {
        algo: None,
        proto: None,
        channels: None,
        chunk: Chunk::NCCL,
    };

    pub fn is_default(&self) -> bool {
        *self == Config::DEFAULT
    }
}

/// What a table decision runs as: the setting a sweep would have measured
/// it under (channels 0 = NCCL's choice).
impl From<dyncc_tables::Decision> for Config {
    fn from(d: dyncc_tables::Decision) -> Config {
        match d {
            dyncc_tables::Decision::Default => Config::DEFAULT,
            dyncc_tables::Decision::Force(dyncc_tables::Setting {
                algo,
                proto,
                channels,
                chunk,
            }) => Config {
                algo: Some(algo),
                proto: Some(proto),
                channels: (channels > 0).then_some(channels as u32),
                chunk,
            },
        }
    }
}

impl std::fmt::Display for Config {
    /// `default`, `ring/ll128`, `tree/simple/8ch`, `ring/*` (protocol left
    /// to NCCL), `ring/simple/64K` (a sweep's chunk), `*/*/64K`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.is_default() {
            return f.write_str("default");
        }
        let a = self.algo.map(Algo::name).unwrap_or("*");
        let p = self.proto.map(Proto::name).unwrap_or("*");
        write!(f, "{a}/{p}")?;
        if let Some(c) = self.channels {
            write!(f, "/{c}ch")?;
        }
        if !self.chunk.is_nccl() {
            write!(f, "/{}", self.chunk)?;
        }
        Ok(())
    }
}

/// What identifies one cell of a sweep: what NCCL passes a tuner
/// (collective, size, the communicator's shape, the call's [`State`]) and
/// the setting measured. Every step from ingest to the emitted table
/// contexts keys on it.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct CellKey {
    pub collective: Collective,
    pub nbytes: u64,
    pub nranks: u32,
    pub nnodes: u32,
    pub state: State,
    pub config: Config,
}

/// The state of a call that NCCL passes a tuner beside its collective,
/// size and communicator: runs made in different states are not repeats of
/// one measurement, and a table context decides for the states its
/// [`Gates`] let through. A new state column is a field here and in
/// [`PartialState`] (its name and values), its gate in [`State::gates`],
/// and the readers that see it; ingest, setups, grids and the emitted
/// contexts carry it as part of the key.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct State {
    /// Operations NCCL pipelines in one launch (`numPipeOps`; 1: one).
    pub pipe_ops: u32,
    /// The user buffers are registered with NCCL (`regBuff`: nccl-tests
    /// `-R 1` or `-R 2`, the tuner CSV's `regBuff` column).
    pub reg_buff: bool,
}

impl State {
    /// What nccl-tests measures unless told otherwise: one operation at a
    /// time, buffers not registered.
    pub const BASELINE: State = State {
        pipe_ops: 1,
        reg_buff: false,
    };

    /// The gates of a table context decided from measurements in this
    /// state; `None` when the table cannot tell its calls apart.
    ///
    /// Baseline measurements decide for every call, as every table has
    /// (their settings are what NCCL runs without registration, and
    /// existing tables stay as they are). Registered-buffer measurements
    /// decide only for registered buffers: the settings that win there
    /// (NVLS, CollNet, zero-copy paths) can lose without registration.
    /// `numPipeOps` can only be gated from above (`<= N`), so measurements
    /// of several pipelined operations cannot be told apart from single
    /// ones and are not decided.
    pub fn gates(self) -> Option<Gates> {
        if self.pipe_ops != 1 {
            return None;
        }
        Some(Gates {
            max_pipe_ops: 0,
            reg_buff: if self.reg_buff {
                dyncc_tables::RegBuff::Only1
            } else {
                dyncc_tables::RegBuff::Any
            },
        })
    }
}

impl State {
    /// The columns by the names labels, `--setup` and reports use, with
    /// their values: `pipeOps=1`, `regBuff=0`.
    pub fn columns(self) -> Vec<(&'static str, String)> {
        PartialState::from(self).columns()
    }
}

impl std::fmt::Display for State {
    /// `pipeOps 1, regBuff 0`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let cols: Vec<String> = self
            .columns()
            .into_iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        f.write_str(&cols.join(", "))
    }
}

/// A [`State`] as one source gives it: each column when the source names
/// it. Readers fill one from what the input shows, labels (`--assume`,
/// `# dyncc:`, manifests) from their `KEY=VALUE` words.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct PartialState {
    pub pipe_ops: Option<u32>,
    pub reg_buff: Option<bool>,
}

impl PartialState {
    /// Takes `key=value` when `key` names a state column (`pipeOps`,
    /// `regBuff`; any case, `pipe_ops`, `numPipeOps`, `reg_buff`): `Ok(false)`
    /// when it names none, `Err` for a bad value.
    pub fn set(&mut self, key: &str, value: &str) -> Result<bool, String> {
        let v = value.trim();
        match key.trim().to_ascii_lowercase().as_str() {
            "regbuff" | "reg_buff" => {
                self.reg_buff = Some(match v {
                    "0" => false,
                    "1" | "2" => true,
                    _ => {
                        return Err(format!(
                            "{key}={value}: expected 0 (buffers not registered) or 1 \
                             (registered: nccl-tests -R 1 or -R 2)"
                        ))
                    }
                })
            }
            "pipeops" | "pipe_ops" | "numpipeops" => {
                self.pipe_ops =
                    Some(v.parse().ok().filter(|&n| n > 0).ok_or_else(|| {
                        format!("{key}={value}: expected a positive whole number")
                    })?)
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Each column from `self`, else from `other`.
    pub fn or(self, other: PartialState) -> PartialState {
        PartialState {
            pipe_ops: self.pipe_ops.or(other.pipe_ops),
            reg_buff: self.reg_buff.or(other.reg_buff),
        }
    }

    /// The state, with what nothing names at its [`State::BASELINE`] value.
    pub fn or_baseline(self) -> State {
        State {
            pipe_ops: self.pipe_ops.unwrap_or(State::BASELINE.pipe_ops),
            reg_buff: self.reg_buff.unwrap_or(State::BASELINE.reg_buff),
        }
    }

    /// The columns named, by name (see [`State::columns`]).
    pub fn columns(self) -> Vec<(&'static str, String)> {
        let mut v = Vec::new();
        if let Some(p) = self.pipe_ops {
            v.push(("pipeOps", p.to_string()));
        }
        if let Some(r) = self.reg_buff {
            v.push(("regBuff", u8::from(r).to_string()));
        }
        v
    }
}

impl From<State> for PartialState {
    fn from(s: State) -> PartialState {
        PartialState {
            pipe_ops: Some(s.pipe_ops),
            reg_buff: Some(s.reg_buff),
        }
    }
}

/// Which calls a table context decides for (the `max_pipe_ops` and
/// `reg_buff` fields of its `ContextSpec`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Gates {
    /// 0: any `numPipeOps`.
    pub max_pipe_ops: u32,
    pub reg_buff: dyncc_tables::RegBuff,
}

/// The robust aggregate of every trusted repeat of one cell.
#[derive(Clone, Debug)]
pub struct Cell {
    pub key: CellKey,
    /// Median time over the trusted samples (both placements count).
    pub time_us: f64,
    /// Number of trusted samples.
    pub n: u32,
    /// Relative spread of the samples: (max - min) / median; 0 for one sample.
    pub spread: f64,
    /// One source of the cell, for evidence.
    pub source: Source,
    /// What the time may be compared with.
    pub base: TimeBase,
}

/// What a cell's time was measured as, which says what it may be set
/// against: only a gain read within one base is a gain (a trace's kernel
/// time and a sweep's nccl-tests time differ by launch and host overheads).
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub enum TimeBase {
    /// A sweep's time (nccl-tests or a tuner CSV).
    #[default]
    Sweep,
    /// From traces of jobs: NCCL's own choice's geometric mean GPU time, or
    /// it divided by a setting's gain measured in the same jobs
    /// ([`crate::ingest::traces`]).
    Trace {
        /// sd of one collective's ln(time), from the traces' own counts.
        sd_ln: f64,
    },
    /// Not a time: the configuration NCCL ran on its own where jobs traced
    /// a shape at a node count the sweep never measured
    /// ([`crate::ingest::traces`]). Forcing it there runs what NCCL runs
    /// anyway, so it is no probe ([`crate::features::Grid::nccl_runs`]).
    NcclRan,
    /// Not a time: where jobs let NCCL choose at a (collective, shape, size
    /// bucket), more of their communicators saw it run a path no tuner can
    /// choose (a symmetric kernel, the copy engines) in most of its calls
    /// than saw it run a classic pair ([`crate::ingest::traces`]). A classic pair forced there displaces
    /// that path (NCCL 2.31+'s `ncclTuningSelectBestTuning` ranks a forced
    /// pair's zero cost first), so only a measurement there may force one
    /// ([`crate::features::Grid::other_paths`]). The cell's `nbytes` is the
    /// bucket's lower bound.
    OtherPath {
        /// NCCL's own calls that ran a symmetric kernel or on the copy
        /// engines.
        ran: u64,
        /// NCCL's own calls that ran a classic (algorithm, protocol).
        classic: u64,
        /// Communicators whose NCCL calls mostly ran another path, and
        /// mostly a classic pair (each with enough calls to count).
        comms: u32,
        classic_comms: u32,
    },
}

impl TimeBase {
    /// Whether the cell holds a time at all (not a mark: what NCCL ran
    /// there, or that it ran a path the tuner cannot choose).
    pub fn is_time(self) -> bool {
        !matches!(self, TimeBase::NcclRan | TimeBase::OtherPath { .. })
    }
}
