//! NCCL's built-in cost model (src/graph/tuning.cc, NCCL 2.30; constants in
//! `reference/nccl-tuner-abi.md` §5), evaluated for a simulated profile.
//! It decides what a *default* run (nothing forced) executes: the argmin of
//! the model's time over (algorithm, protocol), ties to the lowest index,
//! then NCCL's channel rule. The model is NCCL's, not the simulator's
//! physics, so it is wrong in places exactly as on real clusters.

use dyncc_tables::Machine;

use super::op::Op;
use super::profile::{CpuVendor, Profile};
use crate::record::{Algo, Coll, Proto};

const NA: usize = 7;
const NP: usize = 3;

// [algo][proto], algo order Tree, Ring, CollNetDirect, CollNetChain, NVLS, NVLSTree, PAT.
const BASE_LAT: [[f64; NP]; NA] = [
    [6.8, 14.0, 8.4],
    [6.6, 14.0, 8.4],
    [0.0; 3],
    [0.0; 3],
    [0.0; 3],
    [0.0; 3],
    [8.0, 8.0, 8.0],
];
const HW_NVLINK: [[f64; NP]; NA] = [
    [0.6, 1.25, 4.0],
    [0.6, 1.9, 3.4],
    [0.0, 0.0, 3.7],
    [0.0, 0.0, 2.8],
    [0.0, 0.0, 25.0],
    [0.0, 0.0, 25.0],
    [0.0, 0.0, 4.0],
];
const HW_PCI: [[f64; NP]; NA] = [
    [1.0, 1.9, 4.0],
    [1.0, 2.5, 5.7],
    [0.0, 0.0, 3.7],
    [0.0, 0.0, 2.8],
    [0.0, 0.0, 0.0],
    [0.0, 0.0, 0.0],
    [0.0, 0.0, 4.0],
];
const HW_NET: [[f64; NP]; NA] = [
    [5.0, 8.5, 14.0],
    [2.7, 4.0, 14.0],
    [0.0, 0.0, 31.0],
    [0.0, 0.0, 30.0],
    [0.0, 0.0, 18.0],
    [0.0, 0.0, 20.9],
    [0.0, 0.0, 14.0],
];
// [compcap Volta, Ampere, Hopper, Blackwell][scale 1, 2, >=4 nodes]
const LL_MAX_BWS: [[f64; 3]; 4] = [
    [39.0, 39.0, 20.4],
    [87.7, 22.5, 19.0],
    [141.0, 45.0, 35.0],
    [282.0, 90.0, 70.0],
];
const PERCH_RING_LL128: [[f64; 3]; 4] =
    [[20.0; 3], [20.0; 3], [36.7, 36.7, 36.7], [40.0, 40.0, 40.0]];
const PERCH_TREE_LL128: [[f64; 3]; 4] = [
    [20.0; 3],
    [20.0; 3],
    [36.7, 36.7, 29.0],
    [55.6, 31.67, 20.0],
];
const PERCH_TREE: [[f64; 3]; 4] = [
    [26.5, 18.5, 10.0],
    [24.0, 23.6, 17.8],
    [38.7, 41.4, 36.0],
    [70.0, 42.8, 24.0],
];
const PERCH_NVLS_TREE: [[f64; 3]; 4] = [
    [26.5, 18.5, 10.0],
    [24.0, 23.6, 17.8],
    [0.0, 57.7, 45.5],
    [0.0, 96.0, 80.0],
];
const NVLS_EFF: [f64; 4] = [0.0, 0.0, 0.85, 0.74];

const TREE_CORR: [[f64; 24]; NP] = [
    [
        1.0, 1.0, 1.0, 1.0, 0.9, 0.8, 0.7, 0.7, 0.7, 0.7, 0.6, 0.5, 0.4, 0.4, 0.5, 0.6, 0.7, 0.8,
        0.9, 1.0, 1.0, 1.0, 1.0, 1.0,
    ],
    [
        1.0, 1.0, 1.0, 1.0, 1.0, 0.9, 0.8, 0.8, 0.8, 0.7, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.8, 0.9,
        0.9, 0.9, 0.9, 1.0, 1.0, 1.0,
    ],
    [
        0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.8, 0.7, 0.6, 0.6, 0.5, 0.5, 0.5, 0.5, 0.6, 0.7, 0.8,
        0.7, 0.7, 0.8, 0.9, 0.9, 0.9,
    ],
];

