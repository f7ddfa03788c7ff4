//! The trace file: what NCCL's profiler saw a process's collectives do,
//! aggregated, written by the plugin (`DYNCC_TRACE=DIR`) and read by the
//! compiler as measurements.
//!
//! One file per process, at most [`MAX_TRACE_LEN`] bytes whatever the job's
//! length: a header (process facts and counters), the communicators the
//! process recorded, and one fixed-size record per (communicator,
//! collective, size, algorithm, protocol, channels, who chose) with the
//! count, the sums of `ln(ns)` and of its square, and the minimum and
//! maximum GPU time. Little-endian, alignment 1; byte layout in
//! `tables/FORMAT.md` ("Trace files"). [`Trace::from_bytes`] validates
//! everything (and never panics or allocates); the writer (feature `alloc`)
//! is [`encode`].

use core::fmt;

use crate::nccl::{
    Algo, Chunk, Coll, ProfilerAbi, Proto, Setting, MAX_CHANNELS, NUM_ALGOS, NUM_COLLS, NUM_PROTOS,
};

/// The first 8 bytes of every trace file.
pub const TRACE_MAGIC: [u8; 8] = *b"DYNCCTRC";
/// Major version written. 2 added the platform and GPU of the table that
/// ran (where 1 had reserved zeros); 3 added the shapes (calls the tuner
/// answered per communicator, collective and size bucket, against which
/// the records say how much was recorded: the plugin stops recording a
/// shape once it has the evidence), and the fingerprint of the sweep the
/// table that ran was compiled from (flag bit 1, a header 8 bytes longer).
/// A reader reads every major from [`TRACE_MAJOR_OLDEST`] to this one and
/// refuses any other.
pub const TRACE_MAJOR: u16 = 3;
/// Oldest major still read (traces outlive releases).
pub const TRACE_MAJOR_OLDEST: u16 = 1;
/// Minor version written. 1 appended, after the shapes, the collectives
/// that ran a path the tuner cannot choose (a symmetric kernel, the copy
/// engines) and the user tags (profiler v7's `userTag`) each
/// communicator's calls carried, their count at header offset 84 (reserved
/// 0 before), and the record sources `ran-other` and `ran-other-channels` (a
/// forced call NCCL ran otherwise). 2 gave the record's reserved byte 7
/// the chunk size the setting ran with ([`crate::Chunk`]'s code, 0 =
/// NCCL's). A reader reads every minor up to its own; one of an older
/// minor refuses a newer file by its length (minor 1) or a record with a
/// chunk by its reserved byte (minor 2). 3 gave a shape entry's reserved
/// u32 (offset 4) the shape's collectives that ran as a symmetric kernel
/// and on the copy engines ([`TraceShape::symmetric`],
/// [`TraceShape::copy_engine`]); an older reader refuses such a shape by
/// its reserved field, this one reads minors 0-2 as zeros. 4 appended,
/// after the tags, the symmetric-kernel variants the recording ranks saw
/// run ([`TraceVariant`], profiler v7's `kernelVariant`), their count at
/// header offset 22 (reserved 0 before, so an older reader refuses a file
/// that holds any).
pub const TRACE_MINOR: u16 = 4;
/// Largest trace file (1 MiB): the plugin's fixed tables are sized to stay
/// below it, and a reader refuses anything longer.
pub const MAX_TRACE_LEN: usize = 1 << 20;
/// Header length (major 3).
pub const TRACE_HEADER_LEN: usize = 96;
/// Header length of majors 1 and 2 (no sweep fingerprint).
pub const TRACE_HEADER_LEN_V2: usize = 88;
/// Fixed part of a communicator entry (its name follows).
pub const TRACE_COMM_LEN: usize = 24;
/// Length of one record.
pub const TRACE_RECORD_LEN: usize = 56;
/// Length of one shape entry (major 3).
pub const TRACE_SHAPE_LEN: usize = 16;
/// Most shape entries a file holds (major 3): the writer keeps the first
/// ones and counts no more.
pub const MAX_TRACE_SHAPES: usize = 2048;
/// Recorded collectives per side (NCCL's choice, a forced setting) of one
/// shape that make the evidence a traced comparison needs (the compiler's
/// rule, `ingest::traces::rule::MIN_CALLS`): the plugin keeps a shape
/// traced until each side it saw there has this many.
pub const MIN_CALLS_PER_SIDE: u64 = 5;
/// Length of the other-paths block (minor 1): two u64 counts.
pub const TRACE_PATHS_LEN: usize = 16;
/// Length of one tag entry (minor 1).
pub const TRACE_TAG_LEN: usize = 16;
/// Most tag entries a file holds (minor 1).
pub const MAX_TRACE_TAGS: usize = 256;
/// Length of one symmetric-kernel variant entry (minor 4): its name,
/// NUL-padded, then its count.
pub const TRACE_VARIANT_LEN: usize = 32;
/// Longest variant name kept (NCCL's are a few characters: "AGxLL_R").
pub const MAX_VARIANT_NAME: usize = 24;
/// Most variant entries a file holds (minor 4).
pub const MAX_TRACE_VARIANTS: usize = 16;

/// Longest host, job id, platform, GPU or communicator name kept (longer ones are cut on
/// a character boundary by the writer).
pub const MAX_TRACE_STR: usize = 255;

/// Who chose what ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Source {
    /// NCCL's own tuning: the plugin left the choice to NCCL. (Before
    /// trace 3.1, also a call the plugin forced that NCCL ran otherwise;
    /// those are now [`Source::RanOther`] and [`Source::RanOtherChannels`].)
    Nccl = 0,
    /// The table's forced decision ran.
    Table = 1,
    /// An exploration setting ran (one the plugin forced).
    Explore = 2,
    /// The plugin could not link the collective to a tuner answer.
    Unknown = 3,
    /// Exploration left the choice to NCCL where the table forces a
    /// setting, and NCCL's own choice ran. (Before this value, such calls
    /// were written as `Explore`; a plan may now also try a setting where
    /// the table forces another, so the two must be told apart.)
    ExploreNccl = 4,
    /// The plugin forced a setting (the table's or exploration's) and NCCL
    /// ran another algorithm or protocol: the job sets NCCL_ALGO or
    /// NCCL_PROTO, a per-call selection excluded it, or NCCL ran a path the
    /// tuner cannot choose. Evidence for neither NCCL's choice nor the
    /// forced setting (trace 3.1).
    RanOther = 5,
    /// The plugin forced a setting with a channel count and NCCL ran its
    /// algorithm and protocol on another count (a communicator with fewer
    /// channels, NCCL_MAX_NCHANNELS). Evidence for neither side (trace
    /// 3.1).
    RanOtherChannels = 6,
}

impl Source {
    /// From the byte in a record.
    pub const fn from_u8(v: u8) -> Option<Source> {
        match v {
            0 => Some(Source::Nccl),
            1 => Some(Source::Table),
            2 => Some(Source::Explore),
            3 => Some(Source::Unknown),
            4 => Some(Source::ExploreNccl),
            5 => Some(Source::RanOther),
            6 => Some(Source::RanOtherChannels),
            _ => None,
        }
    }

    /// Lower-case name for reports.
    pub const fn name(self) -> &'static str {
        match self {
            Source::Nccl => "nccl",
            Source::Table => "table",
            Source::Explore => "explore",
            Source::Unknown => "unknown",
            Source::ExploreNccl => "explore-nccl",
            Source::RanOther => "ran-other",
            Source::RanOtherChannels => "ran-other-channels",
        }
    }
}

