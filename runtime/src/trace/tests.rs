//! The recording state's tests (one process, so tests that count or
//! fill the process-wide pool or bins take turns).

use super::bins::*;
use super::journal::*;
use super::pool::*;
use super::writer::*;
use super::*;

use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::os::unix::ffi::OsStrExt as _;

use dyncc_tables::trace::{
    encode, Source, TraceHead, TraceRecord, MAX_TRACE_LEN, TRACE_RECORD_LEN,
};
use dyncc_tables::{Algo, Chunk, Coll, Decision, Proto, Setting};

/// The pool is process-wide: tests that fill or count it take turns.
static POOL_TESTS: std::sync::Mutex<()> = std::sync::Mutex::new(());
/// So are the bins: tests that count them or add many take turns.
static BIN_TESTS: std::sync::Mutex<()> = std::sync::Mutex::new(());

const FORCE: Decision = Decision::Force(Setting::new(Algo::Tree, Proto::LL).with_channels(4));

#[test]
fn a_journal_answer_is_found_by_size() {
    let j = journal_acquire(0xfeed).unwrap();
    j.record(4, 4096, false, Decision::Default, false);
    j.record(4, 8192, false, FORCE, true);
    assert_eq!(
        take_answer(0xfeed, Coll::AllReduce, 8192),
        Some(Answer {
            source: Source::Table,
            setting: Some(Setting::new(Algo::Tree, Proto::LL).with_channels(4)),
        })
    );
    assert_eq!(
        take_answer(0xfeed, Coll::AllReduce, 4096).map(|a| a.source),
        Some(Source::Nccl)
    );
    assert_eq!(take_answer(0xfeed, Coll::AllGather, 4096), None);
    // A forced cell NCCL had disabled (not applied) is NCCL's choice.
    j.record(4, 8192, false, FORCE, false);
    assert_eq!(
        take_answer(0xfeed, Coll::AllReduce, 8192).map(|a| a.source),
        Some(Source::Nccl)
    );
    journal_release(j);
}

/// An answer links one collective: a later one of the same size whose
/// tuner call the profiler cannot see (aggregated, or lost) must not
/// take it again. Failed on the old `find`, which kept answers.
#[test]
fn a_taken_answer_is_not_found_again() {
    let j = journal_acquire(0xfee1).unwrap();
    j.record(4, 4096, false, FORCE, true);
    assert!(take_answer(0xfee1, Coll::AllReduce, 4096).is_some());
    assert_eq!(take_answer(0xfee1, Coll::AllReduce, 4096), None);
    journal_release(j);
}

/// NCCL asks once for an aggregate (numPipeOps > 1) with the summed
/// size: that answer links no collective.
#[test]
fn an_aggregated_calls_answer_is_unknown() {
    let j = journal_acquire(0xfee2).unwrap();
    j.record(4, 8192, true, FORCE, true);
    j.record_explore(4, 65536, true, Decision::Default, true);
    assert_eq!(take_answer(0xfee2, Coll::AllReduce, 8192), None);
    assert_eq!(take_answer(0xfee2, Coll::AllReduce, 65536), None);
    journal_release(j);
}

/// Two calls of one size in one group (both answered before either
/// Coll event): the first event cannot tell which answer is its own,
/// so it is unknown; the second then has only its own. The old newest-
/// first `find` gave the first event the second call's answer.
#[test]
fn two_same_size_calls_in_one_group_are_not_swapped() {
    let j = journal_acquire(0xfee3).unwrap();
    j.record_explore(4, 4096, false, Decision::Default, true);
    j.record(4, 4096, false, FORCE, true);
    assert_eq!(take_answer(0xfee3, Coll::AllReduce, 4096), None);
    assert_eq!(
        take_answer(0xfee3, Coll::AllReduce, 4096).map(|a| a.source),
        Some(Source::Table)
    );
    journal_release(j);
}

