//! The tuner entry surface: `init`, `getCollInfo` and `finalize` for every
//! ABI version, and the exported `ncclTunerPlugin_v2` .. `_v7` statics.
//!
//! Contract (DESIGN.md section 6): `DYNCC_TABLE` names the table; a table
//! that is configured but cannot be loaded fails `init` (so ranks never
//! disagree silently) unless `DYNCC_STRICT=0`; no table means "leave NCCL
//! alone". `getCollInfo` always returns success, writes 0.0 only into a
//! non-negative cell inside `numAlgo x numProto`, never writes more than
//! 64 channels, and never allocates, locks, logs or panics. Every entry
//! point runs inside `crate::guard::ffi_guard` anyway.
//!
//! `DYNCC_EXPLORE=1`, at the table's share (see [`crate::explore`]), lets some communicators run
//! another setting where the table could not confirm its answer, drawn at
//! init from what every rank sees alike, so every rank makes the same
//! choice on every call; unset, `getCollInfo` runs the same code as
//! without it.
//!
//! At init the running NCCL's version is compared with the versions the
//! table was swept on (metadata `nccl_version`, see [`crate::nccl_version`]);
//! `DYNCC_NCCL_MISMATCH` says what a mismatch does.

use core::ffi::{c_int, c_void};
use std::ffi::OsString;
use std::fmt::Write as _;

use dyncc_tables::{
    size_bucket, Chunk, Coll, Decision, Machine, Proto, Setting, Specialised, NUM_PROTOS,
};

use crate::cache::{self, Handle, LoadError};
use crate::explore::{self, BadShare, Counts, Explorer, Plan, Probe, Share};
use crate::ffi::*;
use crate::guard::{ffi_guard, PLUGIN_NAME};
use crate::log::{Escaped, Logger, Msg};
use crate::nccl_version::{self, VersionCheck};
use crate::trace;

/// `getCollInfo`'s v4-v6 signature.
type GetCollInfoV4 = unsafe extern "C" fn(
    *mut c_void,
    ncclFunc_t,
    usize,
    c_int,
    *mut *mut f32,
    c_int,
    c_int,
    c_int,
    *mut c_int,
) -> ncclResult_t;

/// Which `getCollInfo` body a communicator takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
enum Path {
    /// Neither traced nor exploring: the answer only.
    Plain,
    /// Traced (`DYNCC_TRACE`): the answer, recorded for the profiler.
    Traced,
    /// Exploring (`DYNCC_EXPLORE`), traced or not.
    Exploring,
}

/// Per-communicator state: the table specialised to this communicator's
/// (nRanks, nNodes), so a decision is a shift, an index and a load.
pub struct Context {
    spec: Specialised,
    handle: Option<Handle>,
    /// This communicator's shape as NCCL 2.21 sees it, for the v2 check
    /// of what NCCL can run (its features come with each call).
    machine: Machine,
    /// With `DYNCC_TRACE` (tuner v5/v6, which know the communicator's id):
    /// this context's own ring, where each answer is recorded for the
    /// profiler to link.
    journal: Option<&'static trace::Journal>,
    /// With `DYNCC_EXPLORE`, where this communicator may explore.
    explorer: Option<Box<Explorer>>,
    /// Which `getCollInfo` body this communicator takes (one byte, so the
    /// dispatch is a load and a jump as before exploration).
    path: Path,
    /// With `DYNCC_SWEEP_CHUNK` (no table): `getChunkSize`'s answer per
    /// protocol, in bytes ([`Proto::chunk_at_most`]); 0 leaves NCCL's.
    /// Computed once at init, so the callback is an index and a store.
    sweep_chunk: [u32; NUM_PROTOS],
}

impl Context {
    /// The decisions for this communicator.
    pub fn specialised(&self) -> &Specialised {
        &self.spec
    }
}

/// What a communicator does when the running NCCL's major.minor is not one
/// the table was swept on (`DYNCC_NCCL_MISMATCH`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum MismatchPolicy {
    /// `warn` (the default): one WARN per loaded table, keep tuning.
    #[default]
    Warn,
    /// `off`: one WARN per loaded table, and leave NCCL's own tuning alone
    /// for every communicator while the versions differ.
    Off,
    /// `ignore`: keep tuning; the INFO line still shows both versions.
    Ignore,
}

/// What the environment asks for.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Config {
    /// `DYNCC_TABLE`; `None` when unset or empty.
    pub table: Option<OsString>,
    /// False only when `DYNCC_STRICT` is `0`, `false`, `no` or `off`.
    pub strict: bool,
    /// `DYNCC_NCCL_MISMATCH`: `warn` (default), `off` or `ignore`.
    pub nccl_mismatch: MismatchPolicy,
    /// A `DYNCC_NCCL_MISMATCH` value that is none of those (then `warn`
    /// applies, and init says so in a WARN rather than guess silently).
    pub bad_nccl_mismatch: Option<String>,
    /// `DYNCC_EXPLORE`, when it switches exploration on
    /// ([`explore::switched_on`]); `None` when unset, empty or off. Only a
    /// switch: the share is the table's ([`Share::of_table`]), so ranks
    /// given different values explore alike.
    pub explore: Option<String>,
    /// The job's own `NCCL_ALGO` and `NCCL_PROTO` (non-empty), which NCCL
    /// applies over the tuner: a cell they exclude reaches `getCollInfo`
    /// as IGNORE, which the plugin never touches, so a forced setting
    /// there does not run. The init line says so.
    pub nccl_env: NcclEnv,
    /// `DYNCC_SWEEP_CHUNK`, in bytes ([`Chunk::parse_bytes`]): a sweep
    /// run's chunk size, which `getChunkSize` answers for every collective
    /// when no table is set (`dyncc plan --chunks` sets it).
    pub sweep_chunk: Option<u64>,
    /// A `DYNCC_SWEEP_CHUNK` that is not a byte count (then no chunk is
    /// forced, and init says so in a WARN).
    pub bad_sweep_chunk: Option<String>,
}

/// The job's own `NCCL_ALGO` and `NCCL_PROTO`.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct NcclEnv {
    /// `NCCL_ALGO`, when set and not empty.
    pub algo: Option<String>,
    /// `NCCL_PROTO`, when set and not empty.
    pub proto: Option<String>,
}

impl Config {
    /// Reads `DYNCC_TABLE`, `DYNCC_STRICT`, `DYNCC_NCCL_MISMATCH` and
    /// `DYNCC_EXPLORE`.
    pub fn from_env() -> Config {
        Config::from_vars(|name| std::env::var_os(name))
    }

