//! What a collective's chunk size does in the simulated worlds: NCCL's own
//! chunk (what it runs when no tuner answers `getChunkSize`) and the
//! modelled cost of running another one.
//!
//! NCCL moves a channel's data in chunks, one pipeline step each. Its
//! default chunk is the protocol's buffer slot (`calcCollChunking` in
//! src/enqueue.cc, NCCL 2.30): Simple's 4 MiB buffer in 8 steps, 4 steps per
//! chunk for a Ring AllReduce/AllGather/ReduceScatter and 1 otherwise; LL's
//! 512 KiB buffer in 8 steps, half of it flags; LL128's 4.6875 MiB in 8
//! steps, 15 of every 16 words data. Tree/LL128 and PAT shrink it for small
//! messages (below), and a tuner's chunk is clamped to the buffer slot and
//! rounded down to the protocol's grain. That part is NCCL's behaviour.
//!
//! The cost is modelled, not measured. A collective of `S` chunks a rank
//! moves through a path of `F` store-and-forward stages costs, beyond what
//! no chunk size changes, `S` x `P` x `o` (every chunk pays a fixed step
//! cost `o` in each of the `P` steps a rank makes per chunk: flag and fence,
//! the proxy posting a network send) plus `F` x `c / b` (the pipeline's fill
//! and drain: the first chunk of `c` bytes crosses each stage whole before
//! the next stage starts, at the channel's bandwidth `b`). Smaller chunks pay
//! more step costs; bigger ones a longer fill, which grows with the path:
//! tree depth and node count. `F` counts network hops: a NIC forwards a
//! step only once all of it arrived, whereas inside the node the next GPU
//! reads a step as it lands (LL and LL128 per line, Simple per slice), so
//! intra-node hops add no fill the calibrated time does not already hold.
//! On one node a chunk therefore only trades step costs: NCCL's, the
//! largest its buffer holds, is the best there for a Ring.
//! [`delta_us`] is the difference between a chunk and NCCL's own, so a run
//! at NCCL's chunk keeps the calibrated time exactly (CALIBRATION.md).
//! NVLS, NVLSTree and CollNet run their own chunk schedules through the
//! switches; the model gives them no chunk effect.

use super::op::Op;
use super::profile::Profile;
use crate::record::{Algo, Coll, Proto};

/// NCCL's pipeline steps per buffer (`NCCL_STEPS`).
const STEPS: u64 = 8;

/// A chunk step's fixed cost as a fraction of the hop latency, per protocol
/// (the part of a step's handshake that does not overlap the transfer).
const STEP_COST: [f64; 3] = [0.08, 0.12, 0.1];

/// The share of a chunk a network hop holds back before it forwards, per
/// protocol: the proxy sends a chunk in steps as they land (Simple's
/// slices, LL and LL128's buffer steps), so a hop waits for part of it.
const HOLD: [f64; 3] = [0.25, 0.2, 0.2];

/// The largest chunk NCCL runs for `(c, a, p)` (`bufferMaxChunkSize`): its
/// default before any shrinking, and the ceiling of a tuner's chunk.
pub fn buffer_max(c: Coll, a: Algo, p: Proto) -> u64 {
    match p {
        // 8 lines of 16 bytes per thread, 512 threads, half of each line flags.
        Proto::LL => 8 * 512 * STEPS * 16 / STEPS / 2,
        // 120 words per thread, 640 threads; 15 of each 16-word line data.
        Proto::LL128 => 120 * 640 * STEPS * 8 / STEPS / 16 * 15,
        Proto::Simple => {
            let steps = match (a, c) {
                (Algo::Ring, Coll::AllReduce | Coll::AllGather | Coll::ReduceScatter) => STEPS / 2,
                _ => 1,
            };
            (4 << 20) / STEPS * steps
        }
    }
}

/// Bytes one channel moves (`nBytes` of `calcCollChunking`, which NCCL
/// calls per channel).
fn per_channel(op: Op) -> u64 {
    op.nbytes / op.channels.max(1) as u64
}

