//! Writes one simulated run as nccl-tests 2.19 prints it to stdout
//! (`reference/nccl-tuner-abi.md` §6.2), preceded by `# dyncc:` lines that
//! record the knobs the run was made under, and the atomic file writer.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context;

use super::profile::Profile;
use crate::record::{Coll, Proto};

/// One data row: size, and (time µs) out-of-place and in-place.
#[derive(Clone, Copy, Debug)]
pub struct Row {
    pub size: u64,
    pub count: u64,
    pub oop_us: f64,
    pub ip_us: f64,
}

/// nccl-tests program name.
pub fn program(c: Coll) -> &'static str {
    match c {
        Coll::AllReduce => "all_reduce_perf",
        Coll::AllGather => "all_gather_perf",
        Coll::ReduceScatter => "reduce_scatter_perf",
        Coll::Broadcast => "broadcast_perf",
        Coll::Reduce => "reduce_perf",
    }
}

/// `busbw / algbw` as nccl-tests computes it.
pub fn bus_factor(c: Coll, nranks: u32) -> f64 {
    let n = nranks as f64;
    match c {
        Coll::AllReduce => 2.0 * (n - 1.0) / n,
        Coll::AllGather | Coll::ReduceScatter => (n - 1.0) / n,
        Coll::Broadcast | Coll::Reduce => 1.0,
    }
}

/// (size, count) nccl-tests prints for a requested size with 4-byte floats:
/// AllGather/ReduceScatter count is per rank and the size is rounded down to
/// a multiple of `nranks * 4`.
pub fn size_count(c: Coll, requested: u64, nranks: u32) -> (u64, u64) {
    match c {
        Coll::AllGather | Coll::ReduceScatter => {
            let count = requested / 4 / nranks as u64;
            (count * 4 * nranks as u64, count)
        }
        _ => {
            let count = requested / 4;
            (count * 4, count)
        }
    }
}

/// nccl-tests' `getFloatStr`: 2 decimals, then 1, then 0 within `width`, else exponent form.
pub fn float_str(v: f64, width: usize) -> String {
    if !v.is_finite() {
        return format!("{:>width$}", if v.is_nan() { "nan" } else { "inf" });
    }
    for dec in [2usize, 1, 0] {
        let s = format!("{v:.dec$}");
        if s.len() <= width {
            return format!("{s:>width$}");
        }
    }
    // C's %7.1e / %6.0e: mantissa, 'e', sign, two-digit exponent.
    let prec = if width >= 7 { 1 } else { 0 };
    let s = format!("{v:.prec$e}");
    let (m, e) = s.split_once('e').unwrap();
    let e: i32 = e.parse().unwrap();
    let sign = if e < 0 { '-' } else { '+' };
    format!("{:>width$}", format!("{m}e{sign}{:02}", e.abs()))
}

/// What one log file describes.
pub struct RunHeader<'a> {
    pub profile: &'a Profile,
    pub coll: Coll,
    pub nnodes: u32,
    /// `# dyncc:` knob text, e.g. `NCCL_ALGO=Ring NCCL_PROTO=LL128 NCCL_MIN_NCHANNELS=8 NCCL_MAX_NCHANNELS=8`.
    pub knobs: String,
    pub repeat: u32,
    pub min_bytes: u64,
    pub max_bytes: u64,
    /// Seeds the Pids so repeats look like separate jobs.
    pub pid_base: u32,
    /// The chunk the dyncc plugin answered (`DYNCC_SWEEP_CHUNK`), bytes; 0:
    /// no plugin, NCCL's chunk.
    pub chunk: u64,
}

