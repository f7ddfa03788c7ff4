//! NCCL's numbering of collectives, algorithms and protocols, as the tuner
//! ABI passes them (NCCL 2.23+; PAT = 6 was appended, nothing renumbered),
//! and NCCL's rules about which of them can run on a machine ([`Machine`]);
//! the plugin ABI versions are one table per plugin kind ([`abi`]).

pub mod abi;
pub use abi::{ProfilerAbi, TunerAbi, PROFILER_ABIS, TUNER_ABIS};

/// A collective NCCL asks a tuner about (`ncclFunc_t` 0..=4).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
#[repr(u8)]
#[allow(missing_docs)] // variants are NCCL's own names
pub enum Coll {
    Broadcast = 0,
    Reduce = 1,
    AllGather = 2,
    ReduceScatter = 3,
    AllReduce = 4,
}

/// Number of tunable collectives (`NCCL_NUM_FUNCTIONS`).
pub const NUM_COLLS: usize = 5;

impl Coll {
    /// All collectives, in NCCL numbering order.
    pub const ALL: [Coll; NUM_COLLS] = [
        Coll::Broadcast,
        Coll::Reduce,
        Coll::AllGather,
        Coll::ReduceScatter,
        Coll::AllReduce,
    ];

    /// From NCCL's `ncclFunc_t` value; `None` for anything a tuner never decides.
    pub const fn from_nccl(v: u32) -> Option<Coll> {
        match v {
            0 => Some(Coll::Broadcast),
            1 => Some(Coll::Reduce),
            2 => Some(Coll::AllGather),
            3 => Some(Coll::ReduceScatter),
            4 => Some(Coll::AllReduce),
            _ => None,
        }
    }

    /// Lower-case name as in NCCL's example tuner CSV (`allreduce`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            Coll::Broadcast => "broadcast",
            Coll::Reduce => "reduce",
            Coll::AllGather => "allgather",
            Coll::ReduceScatter => "reducescatter",
            Coll::AllReduce => "allreduce",
        }
    }

    /// Parses `allreduce`, `AllReduce`, `all_reduce`, `all_reduce_perf`, ...
    pub fn parse(s: &str) -> Option<Coll> {
        let mut buf = [0u8; 32];
        let n = normalise(s, &mut buf)?;
        let k = &buf[..n];
        let k = k.strip_suffix(b"perf").unwrap_or(k);
        Some(match k {
            b"broadcast" | b"bcast" => Coll::Broadcast,
            b"reduce" => Coll::Reduce,
            b"allgather" => Coll::AllGather,
            b"reducescatter" => Coll::ReduceScatter,
            b"allreduce" => Coll::AllReduce,
            _ => return None,
        })
    }
}

/// An algorithm (`NCCL_ALGO_*`).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
#[repr(u8)]
#[allow(missing_docs)] // variants are NCCL's own names
pub enum Algo {
    Tree = 0,
    Ring = 1,
    CollNetDirect = 2,
    CollNetChain = 3,
    Nvls = 4,
    NvlsTree = 5,
    Pat = 6,
}

/// Number of algorithms in NCCL 2.23+ (`NCCL_NUM_ALGORITHMS`).
pub const NUM_ALGOS: usize = 7;

/// NCCL's `MAXCHANNELS` (64 in every release the tuner ABI exists for):
/// the most channels a decision may ask for. The format rejects more.
pub const MAX_CHANNELS: u8 = 64;

impl Algo {
    /// All algorithms, in NCCL numbering order.
    pub const ALL: [Algo; NUM_ALGOS] = [
        Algo::Tree,
        Algo::Ring,
        Algo::CollNetDirect,
        Algo::CollNetChain,
        Algo::Nvls,
        Algo::NvlsTree,
        Algo::Pat,
    ];

    /// From NCCL's `NCCL_ALGO_*` value; `None` if out of range.
    pub const fn from_u8(v: u8) -> Option<Algo> {
        match v {
            0 => Some(Algo::Tree),
            1 => Some(Algo::Ring),
            2 => Some(Algo::CollNetDirect),
            3 => Some(Algo::CollNetChain),
            4 => Some(Algo::Nvls),
            5 => Some(Algo::NvlsTree),
            6 => Some(Algo::Pat),
            _ => None,
        }
    }

    /// Lower-case name as in NCCL's example tuner CSV (`tree`, `collnet_direct`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            Algo::Tree => "tree",
            Algo::Ring => "ring",
            Algo::CollNetDirect => "collnet_direct",
            Algo::CollNetChain => "collnet_chain",
            Algo::Nvls => "nvls",
            Algo::NvlsTree => "nvls_tree",
            Algo::Pat => "pat",
        }
    }

    /// The spelling `NCCL_ALGO` takes (`ncclAlgoStr`): `Tree`, `CollNetDirect`, `NVLSTree`, ...
    pub const fn env_name(self) -> &'static str {
        match self {
            Algo::Tree => "Tree",
            Algo::Ring => "Ring",
            Algo::CollNetDirect => "CollNetDirect",
            Algo::CollNetChain => "CollNetChain",
            Algo::Nvls => "NVLS",
            Algo::NvlsTree => "NVLSTree",
            Algo::Pat => "PAT",
        }
    }

    /// Parses every spelling NCCL and its tools use: `Tree`, `TREE`, `tree`,
    /// `CollNetDirect`, `COLLNET_DIRECT`, `collnet_direct`, `NVLSTree`, `nvls_tree`, ...
    pub fn parse(s: &str) -> Option<Algo> {
        let mut buf = [0u8; 32];
        let n = normalise(s, &mut buf)?;
        Some(match &buf[..n] {
            b"tree" => Algo::Tree,
            b"ring" => Algo::Ring,
            b"collnetdirect" | b"collnet" => Algo::CollNetDirect,
            b"collnetchain" => Algo::CollNetChain,
            b"nvls" => Algo::Nvls,
            b"nvlstree" => Algo::NvlsTree,
            b"pat" => Algo::Pat,
            _ => return None,
        })
    }
}

/// A protocol (`NCCL_PROTO_*`).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
#[repr(u8)]
#[allow(missing_docs)] // variants are NCCL's own names
pub enum Proto {
    LL = 0,
    LL128 = 1,
    Simple = 2,
}

/// Number of protocols (`NCCL_NUM_PROTOCOLS`).
pub const NUM_PROTOS: usize = 3;

impl Proto {
    /// All protocols, in NCCL numbering order.
    pub const ALL: [Proto; NUM_PROTOS] = [Proto::LL, Proto::LL128, Proto::Simple];

    /// From NCCL's `NCCL_PROTO_*` value; `None` if out of range.
    pub const fn from_u8(v: u8) -> Option<Proto> {
        match v {
            0 => Some(Proto::LL),
            1 => Some(Proto::LL128),
            2 => Some(Proto::Simple),
            _ => None,
        }
    }

    /// Lower-case name as in NCCL's example tuner CSV (`ll`, `ll128`, `simple`).
    pub const fn name(self) -> &'static str {
        match self {
            Proto::LL => "ll",
            Proto::LL128 => "ll128",
            Proto::Simple => "simple",
        }
    }

    /// The spelling `NCCL_PROTO` takes (`ncclProtoStr`): `LL`, `LL128`, `Simple`.
    pub const fn env_name(self) -> &'static str {
        match self {
            Proto::LL => "LL",
            Proto::LL128 => "LL128",
            Proto::Simple => "Simple",
        }
    }

    /// Parses `LL`, `ll`, `LL128`, `Simple`, `SIMPLE`, ...
    pub fn parse(s: &str) -> Option<Proto> {
        let mut buf = [0u8; 32];
        let n = normalise(s, &mut buf)?;
        Some(match &buf[..n] {
            b"ll" => Proto::LL,
            b"ll128" => Proto::LL128,
            b"simple" => Proto::Simple,
            _ => return None,
        })
    }
}

