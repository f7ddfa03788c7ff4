//! Writes a synthetic sweep CSV of N rows, for measuring compile time and
//! peak memory on large inputs (README, "Performance"):
//!
//!     cargo run --release --example gen_sweep -- 1000000 /tmp/sweep-1m.csv
//!     cargo run --release --example gen_sweep -- 1000000 /tmp/sweep-1m-distinct.csv --distinct
//!     /usr/bin/time -v target/release/dyncc compile /tmp/sweep-1m.csv -o /tmp/1m.tbl
//!
//! Without `--distinct` the rows repeat 38,850 distinct cells (many repeats
//! of one sweep); with it every row is its own cell (many shapes).

// `generated` (the benches' files on disk) is not used here.
#[path = "../benches/support/gen_sweep.rs"]
#[allow(dead_code)]
mod gen_sweep;

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let distinct = args.iter().any(|a| a == "--distinct");
    let mut pos = args.iter().filter(|a| *a != "--distinct");
    let rows: usize = pos.next().and_then(|a| a.parse().ok()).unwrap_or(1_000_000);
    let path = pos.next().cloned().unwrap_or_else(|| "sweep-1m.csv".into());
    let mut f = std::io::BufWriter::new(std::fs::File::create(&path)?);
    let n = if distinct {
        gen_sweep::write_distinct_sweep(&mut f, rows)?
    } else {
        gen_sweep::write_sweep(&mut f, rows)?
    };
    std::io::Write::flush(&mut f)?;
    eprintln!(
        "wrote {n} rows ({}) to {path}",
        if distinct {
            "every row its own cell"
        } else {
            "38,850 distinct cells, repeated"
        }
    );
    Ok(())
}