    /// [`Config::from_env`] with the variables looked up by `var` (the
    /// fuzz target and tests give them without touching the process
    /// environment).
    pub fn from_vars(var: impl Fn(&str) -> Option<OsString>) -> Config {
        let (nccl_mismatch, bad_nccl_mismatch) = match var("DYNCC_NCCL_MISMATCH") {
            None => (MismatchPolicy::Warn, None),
            Some(v) => {
                let v = v.to_string_lossy();
                match v.trim().to_ascii_lowercase().as_str() {
                    "" | "warn" => (MismatchPolicy::Warn, None),
                    "off" => (MismatchPolicy::Off, None),
                    "ignore" => (MismatchPolicy::Ignore, None),
                    _ => (MismatchPolicy::Warn, Some(v.into_owned())),
                }
            }
        };
        let table = var("DYNCC_TABLE").filter(|v| !v.is_empty());
        let strict = match var("DYNCC_STRICT") {
            None => true,
            Some(v) => {
                let v = v.to_string_lossy();
                let v = v.trim();
                !["0", "false", "no", "off"]
                    .iter()
                    .any(|f| v.eq_ignore_ascii_case(f))
            }
        };
        let explore = var("DYNCC_EXPLORE")
            .map(|v| v.to_string_lossy().into_owned())
            .filter(|v| !v.trim().is_empty() && explore::switched_on(v));
        let nccl = |name: &str| {
            var(name)
                .map(|v| v.to_string_lossy().trim().to_string())
                .filter(|v| !v.is_empty())
        };
        let (sweep_chunk, bad_sweep_chunk) = match var("DYNCC_SWEEP_CHUNK") {
            None => (None, None),
            Some(v) => {
                let v = v.to_string_lossy();
                match Chunk::parse_bytes(&v) {
                    Some(b) => (Some(b), None),
                    None if v.trim().is_empty() => (None, None),
                    None => (None, Some(v.into_owned())),
                }
            }
        };
        Config {
            table,
            strict,
            nccl_mismatch,
            bad_nccl_mismatch,
            explore,
            sweep_chunk,
            bad_sweep_chunk,
            nccl_env: NcclEnv {
                algo: nccl("NCCL_ALGO"),
                proto: nccl("NCCL_PROTO"),
            },
        }
    }
}

/// Extra facts NCCL v5/v6 pass to `init`, printed in the INFO line.
#[derive(Clone, Copy)]
struct CommFacts {
    comm_id: Option<u64>,
    nvl: Option<ncclNvlDomainInfo_v5_t>,
    /// The loaded interface has `getChunkSize` (v6, v7; the Rust API's
    /// inits, which stand for them): only then does a sweep chunk run.
    asks_chunk: bool,
}

impl Default for CommFacts {
    fn default() -> CommFacts {
        CommFacts {
            comm_id: None,
            nvl: None,
            asks_chunk: true,
        }
    }
}

/// `init` for every version, given the configuration explicitly.
///
/// # Safety
/// `ctx_out` must be NULL or valid for a pointer write.
pub unsafe fn init_with(
    cfg: &Config,
    ctx_out: *mut *mut c_void,
    n_ranks: usize,
    n_nodes: usize,
    log: ncclDebugLogger_t,
) -> ncclResult_t {
    // SAFETY: forwarded caller contract.
    unsafe {
        init_guarded(
            cfg,
            ctx_out,
            n_ranks,
            n_nodes,
            Logger(log),
            CommFacts::default(),
        )
    }
}

/// [`init_with`] as tuner v5 and later call it, with NCCL's communicator
/// id (`commHash`): the id exploration is drawn from and the profiler
/// links records by, without which nothing explores.
///
/// # Safety
/// `ctx_out` must be NULL or valid for a pointer write.
pub unsafe fn init_with_comm_id(
    cfg: &Config,
    ctx_out: *mut *mut c_void,
    comm_id: u64,
    n_ranks: usize,
    n_nodes: usize,
    log: ncclDebugLogger_t,
) -> ncclResult_t {
    let facts = CommFacts {
        comm_id: Some(comm_id),
        ..CommFacts::default()
    };
    // SAFETY: forwarded caller contract.
    unsafe { init_guarded(cfg, ctx_out, n_ranks, n_nodes, Logger(log), facts) }
}

/// Catches panics in init: a panic fails the communicator's init (an error
/// NCCL reports) rather than aborting the process.
unsafe fn init_guarded(
    cfg: &Config,
    ctx_out: *mut *mut c_void,
    n_ranks: usize,
    n_nodes: usize,
    log: Logger,
    facts: CommFacts,
) -> ncclResult_t {
    if ctx_out.is_null() {
        log.warn(format_args!(
            "dyncc: NCCL passed a NULL context pointer to init"
        ));
        return NCCL_INVALID_ARGUMENT;
    }
    // SAFETY: ctx_out is non-NULL and, per the caller, valid for writes.
    unsafe { ctx_out.write(core::ptr::null_mut()) };
    let r = ffi_guard(None, || Some(init_inner(cfg, n_ranks, n_nodes, log, facts)));
    match r {
        Some(Ok(ctx)) => {
            // SAFETY: as above.
            unsafe { ctx_out.write(ctx) };
            NCCL_SUCCESS
        }
        Some(Err(code)) => code,
        None => {
            log.warn(format_args!(
                "dyncc: internal error (panic) in init; failing init"
            ));
            NCCL_INTERNAL_ERROR
        }
    }
}