/// NCCL's chunk size for one collective as a tuner sets it
/// (`getChunkSize`, tuner ABI v6+): bytes a channel moves per pipeline
/// step, or [`Chunk::NCCL`] to leave NCCL's own. One byte holds it (the
/// packed decision's byte 3, the trace record's byte 7): a small float of
/// 16-byte units, three mantissa bits, so every power of two from 16 bytes
/// and every 9..15 x 2^k (the 288 KiB and 18 KiB of published ladders,
/// LL128's 1920-byte grain) is exact, up to 1.875 GiB. Sizes between are
/// not representable: [`Chunk::from_bytes`] refuses them and
/// [`Chunk::at_most`] rounds down, so a table stores exactly what it asks.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Default)]
pub struct Chunk(u8);

impl Chunk {
    /// NCCL's own chunk size (code 0).
    pub const NCCL: Chunk = Chunk(0);
    /// Largest code: 15 x 2^23 units of 16 bytes (1.875 GiB), below
    /// NCCL's `int` chunk size limit.
    const MAX_CODE: u8 = 24 << 3 | 7;

    /// From its one-byte code; `None` for a code past the largest.
    #[inline]
    pub const fn from_code(code: u8) -> Option<Chunk> {
        if code > Chunk::MAX_CODE {
            None
        } else {
            Some(Chunk(code))
        }
    }

    /// Its one-byte code (0 for NCCL's).
    #[inline]
    pub const fn code(self) -> u8 {
        self.0
    }

    /// Whether this leaves NCCL's chunk size alone.
    #[inline]
    pub const fn is_nccl(self) -> bool {
        self.0 == 0
    }

    /// Bytes (0 for NCCL's): one load from a table worked out at compile time.
    #[inline]
    pub const fn bytes(self) -> u32 {
        Chunk::BYTES[self.0 as usize]
    }

    /// Bytes per code, worked out at compile time (getChunkSize answers
    /// with one load: decoding on the call took 9 instructions). 0 past
    /// [`Chunk::MAX_CODE`], which no `Chunk` holds; 256 entries, so a
    /// byte's index needs no bounds test.
    const BYTES: [u32; 256] = {
        let mut t = [0u32; 256];
        let mut c = 0;
        while c <= Chunk::MAX_CODE as usize {
            t[c] = Chunk::decode(c as u8);
            c += 1;
        }
        t
    };

    /// Code `e << 3 | m`: `m` units for `e` 0, else `(8 + m) << (e - 1)`
    /// units of 16 bytes.
    const fn decode(code: u8) -> u32 {
        let (e, m) = ((code >> 3) as u32, (code & 7) as u32);
        let units = if e == 0 { m } else { (8 + m) << (e - 1) };
        units * 16
    }

    /// The chunk of exactly `bytes` (0 = NCCL's); `None` when no code
    /// holds it.
    pub const fn from_bytes(bytes: u64) -> Option<Chunk> {
        let c = Chunk::at_most(bytes);
        if c.bytes() as u64 == bytes {
            Some(c)
        } else {
            None
        }
    }

    /// The largest chunk of at most `bytes` (NCCL's below 16 bytes).
    pub const fn at_most(bytes: u64) -> Chunk {
        let units = bytes / 16;
        if units < 8 {
            return Chunk(units as u8);
        }
        let l = 63 - units.leading_zeros(); // >= 3
        let e = l - 2;
        if e > (Chunk::MAX_CODE >> 3) as u32 {
            return Chunk(Chunk::MAX_CODE);
        }
        let m = (units >> (l - 3)) - 8;
        Chunk((e << 3) as u8 | m as u8)
    }

    /// Parses what `Display` writes: `512K`, `2M`, `1920B` (K and M are
    /// 1024 and 1024^2 bytes); `None` for no unit, 0 or a size no code
    /// holds.
    pub fn parse(s: &str) -> Option<Chunk> {
        let s = s.trim();
        let (digits, unit) = match s.as_bytes().last()? {
            b'K' | b'k' => (&s[..s.len() - 1], 1024),
            b'M' | b'm' => (&s[..s.len() - 1], 1024 * 1024),
            b'B' | b'b' => (&s[..s.len() - 1], 1),
            _ => return None,
        };
        let n: u64 = digits.parse().ok()?;
        let c = Chunk::from_bytes(n.checked_mul(unit)?)?;
        (!c.is_nccl()).then_some(c)
    }

    /// A byte count as a sweep's chunk is given (`DYNCC_SWEEP_CHUNK`,
    /// `dyncc plan --chunks`, a `chunk` label): `65536`, `64K`, `1M`,
    /// `1920B` (K and M are 1024 and 1024^2), any size, not only the ones
    /// a code holds ([`Proto::chunk_at_most`] rounds it per protocol);
    /// `None` for 0, no number, or more than NCCL's `int` chunk limit.
    pub fn parse_bytes(s: &str) -> Option<u64> {
        let s = s.trim();
        let (digits, unit) = match s.as_bytes().last()? {
            b'K' | b'k' => (&s[..s.len() - 1], 1024),
            b'M' | b'm' => (&s[..s.len() - 1], 1024 * 1024),
            b'B' | b'b' => (&s[..s.len() - 1], 1),
            _ => (s, 1),
        };
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let n = digits.parse::<u64>().ok()?.checked_mul(unit)?;
        (n > 0 && n <= i32::MAX as u64).then_some(n)
    }
}

impl core::fmt::Display for Chunk {
    /// `512K`, `2M`, `1920B`; `nccl` for NCCL's own.
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let b = self.bytes();
        if b == 0 {
            f.write_str("nccl")
        } else if b.is_multiple_of(1 << 20) {
            write!(f, "{}M", b >> 20)
        } else if b.is_multiple_of(1024) {
            write!(f, "{}K", b >> 10)
        } else {
            write!(f, "{b}B")
        }
    }
}

/// Whether chunk code `code` is NCCL's (0) or a size on protocol `proto`'s
/// grain (`Chunk::bytes() % Proto::chunk_grain() == 0`; any protocol
/// byte), without branches. In 16-byte units a code `e << 3 | m` (e >= 1)
/// is `(8 + m) << (e - 1)`: LL's grain is 1 unit (every code), Simple's 32
/// units (trailing zeros of `8 + m`, plus `e - 1`, at least 5), LL128's 120
/// = 15 x 8 units (`m` 7 and `e - 1` at least 3). Codes past 199 are none.
#[inline]
pub(crate) const fn chunk_on_grain(proto: u8, code: u8) -> bool {
    // Trailing zeros of 8 + m (m 0..7: 3, 0, 1, 0, 2, 0, 1, 0), by
    // comparisons only: the reader's rule scan checks four rules at once,
    // and a shift by a per-lane amount does not vectorise on baseline x86-64.
    let (e, m) = ((code >> 3) as u32, (code & 7) as u32);
    let tz = ((m & 1) == 0) as u32 + ((m & 3) == 0) as u32 + (m == 0) as u32;
    let simple = e + tz >= 6;
    let ll128 = (m == 7) & (e >= 4);
    let on = (proto == 0) | ((proto == 1) & ll128) | ((proto == 2) & simple);
    (code == 0) | ((code <= 199) & on)
}