/// Ranks of one communicator in one process (NCCL's init order per
/// rank, on one thread: profiler, then tuner): each tuner context owns
/// a ring, so another rank's answers never push rank 0's out (the old
/// shared ring held 16/N answers per rank), and the profiler reads rank
/// 0's ring only, so an answer rank 1 gave ahead of rank 0 is not taken.
#[test]
fn each_rank_owns_a_ring_and_the_profiler_reads_rank_0s() {
    link_rank0(0xfee4, 0);
    let r0 = journal_acquire(0xfee4).unwrap();
    link_rank0(0xfee4, 1);
    let r1 = journal_acquire(0xfee4).unwrap();
    assert!(!core::ptr::eq(r0, r1));
    r0.record(4, 4096, false, FORCE, true);
    for _ in 0..JOURNAL_LEN {
        r1.record(4, 1 << 20, false, Decision::Default, false);
    }
    assert_eq!(
        take_answer(0xfee4, Coll::AllReduce, 4096).map(|a| a.source),
        Some(Source::Table)
    );
    r1.record_explore(4, 4096, false, Decision::Default, true);
    assert_eq!(take_answer(0xfee4, Coll::AllReduce, 4096), None);
    journal_release(r0);
    journal_release(r1);
}

/// The tuner's init first (a NCCL that reorders them) links as well;
/// two rings of one id, neither known as rank 0's, give `unknown`.
#[test]
fn rank_0_links_in_either_init_order_and_unlinked_rings_are_unknown() {
    let r0 = journal_acquire(0xfee5).unwrap();
    link_rank0(0xfee5, 0);
    r0.record(4, 4096, false, FORCE, true);
    assert!(take_answer(0xfee5, Coll::AllReduce, 4096).is_some());
    journal_release(r0);
    let a = journal_acquire(0xfee6).unwrap();
    let b = journal_acquire(0xfee6).unwrap();
    a.record(4, 4096, false, FORCE, true);
    b.record(4, 4096, false, FORCE, true);
    assert_eq!(take_answer(0xfee6, Coll::AllReduce, 4096), None);
    journal_release(a);
    journal_release(b);
}

/// NCCL's order: Coll start, Coll stop, then (proxy thread) channel
/// starts and stops; the last reference aggregates first start to last
/// stop, whatever thread gives it back.
#[test]
fn a_collective_is_aggregated_when_its_last_channel_stops() {
    let _pool = POOL_TESTS.lock().unwrap_or_else(|e| e.into_inner());
    let key = Key::new(
        63,
        Coll::Broadcast,
        12345,
        Setting::new(Algo::Ring, Proto::Simple).with_channels(2),
        Source::Nccl,
    )
    .unwrap();
    let h = slot_take(key, 2).unwrap();
    assert_eq!(Handle::from_ptr(h.to_ptr()), Some(h));
    release(h); // Coll stop, long before the kernel ran
    let c0 = channel_start(h, 1_000).unwrap();
    let c1 = channel_start(h, 1_100).unwrap();
    assert!(
        channel_start(h, 1_200).is_none(),
        "a third channel is refused"
    );
    assert!(channel_start(c0, 1_200).is_none(), "a channel is no parent");
    channel_stop(c1, 5_000);
    release(c1);
    channel_stop(c0, 6_000);
    release(c0);
    assert!(h.open().is_none(), "closed after its last reference");
    let b = BIN_TABLE
        .iter()
        .find(|b| b.key.load(Ordering::Relaxed) == key.0)
        .unwrap();
    let r = key.record(b).unwrap();
    assert_eq!((r.count, r.min_ns, r.max_ns), (1, 5_000, 5_000));
    assert!((r.sum_ln - 5000f64.ln()).abs() < 1e-9);
}