/// Process facts and counters (the header, less its framing).
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub struct TraceHead<'a> {
    /// The profiler ABI NCCL loaded (4 to 7: [`ProfilerAbi::traced`]).
    pub profiler_abi: u8,
    /// Digest of the table the tuner loaded (`Table::digest`); `None`
    /// without a table.
    pub table_digest: Option<u64>,
    /// `ncclGetVersion`'s code (e.g. 23007); 0 when unknown.
    pub nccl_version: u32,
    /// The writing process's id.
    pub pid: u32,
    /// Host name.
    pub host: &'a str,
    /// `SLURM_JOB_ID`, empty when unset.
    pub job_id: &'a str,
    /// The platform label of the table that ran (its `platform`
    /// metadata); empty without a table, or in a major-1 file.
    pub platform: &'a str,
    /// The GPU model of the table that ran (its `gpu` metadata); empty
    /// without a table, or in a major-1 file.
    pub gpu: &'a str,
    /// The fingerprint of the sweep the table that ran was compiled from
    /// (its `sweep` metadata, [`crate::Table::sweep_fingerprint`]); `None`
    /// without a table, for a table that does not record it, or in a file
    /// older than major 3.
    pub sweep: Option<u64>,
    /// Collectives lost because the record table was full.
    pub dropped_table_full: u64,
    /// Collectives lost because the in-flight event pool was full.
    pub dropped_pool_full: u64,
    /// Collectives without usable GPU timestamps (no kernel-channel
    /// events, a stop before its start, never completed).
    pub untimed: u64,
}

/// One communicator the process recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct TraceComm<'a> {
    /// NCCL's communicator id (`commHash`).
    pub comm_id: u64,
    /// Nodes.
    pub n_nodes: u32,
    /// Ranks.
    pub n_ranks: u32,
    /// The recording rank.
    pub rank: u32,
    /// The communicator's name (`commName`), empty when NCCL gave none.
    pub name: &'a str,
}

/// Aggregated GPU times of one (communicator, collective, size, setting,
/// source).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TraceRecord {
    /// Index into the file's communicators.
    pub comm: u16,
    /// Collective.
    pub coll: Coll,
    /// Bytes, as NCCL passes them to the tuner (type size x the larger of
    /// send and receive count).
    pub n_bytes: u64,
    /// What ran (its channels 1..=64; 0 when NCCL did not say).
    pub setting: Setting,
    /// Who chose it.
    pub source: Source,
    /// Collectives aggregated (>= 1).
    pub count: u64,
    /// Sum of `ln(ns)` of their GPU times.
    pub sum_ln: f64,
    /// Sum of `ln(ns)^2`.
    pub sum_ln2: f64,
    /// Shortest GPU time, ns.
    pub min_ns: u64,
    /// Longest GPU time, ns.
    pub max_ns: u64,
}

/// One shape (communicator, collective, size bucket) the recording rank's
/// tuner answered calls at (major 3). The records of that communicator and
/// collective whose size falls in the bucket hold the collectives that
/// were recorded; the rest ran while the plugin had stopped recording the
/// shape (it had the evidence), or could not be linked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceShape {
    /// Index into the file's communicators.
    pub comm: u16,
    /// Collective.
    pub coll: Coll,
    /// Size bucket (`crate::size_bucket` of the tuner's `nBytes`).
    pub bucket: u8,
    /// Calls the tuner answered there, one per collective (calls NCCL
    /// aggregated over several collectives are not counted).
    pub calls: u64,
    /// Of the shape's collectives, those the recording rank saw run as a
    /// symmetric kernel (profiler v7's `isSymColl`; minor 3, 0 before),
    /// saturating at `u16::MAX`: the shape's reserved u32 holds two
    /// counts, and what the compiler asks of them ("did NCCL run this
    /// path in most of the shape's calls?") is answered as well by a count
    /// that stopped at 65,535 as by an exact one, where 65,535 of a
    /// shape's calls make a far larger sample than the evidence rule needs.
    pub symmetric: u16,
    /// Of the shape's collectives, those that ran on the copy engines (a
    /// `CeColl` event; minor 3, 0 before), saturating like `symmetric`.
    pub copy_engine: u16,
}

impl TraceShape {
    /// A shape of `calls` answered calls with no other path seen.
    pub fn new(comm: u16, coll: Coll, bucket: u8, calls: u64) -> Self {
        Self {
            comm,
            coll,
            bucket,
            calls,
            symmetric: 0,
            copy_engine: 0,
        }
    }
}

/// The collectives the recording ranks saw run on a path no tuner can
/// choose (minor 1; zero in older files): never records, so never read as
/// a classic (algorithm, protocol) nor evidence for one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct TraceOtherPaths {
    /// Ran as a symmetric kernel (profiler v7's `isSymColl`).
    pub symmetric: u64,
    /// Ran on the copy engines (a `CeColl` event).
    pub copy_engine: u64,
}

/// A symmetric kernel variant the recording ranks saw run, with how many
/// collectives ran it (profiler v7's `kernelVariant`, e.g. "AGxLL_R";
/// minor 4). The collectives are those [`TraceOtherPaths::symmetric`]
/// counts: never records, never a classic (algorithm, protocol).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct TraceVariant {
    name: [u8; MAX_VARIANT_NAME],
    /// Collectives that ran it (>= 1).
    pub count: u64,
}

impl TraceVariant {
    /// A variant of `name` (1 to [`MAX_VARIANT_NAME`] printable ASCII
    /// characters, no space); `None` otherwise.
    pub fn new(name: &[u8], count: u64) -> Option<TraceVariant> {
        if name.is_empty()
            || name.len() > MAX_VARIANT_NAME
            || !name.iter().all(u8::is_ascii_graphic)
        {
            return None;
        }
        let mut n = [0u8; MAX_VARIANT_NAME];
        n[..name.len()].copy_from_slice(name);
        Some(TraceVariant { name: n, count })
    }

    /// The variant's name.
    pub fn name(&self) -> &str {
        let len = self
            .name
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(MAX_VARIANT_NAME);
        // Checked printable ASCII by `new` and by the reader.
        core::str::from_utf8(&self.name[..len]).unwrap_or("?")
    }
}

impl fmt::Debug for TraceVariant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}x{}", self.name(), self.count)
    }
}

/// A user tag a communicator's calls carried (profiler v7's `userTag`,
/// from `ncclCollConfig_t::userProfilerTag`; minor 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct TraceTag {
    /// Index into the file's communicators.
    pub comm: u16,
    /// The tag (never 0, which is "untagged").
    pub tag: u64,
}

impl TraceRecord {
    /// Geometric mean of the GPU times, ns.
    pub fn geomean_ns(&self) -> f64 {
        libm_exp(self.sum_ln / self.count as f64)
    }
}

/// `exp` without std (the reader is no_std): exp(x) = 2^(x / ln 2), the
/// integer part by exponent bits and the fraction by a short series; good
/// to ~1e-12 relative, plenty for a summary.
fn libm_exp(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    let y = x * core::f64::consts::LOG2_E;
    if y > 1023.0 {
        return f64::INFINITY;
    }
    if y < -1022.0 {
        return 0.0;
    }
    let k = if y < 0.0 { y as i64 - 1 } else { y as i64 };
    let f = (y - k as f64) * core::f64::consts::LN_2;
    let (mut term, mut sum) = (1.0f64, 1.0f64);
    for i in 1..25 {
        term *= f / i as f64;
        sum += term;
    }
    sum * f64::from_bits(((k + 1023) as u64) << 52)
}

