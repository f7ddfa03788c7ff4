//! Exploration (`DYNCC_EXPLORE=F`): on at most a share F of the calls at a
//! shape (communicator, collective, size bucket) whose answer the table
//! could not confirm at this communicator's node count, run another
//! setting, so traces measure it where jobs really run.
//!
//! Two kinds of shape explore, both read from what the table already
//! stores (each rule's decision, basis and gain; contexts' node ranges):
//!
//! * the rule forces a setting on a basis other than `measured`: the call
//!   runs NCCL's own choice instead (nothing written), unless the rule's
//!   predicted gain is above [`MAX_FORGONE_GAIN`];
//! * the rule is NCCL's default on a basis other than `measured`, or no
//!   context covers the communicator: the call runs what the collective's
//!   nearest context by node count on either side forces at this size
//!   (same ranks per node, same side of the one-node boundary, within a
//!   factor [`NEIGHBOUR_FACTOR`] of its node range), if NCCL has not marked
//!   it unavailable. Where the nearest context below and the nearest above
//!   force different settings, picked turns alternate between them: the
//!   two disagree exactly where a reading between them is least sure, and
//!   only a measurement here tells which (if either) carries over.
//!
//! A measured rule never explores. The schedule is a per-(communicator
//! context, collective, bucket) phase accumulator started from a hash of
//! the shape: call k at the shape is picked iff
//! `floor((k+1)F + h) > floor(kF + h)` (F rounded down to 32 bits), and a
//! picked call explores if the probe applies to it (the table's answer is
//! the kind the probe replaces, and the call is in the explored setting's
//! call state), else that turn is skipped. So every rank of a communicator
//! makes the same choice on every call (no clock, no randomness, nothing
//! shared between ranks' contexts), and over any n calls at a shape at
//! most `ceil(nF)` explore.

use core::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use dyncc_tables::{
    pipe_ops_allowed, Basis, Coll, Decision, RegBuff, Specialised, Table, MAX_CHANNELS,
    NUM_BUCKETS, NUM_COLLS,
};

/// The largest share of calls exploration may take.
pub const MAX_SHARE: f64 = 0.1;

/// Largest predicted gain of an unconfirmed forced rule for which a call
/// still runs NCCL's own choice. A rule's gain is the table's estimate of
/// `t_nccl / t_forced`, so an explored call expects to cost at most 25 %
/// more than the table's answer and a whole job at most `F x 25 %` (0.5 %
/// at the F = 0.02, half its 1 % budget, leaving room for the
/// estimate itself being off; 2.5 % at the cap F = 0.1). Rules predicted
/// to win by more are left alone: a measurement there is worth less than
/// its cost.
pub const MAX_FORGONE_GAIN: f32 = 1.25;

/// How far (as a factor of node counts) a neighbouring context's forced
/// setting may be carried to a communicator it does not cover. The table
/// stores no estimate of that setting's loss at this node count, so the
/// bound is on distance, and it is the compiler's own: `dyncc compile`
/// forces a setting on every call up to `--node-reach` (default 8x) beyond
/// the counts that measured it, so exploration tries one on at most a
/// share F of the calls within the same reach; never across the one-node
/// boundary. (It was 2x: in the loop tests, 8x found the gain at counts
/// 2x-8x from anything forced, at no measurable extra cost.)
pub const NEIGHBOUR_FACTOR: u64 = 8;

/// `DYNCC_EXPLORE`: the share F as a 32-bit fixed-point step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Share {
    /// `floor(F x 2^32)`: the phase advance per call (rounded down, so the
    /// share explored is never above F).
    step: u32,
    /// F in parts per million, for messages.
    ppm: u32,
}

impl Share {
    /// Parses `DYNCC_EXPLORE`: a number with 0 < F <= [`MAX_SHARE`].
    pub fn parse(v: &str) -> Option<Share> {
        let f: f64 = v.trim().parse().ok()?;
        if !(f > 0.0 && f <= MAX_SHARE) {
            return None;
        }
        Some(Share {
            step: (f * 4_294_967_296.0) as u32,
            ppm: (f * 1e6).round() as u32,
        })
    }

    /// F as a fraction.
    pub fn fraction(self) -> f64 {
        f64::from(self.ppm) / 1e6
    }
}