/// Speed arrays of NCCL's topology search (src/graph/search.cc).
const SPEED_INTRA: [f64; 13] = [
    40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0,
];
const SPEED_INTER: [f64; 19] = [
    48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.4, 1.2,
    0.24, 0.12,
];
const SM90_INTRA: [f64; 11] = [
    60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0,
];
const SM90_INTER: [f64; 17] = [
    48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2, 0.24,
    0.12,
];
const SM100_INTRA: [f64; 12] = [
    90.0, 80.0, 70.0, 60.0, 50.0, 45.0, 40.0, 30.0, 24.0, 20.0, 19.0, 18.0,
];
const SM100_INTER: [f64; 20] = [
    96.0, 86.0, 80.0, 48.0, 45.1, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0,
    2.4, 1.2, 0.24, 0.12,
];

/// The highest speed in `arr` not above `max` (the search steps down from there).
fn pick(arr: &[f64], max: f64) -> f64 {
    arr.iter()
        .copied()
        .find(|&s| s <= max + 1e-9)
        .unwrap_or(*arr.last().unwrap())
}

fn log2i(x: u64) -> i64 {
    if x == 0 {
        -1
    } else {
        63 - x.leading_zeros() as i64
    }
}

/// NCCL's model of one communicator: latency and bandwidth per (coll, algo, proto).
#[derive(Clone, Debug)]
pub struct NcclModel {
    pub lat: [[[f64; NP]; NA]; 5],
    pub bw: [[[f64; NP]; NA]; 5],
    pub nranks: u32,
    pub nnodes: u32,
    pub comm_channels: u32,
    pub nvls_channels: u32,
    pub ring_bw_intra: f64,
    pub ring_bw_inter: f64,
    cc: u32,
    ppn: u32,
    nics: u32,
}

fn cc_index(cc: u32) -> usize {
    match cc {
        100.. => 3,
        90.. => 2,
        80.. => 1,
        _ => 0,
    }
}