fn init_inner(
    cfg: &Config,
    n_ranks: usize,
    n_nodes: usize,
    log: Logger,
    facts: CommFacts,
) -> Result<*mut c_void, ncclResult_t> {
    if let Some(bad) = &cfg.bad_nccl_mismatch {
        log.warn(format_args!(
            "dyncc: DYNCC_NCCL_MISMATCH={} is not one of warn, off, ignore; using warn",
            Escaped(bad)
        ));
    }
    trace::say_pending(log);
    if let Some(bad) = &cfg.bad_sweep_chunk {
        log.warn(format_args!(
            "dyncc: DYNCC_SWEEP_CHUNK={} is not a chunk size in bytes (such as 65536, 64K or \
             1M, at most 2 GiB); forcing no chunk size: NCCL's own stay",
            Escaped(bad)
        ));
    }
    if let (Some(_), Some(path)) = (cfg.sweep_chunk, cfg.table.as_deref()) {
        // A sweep run measures NCCL under one chunk; a job follows a table.
        // Both at once is a mistake whichever was meant, so neither is
        // applied (every rank has the same environment, so all agree).
        let shown = path.to_string_lossy();
        log.warn(format_args!(
            "dyncc: DYNCC_SWEEP_CHUNK and DYNCC_TABLE={} are both set: a sweep run (dyncc plan \
             --chunks) sets no table and a job with a table sets no sweep chunk; forcing \
             nothing, NCCL's own tuning applies for this communicator (unset one of them)",
            Escaped(&shown)
        ));
        return Ok(core::ptr::null_mut());
    }
    let Some(path) = cfg.table.as_deref() else {
        // Traced without a table: a context that decides nothing but
        // journals every answer as NCCL's, so the profiler can say NCCL
        // chose (a job's baseline, and NCCL's own choices for drift).
        let journal = facts
            .comm_id
            .filter(|_| trace::configured().is_some())
            .and_then(trace::journal_acquire);
        let traced = if journal.is_some() {
            " (DYNCC_TRACE records NCCL's choices)"
        } else {
            ""
        };
        let sweep_chunk = cfg
            .sweep_chunk
            .filter(|_| facts.asks_chunk)
            .map(sweep_chunks);
        match sweep_chunk {
            None if cfg.sweep_chunk.is_some() => log.info(format_args!(
                "dyncc: DYNCC_SWEEP_CHUNK={} not applied: this NCCL's tuner interface (v2-v5, \
                 NCCL 2.29 and older) has no getChunkSize, so NCCL's own chunk sizes run; \
                 DYNCC_TABLE is not set; leaving NCCL's own tuning alone for this \
                 communicator{traced}; plugin {PLUGIN_VERSION}",
                cfg.sweep_chunk.unwrap_or(0)
            )),
            Some(per_proto) => {
                let mut line = Msg::new();
                let _ = describe_sweep_chunk(&mut line, cfg.sweep_chunk.unwrap_or(0), &per_proto);
                log.info(format_args!(
                    "{}; DYNCC_TABLE is not set{traced}; plugin {PLUGIN_VERSION}",
                    line.as_str()
                ));
            }
            None => log.info(format_args!(
                "dyncc: DYNCC_TABLE is not set; leaving NCCL's own tuning alone for this \
                 communicator{traced}; plugin {PLUGIN_VERSION}"
            )),
        }
        if journal.is_none() && sweep_chunk.is_none() {
            return Ok(core::ptr::null_mut());
        }
        let ctx = Box::new(Context {
            spec: Specialised::empty(),
            handle: None,
            machine: v2_machine(n_ranks as u64, n_nodes as u64),
            path: if journal.is_some() {
                Path::Traced
            } else {
                Path::Plain
            },
            journal,
            explorer: None,
            sweep_chunk: sweep_chunk.unwrap_or([0; NUM_PROTOS]),
        });
        return Ok(Box::into_raw(ctx).cast());
    };
    let shown = path.to_string_lossy();
    let shown = Escaped(&shown);
    let running = nccl_version::running(log);
    let (n_ranks, n_nodes) = (n_ranks as u64, n_nodes as u64);
    // What the table's contexts match on, built once for this communicator.
    let comm = dyncc_tables::Comm::new(n_ranks, n_nodes)
        .with_nccl_version(running.map_or(0, |v| v.code()));
    let loaded = cache::acquire(path, |table, digest, fresh| {
        if trace::configured().is_some() {
            // The trace header names the table's platform, GPU and sweep.
            trace::note_platform(
                table.meta("platform").unwrap_or(""),
                table.meta("gpu").unwrap_or(""),
                table.sweep_fingerprint(),
            );
        }
        let check = VersionCheck::new(running, table.meta("nccl_version"));
        let off = check.is_mismatch() && cfg.nccl_mismatch == MismatchPolicy::Off;
        // Off: an empty spec leaves every call to NCCL, while the context
        // still holds the table, so the WARN below comes once per load.
        let spec = if off {
            Specialised::empty()
        } else {
            table.specialise(&comm)
        };
        // Drawn once per communicator from what every rank sees alike:
        // the table, the communicator's id (v5/v6) or shape, its decisions.
        // The share is the table's (never the environment's), and a tuner
        // without NCCL's communicator id (v3/v4: NCCL 2.27 and older)
        // never explores: the profiler links a record to the tuner's answer
        // by that id, so nothing explored there could be measured. Both
        // are the same on every rank of a job.
        let share = Share::of_table(table);
        let linkable = facts.comm_id.is_some();
        let explored = cfg
            .explore
            .as_ref()
            .filter(|_| !off && linkable)
            .and_then(|_| share.ok())
            .map(|share| {
                let plan = Plan::build(table, &spec, n_ranks, n_nodes);
                let key = explore::key(digest, facts.comm_id, n_ranks, n_nodes);
                Explorer::draw(&plan, share, key)
            });
        let (counts, explorer) = match explored {
            Some((c, e)) => (Some(c), e),
            None => (None, None),
        };
        let mut line = Msg::new();
        let _ = describe(
            &mut line,
            &shown,
            table,
            digest,
            &spec,
            Comm {
                n_ranks,
                n_nodes,
                facts,
            },
            &check,
            off,
        );
        let _ = describe_explore(
            &mut line,
            cfg.explore.as_deref(),
            Asked {
                share,
                table_says: table.meta(dyncc_tables::META_EXPLORE),
                linkable,
                off,
            },
            counts,
        );
        if !off {
            let _ = describe_nccl_env(&mut line, &cfg.nccl_env);
        }
        let mut warn = None;
        if fresh && check.is_mismatch() && cfg.nccl_mismatch != MismatchPolicy::Ignore {
            let mut w = Msg::new();
            let _ = write!(
                w,
                "dyncc: table {shown} was swept on NCCL {} but this process runs NCCL {}: \
                 NCCL's defaults may have moved, so the table's choices may no longer be \
                 the fast ones; re-sweep on this NCCL and recompile. {}",
                check.swept_shown(),
                check.running_shown(),
                if off {
                    "DYNCC_NCCL_MISMATCH=off: leaving NCCL's own tuning alone while they differ"
                } else {
                    "Tuning stays on (DYNCC_NCCL_MISMATCH=off leaves NCCL alone instead, \
                     =ignore silences this)"
                }
            );
            warn = Some(w);
        }
        (spec, explorer, line, warn, digest)
    });
    match loaded {
        Ok((handle, (spec, explorer, line, warn, digest), fresh)) => {
            if let Some(w) = warn {
                log.warn(format_args!("{}", w.as_str()));
            }
            log.info(format_args!(
                "{} ({})",
                line.as_str(),
                if fresh { "loaded" } else { "shared" }
            ));
            // Tuner v5/v6 only: the profiler links by this id.
            let journal = facts
                .comm_id
                .filter(|_| trace::configured().is_some())
                .and_then(|id| {
                    trace::note_table(digest);
                    trace::journal_acquire(id)
                });
            let ctx = Box::new(Context {
                spec,
                handle: Some(handle),
                machine: v2_machine(n_ranks, n_nodes),
                path: match (&explorer, journal) {
                    (Some(_), _) => Path::Exploring,
                    (None, Some(_)) => Path::Traced,
                    (None, None) => Path::Plain,
                },
                journal,
                explorer,
                sweep_chunk: [0; NUM_PROTOS],
            });
            Ok(Box::into_raw(ctx).cast())
        }
        Err(e) => {
            let (what, code) = match &e {
                LoadError::Io(_) => ("cannot read", NCCL_SYSTEM_ERROR),
                LoadError::NotRegular { .. } | LoadError::TooLarge { .. } => {
                    ("refusing to read", NCCL_INVALID_USAGE)
                }
                LoadError::Invalid(_) => ("invalid table", NCCL_INVALID_USAGE),
            };
            let mut why = Msg::new();
            let _ = write!(why, "{e}");
            let why = Escaped(why.as_str());
            if cfg.strict {
                log.warn(format_args!(
                    "dyncc: {what} DYNCC_TABLE={shown}: {why}; failing this communicator's init \
                     (fix or unset DYNCC_TABLE, or set DYNCC_STRICT=0 to run with NCCL's own tuning)"
                ));
                Err(code)
            } else {
                log.warn(format_args!(
                    "dyncc: {what} DYNCC_TABLE={shown}: {why}; DYNCC_STRICT=0, so leaving NCCL's own \
                     tuning alone for this communicator"
                ));
                Ok(core::ptr::null_mut())
            }
        }
    }
}

/// `getChunkSize`'s answers for a sweep's chunk of `bytes`, per protocol
/// in NCCL's numbering: the largest size at most `bytes` on that
/// protocol's grain that a table can store ([`Proto::chunk_at_most`]), so
/// what NCCL runs is the chunk the log records and a compiled table can
/// force the same; 0 (NCCL's stays) where `bytes` is below the grain.
fn sweep_chunks(bytes: u64) -> [u32; NUM_PROTOS] {
    Proto::ALL.map(|p| p.chunk_at_most(bytes).bytes())
}

/// The sweep init line's head, which `dyncc compile` reads as the run's
/// chunk knob (`dyncc: sweep chunk=BYTES`, then what each protocol gets).
fn describe_sweep_chunk(
    w: &mut Msg,
    bytes: u64,
    per_proto: &[u32; NUM_PROTOS],
) -> core::fmt::Result {
    write!(
        w,
        "dyncc: sweep chunk={bytes} (DYNCC_SWEEP_CHUNK): getChunkSize (tuner v6/v7, NCCL 2.30+) \
         answers it for every collective, rounded down per protocol to a size NCCL runs as set:"
    )?;
    for (p, b) in Proto::ALL.iter().zip(per_proto) {
        if *b == 0 {
            write!(
                w,
                " {} NCCL's (below its {}-byte grain)",
                p.env_name(),
                p.chunk_grain()
            )?;
        } else {
            write!(w, " {} {b}", p.env_name())?;
        }
    }
    write!(
        w,
        "; algorithm, protocol and channels stay NCCL's (or NCCL_ALGO/NCCL_PROTO/channel \
         variables); every rank has the same environment, so every rank answers alike"
    )
}

