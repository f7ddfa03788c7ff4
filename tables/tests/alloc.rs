//! Proves the reader allocates nothing: `from_bytes`, `lookup`,
//! `specialise`, `decide`, plan lookups, tree walks and metadata reads run
//! under a counting global allocator that fails the test on any allocation
//! made by this thread while counting is on.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::hint::black_box;

use dyncc_tables::{Coll, Comm, Table, NUM_FEATURES};

struct Counting;

thread_local! {
    // const-initialised: reading it never allocates.
    static ON: Cell<bool> = const { Cell::new(false) };
    static COUNT: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: forwards every call unchanged to the system allocator; the only
// extra work is bumping a thread-local counter, which does not allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if ON.with(Cell::get) {
            COUNT.with(|c| c.set(c.get() + 1));
        }
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if ON.with(Cell::get) {
            COUNT.with(|c| c.set(c.get() + 1));
        }
        // SAFETY: same contract as our caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations_during(f: impl FnOnce()) -> u64 {
    COUNT.with(|c| c.set(0));
    ON.with(|o| o.set(true));
    f();
    ON.with(|o| o.set(false));
    COUNT.with(Cell::get)
}

static GOLDEN: [&[u8]; 4] = [
    include_bytes!("../golden/allreduce_2x8_v1.0.tbl"),
    include_bytes!("../golden/multi_context_v1.0.tbl"),
    include_bytes!("../golden/empty_v1.0.tbl"),
    // Format 1.1, with an exploration plan (the runtime reads it at init).
    include_bytes!("../golden/allreduce_plan_v1.1.tbl"),
];

#[test]
fn the_counter_sees_allocations() {
    // Guards against a counter that can never fail the test below.
    let n = allocations_during(|| {
        black_box(vec![1u8; 100]);
    });
    assert_eq!(n, 1);
}

#[test]
fn reader_paths_allocate_nothing() {
    let n = allocations_during(|| {
        for bytes in GOLDEN {
            let t = Table::from_bytes(black_box(bytes)).unwrap();
            black_box((t.digest(), t.coverage(), t.meta("platform")));
            for (k, v) in t.meta_entries() {
                black_box((k, v));
            }
            for c in t.contexts() {
                for r in c.rules() {
                    black_box(r);
                }
            }
            for (ranks, nodes) in [(16, 2), (8, 1), (4, 1), (32, 2), (1, 1)] {
                let s = t.specialise(&Comm::new(ranks, nodes));
                for coll in 0..6u32 {
                    for shift in 0..64 {
                        let n = 1u64 << shift;
                        black_box(t.lookup(coll, &Comm::new(ranks, nodes), n, 1, 0));
                        black_box(s.decide(coll, n, 1, 0));
                        black_box(s.decide(coll, n, 2, 1));
                    }
                }
            }
            for nodes in [1, 2, 5, 8, 16, 17] {
                for bucket in 0..=255u8 {
                    let cell = t.plan_cell(0, nodes, bucket);
                    black_box((cell.get(0), cell.packed(cell.len().saturating_sub(1))));
                }
            }
            black_box(t.plan().map(|c| c.cost_bound).sum::<f32>());
            for coll in Coll::ALL {
                if let Some(tree) = t.tree(coll) {
                    black_box(tree.eval(&[20.0; NUM_FEATURES]));
                }
            }
            // Rejections allocate nothing either.
            black_box(Table::from_bytes(&bytes[..bytes.len() - 1]).unwrap_err());
        }
    });
    assert_eq!(n, 0, "the reader allocated {n} times");
}