/// A handle of a closed collective whose slot was taken again (NCCL's
/// late channel events of a collective that said nChannels 0, or of an
/// evicted one) must not touch the new collective.
#[test]
fn a_stale_handle_does_not_touch_the_slots_next_collective() {
    let _pool = POOL_TESTS.lock().unwrap_or_else(|e| e.into_inner());
    let key = |n| {
        Key::new(
            62,
            Coll::Reduce,
            n,
            Setting::new(Algo::Ring, Proto::LL).with_channels(1),
            Source::Nccl,
        )
        .unwrap()
    };
    let old = slot_take(key(100), 1).unwrap();
    let c = channel_start(old, 10).unwrap();
    channel_stop(c, 20);
    release(c);
    release(old);
    // Take slots until the same index comes round again.
    let mut held = Vec::new();
    let new = loop {
        let h = slot_take(key(200), 1).unwrap();
        if h.index == old.index {
            break h;
        }
        held.push(h);
    };
    assert_ne!(new.gen, old.gen);
    assert!(channel_start(old, 1).is_none());
    channel_stop(c, 1 << 40);
    release(c);
    release(old);
    assert_eq!(State::load(&POOL[new.index]).pending, 2, "untouched");
    let nc = channel_start(new, 1_000).unwrap();
    channel_stop(nc, 3_000);
    assert_eq!(POOL[new.index].first_start.load(Ordering::Relaxed), 1_000);
    assert_eq!(POOL[new.index].last_stop.load(Ordering::Relaxed), 3_000);
    for h in held.into_iter().chain([new]) {
        release(h);
    }
    release(nc);
    reclaim(62);
}

#[test]
fn handles_dyncc_did_not_make_are_refused() {
    for p in [
        0usize,
        8 << 4,
        0x1000,
        0b1010 | 1 << 4,
        1 << 60 | HANDLE_MARK,
    ] {
        assert_eq!(
            Handle::from_ptr(p as *mut core::ffi::c_void),
            None,
            "{p:#x}"
        );
    }
    let h = Handle {
        index: POOL_LEN - 1,
        gen: u32::MAX,
        channel: true,
    };
    assert_eq!(Handle::from_ptr(h.to_ptr()), Some(h));
}

/// A collective whose channels never all stop holds its slot; once
/// every slot is held, the next collective evicts the oldest (counted
/// as dropped) instead of every later one being dropped.
#[test]
fn a_full_pool_evicts_its_oldest_collective() {
    let _pool = POOL_TESTS.lock().unwrap_or_else(|e| e.into_inner());
    let key = Key::new(
        61,
        Coll::AllGather,
        64,
        Setting::new(Algo::Ring, Proto::LL).with_channels(1),
        Source::Nccl,
    )
    .unwrap();
    let free_before = POOL_USED
        .iter()
        .map(|w| w.load(Ordering::Relaxed).count_zeros() as usize)
        .sum::<usize>();
    let held: Vec<Handle> = (0..free_before)
        .map(|_| slot_take(key, 1).unwrap())
        .collect();
    let dropped = DROPPED_POOL_FULL.load(Ordering::Relaxed);
    let h = slot_take(key, 1).expect("a full pool evicts");
    assert_eq!(DROPPED_POOL_FULL.load(Ordering::Relaxed), dropped + 1);
    assert_eq!(h.index, held[0].index, "the oldest goes");
    assert!(held[0].open().is_none(), "its handle is stale");
    let h2 = slot_take(key, 1).unwrap();
    assert_eq!(h2.index, held[1].index);
    reclaim(61);
    assert!(h.open().is_none() && h2.open().is_none());
}

/// Something already at the temporary name (here a FIFO nobody reads,
/// which an open for writing waits on forever, inside
/// ncclCommDestroy) makes the write fail at once; nothing is renamed.
#[test]
fn a_fifo_at_the_temporary_name_fails_the_write_without_blocking() {
    let d = tempfile::tempdir().unwrap();
    let (path, tmp) = file_names(d.path(), "h", 7, 0xabc);
    let c = std::ffi::CString::new(tmp.as_os_str().as_bytes()).unwrap();
    // SAFETY: mkfifo with a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    let p = Process {
        dir: Some(d.path().to_path_buf()),
        host: "h".into(),
        abi: 6,
        pid: 7,
        nonce: 0xabc,
        ..Process::new()
    };
    let (at, e) = write_file(&p, &path, &tmp, 7).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::AlreadyExists, "{e}");
    assert_eq!(at, tmp, "the path that failed");
    assert!(!path.exists());
    assert!(tmp
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .ends_with("-7-0000000000000abc.trace.tmp"));
}