impl Proto {
    /// The multiple NCCL rounds a chunk size down to (`ncclProtoGrainSize`:
    /// LL 16, LL128 1920 = 32 threads x 8 words / 16 x 15 x 8, Simple 512).
    pub const fn chunk_grain(self) -> u32 {
        match self {
            Proto::LL => 16,
            Proto::LL128 => 1920,
            Proto::Simple => 512,
        }
    }

    /// The largest chunk of at most `bytes` that this protocol runs as set
    /// (on its [`Proto::chunk_grain`]) and a table can store
    /// ([`Setting::with_chunk`] takes it); [`Chunk::NCCL`] below the
    /// grain. The plugin answers a sweep's chunk (`DYNCC_SWEEP_CHUNK`)
    /// with it and the compiler records that run's chunk with it, so what
    /// a sweep measured is what a table forces.
    pub const fn chunk_at_most(self, bytes: u64) -> Chunk {
        let mut code = Chunk::at_most(bytes).code();
        // At most 199 codes, walked once per communicator's init (or per
        // ingested run), never per call.
        while code > 0 && !chunk_on_grain(self as u8, code) {
            code -= 1;
        }
        Chunk(code)
    }
}

/// What the plugin sets for one collective: algorithm, protocol, channel
/// count (0 = NCCL's) and chunk size ([`Chunk::NCCL`] = NCCL's). One value
/// for every layer: a table's forced decision ([`crate::Decision::Force`]),
/// what a trace record says ran, the runtime's journal and bin words, and
/// the compiler's configurations.
///
/// A new knob is a field here, and it touches:
/// this type (the field, [`Setting::to_rule_bits`]/[`Setting::from_rule_bits`]
/// if tables store it, [`Setting::to_word`]/[`Setting::from_word`] and
/// [`Setting::WORD_BITS`], `Display`/`parse`, [`Setting::ran_as`]); the
/// trace format if traces record it (`trace.rs`, `FORMAT.md`); the ABI
/// callback that sets it (`runtime/src/plugin.rs`), the journal's answer
/// word ([`Setting::to_answer_word`]) and the bin key, whose budget assert
/// fails first (`runtime/src/trace/bins.rs`: no spare bit);
/// the compiler's partial setting (`compiler/record.rs::Config`,
/// `compiler/choice.rs::to_decision`), the report structs that spell the
/// setting out and their printers (README, "Layout", counts them), and the
/// sweep reader if sweeps vary it (`compiler/ingest/knobs.rs`).
///
/// The chunk is not in the runtime's word ([`Setting::to_word`]), whose
/// bin key has no spare bit; the journal holds the answered chunk beside
/// it ([`Setting::to_answer_word`]) and the bin key a 3-bit index of it
/// (`runtime/src/trace/bins.rs`). What NCCL ran is known from its profiler
/// events, which do not say the chunk: a trace's forced records carry the
/// chunk the plugin answered for the setting that ran as answered.
///
/// The fields are declared in the order the plugin's hot path wants them
/// in a decision's 4-byte word (`repr(C)`): the protocol first, whose
/// spare values hold [`Decision::Default`](crate::Decision), so one byte
/// compare tells a force; the channel count last, read with one shift that
/// also sets the flags its zero test needs. In the order (algorithm,
/// protocol, channels, chunk) getCollInfo took 83.0 / 84.0 instructions
/// per call (repeated / random inputs), 80.0 / 82.4 in this one. Settings
/// still sort as (algorithm, protocol, channels, chunk).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
#[repr(C)]
pub struct Setting {
    /// The protocol.
    pub proto: Proto,
    /// The algorithm.
    pub algo: Algo,
    /// Chunk size, [`Chunk::NCCL`] = NCCL's; when set, a multiple of the
    /// protocol's [`Proto::chunk_grain`] (what NCCL would run, up to its
    /// buffer's ceiling).
    pub chunk: Chunk,
    /// Channel count, 0 = NCCL's choice; at most [`MAX_CHANNELS`].
    pub channels: u8,
}

impl Ord for Setting {
    fn cmp(&self, o: &Setting) -> core::cmp::Ordering {
        let key = |s: &Setting| (s.algo, s.proto, s.channels, s.chunk);
        key(self).cmp(&key(o))
    }
}

impl PartialOrd for Setting {
    fn partial_cmp(&self, o: &Setting) -> Option<core::cmp::Ordering> {
        Some(self.cmp(o))
    }
}

impl Setting {
    /// Bits [`Setting::to_word`] uses (algorithm 3, protocol 2, channels 7).
    /// Each runtime word that packs a setting asserts its budget with it,
    /// so a new field here fails to build where a word has no room.
    pub const WORD_BITS: u32 = 12;

    /// Bits [`Setting::to_answer_word`] uses: the word and the chunk's
    /// one-byte code above it.
    pub const ANSWER_WORD_BITS: u32 = Setting::WORD_BITS + 8;

    /// Algorithm and protocol with NCCL's channel count and chunk size.
    pub const fn new(algo: Algo, proto: Proto) -> Setting {
        Setting {
            algo,
            proto,
            channels: 0,
            chunk: Chunk::NCCL,
        }
    }

    /// The same setting with `channels` (0 = NCCL's).
    pub const fn with_channels(self, channels: u8) -> Setting {
        Setting { channels, ..self }
    }

    /// The same setting with `chunk`; `None` when the chunk is not a
    /// multiple of the protocol's grain (NCCL would round it down, so the
    /// setting would not be what runs).
    pub const fn with_chunk(self, chunk: Chunk) -> Option<Setting> {
        // Bit arithmetic on the code, not a division: `from_rule_bits`
        // runs per rule when a table is specialised.
        if !chunk_on_grain(self.proto as u8, chunk.code()) {
            return None;
        }
        Some(Setting { chunk, ..self })
    }

    /// The same setting with NCCL's chunk size.
    pub const fn without_chunk(self) -> Setting {
        Setting {
            chunk: Chunk::NCCL,
            ..self
        }
    }

    /// The rule record's encoding: byte0 algorithm, byte1 protocol, byte2
    /// channels, byte3 the chunk's code (0 = NCCL's; the bytes `FORMAT.md`
    /// gives a forced decision).
    #[inline]
    pub const fn to_rule_bits(self) -> u32 {
        self.algo as u32
            | (self.proto as u32) << 8
            | (self.channels as u32) << 16
            | (self.chunk.code() as u32) << 24
    }

    /// Decodes [`Setting::to_rule_bits`]; `None` for an unknown algorithm
    /// or protocol, more than [`MAX_CHANNELS`] channels, or a chunk code
    /// past the largest or off the protocol's grain.
    #[inline]
    pub fn from_rule_bits(v: u32) -> Option<Setting> {
        let [a, p, ch, chunk] = v.to_le_bytes();
        if ch > MAX_CHANNELS {
            return None;
        }
        Setting::new(Algo::from_u8(a)?, Proto::from_u8(p)?)
            .with_channels(ch)
            .with_chunk(Chunk::from_code(chunk)?)
    }

