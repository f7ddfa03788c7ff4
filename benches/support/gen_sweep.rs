//! A synthetic sweep in the NCCL tuner CSV schema, of any size, for the
//! compile benchmarks (`benches/compile.rs`, `examples/gen_sweep.rs`).
//! Times follow a latency-bandwidth shape per (algorithm, protocol,
//! channels) with deterministic pseudo-noise; it is load, not physics.

use std::io::Write;

/// Writes about `rows` rows to `out` and returns the number written.
pub fn write_sweep(out: &mut impl Write, rows: usize) -> std::io::Result<usize> {
    writeln!(
        out,
        "collective,size_bytes,algorithm,protocol,channels,nodes,ranks,pipeOps,regBuff,cost_metric,bandwidth_gbps,latency_us,platform"
    )?;
    let colls = [
        "allreduce",
        "allgather",
        "reducescatter",
        "broadcast",
        "reduce",
    ];
    let nodes = [1u32, 2, 4, 8, 16, 32, 64];
    let algos = [("default", 0.0), ("tree", 1.0), ("ring", 0.5)];
    let protos = [("ll", 0.4, 2.0), ("ll128", 0.9, 4.0), ("simple", 1.0, 8.0)];
    let channels = [-1i32, 2, 4, 8, 16, 32];
    // Cells per repeat, to choose the repeat count that reaches `rows`.
    let per_rep = colls.len() * nodes.len() * 30 * (1 + 2 * 3 * channels.len());
    let repeats = rows.div_ceil(per_rep).max(1);
    let mut n = 0usize;
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut noise = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        1.0 + ((state >> 11) as f64 / (1u64 << 53) as f64 - 0.5) * 0.06
    };
    for rep in 0..repeats {
        for c in colls {
            for &nn in &nodes {
                let ranks = nn * 8;
                for k in 3..33 {
                    let b = 1u64 << k;
                    for (a, aw) in algos {
                        for (p, eff, lat) in protos {
                            if a == "default" && p != "ll" {
                                continue;
                            }
                            for &ch in &channels {
                                if a == "default" && ch != -1 {
                                    continue;
                                }
                                let chf = if ch < 0 { 16.0 } else { ch as f64 };
                                let bw = 20.0 * eff * chf.min(24.0) / 16.0 * (1.0 + aw * 0.1);
                                let l = lat * (1.0 + aw) * (nn as f64).log2().max(1.0) + chf * 0.05;
                                let t = (l + b as f64 / (bw * 1e3)) * noise();
                                let (a, p) = if a == "default" {
                                    ("default", "default")
                                } else {
                                    (a, p)
                                };
                                if n >= rows && rep > 0 {
                                    return Ok(n);
                                }
                                writeln!(
                                    out,
                                    "{c},{b},{a},{p},{ch},{nn},{ranks},1,0,{t:.3},{:.6},{t:.3},bench",
                                    b as f64 / t / 1e3
                                )?;
                                n += 1;
                            }
                        }
                    }
                }
            }
        }
    }
    Ok(n)
}