impl NcclModel {
    pub fn new(p: &Profile, nnodes: u32) -> NcclModel {
        let ppn = p.gpus_per_node;
        let nranks = ppn * nnodes;
        let cc = p.compute_capability;
        let cci = cc_index(cc);
        let (ia, ea): (&[f64], &[f64]) = match cci {
            3 => (&SM100_INTRA, &SM100_INTER),
            2 => (&SM90_INTRA, &SM90_INTER),
            _ => (&SPEED_INTRA, &SPEED_INTER),
        };
        let nch = p.nccl.channels;
        // The search finds channels at one speed per channel whose sum fits the links.
        let mut bw_intra = p
            .nccl
            .bw_intra
            .unwrap_or_else(|| pick(ia, p.intra.bw_gbs / nch as f64));
        let bw_inter = p
            .nccl
            .bw_inter
            .unwrap_or_else(|| pick(ea, p.net.node_gbs() / nch as f64));
        if nnodes > 1 && p.nccl.bw_intra.is_none() {
            // Multi-node graphs start intra at the inter speed and may only go up.
            bw_intra = bw_intra.max(bw_inter);
        }
        let nvls_ch = if p.features.nvls {
            p.nccl.nvls_channels
        } else {
            0
        };
        let index2 = if nnodes <= 2 {
            (nnodes - 1) as usize
        } else {
            2
        };
        let index1 = if nnodes == 1 {
            cci
        } else if p.cpu == CpuVendor::Amd {
            1
        } else {
            0
        };
        let ll_max = LL_MAX_BWS[index1][index2];
        let ppnf = ppn as f64;
        let intra_nvlink = p.nccl.type_intra == 1;
        let intra_hw = if intra_nvlink { &HW_NVLINK } else { &HW_PCI };
        let hw = if nnodes == 1 { intra_hw } else { &HW_NET };
        let net_overhead = if p.cpu == CpuVendor::Amd { 2.0 } else { 1.0 };
        // The model's view of the machine: LL128 on "auto" (§5.5), NVLS
        // with the channels its model needs (§5.4).
        let machine = Machine {
            nvls: nvls_ch >= 2,
            ll128: ll128_auto(p),
            ..p.machine(nnodes)
        };

        let mut lat = [[[0.0; NP]; NA]; 5];
        let mut bwt = [[[0.0; NP]; NA]; 5];
        for c in Coll::ALL {
            let ci = c as usize;
            let nsteps = match c {
                Coll::AllReduce => 2.0 * (nranks as f64 - 1.0),
                Coll::AllGather | Coll::ReduceScatter => nranks as f64 - 1.0,
                _ => nranks as f64,
            };
            for a in Algo::ALL {
                let ai = a as usize;
                let g_nch = match a {
                    Algo::Nvls | Algo::NvlsTree => nvls_ch,
                    _ => nch,
                } as f64;
                for pr in Proto::ALL {
                    let pi = pr as usize;
                    let simple = pr == Proto::Simple;
                    // What NCCL cannot run keeps bandwidth 0 (time -1).
                    if !machine.runs(c, a, pr) {
                        continue;
                    }
                    let collnet_algo = matches!(a, Algo::CollNetDirect | Algo::CollNetChain);
                    let mut bw = if nnodes <= 2 || collnet_algo {
                        bw_intra
                    } else {
                        bw_inter
                    };
                    if matches!(a, Algo::Nvls | Algo::NvlsTree) {
                        let mut intra_bw = bw_intra * NVLS_EFF[cci] * (g_nch - 1.0) / g_nch;
                        if c == Coll::AllReduce {
                            intra_bw *= 2.0;
                        } else {
                            intra_bw *= (ppnf - 1.0) / ppnf;
                        }
                        let mut inter_bw = bw_inter;
                        if a == Algo::NvlsTree && nnodes <= 2 {
                            inter_bw *= 2.0;
                        }
                        bw = intra_bw.min(inter_bw);
                        if a == Algo::NvlsTree {
                            bw = bw.min(PERCH_NVLS_TREE[cci][index2]);
                        }
                    }
                    let mut bus = g_nch * bw;
                    if a == Algo::Ring && pr == Proto::LL {
                        bus = ll_max.min(0.5 * bus);
                    }
                    if a == Algo::Ring && pr == Proto::LL128 {
                        bus = (0.92 * bus).min(g_nch * PERCH_RING_LL128[cci][index2]);
                    }
                    if a == Algo::Tree && c == Coll::AllReduce {
                        bus = (0.92 * bus).min(g_nch * PERCH_TREE[cci][index2]);
                    }
                    if a == Algo::Tree && pr == Proto::LL {
                        bus = (bus / 3.8).min(ll_max);
                    }
                    if a == Algo::Tree && pr == Proto::LL128 {
                        let f = if nnodes == 1 {
                            7.0 / 9.0
                        } else {
                            120.0 / 128.0
                        };
                        bus = (bus * f).min(g_nch * PERCH_TREE_LL128[cci][index2]);
                    }
                    if a == Algo::Pat {
                        bus *= 0.75;
                    }
                    if a == Algo::CollNetDirect && simple {
                        if matches!(c, Coll::AllGather | Coll::ReduceScatter) {
                            bus = ppnf * bw_intra.min(0.9 * bw_inter);
                        } else {
                            let mut f = ppnf / g_nch;
                            f -= (f - 1.0) / 2.0;
                            bus /= f;
                            if cc >= 90 {
                                bus *= 0.85;
                            }
                        }
                    }
                    let ratio =
                        if a != Algo::Ring && matches!(c, Coll::AllGather | Coll::ReduceScatter) {
                            1.0
                        } else if matches!(a, Algo::Ring | Algo::Nvls | Algo::NvlsTree) {
                            nranks as f64 / nsteps
                        } else {
                            0.5
                        };
                    let bw_final = bus * ratio;

                    // Latency.
                    let mut l = BASE_LAT[ai][pi];
                    let mut intra_lat = intra_hw[ai][pi];
                    let mut inter_lat = if ppn == 1 {
                        HW_NET[0][pi]
                    } else {
                        HW_NET[ai][pi]
                    };
                    inter_lat += p.nccl.latency_inter;
                    if simple {
                        inter_lat += p.nccl.latency_inter;
                    }
                    let ppn_i = (nranks / nnodes) as f64;
                    let l2n = log2i(nnodes as u64) as f64;
                    match a {
                        Algo::Ring if matches!(c, Coll::Broadcast | Coll::Reduce) => {
                            // sameChannels holds for the searched rings.
                            l += hw[1][pi];
                        }
                        Algo::Ring => {
                            let no = if nnodes > 1 {
                                net_overhead * if simple { 3.0 } else { 1.0 }
                            } else {
                                0.0
                            };
                            intra_lat = intra_lat.max(no);
                            let n_inter = if nnodes == 1 {
                                0.0
                            } else if c == Coll::AllReduce {
                                2.0 * (nnodes as f64 - 1.0)
                            } else {
                                nnodes as f64 - 1.0
                            };
                            l += (nsteps - n_inter) * intra_lat + n_inter * inter_lat;
                        }
                        Algo::Tree => {
                            if c == Coll::AllReduce {
                                l += 2.0 * ((ppn_i - 1.0) * intra_lat + l2n * inter_lat);
                            }
                        }
                        Algo::CollNetDirect => {
                            l += 2.0 * ((ppn_i - 1.0).min(1.0) * intra_lat + (ppn_i - 1.0) * 0.4)
                                + inter_lat;
                        }
                        Algo::CollNetChain => l += 2.0 * (ppn_i - 1.0) * intra_lat + inter_lat,
                        Algo::Nvls => {
                            l = intra_lat;
                            if nnodes > 1 {
                                l += inter_lat;
                            }
                        }
                        Algo::NvlsTree => l += intra_lat + 2.0 * l2n * inter_lat,
                        Algo::Pat => {
                            if matches!(c, Coll::AllGather | Coll::ReduceScatter) {
                                l += l2n * inter_lat / 3.5 + 2.8 * nranks as f64;
                            }
                        }
                    }

                    lat[ci][ai][pi] = l;
                    bwt[ci][ai][pi] = bw_final;
                }
            }
        }
        NcclModel {
            lat,
            bw: bwt,
            nranks,
            nnodes,
            comm_channels: nch,
            nvls_channels: nvls_ch,
            ring_bw_intra: bw_intra,
            ring_bw_inter: bw_inter,
            cc,
            ppn,
            nics: p.net.nics_per_node,
        }
    }

