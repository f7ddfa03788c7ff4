//! The simulator's "true" physics: how long a collective takes on a
//! profile's hardware for a given (algorithm, protocol, channels, shape,
//! size), and the measurement noise around it.
//!
//! A latency-bandwidth model: per-hop latencies that rise with the protocol
//! (LL < LL128 < Simple) and grow as chunks grow (the pipeline ramp and
//! NCCL's "ring plateau"); bandwidth capped by the slowest of the intra-node
//! link, the node's NICs and what the channels can drive, scaled by each
//! protocol's efficiency (LL ~50 %, LL128 ~95 %, Simple ~100 %). Ring has
//! latency linear in ranks, Tree logarithmic in nodes with a 2-node
//! bandwidth advantage and a mid-size dip; NVLS, CollNet and PAT have their
//! own shapes. Channel count is unimodal: few channels starve bandwidth, many
//! cost per-channel overhead. Constants are the profile's `physics`.

use rand::Rng;
use rand_distr::{Distribution, Normal};

use super::chunk;
use super::op::Op;
use super::profile::Profile;
use crate::record::{Algo, Coll, Proto};

/// log2 of the bytes per rank and NCCL channel where the latency ramp starts,
/// and over how many doublings it completes, per protocol (fitted to DGX-1V).
const RAMP_START: [f64; 3] = [3.0, 5.0, 5.0];
const RAMP_SPAN: [f64; 3] = [6.0, 10.0, 4.0];

/// Whether `(c, a, p)` can run, forced, on `nnodes` nodes of profile
/// `prof`: NCCL's rules ([`dyncc_tables::Machine`]) on the profile's
/// hardware ([`Profile::machine`]), for at least two ranks.
pub fn supported(prof: &Profile, nnodes: u32, c: Coll, a: Algo, p: Proto) -> bool {
    prof.gpus_per_node * nnodes >= 2 && prof.machine(nnodes).runs(c, a, p)
}

/// Every (algorithm, protocol) that can run, in NCCL index order.
pub fn configs(prof: &Profile, nnodes: u32, c: Coll) -> Vec<(Algo, Proto)> {
    let mut v = Vec::new();
    for a in Algo::ALL {
        for p in Proto::ALL {
            if supported(prof, nnodes, c, a, p) {
                v.push((a, p));
            }
        }
    }
    v
}

/// Ceil of log2 for n ≥ 1.
fn clog2(n: u32) -> f64 {
    (32 - (n.max(1) - 1).leading_zeros()) as f64
}

