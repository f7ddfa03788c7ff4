//! Exploration (`DYNCC_EXPLORE=1`): where the table could not confirm its
//! answer at this communicator's node count, some communicators run
//! another setting at that (collective, size bucket) cell, so traces
//! measure it where jobs really run.
//!
//! The share F is the table's ([`Share::of_table`]; `DYNCC_EXPLORE` only
//! switches exploration on), so ranks whose environments differ draw
//! alike; a tuner without NCCL's communicator id (v3/v4) does not explore
//! at all (plugin.rs: no trace record could be linked to the probe).
//!
//! # What may be tried (the candidates)
//!
//! Read from what the table already stores (each rule's decision, basis
//! and gain; contexts' node ranges and gates):
//!
//! * the rule forces a setting on a basis other than `measured`: NCCL's
//!   own choice (nothing written), whatever the rule's predicted gain (a
//!   confident guess is checked too; its large cost bound makes it rare);
//! * the rule is NCCL's default on a basis other than `measured`, or no
//!   context covers the communicator: what the collective's nearest
//!   context by node count on either side forces at this size (same ranks
//!   per node, same side of the one-node boundary, within a factor
//!   [`NEIGHBOUR_FACTOR`] of its node range, not gated on `regBuff`).
//!   Where the nearest forcing context below and the one above force
//!   different settings, both are candidates: the two disagree exactly
//!   where a reading between them is least sure.
//!
//! A measured rule never explores, and neither does a collective whose
//! own context is gated on `regBuff` (see "Rank consistency").
//!
//! # The table's plan (format 1.1)
//!
//! A table with a PLAN section lists, per (context, node counts, bucket
//! run), up to 4 ranked candidates, each with its own cost bound (see
//! tables/FORMAT.md). At a cell the plan lists for this communicator's
//! node count (under its own context, not gated on `regBuff`; measured
//! rules too, for a count only traces measured: the plan keeps offering
//! what they have not tried), the plan
//! replaces the derived candidates above: the cell's hash picks one
//! candidate rank-weighted (rank r of n with weight n - r, bits 32..64)
//! and its low 32 bits draw it with `p = min(MAX_CHANCE, F / cost)`, so the
//! expected extra time per cell is `sum_i P(pick i) p_i c_i <= F`. Cells
//! the plan does not list, and every cell of a table without a plan (any
//! 1.0 table), explore as derived above. [`Explorer::probe`] applies a
//! planned setting wherever it differs from the table's answer (the
//! compiler listed it against that answer, forced or not), and NCCL's
//! choice only where the table forces; in the context's call state only.
//!
//! # Who tries it (the selection)
//!
//! Per communicator, fixed at init: a 64-bit key (see [`key`]), and per
//! cell a hash of (key, collective, bucket). The cell is explored by this
//! communicator iff the hash's low 32 bits fall below `p x 2^32` with
//! `p = min(MAX_CHANCE, F / c)` (at most half: the rest keep the table's
//! answer, the baseline a gain is read against), `c` the candidate's cost bound; of two candidates,
//! one hash bit picks which. An explored cell runs its probe on *every*
//! call of this communicator at that cell (still skipping a setting NCCL
//! marked unavailable, -1.0 cost, and only in the call state the setting
//! was measured in); other cells never explore. Different communicators
//! (jobs) draw different cells and candidates; each new table draws anew.
//!
//! # Budget
//!
//! `c` bounds the relative extra time of one explored call over the
//! table's answer: for NCCL's choice at an unconfirmed forced rule,
//! `max(gain - 1, MIN_COST)` (the table predicts the forced setting wins
//! by `gain`, so NCCL's choice costs about `gain - 1` more; never assumed
//! below [`MIN_COST`], since the prediction itself is unconfirmed); for a
//! neighbour's setting the table stores no estimate, so an assumed bound
//! [`NEIGHBOUR_COST`] (25 %, the loss the old per-call cap allowed). So at
//! every cell the expected extra time, over the communicators that reach
//! it, is `p x c <= F` of that cell's time, and over a job's collectives
//! at most F in expectation. A cell whose `c` is large is explored by few
//! communicators (a forced rule predicted to win 3x: `p = F / 2`).
//!
//! # Rank consistency
//!
//! What a call runs is a pure function of the key, the table, the
//! communicator's shape and the call's collective, size and `numPipeOps`:
//! nothing counts calls, reads a clock or differs per process. So every
//! rank of a communicator makes the same choice on every call, whatever
//! each rank's sequence of calls (an extra `getCollInfo` from
//! `ncclGroupSimulateEnd` on one rank, a context created late). NCCL
//! computes `regBuff` from the calling rank's own buffer registrations
//! (runtime/README.md cites the source), so it can differ between ranks of
//! one collective: exploration never depends on it (no candidate from a
//! `regBuff`-gated context, no exploration under a `regBuff`-gated own
//! context). `numPipeOps` is the group's collective count per channel,
//! the same on every rank, and gates as the table does.

use dyncc_tables::{
    pipe_ops_allowed, Basis, Coll, Decision, RegBuff, Setting, Specialised, Table, MAX_CHANNELS,
    MAX_PLAN_CANDIDATES, NUM_BUCKETS, NUM_COLLS,
};

/// The largest share F exploration may take.
pub const MAX_SHARE: f64 = 0.1;

/// The share a table carries when it does not say (one compiled before
/// `dyncc compile --explore`): the compiler's default.
pub const DEFAULT_SHARE: f64 = 0.02;

/// The largest share of communicators that explore one cell, however
/// large `F / cost`: the rest run the table's answer there, so every
/// round's traces hold both sides of each explored cell and can read a
/// gain (at `p = 1` none ran the answer and nothing could be learned).
pub const MAX_CHANCE: f64 = dyncc_tables::MAX_EXPLORE_CHANCE;