/// A finalized communicator's bins are moved out whole and become
/// tombstones: the same keys of the slot's next communicator start
/// from zero in one bin each (not merged with the old ones, not
/// claimed twice), and the table does not fill up with the dead.
#[test]
fn retired_bins_are_moved_out_and_taken_again() {
    let _bins = BIN_TESTS.lock().unwrap_or_else(|e| e.into_inner());
    let key = |n| {
        Key::new(
            60,
            Coll::AllReduce,
            n,
            Setting::new(Algo::Ring, Proto::LL).with_channels(2),
            Source::Nccl,
        )
        .unwrap()
    };
    let used = || {
        BIN_TABLE
            .iter()
            .filter(|b| b.key.load(Ordering::Relaxed) != 0)
            .count()
    };
    let before = used();
    for round in 0..50u64 {
        for n in 1..=20u64 {
            for _ in 0..n {
                aggregate(key(n * 1000 + round % 2), 100 * n);
            }
        }
        let mut recs = take_bins(60);
        recs.sort_by_key(|r| r.n_bytes);
        assert_eq!(recs.len(), 20, "round {round}");
        for (i, r) in recs.iter().enumerate() {
            let n = i as u64 + 1;
            assert_eq!((r.count, r.min_ns, r.max_ns), (n, 100 * n, 100 * n));
        }
    }
    // Two rounds' keys at most, whatever the other tests add.
    assert!(used() <= before + 40 + 3 * 64, "{} -> {}", before, used());
}

fn info(id: u64, nodes: u32) -> CommInfo {
    CommInfo {
        comm_id: id,
        n_nodes: nodes,
        n_ranks: 8,
        rank: 0,
        name: "c".into(),
    }
}

fn rec(n_bytes: u64, count: u64) -> TraceRecord {
    TraceRecord {
        comm: 0,
        coll: Coll::AllReduce,
        setting: Setting::new(Algo::Ring, Proto::Simple).with_channels(4),
        source: Source::Nccl,
        n_bytes,
        count,
        sum_ln: count as f64 * 15f64.ln(),
        sum_ln2: count as f64 * 15f64.ln().powi(2),
        min_ns: 10,
        max_ns: 20,
    }
}

/// Finalized communicators keep an entry of their own while the
/// budget allows; one with the id and shape of a finalized entry is
/// merged into it; past the budget a communicator merges into one of
/// its shape, and with none its collectives are counted as dropped.
/// Nothing is lost silently and the file stays under 1 MiB.
#[test]
fn finalized_communicators_are_kept_within_the_budget() {
    let mut p = Process::new();
    p.archive_comm(info(1, 1), vec![rec(64, 3), rec(128, 1)]);
    p.archive_comm(info(2, 1), vec![rec(64, 2)]);
    p.archive_comm(info(1, 1), vec![rec(64, 5), rec(256, 1)]);
    assert_eq!(p.finished.len(), 2);
    let of = |p: &Process, c: u16, n: u64| {
        p.archive
            .iter()
            .find(|r| r.comm == c && r.n_bytes == n)
            .map(|r| r.count)
    };
    assert_eq!(of(&p, 0, 64), Some(8));
    assert_eq!(of(&p, 0, 256), Some(1));
    assert_eq!(of(&p, 1, 64), Some(2));
    // Fill the budget with 2-node communicators of many records.
    let big: Vec<TraceRecord> = (0..1000).map(|i| rec(i * 8 + 8, 1)).collect();
    let mut id = 100;
    while p.archive_bytes + 1000 * TRACE_RECORD_LEN + 64 <= ARCHIVE_BUDGET {
        p.archive_comm(info(id, 2), big.clone());
        id += 1;
    }
    let entries = p.finished.len();
    p.archive_comm(info(id, 2), big.clone());
    assert_eq!(p.finished.len(), entries, "merged by shape");
    let dropped = DROPPED_TABLE_FULL.load(Ordering::Relaxed);
    p.archive_comm(info(id + 1, 64), big.clone());
    assert_eq!(p.finished.len(), entries, "no 64-node entry to merge into");
    assert!(DROPPED_TABLE_FULL.load(Ordering::Relaxed) >= dropped + 1000);
    assert!(p.archive_bytes <= ARCHIVE_BUDGET);
    let comms: Vec<_> = p.finished.iter().map(CommInfo::file_entry).collect();
    let head = TraceHead {
        profiler_abi: 6,
        ..TraceHead::default()
    };
    let bytes = encode(&head, &comms, &p.archive).unwrap();
    assert!(bytes.len() <= MAX_TRACE_LEN);
}

