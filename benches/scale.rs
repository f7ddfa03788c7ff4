//! Compile at scale: sweeps of 10,000, 100,000 and 1,000,000 distinct
//! cells (every row its own cell, `gen_sweep::write_distinct_sweep`), each
//! read and compiled in a child process as `dyncc compile` does, three
//! times; printed per size: wall time (best and median), the child's peak
//! resident memory, and cells per second. Then `eval --cv all` of the
//! 100,000-cell sweep the same way, and the 1,000,350 distinct cells of
//! `gen_sweep::write_spread_sweep` (90 node counts in 5 grids: few grids,
//! many node counts each; issue 28). Not divan: peak memory is a whole
//! process's, so each run is its own process.
//!
//!     cargo bench --bench scale            # every size
//!     cargo bench --bench scale -- 100000  # one size
//!     cargo bench --bench scale -- spread  # the spread shape only
//!
//! The sweeps are written once to the temp directory and kept.

#[path = "support/gen_sweep.rs"]
#[allow(dead_code)]
mod gen_sweep;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use dyncc::eval::{cross_validate, CvMode};
use dyncc::ingest::{read_paths_folded, IngestOptions};
use dyncc::pipeline::{compile_dataset, CompileOptions};

const SIZES: [usize; 3] = [10_000, 100_000, 1_000_000];
const RUNS: usize = 3;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // A child: one compile (or cross-validation) of one file.
    if let [mode, path] = &args[..] {
        if mode == "--child-compile" || mode == "--child-cv" {
            child(mode == "--child-cv", Path::new(path));
            return;
        }
    }
    let spread_only = args.iter().any(|a| a == "spread");
    let sizes: Vec<usize> = match args.iter().find_map(|a| a.parse().ok()) {
        Some(n) => vec![n],
        None if spread_only => Vec::new(),
        None => SIZES.to_vec(),
    };
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "dyncc compile of distinct cells, {RUNS} runs each, {cores} cores, load average {}",
        load()
    );
    println!(
        "{:>10} {:>10} {:>10} {:>10} {:>12}",
        "cells", "best s", "median s", "peak MiB", "cells/s"
    );
    for &n in &sizes {
        let path = sweep(n);
        let runs = measure("--child-compile", &path);
        print_row(&n.to_string(), n, &runs);
    }
    if sizes.contains(&100_000) {
        let runs = measure("--child-cv", &sweep(100_000));
        print_row("cv all 100k", 100_000, &runs);
    }
    if spread_only || sizes.len() == SIZES.len() {
        let path = gen_sweep::generated("dyncc-bench-spread-90-nodes.csv", |f| {
            gen_sweep::write_spread_sweep(f)
        });
        let runs = measure("--child-compile", &path);
        print_row("1M spread", 1_000_350, &runs);
    }
    println!("(load average after: {})", load());
}

/// One measured child run.
struct Run {
    wall: Duration,
    peak_kib: i64,
}

fn print_row(what: &str, cells: usize, runs: &[Run]) {
    let mut walls: Vec<f64> = runs.iter().map(|r| r.wall.as_secs_f64()).collect();
    walls.sort_by(f64::total_cmp);
    let peak = runs.iter().map(|r| r.peak_kib).max().unwrap_or(0);
    println!(
        "{:>10} {:>10.2} {:>10.2} {:>10.0} {:>12.0}",
        what,
        walls[0],
        walls[walls.len() / 2],
        peak as f64 / 1024.0,
        cells as f64 / walls[walls.len() / 2]
    );
}

/// Runs this bench as a child `RUNS` times; wall time and the child's own
/// peak resident set (from `wait4`, so earlier runs do not count).
fn measure(mode: &str, path: &Path) -> Vec<Run> {
    let exe = std::env::current_exe().expect("the bench's own path");
    (0..RUNS)
        .map(|_| {
            let start = Instant::now();
            // Reaped by wait4 below, which also gives its own rusage.
            #[allow(clippy::zombie_processes)]
            let child = Command::new(&exe)
                .arg(mode)
                .arg(path)
                .spawn()
                .expect("start the child");
            let mut status = 0;
            // SAFETY: an all-zero rusage is a valid value for wait4 to fill.
            let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
            // SAFETY: the pid is our child's, not yet waited for; status and
            // usage point to live locals.
            let pid = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
            let wall = start.elapsed();
            assert!(
                pid > 0 && libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
                "the child run failed"
            );
            Run {
                wall,
                peak_kib: usage.ru_maxrss,
            }
        })
        .collect()
}

/// The child: as `dyncc compile FILE` (read folded, compile on every
/// core) or `dyncc eval --cv all FILE`, without writing.
fn child(cv: bool, path: &Path) {
    let ds = read_paths_folded(&[path.to_path_buf()], &IngestOptions::default()).expect("read");
    let opts = CompileOptions::default();
    if cv {
        for mode in CvMode::ALL {
            cross_validate(&ds, &opts, mode).expect("cross-validate");
        }
    } else {
        let c = compile_dataset(ds, &opts).expect("compile");
        assert!(!c.bytes.is_empty());
    }
}

/// The sweep of `n` distinct cells, written once.
fn sweep(n: usize) -> PathBuf {
    let path = std::env::temp_dir().join(format!("dyncc-bench-distinct-{n}.csv"));
    if !path.exists() {
        let tmp = path.with_extension("tmp");
        let mut f = std::io::BufWriter::new(std::fs::File::create(&tmp).expect("temp file"));
        gen_sweep::write_distinct_sweep(&mut f, n).expect("write the sweep");
        std::io::Write::flush(&mut f).expect("write the sweep");
        drop(f);
        std::fs::rename(&tmp, &path).expect("rename the sweep");
    }
    path
}

/// The 1-minute load average, for the record (other work shares the
/// machine).
fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "unknown".into())
}