/// The smallest cost bound assumed for a probe of NCCL's choice: the
/// rule's gain is a prediction the table could not confirm, so a gain
/// near 1 is not taken to mean the probe is free. At F >= 5 % every
/// communicator explores such a cell.
pub const MIN_COST: f64 = 0.05;

/// The cost bound assumed for a neighbour's setting at an unconfirmed
/// default rule: the table stores no estimate of that setting's loss at
/// this node count, so a conservative 25 % (the loss the earlier per-call
/// cap on forgone gains allowed).
pub const NEIGHBOUR_COST: f64 = 0.25;

/// How far (as a factor of node counts) a neighbouring context's forced
/// setting may be carried to a communicator it does not cover: the
/// compiler's own `--node-reach` (default 8x), so exploration tries a
/// setting on some communicators within the reach the compiler forces
/// settings on every call; never across the one-node boundary.
pub const NEIGHBOUR_FACTOR: u64 = 8;

/// `2^32`: the resolution of a cell's draw (its hash's low 32 bits).
const DRAW: f64 = 4_294_967_296.0;

/// The exploration share F: the table's (`explore_share` metadata),
/// never the environment's, so every rank holding one table draws alike.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Share {
    /// F's bits (`f64::to_bits`), so the type stays `Eq`.
    bits: u64,
}

/// Why a share is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BadShare {
    /// Not a number, or not in `(0, MAX_SHARE]`.
    OutOfRange,
    /// Positive but below [`Share::MIN`]: no cell could ever be drawn.
    TooSmall,
}

impl Share {
    /// The smallest F that can explore anything: `2^-32`, one step of a
    /// cell's 32-bit draw. Below it `F x 2^32 < 1`, so even the cheapest
    /// probe (`p = F / MIN_COST`, 20x F) is drawn with probability under
    /// `2^-27`: never, for any fleet of jobs.
    pub const MIN: f64 = 1.0 / DRAW;

    /// Parses a share: a number with `Share::MIN <= F <= MAX_SHARE`.
    pub fn parse(v: &str) -> Result<Share, BadShare> {
        let f: f64 = v.trim().parse().map_err(|_| BadShare::OutOfRange)?;
        if !(f > 0.0 && f <= MAX_SHARE) {
            return Err(BadShare::OutOfRange);
        }
        if f < Share::MIN {
            return Err(BadShare::TooSmall);
        }
        Ok(Share { bits: f.to_bits() })
    }

    /// The share `table` carries ([`dyncc_tables::META_EXPLORE`]), or
    /// [`DEFAULT_SHARE`] where it carries none: a function of the table
    /// alone, so the same on every rank that holds it. A value that is not
    /// a share is refused (then nothing explores, on every such rank).
    pub fn of_table(table: &Table<'_>) -> Result<Share, BadShare> {
        match table.meta(dyncc_tables::META_EXPLORE) {
            None => Ok(Share {
                bits: DEFAULT_SHARE.to_bits(),
            }),
            Some(v) => Share::parse(v),
        }
    }

    /// F as a fraction.
    pub fn fraction(self) -> f64 {
        f64::from_bits(self.bits)
    }

    /// The chance a communicator explores a cell whose probe costs at
    /// most `cost` (relative): `min(MAX_CHANCE, F / cost)`.
    pub fn chance(self, cost: f64) -> f64 {
        (self.fraction() / cost).min(MAX_CHANCE)
    }
}

impl core::fmt::Display for Share {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}", self.fraction())
    }
}

/// Whether a `DYNCC_EXPLORE` value switches exploration on: every value
/// but `0` (any zero number), `off`, `false` and `no`. A number is not
/// the share (the table's is): ranks given different numbers explore
/// alike.
pub fn switched_on(v: &str) -> bool {
    let v = v.trim();
    !(v.parse::<f64>().is_ok_and(|f| f == 0.0)
        || ["off", "false", "no"]
            .iter()
            .any(|w| v.eq_ignore_ascii_case(w)))
}

/// The communicator's exploration key: the table's digest mixed with
/// NCCL's communicator id (`commHash`, tuner v5/v6: the same on every
/// rank, different per communicator), or without one (tuner v3/v4) with
/// its shape (nRanks, nNodes), so every communicator of that shape
/// explores alike under one table (still the same on every rank).
pub fn key(digest: u64, comm_id: Option<u64>, n_ranks: u64, n_nodes: u64) -> u64 {
    let who = match comm_id {
        Some(id) => mix(id ^ 0x636F_6D6D_4861_7368), // "commHash"
        None => mix(mix(n_ranks ^ 0x7368_6170_6552_616E).wrapping_add(n_nodes)), // "shapeRan"
    };
    mix(digest ^ who)
}

/// splitmix64's finaliser: a bijection whose every output bit depends on
/// every input bit.
const fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A cell's draw: low 32 bits decide whether, bit 32 which candidate.
fn draw(key: u64, coll: usize, bucket: usize) -> u64 {
    mix(key ^ mix(((coll as u64) << 8 | bucket as u64) + 1))
}

/// What a call at one (collective, bucket) may explore.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Probe {
    /// Nothing: confirmed, no candidate, or not drawn.
    None,
    /// The table forces an unconfirmed setting: run NCCL's own choice.
    Nccl,
    /// The table leaves NCCL alone, unconfirmed: run this setting (always
    /// a `Decision::Force`).
    Setting(Decision),
}

/// What one cell may try: up to two candidates and their cost bound.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Candidates {
    /// The candidates ([`Probe::None`] where fewer than two).
    pub probes: [Probe; 2],
    /// Per candidate, the `numPipeOps` gate of the context it came from
    /// (0: any), for a setting measured only in that call state.
    pub max_pipe_ops: [u32; 2],
    /// The cost bound of a probe here (relative extra time of one call).
    pub cost: f64,
}

const NO_CANDIDATES: Candidates = Candidates {
    probes: [Probe::None; 2],
    max_pipe_ops: [0; 2],
    cost: 0.0,
};

