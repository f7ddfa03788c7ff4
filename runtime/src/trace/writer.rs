//! The process's facts and the trace file writer.
//!
//! A process-wide `Mutex` guards only the facts written at init and read
//! by the writer (directory, host, job, communicators, the records of
//! finalized communicators): never taken on an event. [`flush`] turns the
//! bins and those facts into one file per process (format:
//! `dyncc_tables::trace`), written whole and renamed into place.

use core::sync::atomic::{AtomicBool, Ordering};
use std::ffi::OsString;
use std::io::Write as _;
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use dyncc_tables::trace::{
    encode_full, TraceComm, TraceHead, TraceRecord, TraceShape, MAX_TRACE_LEN, MAX_TRACE_SHAPES,
    MAX_TRACE_STR, TRACE_COMM_LEN, TRACE_HEADER_LEN, TRACE_RECORD_LEN, TRACE_SHAPE_LEN,
};
use dyncc_tables::Setting;

use super::bins::{take_bins, Key, BINS, BIN_TABLE, KEY_VALID};
use super::journal::{profiled_ring, Journal};
use super::pool::reclaim;
use super::{CHANGES, DROPPED_POOL_FULL, DROPPED_TABLE_FULL, MAX_COMMS, UNTIMED};
use crate::guard::ffi_guard;
use crate::log::{Escaped, Logger};

/// One communicator this process records (or recorded).
pub(super) struct CommInfo {
    pub(super) comm_id: u64,
    pub(super) n_nodes: u32,
    pub(super) n_ranks: u32,
    pub(super) rank: u32,
    pub(super) name: String,
}

impl CommInfo {
    /// Bytes its entry takes in a file.
    pub(super) fn file_len(&self) -> usize {
        TRACE_COMM_LEN + self.name.len().min(MAX_TRACE_STR)
    }

    pub(super) fn same_shape(&self, o: &CommInfo) -> bool {
        (self.n_nodes, self.n_ranks, self.rank) == (o.n_nodes, o.n_ranks, o.rank)
    }

    pub(super) fn file_entry(&self) -> TraceComm<'_> {
        TraceComm {
            comm_id: self.comm_id,
            n_nodes: self.n_nodes.max(1).min(self.n_ranks.max(1)),
            n_ranks: self.n_ranks.max(1),
            rank: self.rank.min(self.n_ranks.max(1) - 1),
            name: &self.name,
        }
    }
}

/// What finalized communicators may add to a file: with the live
/// tables' most ([`BINS`] records, [`MAX_COMMS`] entries with the
/// longest names) and the header, a file stays under the format's 1 MiB.
pub(super) const ARCHIVE_BUDGET: usize = 512 << 10;
const _: () = assert!(
    ARCHIVE_BUDGET
        + BINS * TRACE_RECORD_LEN
        + MAX_COMMS * (TRACE_COMM_LEN + MAX_TRACE_STR)
        + TRACE_HEADER_LEN
        + 4 * MAX_TRACE_STR
        + MAX_TRACE_SHAPES * TRACE_SHAPE_LEN
        + dyncc_tables::trace::TRACE_PATHS_LEN
        + dyncc_tables::trace::MAX_TRACE_TAGS * dyncc_tables::trace::TRACE_TAG_LEN
        <= MAX_TRACE_LEN
);