/// One communicator finalizing (its bins moved out, tombstones left)
/// while another records on two threads: the other loses and gains
/// nothing (a key claimed twice in the race is merged, as the writer
/// does), and each retire moves out exactly what was added.
#[test]
fn retiring_one_communicator_while_another_records_loses_nothing() {
    let _bins = BIN_TESTS.lock().unwrap_or_else(|e| e.into_inner());
    let key = |comm, n| {
        Key::new(
            comm,
            Coll::Broadcast,
            n,
            Setting::new(Algo::Tree, Proto::LL128).with_channels(8),
            Source::Table,
        )
        .unwrap()
    };
    const PER_THREAD: u64 = 30_000;
    const KEYS: u64 = 300;
    let writers: Vec<_> = (0..2)
        .map(|_| {
            std::thread::spawn(move || {
                for i in 0..PER_THREAD {
                    aggregate(key(57, 64 * (i % KEYS + 1)), 1000);
                }
            })
        })
        .collect();
    let retirer = std::thread::spawn(move || {
        for round in 0..100u64 {
            for n in 0..KEYS {
                aggregate(key(56, 8 * (n + round % 3 + 1)), 7);
            }
            let recs = take_bins(56);
            assert_eq!(recs.iter().map(|r| r.count).sum::<u64>(), KEYS);
        }
    });
    for w in writers {
        w.join().unwrap();
    }
    retirer.join().unwrap();
    let mut per_key: std::collections::HashMap<u64, u64> = std::collections::HashMap::new();
    for b in &BIN_TABLE {
        let k = b.key.load(Ordering::Acquire);
        if k & KEY_VALID != 0 && Key(k).comm() == 57 {
            *per_key.entry(k).or_default() += b.count.load(Ordering::Acquire);
        }
    }
    assert_eq!(per_key.len() as u64, KEYS);
    assert!(per_key.values().all(|&c| c == 2 * PER_THREAD / KEYS));
    assert_eq!(
        take_bins(57).iter().map(|r| r.count).sum::<u64>(),
        2 * PER_THREAD
    );
}

/// The header names the platform and GPU of the table that ran (its
/// metadata), so that the compiler can tell another cluster's traces.
#[test]
fn the_trace_header_names_the_tables_platform_and_gpu() {
    let d = tempfile::tempdir().unwrap();
    let (path, tmp) = file_names(d.path(), "h", 8, 0xabd);
    let p = Process {
        dir: Some(d.path().to_path_buf()),
        host: "h".into(),
        job: String::new(),
        nccl_version: 23007,
        abi: 6,
        table_digest: Some(0x42),
        platform: "dgx-h100".into(),
        gpu: "NVIDIA H100 80GB HBM3".into(),
        sweep: Some(0x5eed),
        pid: 8,
        nonce: 0xabd,
        ..Process::new()
    };
    write_file(&p, &path, &tmp, 8).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    let t = dyncc_tables::Trace::from_bytes(&bytes).unwrap();
    assert_eq!(t.head().platform, "dgx-h100");
    assert_eq!(t.head().gpu, "NVIDIA H100 80GB HBM3");
    assert_eq!(t.head().sweep, Some(0x5eed));
}