/// Noise-free time in µs of one operation (the median a sweep would see).
pub fn true_time(prof: &Profile, op: Op) -> f64 {
    let Op {
        coll: c,
        nnodes,
        nbytes,
        algo: a,
        proto: p,
        channels,
    } = op;
    let ph = &prof.physics;
    let pi = p as usize;
    let ppn = prof.gpus_per_node;
    let n = (ppn * nnodes) as f64;
    let multi = nnodes > 1;
    let ch = channels.max(1) as f64;
    let bytes = nbytes as f64;
    let intra_bw = prof.intra.bw_gbs;
    let net_bw = prof.net.node_gbs();
    let intra_hop = prof.intra.hop_us[pi];
    let net_hop = prof.net.hop_us[pi];
    let base = ph.base_us[pi];
    let perch = ph.per_channel_gbs[pi];
    let link_eff = |scale: f64, net_scale: f64| -> f64 {
        let mut b = intra_bw * ph.eff_intra[pi] * scale;
        if multi {
            b = b.min(net_bw * ph.eff_net[pi] * net_scale);
        }
        b
    };
    // Past the channel count that saturates the links, more channels contend.
    let saturating = (link_eff(1.0, 1.0) / perch).max(1.0);
    let contention = 1.0 + 0.02 * (ch / saturating - 1.0).max(0.0);
    // As chunks per rank and channel grow, per-step latency rises (fitted to DGX-1V).
    // Measured against NCCL's own channel count, not the forced one: a ramp
    // that moved with the channel count would make time non-unimodal in it.
    let chunk = bytes / (prof.nccl.channels.max(1) as f64 * n);
    let ramp = if chunk > 0.0 {
        ((chunk.log2() - RAMP_START[pi]) / RAMP_SPAN[pi]).clamp(0.0, 1.0)
    } else {
        0.0
    };
    // Only step-by-step algorithms pay it; Broadcast/Reduce pipelines hide it.
    let stepwise = matches!(a, Algo::Ring | Algo::Tree | Algo::Pat | Algo::CollNetChain)
        && !matches!(c, Coll::Broadcast | Coll::Reduce);
    let lat_factor = if stepwise {
        1.0 + ph.lat_ramp[pi] * ramp
    } else {
        1.0
    };
    let ch_cost = ch * ph.channel_overhead_us;
    let depth = clog2(nnodes);
    let tree_net = if nnodes == 2 {
        ph.tree_net_2nodes
    } else {
        ph.tree_net_many
    };
    let bus_factor = match c {
        Coll::AllReduce => 2.0 * (n - 1.0) / n,
        Coll::AllGather | Coll::ReduceScatter => (n - 1.0) / n,
        Coll::Broadcast | Coll::Reduce => 1.0,
    };
    let simple_hop_net = prof.net.hop_us[2];

    let (lat, bytes_us) = match a {
        Algo::Ring => {
            let (nsteps, n_inter) = match c {
                Coll::AllReduce => (2.0 * (n - 1.0), 2.0 * (nnodes as f64 - 1.0)),
                _ => (n - 1.0, nnodes as f64 - 1.0),
            };
            let hop_net = net_hop * ph.ring_net_scale[pi];
            let mut lat = base + (nsteps - n_inter) * intra_hop + n_inter * hop_net;
            if multi {
                lat += ph.ring_multinode_us[pi];
            }
            let bus = link_eff(1.0, 1.0).min(ch * perch) / contention;
            (lat, bytes * bus_factor / (bus * 1000.0))
        }
        Algo::Tree => {
            let hop = intra_hop * ph.tree_hop_scale[pi];
            let lat = base + 2.0 * ((ppn as f64 - 1.0) * hop + depth * net_hop);
            let alg =
                link_eff(ph.tree_intra, tree_net).min(ch * perch * ph.tree_intra) / contention;
            let dip = if bytes > 0.0 {
                let centre = if p == Proto::LL128 { 22.0 } else { 24.0 };
                1.0 + ph.tree_dip[pi] * (-((bytes.log2() - centre) / 3.5).powi(2)).exp()
            } else {
                1.0
            };
            (lat, bytes * dip / (alg * 1000.0))
        }
        Algo::Nvls => {
            let mut lat = base * 0.5 + ph.nvls_lat_us;
            let mut bus = intra_bw * ph.nvls_gain * if c == Coll::AllReduce { 1.0 } else { 0.8 };
            bus = bus.min(ch * perch * 1.5);
            if multi {
                // Inter-node part reduced in the switches (SHARP): algbw near node bandwidth.
                lat += 2.0 * ph.sharp_lat_us + simple_hop_net;
                bus = bus.min(net_bw * ph.eff_net[pi] * 0.95 * bus_factor);
            }
            (lat, bytes * bus_factor / (bus / contention * 1000.0))
        }
        Algo::NvlsTree => {
            let lat = base * 0.5 + ph.nvls_lat_us + 2.0 * depth * simple_hop_net;
            let bus = (intra_bw * ph.nvls_gain)
                .min(ch * perch * 1.5)
                .min(net_bw * ph.eff_net[pi] * tree_net * bus_factor * 1.1);
            (lat, bytes * bus_factor / (bus / contention * 1000.0))
        }
        Algo::CollNetDirect => {
            // Every channel drives one connection per head (NIC).
            let heads = ppn.min(prof.net.nics_per_node).max(1) as f64;
            let lat = base + 2.0 * intra_hop + 2.0 * ph.sharp_lat_us + simple_hop_net;
            let alg = if c == Coll::AllReduce {
                // Reduce-scatter and all-gather inside the node around the switch reduction.
                let ppnf = ppn as f64;
                let intra_alg = if ppn > 1 {
                    intra_bw * 1.15 * ppnf / (2.0 * (ppnf - 1.0))
                } else {
                    f64::INFINITY
                };
                intra_alg
                    .min(net_bw * ph.eff_net[pi] * 0.92)
                    .min(ch * perch * heads)
            } else {
                (intra_bw / bus_factor)
                    .min(net_bw * ph.eff_net[pi] / bus_factor)
                    .min(ch * perch * heads)
            };
            (lat, bytes / (alg / contention * 1000.0))
        }
        Algo::CollNetChain => {
            let lat = base
                + 2.0 * (ppn as f64 - 1.0) * intra_hop
                + 2.0 * ph.sharp_lat_us
                + simple_hop_net;
            let alg = (intra_bw * ph.tree_intra)
                .min(net_bw * ph.eff_net[pi] * 0.9)
                .min(ch * perch * ph.tree_intra);
            (lat, bytes / (alg / contention * 1000.0))
        }
        Algo::Pat => {
            // Logarithmic steps; bandwidth a little below Ring's.
            let lat = base + clog2(ppn * nnodes) * net_hop * 1.2;
            let bus = link_eff(0.85, 0.85).min(ch * perch) / contention;
            (lat, bytes * bus_factor / (bus * 1000.0))
        }
    };
    let lat = lat * lat_factor;
    let k = ph.ring_overlap[pi];
    let k = if matches!(c, Coll::Broadcast | Coll::Reduce) {
        k.max(1.5)
    } else {
        k
    };
    if a == Algo::Ring && (multi || matches!(c, Coll::Broadcast | Coll::Reduce)) && k > 1.0 {
        // Pipelined steps overlap: the latency hides behind a long transfer.
        return (lat.powf(k) + bytes_us.powf(k)).powf(1.0 / k) + ch_cost;
    }
    lat + ch_cost + bytes_us
}