impl Candidates {
    /// How many candidates (0, 1 or 2).
    pub fn len(&self) -> usize {
        self.probes.iter().filter(|p| **p != Probe::None).count()
    }

    /// True when the cell cannot explore.
    pub fn is_empty(&self) -> bool {
        self.probes[0] == Probe::None
    }
}

/// One cell's candidates from the table's exploration plan (format 1.1
/// PLAN), ranked, each with its own cost bound.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Planned {
    /// Candidates in rank order ([`Probe::None`] past the last).
    pub probes: [Probe; MAX_PLAN_CANDIDATES as usize],
    /// Per candidate, the compiler's cost bound.
    pub costs: [f64; MAX_PLAN_CANDIDATES as usize],
    /// The `numPipeOps` gate of the context the plan is for (0: any): a
    /// candidate is tried only in the call state the cell was decided in.
    pub max_pipe_ops: u32,
}

const NO_PLANNED: Planned = Planned {
    probes: [Probe::None; MAX_PLAN_CANDIDATES as usize],
    costs: [0.0; MAX_PLAN_CANDIDATES as usize],
    max_pipe_ops: 0,
};

impl Planned {
    /// How many candidates.
    pub fn len(&self) -> usize {
        self.probes.iter().filter(|p| **p != Probe::None).count()
    }

    /// True when the plan lists nothing here.
    pub fn is_empty(&self) -> bool {
        self.probes[0] == Probe::None
    }

    /// The candidate a draw `h` picks: rank-weighted (rank r of n has
    /// weight n - r), from bits 32..64 of the cell's hash, so the first
    /// ranked is tried most and all are tried by some communicators.
    fn pick(&self, h: u64) -> usize {
        dyncc_tables::plan_pick(self.len() as u64, h >> 32)
    }
}

/// Every cell's candidates for one communicator, built at init.
pub struct Plan {
    cells: Box<[[Candidates; NUM_BUCKETS]; NUM_COLLS]>,
    /// Cells the table's exploration plan lists at this node count; where
    /// a cell has one, it replaces the derived candidates. `None` for a
    /// table without a plan (every cell then explores as derived above).
    planned: Option<Box<[[Planned; NUM_BUCKETS]; NUM_COLLS]>>,
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

impl Plan {
    /// The candidates for a communicator of `n_ranks` on `n_nodes` whose
    /// decisions are `spec` (from `table`).
    pub fn build(table: &Table<'_>, spec: &Specialised, n_ranks: u64, n_nodes: u64) -> Plan {
        let mut cells = Box::new([[NO_CANDIDATES; NUM_BUCKETS]; NUM_COLLS]);
        let ranks_per_node = n_ranks.checked_div(n_nodes).unwrap_or(n_ranks);
        for coll in Coll::ALL {
            let c = coll as usize;
            let own = spec.context(coll).and_then(|i| table.context(i));
            // A regBuff-gated context forces nothing (regBuff is each
            // rank's own registration: the table crate leaves to NCCL what
            // it would force for one value only, `RegBuff::agreed`); its
            // rules were read off registered runs only, so this collective
            // does not explore here either.
            if own
                .as_ref()
                .is_some_and(|o| o.spec().reg_buff != RegBuff::Any)
            {
                continue;
            }
            // The other contexts of this collective on one side within
            // reach, same ranks per node (another ppn is another regime),
            // never gated on regBuff, and the same numPipeOps gate as the
            // nearest, nearest first (ties in file order): per bucket the
            // first that forces a setting there lends it (the nearest often
            // only read its choice off the same counts and left NCCL alone).
            let side_of = |want: usize| {
                let mut v: Vec<_> = table
                    .contexts()
                    .filter(|v| Some(v.index()) != own.as_ref().map(|o| o.index()))
                    .filter(|v| {
                        let s = v.spec();
                        s.coll == coll
                            && s.reg_buff == RegBuff::Any
                            && u64::from(s.ppn.0) <= ranks_per_node
                            && ranks_per_node <= u64::from(s.ppn.1)
                            && side(s.nodes, n_nodes) == want
                    })
                    .filter_map(|v| neighbour_distance(v.spec().nodes, n_nodes).map(|d| (d, v)))
                    .collect();
                v.sort_by_key(|(d, v)| (*d, v.index()));
                let gate = v.first().map(|(_, n)| n.spec().max_pipe_ops);
                let v: Vec<_> = v
                    .into_iter()
                    .map(|(_, n)| n)
                    .filter(|n| gate == Some(n.spec().max_pipe_ops))
                    .collect();
                (v, gate.unwrap_or(0))
            };
            let sides = [side_of(0), side_of(1)];
            // Per side and bucket, the setting the nearest context forcing
            // one there lends: each neighbour's rules once, nearest first,
            // filling the buckets still empty.
            let mut lent = [[None; NUM_BUCKETS]; 2];
            for (i, (side, _)) in sides.iter().enumerate() {
                for n in side {
                    let mut first = 0usize;
                    for r in n.rules() {
                        let last = usize::from(r.last_bucket);
                        if let d @ Decision::Force(Setting {
                            channels: ..=MAX_CHANNELS,
                            ..
                        }) = r.decision
                        {
                            for w in lent[i].iter_mut().take(last + 1).skip(first) {
                                w.get_or_insert(d);
                            }
                        }
                        first = last + 1;
                    }
                }
            }
            let gates = [sides[0].1, sides[1].1];
            for (b, cell) in cells[c].iter_mut().enumerate() {
                let rule = own.as_ref().and_then(|o| o.rule_for_bucket(b as u8));
                *cell = match rule {
                    Some((_, r)) if r.basis == Basis::Measured => NO_CANDIDATES,
                    Some((_, r)) if r.decision.is_forced() => Candidates {
                        probes: [Probe::Nccl, Probe::None],
                        max_pipe_ops: [0; 2],
                        cost: (f64::from(r.gain) - 1.0).max(MIN_COST),
                    },
                    // Default, unconfirmed, or no context at all.
                    _ => {
                        let (below, above) = (lent[0][b], lent[1][b]);
                        let one = |d: Decision, side: usize| Candidates {
                            probes: [Probe::Setting(d), Probe::None],
                            max_pipe_ops: [gates[side], 0],
                            cost: NEIGHBOUR_COST,
                        };
                        match (below, above) {
                            (None, None) => NO_CANDIDATES,
                            (Some(x), None) => one(x, 0),
                            (None, Some(y)) => one(y, 1),
                            // The same setting on both sides: one candidate.
                            (Some(x), Some(y)) if x == y => one(x, 0),
                            (Some(x), Some(y)) => Candidates {
                                probes: [Probe::Setting(x), Probe::Setting(y)],
                                max_pipe_ops: gates,
                                cost: NEIGHBOUR_COST,
                            },
                        }
                    }
                };
            }
        }
        let planned = table.has_plan().then(|| planned(table, spec, n_nodes));
        Plan { cells, planned }
    }