/// Concurrency: eviction under contention. The pool is full of
/// collectives that never finish; four threads take slots at once (each
/// take evicts the oldest, racing the others' evictions), run their
/// channels and close them, while their own handles can be evicted under
/// them. Every take is a handle or counted as dropped, every collective
/// ends once (aggregated, evicted or untimed), and no slot leaks: after
/// the communicator is reclaimed the pool has as many free slots as
/// before.
#[test]
fn eviction_under_contention_loses_no_slot_and_counts_every_collective() {
    let _pool = POOL_TESTS.lock().unwrap_or_else(|e| e.into_inner());
    const COMM: u8 = 54;
    let key = Key::new(
        COMM,
        Coll::ReduceScatter,
        4 << 20,
        Setting::new(Algo::Ring, Proto::Simple).with_channels(2),
        Source::Nccl,
    )
    .unwrap();
    let free = || {
        POOL_USED
            .iter()
            .map(|w| w.load(Ordering::Acquire).count_zeros() as usize)
            .sum::<usize>()
    };
    let free_before = free();
    let held: Vec<Handle> = (0..free_before)
        .map(|_| slot_take(key, 2).unwrap())
        .collect();
    let dropped = DROPPED_POOL_FULL.load(Ordering::Relaxed);
    const THREADS: u64 = 4;
    const PER_THREAD: u64 = 3_000;
    let finish = |h: Handle, t0: u64| {
        let chans: Vec<_> = (0..2).filter_map(|_| channel_start(h, t0)).collect();
        for c in &chans {
            channel_stop(*c, t0 + 500);
            release(*c);
        }
        (chans.len() == 2) as u64
    };
    let done: Vec<_> = (0..THREADS)
        .map(|_| {
            std::thread::spawn(move || {
                let (mut closed, mut open) = (0u64, std::collections::VecDeque::new());
                for i in 0..PER_THREAD {
                    // Two taken for every one finished: the pool stays
                    // full, so takes keep evicting (the held ones, the
                    // other threads' and this thread's own queued ones).
                    if let Some(h) = slot_take(key, 2) {
                        release(h); // the Coll stop comes first on NCCL
                        open.push_back(h);
                    }
                    if i % 2 == 1 {
                        if let Some(p) = open.pop_front() {
                            closed += finish(p, 1_000);
                        }
                    }
                }
                closed + open.into_iter().map(|p| finish(p, 1_000)).sum::<u64>()
            })
        })
        .collect();
    let closed: u64 = done.into_iter().map(|j| j.join().unwrap()).sum();
    let held_open = held.iter().filter(|h| h.open().is_some()).count() as u64;
    reclaim(COMM);
    assert!(held.iter().all(|h| h.open().is_none()));
    assert_eq!(free(), free_before, "no slot leaked");
    let timed = BIN_TABLE
        .iter()
        .find(|b| b.key.load(Ordering::Acquire) == key.0)
        .map_or(0, |b| b.count.load(Ordering::Acquire));
    let evicted = DROPPED_POOL_FULL.load(Ordering::Relaxed) - dropped;
    assert!(evicted > 0, "the full pool evicted");
    assert!(
        timed <= closed,
        "only collectives whose channels all ran are timed"
    );
    // Each take ends once: aggregated, or dropped (evicted or refused);
    // each held collective was evicted or is still open (reclaimed).
    assert_eq!(
        timed + evicted,
        THREADS * PER_THREAD + held.len() as u64 - held_open,
        "timed {timed} evicted {evicted} held open {held_open}"
    );
    let b = BIN_TABLE
        .iter()
        .find(|b| b.key.load(Ordering::Acquire) == key.0)
        .unwrap();
    let r = key.record(b).unwrap();
    assert_eq!(
        (r.min_ns, r.max_ns),
        (500, 500),
        "first channel start to last channel stop (all alike here: a stale \
         channel stop racing an eviction may move one timestamp of the next \
         occupant, a documented loss on a full pool)"
    );
    take_bins(COMM);
}