pub(super) struct Process {
    pub(super) dir: Option<PathBuf>,
    pub(super) host: String,
    pub(super) job: String,
    pub(super) nccl_version: u32,
    pub(super) abi: u8,
    pub(super) table_digest: Option<u64>,
    /// The loaded table's `platform` and `gpu` metadata (the header's
    /// provenance); empty without a table.
    pub(super) platform: String,
    pub(super) gpu: String,
    /// The loaded table's sweep fingerprint (its `sweep` metadata).
    pub(super) sweep: Option<u64>,
    pub(super) log: Logger,
    /// The communicators recording now, by bin-key slot: a finalized one
    /// frees its slot ([`retire`]).
    pub(super) live: [Option<CommInfo>; MAX_COMMS],
    /// Finalized communicators, in the file before the live ones.
    pub(super) finished: Vec<CommInfo>,
    /// Their records (`comm`: the index in `finished`).
    pub(super) archive: Vec<TraceRecord>,
    /// Bytes `finished` and `archive` add to a file.
    pub(super) archive_bytes: usize,
    /// Communicators not recorded because [`MAX_COMMS`] were recording at
    /// once, and how many of them a WARN has counted.
    pub(super) refused: u64,
    pub(super) refused_said: u64,
    /// Calls (and other paths) per shape of rank-0 tuner contexts that
    /// finalized (their rings are gone): communicator id, and the shape
    /// (its `comm` unused).
    pub(super) kept_shapes: Vec<(u64, TraceShape)>,
    /// `CHANGES` when the file was last written; `None` before.
    pub(super) written_at: Option<u64>,
    /// The process that recorded: a child forked after NCCL started
    /// (data-loader workers) inherits the tables but must not write them
    /// again under its own id.
    pub(super) pid: u32,
    /// Drawn once per load of this library (see [`file_names`]).
    pub(super) nonce: u64,
}

impl Process {
    pub(super) const fn new() -> Process {
        Process {
            dir: None,
            host: String::new(),
            job: String::new(),
            nccl_version: 0,
            abi: 0,
            table_digest: None,
            platform: String::new(),
            gpu: String::new(),
            sweep: None,
            log: Logger(None),
            live: [const { None }; MAX_COMMS],
            finished: Vec::new(),
            archive: Vec::new(),
            archive_bytes: 0,
            refused: 0,
            refused_said: 0,
            kept_shapes: Vec::new(),
            written_at: None,
            pid: 0,
            nonce: 0,
        }
    }

    /// Keeps a finalized communicator's records for every later file: as
    /// an entry of its own while [`ARCHIVE_BUDGET`] allows; merged into a
    /// finalized entry of the same id and shape (the compiler reads those
    /// as one communicator anyway) or, past the budget, of the same
    /// shape; records that fit nowhere are counted as dropped.
    pub(super) fn archive_comm(&mut self, info: CommInfo, recs: Vec<TraceRecord>) {
        let same_id = self
            .finished
            .iter()
            .position(|f| f.comm_id == info.comm_id && f.same_shape(&info));
        let need = info.file_len() + recs.len() * TRACE_RECORD_LEN;
        let target = match same_id {
            Some(t) => Some(t),
            None if self.archive_bytes + need <= ARCHIVE_BUDGET => {
                self.archive_bytes += info.file_len();
                self.finished.push(info);
                Some(self.finished.len() - 1)
            }
            None => self.finished.iter().position(|f| f.same_shape(&info)),
        };
        let Some(t) = target else {
            let lost = recs.iter().map(|r| r.count).sum::<u64>();
            DROPPED_TABLE_FULL.fetch_add(lost, Ordering::Relaxed);
            return;
        };
        let t = t as u16;
        let mut at: std::collections::HashMap<[u64; 2], usize> = self
            .archive
            .iter()
            .enumerate()
            .filter(|(_, r)| r.comm == t)
            .map(|(i, r)| (record_key(r), i))
            .collect();
        for mut r in recs {
            r.comm = t;
            if let Some(&i) = at.get(&record_key(&r)) {
                merge_record(&mut self.archive[i], &r);
            } else if self.archive_bytes + TRACE_RECORD_LEN <= ARCHIVE_BUDGET {
                at.insert(record_key(&r), self.archive.len());
                self.archive.push(r);
                self.archive_bytes += TRACE_RECORD_LEN;
            } else {
                DROPPED_TABLE_FULL.fetch_add(r.count, Ordering::Relaxed);
            }
        }
    }
}

/// What tells two records of one communicator apart: the size, then the
/// communicator, collective, setting with its chunk ([`Setting::to_answer_word`], bits 8-31) and
/// source.
pub(super) fn record_key(r: &TraceRecord) -> [u64; 2] {
    [
        r.n_bytes,
        (r.comm as u64) << 40
            | (r.coll as u64) << 32
            | r.setting.to_answer_word() << 8
            | r.source as u64,
    ]
}