/// The communicator an init line is about.
struct Comm {
    n_ranks: u64,
    n_nodes: u64,
    facts: CommFacts,
}

/// What a table's contexts of one collective cover, for "not covered".
struct Covers {
    nodes: (u32, u32),
    ppn: (u32, u32),
}

fn covers(table: &dyncc_tables::Table<'_>, coll: Coll) -> Option<Covers> {
    table
        .contexts()
        .map(|c| c.spec())
        .filter(|s| s.coll == coll)
        .fold(None, |acc: Option<Covers>, s| {
            Some(match acc {
                None => Covers {
                    nodes: s.nodes,
                    ppn: s.ppn,
                },
                Some(a) => Covers {
                    nodes: (a.nodes.0.min(s.nodes.0), a.nodes.1.max(s.nodes.1)),
                    ppn: (a.ppn.0.min(s.ppn.0), a.ppn.1.max(s.ppn.1)),
                },
            })
        })
}

/// A metadata value for the log: escaped, `unknown` when absent or empty.
fn meta_shown<'a>(table: &dyncc_tables::Table<'a>, key: &str) -> Escaped<'a> {
    Escaped(
        table
            .meta(key)
            .filter(|v| !v.trim().is_empty())
            .unwrap_or("unknown"),
    )
}

/// This library's version, in both init INFO lines: `dyncc --version` of the
/// same build names the same one (one workspace version), so a job's log
/// tells whether the plugin NCCL loaded is the one the command came with.
const PLUGIN_VERSION: &str = env!("CARGO_PKG_VERSION");

/// The init INFO line: table, digest, plugin version, platform, GPU, NCCL versions,
/// coverage, and per collective the context chosen for this communicator,
/// `not covered` (with what the table covers) when the table has contexts
/// for the collective but none fits this communicator, or `default` when
/// the table decides nothing for that collective.
#[allow(clippy::too_many_arguments)]
fn describe(
    w: &mut Msg,
    shown_path: &Escaped<'_>,
    table: &dyncc_tables::Table<'_>,
    digest: u64,
    spec: &Specialised,
    comm: Comm,
    check: &VersionCheck<'_>,
    off: bool,
) -> core::fmt::Result {
    let (major, minor) = table.version();
    write!(
        w,
        "dyncc: table {shown_path} digest {digest:016x} format {major}.{minor} \
         plugin {PLUGIN_VERSION} platform {} gpu {} nccl {} (table swept on {}) coverage {}",
        meta_shown(table, "platform"),
        meta_shown(table, "gpu"),
        check.running_shown(),
        check.swept_shown(),
        table.coverage(),
    )?;
    if let Some(c) = table.meta("coverage") {
        write!(w, " ({})", Escaped(c))?;
    }
    write!(w, "; comm")?;
    if let Some(id) = comm.facts.comm_id {
        write!(w, " {id:#018x}")?;
    }
    write!(w, " nRanks {} nNodes {}", comm.n_ranks, comm.n_nodes)?;
    if let Some(nvl) = comm.facts.nvl {
        write!(
            w,
            " nvlDomains {} ranksPerNvlDomain {}-{}",
            nvl.nNvlDomains, nvl.minRanksPerNvlDomain, nvl.maxRanksPerNvlDomain
        )?;
    }
    if off {
        return write!(
            w,
            ": tuning off (NCCL version differs from the sweep's, DYNCC_NCCL_MISMATCH=off); \
             NCCL's own tuning applies"
        );
    }
    write!(w, ": contexts")?;
    for coll in Coll::ALL {
        if let Some(i) = spec.context(coll) {
            write!(w, " {}=#{i}", coll.name())?;
            continue;
        }
        // Only here (a collective without a context) scan the contexts.
        match covers(table, coll) {
            Some(c) => write!(
                w,
                " {}=not-covered(table covers nodes {}-{} ppn {}-{})",
                coll.name(),
                c.nodes.0,
                c.nodes.1,
                c.ppn.0,
                c.ppn.1
            )?,
            None => write!(w, " {}=default", coll.name())?,
        }
    }
    Ok(())
}

/// What decides whether and at what share a communicator explores, for
/// the init line.
struct Asked<'t> {
    /// The table's share ([`Share::of_table`]).
    share: Result<Share, BadShare>,
    /// The table's `explore_share` as written, if any.
    table_says: Option<&'t str>,
    /// Whether NCCL passed a communicator id (tuner v5 and later).
    linkable: bool,
    /// Tuning is off (`DYNCC_NCCL_MISMATCH=off` on a mismatch).
    off: bool,
}

/// The init line's exploration part: what this communicator explores
/// (drawn from how many cells could), nothing to explore, or why it does
/// not explore; silent when `DYNCC_EXPLORE` does not switch it on.
fn describe_explore(
    w: &mut Msg,
    env: Option<&str>,
    asked: Asked<'_>,
    counts: Option<Counts>,
) -> core::fmt::Result {
    let Some(env) = env else {
        return Ok(());
    };
    let share = match asked.share {
        _ if asked.off => return write!(w, "; exploration off (tuning is off)"),
        Err(_) => {
            return write!(
                w,
                "; exploration off: the table's {}={} is not a share in [{:e}, {}] (recompile                  with `dyncc compile --explore F`)",
                dyncc_tables::META_EXPLORE,
                Escaped(asked.table_says.unwrap_or("")),
                Share::MIN,
                explore::MAX_SHARE
            )
        }
        _ if !asked.linkable => {
            return write!(
                w,
                "; exploration off: this NCCL's tuner interface (v3/v4, NCCL 2.27 and older)                  passes no communicator id, so no trace record could be linked to what was                  explored"
            )
        }
        Ok(s) => s,
    };
    // The environment's number, if any, is not the share: said so.
    let given = env.trim().parse::<f64>().ok();
    let from = match asked.table_says {
        Some(_) => "the table's",
        None => "the default, the table carries none",
    };
    if given != Some(share.fraction()) {
        write!(
            w,
            "; DYNCC_EXPLORE={} switches exploration on at {from} share {share} (only the              table's share is used, so every rank explores alike)",
            Escaped(env)
        )?;
    }
    match counts {
        Some(c) if c.candidates() > 0 => write!(
            w,
            "; exploration {share}: this communicator explores {} of {} unconfirmed cells \
             on every call there, alike on every rank (NCCL's choice at {} of {} unmeasured \
             forced, a neighbour's setting within {}x at {} of {}); drawn per cell with chance \
             min({}, {share} / cost bound), so expected extra time <= {share}",
            c.drawn(),
            c.candidates(),
            c.nccl.1,
            c.nccl.0,
            explore::NEIGHBOUR_FACTOR,
            c.neighbour.1,
            c.neighbour.0,
            explore::MAX_CHANCE,
        ),
        _ => write!(
            w,
            "; exploration {share}: nothing to explore (every decision for this communicator \
             is measured, or no neighbouring context within {}x its node count)",
            explore::NEIGHBOUR_FACTOR
        ),
    }
}

