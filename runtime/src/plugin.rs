//! The NCCL tuner plugin: `init`, `getCollInfo` and `finalize` for every ABI
//! version, and the exported `ncclTunerPlugin_v2` .. `_v6` statics.
//!
//! Contract (DESIGN.md section 6): `DYNCC_TABLE` names the table; a table
//! that is configured but cannot be loaded fails `init` (so ranks never
//! disagree silently) unless `DYNCC_STRICT=0`; no table means "leave NCCL
//! alone". `getCollInfo` always returns success, writes 0.0 only into a
//! non-negative cell inside `numAlgo x numProto`, and never allocates,
//! locks, logs or panics. Every entry point catches panics anyway.

use core::ffi::{c_int, c_void};
use std::ffi::{OsStr, OsString};
use std::fmt::Write as _;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

use dyncc_tables::{Algo, Coll, Decision, Specialised};

use crate::cache::{self, Handle, LoadError};
use crate::ffi::*;
use crate::log::{Logger, Msg};

/// The name NCCL prints ("TUNER/Plugin: Using dyncc (v6)").
pub const PLUGIN_NAME: &core::ffi::CStr = c"dyncc";

/// Per-communicator state: the table specialised to this communicator's
/// (nRanks, nNodes), so a decision is a shift, an index and a load.
pub struct Context {
    spec: Specialised,
    handle: Option<Handle>,
}

impl Context {
    /// The decisions for this communicator.
    pub fn specialised(&self) -> &Specialised {
        &self.spec
    }
}

/// What the environment asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// `DYNCC_TABLE`; `None` when unset or empty.
    pub table: Option<OsString>,
    /// False only when `DYNCC_STRICT` is `0`, `false`, `no` or `off`.
    pub strict: bool,
}

impl Config {
    /// Reads `DYNCC_TABLE` and `DYNCC_STRICT`.
    pub fn from_env() -> Config {
        let table = std::env::var_os("DYNCC_TABLE").filter(|v| !v.is_empty());
        let strict = match std::env::var_os("DYNCC_STRICT") {
            None => true,
            Some(v) => {
                let v = v.to_string_lossy();
                let v = v.trim();
                !["0", "false", "no", "off"]
                    .iter()
                    .any(|f| v.eq_ignore_ascii_case(f))
            }
        };
        Config { table, strict }
    }
}

/// Extra facts NCCL v5/v6 pass to `init`, printed in the INFO line.
#[derive(Clone, Copy, Default)]
struct CommFacts {
    comm_id: Option<u64>,
    nvl: Option<ncclNvlDomainInfo_v5_t>,
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
    let r = catch_unwind(AssertUnwindSafe(|| {
        init_inner(cfg, n_ranks, n_nodes, log, facts)
    }));
    match r {
        Ok(Ok(ctx)) => {
            // SAFETY: as above.
            unsafe { ctx_out.write(ctx) };
            NCCL_SUCCESS
        }
        Ok(Err(code)) => code,
        Err(_) => {
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
    let Some(path) = cfg.table.as_deref() else {
        log.info(format_args!(
            "dyncc: DYNCC_TABLE is not set; leaving NCCL's own tuning alone for this communicator"
        ));
        return Ok(core::ptr::null_mut());
    };
    let (n_ranks, n_nodes) = (n_ranks as u64, n_nodes as u64);
    let loaded = cache::acquire(path, |table, digest| {
        let spec = table.specialise(n_ranks, n_nodes);
        let mut line = Msg::new();
        let _ = describe(
            &mut line, path, table, digest, &spec, n_ranks, n_nodes, facts,
        );
        (spec, line)
    });
    match loaded {
        Ok((handle, (spec, line), fresh)) => {
            log.info(format_args!(
                "{} ({})",
                line.as_str(),
                if fresh { "loaded" } else { "shared" }
            ));
            let ctx = Box::new(Context {
                spec,
                handle: Some(handle),
            });
            Ok(Box::into_raw(ctx).cast())
        }
        Err(e) => {
            let (what, code) = match &e {
                LoadError::Io(_) => ("cannot read", NCCL_SYSTEM_ERROR),
                LoadError::Invalid(_) => ("invalid table", NCCL_INVALID_USAGE),
            };
            let mut why = Msg::new();
            let _ = match &e {
                LoadError::Io(err) => write!(why, "{err}"),
                LoadError::Invalid(err) => write!(why, "{err}"),
            };
            let shown = Path::new(path).display();
            if cfg.strict {
                log.warn(format_args!(
                    "dyncc: {what} DYNCC_TABLE={shown}: {}; failing this communicator's init \
                     (fix or unset DYNCC_TABLE, or set DYNCC_STRICT=0 to run with NCCL's own tuning)",
                    why.as_str()
                ));
                Err(code)
            } else {
                log.warn(format_args!(
                    "dyncc: {what} DYNCC_TABLE={shown}: {}; DYNCC_STRICT=0, so leaving NCCL's own \
                     tuning alone for this communicator",
                    why.as_str()
                ));
                Ok(core::ptr::null_mut())
            }
        }
    }
}

/// The init INFO line: table, digest, platform, coverage, and the context
/// chosen per collective for this communicator.
#[allow(clippy::too_many_arguments)]
fn describe(
    w: &mut Msg,
    path: &OsStr,
    table: &dyncc_tables::Table<'_>,
    digest: u64,
    spec: &Specialised,
    n_ranks: u64,
    n_nodes: u64,
    facts: CommFacts,
) -> core::fmt::Result {
    let (major, minor) = table.version();
    write!(
        w,
        "dyncc: table {} digest {digest:016x} format {major}.{minor} platform {} gpu {} \
         coverage {}",
        Path::new(path).display(),
        table.meta("platform").unwrap_or("?"),
        table.meta("gpu").unwrap_or("?"),
        table.coverage(),
    )?;
    if let Some(c) = table.meta("coverage") {
        write!(w, " ({c})")?;
    }
    write!(w, "; comm")?;
    if let Some(id) = facts.comm_id {
        write!(w, " {id:#018x}")?;
    }
    write!(w, " nRanks {n_ranks} nNodes {n_nodes}")?;
    if let Some(nvl) = facts.nvl {
        write!(
            w,
            " nvlDomains {} ranksPerNvlDomain {}-{}",
            nvl.nNvlDomains, nvl.minRanksPerNvlDomain, nvl.maxRanksPerNvlDomain
        )?;
    }
    write!(w, ": contexts")?;
    for coll in Coll::ALL {
        match spec.context(coll) {
            Some(i) => write!(w, " {}=#{i}", coll.name())?,
            None => write!(w, " {}=default", coll.name())?,
        }
    }
    Ok(())
}

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
    if ctx.is_null() || table.is_null() {
        return;
    }
    // SAFETY: a non-NULL ctx is a live Context created by init (NCCL
    // passes back what init stored and finalizes it only after its last
    // getCollInfo).
    let ctx = unsafe { &*ctx.cast::<Context>() };
    let d = ctx
        .spec
        .decide(coll_type as u32, n_bytes as u64, num_pipe_ops, reg_buff);
    if let Decision::Force {
        algo,
        proto,
        channels,
    } = d
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
                if channels != 0 && !n_channels.is_null() {
                    // SAFETY: non-NULL, per the caller writable.
                    unsafe { n_channels.write_unaligned(channels as c_int) };
                }
            }
        }
    }
}