    /// The runtime's encoding, in the low [`Setting::WORD_BITS`] bits:
    /// algorithm 9-11, protocol 7-8, channels 0-6. Ordered as the setting
    /// is (algorithm, then protocol, then channels). The journal word, the
    /// bin key and the trace writer's record key hold it shifted.
    #[inline]
    pub const fn to_word(self) -> u64 {
        (self.algo as u64) << 9 | (self.proto as u64) << 7 | (self.channels as u64 & 0x7f)
    }

    /// Decodes [`Setting::to_word`] (bits above [`Setting::WORD_BITS`]
    /// ignored); `None` for an algorithm or protocol NCCL does not number
    /// (the journal's "NCCL chose" mark among them) or too many channels.
    #[inline]
    pub const fn from_word(w: u64) -> Option<Setting> {
        let channels = (w & 0x7f) as u8;
        if channels > MAX_CHANNELS {
            return None;
        }
        let (Some(algo), Some(proto)) = (
            Algo::from_u8(((w >> 9) & 7) as u8),
            Proto::from_u8(((w >> 7) & 3) as u8),
        ) else {
            return None;
        };
        Some(Setting::new(algo, proto).with_channels(channels))
    }

    /// [`Setting::to_word`] with the chunk's code in bits 12-19: the whole
    /// answer, as the plugin's journal keeps it (NCCL asks for the chunk
    /// in a later callback, `getChunkSize`, whose answer is a function of
    /// the same answer).
    #[inline]
    pub const fn to_answer_word(self) -> u64 {
        self.to_word() | (self.chunk.code() as u64) << Setting::WORD_BITS
    }

    /// Decodes [`Setting::to_answer_word`] (bits above
    /// [`Setting::ANSWER_WORD_BITS`] ignored); `None` as
    /// [`Setting::from_word`], or for a chunk code past the largest or off
    /// the protocol's grain.
    #[inline]
    pub fn from_answer_word(w: u64) -> Option<Setting> {
        let code = ((w >> Setting::WORD_BITS) & 0xff) as u8;
        Setting::from_word(w)?.with_chunk(Chunk::from_code(code)?)
    }

    /// Whether `ran` is what this setting asked for: the same algorithm and
    /// protocol, and the same channel count when this one forces one. The
    /// chunk is not compared: what ran is known from NCCL's profiler
    /// events, which do not say the chunk.
    #[inline]
    pub const fn ran_as(&self, ran: &Setting) -> bool {
        self.algo as u8 == ran.algo as u8
            && self.proto as u8 == ran.proto as u8
            && (self.channels == 0 || self.channels == ran.channels)
    }

    /// Parses what `Display` writes: `tree/ll`, `ring/simple/8ch`,
    /// `ring/simple/8ch/512K`, `tree/ll128/1920B` (any spelling
    /// [`Algo::parse`] and [`Proto::parse`] take; `0ch` is NCCL's count;
    /// a chunk as [`Chunk::parse`] takes it, on the protocol's grain).
    pub fn parse(s: &str) -> Option<Setting> {
        let mut parts = s.trim().split('/').peekable();
        let algo = Algo::parse(parts.next()?)?;
        let proto = Proto::parse(parts.next()?)?;
        let mut setting = Setting::new(algo, proto);
        if let Some(c) = parts.peek().and_then(|c| c.strip_suffix("ch")) {
            let n: u8 = c.parse().ok()?;
            if n > MAX_CHANNELS {
                return None;
            }
            setting = setting.with_channels(n);
            parts.next();
        }
        if let Some(c) = parts.next() {
            setting = setting.with_chunk(Chunk::parse(c)?)?;
        }
        if parts.next().is_some() {
            return None;
        }
        Some(setting)
    }
}

impl core::fmt::Display for Setting {
    /// `tree/ll` (NCCL's channel count and chunk), `ring/simple/8ch`,
    /// `ring/simple/8ch/512K` or `ring/simple/512K`.
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}/{}", self.algo.name(), self.proto.name())?;
        if self.channels > 0 {
            write!(f, "/{}ch", self.channels)?;
        }
        if !self.chunk.is_nccl() {
            write!(f, "/{}", self.chunk)?;
        }
        Ok(())
    }
}

/// What dyncc knows of a communicator when it decides for one: what the
/// tuner's `init` is told (`nRanks`, `nNodes`) and the NCCL running it.
/// Context matching ([`ContextSpec::matches`](crate::ContextSpec::matches)),
/// [`Table::specialise`](crate::Table::specialise),
/// [`Table::find_context`](crate::Table::find_context) and
/// [`Table::lookup`](crate::Table::lookup) take one, so every caller (the
/// plugin's init, the C API's `dyncc_table_lookup`, `dyncc query`) passes
/// the communicator whole rather than numbers by position.
///
/// Built with [`Comm::new`] and the `with_` setters (`#[non_exhaustive]`:
/// no other crate spells its fields), so a field added here breaks no
/// caller. A new field (a role read from the profiler's `commName`, NVLink
/// domains) touches: this struct, `Comm::new`'s default and a `with_`
/// setter; `ContextSpec::matches` and the context record (`raw.rs`,
/// `table.rs::decode_context`, `build.rs`, `FORMAT.md`) if contexts gate
/// on it; `runtime/src/plugin.rs`'s init, which builds the plugin's one;
/// and the compiler's readers that see it (`cmd/query.rs`'s call). The
/// platform is not here: the plugin is not told it (the table's
/// `platform` metadata names what it was swept on).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Comm {
    /// Ranks in the communicator (`nRanks`).
    pub ranks: u64,
    /// Nodes it spans (`nNodes`).
    pub nodes: u64,
    /// The running NCCL's version code (`ncclGetVersion`: 2.23.4 is
    /// 22304), 0 when not known. No context gates on it (yet).
    pub nccl_version: u32,
}

impl Comm {
    /// `ranks` ranks on `nodes` nodes, the NCCL version not known.
    pub const fn new(ranks: u64, nodes: u64) -> Comm {
        Comm {
            ranks,
            nodes,
            nccl_version: 0,
        }
    }

    /// The same communicator run by NCCL `code` (`ncclGetVersion`'s integer).
    pub const fn with_nccl_version(self, code: u32) -> Comm {
        Comm {
            nccl_version: code,
            ..self
        }
    }

    /// Ranks per node (NCCL's `localRanks` when nodes are alike), rounded
    /// down; `ranks` when `nodes` is 0.
    pub const fn ranks_per_node(&self) -> u64 {
        match self.ranks.checked_div(self.nodes) {
            Some(ppn) => ppn,
            None => self.ranks,
        }
    }
}

/// What NCCL knows about a communicator and its machines that decides
/// which (algorithm, protocol) it can run: the shape, and the facts NCCL
/// finds at init (NVLS and CollNet support, NVSwitch, PAT, LL128).
///
/// The one statement of NCCL's rules (see [`Machine::refusal`]): `dyncc
/// plan` uses it to sweep only what runs, the simulator for what it models
/// and runs, and the runtime before it answers a v2 `getCollInfo` (which
/// NCCL 2.21 does not check). A caller that does not know a fact says
/// `true` ([`Machine::new`]): the rule then refuses only what the shape
/// rules out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Machine {
    /// Nodes in the communicator (`nNodes`).
    pub nodes: u32,
    /// Ranks (GPUs) per node (`nRanks / nNodes`; NCCL's `localRanks`).
    pub ranks_per_node: u32,
    /// NVLink SHARP works (`nvlsSupport`: NVSwitch with multicast, H100/B200 SXM).
    pub nvls: bool,
    /// A CollNet (SHARP) network plugin is in use (`collNetSupport`, `collnetEnable`).
    pub collnet: bool,
    /// A node's GPUs hang off an NVSwitch (CollNetDirect needs one).
    pub nvswitch: bool,
    /// PAT is enabled (NCCL 2.23+, `NCCL_PAT_ENABLE`, a host-side network).
    pub pat: bool,
    /// LL128 is enabled (NCCL's platform check when `NCCL_PROTO` leaves it on "auto").
    pub ll128: bool,
}

