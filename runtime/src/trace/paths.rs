//! What ran that the tuner cannot choose, and the callers' tags: the
//! collectives a recording rank saw run as a symmetric kernel (profiler
//! v7's `isSymColl`) or on the copy engines (a `CeColl` event), counted
//! apart so none is ever read as a classic (algorithm, protocol) or
//! becomes evidence for one, and the `userTag`s (profiler v7) each
//! communicator's calls carried, so traces can tell calls apart by role.
//!
//! Fixed statics, lock-free, no allocation: the event callbacks only add;
//! the writer puts both in the trace file (format minor 1).

use core::sync::atomic::{AtomicU64, Ordering};

use dyncc_tables::trace::{
    TraceComm, TraceOtherPaths, TraceTag, TraceVariant, MAX_TRACE_TAGS, MAX_TRACE_VARIANTS,
    MAX_VARIANT_NAME,
};

use super::CHANGES;

/// A path NCCL ranks beside the classic pairs but no tuner can force
/// (its number indexes a journal's per-shape counts).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OtherPath {
    /// A symmetric kernel (`SYMK_*`; `kernelVariant` names it).
    Symmetric = 0,
    /// A copy-engine method (`CeColl`: no kernel, no algorithm).
    CopyEngine = 1,
}

static SYMMETRIC: AtomicU64 = AtomicU64::new(0);
static COPY_ENGINE: AtomicU64 = AtomicU64::new(0);

/// A recording rank saw a collective run on `path`.
pub fn other_path_ran(path: OtherPath) {
    match path {
        OtherPath::Symmetric => &SYMMETRIC,
        OtherPath::CopyEngine => &COPY_ENGINE,
    }
    .fetch_add(1, Ordering::Relaxed);
    CHANGES.fetch_add(1, Ordering::Relaxed);
}

/// The collectives seen on each path so far: (symmetric, copy engine).
pub fn other_paths() -> (u64, u64) {
    (
        SYMMETRIC.load(Ordering::Relaxed),
        COPY_ENGINE.load(Ordering::Relaxed),
    )
}

/// Distinct (communicator, tag) pairs kept per process (a file holds as
/// many); later ones are counted in [`tags_dropped`].
pub const MAX_TAGS: usize = MAX_TRACE_TAGS;

/// `comm_id + 1` (0: free) and the tag of each pair, claimed by a CAS on
/// the key; the tag is stored after, so a reader skips a 0 tag.
static TAG_KEYS: [AtomicU64; MAX_TAGS] = [const { AtomicU64::new(0) }; MAX_TAGS];
static TAG_VALUES: [AtomicU64; MAX_TAGS] = [const { AtomicU64::new(0) }; MAX_TAGS];
static TAGS_DROPPED: AtomicU64 = AtomicU64::new(0);