/// The dyncc plugin's init line in a run at a chunk size, as the plugin
/// writes it after `NCCL INFO ` (`runtime/src/plugin.rs`,
/// `describe_sweep_chunk`): `dyncc compile` reads its head as the run's
/// chunk knob, so a simulated chunk run reads as a `dyncc plan --chunks` one.
pub fn sweep_chunk_line(chunk: u64) -> String {
    let mut s = format!(
        "{}{chunk} (DYNCC_SWEEP_CHUNK): getChunkSize (tuner v6/v7, NCCL 2.30+) answers it for \
         every collective, rounded down per protocol to a size NCCL runs as set:",
        crate::ingest::text::SWEEP_CHUNK_LINE
    );
    for p in Proto::ALL {
        let b = p.chunk_at_most(chunk).bytes();
        if b == 0 {
            let _ = write!(
                s,
                " {} NCCL's (below its {}-byte grain)",
                p.env_name(),
                p.chunk_grain()
            );
        } else {
            let _ = write!(s, " {} {b}", p.env_name());
        }
    }
    let _ = write!(
        s,
        "; algorithm, protocol and channels stay NCCL's (or NCCL_ALGO/NCCL_PROTO/channel \
         variables); every rank has the same environment, so every rank answers alike; \
         DYNCC_TABLE is not set; plugin {}",
        env!("CARGO_PKG_VERSION")
    );
    s
}

/// Renders the whole file.
pub fn render(h: &RunHeader, rows: &[Row]) -> String {
    let p = h.profile;
    let ppn = p.gpus_per_node;
    let nranks = ppn * h.nnodes;
    let prog = program(h.coll);
    let mut s = String::with_capacity(4096 + 110 * nranks as usize + 130 * rows.len());
    let _ = writeln!(
        s,
        "# dyncc: {} platform={} repeat={} simulated=1",
        h.knobs, p.name, h.repeat
    );
    if h.chunk != 0 {
        // The plugin's init line, once per rank as NCCL_DEBUG=INFO prints it.
        let line = sweep_chunk_line(h.chunk);
        for r in 0..nranks {
            let host = format!("{}{:03}", p.host_prefix, r / ppn + 1);
            let pid = h.pid_base + (r / ppn) * 1013 + r % ppn;
            let _ = writeln!(s, "{host}:{pid}:{pid} [{}] NCCL INFO {line}", r % ppn);
        }
    }
    let _ = writeln!(
        s,
        "# nccl-tests version 2.19.6 nccl-headers=22807 nccl-library=22807"
    );
    let _ = writeln!(s, "# Collective test starting: {prog}");
    let _ = writeln!(
        s,
        "# nThread 1 nGpus 1 minBytes {} maxBytes {} step: 2(factor) warmup iters: 1 iters: 20 agg iters: 1 validation: 1 graph: 0 unalign: 0",
        h.min_bytes, h.max_bytes
    );
    s.push_str("#\n# Using devices\n");
    for r in 0..nranks {
        let node = r / ppn;
        let dev = r % ppn;
        let host = format!("{}{:03}", p.host_prefix, node + 1);
        let pid = h.pid_base + node * 1013 + dev;
        let _ = writeln!(
            s,
            "#  Rank {r:2} Group {:2} Pid {pid:6} on {host:>10} device {dev:2} [{:04x}:{:02x}:{:02x}] {}",
            0,
            0,
            p.bus(dev),
            0,
            p.gpu_name
        );
    }
    s.push_str("#\n");
    s.push_str("#                                                              out-of-place                       in-place          \n");
    s.push_str("#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong \n");
    s.push_str("#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)         \n");
    let (redop, root) = match h.coll {
        Coll::AllReduce | Coll::ReduceScatter => ("sum", -1),
        Coll::AllGather => ("none", -1),
        Coll::Broadcast => ("none", 0),
        Coll::Reduce => ("sum", 0),
    };
    let bf = bus_factor(h.coll, nranks);
    let mut bus_sum = 0.0;
    for r in rows {
        let _ = write!(
            s,
            "{:>12}  {:>12}  {:>8}  {:>6}  {:>6}",
            r.size, r.count, "float", redop, root
        );
        for t in [r.oop_us, r.ip_us] {
            let alg = r.size as f64 / 1000.0 / t;
            let bus = alg * bf;
            bus_sum += bus;
            let _ = write!(
                s,
                "  {}  {}  {}  {:>6}",
                float_str(t, 7),
                float_str(alg, 6),
                float_str(bus, 6),
                0
            );
        }
        s.push('\n');
    }
    let avg = if rows.is_empty() {
        0.0
    } else {
        bus_sum / (2 * rows.len()) as f64
    };
    s.push_str("# Out of bounds values : 0 OK\n");
    let _ = writeln!(s, "# Avg bus bandwidth    : {} ", c_g(avg));
    s.push_str("#\n");
    let _ = writeln!(s, "# Collective test concluded: {prog}");
    s.push_str("#\n\n");
    s
}