/// Why bytes are not a trace file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceError {
    /// The first 8 bytes are not `DYNCCTRC`.
    BadMagic,
    /// A major version this reader does not read.
    UnsupportedVersion {
        /// In the file.
        found: u16,
    },
    /// Fewer bytes than the header or its counts need.
    Truncated {
        /// Bytes needed.
        need: u64,
        /// Bytes present.
        have: u64,
    },
    /// The header's length is not the file's.
    LengthMismatch {
        /// Declared.
        header: u64,
        /// Present.
        actual: u64,
    },
    /// Longer than [`MAX_TRACE_LEN`].
    TooLarge {
        /// Bytes.
        len: u64,
    },
    /// The body's CRC-32 does not match.
    Checksum {
        /// In the header.
        expected: u32,
        /// Of the bytes.
        actual: u32,
    },
    /// A field holds a value it cannot (at byte `offset`).
    BadField {
        /// Offset of the field in the file.
        offset: u64,
        /// What was expected there.
        what: &'static str,
    },
}

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            TraceError::BadMagic => write!(
                f,
                "not a dyncc trace file (it does not start with DYNCCTRC; traces are written by \
                 the plugin with DYNCC_TRACE=DIR)"
            ),
            TraceError::UnsupportedVersion { found } => write!(
                f,
                "trace format {found} is not readable by this dyncc (reads \
                 {TRACE_MAJOR_OLDEST} to {TRACE_MAJOR}); use the dyncc release that matches the \
                 plugin that wrote it"
            ),
            TraceError::Truncated { need, have } => write!(
                f,
                "truncated trace file: needs {need} bytes, has {have} (a copy cut short?)"
            ),
            TraceError::LengthMismatch { header, actual } => write!(
                f,
                "trace header says {header} bytes but the file has {actual}"
            ),
            TraceError::TooLarge { len } => write!(
                f,
                "{len} bytes is larger than any trace file can be ({MAX_TRACE_LEN} bytes)"
            ),
            TraceError::Checksum { expected, actual } => write!(
                f,
                "trace checksum mismatch (header {expected:08x}, bytes {actual:08x}): the file \
                 is damaged"
            ),
            TraceError::BadField { offset, what } => {
                write!(f, "bad trace field at byte {offset}: expected {what}")
            }
        }
    }
}

impl core::error::Error for TraceError {}

/// Little-endian reads at fixed offsets of a slice known to be long enough;
/// every accessor returns 0 rather than panic if it is not.
#[derive(Clone, Copy)]
struct Le<'a>(&'a [u8]);

impl Le<'_> {
    fn arr<const N: usize>(&self, at: usize) -> [u8; N] {
        let mut out = [0u8; N];
        if let Some(src) = self.0.get(at..at + N) {
            out.copy_from_slice(src);
        }
        out
    }
    fn u8(&self, at: usize) -> u8 {
        self.0.get(at).copied().unwrap_or(0)
    }
    fn u16(&self, at: usize) -> u16 {
        u16::from_le_bytes(self.arr(at))
    }
    fn u32(&self, at: usize) -> u32 {
        u32::from_le_bytes(self.arr(at))
    }
    fn u64(&self, at: usize) -> u64 {
        u64::from_le_bytes(self.arr(at))
    }
    fn f64(&self, at: usize) -> f64 {
        f64::from_le_bytes(self.arr(at))
    }
}

const FLAG_HAS_TABLE: u8 = 1;
/// Major 3: offset 88 holds the sweep fingerprint.
const FLAG_HAS_SWEEP: u8 = 2;

/// CRC-32 of the whole file with its CRC field (bytes 16..20) taken as
/// zero, so the header's facts are covered too.
fn file_crc(bytes: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(bytes.get(..16).unwrap_or(&[]));
    h.update(&[0; 4]);
    h.update(bytes.get(20..).unwrap_or(&[]));
    h.finalize()
}

/// A validated trace file, borrowing its bytes.
#[derive(Clone, Copy, Debug)]
pub struct Trace<'a> {
    head: TraceHead<'a>,
    comms: &'a [u8],
    n_comms: u32,
    records: &'a [u8],
    shapes: &'a [u8],
    minor: u16,
    other_paths: TraceOtherPaths,
    tags: &'a [u8],
    variants: &'a [u8],
}

fn bad(offset: usize, what: &'static str) -> TraceError {
    TraceError::BadField {
        offset: offset as u64,
        what,
    }
}

fn take(bytes: &[u8], at: usize, len: usize) -> Result<&[u8], TraceError> {
    bytes
        .get(at..at.saturating_add(len))
        .ok_or(TraceError::Truncated {
            need: at as u64 + len as u64,
            have: bytes.len() as u64,
        })
}

fn text(bytes: &[u8], at: usize, len: usize) -> Result<&str, TraceError> {
    let b = take(bytes, at, len)?;
    if len > MAX_TRACE_STR {
        return Err(bad(at, "a string of at most 255 bytes"));
    }
    let s = core::str::from_utf8(b).map_err(|_| bad(at, "UTF-8 text"))?;
    if s.chars().any(char::is_control) {
        return Err(bad(at, "text without control characters"));
    }
    Ok(s)
}