/// [`true_time`] when a tuner answers `chunk` bytes for the collective's
/// chunk size (NCCL's getChunkSize): the calibrated time plus the modelled
/// difference from NCCL's own chunk ([`chunk::delta_us`]). `chunk` 0 is
/// NCCL's own: exactly [`true_time`].
pub fn true_time_chunked(prof: &Profile, op: Op, chunk: u64) -> f64 {
    let t = true_time(prof, op);
    if chunk == 0 {
        return t;
    }
    t + chunk::delta_us(prof, op, chunk, t)
}

/// Draws measurement noise: multiplicative log-normal, wider at small sizes,
/// with rare jitter spikes.
pub fn noisy<R: Rng>(prof: &Profile, nbytes: u64, t: f64, rng: &mut R) -> f64 {
    let ph = &prof.physics;
    let lg = (nbytes.max(1) as f64).log2();
    let s = ((26.0 - lg) / 14.0).clamp(0.0, 1.0);
    let sigma = ph.noise_large + (ph.noise_small - ph.noise_large) * s;
    let z: f64 = Normal::new(0.0, 1.0).unwrap().sample(rng);
    let mut v = t * (sigma * z).exp();
    if rng.random::<f64>() < 0.01 * (0.2 + s) {
        v *= 1.0 + rng.random::<f64>() * 0.8;
    }
    v
}

#[cfg(test)]
mod tests {
    use super::super::profile::builtin;
    use super::*;

    fn best_proto(prof: &Profile, nnodes: u32, a: Algo, nbytes: u64) -> Proto {
        let mut best = (f64::INFINITY, Proto::LL);
        for p in Proto::ALL {
            let t = true_time(
                prof,
                Op {
                    coll: Coll::AllReduce,
                    nnodes,
                    nbytes,
                    algo: a,
                    proto: p,
                    channels: prof.nccl.channels,
                },
            );
            if t < best.0 {
                best = (t, p);
            }
        }
        best.1
    }

    #[test]
    fn protocol_order_by_size() {
        for name in ["h100", "a100", "v100", "gh200"] {
            let prof = builtin(name).unwrap();
            for nn in [1, 2, 8] {
                assert_eq!(
                    best_proto(&prof, nn, Algo::Ring, 64),
                    Proto::LL,
                    "{name} {nn}"
                );
                assert_eq!(
                    best_proto(&prof, nn, Algo::Ring, 4 << 30),
                    Proto::Simple,
                    "{name} {nn}"
                );
            }
        }
    }