impl core::fmt::Display for Share {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}", self.fraction())
    }
}

static WARNED: AtomicBool = AtomicBool::new(false);

/// True the first time in this process (the bad-value WARN is said once).
pub(crate) fn first_warning() -> bool {
    !WARNED.swap(true, Ordering::Relaxed)
}

/// What a call at one (collective, bucket) may explore.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Probe {
    /// Nothing: confirmed, or no candidate.
    None,
    /// The table forces an unconfirmed setting: run NCCL's own choice.
    Nccl,
    /// The table leaves NCCL alone, unconfirmed: run this setting (always
    /// a `Decision::Force`).
    Setting(Decision),
}

/// The gates of the context a [`Probe::Setting`] came from: it was
/// measured in that call state only.
#[derive(Clone, Copy, Debug)]
struct Gate {
    max_pipe_ops: u32,
    reg_buff: RegBuff,
}

/// `Cell::probe` of a cell that never explores.
const NO_PROBE: u32 = 0;
/// Set in `Cell::probe` of a cell that explores; the low 24 bits are the
/// packed decision to run (`Decision::Default`: NCCL's own choice).
const HAS_PROBE: u32 = 1 << 31;
/// Set in a probe word whose setting came from the neighbour above (its
/// gate is `Explorer::gates[coll][1]`; else `[0]`, the one below).
const ABOVE: u32 = 1 << 30;

/// One (collective, bucket): what it explores and its schedule, side by
/// side so a call touches one cache line.
struct Cell {
    /// [`NO_PROBE`], or [`HAS_PROBE`] with a packed decision.
    probe: u32,
    /// A call explores when adding `step` to this wraps. Plain load and
    /// store: NCCL calls a communicator's tuner from one thread at a time,
    /// and an atomic add would cost more than the rest of getCollInfo.
    phase: AtomicU32,
    /// A second setting, picked on odd turns ([`NO_PROBE`]: none).
    other: u32,
    /// Turns picked so far (plain load and store, as `phase`).
    turns: AtomicU32,
}

/// One communicator context's exploration plan and schedule. Built at
/// init (about 20 KiB, boxed); read with plain loads and stores.
pub struct Explorer {
    step: u32,
    cells: [[Cell; NUM_BUCKETS]; NUM_COLLS],
    /// Per collective, the gates of the neighbour below and above.
    gates: [[Gate; 2]; NUM_COLLS],
    /// How many (collective, bucket) cells can explore, for the init line.
    pub counts: Counts,
}

/// How many cells of each kind, for the init line.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Cells that run NCCL's choice instead of an unconfirmed forced one.
    pub nccl: u32,
    /// Cells that run a neighbouring context's setting.
    pub neighbour: u32,
}

/// A shape's starting phase: a hash of the communicator's shape, the
/// collective and the bucket (splitmix64's finaliser), so shapes do not
/// all explore on the same call. Every rank computes the same.
fn start_phase(n_ranks: u64, n_nodes: u64, coll: usize, bucket: usize) -> u32 {
    let mut z = n_ranks
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(n_nodes << 32)
        .wrapping_add((coll as u64) << 8 | bucket as u64);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    (z ^ (z >> 31)) as u32
}

/// Which side of a communicator of `n_nodes` nodes a context over `nodes`
/// lies on: 0 below (or over it), 1 above.
fn side(nodes: (u32, u32), n_nodes: u64) -> usize {
    usize::from(u64::from(nodes.0) > n_nodes)
}

/// Whether a context over `nodes` may lend its setting to a communicator
/// of `n_nodes` nodes, and how far it is.
fn neighbour_distance(nodes: (u32, u32), n_nodes: u64) -> Option<u64> {
    let (lo, hi) = (u64::from(nodes.0), u64::from(nodes.1));
    // Never across the one-node boundary: intra-node only is another world.
    if (n_nodes == 1) != (hi == 1) || (n_nodes > 1 && lo == 1) {
        return None;
    }
    if n_nodes > hi.saturating_mul(NEIGHBOUR_FACTOR)
        || lo > n_nodes.saturating_mul(NEIGHBOUR_FACTOR)
    {
        return None;
    }
    Some(lo.saturating_sub(n_nodes) + n_nodes.saturating_sub(hi))
}