/// Why NCCL cannot run an (algorithm, protocol) for a collective on a
/// [`Machine`]: [`Machine::refusal`]'s answer, [`Refusal::why`] in words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// NCCL has no model of the algorithm for this collective (tuning.cc:
    /// Broadcast/Reduce run Ring; AllGather/ReduceScatter Ring, PAT, NVLS,
    /// CollNetDirect; AllReduce all but PAT).
    NotForCollective(Coll),
    /// NVLS, NVLSTree and PAT have only a Simple implementation.
    SimpleOnly,
    /// PAT runs with one rank per node.
    PatNeedsOneRankPerNode,
    /// NVLSTree is NVLS inside nodes and a tree across them.
    NvlsTreeNeedsNodes,
    /// NVLS multicasts between the GPUs of a node (`ncclNvlsInit`: `gpuCount < 2`).
    NvlsNeedsRanksPerNode,
    /// CollNet has only a Simple implementation.
    CollNetSimpleOnly,
    /// CollNet reduces in the network switches.
    CollNetNeedsNodes,
    /// NCCL runs NVLS across nodes only together with CollNet
    /// (`updateCollCostTable`); without it NVLSTree spans the nodes.
    NvlsAcrossNodesNeedsCollNet,
    /// NVLS AllGather/ReduceScatter reach at most `NCCL_MAX_NVLS_ARITY` (32) ranks per node.
    NvlsTooManyRanksPerNode,
    /// CollNet serves at most `NCCL_MAX_DIRECT_ARITY + 1` (8) ranks per node.
    CollNetTooManyRanksPerNode,
    /// The machine has no NVLink SHARP.
    NoNvls,
    /// The machine has no CollNet network.
    NoCollNet,
    /// CollNetDirect needs an NVSwitch in the node.
    NoNvSwitch,
    /// PAT is not enabled.
    NoPat,
    /// LL128 is disabled on this platform.
    NoLl128,
}

impl Refusal {
    /// The reason in words, for a user (`dyncc plan` prints it).
    pub const fn why(self) -> &'static str {
        match self {
            Refusal::NotForCollective(Coll::Broadcast | Coll::Reduce) => {
                "broadcast and reduce run Ring only"
            }
            Refusal::NotForCollective(Coll::AllGather | Coll::ReduceScatter) => {
                "allgather/reducescatter run Ring, PAT, NVLS or CollNetDirect only"
            }
            Refusal::NotForCollective(Coll::AllReduce) => "PAT does not run allreduce",
            Refusal::SimpleOnly => "NVLS, NVLSTree and PAT run the Simple protocol only",
            Refusal::PatNeedsOneRankPerNode => "PAT runs only with 1 GPU per node",
            Refusal::NvlsTreeNeedsNodes => "NVLSTree needs more than one node",
            Refusal::NvlsNeedsRanksPerNode => "NVLS needs several GPUs on an NVSwitch in each node",
            Refusal::CollNetSimpleOnly => "CollNet runs the Simple protocol only",
            Refusal::CollNetNeedsNodes => {
                "CollNet needs more than one node (it runs over the network)"
            }
            Refusal::NvlsAcrossNodesNeedsCollNet => {
                "NVLS runs across nodes only with CollNet (NVLSTree spans nodes without it)"
            }
            Refusal::NvlsTooManyRanksPerNode => {
                "NVLS runs allgather/reducescatter with at most 32 GPUs per node"
            }
            Refusal::CollNetTooManyRanksPerNode => "CollNet runs with at most 8 GPUs per node",
            Refusal::NoNvls => "NVLS needs NVSwitch with NVLink SHARP",
            Refusal::NoCollNet => "CollNet needs a CollNet (SHARP) network",
            Refusal::NoNvSwitch => "CollNetDirect needs an NVSwitch in each node",
            Refusal::NoPat => "PAT is not enabled",
            Refusal::NoLl128 => "LL128 is disabled on this platform",
        }
    }
}

impl Machine {
    /// A machine of this shape where every feature is assumed present: only
    /// the shape and NCCL's algorithm rules limit what runs.
    pub const fn new(nodes: u32, ranks_per_node: u32) -> Machine {
        Machine {
            nodes,
            ranks_per_node,
            nvls: true,
            collnet: true,
            nvswitch: true,
            pat: true,
            ll128: true,
        }
    }

    /// Why NCCL cannot run `algo` with `proto` for `coll` here, or `None`
    /// if it can (reference: tuning.cc's model table and enable pass,
    /// `updateCollCostTable`'s skips; ABI reference §3.5, §5.4, §5.5). The
    /// first reason that applies, in a fixed order.
    pub const fn refusal(&self, coll: Coll, algo: Algo, proto: Proto) -> Option<Refusal> {
        let simple = matches!(proto, Proto::Simple);
        let nvls_family = matches!(algo, Algo::Nvls | Algo::NvlsTree);
        let collnet_family = matches!(algo, Algo::CollNetDirect | Algo::CollNetChain);
        let modelled = match coll {
            Coll::Broadcast | Coll::Reduce => matches!(algo, Algo::Ring),
            Coll::AllGather | Coll::ReduceScatter => matches!(
                algo,
                Algo::Ring | Algo::Pat | Algo::Nvls | Algo::CollNetDirect
            ),
            Coll::AllReduce => !matches!(algo, Algo::Pat),
        };
        let r = if !modelled {
            Refusal::NotForCollective(coll)
        } else if (nvls_family || matches!(algo, Algo::Pat)) && !simple {
            Refusal::SimpleOnly
        } else if matches!(algo, Algo::Pat) && self.ranks_per_node != 1 {
            Refusal::PatNeedsOneRankPerNode
        } else if matches!(algo, Algo::NvlsTree) && self.nodes < 2 {
            Refusal::NvlsTreeNeedsNodes
        } else if nvls_family && self.ranks_per_node < 2 {
            Refusal::NvlsNeedsRanksPerNode
        } else if collnet_family && !simple {
            Refusal::CollNetSimpleOnly
        } else if collnet_family && self.nodes < 2 {
            Refusal::CollNetNeedsNodes
        } else if matches!(algo, Algo::Nvls) && self.nodes > 1 && !self.collnet {
            Refusal::NvlsAcrossNodesNeedsCollNet
        } else if nvls_family && !matches!(coll, Coll::AllReduce) && self.ranks_per_node > 32 {
            Refusal::NvlsTooManyRanksPerNode
        } else if collnet_family && self.ranks_per_node > 8 {
            Refusal::CollNetTooManyRanksPerNode
        } else if nvls_family && !self.nvls {
            Refusal::NoNvls
        } else if collnet_family && !self.collnet {
            Refusal::NoCollNet
        } else if matches!(algo, Algo::CollNetDirect) && !self.nvswitch {
            Refusal::NoNvSwitch
        } else if matches!(algo, Algo::Pat) && !self.pat {
            Refusal::NoPat
        } else if matches!(proto, Proto::LL128) && !self.ll128 {
            Refusal::NoLl128
        } else {
            return None;
        };
        Some(r)
    }