/// The init line's note on the job's own `NCCL_ALGO` / `NCCL_PROTO`:
/// NCCL applies them over the tuner, so the table's forced settings they
/// exclude do not run (the plugin leaves IGNORE cells alone and traces
/// record what ran). Silent when neither is set. A value is shown escaped
/// and cut to [`SHOWN_ENV_LEN`] bytes (the line has NCCL's 1024 bytes).
fn describe_nccl_env(w: &mut Msg, env: &NcclEnv) -> core::fmt::Result {
    if env.algo.is_none() && env.proto.is_none() {
        return Ok(());
    }
    write!(w, ";")?;
    for (name, v) in [("NCCL_ALGO", &env.algo), ("NCCL_PROTO", &env.proto)] {
        if let Some(v) = v {
            let mut n = v.len().min(SHOWN_ENV_LEN);
            while !v.is_char_boundary(n) {
                n -= 1;
            }
            let more = if n < v.len() { "..." } else { "" };
            write!(w, " {name}={}{more}", Escaped(&v[..n]))?;
        }
    }
    write!(
        w,
        " set by the job: NCCL runs only what it allows, overriding the table's forced \
         settings outside it"
    )
}

/// Bytes of an `NCCL_ALGO` / `NCCL_PROTO` value the init line shows.
const SHOWN_ENV_LEN: usize = 64;

/// The hot path for the cost-table versions (v3-v6).
///
/// # Safety
/// `ctx` is NULL or a context from `init`; `table` is NULL or points to
/// `numAlgo * numProto` floats; `n_channels` is NULL or writable.
#[inline]
#[allow(clippy::too_many_arguments)]
pub unsafe fn get_coll_info_table(
    ctx: *mut c_void,
    coll_type: c_int,
    n_bytes: usize,
    num_pipe_ops: c_int,
    table: *mut f32,
    num_algo: c_int,
    num_proto: c_int,
    reg_buff: c_int,
    n_channels: *mut c_int,
) {
    // SAFETY: forwarded caller contract.
    unsafe {
        answer(
            ctx,
            coll_type,
            n_bytes,
            num_pipe_ops,
            table,
            num_algo,
            num_proto,
            reg_buff,
            n_channels,
        )
    };
}

/// [`get_coll_info_table`]'s body: the decision, and whether it was
/// applied (a forced cell written).
///
/// # Safety
/// As [`get_coll_info_table`].
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn answer(
    ctx: *mut c_void,
    coll_type: c_int,
    n_bytes: usize,
    num_pipe_ops: c_int,
    table: *mut f32,
    num_algo: c_int,
    num_proto: c_int,
    reg_buff: c_int,
    n_channels: *mut c_int,
) -> (Decision, bool) {
    if ctx.is_null() || table.is_null() {
        return (Decision::Default, false);
    }
    // SAFETY: a non-NULL ctx is a live Context created by init (NCCL
    // passes back what init stored and finalizes it only after its last
    // getCollInfo).
    let ctx = unsafe { &*ctx.cast::<Context>() };
    let d = ctx
        .spec
        .decide(coll_type as u32, n_bytes as u64, num_pipe_ops, reg_buff);
    // SAFETY: forwarded caller contract.
    let applied = unsafe { apply(d, table, num_algo, num_proto, n_channels) };
    (d, applied)
}

/// Writes decision `d` into NCCL's cost table and channel count; whether a
/// forced cell was written.
///
/// A force is a cost of 0.0, and from NCCL 2.31 that also displaces the
/// paths no tuner can choose: `ncclTuningCompute` (NVIDIA/nccl
/// `src/tuning/tuning.cc`, v2.31.2-1 @ 8898068) hands the tuner a table
/// of the classic (algorithm, protocol) candidates only, copies the
/// tuner's values back into those candidates' times, and then
/// `ncclTuningSelectBestTuning` keeps the candidate of least time among
/// all of them, symmetric kernels and copy-engine methods included (whose
/// times the tuner never saw). A classic pair at 0.0 is below any
/// modelled time, so where NCCL would have run a symmetric kernel or a CE
/// method, a forced cell runs the classic pair instead (the symmetric
/// fallback that follows only applies when a symmetric kernel won). The
/// compiler must therefore leave such shapes to NCCL unless a classic pair
/// was measured beating what NCCL ran there.
///
/// # Safety
/// `table` points to `numAlgo * numProto` floats; `n_channels` is NULL or
/// writable.
#[inline(always)]
unsafe fn apply(
    d: Decision,
    table: *mut f32,
    num_algo: c_int,
    num_proto: c_int,
    n_channels: *mut c_int,
) -> bool {
    let mut applied = false;
    if let Decision::Force(Setting {
        algo,
        proto,
        channels,
        ..
    }) = d
    {
        let (a, p) = (algo as usize, proto as usize);
        // Negative dimensions become huge and fail the bounds test.
        let (na, np) = (num_algo as usize, num_proto as usize);
        if a < na && p < np && num_algo > 0 && num_proto > 0 {
            // SAFETY: a < numAlgo and p < numProto, so the index is inside
            // NCCL's contiguous float[numAlgo][numProto] (ABI 3.5).
            let cell = unsafe { table.add(a * np + p) };
            // SAFETY: `cell` is in bounds (above).
            let cost = unsafe { cell.read_unaligned() };
            // -1.0 (and anything negative or NaN) marks a combination NCCL
            // cannot or must not run: never touch it.
            if cost >= 0.0 {
                // SAFETY: in bounds (above).
                unsafe { cell.write_unaligned(0.0) };
                applied = true;
                if channels != 0 && !n_channels.is_null() {
                    // At most 64 (NCCL's MAXCHANNELS): every decision comes
                    // from a table `from_bytes` validated, which rejects
                    // more. (A clamp here cost 5 instructions per call.)
                    // SAFETY: non-NULL, per the caller writable.
                    unsafe { n_channels.write_unaligned(channels as c_int) };
                }
            }
        }
    }
    applied
}

unsafe extern "C" fn init_v2(
    n_ranks: usize,
    n_nodes: usize,
    log: ncclDebugLogger_t,
    ctx: *mut *mut c_void,
) -> ncclResult_t {
    let cfg = Config::from_env();
    // v2-v4 have no getChunkSize: a sweep chunk would not run.
    let facts = CommFacts {
        asks_chunk: false,
        ..CommFacts::default()
    };
    // SAFETY: NCCL passes a writable context pointer (NULL is checked).
    unsafe { init_guarded(&cfg, ctx, n_ranks, n_nodes, Logger(log), facts) }
}

/// v5 `init` (NCCL 2.28, 2.29: no `getChunkSize`).
unsafe extern "C" fn init_v5(
    ctx: *mut *mut c_void,
    comm_id: u64,
    n_ranks: usize,
    n_nodes: usize,
    log: ncclDebugLogger_t,
    nvl: *mut ncclNvlDomainInfo_v5_t,
    _constants: *mut ncclTunerConstants_v5_t,
) -> ncclResult_t {
    // SAFETY: forwarded NCCL arguments.
    unsafe { init_v5_facts(ctx, comm_id, n_ranks, n_nodes, log, nvl, false) }
}

/// v6 `init` (NCCL 2.30 - 2.32.3): v5's, on an interface with
/// `getChunkSize`.
unsafe extern "C" fn init_v6(
    ctx: *mut *mut c_void,
    comm_id: u64,
    n_ranks: usize,
    n_nodes: usize,
    log: ncclDebugLogger_t,
    nvl: *mut ncclNvlDomainInfo_v5_t,
    _constants: *mut ncclTunerConstants_v5_t,
) -> ncclResult_t {
    // SAFETY: forwarded NCCL arguments.
    unsafe { init_v5_facts(ctx, comm_id, n_ranks, n_nodes, log, nvl, true) }
}