/// Concurrency: a flush during aggregation. Two threads add collectives
/// while a third writes the trace file over and over: every file is
/// complete and valid (no torn record: count, sums, minimum and maximum of
/// one bin read while it changes still validate), counts never go back
/// between files, and the last file after the adders stop holds them all.
#[test]
fn a_flush_during_aggregation_writes_valid_files_that_never_go_back() {
    let _bins = BIN_TESTS.lock().unwrap_or_else(|e| e.into_inner());
    const COMM: u8 = 55;
    let d = tempfile::tempdir().unwrap();
    let mut p = Process {
        dir: Some(d.path().to_path_buf()),
        host: "h".into(),
        abi: 6,
        ..Process::new()
    };
    p.live[COMM as usize] = Some(info(0x55, 2));
    let key = |n: u64| {
        Key::new(
            COMM,
            Coll::AllReduce,
            n,
            Setting::new(Algo::Tree, Proto::LL).with_channels(4),
            Source::Table,
        )
        .unwrap()
    };
    const PER_THREAD: u64 = 20_000;
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    // Files written so far: the adders wait for some at the start and
    // halfway, so files are written while they add, however fast they are.
    let written = std::sync::Arc::new(AtomicUsize::new(0));
    let adders: Vec<_> = (0..2u64)
        .map(|t| {
            let written = written.clone();
            std::thread::spawn(move || {
                for i in 0..PER_THREAD {
                    if i == 0 || i == PER_THREAD / 2 {
                        let want = if i == 0 { 1 } else { 3 };
                        while written.load(Ordering::Acquire) < want {
                            std::thread::yield_now();
                        }
                    }
                    aggregate(key(1024 << (i % 4)), 100 + (i * 7 + t) % 900);
                }
            })
        })
        .collect();
    let flusher = {
        let stop = stop.clone();
        let written = written.clone();
        let dir = d.path().to_path_buf();
        std::thread::spawn(move || {
            let (path, tmp) = file_names(&dir, "h", 9, 0x55);
            let mut last = 0u64;
            let mut files = 0;
            loop {
                let finished = stop.load(Ordering::Acquire);
                write_file(&p, &path, &tmp, 9).expect("a file written mid-aggregation is valid");
                let bytes = std::fs::read(&path).unwrap();
                let t = dyncc_tables::Trace::from_bytes(&bytes).unwrap();
                let n: u64 = t.records().map(|r| r.count).sum();
                assert!(n >= last, "counts went back: {n} < {last}");
                for r in t.records() {
                    assert!(100 <= r.min_ns && r.max_ns < 1_000, "{r:?}");
                }
                last = n;
                files += 1;
                written.store(files, Ordering::Release);
                if finished {
                    return (last, files);
                }
            }
        })
    };
    for a in adders {
        a.join().unwrap();
    }
    stop.store(true, Ordering::Release);
    let (last, files) = flusher.join().unwrap();
    assert!(files > 3);
    assert_eq!(last, 2 * PER_THREAD, "the last file holds every collective");
    take_bins(COMM);
}