/// NCCL's own chunk for `op`: its `nbytes` on its `channels` channels.
pub fn nccl_chunk(prof: &Profile, op: Op) -> u64 {
    let Op {
        coll: c,
        nnodes,
        algo: a,
        proto: p,
        ..
    } = op;
    let mut k = buffer_max(c, a, p);
    let nb = per_channel(op);
    let ppn = prof.gpus_per_node.max(1) as f64;
    match (a, p, c) {
        (Algo::Tree, Proto::LL128, _) => {
            // Fewer, smaller chunks for a small message on a deep tree:
            // halve until the message holds enough chunks for the steps.
            let depth = 1.0 + nnodes.max(1).ilog2() as f64 + 0.1 * ppn;
            while ((nb / k) as f64) < depth * 64.0 / ppn && k > 131072 {
                k /= 2;
            }
            while ((nb / k) as f64) < depth * 16.0 / ppn && k > 32768 {
                k /= 2;
            }
        }
        (Algo::Pat, _, Coll::AllGather) => {
            while k * 32 > nb && k > 65536 {
                k /= 2;
            }
        }
        (Algo::Pat, _, Coll::ReduceScatter) => {
            while k * 16 > nb && k > 65536 {
                k /= 2;
            }
        }
        _ => {}
    }
    on_grain(p, k)
}

/// `k` rounded down to the protocol's grain, as NCCL aligns a chunk.
fn on_grain(p: Proto, k: u64) -> u64 {
    let g = p.chunk_grain() as u64;
    k / g * g
}

/// The chunk NCCL runs when a tuner answers `asked` bytes: clamped to the
/// buffer slot, rounded down to the grain (NCCL's own below one grain).
pub fn forced_chunk(c: Coll, a: Algo, p: Proto, asked: u64) -> Option<u64> {
    let k = on_grain(p, asked.min(buffer_max(c, a, p)));
    (k > 0).then_some(k)
}

/// A pipeline's shape: what one rank's data is, how many steps a rank makes
/// per chunk, and the stages a chunk crosses whole.
struct Pipe {
    /// Bytes a rank moves per step when the message is one chunk.
    unit: f64,
    /// Steps a rank makes per chunk.
    steps: f64,
    /// Network hops a chunk crosses in sequence.
    net_hops: f64,
}

/// `op`'s pipeline; `None` for an algorithm whose chunk the model leaves
/// alone. The protocol does not shape it.
fn pipe(prof: &Profile, op: Op) -> Option<Pipe> {
    let ppn = prof.gpus_per_node as f64;
    let nodes = op.nnodes as f64;
    let n = ppn * nodes;
    let nb = per_channel(op) as f64;
    let log2 = |x: f64| x.max(1.0).log2().ceil();
    let twice = if op.coll == Coll::AllReduce { 2.0 } else { 1.0 };
    Some(match (op.algo, op.coll) {
        // A chain from (or to) the root: every rank forwards every chunk once.
        (Algo::Ring, Coll::Broadcast | Coll::Reduce) => Pipe {
            unit: nb,
            steps: 1.0,
            net_hops: nodes - 1.0,
        },
        // Each rank's share goes round the ring (twice for AllReduce).
        (Algo::Ring, _) => Pipe {
            unit: nb / n,
            steps: twice * (n - 1.0),
            net_hops: twice * (nodes - 1.0),
        },
        // Up the tree and down again: a chain through the node, a binary
        // tree across nodes.
        (Algo::Tree, _) => Pipe {
            unit: nb,
            steps: 2.0,
            net_hops: 2.0 * log2(nodes),
        },
        (Algo::Pat, _) => Pipe {
            unit: nb / n,
            steps: log2(n),
            net_hops: log2(nodes),
        },
        _ => return None,
    })
}