/// `init` v5-v7 with whether the interface asks `getChunkSize`.
///
/// # Safety
/// As NCCL's `init`: `ctx` NULL or writable, `nvl` NULL or valid.
unsafe fn init_v5_facts(
    ctx: *mut *mut c_void,
    comm_id: u64,
    n_ranks: usize,
    n_nodes: usize,
    log: ncclDebugLogger_t,
    nvl: *mut ncclNvlDomainInfo_v5_t,
    asks_chunk: bool,
) -> ncclResult_t {
    // SAFETY: NCCL passes NULL or a valid ncclNvlDomainInfo_v5_t.
    let nvl = unsafe { nvl.as_ref() }.copied();
    let facts = CommFacts {
        comm_id: Some(comm_id),
        nvl,
        asks_chunk,
    };
    let cfg = Config::from_env();
    // SAFETY: NCCL passes a writable context pointer (NULL is checked).
    unsafe { init_guarded(&cfg, ctx, n_ranks, n_nodes, Logger(log), facts) }
}

/// v7 `init` (NCCL 2.32.6+): v5's, whose constants dyncc never reads
/// (only their row count changed).
unsafe extern "C" fn init_v7(
    ctx: *mut *mut c_void,
    comm_id: u64,
    n_ranks: usize,
    n_nodes: usize,
    log: ncclDebugLogger_t,
    nvl: *mut ncclNvlDomainInfo_v7_t,
    _constants: *mut ncclTunerConstants_v7_t,
) -> ncclResult_t {
    // SAFETY: forwarded NCCL arguments; the constants are not read.
    unsafe { init_v5_facts(ctx, comm_id, n_ranks, n_nodes, log, nvl, true) }
}

/// The communicator as NCCL 2.21 (the v2 ABI) has it: no PAT (2.21 has
/// six algorithms), and NVSwitch and LL128 taken as there, since v2 is
/// not told (a forced LL128 runs regardless of NCCL's platform check).
fn v2_machine(n_ranks: u64, n_nodes: u64) -> Machine {
    let nodes = u32::try_from(n_nodes).unwrap_or(u32::MAX);
    let ranks_per_node =
        u32::try_from(n_ranks.checked_div(n_nodes).unwrap_or(n_ranks)).unwrap_or(u32::MAX);
    Machine {
        pat: false,
        ..Machine::new(nodes, ranks_per_node)
    }
}

/// `getCollInfo` of NCCL 2.21 (v2): algorithm/protocol out-parameters.
unsafe extern "C" fn get_coll_info_v2(
    ctx: *mut c_void,
    coll_type: ncclFunc_t,
    n_bytes: usize,
    coll_net_support: c_int,
    nvls_support: c_int,
    num_pipe_ops: c_int,
    algorithm: *mut c_int,
    protocol: *mut c_int,
    n_channels: *mut c_int,
) -> ncclResult_t {
    ffi_guard((), || {
        if ctx.is_null() || algorithm.is_null() || protocol.is_null() {
            return;
        }
        // SAFETY: a non-NULL ctx is a live Context created by init.
        let ctx = unsafe { &*ctx.cast::<Context>() };
        let d = ctx
            .spec
            .decide(coll_type as u32, n_bytes as u64, num_pipe_ops, 0);
        let Decision::Force(Setting {
            algo,
            proto,
            channels,
            ..
        }) = d
        else {
            return;
        };
        // NCCL 2.21 (the only release that loads v2 natively) does not
        // check the plugin's answer, and v2 sees no cost table: only answer
        // what NCCL can run for this collective on this communicator.
        let Some(coll) = Coll::from_nccl(coll_type as u32) else {
            return;
        };
        let machine = Machine {
            nvls: nvls_support != 0,
            collnet: coll_net_support != 0,
            ..ctx.machine
        };
        if !machine.runs(coll, algo, proto) {
            return;
        }
        // SAFETY: non-NULL out-pointers from NCCL.
        unsafe {
            algorithm.write_unaligned(algo as c_int);
            protocol.write_unaligned(proto as c_int);
            if channels != 0 && !n_channels.is_null() {
                // <= 64: validated with the table (see get_coll_info_table).
                n_channels.write_unaligned(channels as c_int);
            }
        }
    });
    NCCL_SUCCESS
}

/// `getCollInfo` of v3 (no `regBuff`: treated as 0).
#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn get_coll_info_v3(
    ctx: *mut c_void,
    coll_type: ncclFunc_t,
    n_bytes: usize,
    num_pipe_ops: c_int,
    cost_table: *mut *mut f32,
    num_algo: c_int,
    num_proto: c_int,
    n_channels: *mut c_int,
) -> ncclResult_t {
    // SAFETY: forwarded NCCL arguments (v4's, with regBuff 0).
    unsafe {
        get_coll_info_v4(
            ctx,
            coll_type,
            n_bytes,
            num_pipe_ops,
            cost_table,
            num_algo,
            num_proto,
            0,
            n_channels,
        )
    }
}

/// `getCollInfo` of v4, v5 and v6 (and v3's): only a dispatch, so each
/// call is a jump with NCCL's arguments in place (no unwinding frame here
/// keeps them tail calls): a communicator neither traced nor exploring
/// pays a byte load and a jump through a three-entry table (as many
/// instructions as the one-branch dispatch before exploration), then runs
/// exactly the code it ran before tracing and exploration existed.
#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn get_coll_info_v4(
    ctx: *mut c_void,
    coll_type: ncclFunc_t,
    n_bytes: usize,
    num_pipe_ops: c_int,
    cost_table: *mut *mut f32,
    num_algo: c_int,
    num_proto: c_int,
    reg_buff: c_int,
    n_channels: *mut c_int,
) -> ncclResult_t {
    let path = if ctx.is_null() {
        Path::Plain
    } else {
        // SAFETY: a non-NULL ctx is a live Context created by init.
        unsafe { &*ctx.cast::<Context>() }.path
    };
    // Chosen as a pointer, then called: LLVM makes that one jump (the
    // if/else form made it spill and re-push the stack arguments).
    let f = match path {
        Path::Plain => get_coll_info_plain as GetCollInfoV4,
        Path::Traced => get_coll_info_traced,
        Path::Exploring => get_coll_info_exploring,
    };
    // SAFETY: forwarded NCCL arguments.
    unsafe {
        f(
            ctx,
            coll_type,
            n_bytes,
            num_pipe_ops,
            cost_table,
            num_algo,
            num_proto,
            reg_buff,
            n_channels,
        )
    }
}

/// `getCollInfo` v3-v6 neither traced nor exploring.
#[inline(never)]
#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn get_coll_info_plain(
    ctx: *mut c_void,
    coll_type: ncclFunc_t,
    n_bytes: usize,
    num_pipe_ops: c_int,
    cost_table: *mut *mut f32,
    num_algo: c_int,
    num_proto: c_int,
    reg_buff: c_int,
    n_channels: *mut c_int,
) -> ncclResult_t {
    ffi_guard((), || {
        // SAFETY: NCCL's contract (see get_coll_info_table); the float**
        // is really the address of the contiguous table.
        unsafe {
            get_coll_info_table(
                ctx,
                coll_type,
                n_bytes,
                num_pipe_ops,
                cost_table.cast(),
                num_algo,
                num_proto,
                reg_buff,
                n_channels,
            )
        }
    });
    NCCL_SUCCESS
}

