//! Writes a synthetic sweep CSV of N rows, for measuring compile time and
//! peak memory on large inputs:
//!
//!     cargo run --release --example gen_sweep -- 1000000 /tmp/sweep-1m.csv
//!     /usr/bin/time -v target/release/dyncc compile /tmp/sweep-1m.csv -o /tmp/1m.tbl

#[path = "../benches/support/gen_sweep.rs"]
mod gen_sweep;

fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let rows: usize = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let path = args.next().unwrap_or_else(|| "sweep-1m.csv".into());
    let mut f = std::io::BufWriter::new(std::fs::File::create(&path)?);
    let n = gen_sweep::write_sweep(&mut f, rows)?;
    eprintln!("wrote {n} rows to {path}");
    Ok(())
}