unsafe extern "C" fn init_v2(
    n_ranks: usize,
    n_nodes: usize,
    log: ncclDebugLogger_t,
    ctx: *mut *mut c_void,
) -> ncclResult_t {
    let cfg = Config::from_env();
    // SAFETY: NCCL passes a writable context pointer (NULL is checked).
    unsafe {
        init_guarded(
            &cfg,
            ctx,
            n_ranks,
            n_nodes,
            Logger(log),
            CommFacts::default(),
        )
    }
}

unsafe extern "C" fn init_v5(
    ctx: *mut *mut c_void,
    comm_id: u64,
    n_ranks: usize,
    n_nodes: usize,
    log: ncclDebugLogger_t,
    nvl: *mut ncclNvlDomainInfo_v5_t,
    _constants: *mut ncclTunerConstants_v5_t,
) -> ncclResult_t {
    // SAFETY: NCCL passes NULL or a valid ncclNvlDomainInfo_v5_t.
    let nvl = unsafe { nvl.as_ref() }.copied();
    let facts = CommFacts {
        comm_id: Some(comm_id),
        nvl,
    };
    let cfg = Config::from_env();
    // SAFETY: NCCL passes a writable context pointer (NULL is checked).
    unsafe { init_guarded(&cfg, ctx, n_ranks, n_nodes, Logger(log), facts) }
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
    let _ = catch_unwind(AssertUnwindSafe(|| {
        if ctx.is_null() || algorithm.is_null() || protocol.is_null() {
            return;
        }
        // SAFETY: a non-NULL ctx is a live Context created by init.
        let ctx = unsafe { &*ctx.cast::<Context>() };
        let d = ctx
            .spec
            .decide(coll_type as u32, n_bytes as u64, num_pipe_ops, 0);
        let Decision::Force {
            algo,
            proto,
            channels,
        } = d
        else {
            return;
        };
        // NCCL 2.21 (the only release that loads v2 natively) has 6
        // algorithms and does not range-check the plugin's answer, and v2
        // sees no cost table: only answer what this communicator supports.
        let supported = match algo {
            Algo::Tree | Algo::Ring => true,
            Algo::CollNetDirect | Algo::CollNetChain => coll_net_support != 0,
            Algo::Nvls | Algo::NvlsTree => nvls_support != 0,
            Algo::Pat => false,
        };
        if !supported {
            return;
        }
        // SAFETY: non-NULL out-pointers from NCCL.
        unsafe {
            algorithm.write_unaligned(algo as c_int);
            protocol.write_unaligned(proto as c_int);
            if channels != 0 && !n_channels.is_null() {
                n_channels.write_unaligned(channels as c_int);
            }
        }
    }));
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
    let _ = catch_unwind(AssertUnwindSafe(|| {
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
                0,
                n_channels,
            )
        }
    }));
    NCCL_SUCCESS
}

/// `getCollInfo` of v4, v5 and v6.
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
    let _ = catch_unwind(AssertUnwindSafe(|| {
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
    }));
    NCCL_SUCCESS
}

/// `destroy` (v2-v4) and `finalize` (v5, v6).
unsafe extern "C" fn finalize(ctx: *mut c_void) -> ncclResult_t {
    if ctx.is_null() {
        return NCCL_SUCCESS;
    }
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: a non-NULL ctx came from Box::into_raw in init and NCCL
        // finalizes it exactly once.
        let ctx = unsafe { Box::from_raw(ctx.cast::<Context>()) };
        if let Some(h) = ctx.handle {
            cache::release(h);
        }
    }));
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

/// NCCL 2.30+.
#[unsafe(no_mangle)]
pub static ncclTunerPlugin_v6: ncclTuner_v6_t = ncclTuner_v6_t {
    name: PLUGIN_NAME.as_ptr(),
    init: Some(init_v5),
    getCollInfo: Some(get_coll_info_v4),
    finalize: Some(finalize),
    getChunkSize: None,
};