/// `getCollInfo` v3-v6 on a traced communicator (`DYNCC_TRACE`, tuner
/// v5/v6) that does not explore: the same answer, then recorded for the
/// profiler.
#[inline(never)]
#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn get_coll_info_traced(
    ctx: *mut c_void,
    coll_type: ncclFunc_t,
    n_bytes: usize,
    num_pipe_ops: c_int,
    cost_table: *mut *mut f32,
    num_algo: c_int,
    num_proto: c_int,
    reg_buff: c_int,
    n_channels: *mut c_int,
) -> ncclResult_t {
    ffi_guard((), || {
        // SAFETY: NCCL's contract (see get_coll_info_table).
        let (d, applied) = unsafe {
            answer(
                ctx,
                coll_type,
                n_bytes,
                num_pipe_ops,
                cost_table.cast(),
                num_algo,
                num_proto,
                reg_buff,
                n_channels,
            )
        };
        if ctx.is_null() {
            return;
        }
        // SAFETY: a non-NULL ctx is a live Context created by init.
        if let Some(j) = unsafe { &*ctx.cast::<Context>() }.journal {
            j.record(coll_type, n_bytes, num_pipe_ops > 1, d, applied);
        }
    });
    NCCL_SUCCESS
}

/// `getCollInfo` v3-v6 on an exploring communicator (`DYNCC_EXPLORE`),
/// traced or not: the table's answer, or at a cell this communicator drew
/// the explored one, then recorded for the profiler when traced.
#[inline(never)]
#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn get_coll_info_exploring(
    ctx: *mut c_void,
    coll_type: ncclFunc_t,
    n_bytes: usize,
    num_pipe_ops: c_int,
    cost_table: *mut *mut f32,
    num_algo: c_int,
    num_proto: c_int,
    reg_buff: c_int,
    n_channels: *mut c_int,
) -> ncclResult_t {
    ffi_guard((), || {
        let table: *mut f32 = cost_table.cast();
        if ctx.is_null() || table.is_null() {
            return;
        }
        // SAFETY: a non-NULL ctx is a live Context created by init.
        let ctx = unsafe { &*ctx.cast::<Context>() };
        let bucket = size_bucket(n_bytes as u64);
        let d = ctx
            .spec
            .decide_bucket(coll_type as u32, bucket, num_pipe_ops, reg_buff);
        let probe = match &ctx.explorer {
            Some(e) => e.probe(coll_type as u32, bucket, num_pipe_ops, d),
            None => Probe::None,
        };
        let (chosen, explored) = match probe {
            Probe::None => (d, false),
            // NCCL's own choice: leave its cost table alone.
            Probe::Nccl => (Decision::Default, true),
            Probe::Setting(s) => (s, true),
        };
        // SAFETY: NCCL's contract (see get_coll_info_table).
        let applied = unsafe { apply(chosen, table, num_algo, num_proto, n_channels) };
        if let Some(j) = ctx.journal {
            journal_exploring(
                j,
                coll_type,
                n_bytes,
                num_pipe_ops,
                (d, chosen, explored, applied),
            );
        }
    });
    NCCL_SUCCESS
}

/// An exploring call's answer, recorded for the profiler (traced only).
/// Out of line, so an exploring communicator that is not traced does not
/// pay for the journal's code in registers (6 instructions per call when
/// inlined).
#[inline(never)]
fn journal_exploring(
    j: &trace::Journal,
    coll_type: c_int,
    n_bytes: usize,
    num_pipe_ops: c_int,
    (d, chosen, explored, applied): (Decision, Decision, bool, bool),
) {
    if explored {
        j.record_explore(coll_type, n_bytes, num_pipe_ops > 1, chosen, applied);
    } else {
        j.record(coll_type, n_bytes, num_pipe_ops > 1, d, applied);
    }
}

/// `getChunkSize` (v6, v7): NCCL asks, once per scheduled task after its
/// own chunking (`calcCollChunking`), with the chunk it computed in
/// `*chunkSize`. The answer is the table's chunk where its cell for this
/// call forces this algorithm and protocol with one
/// ([`Specialised::chunk`]); on an exploring communicator, the chunk of
/// what it answered at that cell ([`Explorer::chunk`]: NCCL's where it
/// drew NCCL's choice, a candidate's own where it drew one); or a
/// sweep's (`DYNCC_SWEEP_CHUNK`, no table) for every call; everywhere
/// else NCCL's stays. NCCL clamps
/// the answer to its buffer's ceiling and rounds it down to the
/// protocol's grain; a table's chunk is on the grain already. Never
/// allocates; always `ncclSuccess` (NCCL fails the collective on an error).
unsafe extern "C" fn get_chunk_size(
    ctx: *mut c_void,
    coll_type: ncclFunc_t,
    n_bytes: usize,
    algo: c_int,
    proto: c_int,
    _n_channels: c_int,
    chunk_size: *mut usize,
) -> ncclResult_t {
    if ctx.is_null() || chunk_size.is_null() {
        return NCCL_SUCCESS;
    }
    // SAFETY: a non-NULL ctx came from Box::into_raw in init and stays
    // live until finalize; NCCL never calls after finalize.
    let ctx = unsafe { &*ctx.cast::<Context>() };
    if let Some(e) = &ctx.explorer {
        // SAFETY: chunk_size checked non-NULL above.
        return unsafe {
            exploring_chunk_size(ctx, e, coll_type, n_bytes, algo, proto, chunk_size)
        };
    }
    ffi_guard((), || {
        let answer = match ctx
            .spec
            .chunk(coll_type as u32, n_bytes as u64, algo, proto)
        {
            Some(bytes) => bytes,
            // A sweep's chunk (no table: the spec is empty); a negative
            // protocol becomes huge and finds nothing.
            None => ctx.sweep_chunk.get(proto as usize).copied().unwrap_or(0),
        };
        if answer > 0 {
            // SAFETY: checked non-NULL above; NCCL passes its own size_t.
            unsafe { *chunk_size = answer as usize };
        }
    });
    NCCL_SUCCESS
}

/// [`get_chunk_size`] on an exploring communicator: the chunk of what it
/// answered at the call's cell ([`Explorer::chunk`]). Out of line, so the
/// plain path pays one test for it (inlined: 16 instructions a call).
///
/// # Safety
/// `chunk_size` is non-NULL and NCCL's own `size_t`.
#[cold]
#[inline(never)]
unsafe fn exploring_chunk_size(
    ctx: &Context,
    e: &Explorer,
    coll_type: ncclFunc_t,
    n_bytes: usize,
    algo: c_int,
    proto: c_int,
    chunk_size: *mut usize,
) -> ncclResult_t {
    ffi_guard((), || {
        if let Some(bytes) = e.chunk(&ctx.spec, coll_type as u32, n_bytes as u64, algo, proto) {
            // SAFETY: the caller's contract.
            unsafe { *chunk_size = bytes as usize };
        }
    });
    NCCL_SUCCESS
}

/// `destroy` (v2-v4) and `finalize` (v5, v6).
unsafe extern "C" fn finalize(ctx: *mut c_void) -> ncclResult_t {
    if ctx.is_null() {
        return NCCL_SUCCESS;
    }
    ffi_guard((), || {
        // SAFETY: a non-NULL ctx came from Box::into_raw in init and NCCL
        // finalizes it exactly once.
        let ctx = unsafe { Box::from_raw(ctx.cast::<Context>()) };
        if let Some(j) = ctx.journal {
            trace::journal_release(j);
        }
        if let Some(h) = ctx.handle {
            cache::release(h);
        }
    });
    NCCL_SUCCESS
}

/// NCCL 2.21.
#[unsafe(no_mangle)]
pub static ncclTunerPlugin_v2: ncclTuner_v2_t = ncclTuner_v2_t {
    name: PLUGIN_NAME.as_ptr(),
    init: Some(init_v2),
    getCollInfo: Some(get_coll_info_v2),
    destroy: Some(finalize),
};

/// NCCL 2.22, 2.23.
#[unsafe(no_mangle)]
pub static ncclTunerPlugin_v3: ncclTuner_v3_t = ncclTuner_v3_t {
    name: PLUGIN_NAME.as_ptr(),
    init: Some(init_v2),
    getCollInfo: Some(get_coll_info_v3),
    destroy: Some(finalize),
};