impl Explorer {
    /// The plan for a communicator of `n_ranks` on `n_nodes` whose
    /// decisions are `spec` (from `table`); `None` when nothing can explore.
    pub fn build(
        table: &Table<'_>,
        spec: &Specialised,
        n_ranks: u64,
        n_nodes: u64,
        share: Share,
    ) -> Option<Box<Explorer>> {
        let mut e = Box::new(Explorer {
            step: share.step,
            cells: [const {
                [const {
                    Cell {
                        probe: NO_PROBE,
                        phase: AtomicU32::new(0),
                        other: NO_PROBE,
                        turns: AtomicU32::new(0),
                    }
                }; NUM_BUCKETS]
            }; NUM_COLLS],
            gates: [[Gate {
                max_pipe_ops: 0,
                reg_buff: RegBuff::Any,
            }; 2]; NUM_COLLS],
            counts: Counts::default(),
        });
        for coll in Coll::ALL {
            let c = coll as usize;
            let own = spec.context(coll).and_then(|i| table.context(i));
            let ranks_per_node = n_ranks.checked_div(n_nodes).unwrap_or(n_ranks);
            // The nearest other context of this collective on each side,
            // same ranks per node (another ppn is another regime); ties go
            // to file order.
            // The other contexts of this collective on one side within
            // reach, same ranks per node (another ppn is another regime)
            // and the same call state as the nearest, nearest first (ties
            // in file order): per bucket the first that forces a setting
            // there lends it (the nearest often only read its choice off
            // the same counts and left NCCL alone).
            let side_of = |want: usize| {
                let mut v: Vec<_> = table
                    .contexts()
                    .filter(|v| Some(v.index()) != own.as_ref().map(|o| o.index()))
                    .filter(|v| {
                        let s = v.spec();
                        s.coll == coll
                            && u64::from(s.ppn.0) <= ranks_per_node
                            && ranks_per_node <= u64::from(s.ppn.1)
                            && side(s.nodes, n_nodes) == want
                    })
                    .filter_map(|v| neighbour_distance(v.spec().nodes, n_nodes).map(|d| (d, v)))
                    .collect();
                v.sort_by_key(|(d, v)| (*d, v.index()));
                let gate = v.first().map(|(_, n)| Gate {
                    max_pipe_ops: n.spec().max_pipe_ops,
                    reg_buff: n.spec().reg_buff,
                });
                let same = |n: &dyncc_tables::ContextView<'_>| {
                    gate.is_some_and(|g| {
                        g.max_pipe_ops == n.spec().max_pipe_ops && g.reg_buff == n.spec().reg_buff
                    })
                };
                let v: Vec<_> = v.into_iter().map(|(_, n)| n).filter(|n| same(n)).collect();
                (v, gate)
            };
            let (below, above) = (side_of(0), side_of(1));
            for (g, side) in e.gates[c].iter_mut().zip([&below, &above]) {
                if let Some(gate) = side.1 {
                    *g = gate;
                }
            }
            // Per side and bucket, the probe word the nearest context
            // forcing a setting there lends: each neighbour's rules once,
            // nearest first, filling the buckets still empty.
            let mut lent = [[NO_PROBE; NUM_BUCKETS]; 2];
            for (i, side) in [&below.0, &above.0].into_iter().enumerate() {
                let flag = if i == 1 { ABOVE } else { 0 };
                for n in side {
                    let mut first = 0usize;
                    for r in n.rules() {
                        let last = usize::from(r.last_bucket);
                        if let d @ Decision::Force {
                            channels: ..=MAX_CHANNELS,
                            ..
                        } = r.decision
                        {
                            for w in lent[i].iter_mut().take(last + 1).skip(first) {
                                if *w == NO_PROBE {
                                    *w = HAS_PROBE | flag | d.to_packed();
                                }
                            }
                        }
                        first = last + 1;
                    }
                }
            }
            for (b, (&lent_below, &lent_above)) in lent[0].iter().zip(&lent[1]).enumerate() {
                let rule = own.as_ref().and_then(|o| o.rule_for_bucket(b as u8));
                let (probe, other) = match rule {
                    Some((_, r)) if r.basis == Basis::Measured => (NO_PROBE, NO_PROBE),
                    Some((_, r)) if r.decision.is_forced() => {
                        if r.gain <= MAX_FORGONE_GAIN {
                            e.counts.nccl += 1;
                            (HAS_PROBE | Decision::Default.to_packed(), NO_PROBE)
                        } else {
                            (NO_PROBE, NO_PROBE)
                        }
                    }
                    // Default, unconfirmed, or no context at all.
                    _ => match (lent_below, lent_above) {
                        (NO_PROBE, NO_PROBE) => (NO_PROBE, NO_PROBE),
                        (x, NO_PROBE) | (NO_PROBE, x) => {
                            e.counts.neighbour += 1;
                            (x, NO_PROBE)
                        }
                        // The same setting on both sides: one probe.
                        (x, y) if x & !ABOVE == y & !ABOVE => {
                            e.counts.neighbour += 1;
                            (x, NO_PROBE)
                        }
                        (x, y) => {
                            e.counts.neighbour += 1;
                            (x, y)
                        }
                    },
                };
                e.cells[c][b] = Cell {
                    probe,
                    phase: AtomicU32::new(start_phase(n_ranks, n_nodes, c, b)),
                    other,
                    turns: AtomicU32::new(0),
                };
            }
        }
        (e.counts != Counts::default()).then_some(e)
    }

    /// What a call at one cell explores (for tests and messages): on even
    /// turns, and on odd ones when it has one setting.
    pub fn plan(&self, coll: Coll, bucket: u8) -> Probe {
        decode(self.cells[coll as usize][bucket as usize].probe)
    }

    /// The second setting a cell alternates with, if any.
    pub fn plan_other(&self, coll: Coll, bucket: u8) -> Probe {
        decode(self.cells[coll as usize][bucket as usize].other)
    }

    /// What this call explores, given the table's decision `d` for it.
    /// Every call at a cell that can explore advances its schedule; the
    /// call the schedule picks explores only if it is one the cell's
    /// probe applies to (else that turn is skipped). Hot path: a load and
    /// a branch, then for an exploring cell a load, an add and a store; no
    /// allocation, lock, log or panic.
    #[inline]
    pub fn probe(
        &self,
        coll_type: u32,
        bucket: u8,
        num_pipe_ops: i32,
        reg_buff: i32,
        d: Decision,
    ) -> Probe {
        let Some(row) = self.cells.get(coll_type as usize) else {
            return Probe::None;
        };
        // A u8 bucket indexes a 256-entry row: no bounds check.
        let cell = &row[bucket as usize];
        if cell.probe == NO_PROBE {
            return Probe::None;
        }
        let now = cell.phase.load(Ordering::Relaxed);
        let next = now.wrapping_add(self.step);
        cell.phase.store(next, Ordering::Relaxed);
        if next >= now {
            return Probe::None;
        }
        self.picked(cell, coll_type, num_pipe_ops, reg_buff, d)
    }

    /// The turn the schedule picked (at most a share F of the calls).
    #[cold]
    #[inline(never)]
    fn picked(
        &self,
        cell: &Cell,
        coll_type: u32,
        num_pipe_ops: i32,
        reg_buff: i32,
        d: Decision,
    ) -> Probe {
        // Two settings: alternate turns between them.
        let turn = cell.turns.load(Ordering::Relaxed);
        cell.turns.store(turn.wrapping_add(1), Ordering::Relaxed);
        let probe = if cell.other != NO_PROBE && turn % 2 == 1 {
            cell.other
        } else {
            cell.probe
        };
        let gate = self
            .gates
            .get(coll_type as usize)
            .map(|g| g[usize::from(probe & ABOVE != 0)]);
        match decode(probe) {
            // Only when the table's forced answer applies to this call.
            Probe::Nccl if d.is_forced() => Probe::Nccl,
            // Only when the table leaves the call to NCCL and the call is
            // in the state the setting was measured in.
            Probe::Setting(s) if !d.is_forced() => match gate {
                Some(g)
                    if pipe_ops_allowed(g.max_pipe_ops, num_pipe_ops)
                        && g.reg_buff.allows(reg_buff) =>
                {
                    Probe::Setting(s)
                }
                _ => Probe::None,
            },
            _ => Probe::None,
        }
    }
}

