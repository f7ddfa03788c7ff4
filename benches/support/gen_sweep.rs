//! Synthetic sweeps in the NCCL tuner CSV schema, of any size, for the
//! benchmarks (`benches/compile.rs`, `benches/ingest.rs`, which keep theirs
//! on disk with [`generated`]) and `examples/gen_sweep.rs`.
//! Times follow a latency-bandwidth shape per (algorithm, protocol,
//! channels) with deterministic pseudo-noise; it is load, not physics.
//!
//! [`write_sweep`] repeats 38,850 distinct cells (5 collectives x 7 node
//! counts x 30 sizes x 37 settings) until it has written the rows asked
//! for: a large file of few cells, as many repeats of a sweep make.
//! [`write_distinct_sweep`] writes every row as its own cell (4 sizes per
//! octave, node counts 1, 2, 3, ... at 8 and 4 GPUs per node): a large
//! sweep of many shapes, what grows the compiler's work per cell.

use std::io::Write;

/// The collectives both sweeps cover.
const COLLS: [&str; 5] = [
    "allreduce",
    "allgather",
    "reducescatter",
    "broadcast",
    "reduce",
];

/// Writes about `rows` rows to `out` and returns the number written.
pub fn write_sweep(out: &mut impl Write, rows: usize) -> std::io::Result<usize> {
    writeln!(out, "{HEADER}")?;
    let colls = COLLS;
    let nodes = [1u32, 2, 4, 8, 16, 32, 64];
    let channels = CHANNELS;
    // Cells per repeat, to choose the repeat count that reaches `rows`.
    let per_rep = colls.len() * nodes.len() * 30 * (1 + 2 * 3 * channels.len());
    let repeats = rows.div_ceil(per_rep).max(1);
    let mut n = 0usize;
    let mut noise = Noise::default();
    for rep in 0..repeats {
        for c in colls {
            for &nn in &nodes {
                for k in 3..33 {
                    // The first repeat is always whole; later ones stop at `rows`.
                    let max = if rep > 0 {
                        rows - n.min(rows)
                    } else {
                        usize::MAX
                    };
                    if max == 0 {
                        return Ok(n);
                    }
                    n += write_cell(out, &mut noise, c, 1u64 << k, nn, 8, max)?;
                }
            }
        }
    }
    Ok(n)
}

/// Writes about `rows` rows to `out`, every one its own cell (no repeats),
/// and returns the number written: 5 collectives x 117 sizes (8 B to
/// 4 GiB, 4 per octave) x 37 settings per shape, over node counts 1, 2,
/// 3, ... at 8 and at 4 GPUs per node until `rows` is reached (1,000,000
/// rows: 47 shapes, node counts 1-24).
pub fn write_distinct_sweep(out: &mut impl Write, rows: usize) -> std::io::Result<usize> {
    writeln!(out, "{HEADER}")?;
    let colls = COLLS;
    let mut n = 0usize;
    let mut noise = Noise::default();
    for nn in 1u32.. {
        for ppn in [8u32, 4] {
            for c in colls {
                for k in 0..=116u32 {
                    if n >= rows {
                        return Ok(n);
                    }
                    // 8 B * 2^(k/4), rounded: 8, 10, 11, 13, 16, 19, ... (distinct).
                    let b = (8.0 * 2f64.powf(k as f64 / 4.0)).round() as u64;
                    n += write_cell(out, &mut noise, c, b, nn, ppn, rows - n)?;
                }
            }
        }
    }
    Ok(n)
}

/// The node counts of [`write_spread_sweep`]: 90 of them from 1 to about
/// 600, geometrically spread (every count up to 14, then sparser).
pub fn spread_node_counts() -> Vec<u32> {
    let mut v: Vec<u32> = Vec::with_capacity(90);
    for i in 0..90 {
        let g = 600f64.powf(i as f64 / 89.0).round() as u32;
        let n = v.last().map_or(g.max(1), |&p| g.max(p + 1));
        v.push(n);
    }
    v
}

