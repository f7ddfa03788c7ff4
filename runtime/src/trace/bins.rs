//! The bins: one aggregate per (communicator, collective, size, setting,
//! source) of the process.
//!
//! Open addressing on one packed `u64` key ([`Key`]), claimed by CAS;
//! count, sums of `ln(ns)` and its square (f64 bits, CAS), min and max.
//! Full: the collective is counted as dropped. A finalized communicator's
//! bins are moved out (`take_bins`) and left as tombstones that later
//! keys take. Lock-free, no allocation on the event path.

use core::sync::atomic::{AtomicU64, AtomicU8, Ordering};

use dyncc_tables::trace::{Source, TraceRecord};
use dyncc_tables::{Chunk, Coll, Setting};

use super::{CHANGES, DROPPED_TABLE_FULL, MAX_COMMS, UNTIMED};

/// Distinct (communicator, collective, size, setting, source) per process:
/// 8192 records of 56 bytes stay well under the format's 1 MiB.
pub const BINS: usize = 8192;
/// Sizes of 2^36 bytes (64 GiB) and more do not fit the key and are
/// dropped (the source takes 3 bits since who-chose 4, `explore-nccl`; the
/// answered chunk's index 3 since the plugin sets chunks).
const MAX_KEY_BYTES: u64 = (1 << 36) - 1;
/// Linear probes before a bin insert gives up.
const PROBES: usize = 64;

pub(super) struct Bin {
    pub(super) key: AtomicU64,
    pub(super) count: AtomicU64,
    pub(super) sum_ln: AtomicU64,
    pub(super) sum_ln2: AtomicU64,
    /// u64::MAX - min, so a fetch_max over zeroed memory works.
    pub(super) min_inv: AtomicU64,
    pub(super) max: AtomicU64,
}

#[allow(clippy::declare_interior_mutable_const)]
pub(super) const BIN_EMPTY: Bin = Bin {
    key: AtomicU64::new(0),
    count: AtomicU64::new(0),
    sum_ln: AtomicU64::new(0),
    sum_ln2: AtomicU64::new(0),
    min_inv: AtomicU64::new(0),
    max: AtomicU64::new(0),
};
pub(super) static BIN_TABLE: [Bin; BINS] = [BIN_EMPTY; BINS];

/// Bit 63 of every bin key (and of no [`TOMBSTONE`]).
pub(super) const KEY_VALID: u64 = 1 << 63;

/// What ran, packed as a bin key: bit 63 set, comm 57-62, coll 54-56, the
/// setting 42-53 ([`Setting::to_word`]), source 39-41, the index of the
/// chunk the plugin answered 36-38 ([`chunk_index`]), nBytes 0-35.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Key(pub(super) u64);

const CHUNK_SHIFT: u32 = 36;
const SOURCE_SHIFT: u32 = CHUNK_SHIFT + 3;
const SETTING_SHIFT: u32 = SOURCE_SHIFT + 3;
const COLL_SHIFT: u32 = SETTING_SHIFT + Setting::WORD_BITS;
const COMM_SHIFT: u32 = COLL_SHIFT + 3;
// Every bit below the valid bit is spoken for: a wider setting must take
// its bits from the size field (MAX_KEY_BYTES) or widen the key.
const _: () = assert!(COMM_SHIFT + 6 == 63 && MAX_KEY_BYTES == (1 << CHUNK_SHIFT) - 1);
const _: () = assert!(MAX_COMMS <= 1 << 6);

/// The chunks the plugin answered in this process, by index: a bin key
/// holds the index (1-7; 0 is NCCL's chunk), not the one-byte code, as a
/// table forces a few chunk sizes. Claimed by CAS on first use, never
/// freed (a code, once here, keeps its index for the process).
static CHUNKS: [AtomicU8; CHUNK_SLOTS] = [const { AtomicU8::new(0) }; CHUNK_SLOTS];
const CHUNK_SLOTS: usize = 7;

/// The key index of `chunk`: 0 for NCCL's, else its slot plus one, claimed
/// if new. `None` when seven other chunks hold every slot. Lock-free; on
/// the profiler's event path only for a forced chunk, where a chunk seen
/// before is found by loads alone (no locked write per collective).
pub fn chunk_index(chunk: Chunk) -> Option<u8> {
    let code = chunk.code();
    if chunk.is_nccl() {
        return Some(0);
    }
    for (i, slot) in CHUNKS.iter().enumerate() {
        let mut held = slot.load(Ordering::Acquire);
        if held == 0 {
            held = match slot.compare_exchange(0, code, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => code,
                Err(c) => c,
            };
        }
        if held == code {
            return Some(i as u8 + 1);
        }
    }
    None
}

/// The chunk at key index `ix` ([`chunk_index`]).
fn chunk_at(ix: u8) -> Option<Chunk> {
    match ix {
        0 => Some(Chunk::NCCL),
        i => Chunk::from_code(CHUNKS.get(i as usize - 1)?.load(Ordering::Acquire)),
    }
}