impl<'a> Trace<'a> {
    /// Validates `bytes` as a whole trace file. Never panics, never
    /// allocates; every record is checked here, so the accessors cannot
    /// fail.
    pub fn from_bytes(bytes: &'a [u8]) -> Result<Trace<'a>, TraceError> {
        if bytes.len() > MAX_TRACE_LEN {
            return Err(TraceError::TooLarge {
                len: bytes.len() as u64,
            });
        }
        // Every major's header starts with the 88 bytes of majors 1 and 2.
        let h = Le(take(bytes, 0, TRACE_HEADER_LEN_V2).map_err(|_| {
            if bytes.len() >= 8 && bytes[..8] != TRACE_MAGIC {
                TraceError::BadMagic
            } else {
                TraceError::Truncated {
                    need: TRACE_HEADER_LEN_V2 as u64,
                    have: bytes.len() as u64,
                }
            }
        })?);
        if h.arr::<8>(0) != TRACE_MAGIC {
            return Err(TraceError::BadMagic);
        }
        let major = h.u16(8);
        if !(TRACE_MAJOR_OLDEST..=TRACE_MAJOR).contains(&major) {
            return Err(TraceError::UnsupportedVersion { found: major });
        }
        let total = h.u32(12) as u64;
        if total != bytes.len() as u64 {
            return Err(TraceError::LengthMismatch {
                header: total,
                actual: bytes.len() as u64,
            });
        }
        let expected = h.u32(16);
        let actual = file_crc(bytes);
        if expected != actual && !cfg!(fuzzing) {
            return Err(TraceError::Checksum { expected, actual });
        }
        let abi = h.u8(20);
        // Only the profiler versions with GPU timestamps trace.
        if ProfilerAbi::traced(abi).is_none() {
            return Err(bad(20, "a profiler ABI with GPU timestamps (4 to 7)"));
        }
        let flags = h.u8(21);
        let known_flags = if major >= 3 {
            FLAG_HAS_TABLE | FLAG_HAS_SWEEP
        } else {
            FLAG_HAS_TABLE
        };
        if flags & !known_flags != 0 {
            return Err(bad(21, "flags 0 to 3 (major 3) or 0 and 1 (majors 1, 2)"));
        }
        let header_len = if major >= 3 {
            TRACE_HEADER_LEN
        } else {
            TRACE_HEADER_LEN_V2
        };
        let sweep = if major >= 3 {
            let s = Le(take(bytes, 0, TRACE_HEADER_LEN)?).u64(88);
            if flags & FLAG_HAS_SWEEP == 0 && s != 0 {
                return Err(bad(88, "a sweep fingerprint of 0 when flag bit 1 is clear"));
            }
            (flags & FLAG_HAS_SWEEP != 0).then_some(s)
        } else {
            None
        };
        // Minor 1 of major 3: the other paths and tags after the shapes,
        // the tags' count at 84.
        let minor = h.u16(10);
        let extended = major >= 3 && minor >= 1;
        // Minor 2 of major 3: a record's byte 7 is its chunk.
        let chunked = major >= 3 && minor >= 2;
        // Minor 3 of major 3: a shape's offset 4 holds its other paths.
        let shape_paths = major >= 3 && minor >= 3;
        // Minor 4 of major 3: the variants' count at 22, their entries
        // after the tags.
        let with_variants = major >= 3 && minor >= 4;
        // Major 3: the number of shapes at 80 (reserved 0 before).
        if (!with_variants && h.u16(22) != 0)
            || (!extended && h.u32(84) != 0)
            || (major < 3 && h.u32(80) != 0)
            || (major < 2 && h.u32(52) != 0)
        {
            return Err(bad(22, "reserved fields of zero"));
        }
        let n_shapes = h.u32(80);
        if n_shapes as usize > MAX_TRACE_SHAPES {
            return Err(bad(80, "at most 2048 shapes"));
        }
        let n_tags = if extended { h.u32(84) } else { 0 };
        if n_tags as usize > MAX_TRACE_TAGS {
            return Err(bad(84, "at most 256 tags"));
        }
        let n_variants = if with_variants { h.u16(22) } else { 0 };
        if n_variants as usize > MAX_TRACE_VARIANTS {
            return Err(bad(22, "at most 16 kernel variants"));
        }
        let extra_len = if extended {
            TRACE_PATHS_LEN as u64
                + n_tags as u64 * TRACE_TAG_LEN as u64
                + n_variants as u64 * TRACE_VARIANT_LEN as u64
        } else {
            0
        };
        // Major 2: the lengths of the platform and GPU strings.
        let (platform_len, gpu_len) = (h.u16(52) as usize, h.u16(54) as usize);
        let n_comms = h.u32(40);
        let n_records = h.u32(44);
        let (host_len, job_len) = (h.u16(48) as usize, h.u16(50) as usize);
        let mut at = header_len;
        let host = text(bytes, at, host_len)?;
        at += host_len;
        let job_id = text(bytes, at, job_len)?;
        at += job_len;
        let platform = text(bytes, at, platform_len)?;
        at += platform_len;
        let gpu = text(bytes, at, gpu_len)?;
        at += gpu_len;
        let comms_at = at;
        if n_comms as usize > MAX_TRACE_LEN / TRACE_COMM_LEN {
            return Err(bad(40, "a communicator count that fits the file"));
        }
        for _ in 0..n_comms {
            let c = Le(take(bytes, at, TRACE_COMM_LEN)?);
            let name_len = c.u16(20) as usize;
            if c.u16(22) != 0 {
                return Err(bad(at + 22, "a reserved field of zero"));
            }
            if c.u32(12) == 0 || c.u32(8) == 0 || c.u32(8) > c.u32(12) || c.u32(16) >= c.u32(12) {
                return Err(bad(
                    at + 8,
                    "nodes and ranks >= 1, nodes <= ranks, rank < ranks",
                ));
            }
            text(bytes, at + TRACE_COMM_LEN, name_len)?;
            at += TRACE_COMM_LEN + name_len;
        }
        let comms = &bytes[comms_at..at];
        let need = at as u64
            + n_records as u64 * TRACE_RECORD_LEN as u64
            + n_shapes as u64 * TRACE_SHAPE_LEN as u64
            + extra_len;
        if need != bytes.len() as u64 {
            return Err(if need > bytes.len() as u64 {
                TraceError::Truncated {
                    need,
                    have: bytes.len() as u64,
                }
            } else {
                TraceError::LengthMismatch {
                    header: need,
                    actual: bytes.len() as u64,
                }
            });
        }
        let shapes_at = at + n_records as usize * TRACE_RECORD_LEN;
        let extra_at = shapes_at + n_shapes as usize * TRACE_SHAPE_LEN;
        let (records, shapes) = (&bytes[at..shapes_at], &bytes[shapes_at..extra_at]);
        let (other_paths, tags, variants) = if extended {
            let e = Le(&bytes[extra_at..]);
            let tags_at = extra_at + TRACE_PATHS_LEN;
            let variants_at = tags_at + n_tags as usize * TRACE_TAG_LEN;
            let (tags, variants) = (&bytes[tags_at..variants_at], &bytes[variants_at..]);
            for (i, v) in variants.chunks_exact(TRACE_VARIANT_LEN).enumerate() {
                check_variant(Le(v), variants_at + i * TRACE_VARIANT_LEN)?;
            }
            for (i, t) in tags.chunks_exact(TRACE_TAG_LEN).enumerate() {
                check_tag(
                    Le(t),
                    n_comms,
                    extra_at + TRACE_PATHS_LEN + i * TRACE_TAG_LEN,
                )?;
            }
            (
                TraceOtherPaths {
                    symmetric: e.u64(0),
                    copy_engine: e.u64(8),
                },
                tags,
                variants,
            )
        } else {
            let none = &bytes[extra_at..extra_at];
            (TraceOtherPaths::default(), none, none)
        };
        for (i, r) in records.chunks_exact(TRACE_RECORD_LEN).enumerate() {
            check_record(Le(r), n_comms, at + i * TRACE_RECORD_LEN, chunked)?;
        }
        for (i, s) in shapes.chunks_exact(TRACE_SHAPE_LEN).enumerate() {
            check_shape(Le(s), n_comms, shapes_at + i * TRACE_SHAPE_LEN, shape_paths)?;
        }
        Ok(Trace {
            head: TraceHead {
                profiler_abi: abi,
                table_digest: (flags & FLAG_HAS_TABLE != 0).then(|| h.u64(24)),
                nccl_version: h.u32(32),
                pid: h.u32(36),
                host,
                job_id,
                platform,
                gpu,
                sweep,
                dropped_table_full: h.u64(56),
                dropped_pool_full: h.u64(64),
                untimed: h.u64(72),
            },
            comms,
            n_comms,
            records,
            shapes,
            minor,
            other_paths,
            tags,
            variants,
        })
    }

    /// The file's minor version.
    pub fn minor(&self) -> u16 {
        self.minor
    }

    /// The collectives that ran a path the tuner cannot choose (minor 1;
    /// zero in older files, which did not count them).
    pub fn other_paths(&self) -> TraceOtherPaths {
        self.other_paths
    }

    /// The user tags each communicator's calls carried (minor 1; none in
    /// older files), in file order.
    pub fn tags(&self) -> impl Iterator<Item = TraceTag> + 'a {
        self.tags.chunks_exact(TRACE_TAG_LEN).map(|t| {
            let t = Le(t);
            TraceTag {
                comm: t.u16(0),
                tag: t.u64(8),
            }
        })
    }