// The setting sits between the source byte and the collective, with room
// for a wider one.
const _: () = assert!(8 + Setting::ANSWER_WORD_BITS <= 32);

/// Adds `b`'s collectives to `a` (same communicator, collective, size,
/// setting and source).
pub(super) fn merge_record(a: &mut TraceRecord, b: &TraceRecord) {
    a.count = a.count.saturating_add(b.count);
    a.sum_ln += b.sum_ln;
    a.sum_ln2 += b.sum_ln2;
    a.min_ns = a.min_ns.min(b.min_ns);
    a.max_ns = a.max_ns.max(b.max_ns);
}

pub(super) static PROCESS: Mutex<Process> = Mutex::new(Process::new());

/// One WARN per process for a failed write, one for tracing off.
pub(super) static WARNED_WRITE: AtomicBool = AtomicBool::new(false);

pub(super) fn lock() -> MutexGuard<'static, Process> {
    PROCESS.lock().unwrap_or_else(|e| e.into_inner())
}

/// `DYNCC_TRACE`, when set and non-empty.
pub fn configured() -> Option<OsString> {
    std::env::var_os("DYNCC_TRACE").filter(|v| !v.is_empty())
}

/// The tuner loaded a table with this digest (the trace header names it).
pub fn note_table(digest: u64) {
    lock().table_digest = Some(digest);
}

/// The tuner loaded a table of this platform and GPU, compiled from the
/// sweep with this fingerprint (its metadata; the trace header names them
/// so that the compiler can tell traces of another cluster or sweep).
/// Called at communicator init, never on the hot path.
pub fn note_platform(platform: &str, gpu: &str, sweep: Option<u64>) {
    let mut p = lock();
    p.sweep = sweep;
    if p.platform != platform {
        p.platform = platform.to_owned();
    }
    if p.gpu != gpu {
        p.gpu = gpu.to_owned();
    }
}

/// What a recording communicator brings to the file.
pub struct Recording {
    /// Its index (for the bin keys).
    pub comm: u8,
}

/// Facts of a communicator starting to record.
pub struct CommFacts<'a> {
    /// NCCL's communicator id.
    pub comm_id: u64,
    /// Nodes.
    pub n_nodes: u32,
    /// Ranks.
    pub n_ranks: u32,
    /// This rank.
    pub rank: u32,
    /// commName, lossily decoded.
    pub name: &'a str,
    /// Profiler ABI version.
    pub abi: u8,
    /// `ncclGetVersion`'s code, 0 unknown.
    pub nccl_version: u32,
}

/// Why [`register`] refused a communicator.
#[derive(Debug)]
pub struct Refused {
    /// The first refusal in this process (later ones are counted, and
    /// said once with their number: see [`retire`]).
    pub first: bool,
}

/// Registers a recording communicator (profiler init). Refused when
/// [`MAX_COMMS`] are recording at once (a finalized one frees its slot).
pub fn register(dir: &Path, facts: CommFacts<'_>, log: Logger) -> Result<Recording, Refused> {
    let mut p = lock();
    let Some(slot) = p.live.iter().position(Option::is_none) else {
        p.refused += 1;
        return Err(Refused {
            first: p.refused == 1,
        });
    };
    if p.dir.is_none() {
        p.pid = std::process::id();
        p.nonce = load_nonce();
        p.dir = Some(dir.to_path_buf());
        p.host = hostname();
        p.job = std::env::var("SLURM_JOB_ID").unwrap_or_default();
    }
    p.abi = facts.abi;
    p.nccl_version = facts.nccl_version;
    if p.log.0.is_none() {
        p.log = log;
    }
    p.live[slot] = Some(CommInfo {
        comm_id: facts.comm_id,
        n_nodes: facts.n_nodes,
        n_ranks: facts.n_ranks,
        rank: facts.rank,
        name: facts.name.to_owned(),
    });
    Ok(Recording { comm: slot as u8 })
}