    /// One cell's plan candidates (empty without a plan there).
    pub fn planned(&self, coll: Coll, bucket: u8) -> Planned {
        self.planned
            .as_ref()
            .map_or(NO_PLANNED, |p| p[coll as usize][bucket as usize])
    }

    /// One cell's candidates.
    pub fn cell(&self, coll: Coll, bucket: u8) -> Candidates {
        self.cells[coll as usize][bucket as usize]
    }
}

/// The plan's cells at this communicator's node count, under each
/// collective's own context (not gated on `regBuff`, as above).
fn planned(
    table: &Table<'_>,
    spec: &Specialised,
    n_nodes: u64,
) -> Box<[[Planned; NUM_BUCKETS]; NUM_COLLS]> {
    let mut out = Box::new([[NO_PLANNED; NUM_BUCKETS]; NUM_COLLS]);
    let Ok(nodes) = u32::try_from(n_nodes) else {
        return out;
    };
    for coll in Coll::ALL {
        let Some(own) = spec.context(coll).and_then(|i| table.context(i)) else {
            continue;
        };
        if own.spec().reg_buff != RegBuff::Any {
            continue;
        }
        // Each run of buckets read once, then copied over its buckets.
        for cell in table.plan_cells(own.index(), nodes) {
            let mut p = Planned {
                max_pipe_ops: own.spec().max_pipe_ops,
                ..NO_PLANNED
            };
            let mut run = None;
            for r in 0..cell.len().min(MAX_PLAN_CANDIDATES as usize) {
                let Some(c) = cell.get(r) else { continue };
                run = Some((c.bucket, c.last_bucket));
                p.probes[r] = match c.decision {
                    Decision::Default => Probe::Nccl,
                    d => Probe::Setting(d),
                };
                p.costs[r] = f64::from(c.cost_bound);
            }
            if let Some((first, last)) = run {
                out[coll as usize][usize::from(first)..=usize::from(last)].fill(p);
            }
        }
    }
    out
}

/// One cell's precomputed answer: what every call there explores.
#[derive(Clone, Copy)]
struct Cell {
    probe: Probe,
    /// The drawn setting's `numPipeOps` gate (0: any).
    max_pipe_ops: u32,
    /// Drawn from the table's plan: a setting is tried over whatever the
    /// table answers (the compiler listed it against that answer), not
    /// only where the table leaves NCCL alone.
    planned: bool,
}

const NO_CELL: Cell = Cell {
    probe: Probe::None,
    max_pipe_ops: 0,
    planned: false,
};

/// How many cells of each kind, for the init line.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Cells that could run NCCL's choice instead of an unconfirmed forced
    /// one (candidates), and how many this communicator does (drawn).
    pub nccl: (u32, u32),
    /// Cells that could run a neighbouring context's setting, and how
    /// many this communicator does.
    pub neighbour: (u32, u32),
}

impl Counts {
    /// Cells that can explore at all.
    pub fn candidates(&self) -> u32 {
        self.nccl.0 + self.neighbour.0
    }

    /// Cells this communicator explores.
    pub fn drawn(&self) -> u32 {
        self.nccl.1 + self.neighbour.1
    }
}

/// One communicator's exploration: per (collective, bucket), what every
/// call there runs, drawn once at init. About 10 KiB, boxed; read-only
/// after init (no atomics, nothing per call to update).
pub struct Explorer {
    cells: [[Cell; NUM_BUCKETS]; NUM_COLLS],
}

impl Explorer {
    /// Draws, from `plan`, the cells a communicator with exploration key
    /// `key` explores at share `share`: the counts, and the explorer when
    /// it explores any cell (`None`: its calls run the table's answers).
    pub fn draw(plan: &Plan, share: Share, key: u64) -> (Counts, Option<Box<Explorer>>) {
        let mut e = Box::new(Explorer {
            cells: [[NO_CELL; NUM_BUCKETS]; NUM_COLLS],
        });
        let mut counts = Counts::default();
        for (c, (row, out)) in plan.cells.iter().zip(e.cells.iter_mut()).enumerate() {
            for (b, (cand, cell)) in row.iter().zip(out.iter_mut()).enumerate() {
                let pl = plan.planned.as_ref().map_or(NO_PLANNED, |p| p[c][b]);
                if !pl.is_empty() {
                    // The table's plan: one rank-weighted candidate per
                    // communicator, tried with p = min(1/2, F / its cost).
                    let h = draw(key, c, b);
                    let i = pl.pick(h);
                    let kind = if pl.probes[i] == Probe::Nccl {
                        &mut counts.nccl
                    } else {
                        &mut counts.neighbour
                    };
                    kind.0 += 1;
                    let threshold = (share.chance(pl.costs[i]) * DRAW) as u64;
                    if h & 0xFFFF_FFFF < threshold {
                        *cell = Cell {
                            probe: pl.probes[i],
                            max_pipe_ops: pl.max_pipe_ops,
                            planned: true,
                        };
                        kind.1 += 1;
                    }
                    continue;
                }
                if cand.is_empty() {
                    continue;
                }
                let kind = if cand.probes[0] == Probe::Nccl {
                    &mut counts.nccl
                } else {
                    &mut counts.neighbour
                };
                kind.0 += 1;
                let h = draw(key, c, b);
                // p x 2^32, at most 2^32 (p = 1: every value is below).
                let threshold = (share.chance(cand.cost) * DRAW) as u64;
                if h & 0xFFFF_FFFF >= threshold {
                    continue;
                }
                let i = usize::from(cand.len() == 2 && h >> 32 & 1 == 1);
                *cell = Cell {
                    probe: cand.probes[i],
                    max_pipe_ops: cand.max_pipe_ops[i],
                    planned: false,
                };
                kind.1 += 1;
            }
        }
        (counts, (counts.drawn() > 0).then_some(e))
    }