/// C's `%g` (6 significant digits, trailing zeros removed).
pub fn c_g(v: f64) -> String {
    if v == 0.0 {
        return "0".into();
    }
    let exp = v.abs().log10().floor() as i32;
    if !(-5..6).contains(&exp) {
        let s = format!("{v:.5e}");
        let (m, e) = s.split_once('e').unwrap();
        let m = m.trim_end_matches('0').trim_end_matches('.');
        let e: i32 = e.parse().unwrap();
        return format!("{m}e{}{:02}", if e < 0 { '-' } else { '+' }, e.abs());
    }
    let dec = (5 - exp).max(0) as usize;
    let s = format!("{v:.dec$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// Writes `bytes` to `path` atomically, creating its directory first. The
/// temp file, fsync and rename are `crate::atomic::write_atomic`'s (one
/// implementation: this one used to rename without syncing, so a crash right
/// after a simulate could leave an empty sweep file in place of a whole one).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)
        .with_context(|| format!("cannot create directory {}", dir.display()))?;
    crate::atomic::write_atomic(path, bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float_str_matches_nccl_tests() {
        assert_eq!(float_str(172.49, 7), " 172.49");
        assert_eq!(float_str(17731.43, 7), "17731.4");
        assert_eq!(float_str(70062.0, 7), "70062.0");
        assert_eq!(float_str(1234567.0, 7), "1234567");
        assert_eq!(float_str(12345678.0, 7), "1.2e+07");
        assert_eq!(float_str(0.0, 6), "  0.00");
        assert_eq!(float_str(5216.8, 6), "5216.8");
    }

    proptest::proptest! {
        #[test]
        // v log-uniform in 1e-4 .. 1e12 (from integers: proptest 1.12's float
        // range sampler can trip its own assertion).
        fn float_str_fits_and_reads_back(k in 0u32..1_000_000, w in 6usize..8) {
            let v = 1e-4 * 1e16f64.powf(k as f64 / 1e6);
            let s = float_str(v, w);
            proptest::prop_assert!(s.len() <= w || !s.contains('.') && !s.contains('e'), "{s:?}");
            let back: f64 = s.trim().parse().unwrap();
            // Exponent form keeps 1 (width 6) or 2 (width 7) significant digits, as in C.
            let tol = if s.contains('e') { if w == 6 { 0.5 } else { 0.05 } } else { 0.06 };
            proptest::prop_assert!((back - v).abs() <= tol * v + 0.006, "{v} -> {s:?}");
        }
    }

    #[test]
    fn c_g_matches_printf() {
        assert_eq!(c_g(343.644), "343.644");
        assert_eq!(c_g(0.00046), "0.00046");
        assert_eq!(c_g(8.3875), "8.3875");
        assert_eq!(c_g(1234567.0), "1.23457e+06");
    }

    #[test]
    fn allgather_size_is_rounded_to_ranks() {
        assert_eq!(size_count(Coll::AllGather, 1000, 8), (992, 31));
        assert_eq!(size_count(Coll::AllGather, 8, 16), (0, 0));
        assert_eq!(size_count(Coll::AllReduce, 8, 16), (8, 2));
    }
}