/// A recording communicator's profiler finalized (NCCL sends it no more
/// events): its collectives still in flight are counted as untimed
/// ([`reclaim`]), its records move out of the bins into the process's
/// archive (every later file still holds them) and its slot and bins are
/// free for the next communicator. When the last recording communicator
/// goes and some were refused since the last such WARN, one WARN says how
/// many. Init and finalize only: takes the process lock, allocates.
pub fn retire(comm: u8) {
    reclaim(comm);
    let mut p = lock();
    let Some(info) = p.live.get_mut(comm as usize).and_then(Option::take) else {
        return;
    };
    let recs = take_bins(comm);
    p.archive_comm(info, recs);
    CHANGES.fetch_add(1, Ordering::Relaxed);
    if p.live.iter().all(Option::is_none) && p.refused > p.refused_said {
        let n = p.refused - p.refused_said;
        p.refused_said = p.refused;
        p.log.warn(format_args!(
            "dyncc: {n} communicator{} of this process {} not traced: {MAX_COMMS} were \
             recording at the time (the most at once); the job went on",
            if n == 1 { "" } else { "s" },
            if n == 1 { "was" } else { "were" },
        ));
    }
}

pub(super) fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: buf is writable for its length; gethostname NUL-terminates
    // when the name fits (and we cut at the first NUL or the end anyway).
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len() - 1) };
    if rc != 0 {
        return "unknown".into();
    }
    let n = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

/// A number drawn for this load of the library: the kernel's random
/// bytes, or (without them) the clock and this load's address.
pub(super) fn load_nonce() -> u64 {
    let mut n = 0u64;
    // SAFETY: n is 8 writable bytes; GRND_NONBLOCK never waits.
    let got = unsafe {
        libc::getrandom(
            (&mut n as *mut u64).cast(),
            size_of::<u64>(),
            libc::GRND_NONBLOCK,
        )
    };
    if got != size_of::<u64>() as isize {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        n = t ^ (&PROCESS as *const _ as u64).rotate_left(32);
    }
    n
}

/// The file this process writes in `dir`, and its temporary name. The
/// nonce keeps apart two loads of the library in one process (a copy
/// installed under the profiler's name loads twice, each with its own
/// tables) and a process id reused on a host name shared by containers.
pub fn file_names(dir: &Path, host: &str, pid: u32, nonce: u64) -> (PathBuf, PathBuf) {
    let host: String = host
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    (
        dir.join(format!("dyncc-{host}-{pid}-{nonce:016x}.trace")),
        dir.join(format!(".dyncc-{host}-{pid}-{nonce:016x}.trace.tmp")),
    )
}

/// Writes this process's trace file if anything changed since the last
/// write (or none was written yet). `try_only`: give up rather than wait
/// for the lock (the exit hook: a thread killed while holding it must not
/// hang exit). A failure is one WARN per process; never panics into C.
pub fn flush(try_only: bool) {
    let mut p = if try_only {
        match PROCESS.try_lock() {
            Ok(g) => g,
            Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return,
        }
    } else {
        lock()
    };
    let Some(dir) = p.dir.clone() else { return };
    let pid = std::process::id();
    if pid != p.pid {
        return; // a forked child: the parent writes these tables
    }
    let changes = CHANGES.load(Ordering::Acquire);
    if p.written_at == Some(changes) {
        return;
    }
    let (path, tmp) = file_names(&dir, &p.host, pid, p.nonce);
    match write_file(&p, &path, &tmp, pid) {
        Ok(()) => p.written_at = Some(changes),
        Err((failed, e)) => {
            // Do not try again for every finalize: one WARN, and later
            // writes only when something new happened.
            p.written_at = Some(changes);
            if !WARNED_WRITE.swap(true, Ordering::Relaxed) {
                let shown = failed.to_string_lossy();
                p.log.warn(format_args!(
                    "dyncc: cannot write trace file {}: {}; the job goes on without this \
                     process's trace (check that DYNCC_TRACE names a writable directory with \
                     free space)",
                    Escaped(&shown),
                    Escaped(&e.to_string())
                ));
            }
        }
    }
}