    /// `ncclTopoGetAlgoTime`: µs, or `None` where the model has no entry (time −1).
    pub fn time(&self, c: Coll, a: Algo, p: Proto, nbytes: u64) -> Option<f64> {
        let mut bw = self.bw[c as usize][a as usize][p as usize];
        if bw <= 0.0 {
            return None;
        }
        let mut lat = self.lat[c as usize][a as usize][p as usize];
        let log_size = log2i(nbytes >> 6);
        if a == Algo::Tree && c == Coll::AllReduce && (0..23).contains(&log_size) {
            bw *= TREE_CORR[p as usize][log_size as usize];
        }
        if a == Algo::Ring
            && p == Proto::Simple
            && c == Coll::AllReduce
            && self.nnodes > 1
            && nbytes / (self.comm_channels as u64 * self.nranks as u64) >= 64
        {
            lat *= if self.cc < 80 { 1.9 } else { 1.4 };
        }
        Some(lat + nbytes as f64 / (1000.0 * bw))
    }

    /// NCCL's default choice: argmin over the model's table, ties to the lowest
    /// (algorithm, protocol) index, then its channel count; what a default run
    /// of `c` at `nbytes` executes on this communicator's nodes.
    pub fn choose(&self, c: Coll, nbytes: u64) -> Option<Op> {
        let mut best: Option<(f64, Algo, Proto)> = None;
        for a in Algo::ALL {
            for p in Proto::ALL {
                if let Some(t) = self.time(c, a, p, nbytes) {
                    if best.is_none_or(|(bt, _, _)| t < bt) {
                        best = Some((t, a, p));
                    }
                }
            }
        }
        best.map(|(_, algo, proto)| self.op(c, algo, proto, nbytes))
    }

    /// A run of `a`/`p` for `c` at `nbytes` on this communicator's nodes,
    /// at the channel count NCCL gives it (a forced setting's channels
    /// left to NCCL).
    pub fn op(&self, c: Coll, a: Algo, p: Proto, nbytes: u64) -> Op {
        Op {
            coll: c,
            nnodes: self.nnodes,
            nbytes,
            algo: a,
            proto: p,
            channels: self.channels(a, p, nbytes),
        }
    }

