//! Writes a synthetic sweep CSV of N rows, for measuring compile time and
//! peak memory on large inputs (README, "Performance"):
//!
//!     cargo run --release --example gen_sweep -- 1000000 /tmp/sweep-1m.csv
//!     cargo run --release --example gen_sweep -- 1000000 /tmp/sweep-1m-distinct.csv --distinct
//!     cargo run --release --example gen_sweep -- 0 /tmp/sweep-1m-spread.csv --spread
//!     /usr/bin/time -v target/release/dyncc compile /tmp/sweep-1m.csv -o /tmp/1m.tbl
//!
//! Without `--distinct` the rows repeat 38,850 distinct cells (many repeats
//! of one sweep); with it every row is its own cell (many shapes). With
//! `--spread` (the row count is ignored): 1,000,350 distinct cells over 90
//! node counts in 5 grids (one ranks per node).

// `generated` (the benches' files on disk) is not used here.
#[path = "../benches/support/gen_sweep.rs"]
#[allow(dead_code)]
mod gen_sweep;

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let distinct = args.iter().any(|a| a == "--distinct");
    let spread = args.iter().any(|a| a == "--spread");
    let mut pos = args.iter().filter(|a| !a.starts_with("--"));
    let rows: usize = pos.next().and_then(|a| a.parse().ok()).unwrap_or(1_000_000);
    let path = pos.next().cloned().unwrap_or_else(|| "sweep-1m.csv".into());
    let mut f = std::io::BufWriter::new(std::fs::File::create(&path)?);
    let n = if spread {
        gen_sweep::write_spread_sweep(&mut f)?
    } else if distinct {
        gen_sweep::write_distinct_sweep(&mut f, rows)?
    } else {
        gen_sweep::write_sweep(&mut f, rows)?
    };
    std::io::Write::flush(&mut f)?;
    eprintln!(
        "wrote {n} rows ({}) to {path}",
        if spread {
            "every row its own cell, 90 node counts"
        } else if distinct {
            "every row its own cell"
        } else {
            "38,850 distinct cells, repeated"
        }
    );
    Ok(())
}