/// A call of communicator `comm_id` carried `tag` (0, untagged, is not
/// kept). Scans the pairs: a tagged call on a recording rank costs at most
/// [`MAX_TAGS`] loads, and nothing once the pair is there (the first
/// match returns).
pub fn note_tag(comm_id: u64, tag: u64) {
    if tag == 0 {
        return;
    }
    let key = comm_id.wrapping_add(1).max(1);
    for (k, v) in TAG_KEYS.iter().zip(&TAG_VALUES) {
        let mut have = k.load(Ordering::Acquire);
        if have == 0 {
            match k.compare_exchange(0, key, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => {
                    v.store(tag, Ordering::Release);
                    CHANGES.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                Err(now) => have = now,
            }
        }
        // A pair being claimed has its tag still 0 and is passed over: at
        // worst the same pair is kept twice (the reader keeps it once).
        if have == key && v.load(Ordering::Acquire) == tag {
            return;
        }
    }
    TAGS_DROPPED.fetch_add(1, Ordering::Relaxed);
}

/// The tags seen on communicator `comm_id`, in the order first seen
/// (duplicates of a racing claim removed by the caller).
pub fn tags_of(comm_id: u64) -> impl Iterator<Item = u64> {
    let key = comm_id.wrapping_add(1).max(1);
    TAG_KEYS
        .iter()
        .zip(&TAG_VALUES)
        .filter(move |(k, _)| k.load(Ordering::Acquire) == key)
        .map(|(_, v)| v.load(Ordering::Acquire))
        .filter(|&t| t != 0)
}

/// Distinct symmetric-kernel variants kept per process (a file holds as
/// many); collectives of later ones are counted in [`variants_dropped`].
pub const MAX_VARIANTS: usize = MAX_TRACE_VARIANTS;
const NAME_WORDS: usize = MAX_VARIANT_NAME / 8;

/// Per variant: a hash of its name (0: free), claimed by a CAS; its name
/// (NUL-padded, in words), stored after the claim; its collectives.
static VARIANT_KEYS: [AtomicU64; MAX_VARIANTS] = [const { AtomicU64::new(0) }; MAX_VARIANTS];
static VARIANT_NAMES: [[AtomicU64; NAME_WORDS]; MAX_VARIANTS] =
    [const { [const { AtomicU64::new(0) }; NAME_WORDS] }; MAX_VARIANTS];
static VARIANT_COUNTS: [AtomicU64; MAX_VARIANTS] = [const { AtomicU64::new(0) }; MAX_VARIANTS];
static VARIANTS_DROPPED: AtomicU64 = AtomicU64::new(0);

/// FNV-1a of `name`, never 0 (0 marks a free slot).
fn name_key(name: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in name {
        h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    h.max(1)
}

/// A recording rank saw a collective run symmetric kernel variant `name`
/// (profiler v7's `kernelVariant`). A name the format cannot hold (empty,
/// longer than [`MAX_VARIANT_NAME`], not printable ASCII) is not kept; the
/// collective is counted as symmetric all the same ([`other_path_ran`]).
/// Lock-free and allocation-free: at most [`MAX_VARIANTS`] loads once the
/// variant is known.
pub fn note_variant(name: &[u8]) {
    if TraceVariant::new(name, 1).is_none() {
        return;
    }
    let key = name_key(name);
    for (i, k) in VARIANT_KEYS.iter().enumerate() {
        let mut have = k.load(Ordering::Acquire);
        if have == 0 {
            match k.compare_exchange(0, key, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => {
                    let mut words = [0u8; MAX_VARIANT_NAME];
                    words[..name.len()].copy_from_slice(name);
                    for (w, c) in VARIANT_NAMES[i].iter().zip(words.chunks_exact(8)) {
                        let mut b = [0u8; 8];
                        b.copy_from_slice(c);
                        w.store(u64::from_le_bytes(b), Ordering::Release);
                    }
                    VARIANT_COUNTS[i].fetch_add(1, Ordering::AcqRel);
                    CHANGES.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                Err(now) => have = now,
            }
        }
        if have == key {
            VARIANT_COUNTS[i].fetch_add(1, Ordering::Relaxed);
            CHANGES.fetch_add(1, Ordering::Relaxed);
            return;
        }
    }
    VARIANTS_DROPPED.fetch_add(1, Ordering::Relaxed);
}

/// The variants seen so far, in the order first seen. A slot being
/// claimed (name not yet stored, or no collective counted yet) is passed
/// over: the next file holds it.
pub fn variants() -> impl Iterator<Item = TraceVariant> {
    (0..MAX_VARIANTS).filter_map(|i| {
        if VARIANT_KEYS[i].load(Ordering::Acquire) == 0 {
            return None;
        }
        let count = VARIANT_COUNTS[i].load(Ordering::Acquire);
        let mut name = [0u8; MAX_VARIANT_NAME];
        for (w, c) in VARIANT_NAMES[i].iter().zip(name.chunks_exact_mut(8)) {
            c.copy_from_slice(&w.load(Ordering::Acquire).to_le_bytes());
        }
        let len = name
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(MAX_VARIANT_NAME);
        TraceVariant::new(&name[..len], count).filter(|v| v.count > 0)
    })
}

/// Collectives of variants not kept because [`MAX_VARIANTS`] were.
pub fn variants_dropped() -> u64 {
    VARIANTS_DROPPED.load(Ordering::Relaxed)
}

/// What a trace file says of the other paths and tags (the writer, under
/// the process lock): the counts so far, and each of `comms`' tags once
/// (file order, at most the format's [`dyncc_tables::trace::MAX_TRACE_TAGS`]).
pub(super) fn file_block(
    comms: &[TraceComm<'_>],
) -> (TraceOtherPaths, Vec<TraceTag>, Vec<TraceVariant>) {
    let (symmetric, copy_engine) = other_paths();
    let mut tags: Vec<TraceTag> = Vec::new();
    for (i, c) in comms.iter().enumerate() {
        for tag in tags_of(c.comm_id) {
            let t = TraceTag {
                comm: i as u16,
                tag,
            };
            if !tags.contains(&t) && tags.len() < MAX_TRACE_TAGS {
                tags.push(t);
            }
        }
    }
    (
        TraceOtherPaths {
            symmetric,
            copy_engine,
        },
        tags,
        variants().collect(),
    )
}

/// Tagged pairs not kept because [`MAX_TAGS`] were.
pub fn tags_dropped() -> u64 {
    TAGS_DROPPED.load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Threads noting the same few tags keep each pair once per
    /// communicator, and untagged calls keep nothing.
    #[test]
    fn tags_are_kept_once_per_communicator() {
        let id = 0x7a95_0000_0000_0001;
        std::thread::scope(|s| {
            for t in 0..4u64 {
                s.spawn(move || {
                    for i in 0..1000u64 {
                        note_tag(id, [0, 11, 22, 33][((i + t) % 4) as usize]);
                        note_tag(id + 1, 44);
                    }
                });
            }
        });
        let mut got: Vec<u64> = tags_of(id).collect();
        got.sort_unstable();
        got.dedup();
        assert_eq!(got, [11, 22, 33]);
        assert_eq!(tags_of(id + 1).collect::<Vec<_>>(), [44]);
        assert_eq!(tags_of(id + 2).count(), 0);
    }

    /// Threads noting variants count every collective of each once-kept
    /// name; names the format cannot hold are not kept, and past
    /// [`MAX_VARIANTS`] names the collectives are counted as dropped (the
    /// only test that notes variants: the statics are the process's).
    #[test]
    fn variants_are_counted_per_name_and_bounded() {
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for i in 0..1000 {
                        note_variant([&b"AGxLL_R"[..], b"ARxLLMC_R"][i % 2]);
                        note_variant(b"not a name");
                        note_variant(b"");
                    }
                });
            }
        });
        let got: Vec<(String, u64)> = variants()
            .map(|v| (v.name().to_string(), v.count))
            .collect();
        let mut sorted = got.clone();
        sorted.sort();
        assert_eq!(
            sorted,
            [
                ("AGxLL_R".to_string(), 2000),
                ("ARxLLMC_R".to_string(), 2000)
            ]
        );
        for i in 0..MAX_VARIANTS {
            note_variant(format!("V{i}").as_bytes());
        }
        assert_eq!(variants().count(), MAX_VARIANTS);
        assert_eq!(variants_dropped(), 2);
    }
}