/// NCCL 2.24 - 2.27.
#[unsafe(no_mangle)]
pub static ncclTunerPlugin_v4: ncclTuner_v4_t = ncclTuner_v4_t {
    name: PLUGIN_NAME.as_ptr(),
    init: Some(init_v2),
    getCollInfo: Some(get_coll_info_v4),
    destroy: Some(finalize),
};

/// NCCL 2.28, 2.29.
#[unsafe(no_mangle)]
pub static ncclTunerPlugin_v5: ncclTuner_v5_t = ncclTuner_v5_t {
    name: PLUGIN_NAME.as_ptr(),
    init: Some(init_v5),
    getCollInfo: Some(get_coll_info_v4),
    finalize: Some(finalize),
};

/// NCCL 2.30 - 2.32.3.
#[unsafe(no_mangle)]
pub static ncclTunerPlugin_v6: ncclTuner_v6_t = ncclTuner_v6_t {
    name: PLUGIN_NAME.as_ptr(),
    init: Some(init_v6),
    getCollInfo: Some(get_coll_info_v4),
    finalize: Some(finalize),
    getChunkSize: Some(get_chunk_size),
};

/// NCCL 2.32.6+ (its loader tries v7 first).
#[unsafe(no_mangle)]
pub static ncclTunerPlugin_v7: ncclTuner_v7_t = ncclTuner_v7_t {
    name: PLUGIN_NAME.as_ptr(),
    init: Some(init_v7),
    getCollInfo: Some(get_coll_info_v4),
    finalize: Some(finalize),
    getChunkSize: Some(get_chunk_size),
};

#[cfg(test)]
mod tests {
    use super::*;

    fn sweep_cfg(chunk: &str, table: Option<&str>) -> Config {
        Config::from_vars(|k| match k {
            "DYNCC_SWEEP_CHUNK" => Some(chunk.into()),
            "DYNCC_TABLE" => table.map(Into::into),
            _ => None,
        })
    }

    /// `getChunkSize` through a context from init: what it writes over
    /// NCCL's `own` for (algo, proto).
    fn ask(ctx: *mut c_void, algo: c_int, proto: c_int, own: usize) -> usize {
        let mut chunk = own;
        // SAFETY: ctx is NULL or from init; `chunk` is writable.
        let r = unsafe { get_chunk_size(ctx, 4, 1 << 20, algo, proto, 8, &mut chunk) };
        assert_eq!(r, NCCL_SUCCESS);
        chunk
    }

    /// DYNCC_SWEEP_CHUNK is read as bytes with or without a unit; what is
    /// not a byte count is kept to be said, and empty is unset.
    #[test]
    fn the_sweep_chunk_is_read_and_a_bad_one_is_kept_to_say() {
        assert_eq!(sweep_cfg("64K", None).sweep_chunk, Some(65536));
        assert_eq!(sweep_cfg("300000", None).sweep_chunk, Some(300_000));
        let bad = sweep_cfg("64 KiB", None);
        assert_eq!(
            (bad.sweep_chunk, bad.bad_sweep_chunk.as_deref()),
            (None, Some("64 KiB"))
        );
        let empty = sweep_cfg(" ", None);
        assert_eq!((empty.sweep_chunk, empty.bad_sweep_chunk), (None, None));
        // Per protocol: on its grain, storable in a table, 0 below the grain.
        assert_eq!(sweep_chunks(65536), [65536, 61440, 65536]);
        assert_eq!(sweep_chunks(1024), [1024, 0, 1024]);
    }

    /// A sweep chunk with no table: every collective's getChunkSize gets
    /// it (per protocol), getCollInfo leaves NCCL's costs and channels
    /// alone; with a table too, or malformed, nothing is forced.
    #[test]
    fn a_sweep_chunk_answers_every_call_and_forces_nothing_else() {
        let mut ctx = core::ptr::null_mut();
        // SAFETY: writable context pointer.
        let rc = unsafe { init_with(&sweep_cfg("64K", None), &mut ctx, 16, 2, None) };
        assert_eq!(rc, 0);
        assert!(!ctx.is_null());
        assert_eq!(ask(ctx, 1, 2, 131072), 65536, "Ring/Simple");
        assert_eq!(ask(ctx, 0, 1, 131072), 61440, "Tree/LL128: on its grain");
        assert_eq!(ask(ctx, 6, 0, 4096), 65536, "PAT/LL, above NCCL's own");
        assert_eq!(ask(ctx, 1, 3, 777), 777, "no such protocol: NCCL's stays");
        assert_eq!(ask(ctx, 1, -1, 777), 777);
        let mut costs = [1.0f32; 21];
        let mut ch: c_int = 0;
        let mut p = costs.as_mut_ptr();
        // SAFETY: a 7 x 3 table, a writable channel count.
        unsafe {
            get_coll_info_v4(ctx, 4, 1 << 20, 1, &mut p, 7, 3, 0, &mut ch);
        }
        assert_eq!(
            (costs, ch),
            ([1.0f32; 21], 0),
            "algorithm, protocol, channels: NCCL's"
        );
        // SAFETY: ctx from init, finalized once.
        unsafe { finalize(ctx) };
        for cfg in [
            sweep_cfg("64K", Some("/no/such.tbl")),
            sweep_cfg("lots", None),
        ] {
            let mut ctx = core::ptr::null_mut();
            // SAFETY: writable context pointer.
            let rc = unsafe { init_with(&cfg, &mut ctx, 16, 2, None) };
            assert_eq!(rc, 0, "{cfg:?}");
            assert!(ctx.is_null(), "nothing forced: {cfg:?}");
            assert_eq!(ask(ctx, 1, 2, 131072), 131072);
        }
    }

    /// The init line's head is what `dyncc compile` reads as the chunk.
    #[test]
    fn the_sweep_init_line_says_the_chunk() {
        let mut w = Msg::new();
        describe_sweep_chunk(&mut w, 1024, &sweep_chunks(1024)).unwrap();
        let line = w.as_str();
        assert!(
            line.starts_with("dyncc: sweep chunk=1024 (DYNCC_SWEEP_CHUNK)"),
            "{line}"
        );
        assert!(
            line.contains("LL 1024 LL128 NCCL's (below its 1920-byte grain) Simple 1024"),
            "{line}"
        );
    }

    /// The job's own NCCL_ALGO / NCCL_PROTO are read, shown escaped and
    /// cut, and nothing is said without them.
    #[test]
    fn the_jobs_nccl_algo_and_proto_are_said_in_the_init_line() {
        let cfg = Config::from_vars(|k| match k {
            "NCCL_ALGO" => Some(" ^ring\n".into()),
            "NCCL_PROTO" => Some("".into()),
            _ => None,
        });
        assert_eq!(
            cfg.nccl_env,
            NcclEnv {
                algo: Some("^ring".into()),
                proto: None
            }
        );
        let mut w = Msg::new();
        describe_nccl_env(&mut w, &cfg.nccl_env).unwrap();
        assert_eq!(
            w.as_str(),
            "; NCCL_ALGO=^ring set by the job: NCCL runs only what it allows, overriding the \
             table's forced settings outside it"
        );
        let mut w = Msg::new();
        describe_nccl_env(&mut w, &NcclEnv::default()).unwrap();
        assert_eq!(w.as_str(), "");
        let long = NcclEnv {
            algo: None,
            proto: Some("é".repeat(40)),
        };
        let mut w = Msg::new();
        describe_nccl_env(&mut w, &long).unwrap();
        assert!(w
            .as_str()
            .starts_with(&format!("; NCCL_PROTO={}...", "é".repeat(32))));
    }
}