    /// What this communicator explores at one cell (for tests and
    /// messages).
    pub fn plan(&self, coll: Coll, bucket: u8) -> Probe {
        self.cells[coll as usize][bucket as usize].probe
    }

    /// What this call runs instead of the table's decision `d`, if
    /// anything: the cell's drawn probe, when it applies to the call (NCCL's
    /// choice only where the table forces; a derived setting only where the
    /// table leaves NCCL alone, a planned one wherever it differs from the
    /// answer; a setting only in its call state).
    /// Hot path: two loads and a few compares; no allocation, lock, store,
    /// log or panic.
    #[inline]
    pub fn probe(&self, coll_type: u32, bucket: u8, num_pipe_ops: i32, d: Decision) -> Probe {
        let Some(row) = self.cells.get(coll_type as usize) else {
            return Probe::None;
        };
        // A u8 bucket indexes a 256-entry row: no bounds check.
        let cell = &row[bucket as usize];
        match cell.probe {
            Probe::Nccl if d.is_forced() => Probe::Nccl,
            Probe::Setting(s)
                if (if cell.planned { s != d } else { !d.is_forced() })
                    && pipe_ops_allowed(cell.max_pipe_ops, num_pipe_ops) =>
            {
                Probe::Setting(s)
            }
            _ => Probe::None,
        }
    }