/// The chunk-dependent part of `op`'s time through pipeline `pp`, µs, when
/// `k` bytes are the chunk.
fn pipeline_us(prof: &Profile, op: Op, pp: &Pipe, k: u64) -> f64 {
    let pi = op.proto as usize;
    let ph = &prof.physics;
    let ch = op.channels.max(1) as f64;
    // One channel's share of the links, bytes per µs.
    let net_b = prof.net.node_gbs() * ph.eff_net[pi] * 1000.0 / ch;
    let multi = op.nnodes > 1;
    let hop = if multi {
        prof.net.hop_us[pi]
    } else {
        prof.intra.hop_us[pi]
    };
    let step = STEP_COST[pi] * hop;
    // A message smaller than the chunk is one chunk of its own size.
    let unit = pp.unit.max(1.0);
    let chunks = (unit / k.max(1) as f64).ceil().max(1.0);
    let c = unit / chunks;
    let fill = HOLD[pi] * c * pp.net_hops / net_b;
    chunks * pp.steps * step + fill
}

/// The most a chunk saves, as a share of the calibrated time: the fill the
/// model charges NCCL's chunk is an upper bound (the calibrated time already
/// hides part of it, as Broadcast's pipelined latency does), so a saving
/// saturates smoothly below this share instead of exceeding what the time
/// holds.
const MAX_SAVING: f64 = 0.15;

/// How much longer (negative: shorter) `op`, of calibrated time `t_us`,
/// runs, µs, when a tuner answers `asked` bytes for its chunk than at
/// NCCL's own chunk. Exactly 0.0 where what runs is NCCL's chunk, and for
/// algorithms whose chunk the model leaves alone; never a saving of
/// `MAX_SAVING` x `t_us` or more.
pub fn delta_us(prof: &Profile, op: Op, asked: u64, t_us: f64) -> f64 {
    let (Some(pp), Some(k)) = (
        pipe(prof, op),
        forced_chunk(op.coll, op.algo, op.proto, asked),
    ) else {
        return 0.0;
    };
    let def = nccl_chunk(prof, op);
    if k == def {
        return 0.0;
    }
    let d = pipeline_us(prof, op, &pp, k) - pipeline_us(prof, op, &pp, def);
    if d >= 0.0 {
        return d;
    }
    let cap = MAX_SAVING * t_us;
    -cap * (-d / cap).tanh()
}

#[cfg(test)]
mod tests {
    use super::super::nccl_model::NcclModel;
    use super::super::op::Op;
    use super::super::physics::{configs, true_time, true_time_chunked};
    use super::super::profile::{builtin, builtins};
    use super::*;

    /// Chunks a sweep might ask for, 16 KiB to 2 MiB, and the ladders' sizes.
    fn asked() -> Vec<u64> {
        (14..=21)
            .map(|e| 1u64 << e)
            .chain([18000, 36000, 72000, 144000, 288000])
            .collect()
    }

    #[test]
    fn nccl_chunk_is_nccls_buffer_slot_and_shrinks_where_nccl_does() {
        let h = builtin("h100").unwrap();
        let big = 1u64 << 32;
        let k = |nnodes, coll, algo, proto, nbytes| {
            let op = Op {
                coll,
                nnodes,
                nbytes,
                algo,
                proto,
                channels: 16,
            };
            nccl_chunk(&h, op)
        };
        use Algo::*;
        use Coll::*;
        use Proto::*;
        assert_eq!(k(8, AllReduce, Ring, Simple, big), 2 << 20);
        assert_eq!(k(8, AllGather, Ring, Simple, big), 2 << 20);
        assert_eq!(k(8, Broadcast, Ring, Simple, big), 512 << 10);
        assert_eq!(k(8, AllReduce, Tree, Simple, big), 512 << 10);
        assert_eq!(k(8, AllReduce, Ring, LL, big), 32 << 10);
        assert_eq!(k(8, AllReduce, Ring, LL128, big), 576000);
        assert_eq!(k(8, AllReduce, Tree, LL128, big), 576000);
        // Tree/LL128 halves for a small message, to 18000 (17280 on the grain).
        assert_eq!(k(16, AllReduce, Tree, LL128, 4 << 20), 17280);
        assert_eq!(k(16, AllReduce, Tree, LL128, 32 << 20), 71040);
        // A deeper tree (more nodes) keeps smaller chunks to larger sizes.
        assert!(k(2, AllReduce, Tree, LL128, 16 << 20) >= k(32, AllReduce, Tree, LL128, 16 << 20));
        // Every default is on its protocol's grain and at most the buffer slot.
        for p in Proto::ALL {
            for lg in 10..33 {
                let d = k(16, AllReduce, Tree, p, 1 << lg);
                assert_eq!(d % p.chunk_grain() as u64, 0);
                assert!(d <= buffer_max(AllReduce, Tree, p));
            }
        }
        let mut one = builtin("h100").unwrap();
        one.gpus_per_node = 1;
        let pat = Op {
            coll: AllGather,
            nnodes: 16,
            nbytes: 1 << 20,
            algo: Pat,
            proto: Simple,
            channels: 1,
        };
        assert_eq!(nccl_chunk(&one, pat), 64 << 10);
        let big = Op {
            nbytes: 1 << 30,
            ..pat
        };
        assert_eq!(nccl_chunk(&one, big), 512 << 10);
    }