/// Writes the file: whole to `tmp` (created here, never an entry that
/// was there), then renamed over `path`. On failure, the path that failed
/// (`tmp` when it could not be created or written, `path` when the file
/// could not be encoded or renamed) and why; a `tmp` this call created is
/// removed, anything else left alone.
pub(super) fn write_file(
    p: &Process,
    path: &Path,
    tmp: &Path,
    pid: u32,
) -> Result<(), (PathBuf, std::io::Error)> {
    // Finalized communicators first, then the live ones by slot.
    let mut comms: Vec<TraceComm<'_>> = p.finished.iter().map(CommInfo::file_entry).collect();
    let mut index = [None; MAX_COMMS];
    for (slot, c) in p.live.iter().enumerate() {
        if let Some(c) = c {
            index[slot] = Some(comms.len() as u16);
            comms.push(c.file_entry());
        }
    }
    let mut records = p.archive.clone();
    // A key claimed twice (a retire racing a claim) is one record.
    let mut seen: std::collections::HashMap<u64, usize> = std::collections::HashMap::new();
    for b in &BIN_TABLE {
        let k = b.key.load(Ordering::Acquire);
        if k & KEY_VALID == 0 {
            continue;
        }
        let (Some(ci), Some(mut r)) = (index[Key(k).comm() as usize], Key(k).record(b)) else {
            continue;
        };
        r.comm = ci;
        match seen.get(&k) {
            Some(&i) => merge_record(&mut records[i], &r),
            None => {
                seen.insert(k, records.len());
                records.push(r);
            }
        }
    }
    let head = TraceHead {
        profiler_abi: p.abi,
        table_digest: p.table_digest,
        nccl_version: p.nccl_version,
        pid,
        host: &p.host,
        job_id: &p.job,
        platform: &p.platform,
        gpu: &p.gpu,
        sweep: p.sweep,
        dropped_table_full: DROPPED_TABLE_FULL.load(Ordering::Relaxed),
        dropped_pool_full: DROPPED_POOL_FULL.load(Ordering::Relaxed),
        untimed: UNTIMED.load(Ordering::Relaxed),
    };
    let shapes = file_shapes(p, &comms, &index);
    let (other, tags, variants) = super::paths::file_block(&comms);
    let bytes = encode_full(&head, &comms, &records, &shapes, &other, &tags, &variants)
        .map_err(|e| (path.to_path_buf(), std::io::Error::other(e)))?;
    // create_new (O_EXCL): a file, link or FIFO already at the temporary
    // name is an error, never opened (a FIFO would block the open, inside
    // ncclCommDestroy); O_NONBLOCK besides, for the same reason.
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(tmp)
        .map_err(|e| (tmp.to_path_buf(), e))?;
    // From here the temporary is this call's own: removed on failure.
    let undo = |at: &Path, e| {
        let _ = std::fs::remove_file(tmp);
        (at.to_path_buf(), e)
    };
    f.write_all(&bytes).map_err(|e| undo(tmp, e))?;
    drop(f);
    // Atomic on POSIX file systems: readers see the old file or the new,
    // whenever the process dies. No fsync: it would hold the process lock
    // inside ncclCommDestroy for as long as the (often network) file system
    // takes, and it only guards against the machine crashing, after which
    // a lost or (on a file system that reorders rename before data) torn
    // trace is rejected by its checksum and the job's other files remain.
    std::fs::rename(tmp, path).map_err(|e| undo(path, e))
}