    /// `topoGetAlgoInfo`'s channel rule (§5.7).
    pub fn channels(&self, a: Algo, p: Proto, nbytes: u64) -> u32 {
        let nt: u64 = match (a, p) {
            (Algo::Ring, Proto::Simple) => {
                if self.ring_bw_intra * self.comm_channels as f64 <= 12.0 {
                    256
                } else {
                    512
                }
            }
            (Algo::Tree, Proto::Simple) => 512,
            (_, Proto::Simple) => 640,
            (_, Proto::LL) => 512,
            (_, Proto::LL128) => 640,
        };
        let mut threshold: u64 = match p {
            Proto::LL | Proto::LL128 => 8,
            Proto::Simple => 64,
        };
        if a == Algo::Ring && p == Proto::LL {
            threshold *= self.nranks as u64;
        }
        match a {
            Algo::Nvls | Algo::NvlsTree => {
                if self.nnodes > 1 {
                    self.nvls_channels.min(self.comm_channels)
                } else {
                    self.nvls_channels
                }
            }
            Algo::CollNetDirect | Algo::CollNetChain => {
                let heads = self.ppn.min(self.nics).max(1) as u64;
                let mut nc = self.comm_channels as u64;
                while nc > 1 && nbytes < nc * nt * heads * 512 {
                    nc /= 2;
                }
                nc as u32
            }
            _ => {
                let mut nc = self.comm_channels as u64;
                while nc >= 2 && nbytes < nc * nt * threshold {
                    nc -= 1;
                }
                nc as u32
            }
        }
    }
}

/// LL128 "auto" (§5.5 enable pass): NVLink-class paths and a recent GPU.
fn ll128_auto(p: &Profile) -> bool {
    let cc = p.compute_capability;
    let inter_ok = if cc >= 90 {
        p.nccl.type_inter <= 7
    } else {
        p.nccl.type_inter <= 5
    };
    inter_ok && p.nccl.type_intra <= 2 && cc >= 70
}

#[cfg(test)]
mod tests {
    use super::super::profile::builtin;
    use super::*;

    #[test]
    fn pick_steps_down_the_speed_array() {
        assert_eq!(pick(&SPEED_INTRA, 16.25), 15.0);
        assert_eq!(pick(&SPEED_INTER, 6.25), 6.0);
        assert_eq!(pick(&SPEED_INTRA, 1000.0), 40.0);
        assert_eq!(pick(&SPEED_INTRA, 0.1), 3.0);
    }

    #[test]
    fn support_rules_follow_nccl() {
        let m = NcclModel::new(&builtin("h100").unwrap(), 4);
        for a in Algo::ALL {
            for p in Proto::ALL {
                let bc = m.time(Coll::Broadcast, a, p, 1 << 20).is_some();
                assert_eq!(bc, a == Algo::Ring, "broadcast {a:?} {p:?}");
                if matches!(
                    a,
                    Algo::Nvls | Algo::NvlsTree | Algo::CollNetDirect | Algo::CollNetChain
                ) {
                    assert_eq!(
                        m.time(Coll::AllReduce, a, p, 1 << 20).is_some(),
                        p == Proto::Simple
                    );
                }
                assert!(m.time(Coll::AllReduce, Algo::Pat, p, 1 << 20).is_none());
            }
        }
        // NVLSTree needs more than one node.
        let m1 = NcclModel::new(&builtin("h100").unwrap(), 1);
        assert!(m1
            .time(Coll::AllReduce, Algo::NvlsTree, Proto::Simple, 1 << 20)
            .is_none());
        assert!(m1
            .time(Coll::AllReduce, Algo::Nvls, Proto::Simple, 1 << 20)
            .is_some());
    }

    #[test]
    fn ring_ll_single_node_latency_matches_hand_computation() {
        // V100, 1 node, 8 ranks: base 6.6 + 14 steps x 0.6 (NVLink Ring LL).
        let m = NcclModel::new(&builtin("v100").unwrap(), 1);
        let lat = m.lat[Coll::AllReduce as usize][Algo::Ring as usize][Proto::LL as usize];
        assert!((lat - (6.6 + 14.0 * 0.6)).abs() < 1e-9, "{lat}");
    }

    #[test]
    fn default_prefers_ll_small_and_simple_large() {
        for name in ["h100", "v100", "a100"] {
            let m = NcclModel::new(&builtin(name).unwrap(), 2);
            assert_eq!(
                m.choose(Coll::AllReduce, 64).unwrap().proto,
                Proto::LL,
                "{name}"
            );
            let big = m.choose(Coll::AllReduce, 1 << 30).unwrap();
            assert_ne!(big.proto, Proto::LL, "{name}");
            assert!(big.channels >= 1);
        }
    }

    #[test]
    fn channel_rule_shrinks_for_small_messages() {
        let m = NcclModel::new(&builtin("h100").unwrap(), 1);
        assert_eq!(m.channels(Algo::Ring, Proto::LL, 8), 1);
        assert_eq!(m.channels(Algo::Ring, Proto::Simple, 1 << 30), 16);
    }
}