    /// Whether NCCL can run `algo` with `proto` for `coll` here.
    pub const fn runs(&self, coll: Coll, algo: Algo, proto: Proto) -> bool {
        self.refusal(coll, algo, proto).is_none()
    }
}

/// Bytes per element of a datatype as NCCL names it (`ncclDataTypeToString`
/// in the profiler's `Coll` events: `ncclFloat16`, `ncclBfloat16`, ...);
/// `None` for a name this crate does not know.
pub fn datatype_size(name: &[u8]) -> Option<u64> {
    Some(match name {
        b"ncclInt8" | b"ncclUint8" | b"ncclFloat8e4m3" | b"ncclFloat8e5m2" => 1,
        b"ncclFloat16" | b"ncclBfloat16" => 2,
        b"ncclInt32" | b"ncclUint32" | b"ncclFloat32" => 4,
        b"ncclInt64" | b"ncclUint64" | b"ncclFloat64" => 8,
        _ => return None,
    })
}

/// Lower-cases ASCII letters and digits into `buf`, dropping `_`, `-` and
/// spaces, so every spelling of a name compares equal. `None` if too long
/// or not ASCII.
fn normalise(s: &str, buf: &mut [u8; 32]) -> Option<usize> {
    let mut n = 0;
    for &b in s.trim().as_bytes() {
        match b {
            b'_' | b'-' | b' ' => {}
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' => {
                *buf.get_mut(n)? = b.to_ascii_lowercase();
                n += 1;
            }
            _ => return None,
        }
    }
    Some(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    extern crate alloc;
    use alloc::string::ToString;

    #[test]
    fn comm_derives_ranks_per_node_and_keeps_its_version() {
        let c = Comm::new(16, 2);
        assert_eq!((c.ranks, c.nodes, c.nccl_version), (16, 2, 0));
        assert_eq!(c.ranks_per_node(), 8);
        assert_eq!(Comm::new(7, 2).ranks_per_node(), 3, "rounded down");
        assert_eq!(Comm::new(4, 0).ranks_per_node(), 4, "no nodes: no division");
        let v = c.with_nccl_version(23007);
        assert_eq!((v.ranks, v.nodes, v.nccl_version), (16, 2, 23007));
    }

    #[test]
    fn setting_encodings_round_trip_and_rule_bits_match_the_format() {
        for algo in Algo::ALL {
            for proto in Proto::ALL {
                for channels in [0, 1, 8, MAX_CHANNELS] {
                    let s = Setting::new(algo, proto).with_channels(channels);
                    assert_eq!(
                        s.to_rule_bits(),
                        algo as u32 | (proto as u32) << 8 | (channels as u32) << 16
                    );
                    assert_eq!(Setting::from_rule_bits(s.to_rule_bits()), Some(s));
                    assert!(s.to_word() < 1 << Setting::WORD_BITS);
                    assert_eq!(Setting::from_word(s.to_word()), Some(s));
                    assert_eq!(Setting::parse(&s.to_string()), Some(s));
                }
            }
        }
        assert_eq!(Setting::from_rule_bits(0x0000_0701), None, "protocol 7");
        assert_eq!(Setting::from_rule_bits(65 << 16), None);
        assert_eq!(
            Setting::from_rule_bits(200 << 24),
            None,
            "past the largest chunk"
        );
        // A chunk is byte 3: 512 KiB on Simple (code 104), none on LL128's grain.
        let s = Setting::new(Algo::Ring, Proto::Simple).with_channels(8);
        let c = s.with_chunk(Chunk::from_bytes(512 << 10).unwrap()).unwrap();
        assert_eq!(c.to_rule_bits(), s.to_rule_bits() | 104 << 24);
        assert_eq!(Setting::from_rule_bits(c.to_rule_bits()), Some(c));
        assert_eq!(
            Setting::from_rule_bits(1 << 24 | 2 << 8),
            None,
            "16 B on Simple"
        );
        // The runtime's word has no chunk; the answer word has it above.
        assert_eq!(Setting::from_word(c.to_word()), Some(s));
        assert_eq!(c.to_answer_word(), c.to_word() | 104 << 12);
        assert!(c.to_answer_word() < 1 << Setting::ANSWER_WORD_BITS);
        assert_eq!(Setting::from_answer_word(c.to_answer_word()), Some(c));
        assert_eq!(Setting::from_answer_word(s.to_answer_word()), Some(s));
        // Off the protocol's grain (16 B on Simple), or past the largest.
        assert_eq!(Setting::from_answer_word(s.to_word() | 1 << 12), None);
        assert_eq!(Setting::from_answer_word(s.to_word() | 200 << 12), None);
        // The journal's "NCCL chose" mark (algorithm 7) is no setting.
        assert_eq!(Setting::from_word(7 << 9), None);
    }

    #[test]
    fn setting_words_sort_as_settings() {
        let mut all = std::vec::Vec::new();
        for algo in Algo::ALL {
            for proto in Proto::ALL {
                for channels in [0, 3, 64] {
                    all.push(Setting::new(algo, proto).with_channels(channels));
                }
            }
        }
        let mut by_word = all.clone();
        by_word.sort_by_key(|s| s.to_word());
        all.sort();
        assert_eq!(all, by_word);
    }

    /// The fields are laid out for the hot path (protocol first, channels
    /// last); the order is still algorithm, protocol, channels, chunk.
    #[test]
    fn settings_sort_by_algorithm_protocol_channels_then_chunk() {
        let tree_simple = Setting::new(Algo::Tree, Proto::Simple);
        let ring_ll = Setting::new(Algo::Ring, Proto::LL);
        assert!(tree_simple < ring_ll);
        let big_chunk = ring_ll
            .with_channels(4)
            .with_chunk(Chunk::from_bytes(1 << 20).unwrap())
            .unwrap();
        assert!(big_chunk < ring_ll.with_channels(8));
        assert!(ring_ll.with_channels(4) < big_chunk);
    }

    #[test]
    fn setting_prints_and_parses() {
        let s = Setting::new(Algo::Ring, Proto::Simple);
        assert_eq!(s.to_string(), "ring/simple");
        assert_eq!(s.with_channels(8).to_string(), "ring/simple/8ch");
        assert_eq!(
            Setting::parse("Ring/LL128/4ch"),
            Some(Setting::new(Algo::Ring, Proto::LL128).with_channels(4))
        );
        assert_eq!(Setting::parse("ring/simple/0ch"), Some(s));
        let k512 = Chunk::from_bytes(512 << 10).unwrap();
        let chunked = s.with_channels(8).with_chunk(k512).unwrap();
        assert_eq!(chunked.to_string(), "ring/simple/8ch/512K");
        assert_eq!(Setting::parse("ring/simple/8ch/512K"), Some(chunked));
        assert_eq!(Setting::parse("ring/simple/512k"), s.with_chunk(k512));
        let ll128 = Setting::parse("tree/ll128/1920B").unwrap();
        assert_eq!(
            (ll128.chunk.bytes(), ll128.to_string().as_str()),
            (1920, "tree/ll128/1920B")
        );
        for bad in [
            "ring",
            "ring/simple/65ch",
            "ring/simple/8",
            "ring/simple/8ch/x",
            "ring/simple/8ch/512K/1",
            "ring/simple/512B/8ch",
            "ring/simple/16B",
            "tree/ll128/1K",
            "ring/simple/0K",
            "ring/ll/17B",
            "foo/ll",
        ] {
            assert_eq!(Setting::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn sweep_chunk_bytes_parse_with_or_without_a_unit() {
        assert_eq!(Chunk::parse_bytes("65536"), Some(65536));
        assert_eq!(Chunk::parse_bytes(" 64K "), Some(65536));
        assert_eq!(Chunk::parse_bytes("1m"), Some(1 << 20));
        assert_eq!(Chunk::parse_bytes("1920B"), Some(1920));
        assert_eq!(Chunk::parse_bytes("300000"), Some(300_000));
        for bad in [
            "", "0", "0K", "K", "-4K", "64KB", "1.5M", "4G", "big", "3000M",
        ] {
            assert_eq!(Chunk::parse_bytes(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_protocols_chunk_at_most_is_on_its_grain_and_storable() {
        let k64 = 64u64 << 10;
        assert_eq!(Proto::Simple.chunk_at_most(k64).bytes(), 64 << 10);
        assert_eq!(Proto::LL.chunk_at_most(k64).bytes(), 64 << 10);
        // 64K is no multiple of 1920: 32 x 1920 is the largest storable below.
        assert_eq!(Proto::LL128.chunk_at_most(k64).bytes(), 61440);
        assert_eq!(Proto::LL128.chunk_at_most(1919), Chunk::NCCL);
        assert_eq!(Proto::Simple.chunk_at_most(511), Chunk::NCCL);
        assert_eq!(Proto::Simple.chunk_at_most(1000).bytes(), 512);
        for p in Proto::ALL {
            for b in [16u64, 1000, 1920, 65_536, 300_000, 1 << 20, u64::MAX] {
                let c = p.chunk_at_most(b);
                assert!(c.bytes() as u64 <= b);
                assert!(
                    Setting::new(Algo::Ring, p).with_chunk(c).is_some(),
                    "{p:?} {b}"
                );
            }
        }
    }

    #[test]
    fn chunk_codes_are_exact_and_monotone() {
        let mut last = 0;
        for code in 0..=Chunk::MAX_CODE {
            let c = Chunk::from_code(code).unwrap();
            let b = c.bytes();
            assert!(code == 0 || b > last, "code {code} grows");
            assert_eq!(Chunk::from_bytes(b as u64), Some(c), "{b}");
            assert_eq!(Chunk::at_most(b as u64 + 15), c);
            assert!(b <= i32::MAX as u32);
            assert_eq!(Chunk::parse(&c.to_string()), (code > 0).then_some(c));
            last = b;
        }
        assert_eq!(Chunk::from_code(Chunk::MAX_CODE + 1), None);
        assert_eq!(
            Chunk::at_most(u64::MAX),
            Chunk::from_code(Chunk::MAX_CODE).unwrap()
        );
        // The ladders' sizes are exact: 288 KiB, 18 KiB, 2 MiB, LL128's grain.
        for b in [288 << 10, 18 << 10, 2 << 20, 1920, 16, 512] {
            assert_eq!(Chunk::from_bytes(b).map(|c| c.bytes() as u64), Some(b));
        }
        assert_eq!(
            Chunk::from_bytes(17 << 10 | 512),
            None,
            "17.5 KiB: between codes"
        );
        assert_eq!(Chunk::at_most(17 << 10 | 512).bytes(), 16 << 10);
        assert_eq!(Chunk::from_bytes(8), None);
    }

    #[test]
    fn ran_as_checks_channels_only_when_forced() {
        let ran = Setting::new(Algo::Ring, Proto::LL).with_channels(16);
        assert!(Setting::new(Algo::Ring, Proto::LL).ran_as(&ran));
        assert!(ran.ran_as(&ran));
        assert!(!ran.with_channels(8).ran_as(&ran));
        assert!(!Setting::new(Algo::Tree, Proto::LL).ran_as(&ran));
        assert!(!Setting::new(Algo::Ring, Proto::Simple).ran_as(&ran));
    }

    /// The profiler's `Coll` events name what ran as NCCL's own strings
    /// (`ncclFuncToString`, `ncclAlgoToString`, `ncclProtoToString`,
    /// `ncclDatatypeToString`): these parsers are the only place that reads
    /// them.
    #[test]
    fn the_profilers_spellings_parse() {
        for (s, c) in [
            ("Broadcast", Coll::Broadcast),
            ("Reduce", Coll::Reduce),
            ("AllGather", Coll::AllGather),
            ("ReduceScatter", Coll::ReduceScatter),
            ("AllReduce", Coll::AllReduce),
        ] {
            assert_eq!(Coll::parse(s), Some(c), "{s}");
        }
        for (s, a) in [
            ("TREE", Algo::Tree),
            ("RING", Algo::Ring),
            ("COLLNET_DIRECT", Algo::CollNetDirect),
            ("COLLNET_CHAIN", Algo::CollNetChain),
            ("NVLS", Algo::Nvls),
            ("NVLS_TREE", Algo::NvlsTree),
            ("PAT", Algo::Pat),
        ] {
            assert_eq!(Algo::parse(s), Some(a), "{s}");
        }
        for (s, p) in [
            ("LL", Proto::LL),
            ("LL128", Proto::LL128),
            ("SIMPLE", Proto::Simple),
        ] {
            assert_eq!(Proto::parse(s), Some(p), "{s}");
        }
        assert_eq!(Coll::parse("SendRecv"), None);
        for (s, n) in [
            ("ncclInt8", 1),
            ("ncclFloat8e5m2", 1),
            ("ncclBfloat16", 2),
            ("ncclFloat32", 4),
            ("ncclUint64", 8),
        ] {
            assert_eq!(datatype_size(s.as_bytes()), Some(n), "{s}");
        }
        assert_eq!(datatype_size(b"ncclFloat128"), None);
    }

    #[test]
    fn names_round_trip() {
        for a in Algo::ALL {
            assert_eq!(Algo::parse(a.name()), Some(a));
            assert_eq!(Algo::parse(a.env_name()), Some(a));
            assert_eq!(Algo::from_u8(a as u8), Some(a));
        }
        for p in Proto::ALL {
            assert_eq!(Proto::parse(p.name()), Some(p));
            assert_eq!(Proto::parse(p.env_name()), Some(p));
        }
        for c in Coll::ALL {
            assert_eq!(Coll::parse(c.name()), Some(c));
            assert_eq!(Coll::from_nccl(c as u32), Some(c));
        }
        assert_eq!(Coll::parse("all_reduce_perf"), Some(Coll::AllReduce));
        assert_eq!(Algo::parse("NVLS_TREE"), Some(Algo::NvlsTree));
        assert_eq!(Algo::parse("COLLNET_DIRECT"), Some(Algo::CollNetDirect));
        assert_eq!(Algo::parse("default"), None);
    }

    /// Every (collective, algorithm) NCCL has a model for (tuning.cc), on a
    /// machine where nothing else stands in the way of that algorithm.
    #[test]
    fn each_collective_runs_the_algorithms_nccl_models_for_it() {
        for c in Coll::ALL {
            for a in Algo::ALL {
                // PAT needs 1 rank per node, NVLS several: pick the shape that suits.
                let ppn = if a == Algo::Pat { 1 } else { 8 };
                let m = Machine::new(2, ppn);
                let modelled = !matches!(
                    m.refusal(c, a, Proto::Simple),
                    Some(Refusal::NotForCollective(_))
                );
                let want = match c {
                    Coll::Broadcast | Coll::Reduce => a == Algo::Ring,
                    Coll::AllGather | Coll::ReduceScatter => {
                        matches!(a, Algo::Ring | Algo::Pat | Algo::Nvls | Algo::CollNetDirect)
                    }
                    Coll::AllReduce => a != Algo::Pat,
                };
                assert_eq!(modelled, want, "{c:?} {a:?}");
                assert_eq!(m.runs(c, a, Proto::Simple), want, "{c:?} {a:?}");
            }
        }
    }

    #[test]
    fn the_rule_table() {
        use Algo::*;
        use Proto::{Simple, LL, LL128};
        use Refusal::*;
        let m = Machine::new;
        let (ar, ag, rs, bc) = (
            Coll::AllReduce,
            Coll::AllGather,
            Coll::ReduceScatter,
            Coll::Broadcast,
        );
        let no_collnet = |n, ppn| Machine {
            collnet: false,
            ..m(n, ppn)
        };
        struct Case {
            machine: Machine,
            coll: Coll,
            algo: Algo,
            proto: Proto,
            want: Option<Refusal>,
        }
        let case = |machine, coll, algo, proto, want| Case {
            machine,
            coll,
            algo,
            proto,
            want,
        };
        #[rustfmt::skip]
        let cases = [
            case(m(1, 8), ar, Tree, LL, None),
            case(m(1, 8), ar, Ring, LL128, None),
            case(m(4, 8), bc, Tree, LL, Some(NotForCollective(bc))),
            case(m(4, 8), ag, Tree, Simple, Some(NotForCollective(ag))),
            case(m(4, 1), ar, Pat, Simple, Some(NotForCollective(ar))),
            // Simple only.
            case(m(1, 8), ar, Nvls, LL, Some(SimpleOnly)),
            case(m(2, 8), ar, NvlsTree, LL128, Some(SimpleOnly)),
            case(m(4, 1), ag, Pat, LL, Some(SimpleOnly)),
            case(m(2, 8), ar, CollNetChain, LL, Some(CollNetSimpleOnly)),
            case(m(2, 8), ag, CollNetDirect, LL128, Some(CollNetSimpleOnly)),
            // The shape.
            case(m(4, 1), ag, Pat, Simple, None),
            case(m(4, 2), rs, Pat, Simple, Some(PatNeedsOneRankPerNode)),
            case(m(1, 8), ar, NvlsTree, Simple, Some(NvlsTreeNeedsNodes)),
            case(m(2, 8), ar, NvlsTree, Simple, None),
            case(m(1, 8), ar, Nvls, Simple, None),
            case(m(4, 1), ar, Nvls, Simple, Some(NvlsNeedsRanksPerNode)),
            case(m(4, 1), ar, NvlsTree, Simple, Some(NvlsNeedsRanksPerNode)),
            case(m(1, 8), ar, CollNetDirect, Simple, Some(CollNetNeedsNodes)),
            case(m(2, 8), ar, CollNetDirect, Simple, None),
            case(m(2, 9), ar, CollNetChain, Simple, Some(CollNetTooManyRanksPerNode)),
            case(m(1, 33), ag, Nvls, Simple, Some(NvlsTooManyRanksPerNode)),
            case(m(1, 33), ar, Nvls, Simple, None),
            case(m(2, 8), ag, Nvls, Simple, None),
            case(no_collnet(2, 8), ar, Nvls, Simple, Some(NvlsAcrossNodesNeedsCollNet)),
            case(no_collnet(1, 8), ar, Nvls, Simple, None),
            case(no_collnet(2, 8), ar, NvlsTree, Simple, None),
            // The machine's features.
            case(Machine { nvls: false, ..m(1, 8) }, ar, Nvls, Simple, Some(NoNvls)),
            case(Machine { nvls: false, ..m(2, 8) }, ar, NvlsTree, Simple, Some(NoNvls)),
            case(no_collnet(2, 8), ar, CollNetChain, Simple, Some(NoCollNet)),
            case(Machine { nvswitch: false, ..m(2, 8) }, ar, CollNetDirect, Simple, Some(NoNvSwitch)),
            case(Machine { nvswitch: false, ..m(2, 8) }, ar, CollNetChain, Simple, None),
            case(Machine { pat: false, ..m(4, 1) }, ag, Pat, Simple, Some(NoPat)),
            case(Machine { ll128: false, ..m(1, 8) }, ar, Ring, LL128, Some(NoLl128)),
            case(Machine { ll128: false, ..m(1, 8) }, ar, Ring, LL, None),
        ];
        for (i, c) in cases.iter().enumerate() {
            assert_eq!(
                c.machine.refusal(c.coll, c.algo, c.proto),
                c.want,
                "case {i}: {:?} {:?} {:?} {:?}",
                c.machine,
                c.coll,
                c.algo,
                c.proto
            );
        }
    }

    /// Without a feature, only that feature's algorithms (or protocol) stop.
    #[test]
    fn a_missing_feature_refuses_only_its_own_algorithms() {
        let full = Machine::new(2, 8);
        /// A machine without one feature, and what that feature's absence stops.
        struct Without {
            machine: Machine,
            lost: fn(Algo, Proto) -> bool,
        }
        let cases = [
            Without {
                machine: Machine {
                    nvls: false,
                    ..full
                },
                lost: |a, _| matches!(a, Algo::Nvls | Algo::NvlsTree),
            },
            Without {
                machine: Machine {
                    collnet: false,
                    ..full
                },
                // NVLS across nodes stops with CollNet.
                lost: |a, _| matches!(a, Algo::CollNetDirect | Algo::CollNetChain | Algo::Nvls),
            },
            Without {
                machine: Machine {
                    nvswitch: false,
                    ..full
                },
                lost: |a, _| a == Algo::CollNetDirect,
            },
            Without {
                machine: Machine {
                    ll128: false,
                    ..full
                },
                lost: |_, p| p == Proto::LL128,
            },
        ];
        for Without { machine: m, lost } in cases {
            for c in Coll::ALL {
                for a in Algo::ALL {
                    for p in Proto::ALL {
                        let want = full.runs(c, a, p) && !lost(a, p);
                        assert_eq!(m.runs(c, a, p), want, "{m:?} {c:?} {a:?} {p:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn every_refusal_says_why_in_its_own_words() {
        use Refusal::*;
        let all = [
            NotForCollective(Coll::Broadcast),
            NotForCollective(Coll::AllGather),
            NotForCollective(Coll::AllReduce),
            SimpleOnly,
            PatNeedsOneRankPerNode,
            NvlsTreeNeedsNodes,
            NvlsNeedsRanksPerNode,
            CollNetSimpleOnly,
            CollNetNeedsNodes,
            NvlsAcrossNodesNeedsCollNet,
            NvlsTooManyRanksPerNode,
            CollNetTooManyRanksPerNode,
            NoNvls,
            NoCollNet,
            NoNvSwitch,
            NoPat,
            NoLl128,
        ];
        for (i, a) in all.iter().enumerate() {
            for b in &all[i + 1..] {
                assert_ne!(a.why(), b.why(), "{a:?} {b:?}");
            }
        }
    }
}