/// Concurrency: the tuner publishes into its ring while the profiler
/// takes from it (NCCL's tuner and proxy threads). Every answer taken is
/// one that was written for that size (never a torn or mixed value), and
/// no answer is taken twice.
#[test]
fn a_ring_written_while_taken_gives_only_written_answers_once() {
    let j = journal_acquire(0xfee7).unwrap();
    const CALLS: usize = 50_000;
    let writer = std::thread::spawn(move || {
        for i in 0..CALLS {
            // Size i % 8 + 1 KiB: forced at odd sizes, NCCL's at even ones.
            let n = 1024 * (i % 8 + 1);
            let forced = (i % 8) % 2 == 1;
            j.record(
                4,
                n,
                false,
                if forced { FORCE } else { Decision::Default },
                forced,
            );
        }
    });
    let mut taken = 0usize;
    while !writer.is_finished() || taken == 0 {
        for k in 0..8usize {
            if let Some(a) = take_answer(0xfee7, Coll::AllReduce, 1024 * (k as u64 + 1)) {
                let want = if k % 2 == 1 {
                    Source::Table
                } else {
                    Source::Nccl
                };
                assert_eq!(a.source, want, "size {k}: {a:?}");
                if want == Source::Table {
                    assert_eq!(
                        a.setting,
                        Some(Setting::new(Algo::Tree, Proto::LL).with_channels(4))
                    );
                }
                taken += 1;
            }
        }
    }
    writer.join().unwrap();
    assert!(taken <= CALLS);
    journal_release(j);
}

/// Who-chose 4 (`explore-nccl`, exploration left the choice to NCCL) needs
/// a third source bit in the bin key: with two, it ran into the channel
/// bits and the record was lost (no `explore-nccl` record reached the
/// trace). The key keeps it, 64 channels and the largest size it holds.
#[test]
fn a_bin_key_keeps_explore_nccl_beside_its_channels() {
    let most = (1u64 << 36) - 1;
    let k = Key::new(
        3,
        Coll::AllReduce,
        most,
        Setting::new(Algo::Ring, Proto::Simple).with_channels(64),
        Source::ExploreNccl,
    )
    .unwrap();
    let b = BIN_EMPTY;
    b.count.store(1, Ordering::Relaxed);
    let r = k.record(&b).unwrap();
    assert_eq!(
        (r.source, r.setting.channels, r.n_bytes, r.comm),
        (Source::ExploreNccl, 64, most, 3)
    );
    assert!(Key::new(
        3,
        Coll::AllReduce,
        most + 1,
        Setting::new(Algo::Ring, Proto::Simple).with_channels(1),
        Source::Nccl
    )
    .is_none());
}

/// Issue 41: a trace's forced records said NCCL's chunk whatever chunk
/// the plugin had answered (the bin key had no room), so a chunked force
/// was measured as the same setting without one. The key holds the
/// answered chunk's index: a record carries the chunk, a chunk already
/// seen keeps its index, and once seven chunks hold every index an eighth
/// gets no key (the profiler then records the collective as `Unknown`).
#[test]
fn a_bin_key_keeps_the_chunk_the_plugin_answered() {
    let ring = Setting::new(Algo::Ring, Proto::Simple).with_channels(8);
    let chunk = |k: u64| Chunk::from_bytes(k << 10).unwrap();
    let key = |s: Setting| Key::new(5, Coll::AllGather, 1 << 20, s, Source::Table);
    let b = BIN_EMPTY;
    b.count.store(1, Ordering::Relaxed);
    let k512 = ring.with_chunk(chunk(512)).unwrap();
    let r = key(k512).unwrap().record(&b).unwrap();
    assert_eq!(r.setting, k512);
    assert_ne!(key(k512), key(ring), "a chunk is its own record");
    assert_eq!(key(ring).unwrap().record(&b).unwrap().setting, ring);
    // Fill every index (some may be taken by the chunk above already).
    let mut held = vec![];
    for k in [64, 128, 256, 1024, 2048, 4096, 8192, 16384] {
        if let Some(k) = key(ring.with_chunk(chunk(k)).unwrap()) {
            held.push(k);
        }
    }
    assert_eq!(held.len(), 6, "seven indices: 512 KiB and six more");
    assert!(key(ring.with_chunk(chunk(32768)).unwrap()).is_none());
    assert_eq!(key(k512).unwrap().record(&b).unwrap().setting, k512);
    assert_eq!(chunk_index(Chunk::NCCL), Some(0));
}