    #[test]
    fn channel_count_is_unimodal() {
        for name in ["h100", "v100", "pcie"] {
            let prof = builtin(name).unwrap();
            for nbytes in [8u64, 1 << 16, 1 << 22, 1 << 28, 1 << 32] {
                for p in Proto::ALL {
                    let op = Op {
                        coll: Coll::AllReduce,
                        nnodes: 4,
                        nbytes,
                        algo: Algo::Ring,
                        proto: p,
                        channels: 0,
                    };
                    let ts: Vec<f64> = (1..=64)
                        .map(|channels| true_time(&prof, Op { channels, ..op }))
                        .collect();
                    let m = ts
                        .iter()
                        .enumerate()
                        .min_by(|a, b| a.1.total_cmp(b.1))
                        .unwrap()
                        .0;
                    assert!(
                        ts[..=m].windows(2).all(|w| w[1] <= w[0] + 1e-9),
                        "{name} {nbytes} {p:?}"
                    );
                    assert!(
                        ts[m..].windows(2).all(|w| w[1] >= w[0] - 1e-9),
                        "{name} {nbytes} {p:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn nvls_tree_needs_nodes_and_pat_needs_one_gpu_per_node() {
        let h = builtin("h100").unwrap();
        assert!(!supported(
            &h,
            1,
            Coll::AllReduce,
            Algo::NvlsTree,
            Proto::Simple
        ));
        assert!(supported(
            &h,
            2,
            Coll::AllReduce,
            Algo::NvlsTree,
            Proto::Simple
        ));
        assert!(!supported(
            &h,
            2,
            Coll::AllReduce,
            Algo::NvlsTree,
            Proto::LL
        ));
        assert!(!supported(&h, 4, Coll::AllGather, Algo::Pat, Proto::Simple));
        assert!(!supported(
            &h,
            4,
            Coll::Broadcast,
            Algo::Tree,
            Proto::Simple
        ));
        let mut one = builtin("h100").unwrap();
        one.gpus_per_node = 1;
        assert!(supported(
            &one,
            4,
            Coll::AllGather,
            Algo::Pat,
            Proto::Simple
        ));
        assert!(!supported(
            &one,
            4,
            Coll::AllReduce,
            Algo::Pat,
            Proto::Simple
        ));
        let v = builtin("v100").unwrap();
        assert_eq!(configs(&v, 4, Coll::AllReduce).len(), 6);
        assert_eq!(configs(&v, 4, Coll::AllGather).len(), 3);
    }

    #[test]
    fn collnet_direct_not_starved_when_nccl_shrinks_channels() {
        // NCCL runs CollNetDirect on one channel at mid sizes; each channel
        // still drives every NIC, so it must not fall far behind Ring.
        let h = builtin("h100").unwrap();
        let s = 4 << 20;
        let cn = Op {
            coll: Coll::AllReduce,
            nnodes: 2,
            nbytes: s,
            algo: Algo::CollNetDirect,
            proto: Proto::Simple,
            channels: 1,
        };
        let ring = Op {
            algo: Algo::Ring,
            channels: 16,
            ..cn
        };
        let (cn, ring) = (true_time(&h, cn), true_time(&h, ring));
        assert!(cn < 2.0 * ring, "{cn} vs {ring}");
    }

    proptest::proptest! {
        #[test]
        fn time_is_positive_and_grows_with_size(
            pi in 0usize..5, nn in 1u32..64, ci in 0usize..5, ch in 1u32..64, lg in 0u32..33,
        ) {
            let prof = &super::super::profile::builtins()[pi];
            let c = Coll::ALL[ci];
            for (a, p) in configs(prof, nn, c) {
                let s = 1u64 << lg;
                let op = Op { coll: c, nnodes: nn, nbytes: s, algo: a, proto: p, channels: ch };
                let t1 = true_time(prof, op);
                let t2 = true_time(prof, Op { nbytes: 2 * s, ..op });
                proptest::prop_assert!(t1.is_finite() && t1 > 0.0);
                proptest::prop_assert!(t2 >= t1, "{:?} {:?} {:?} {} {}: {} > {}", c, a, p, ch, s, t1, t2);
            }
        }
    }

    #[test]
    fn noise_is_wider_at_small_sizes() {
        use rand::SeedableRng;
        let prof = builtin("h100").unwrap();
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let spread = |nbytes: u64, rng: &mut rand_chacha::ChaCha8Rng| {
            let v: Vec<f64> = (0..2000)
                .map(|_| noisy(&prof, nbytes, 100.0, rng).ln())
                .collect();
            let m = v.iter().sum::<f64>() / v.len() as f64;
            (v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / v.len() as f64).sqrt()
        };
        let small = spread(64, &mut rng);
        let large = spread(1 << 30, &mut rng);
        assert!(small > 2.0 * large, "{small} {large}");
    }
}