    /// The symmetric-kernel variants the recording ranks saw run (minor
    /// 4; none in older files), in file order.
    pub fn variants(&self) -> impl Iterator<Item = TraceVariant> + 'a {
        self.variants.chunks_exact(TRACE_VARIANT_LEN).map(|v| {
            let mut name = [0u8; MAX_VARIANT_NAME];
            name.copy_from_slice(&v[..MAX_VARIANT_NAME]);
            TraceVariant {
                name,
                count: Le(v).u64(MAX_VARIANT_NAME),
            }
        })
    }

    /// Process facts and counters.
    pub fn head(&self) -> &TraceHead<'a> {
        &self.head
    }

    /// The communicators, in file order (records index them).
    pub fn comms(&self) -> impl Iterator<Item = TraceComm<'a>> + 'a {
        let mut rest = self.comms;
        (0..self.n_comms).map_while(move |_| {
            let c = Le(rest.get(..TRACE_COMM_LEN)?);
            let len = c.u16(20) as usize;
            let name = rest
                .get(TRACE_COMM_LEN..TRACE_COMM_LEN + len)
                .and_then(|b| core::str::from_utf8(b).ok())?;
            let comm = TraceComm {
                comm_id: c.u64(0),
                n_nodes: c.u32(8),
                n_ranks: c.u32(12),
                rank: c.u32(16),
                name,
            };
            rest = rest.get(TRACE_COMM_LEN + len..)?;
            Some(comm)
        })
    }

    /// Number of communicators.
    pub fn n_comms(&self) -> usize {
        self.n_comms as usize
    }

    /// The records (all validated by `from_bytes`).
    pub fn records(&self) -> impl Iterator<Item = TraceRecord> + 'a {
        self.records
            .chunks_exact(TRACE_RECORD_LEN)
            .filter_map(|r| read_record(Le(r)))
    }

    /// Number of records.
    pub fn n_records(&self) -> usize {
        self.records.len() / TRACE_RECORD_LEN
    }

    /// The shapes the recording ranks' tuners answered at, with their
    /// calls (major 3; none in older files, which recorded every call they
    /// linked).
    pub fn shapes(&self) -> impl Iterator<Item = TraceShape> + 'a {
        self.shapes.chunks_exact(TRACE_SHAPE_LEN).filter_map(|s| {
            let s = Le(s);
            Some(TraceShape {
                comm: s.u16(0),
                coll: Coll::from_nccl(s.u8(2) as u32)?,
                bucket: s.u8(3),
                calls: s.u64(8),
                symmetric: s.u16(4),
                copy_engine: s.u16(6),
            })
        })
    }
}

/// A variant's name: 1-24 printable ASCII characters, then NULs; its
/// count at least 1.
fn check_variant(v: Le<'_>, at: usize) -> Result<(), TraceError> {
    let name = &v.0[..MAX_VARIANT_NAME];
    let len = name
        .iter()
        .position(|&b| b == 0)
        .unwrap_or(MAX_VARIANT_NAME);
    if len == 0
        || !name[..len].iter().all(u8::is_ascii_graphic)
        || name[len..].iter().any(|&b| b != 0)
    {
        return Err(bad(
            at,
            "a kernel variant name of printable ASCII, NUL-padded",
        ));
    }
    if v.u64(MAX_VARIANT_NAME) == 0 {
        return Err(bad(at + MAX_VARIANT_NAME, "a variant count of at least 1"));
    }
    Ok(())
}

fn check_tag(t: Le<'_>, n_comms: u32, at: usize) -> Result<(), TraceError> {
    if t.u16(0) as u32 >= n_comms {
        return Err(bad(at, "a communicator index below the communicator count"));
    }
    if t.u16(2) != 0 || t.u32(4) != 0 {
        return Err(bad(at + 2, "reserved fields of zero"));
    }
    if t.u64(8) == 0 {
        return Err(bad(at + 8, "a tag other than 0 (untagged)"));
    }
    Ok(())
}

fn check_shape(s: Le<'_>, n_comms: u32, at: usize, paths: bool) -> Result<(), TraceError> {
    if s.u16(0) as u32 >= n_comms {
        return Err(bad(at, "a communicator index below the communicator count"));
    }
    if s.u8(2) as usize >= NUM_COLLS {
        return Err(bad(at + 2, "a collective 0-4"));
    }
    if !paths && s.u32(4) != 0 {
        return Err(bad(at + 4, "a reserved field of zero"));
    }
    if s.u64(8) == 0 {
        return Err(bad(at + 8, "calls >= 1"));
    }
    Ok(())
}

fn check_record(r: Le<'_>, n_comms: u32, at: usize, chunked: bool) -> Result<(), TraceError> {
    if r.u16(0) as u32 >= n_comms {
        return Err(bad(at, "a communicator index below the communicator count"));
    }
    if r.u8(2) as usize >= NUM_COLLS {
        return Err(bad(at + 2, "a collective 0-4"));
    }
    if r.u8(3) as usize >= NUM_ALGOS {
        return Err(bad(at + 3, "an algorithm 0-6"));
    }
    if r.u8(4) as usize >= NUM_PROTOS {
        return Err(bad(at + 4, "a protocol 0-2"));
    }
    if r.u8(5) > MAX_CHANNELS {
        return Err(bad(at + 5, "at most 64 channels"));
    }
    if Source::from_u8(r.u8(6)).is_none() {
        return Err(bad(at + 6, "a source 0-4"));
    }
    if !chunked && r.u8(7) != 0 {
        return Err(bad(at + 7, "a reserved byte of zero"));
    }
    if chunked && read_record(r).is_none() {
        return Err(bad(at + 7, "a chunk code on the protocol's grain"));
    }
    if r.u64(16) == 0 {
        return Err(bad(at + 16, "a count >= 1"));
    }
    if !r.f64(24).is_finite() || !r.f64(32).is_finite() || r.f64(32) < 0.0 {
        return Err(bad(at + 24, "finite sums (the square's non-negative)"));
    }
    if r.u64(40) == 0 || r.u64(40) > r.u64(48) {
        return Err(bad(at + 40, "0 < minimum <= maximum"));
    }
    Ok(())
}

fn read_record(r: Le<'_>) -> Option<TraceRecord> {
    Some(TraceRecord {
        comm: r.u16(0),
        coll: Coll::from_nccl(r.u8(2) as u32)?,
        setting: Setting::new(Algo::from_u8(r.u8(3))?, Proto::from_u8(r.u8(4))?)
            .with_channels(r.u8(5))
            .with_chunk(Chunk::from_code(r.u8(7))?)?,
        source: Source::from_u8(r.u8(6))?,
        n_bytes: r.u64(8),
        count: r.u64(16),
        sum_ln: r.f64(24),
        sum_ln2: r.f64(32),
        min_ns: r.u64(40),
        max_ns: r.u64(48),
    })
}

/// `s` cut to at most [`MAX_TRACE_STR`] bytes on a character boundary,
/// control characters not allowed (the writer replaces them first).
#[cfg(feature = "alloc")]
fn cut(s: &str) -> &str {
    let mut n = s.len().min(MAX_TRACE_STR);
    while !s.is_char_boundary(n) {
        n -= 1;
    }
    &s[..n]
}