    #[test]
    fn a_forced_chunk_is_clamped_to_the_buffer_and_rounded_to_the_grain() {
        use Algo::*;
        use Coll::*;
        assert_eq!(
            forced_chunk(AllReduce, Ring, Proto::LL, 1 << 20),
            Some(32768)
        );
        assert_eq!(
            forced_chunk(AllReduce, Tree, Proto::LL128, 1 << 16),
            Some(65280)
        );
        assert_eq!(
            forced_chunk(Broadcast, Ring, Proto::Simple, 4 << 20),
            Some(512 << 10)
        );
        assert_eq!(forced_chunk(AllReduce, Ring, Proto::LL128, 1000), None);
    }

    /// NCCL's own chunk, asked for or not asked at all, is the calibrated
    /// time to the bit, on every profile, node count, setting and size.
    #[test]
    fn nccls_chunk_is_the_calibrated_time_exactly() {
        for prof in builtins() {
            for nn in [1u32, 2, 4, 16] {
                if nn * prof.gpus_per_node < 2 {
                    continue;
                }
                let m = NcclModel::new(&prof, nn);
                for c in Coll::ALL {
                    for (a, p) in configs(&prof, nn, c) {
                        for lg in (3..33).step_by(3) {
                            let s = 1u64 << lg;
                            let op = m.op(c, a, p, s);
                            let t = true_time(&prof, op);
                            let def = nccl_chunk(&prof, op);
                            for k in [0, def] {
                                let tk = true_time_chunked(&prof, op, k);
                                assert_eq!(
                                    tk.to_bits(),
                                    t.to_bits(),
                                    "{} {nn} {c:?} {a:?} {p:?} {s} {k}",
                                    prof.name
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    /// The two pieces move the way the model says: smaller chunks cost more
    /// step costs, bigger ones more fill, more so on more nodes.
    #[test]
    fn step_costs_fall_and_fill_grows_with_the_chunk() {
        let h = builtin("h100").unwrap();
        let nb = 64u64 << 20;
        let tree = |nnodes: u32| Op {
            coll: Coll::AllReduce,
            nnodes,
            nbytes: nb,
            algo: Algo::Tree,
            proto: Proto::LL128,
            channels: 16,
        };
        for nn in [2u32, 8, 32] {
            let op = tree(nn);
            let pp = pipe(&h, op).unwrap();
            let steps = |k: u64| {
                let flat = Pipe {
                    net_hops: 0.0,
                    ..pipe(&h, op).unwrap()
                };
                pipeline_us(&h, op, &flat, k)
            };
            let fill = |k: u64| pipeline_us(&h, op, &pp, k) - steps(k);
            let ks = [16u64 << 10, 64 << 10, 256 << 10, 1 << 20];
            for w in ks.windows(2) {
                assert!(steps(w[0]) > steps(w[1]), "{nn}: steps {w:?}");
                assert!(fill(w[0]) < fill(w[1]), "{nn}: fill {w:?}");
            }
        }
        // The fill a chunk costs grows with the tree's depth.
        let fill_at = |nn: u32| {
            let op = tree(nn);
            let pp = pipe(&h, op).unwrap();
            let flat = Pipe {
                net_hops: 0.0,
                ..pipe(&h, op).unwrap()
            };
            pipeline_us(&h, op, &pp, 256 << 10) - pipeline_us(&h, op, &flat, 256 << 10)
        };
        assert!(fill_at(2) < fill_at(8) && fill_at(8) < fill_at(32));
    }

    /// The best chunk of a Tree/LL128 AllReduce shrinks as the tree deepens.
    #[test]
    fn the_best_tree_chunk_shrinks_with_node_count() {
        let h = builtin("h100").unwrap();
        let best = |nnodes: u32| {
            let op = Op {
                coll: Coll::AllReduce,
                nnodes,
                nbytes: 4 << 20,
                algo: Algo::Tree,
                proto: Proto::LL128,
                channels: 16,
            };
            let t = |k| true_time_chunked(&h, op, k);
            asked()
                .into_iter()
                .min_by(|x, y| t(*x).total_cmp(&t(*y)))
                .unwrap()
        };
        let b: Vec<u64> = [2, 4, 8, 32].into_iter().map(best).collect();
        assert!(b.windows(2).all(|w| w[1] <= w[0]), "{b:?}");
        assert!(b[0] > b[3], "{b:?}");
    }

    /// On one node there is no network fill: a smaller chunk than NCCL's
    /// never helps a Ring.
    #[test]
    fn on_one_node_a_smaller_ring_chunk_never_helps() {
        for prof in builtins() {
            if prof.gpus_per_node < 2 {
                continue;
            }
            let m = NcclModel::new(&prof, 1);
            for c in Coll::ALL {
                for p in Proto::ALL {
                    for lg in 10..33 {
                        let s = 1u64 << lg;
                        let op = m.op(c, Algo::Ring, p, s);
                        let t = true_time(&prof, op);
                        for k in asked() {
                            let tk = true_time_chunked(&prof, op, k);
                            assert!(tk >= t, "{} {c:?} {p:?} {s} {k}", prof.name);
                        }
                    }
                }
            }
        }
    }

    /// Where the model puts wins: modest, a few per cent to at most
    /// MAX_SAVING, in repeatable places (Tree/LL128 AllReduce and Ring
    /// Broadcast at mid sizes on many nodes); a chunk never makes a
    /// collective free.
    #[test]
    fn chunk_wins_are_modest_and_where_pipelines_are_deep() {
        let h = builtin("h100").unwrap();
        let gain = |nnodes: u32, coll: Coll, algo: Algo, proto: Proto, nbytes: u64| {
            let op = NcclModel::new(&h, nnodes).op(coll, algo, proto, nbytes);
            let t = true_time(&h, op);
            let best = asked()
                .into_iter()
                .map(|k| true_time_chunked(&h, op, k))
                .fold(t, f64::min);
            t / best
        };
        let tree = gain(16, Coll::AllReduce, Algo::Tree, Proto::LL128, 4 << 20);
        assert!((1.05..1.0 / (1.0 - MAX_SAVING)).contains(&tree), "{tree}");
        let bcast = gain(16, Coll::Broadcast, Algo::Ring, Proto::Simple, 8 << 20);
        assert!((1.05..1.0 / (1.0 - MAX_SAVING)).contains(&bcast), "{bcast}");
        // Little to win on two nodes' Ring Broadcast at a small size.
        assert!(gain(2, Coll::Broadcast, Algo::Ring, Proto::Simple, 1 << 20) < 1.02);
        for prof in builtins() {
            for nn in [2u32, 16, 64] {
                let m = NcclModel::new(&prof, nn);
                for c in Coll::ALL {
                    for (a, p) in configs(&prof, nn, c) {
                        for lg in (10..33).step_by(2) {
                            let s = 1u64 << lg;
                            let op = m.op(c, a, p, s);
                            let t = true_time(&prof, op);
                            for k in asked() {
                                let tk = true_time_chunked(&prof, op, k);
                                assert!(
                                    tk > (1.0 - MAX_SAVING) * t - 1e-9,
                                    "{} {nn} {c:?} {a:?} {p:?} {s} {k}",
                                    prof.name
                                );
                            }
                        }
                    }
                }
            }
        }
    }
}