    /// The chunk this communicator answers `getChunkSize` with at a call's
    /// cell (numPipeOps 1, as [`Specialised::chunk`] reads it): that of
    /// what `getCollInfo` answered there. A cell it drew to run NCCL's
    /// choice keeps NCCL's chunk, and one it drew to try a setting gets
    /// that setting's chunk, never the table's: the probe is drawn once
    /// per communicator and cell, so every call there ran the probe, and
    /// a chunk the table forces on the table's setting would otherwise
    /// ride on NCCL's own choice or on a candidate of the same algorithm
    /// and protocol, and be measured as theirs. A function of the table,
    /// the communicator and the arguments, as on every rank.
    pub fn chunk(
        &self,
        spec: &Specialised,
        coll_type: u32,
        n_bytes: u64,
        algo: i32,
        proto: i32,
    ) -> Option<u32> {
        let d = spec.decide(coll_type, n_bytes, 1, 0);
        match self.probe(coll_type, dyncc_tables::size_bucket(n_bytes), 1, d) {
            Probe::None => d.chunk_for(algo, proto),
            Probe::Nccl => None,
            Probe::Setting(s) => s.chunk_for(algo, proto),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dyncc_tables::{Algo, ContextSpec, Proto, Rule, TableBuilder};

    #[test]
    fn share_parses_only_within_bounds() {
        assert_eq!(Share::parse("0.05").map(Share::fraction), Ok(0.05));
        assert_eq!(Share::parse(" 0.1 ").map(Share::fraction), Ok(0.1));
        for bad in ["0", "-0.01", "0.11", "1", "nan", "inf", "", "five"] {
            assert_eq!(Share::parse(bad), Err(BadShare::OutOfRange), "{bad}");
        }
    }

    /// A share below one step of the 32-bit draw could never explore: it
    /// is refused as too small (it was taken, and printed as "at most 0").
    #[test]
    fn a_share_too_small_to_explore_is_refused() {
        for tiny in ["1e-10", "2e-10", "1e-300", "5e-324"] {
            assert_eq!(Share::parse(tiny), Err(BadShare::TooSmall), "{tiny}");
        }
        assert!(Share::parse("2.4e-10").is_ok());
        assert_eq!(
            Share::parse(&Share::MIN.to_string()).map(Share::fraction),
            Ok(Share::MIN)
        );
    }

    /// Unset, empty or an off word: off; any other value on, whatever
    /// number it is (the share is the table's).
    #[test]
    fn config_reads_dyncc_explore_as_a_switch() {
        let cfg = |v: Option<&str>| {
            crate::plugin::Config::from_vars(|k| v.filter(|_| k == "DYNCC_EXPLORE").map(Into::into))
                .explore
        };
        for off in [
            None,
            Some(""),
            Some(" "),
            Some("0"),
            Some("0.0"),
            Some("off"),
            Some("No"),
        ] {
            assert_eq!(cfg(off), None, "{off:?}");
        }
        for on in ["1", "on", "0.02", "0.2", "1e-12", "abc", "-1"] {
            assert_eq!(cfg(Some(on)).as_deref(), Some(on));
        }
    }

    /// The share is the table's `explore_share`, the default where it has
    /// none, and refused (nothing explores) where it is not a share.
    #[test]
    fn the_share_is_the_tables() {
        let with = |v: Option<&str>| {
            let mut b = TableBuilder::new();
            if let Some(v) = v {
                b.meta(dyncc_tables::META_EXPLORE, v);
            }
            ctx(
                (4, 4),
                &[rule(255, Decision::Default, Basis::Measured, 1.0)],
                &mut b,
            );
            b.build().unwrap()
        };
        let of = |v| Share::of_table(&Table::from_bytes(&with(v)).unwrap()).map(Share::fraction);
        assert_eq!(of(None), Ok(DEFAULT_SHARE));
        assert_eq!(of(Some("0.05")), Ok(0.05));
        assert_eq!(of(Some("0.2")), Err(BadShare::OutOfRange));
        assert_eq!(of(Some("1e-12")), Err(BadShare::TooSmall));
    }

    fn force(algo: Algo, proto: Proto) -> Decision {
        Decision::Force(Setting::new(algo, proto))
    }

    fn ctx_gated(
        nodes: (u32, u32),
        reg_buff: RegBuff,
        max_pipe_ops: u32,
        rules: &[Rule],
        b: &mut TableBuilder,
    ) {
        b.context(
            ContextSpec {
                coll: Coll::AllReduce,
                nodes,
                ppn: (8, 8),
                max_pipe_ops,
                reg_buff,
            },
            rules,
        )
        .unwrap();
    }

    fn ctx(nodes: (u32, u32), rules: &[Rule], b: &mut TableBuilder) {
        ctx_gated(nodes, RegBuff::Any, 0, rules, b);
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

    fn plan(bytes: &[u8], nodes: u64) -> Plan {
        let t = Table::from_bytes(bytes).unwrap();
        let spec = t.specialise(&dyncc_tables::Comm::new(nodes * 8, nodes));
        Plan::build(&t, &spec, nodes * 8, nodes)
    }

    fn nothing(p: &Plan) -> bool {
        Coll::ALL
            .iter()
            .all(|&c| (0..=255u8).all(|b| p.cell(c, b).is_empty()))
    }

    #[test]
    fn each_cell_may_try_what_the_table_could_not_confirm() {
        let bytes = table();
        // Measured at 4 nodes: nothing, anywhere.
        assert!(nothing(&plan(&bytes, 4)));
        let p = plan(&bytes, 6);
        let c = p.cell(Coll::AllReduce, 10);
        assert_eq!(c.probes, [Probe::Nccl, Probe::None]);
        assert!((c.cost - 0.1).abs() < 1e-6, "{c:?}");
        // Predicted to win by 50 %: tried too (no cap), cost bound 0.5.
        let c = p.cell(Coll::AllReduce, 15);
        assert_eq!(c.probes[0], Probe::Nccl);
        assert!((c.cost - 0.5).abs() < 1e-6, "{c:?}");
        // Unconfirmed default: the 4-node context's setting at that size
        // at the assumed bound, or nothing where it too leaves NCCL alone.
        let c = p.cell(Coll::AllReduce, 25);
        assert_eq!(c.probes[0], Probe::Setting(force(Algo::Ring, Proto::LL128)));
        assert_eq!(c.cost, NEIGHBOUR_COST);
        assert!(p.cell(Coll::AllReduce, 40).is_empty());
        // 9 nodes: no context covers it; 5-7 is nearest (within 8x), and
        // where it forces nothing the 4-node context does.
        let p = plan(&bytes, 9);
        assert_eq!(
            p.cell(Coll::AllReduce, 5).probes[0],
            Probe::Setting(force(Algo::Tree, Proto::LL))
        );
        assert_eq!(
            p.cell(Coll::AllReduce, 25).probes[0],
            Probe::Setting(force(Algo::Ring, Proto::LL128))
        );
        assert!(p.cell(Coll::AllReduce, 40).is_empty());
        // 57 nodes: more than 8x the nearest context's 7: nothing.
        assert!(!nothing(&plan(&bytes, 56)));
        assert!(nothing(&plan(&bytes, 57)));
        // One node never borrows a multi-node setting.
        assert!(nothing(&plan(&bytes, 1)));
        // A forced gain at or below 1 is still assumed to cost MIN_COST.
        let mut b = TableBuilder::new();
        ctx(
            (5, 7),
            &[rule(
                255,
                force(Algo::Ring, Proto::LL),
                Basis::Extrapolated,
                1.0,
            )],
            &mut b,
        );
        assert_eq!(
            plan(&b.build().unwrap(), 6).cell(Coll::AllReduce, 3).cost,
            MIN_COST
        );
    }

    /// Between a context forcing Tree/LL (2 nodes) and one forcing
    /// Ring/LL128 (8 nodes), with an unmeasured 3-node context that left
    /// NCCL alone in between: a 4-node communicator (no context of its
    /// own) may try either, skipping the nearer context that forces
    /// nothing at that size.
    #[test]
    fn the_nearest_forcing_context_on_each_side_is_a_candidate() {
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
        let c = plan(&bytes, 4).cell(Coll::AllReduce, 20);
        assert_eq!(c.probes, [Probe::Setting(ll), Probe::Setting(ll128)]);
        // 9 nodes: every context is below; the nearest forcing one (8).
        let c = plan(&bytes, 9).cell(Coll::AllReduce, 20);
        assert_eq!(c.probes, [Probe::Setting(ll128), Probe::None]);
    }

    fn share(f: &str) -> Share {
        Share::parse(f).unwrap()
    }

    /// A table with a 1.1 exploration plan at 6 nodes: there the plan's
    /// ranked candidates replace the derived ones, each communicator picks
    /// one rank-weighted and tries it with `p = min(1/2, F / its cost)`, so
    /// the expected extra time per cell stays <= F; at 5 nodes (no plan
    /// cell) the derived candidates stay; a table without a plan has none.
    #[test]
    fn the_tables_plan_replaces_derived_candidates_within_budget() {
        let mut b = TableBuilder::new();
        let ll = force(Algo::Tree, Proto::LL);
        let simple = force(Algo::Ring, Proto::Simple);
        let ll128 = force(Algo::Tree, Proto::LL128);
        ctx((4, 4), &[rule(255, ll, Basis::Measured, 1.3)], &mut b);
        ctx(
            (5, 7),
            &[
                rule(10, ll, Basis::Interpolated, 1.1),
                rule(255, Decision::Default, Basis::Interpolated, 1.0),
            ],
            &mut b,
        );
        let cand = |bucket, rank, decision, cost| dyncc_tables::PlanCandidate {
            context: 1,
            nodes: 6,
            bucket,
            last_bucket: bucket,
            rank,
            decision,
            gain: 0.1,
            spread: 0.1,
            cost_bound: cost,
        };
        b.plan(&[
            cand(5, 0, Decision::Default, 0.1),
            cand(25, 0, simple, 0.05),
            cand(25, 1, ll128, 0.5),
        ]);
        let bytes = b.build().unwrap();
        assert!(plan(&table(), 6).planned(Coll::AllReduce, 25).is_empty());
        let p6 = plan(&bytes, 6);
        assert_eq!(p6.planned(Coll::AllReduce, 25).len(), 2);
        assert!(p6.planned(Coll::AllReduce, 26).is_empty());
        // At 5 nodes no plan cell: the derived candidate (NCCL's choice at
        // the unconfirmed forced rule) stays.
        assert_eq!(
            plan(&bytes, 5).cell(Coll::AllReduce, 5).probes[0],
            Probe::Nccl
        );
        assert!(plan(&bytes, 5).planned(Coll::AllReduce, 5).is_empty());

        let f = share("0.05");
        let n = 20_000u64;
        let (mut nccl5, mut first, mut second, mut other) = (0u64, 0u64, 0u64, 0u64);
        for key in 0..n {
            let (_, e) = Explorer::draw(&p6, f, mix(key));
            let Some(e) = e else { continue };
            nccl5 += u64::from(e.plan(Coll::AllReduce, 5) == Probe::Nccl);
            match e.plan(Coll::AllReduce, 25) {
                Probe::Setting(d) if d == simple => first += 1,
                Probe::Setting(d) if d == ll128 => second += 1,
                Probe::None => {}
                _ => other += 1,
            }
        }
        let share_of = |k: u64| k as f64 / n as f64;
        // p = 0.05 / 0.1 at bucket 5.
        assert!((share_of(nccl5) - 0.5).abs() < 0.02, "{nccl5}");
        // Rank 0 picked 2/3 of the time, p = min(MAX_CHANCE, 1); rank 1
        // 1/3, p = 0.1.
        assert!(
            (share_of(first) - 2.0 / 3.0 * MAX_CHANCE).abs() < 0.02,
            "{first}"
        );
        assert!((share_of(second) - 1.0 / 30.0).abs() < 0.01, "{second}");
        assert_eq!(other, 0);
        let cost = share_of(first) * 0.05 + share_of(second) * 0.5;
        assert!(cost <= 0.05 * 1.05, "expected extra time {cost}");
    }

    /// A setting the plan lists where the table forces another (an
    /// unconfirmed force with a rival the compiler ranks close) is tried
    /// over that force; it was dropped by the per-call check, which let a
    /// setting run only where the table left NCCL alone.
    #[test]
    fn a_planned_setting_is_tried_where_the_table_forces_another() {
        let mut b = TableBuilder::new();
        let ll = force(Algo::Tree, Proto::LL);
        let simple = force(Algo::Ring, Proto::Simple);
        ctx((4, 4), &[rule(255, ll, Basis::Measured, 1.3)], &mut b);
        ctx((5, 7), &[rule(255, ll, Basis::Interpolated, 1.2)], &mut b);
        b.plan(&[dyncc_tables::PlanCandidate {
            context: 1,
            nodes: 5,
            bucket: 0,
            last_bucket: 255,
            rank: 0,
            decision: simple,
            gain: 0.05,
            spread: 0.1,
            cost_bound: 0.05,
        }]);
        let bytes = b.build().unwrap();
        let p = plan(&bytes, 6);
        let e = (0..)
            .find_map(|k| {
                Explorer::draw(&p, share("0.1"), mix(k))
                    .1
                    .filter(|e| e.plan(Coll::AllReduce, 20) != Probe::None)
            })
            .expect("p = 1/2: half the communicators explore");
        assert_eq!(e.plan(Coll::AllReduce, 20), Probe::Setting(simple));
        assert_eq!(
            e.probe(Coll::AllReduce as u32, 20, 1, ll),
            Probe::Setting(simple)
        );
        // Never the answer itself.
        assert_eq!(e.probe(Coll::AllReduce as u32, 20, 1, simple), Probe::None);
    }

    /// Over many communicators (keys), the share drawing a cell is
    /// `min(1/2, F / cost)`; of two candidates each is drawn about half the
    /// time; and the expected extra time per cell, `P(drawn) x cost`, is
    /// at most F at every cell.
    #[test]
    fn the_draw_over_communicators_matches_the_budget() {
        let (ll, ll128) = (
            force(Algo::Tree, Proto::LL),
            force(Algo::Ring, Proto::LL128),
        );
        let mut b = TableBuilder::new();
        ctx((2, 2), &[rule(255, ll, Basis::Measured, 1.2)], &mut b);
        ctx((8, 8), &[rule(255, ll128, Basis::Measured, 1.2)], &mut b);
        let two_sides = plan(&b.build().unwrap(), 4);
        let one_ctx = plan(&table(), 6);
        let f = share("0.02");
        let n = 20_000u64;
        // (plan, bucket, cost, chance)
        let cases: [(&Plan, u8, f64, f64); 4] = [
            (&one_ctx, 5, 0.1, 0.2),
            (&one_ctx, 15, 0.5, 0.04),
            (&one_ctx, 25, 0.25, 0.08),
            (&two_sides, 25, 0.25, 0.08),
        ];
        for (p, bucket, cost, chance) in cases {
            assert!((p.cell(Coll::AllReduce, bucket).cost - cost).abs() < 1e-6);
            let (mut drawn, mut first) = (0u64, 0u64);
            for k in 0..n {
                let (_, e) = Explorer::draw(p, f, mix(k));
                let probe = e.map_or(Probe::None, |e| e.plan(Coll::AllReduce, bucket));
                if probe != Probe::None {
                    drawn += 1;
                    first += u64::from(probe == p.cell(Coll::AllReduce, bucket).probes[0]);
                }
            }
            let got = drawn as f64 / n as f64;
            // 5 standard deviations of a binomial share.
            let tol = 5.0 * (chance * (1.0 - chance) / n as f64).sqrt();
            assert!(
                (got - chance).abs() < tol,
                "bucket {bucket}: {got} vs {chance}"
            );
            assert!(got * cost < f.fraction() + tol * cost, "{got} x {cost}");
            if p.cell(Coll::AllReduce, bucket).len() == 2 {
                let half = first as f64 / drawn as f64;
                assert!((half - 0.5).abs() < 0.1, "{half}");
            } else {
                assert_eq!(first, drawn);
            }
        }
        // F at or above a cell's cost: half the communicators explore it
        // and half run the table's answer (the baseline a gain is read
        // against); every communicator explored it before.
        let drawn = (0..n)
            .filter(|&k| {
                Explorer::draw(&one_ctx, share("0.1"), mix(k))
                    .1
                    .is_some_and(|e| e.plan(Coll::AllReduce, 5) == Probe::Nccl)
            })
            .count() as f64
            / n as f64;
        assert!((drawn - MAX_CHANCE).abs() < 0.02, "{drawn}");
    }

    /// The same key draws the same cells (every rank of a communicator
    /// computes it alike); other keys draw other cells and candidates.
    #[test]
    fn the_draw_is_a_function_of_the_key_alone() {
        let p = plan(&table(), 6);
        let f = share("0.1");
        let cells = |k: u64| -> Vec<Probe> {
            let (_, e) = Explorer::draw(&p, f, k);
            (0..=255u8)
                .map(|b| {
                    e.as_ref()
                        .map_or(Probe::None, |e| e.plan(Coll::AllReduce, b))
                })
                .collect()
        };
        let k = key(0x1234, Some(0xE491_0E00), 48, 6);
        assert_eq!(cells(k), cells(k));
        assert_eq!(k, key(0x1234, Some(0xE491_0E00), 48, 6));
        // Another communicator, another table, and the shape key (tuner
        // v3/v4) are other keys.
        let others = [
            key(0x1234, Some(0xE491_0E01), 48, 6),
            key(0x1235, Some(0xE491_0E00), 48, 6),
            key(0x1234, None, 48, 6),
        ];
        assert!(others.iter().all(|o| *o != k));
        assert_ne!(key(0x1234, None, 48, 6), key(0x1234, None, 56, 7));
        let distinct: std::collections::HashSet<Vec<Probe>> =
            (0..50).map(|i| cells(key(7, Some(i), 48, 6))).collect();
        assert!(distinct.len() > 10, "{}", distinct.len());
    }

    /// A drawn probe applies only to calls it replaces: NCCL's choice where
    /// the table forces; a setting where it leaves NCCL alone and the call
    /// is in the setting's numPipeOps state. regBuff plays no part.
    #[test]
    fn a_drawn_probe_applies_only_where_it_replaces_the_answer() {
        let ll = force(Algo::Tree, Proto::LL);
        let mut b = TableBuilder::new();
        ctx_gated(
            (4, 4),
            RegBuff::Any,
            1,
            &[rule(255, ll, Basis::Measured, 1.2)],
            &mut b,
        );
        ctx(
            (5, 7),
            &[
                rule(10, ll, Basis::Interpolated, 1.01),
                rule(255, Decision::Default, Basis::Interpolated, 1.0),
            ],
            &mut b,
        );
        let p = plan(&b.build().unwrap(), 6);
        // At F = 0.1 the forced cell (cost bound 0.05) is drawn with chance
        // 1/2, the default one (0.25) 0.4: a key drawing both.
        let e = (0..)
            .map(|k| Explorer::draw(&p, share("0.1"), mix(k)).1)
            .find_map(|e| {
                e.filter(|e| {
                    e.plan(Coll::AllReduce, 40) != Probe::None
                        && e.plan(Coll::AllReduce, 5) != Probe::None
                })
            })
            .unwrap();
        let ar = Coll::AllReduce as u32;
        assert_eq!(e.plan(Coll::AllReduce, 5), Probe::Nccl);
        assert_eq!(e.probe(ar, 5, 1, ll), Probe::Nccl);
        assert_eq!(e.probe(ar, 5, 1, Decision::Default), Probe::None);
        assert_eq!(e.probe(ar, 40, 1, Decision::Default), Probe::Setting(ll));
        assert_eq!(e.probe(ar, 40, 1, ll), Probe::None);
        // The lending context was measured with one pipelined op only.
        assert_eq!(e.probe(ar, 40, 2, Decision::Default), Probe::None);
        // Other collectives, and out-of-range ones, never.
        assert_eq!(e.probe(Coll::AllGather as u32, 5, 1, ll), Probe::None);
        assert_eq!(e.probe(99, 5, 1, ll), Probe::None);
    }

    /// regBuff is each rank's own: a collective whose context is gated on
    /// it never explores, and a context gated on it never lends.
    #[test]
    fn nothing_explored_depends_on_reg_buff() {
        let ll = force(Algo::Tree, Proto::LL);
        let mut b = TableBuilder::new();
        ctx_gated(
            (4, 4),
            RegBuff::Only1,
            0,
            &[rule(255, ll, Basis::Measured, 1.2)],
            &mut b,
        );
        ctx_gated(
            (5, 7),
            RegBuff::Only1,
            0,
            &[rule(255, ll, Basis::Interpolated, 1.1)],
            &mut b,
        );
        let bytes = b.build().unwrap();
        // Own context gated: nothing at 6 nodes. No context at 9 nodes,
        // and the gated neighbours lend nothing.
        assert!(nothing(&plan(&bytes, 6)));
        assert!(nothing(&plan(&bytes, 9)));
    }
}