impl Key {
    /// None when `n_bytes` does not fit (64 GiB or more), or `ran` has a
    /// chunk and seven others hold every index ([`chunk_index`]).
    pub fn new(comm: u8, coll: Coll, n_bytes: u64, ran: Setting, source: Source) -> Option<Key> {
        let ran = ran.with_channels(ran.channels.min(64));
        if n_bytes > MAX_KEY_BYTES || (comm as usize) >= MAX_COMMS {
            return None;
        }
        let chunk = chunk_index(ran.chunk)?;
        Some(Key(KEY_VALID
            | (comm as u64) << COMM_SHIFT
            | (coll as u64) << COLL_SHIFT
            | ran.to_word() << SETTING_SHIFT
            | (source as u64) << SOURCE_SHIFT
            | (chunk as u64) << CHUNK_SHIFT
            | n_bytes))
    }

    pub(super) fn comm(self) -> u8 {
        ((self.0 >> COMM_SHIFT) & 0x3f) as u8
    }

    pub(super) fn record(self, b: &Bin) -> Option<TraceRecord> {
        let v = self.0;
        let count = b.count.load(Ordering::Acquire);
        if count == 0 {
            return None;
        }
        Some(TraceRecord {
            comm: self.comm() as u16,
            coll: Coll::from_nccl(((v >> COLL_SHIFT) & 7) as u32)?,
            setting: Setting::from_word(v >> SETTING_SHIFT)?
                .with_chunk(chunk_at(((v >> CHUNK_SHIFT) & 7) as u8)?)?,
            source: Source::from_u8(((v >> SOURCE_SHIFT) & 7) as u8)?,
            n_bytes: v & MAX_KEY_BYTES,
            count,
            sum_ln: f64::from_bits(b.sum_ln.load(Ordering::Relaxed)),
            sum_ln2: f64::from_bits(b.sum_ln2.load(Ordering::Relaxed)),
            min_ns: u64::MAX - b.min_inv.load(Ordering::Relaxed),
            max_ns: b.max.load(Ordering::Relaxed),
        })
    }
}

pub(super) fn add_f64(a: &AtomicU64, x: f64) {
    let mut cur = a.load(Ordering::Relaxed);
    loop {
        let new = (f64::from_bits(cur) + x).to_bits();
        match a.compare_exchange_weak(cur, new, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return,
            Err(now) => cur = now,
        }
    }
}

/// A bin whose communicator finalized and whose record was moved out
/// ([`retire`]): not a key (bit 63 clear), passed over by lookups and
/// taken again by a new key.
pub(super) const TOMBSTONE: u64 = 1;
/// Claims a lookup retries when other threads took its free bin first.
pub(super) const CLAIM_TRIES: usize = 4;

/// Adds one collective of `ns` GPU nanoseconds to its bin.
///
/// The key's bin, else the first tombstone or empty bin of its probe run
/// (searched to the first empty bin, so a key is not claimed twice while
/// it is further on); a key claimed twice all the same (a retire racing a
/// claim) is merged by the writer.
pub fn aggregate(key: Key, ns: u64) {
    CHANGES.fetch_add(1, Ordering::Relaxed);
    let ns = ns.max(1);
    // Fibonacci hashing of the key.
    let start = (key.0.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 51) as usize;
    for _ in 0..CLAIM_TRIES {
        let mut free = None;
        for p in 0..PROBES {
            let i = (start + p) % BINS;
            let k = BIN_TABLE[i].key.load(Ordering::Acquire);
            if k == key.0 {
                add_to(&BIN_TABLE[i], ns);
                return;
            }
            if k == TOMBSTONE || k == 0 {
                free = free.or(Some((i, k)));
            }
            if k == 0 {
                break;
            }
        }
        let Some((i, was)) = free else { break };
        match BIN_TABLE[i]
            .key
            .compare_exchange(was, key.0, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => {
                add_to(&BIN_TABLE[i], ns);
                return;
            }
            Err(now) if now == key.0 => {
                add_to(&BIN_TABLE[i], ns);
                return;
            }
            Err(_) => {} // another key took it: look again
        }
    }
    DROPPED_TABLE_FULL.fetch_add(1, Ordering::Relaxed);
}

pub(super) fn add_to(b: &Bin, ns: u64) {
    let l = (ns as f64).ln();
    add_f64(&b.sum_ln, l);
    add_f64(&b.sum_ln2, l * l);
    b.min_inv.fetch_max(u64::MAX - ns, Ordering::Relaxed);
    b.max.fetch_max(ns, Ordering::Relaxed);
    // Last, so a reader that sees the count sees the rest (Release).
    b.count.fetch_add(1, Ordering::Release);
}

/// Counts a collective without usable timestamps.
pub fn untimed() {
    CHANGES.fetch_add(1, Ordering::Relaxed);
    UNTIMED.fetch_add(1, Ordering::Relaxed);
}

/// Moves communicator slot `comm`'s records out of the bins (it sends no
/// more events), leaving tombstones the next keys take.
pub(super) fn take_bins(comm: u8) -> Vec<TraceRecord> {
    let mut recs = Vec::new();
    for b in &BIN_TABLE {
        let k = b.key.load(Ordering::Acquire);
        if k & KEY_VALID == 0 || Key(k).comm() != comm {
            continue;
        }
        recs.extend(Key(k).record(b));
        // Zeroed before the key is freed (Release), so whoever claims the
        // bin next (Acquire) starts from zero.
        for a in [&b.count, &b.sum_ln, &b.sum_ln2, &b.min_inv, &b.max] {
            a.store(0, Ordering::Relaxed);
        }
        b.key.store(TOMBSTONE, Ordering::Release);
    }
    recs
}