/// Writes 1,000,350 rows, every one its own cell, spread over many node
/// counts in few grids (issue 28): 5 collectives x 90 node counts
/// ([`spread_node_counts`]) x 117 sizes (8 B to 4 GiB, 4 per octave) x 19
/// settings (NCCL's default; Tree/Ring x LL/LL128/Simple x channels auto,
/// 8, 32), 8 GPUs per node. Returns the rows written.
pub fn write_spread_sweep(out: &mut impl Write) -> std::io::Result<usize> {
    writeln!(out, "{HEADER}")?;
    let mut n = 0usize;
    let mut noise = Noise::default();
    for nn in spread_node_counts() {
        for c in COLLS {
            for k in 0..=116u32 {
                let b = (8.0 * 2f64.powf(k as f64 / 4.0)).round() as u64;
                n += write_cell_with(out, &mut noise, c, b, nn, 8, usize::MAX, &SPREAD_CHANNELS)?;
            }
        }
    }
    Ok(n)
}

/// The channel counts of [`write_spread_sweep`] (-1: NCCL's own).
const SPREAD_CHANNELS: [i32; 3] = [-1, 8, 32];

const HEADER: &str = "collective,size_bytes,algorithm,protocol,channels,nodes,ranks,pipeOps,regBuff,cost_metric,bandwidth_gbps,latency_us,platform";
const CHANNELS: [i32; 6] = [-1, 2, 4, 8, 16, 32];

/// Deterministic multiplicative noise of +-3 % (xorshift).
struct Noise(u64);

impl Default for Noise {
    fn default() -> Self {
        Noise(0x9e37_79b9_7f4a_7c15)
    }
}

impl Noise {
    fn next(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        1.0 + ((self.0 >> 11) as f64 / (1u64 << 53) as f64 - 0.5) * 0.06
    }
}

/// Writes the rows of one shape and size (collective, bytes, nodes, GPUs
/// per node), one cell per setting: NCCL's default and every Tree/Ring x
/// LL/LL128/Simple x channel count (37), but at most `max`; returns how
/// many it wrote.
fn write_cell(
    out: &mut impl Write,
    noise: &mut Noise,
    c: &str,
    b: u64,
    nn: u32,
    ppn: u32,
    max: usize,
) -> std::io::Result<usize> {
    write_cell_with(out, noise, c, b, nn, ppn, max, &CHANNELS)
}

/// [`write_cell`] over the channel counts `channels`.
#[allow(clippy::too_many_arguments)]
fn write_cell_with(
    out: &mut impl Write,
    noise: &mut Noise,
    c: &str,
    b: u64,
    nn: u32,
    ppn: u32,
    max: usize,
    channels: &[i32],
) -> std::io::Result<usize> {
    let algos = [("default", 0.0), ("tree", 1.0), ("ring", 0.5)];
    let protos = [("ll", 0.4, 2.0), ("ll128", 0.9, 4.0), ("simple", 1.0, 8.0)];
    let ranks = nn * ppn;
    let mut n = 0;
    for (a, aw) in algos {
        for (p, eff, lat) in protos {
            if a == "default" && p != "ll" {
                continue;
            }
            for &ch in channels {
                if a == "default" && ch != -1 {
                    continue;
                }
                if n == max {
                    return Ok(n);
                }
                let chf = if ch < 0 { 16.0 } else { ch as f64 };
                let bw = 20.0 * eff * chf.min(24.0) / 16.0 * (1.0 + aw * 0.1);
                let l = lat * (1.0 + aw) * (nn as f64).log2().max(1.0) + chf * 0.05;
                let t = (l + b as f64 / (bw * 1e3)) * noise.next();
                let (a, p) = if a == "default" {
                    ("default", "default")
                } else {
                    (a, p)
                };
                writeln!(
                    out,
                    "{c},{b},{a},{p},{ch},{nn},{ranks},1,0,{t:.3},{:.6},{t:.3},bench",
                    b as f64 / t / 1e3
                )?;
                n += 1;
            }
        }
    }
    Ok(n)
}

/// The generated sweep at `name` in the temp directory, written once.
pub fn generated(
    name: &str,
    write: fn(&mut std::io::BufWriter<std::fs::File>) -> std::io::Result<usize>,
) -> std::path::PathBuf {
    let path = std::env::temp_dir().join(name);
    if !path.exists() {
        let tmp = path.with_extension("tmp");
        let mut f = std::io::BufWriter::new(std::fs::File::create(&tmp).unwrap());
        write(&mut f).unwrap();
        std::io::Write::flush(&mut f).unwrap();
        drop(f);
        std::fs::rename(&tmp, &path).unwrap();
    }
    path
}