/// A cell's probe word as a [`Probe`].
fn decode(probe: u32) -> Probe {
    if probe & HAS_PROBE == 0 {
        return Probe::None;
    }
    match Decision::from_packed(probe & !(HAS_PROBE | ABOVE)) {
        Some(Decision::Default) => Probe::Nccl,
        Some(d) => Probe::Setting(d),
        None => Probe::None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dyncc_tables::{Algo, ContextSpec, Proto, Rule, TableBuilder};

    #[test]
    fn share_parses_only_within_bounds() {
        assert_eq!(Share::parse("0.05").map(|s| s.ppm), Some(50_000));
        assert_eq!(Share::parse(" 0.1 ").map(|s| s.ppm), Some(100_000));
        for bad in ["0", "-0.01", "0.11", "1", "nan", "inf", "", "five"] {
            assert_eq!(Share::parse(bad), None, "{bad}");
        }
    }

    /// Unset or empty: off, silently; in range: on; else off with the
    /// value kept for the WARN.
    #[test]
    fn config_reads_dyncc_explore() {
        let cfg = |v: Option<&str>| {
            let c = crate::plugin::Config::from_vars(|k| {
                v.filter(|_| k == "DYNCC_EXPLORE").map(Into::into)
            });
            (c.explore, c.bad_explore)
        };
        assert_eq!(cfg(None), (None, None));
        assert_eq!(cfg(Some("")), (None, None));
        assert_eq!(cfg(Some("0.02")), (Share::parse("0.02"), None));
        assert_eq!(cfg(Some("0.2")), (None, Some("0.2".to_string())));
    }

    fn force(algo: Algo, proto: Proto) -> Decision {
        Decision::Force {
            algo,
            proto,
            channels: 0,
        }
    }

    fn ctx(nodes: (u32, u32), rules: &[Rule], b: &mut TableBuilder) {
        b.context(
            ContextSpec {
                coll: Coll::AllReduce,
                nodes,
                ppn: (8, 8),
                max_pipe_ops: 0,
                reg_buff: RegBuff::Any,
            },
            rules,
        )
        .unwrap();
    }

    fn rule(last: u8, decision: Decision, basis: Basis, gain: f32) -> Rule {
        Rule {
            last_bucket: last,
            decision,
            basis,
            gain,
        }
    }

    /// 4 nodes: measured Tree/LL in bucket <= 10, measured default above.
    /// 5-7 nodes: interpolated Tree/LL (gain 1.1) <= 10, interpolated
    /// Tree/LL with gain 1.5 in 11-20, interpolated default above.
    fn table() -> Vec<u8> {
        let ll = force(Algo::Tree, Proto::LL);
        let mut b = TableBuilder::new();
        ctx(
            (4, 4),
            &[
                rule(10, ll, Basis::Measured, 1.3),
                rule(30, force(Algo::Ring, Proto::LL128), Basis::Measured, 1.2),
                rule(255, Decision::Default, Basis::Measured, 1.0),
            ],
            &mut b,
        );
        ctx(
            (5, 7),
            &[
                rule(10, ll, Basis::Interpolated, 1.1),
                rule(20, ll, Basis::Interpolated, 1.5),
                rule(255, Decision::Default, Basis::Interpolated, 1.0),
            ],
            &mut b,
        );
        b.build().unwrap()
    }

    fn plan(bytes: &[u8], nodes: u64) -> Option<Box<Explorer>> {
        let t = Table::from_bytes(bytes).unwrap();
        let spec = t.specialise(nodes * 8, nodes);
        Explorer::build(&t, &spec, nodes * 8, nodes, Share::parse("0.1").unwrap())
    }

    #[test]
    fn each_cell_explores_what_the_table_could_not_confirm() {
        let bytes = table();
        // Measured at 4 nodes: nothing, anywhere.
        assert!(plan(&bytes, 4).is_none());
        let e = plan(&bytes, 6).unwrap();
        assert_eq!(e.plan(Coll::AllReduce, 10), Probe::Nccl);
        // Predicted to win by 50 %: above the loss bound, left alone.
        assert_eq!(e.plan(Coll::AllReduce, 15), Probe::None);
        // Unconfirmed default: the 4-node context's setting at that size,
        // or nothing where it too leaves NCCL alone.
        assert_eq!(
            e.plan(Coll::AllReduce, 25),
            Probe::Setting(force(Algo::Ring, Proto::LL128))
        );
        assert_eq!(e.plan(Coll::AllReduce, 40), Probe::None);
        // 9 nodes: no context covers it; 5-7 is nearest (within 8x), and
        // where it forces nothing the 4-node context does.
        let e = plan(&bytes, 9).unwrap();
        assert_eq!(
            e.plan(Coll::AllReduce, 5),
            Probe::Setting(force(Algo::Tree, Proto::LL))
        );
        assert_eq!(
            e.plan(Coll::AllReduce, 25),
            Probe::Setting(force(Algo::Ring, Proto::LL128))
        );
        assert_eq!(e.plan(Coll::AllReduce, 40), Probe::None);
        // 57 nodes: more than 8x the nearest context's 7: nothing.
        assert!(plan(&bytes, 56).is_some());
        assert!(plan(&bytes, 57).is_none());
        // One node never borrows a multi-node setting.
        assert!(plan(&bytes, 1).is_none());
    }

    /// Over any window of n calls at a shape at most ceil(nF) explore, and
    /// over long runs the share is at most F.
    #[test]
    fn the_explored_share_stays_within_f() {
        let bytes = table();
        let e = plan(&bytes, 6).unwrap();
        let ll = force(Algo::Tree, Proto::LL);
        let b = 10;
        let hits: Vec<bool> = (0..10_000)
            .map(|_| e.probe(Coll::AllReduce as u32, b, 1, 0, ll) == Probe::Nccl)
            .collect();
        let total = hits.iter().filter(|h| **h).count();
        assert!((999..=1000).contains(&total), "{total}");
        for w in hits.windows(25) {
            assert!(w.iter().filter(|h| **h).count() <= 3);
        }
        // A call the rule does not force (its gate failed) never explores.
        for _ in 0..100 {
            assert_eq!(
                e.probe(Coll::AllReduce as u32, b, 1, 0, Decision::Default),
                Probe::None
            );
        }
    }

    /// Between a context forcing Tree/LL (2 nodes) and one forcing
    /// Ring/LL128 (8 nodes), with an unmeasured 3-node context that left
    /// NCCL alone in between: a 4-node communicator (no context of its
    /// own) tries both, alternating, skipping the nearer context that
    /// forces nothing at that size.
    #[test]
    fn the_nearest_forcing_context_on_each_side_lends_and_turns_alternate() {
        let (ll, ll128) = (
            force(Algo::Tree, Proto::LL),
            force(Algo::Ring, Proto::LL128),
        );
        let mut b = TableBuilder::new();
        ctx((2, 2), &[rule(255, ll, Basis::Measured, 1.2)], &mut b);
        ctx(
            (3, 3),
            &[rule(255, Decision::Default, Basis::Interpolated, 1.0)],
            &mut b,
        );
        ctx((8, 8), &[rule(255, ll128, Basis::Measured, 1.2)], &mut b);
        let bytes = b.build().unwrap();
        let e = plan(&bytes, 4).unwrap();
        assert_eq!(e.plan(Coll::AllReduce, 20), Probe::Setting(ll));
        assert_eq!(e.plan_other(Coll::AllReduce, 20), Probe::Setting(ll128));
        let picked: Vec<Probe> = (0..100)
            .map(|_| e.probe(Coll::AllReduce as u32, 20, 1, 0, Decision::Default))
            .filter(|p| *p != Probe::None)
            .collect();
        assert_eq!(picked.len(), 10);
        for (i, p) in picked.iter().enumerate() {
            let want = if i % 2 == 0 { ll } else { ll128 };
            assert_eq!(*p, Probe::Setting(want), "turn {i}");
        }
        // 9 nodes: every context is below; the nearest forcing one (8).
        let e = plan(&bytes, 9).unwrap();
        assert_eq!(e.plan(Coll::AllReduce, 20), Probe::Setting(ll128));
        assert_eq!(e.plan_other(Coll::AllReduce, 20), Probe::None);
    }
}