/// The shapes for the file: calls per (communicator, collective, bucket)
/// from the rings of live recording communicators (rank 0's tuner
/// context) and those kept from finalized ones, each named by the file's
/// entry of its communicator id (a live one, else the last finalized one);
/// at most [`MAX_TRACE_SHAPES`], the rest left out.
fn file_shapes(
    p: &Process,
    comms: &[TraceComm<'_>],
    index: &[Option<u16>; MAX_COMMS],
) -> Vec<TraceShape> {
    let mut at: std::collections::HashMap<(u16, u8, u8), usize> = Default::default();
    let mut out: Vec<TraceShape> = Vec::new();
    let mut add = |comm: u16, s: &TraceShape| {
        if let Some(&i) = at.get(&(comm, s.coll as u8, s.bucket)) {
            merge_shape(&mut out[i], s);
        } else if out.len() < MAX_TRACE_SHAPES {
            at.insert((comm, s.coll as u8, s.bucket), out.len());
            out.push(TraceShape { comm, ..*s });
        }
    };
    let entry_of = |id: u64| -> Option<u16> {
        let live = p
            .live
            .iter()
            .zip(index)
            .find_map(|(c, i)| c.as_ref().filter(|c| c.comm_id == id).and(*i));
        live.or_else(|| {
            comms[..p.finished.len()]
                .iter()
                .rposition(|c| c.comm_id == id)
                .map(|i| i as u16)
        })
    };
    for (c, i) in p.live.iter().zip(index) {
        let (Some(c), Some(i)) = (c, i) else { continue };
        if let Some(ring) = profiled_ring(c.comm_id) {
            for s in ring.shape_calls() {
                add(*i, &s);
            }
        }
    }
    for (id, s) in &p.kept_shapes {
        if let Some(i) = entry_of(*id) {
            add(i, s);
        }
    }
    out
}

/// Adds `more`'s counts of the same shape to `into`, saturating.
fn merge_shape(into: &mut TraceShape, more: &TraceShape) {
    into.calls = into.calls.saturating_add(more.calls);
    into.symmetric = into.symmetric.saturating_add(more.symmetric);
    into.copy_engine = into.copy_engine.saturating_add(more.copy_engine);
}

/// Rank 0's tuner context of communicator `comm_id` finalized: its calls
/// per shape are kept for every later file (a bounded number: past
/// [`MAX_TRACE_SHAPES`] kept, more are left out). Finalize only.
pub(super) fn keep_shape_calls(comm_id: u64, ring: &Journal) {
    let mut p = lock();
    for s in ring.shape_calls() {
        if let Some((_, k)) = p
            .kept_shapes
            .iter_mut()
            .find(|(id, k)| (*id, k.coll, k.bucket) == (comm_id, s.coll, s.bucket))
        {
            merge_shape(k, &s);
        } else if p.kept_shapes.len() < MAX_TRACE_SHAPES {
            p.kept_shapes.push((comm_id, s));
        }
    }
    CHANGES.fetch_add(1, Ordering::Relaxed);
}

/// Whether `dir` is a directory this process can create files in.
pub fn dir_usable(dir: &Path) -> Result<(), String> {
    let meta = std::fs::metadata(dir).map_err(|e| e.to_string())?;
    if !meta.is_dir() {
        return Err("it is not a directory".into());
    }
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| "it contains a NUL byte".to_string())?;
    // SAFETY: c is a valid NUL-terminated path.
    if unsafe { libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) } != 0 {
        return Err(std::io::Error::last_os_error().to_string());
    }
    Ok(())
}

/// Runs at process exit and at `dlclose` (an ELF destructor, not on any of
/// NCCL's threads' paths): many jobs never destroy their communicators, so
/// neither finalize runs; this writes what was recorded.
pub(super) extern "C" fn flush_at_exit() {
    ffi_guard((), || {
        flush(true);
        // At dlclose the statics are unmapped next: free what they own.
        if let Ok(mut p) = PROCESS.try_lock() {
            p.live = [const { None }; MAX_COMMS];
            p.finished = Vec::new();
            p.archive = Vec::new();
            p.kept_shapes = Vec::new();
            p.host = String::new();
            p.job = String::new();
            p.platform = String::new();
            p.gpu = String::new();
            p.dir = None;
        }
    });
}

#[used]
#[unsafe(link_section = ".fini_array")]
pub(super) static FLUSH_AT_EXIT: extern "C" fn() = flush_at_exit;