/// Writes a trace file. Strings longer than [`MAX_TRACE_STR`] bytes are
/// cut; control characters in them become `?`. Fails (without writing)
/// when the result would exceed [`MAX_TRACE_LEN`] or a record does not
/// validate (a record's comm index out of range, count 0, ...).
#[cfg(feature = "alloc")]
pub fn encode(
    head: &TraceHead<'_>,
    comms: &[TraceComm<'_>],
    records: &[TraceRecord],
) -> Result<alloc::vec::Vec<u8>, TraceError> {
    encode_with_shapes(head, comms, records, &[])
}

/// [`encode`] with the shapes the recording ranks' tuners answered at
/// (at most [`MAX_TRACE_SHAPES`]; a shape's comm index out of range or
/// calls 0 fails like a bad record).
#[cfg(feature = "alloc")]
pub fn encode_with_shapes(
    head: &TraceHead<'_>,
    comms: &[TraceComm<'_>],
    records: &[TraceRecord],
    shapes: &[TraceShape],
) -> Result<alloc::vec::Vec<u8>, TraceError> {
    encode_all(
        head,
        comms,
        records,
        shapes,
        &TraceOtherPaths::default(),
        &[],
    )
}

/// [`encode_with_shapes`] with the other paths and the tags (minor 1; at
/// most [`MAX_TRACE_TAGS`] tags, each naming a communicator and not 0, or
/// it fails like a bad record).
#[cfg(feature = "alloc")]
pub fn encode_all(
    head: &TraceHead<'_>,
    comms: &[TraceComm<'_>],
    records: &[TraceRecord],
    shapes: &[TraceShape],
    other_paths: &TraceOtherPaths,
    tags: &[TraceTag],
) -> Result<alloc::vec::Vec<u8>, TraceError> {
    encode_full(head, comms, records, shapes, other_paths, tags, &[])
}

/// [`encode_all`] with the symmetric-kernel variants (minor 4; at most
/// [`MAX_TRACE_VARIANTS`], each counted at least once, or it fails like a
/// bad record).
#[cfg(feature = "alloc")]
pub fn encode_full(
    head: &TraceHead<'_>,
    comms: &[TraceComm<'_>],
    records: &[TraceRecord],
    shapes: &[TraceShape],
    other_paths: &TraceOtherPaths,
    tags: &[TraceTag],
    variants: &[TraceVariant],
) -> Result<alloc::vec::Vec<u8>, TraceError> {
    if variants.len() > MAX_TRACE_VARIANTS {
        return Err(bad(22, "at most 16 kernel variants"));
    }
    if shapes.len() > MAX_TRACE_SHAPES {
        return Err(bad(80, "at most 2048 shapes"));
    }
    if tags.len() > MAX_TRACE_TAGS {
        return Err(bad(84, "at most 256 tags"));
    }
    use alloc::string::String;
    use alloc::vec::Vec;
    let clean = |s: &str| -> String {
        cut(s)
            .chars()
            .map(|c| if c.is_control() { '?' } else { c })
            .collect()
    };
    let (host, job) = (clean(head.host), clean(head.job_id));
    let (host, job) = (cut(&host), cut(&job));
    let (platform, gpu) = (clean(head.platform), clean(head.gpu));
    let (platform, gpu) = (cut(&platform), cut(&gpu));
    let mut out: Vec<u8> =
        Vec::with_capacity(TRACE_HEADER_LEN + 4 * MAX_TRACE_STR + records.len() * TRACE_RECORD_LEN);
    out.extend_from_slice(&TRACE_MAGIC);
    out.extend_from_slice(&TRACE_MAJOR.to_le_bytes());
    out.extend_from_slice(&TRACE_MINOR.to_le_bytes());
    out.extend_from_slice(&[0; 8]); // total_len, crc: patched below
    out.push(head.profiler_abi);
    let table_flag = if head.table_digest.is_some() {
        FLAG_HAS_TABLE
    } else {
        0
    };
    let sweep_flag = if head.sweep.is_some() {
        FLAG_HAS_SWEEP
    } else {
        0
    };
    out.push(table_flag | sweep_flag);
    out.extend_from_slice(&(variants.len() as u16).to_le_bytes());
    out.extend_from_slice(&head.table_digest.unwrap_or(0).to_le_bytes());
    out.extend_from_slice(&head.nccl_version.to_le_bytes());
    out.extend_from_slice(&head.pid.to_le_bytes());
    out.extend_from_slice(&(comms.len() as u32).to_le_bytes());
    out.extend_from_slice(&(records.len() as u32).to_le_bytes());
    out.extend_from_slice(&(host.len() as u16).to_le_bytes());
    out.extend_from_slice(&(job.len() as u16).to_le_bytes());
    out.extend_from_slice(&(platform.len() as u16).to_le_bytes());
    out.extend_from_slice(&(gpu.len() as u16).to_le_bytes());
    out.extend_from_slice(&head.dropped_table_full.to_le_bytes());
    out.extend_from_slice(&head.dropped_pool_full.to_le_bytes());
    out.extend_from_slice(&head.untimed.to_le_bytes());
    out.extend_from_slice(&(shapes.len() as u32).to_le_bytes());
    out.extend_from_slice(&(tags.len() as u32).to_le_bytes());
    out.extend_from_slice(&head.sweep.unwrap_or(0).to_le_bytes());
    debug_assert_eq!(out.len(), TRACE_HEADER_LEN);
    out.extend_from_slice(host.as_bytes());
    out.extend_from_slice(job.as_bytes());
    out.extend_from_slice(platform.as_bytes());
    out.extend_from_slice(gpu.as_bytes());
    for c in comms {
        let name = clean(c.name);
        let name = cut(&name);
        out.extend_from_slice(&c.comm_id.to_le_bytes());
        out.extend_from_slice(&c.n_nodes.to_le_bytes());
        out.extend_from_slice(&c.n_ranks.to_le_bytes());
        out.extend_from_slice(&c.rank.to_le_bytes());
        out.extend_from_slice(&(name.len() as u16).to_le_bytes());
        out.extend_from_slice(&[0; 2]);
        out.extend_from_slice(name.as_bytes());
    }
    for r in records {
        out.extend_from_slice(&r.comm.to_le_bytes());
        out.extend_from_slice(&[
            r.coll as u8,
            r.setting.algo as u8,
            r.setting.proto as u8,
            r.setting.channels,
            r.source as u8,
            r.setting.chunk.code(),
        ]);
        out.extend_from_slice(&r.n_bytes.to_le_bytes());
        out.extend_from_slice(&r.count.to_le_bytes());
        out.extend_from_slice(&r.sum_ln.to_le_bytes());
        out.extend_from_slice(&r.sum_ln2.to_le_bytes());
        out.extend_from_slice(&r.min_ns.to_le_bytes());
        out.extend_from_slice(&r.max_ns.to_le_bytes());
    }
    for s in shapes {
        out.extend_from_slice(&s.comm.to_le_bytes());
        out.extend_from_slice(&[s.coll as u8, s.bucket]);
        out.extend_from_slice(&s.symmetric.to_le_bytes());
        out.extend_from_slice(&s.copy_engine.to_le_bytes());
        out.extend_from_slice(&s.calls.to_le_bytes());
    }
    out.extend_from_slice(&other_paths.symmetric.to_le_bytes());
    out.extend_from_slice(&other_paths.copy_engine.to_le_bytes());
    for t in tags {
        out.extend_from_slice(&t.comm.to_le_bytes());
        out.extend_from_slice(&[0; 6]);
        out.extend_from_slice(&t.tag.to_le_bytes());
    }
    for v in variants {
        out.extend_from_slice(&v.name);
        out.extend_from_slice(&v.count.to_le_bytes());
    }
    if out.len() > MAX_TRACE_LEN {
        return Err(TraceError::TooLarge {
            len: out.len() as u64,
        });
    }
    let len = out.len() as u32;
    out[12..16].copy_from_slice(&len.to_le_bytes());
    let crc = file_crc(&out);
    out[16..20].copy_from_slice(&crc.to_le_bytes());
    Trace::from_bytes(&out)?;
    Ok(out)
}

#[cfg(all(test, feature = "alloc"))]
mod tests {
    use super::*;

    fn sample() -> alloc::vec::Vec<u8> {
        let head = TraceHead {
            profiler_abi: 6,
            table_digest: Some(0x3f1c_0d5e_9a7b_2c41),
            nccl_version: 23007,
            pid: 4242,
            host: "node-017",
            job_id: "123456",
            platform: "dgx-h100",
            gpu: "NVIDIA H100 80GB HBM3",
            sweep: Some(0x0bad_5eed),
            dropped_table_full: 1,
            dropped_pool_full: 2,
            untimed: 3,
        };
        let comms = [TraceComm {
            comm_id: 0x1234,
            n_nodes: 2,
            n_ranks: 16,
            rank: 0,
            name: "dp\ngroup",
        }];
        let recs = [TraceRecord {
            comm: 0,
            coll: Coll::AllReduce,
            n_bytes: 1 << 20,
            setting: Setting::new(Algo::Ring, Proto::Simple).with_channels(8),
            source: Source::Table,
            count: 3,
            sum_ln: 30.0,
            sum_ln2: 300.5,
            min_ns: 20_000,
            max_ns: 25_000,
        }];
        encode(&head, &comms, &recs).unwrap()
    }

    #[test]
    fn a_trace_round_trips() {
        let bytes = sample();
        let t = Trace::from_bytes(&bytes).unwrap();
        assert_eq!(t.head().host, "node-017");
        assert_eq!(t.head().platform, "dgx-h100");
        assert_eq!(t.head().gpu, "NVIDIA H100 80GB HBM3");
        assert_eq!(t.head().table_digest, Some(0x3f1c_0d5e_9a7b_2c41));
        assert_eq!(t.head().sweep, Some(0x0bad_5eed));
        assert_eq!(t.head().untimed, 3);
        let comms: alloc::vec::Vec<_> = t.comms().collect();
        assert_eq!(comms.len(), 1);
        assert_eq!(comms[0].name, "dp?group");
        let r: alloc::vec::Vec<_> = t.records().collect();
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].source, Source::Table);
        assert_eq!(r[0].count, 3);
        assert!((r[0].geomean_ns() - 10f64.exp()).abs() < 1e-6);
    }

    /// A trace written under profiler v7 (NCCL 2.31+) is read (the reader
    /// refused every ABI outside 4..=6, so v7 jobs' traces were rejected);
    /// versions without GPU timestamps, or none NCCL defined, are not.
    #[test]
    fn a_profiler_v7_trace_is_read() {
        let t0 = sample();
        let t = Trace::from_bytes(&t0).unwrap();
        let comms: alloc::vec::Vec<_> = t.comms().collect();
        let recs: alloc::vec::Vec<_> = t.records().collect();
        for (abi, ok) in [
            (3, false),
            (4, true),
            (5, true),
            (6, true),
            (7, true),
            (8, false),
        ] {
            let head = TraceHead {
                profiler_abi: abi,
                ..*t.head()
            };
            let got = encode(&head, &comms, &recs);
            assert_eq!(got.is_ok(), ok, "abi {abi}: {got:?}");
            if let Ok(b) = got {
                assert_eq!(Trace::from_bytes(&b).unwrap().head().profiler_abi, abi);
            }
        }
    }

    /// Minor 4's kernel variants round-trip; a name that is not
    /// printable ASCII, a count of 0 and more than 16 are refused, and a
    /// file of minor 3 may not claim any (offset 22 was reserved).
    #[test]
    fn kernel_variants_round_trip_and_bad_ones_are_refused() {
        let s = sample();
        let t = Trace::from_bytes(&s).unwrap();
        let comms: alloc::vec::Vec<_> = t.comms().collect();
        let recs: alloc::vec::Vec<_> = t.records().collect();
        let v = [
            TraceVariant::new(b"AGxLL_R", 7).unwrap(),
            TraceVariant::new(b"RSxLDMC", 1).unwrap(),
        ];
        let none = TraceOtherPaths::default();
        let b = encode_full(t.head(), &comms, &recs, &[], &none, &[], &v).unwrap();
        let back = Trace::from_bytes(&b).unwrap();
        assert_eq!(back.variants().collect::<alloc::vec::Vec<_>>(), v);
        assert_eq!(back.variants().nth(1).unwrap().name(), "RSxLDMC");
        assert!(TraceVariant::new(b"", 1).is_none());
        assert!(TraceVariant::new(b"AG LL", 1).is_none());
        assert!(TraceVariant::new(&[b'A'; 25], 1).is_none());
        let zero = [TraceVariant::new(b"AGxLL_R", 0).unwrap()];
        assert!(encode_full(t.head(), &comms, &recs, &[], &none, &[], &zero).is_err());
        let many = [v[0]; MAX_TRACE_VARIANTS + 1];
        assert!(encode_full(t.head(), &comms, &recs, &[], &none, &[], &many).is_err());
        // A name byte past a NUL, written by hand: refused.
        let mut bad_name = b.clone();
        let at = bad_name.len() - 2 * TRACE_VARIANT_LEN + 10;
        bad_name[at] = b'x';
        let crc = file_crc(&bad_name);
        bad_name[16..20].copy_from_slice(&crc.to_le_bytes());
        assert!(Trace::from_bytes(&bad_name).is_err());
        // Minor 3 with a variant count: the reserved field.
        let mut old = b.clone();
        old[10..12].copy_from_slice(&3u16.to_le_bytes());
        let crc = file_crc(&old);
        old[16..20].copy_from_slice(&crc.to_le_bytes());
        assert!(Trace::from_bytes(&old).is_err());
    }

    /// Minor 1's other paths and tags round-trip; a tag naming no
    /// communicator, or 0, is refused; a minor-0 file (no block, offset 84
    /// reserved) is still read, and one claiming tags is refused.
    #[test]
    fn other_paths_and_tags_round_trip_and_minor_0_files_still_read() {
        let t0 = sample();
        let t = Trace::from_bytes(&t0).unwrap();
        assert_eq!(t.minor(), TRACE_MINOR);
        assert_eq!(t.other_paths(), TraceOtherPaths::default());
        assert_eq!(t.tags().count(), 0);
        let comms: alloc::vec::Vec<_> = t.comms().collect();
        let recs: alloc::vec::Vec<_> = t.records().collect();
        let paths = TraceOtherPaths {
            symmetric: 7,
            copy_engine: 9,
        };
        let tags = [
            TraceTag {
                comm: 0,
                tag: 0x101,
            },
            TraceTag {
                comm: 0,
                tag: 1 << 40,
            },
        ];
        let b = encode_all(t.head(), &comms, &recs, &[], &paths, &tags).unwrap();
        let back = Trace::from_bytes(&b).unwrap();
        assert_eq!(back.other_paths(), paths);
        assert_eq!(back.tags().collect::<alloc::vec::Vec<_>>(), tags);
        assert_eq!(back.records().count(), recs.len());
        for bad in [TraceTag { comm: 1, tag: 5 }, TraceTag { comm: 0, tag: 0 }] {
            assert!(encode_all(t.head(), &comms, &recs, &[], &paths, &[bad]).is_err());
        }
        // The same content as minor 0: no block, offset 84 zero.
        let plain = encode_with_shapes(t.head(), &comms, &recs, &[]).unwrap();
        let mut old = plain[..plain.len() - TRACE_PATHS_LEN].to_vec();
        old[10..12].copy_from_slice(&0u16.to_le_bytes());
        let len = old.len() as u32;
        old[12..16].copy_from_slice(&len.to_le_bytes());
        let crc = file_crc(&old);
        old[16..20].copy_from_slice(&crc.to_le_bytes());
        let o = Trace::from_bytes(&old).unwrap();
        assert_eq!(
            (o.minor(), o.other_paths(), o.tags().count()),
            (0, TraceOtherPaths::default(), 0)
        );
        assert_eq!(o.records().collect::<alloc::vec::Vec<_>>(), recs);
        old[84] = 1;
        let crc = file_crc(&old);
        old[16..20].copy_from_slice(&crc.to_le_bytes());
        assert!(matches!(
            Trace::from_bytes(&old),
            Err(TraceError::BadField { offset: 22, .. })
        ));
    }

    /// Every prefix and every single-byte change of a valid file is either
    /// refused or read without panicking (the CRC catches the rest).
    #[test]
    fn damaged_traces_are_refused_without_panicking() {
        let bytes = sample();
        for n in 0..bytes.len() {
            assert!(Trace::from_bytes(&bytes[..n]).is_err(), "prefix {n}");
        }
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x5a;
            assert!(Trace::from_bytes(&b).is_err(), "byte {i} changed");
        }
    }

    proptest::proptest! {
        /// Arbitrary bytes, and arbitrary bodies behind a valid magic,
        /// version, length and CRC (so the structural checks are reached),
        /// are refused or read, never a panic; whatever is accepted reads
        /// back consistently.
        #[test]
        fn any_bytes_are_refused_or_read_without_panicking(
            body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..600),
            patch in proptest::prelude::any::<bool>(),
        ) {
            let mut b = body;
            if patch && b.len() >= TRACE_HEADER_LEN {
                b[..8].copy_from_slice(&TRACE_MAGIC);
                b[8..10].copy_from_slice(&TRACE_MAJOR.to_le_bytes());
                let len = b.len() as u32;
                b[12..16].copy_from_slice(&len.to_le_bytes());
                let crc = file_crc(&b);
                b[16..20].copy_from_slice(&crc.to_le_bytes());
            }
            if let Ok(t) = Trace::from_bytes(&b) {
                proptest::prop_assert_eq!(t.comms().count(), t.n_comms());
                proptest::prop_assert_eq!(t.records().count(), t.n_records());
            }
        }
    }

    #[test]
    fn an_oversized_trace_is_refused_by_the_writer() {
        let head = TraceHead {
            profiler_abi: 5,
            ..TraceHead::default()
        };
        let comms = [TraceComm {
            n_nodes: 1,
            n_ranks: 1,
            ..TraceComm::default()
        }];
        let rec = TraceRecord {
            comm: 0,
            coll: Coll::Broadcast,
            n_bytes: 1,
            setting: Setting::new(Algo::Ring, Proto::LL).with_channels(1),
            source: Source::Nccl,
            count: 1,
            sum_ln: 1.0,
            sum_ln2: 1.0,
            min_ns: 1,
            max_ns: 1,
        };
        let recs = alloc::vec![rec; MAX_TRACE_LEN / TRACE_RECORD_LEN + 1];
        assert!(matches!(
            encode(&head, &comms, &recs),
            Err(TraceError::TooLarge { .. })
        ));
    }

    /// Major 3's shapes round-trip; a shape naming no communicator, or
    /// with no calls, is refused by the writer; a major-2 file claiming
    /// shapes (its offset 80 was reserved) is refused by the reader.
    #[test]
    fn shapes_round_trip_and_bad_ones_are_refused() {
        let t0 = sample();
        let t = Trace::from_bytes(&t0).unwrap();
        // No sweep: a major-2 reading below meets the shape count first.
        let head = TraceHead {
            sweep: None,
            ..*t.head()
        };
        let comms: alloc::vec::Vec<_> = t.comms().collect();
        let recs: alloc::vec::Vec<_> = t.records().collect();
        let shape = TraceShape::new(0, Coll::AllGather, 77, 900);
        let bytes = encode_with_shapes(&head, &comms, &recs, &[shape]).unwrap();
        let back = Trace::from_bytes(&bytes).unwrap();
        assert_eq!(back.shapes().collect::<alloc::vec::Vec<_>>(), [shape]);
        assert_eq!(back.records().count(), recs.len());
        for bad in [
            TraceShape { comm: 1, ..shape },
            TraceShape { calls: 0, ..shape },
        ] {
            assert!(
                encode_with_shapes(&head, &comms, &recs, &[bad]).is_err(),
                "{bad:?}"
            );
        }
        // The same file said to be major 2: its shape count is a reserved
        // field that is not zero.
        let mut old = bytes.clone();
        old[8..10].copy_from_slice(&2u16.to_le_bytes());
        let crc = file_crc(&old);
        old[16..20].copy_from_slice(&crc.to_le_bytes());
        assert!(matches!(
            Trace::from_bytes(&old),
            Err(TraceError::BadField { offset: 22, .. })
        ));
        // A major-2 file with the sweep flag: flag bit 1 is major 3's.
        let with_sweep = encode_with_shapes(
            &TraceHead {
                sweep: Some(9),
                ..head
            },
            &comms,
            &recs,
            &[],
        )
        .unwrap();
        assert_eq!(
            Trace::from_bytes(&with_sweep).unwrap().head().sweep,
            Some(9)
        );
        let mut old = with_sweep;
        old[8..10].copy_from_slice(&2u16.to_le_bytes());
        let crc = file_crc(&old);
        old[16..20].copy_from_slice(&crc.to_le_bytes());
        assert!(matches!(
            Trace::from_bytes(&old),
            Err(TraceError::BadField { offset: 21, .. })
        ));
    }

    /// Minor 3: a shape's other-path counts round-trip; the same file said
    /// to be minor 2 is refused by the shape's reserved field (what an
    /// older reader says of a newer file); a minor-2 file's shapes read
    /// with zero counts.
    #[test]
    fn shape_other_paths_round_trip_and_minor_2_reads_them_as_zero() {
        let t0 = sample();
        let t = Trace::from_bytes(&t0).unwrap();
        let head = *t.head();
        let comms: alloc::vec::Vec<_> = t.comms().collect();
        let recs: alloc::vec::Vec<_> = t.records().collect();
        let shape = TraceShape {
            symmetric: 700,
            copy_engine: u16::MAX,
            ..TraceShape::new(0, Coll::AllReduce, 60, 900)
        };
        let bytes = encode_with_shapes(&head, &comms, &recs, &[shape]).unwrap();
        let back = Trace::from_bytes(&bytes).unwrap();
        assert_eq!(back.minor(), TRACE_MINOR);
        assert_eq!(back.shapes().collect::<alloc::vec::Vec<_>>(), [shape]);
        let as_minor = |bytes: &[u8], minor: u16| {
            let mut b = bytes.to_vec();
            b[10..12].copy_from_slice(&minor.to_le_bytes());
            let crc = file_crc(&b);
            b[16..20].copy_from_slice(&crc.to_le_bytes());
            b
        };
        let shape_at = bytes.len() - TRACE_PATHS_LEN - TRACE_SHAPE_LEN;
        assert!(matches!(
            Trace::from_bytes(&as_minor(&bytes, 2)),
            Err(TraceError::BadField { offset, .. }) if offset == (shape_at + 4) as u64
        ));
        let plain = TraceShape::new(0, Coll::AllReduce, 60, 900);
        let old = encode_with_shapes(&head, &comms, &recs, &[plain]).unwrap();
        let old = as_minor(&old, 2);
        let old = Trace::from_bytes(&old).unwrap();
        assert_eq!(old.shapes().collect::<alloc::vec::Vec<_>>(), [plain]);
    }
}
