//! Features: arrange aggregated cells into per-(collective, ranks-per-node,
//! call state) grids of node count x message size x configuration, and the
//! feature vectors the models see.

use std::collections::{BTreeMap, BTreeSet};

use crate::record::{Cell, Coll, Config, State, TimeBase};

/// Feature vector layout for the models: log2 bytes, log2 nodes, ppn,
/// log2 ranks, log2 bytes per rank.
pub const N_FEATURES: usize = 5;

pub fn features(nbytes: u64, nnodes: u32, ppn: u32) -> [f64; N_FEATURES] {
    let lb = (nbytes.max(1) as f64).log2();
    let ln = (nnodes.max(1) as f64).log2();
    let ranks = nnodes as f64 * ppn as f64;
    [
        lb,
        ln,
        ppn as f64,
        ranks.max(1.0).log2(),
        lb - ranks.max(1.0).log2(),
    ]
}

/// One measured cell of a grid.
#[derive(Clone, Copy, Debug)]
pub struct Meas {
    /// ln(median time in us).
    pub ln_t: f64,
    pub n: u32,
    /// Relative spread (max-min)/median of the repeats; 0 for one sample.
    pub spread: f64,
}

/// All cells of one collective at one ranks-per-node in one call state, as
/// a dense array `[node][size][config]`. Config 0 is always NCCL's default.
#[derive(Clone, Debug)]
pub struct Grid {
    pub coll: Coll,
    pub ppn: u32,
    /// The state of the calls measured: the gates of the grid's contexts.
    pub state: State,
    pub nodes: Vec<u32>,
    pub sizes: Vec<u64>,
    pub configs: Vec<Config>,
    cells: Vec<Option<Meas>>,
    /// Per (node, size), `node * sizes + size`: the sd of one collective's
    /// ln(time) where the point's measurements come from traces of jobs
    /// (then all of them do: a sweep's cells there are set aside, and a
    /// traced point is compared with nothing but itself), `None` where
    /// they come from the sweep.
    traced: Vec<Option<f64>>,
    /// Per node: whether the sweep measured anything at this node count
    /// (counts only traces measured are decided from the sweep where the
    /// traces are silent, and never extend how far the sweep reaches).
    swept: Vec<bool>,
    /// Per size: whether the sweep measured anything at this size (sizes
    /// only traces measured are passed over by every reading of the
    /// sweep's points, which sees the sweep's sizes as before).
    swept_size: Vec<bool>,
    /// One source per (node, size) for evidence.
    pub sources: BTreeMap<(usize, usize), String>,
    /// Per (node, size), `node * sizes + size`: the configuration NCCL ran
    /// on its own there, where jobs traced it at a count the sweep never
    /// measured (one setting in every communicator; `None` elsewhere).
    nccl_runs: Vec<Option<usize>>,
    /// Where jobs saw NCCL's own calls mostly run a path the tuner cannot
    /// choose, at any node count (a grid's or not) and size bucket.
    other_paths: Vec<OtherPathMark>,
}

/// Where jobs that let NCCL choose saw it run a symmetric kernel or a
/// copy-engine method in most of its calls ([`TimeBase::OtherPath`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OtherPathMark {
    pub nodes: u32,
    /// The table's size bucket.
    pub bucket: u8,
    /// NCCL's own calls there on that path, and on a classic pair.
    pub ran: u64,
    pub classic: u64,
    /// Communicators that saw NCCL mostly run that path, and mostly a
    /// classic pair.
    pub comms: u32,
    pub classic_comms: u32,
    /// A trace file that saw it.
    pub file: String,
}

impl Grid {
    pub fn get(&self, node: usize, size: usize, cfg: usize) -> Option<&Meas> {
        let i = (node * self.sizes.len() + size) * self.configs.len() + cfg;
        self.cells.get(i).and_then(|c| c.as_ref())
    }

    pub fn ranks(&self, node: usize) -> u32 {
        self.nodes[node] * self.ppn
    }

    /// Number of measured cells.
    pub fn measured(&self) -> usize {
        self.cells.iter().filter(|c| c.is_some()).count()
    }

    /// Whether anything (any configuration) was measured at (node, size).
    pub fn any_at(&self, node: usize, size: usize) -> bool {
        (0..self.configs.len()).any(|c| self.get(node, size, c).is_some())
    }

    /// The sd of one collective's ln(time) at a point measured by traces
    /// of jobs; `None` at a sweep's point (or an empty one).
    pub fn traced(&self, node: usize, size: usize) -> Option<f64> {
        self.traced
            .get(node * self.sizes.len() + size)
            .copied()
            .flatten()
    }

    /// The configuration (index into `configs`) NCCL ran on its own at
    /// (node, size) of a count only traces measured: forcing it there runs
    /// the same, so a job learns nothing by trying it.
    pub fn nccl_runs(&self, node: usize, size: usize) -> Option<usize> {
        self.nccl_runs
            .get(node * self.sizes.len() + size)
            .copied()
            .flatten()
    }

    /// How many (node, size) points hold a mark of what NCCL runs there.
    pub fn nccl_run_marks(&self) -> usize {
        self.nccl_runs.iter().flatten().count()
    }

    /// Whether forcing configuration `cfg` at (node, size) runs what NCCL
    /// runs there on its own ([`Grid::nccl_runs`]): the marked
    /// configuration, or its algorithm and protocol with the channels left
    /// to NCCL or forced to the count it ran (NCCL counts channels per
    /// algorithm and protocol, whoever chose them). A forced chunk is not
    /// NCCL's own, so it never runs as NCCL does.
    pub fn runs_as_nccl(&self, node: usize, size: usize, cfg: usize) -> bool {
        let Some(m) = self.nccl_runs(node, size) else {
            return false;
        };
        let (m, x) = (&self.configs[m], &self.configs[cfg]);
        cfg != 0
            && x.algo == m.algo
            && x.proto == m.proto
            && (x.channels.is_none() || x.channels == m.channels)
            && x.chunk == m.chunk
    }

    /// Where configuration `cfg` sets a chunk size: the same setting at
    /// NCCL's chunk, if the grid holds it (what a chunk must beat to be
    /// forced: NCCL's own chunk for that setting is its baseline, as NCCL's
    /// default is every setting's).
    pub fn at_nccls_chunk(&self, cfg: usize) -> Option<usize> {
        let c = self.configs.get(cfg)?;
        if c.chunk.is_nccl() {
            return None;
        }
        let want = Config {
            chunk: dyncc_tables::Chunk::NCCL,
            ..*c
        };
        self.configs.iter().position(|x| *x == want)
    }

    /// Where jobs saw NCCL's own calls mostly run a path the tuner cannot
    /// choose ([`OtherPathMark`]), in (nodes, bucket) order.
    pub fn other_paths(&self) -> &[OtherPathMark] {
        &self.other_paths
    }

    /// Whether the sweep measured anything at this node count.
    pub fn swept(&self, node: usize) -> bool {
        self.swept.get(node).copied().unwrap_or(false)
    }

    /// Whether the sweep measured anything at this size.
    pub fn swept_size(&self, size: usize) -> bool {
        self.swept_size.get(size).copied().unwrap_or(false)
    }

    /// Whether (node, size) is a size only traces measured, and not here:
    /// a column that exists for other node counts' traces, which readings
    /// at this node count pass over.
    pub fn foreign(&self, node: usize, size: usize) -> bool {
        !self.swept_size(size) && !self.any_at(node, size)
    }
}

/// Why some cells could not go into any grid.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct GridNotes {
    /// Cells of collectives NCCL never asks a tuner about (alltoall, ...).
    pub untunable: usize,
    /// Cells whose ranks are not a multiple of their nodes, per shape in
    /// shape order.
    pub uneven: Vec<UnevenShape>,
    /// Configurations that force only part of a choice (algorithm without
    /// protocol, ...): a table cannot express them.
    pub partial_configs: BTreeSet<String>,
    pub partial_cells: usize,
    /// Cells measured in a call state no table gate can single out
    /// (several pipelined operations: see [`State::gates`]).
    pub ungated: usize,
}

/// Cells of one shape whose ranks are not a multiple of their nodes: no
/// ranks-per-node grid holds them.
#[derive(Clone, Debug, serde::Serialize)]
pub struct UnevenShape {
    pub nranks: u32,
    pub nnodes: u32,
    pub cells: usize,
    /// Where one of them was read (`file:line`), for the user to look at.
    pub example: String,
}

/// Groups cells into grids, one per (collective, ppn, state).
pub fn build_grids(cells: &[Cell]) -> (Vec<Grid>, GridNotes) {
    let mut notes = GridNotes::default();
    type Key = (Coll, u32, State);
    let mut groups: BTreeMap<Key, Vec<&Cell>> = BTreeMap::new();
    for c in cells {
        let Some(coll) = c.key.collective.tunable() else {
            notes.untunable += 1;
            continue;
        };
        let k = &c.key;
        if k.nnodes == 0 || k.nranks % k.nnodes != 0 {
            match notes
                .uneven
                .binary_search_by_key(&(k.nranks, k.nnodes), |u| (u.nranks, u.nnodes))
            {
                Ok(i) => notes.uneven[i].cells += 1,
                Err(i) => notes.uneven.insert(
                    i,
                    UnevenShape {
                        nranks: k.nranks,
                        nnodes: k.nnodes,
                        cells: 1,
                        example: c.source.to_string(),
                    },
                ),
            }
            continue;
        }
        if k.state.gates().is_none() {
            notes.ungated += 1;
            continue;
        }
        let cfg = k.config;
        if !cfg.is_default() && (cfg.algo.is_none() || cfg.proto.is_none()) {
            notes.partial_configs.insert(cfg.to_string());
            notes.partial_cells += 1;
            continue;
        }
        groups
            .entry((coll, k.nranks / k.nnodes, k.state))
            .or_default()
            .push(c);
    }
    let grids = groups
        .into_iter()
        .filter_map(|((coll, ppn, state), all)| {
            // Marks of what NCCL ran name a point and a configuration
            // already there; they add none.
            let (marks, cs): (Vec<&Cell>, Vec<&Cell>) =
                all.into_iter().partition(|c| !c.base.is_time());
            // Marks alone (a collective or ranks per node only jobs ran):
            // nothing to decide.
            if cs.is_empty() {
                return None;
            }
            let nodes: Vec<u32> = cs
                .iter()
                .map(|c| c.key.nnodes)
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect();
            let sizes: Vec<u64> = cs
                .iter()
                .map(|c| c.key.nbytes)
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect();
            let mut configs: Vec<Config> = vec![Config::DEFAULT];
            configs.extend(
                cs.iter()
                    .map(|c| c.key.config)
                    .filter(|c| !c.is_default())
                    .collect::<BTreeSet<_>>(),
            );
            let mut cells = vec![None; nodes.len() * sizes.len() * configs.len()];
            let mut sources = BTreeMap::new();
            let at = |c: &Cell| {
                let ni = nodes.binary_search(&c.key.nnodes).unwrap_or(0);
                let si = sizes.binary_search(&c.key.nbytes).unwrap_or(0);
                (ni, si)
            };
            // Where traces measured a point, they alone decide it: their
            // gains are read within jobs, a sweep's within the sweep.
            let mut traced = vec![None; nodes.len() * sizes.len()];
            for c in &cs {
                if let TimeBase::Trace { sd_ln } = c.base {
                    let (ni, si) = at(c);
                    traced[ni * sizes.len() + si] = Some(sd_ln);
                }
            }
            let mut swept = vec![false; nodes.len()];
            let mut swept_size = vec![false; sizes.len()];
            for c in cs {
                let (ni, si) = at(c);
                let trace = matches!(c.base, TimeBase::Trace { .. });
                if trace != traced[ni * sizes.len() + si].is_some() {
                    continue;
                }
                swept[ni] |= !trace;
                swept_size[si] |= !trace;
                let ci = configs
                    .binary_search_by(|x| cmp_cfg(x, &c.key.config))
                    .unwrap_or(0);
                if !(c.time_us.is_finite() && c.time_us > 0.0) {
                    continue;
                }
                cells[(ni * sizes.len() + si) * configs.len() + ci] = Some(Meas {
                    ln_t: c.time_us.ln(),
                    n: c.n,
                    spread: c.spread,
                });
                sources
                    .entry((ni, si))
                    .or_insert_with(|| c.source.to_string());
            }
            let mut nccl_runs = vec![None; nodes.len() * sizes.len()];
            let mut other_paths = Vec::new();
            for c in marks {
                if let TimeBase::OtherPath {
                    ran,
                    classic,
                    comms,
                    classic_comms,
                } = c.base
                {
                    other_paths.push(OtherPathMark {
                        nodes: c.key.nnodes,
                        bucket: dyncc_tables::size_bucket(c.key.nbytes),
                        ran,
                        classic,
                        comms,
                        classic_comms,
                        file: c.source.file.display().to_string(),
                    });
                    continue;
                }
                let (Ok(ni), Ok(si), Ok(ci)) = (
                    nodes.binary_search(&c.key.nnodes),
                    sizes.binary_search(&c.key.nbytes),
                    configs.binary_search_by(|x| cmp_cfg(x, &c.key.config)),
                ) else {
                    continue;
                };
                if ci != 0 && !swept[ni] {
                    nccl_runs[ni * sizes.len() + si] = Some(ci);
                }
            }
            other_paths.sort_by_key(|m: &OtherPathMark| (m.nodes, m.bucket));
            Some(Grid {
                coll,
                ppn,
                state,
                nodes,
                sizes,
                configs,
                cells,
                traced,
                swept,
                swept_size,
                sources,
                nccl_runs,
                other_paths,
            })
        })
        .collect();
    (grids, notes)
}

/// Config 0 (default) first, then the natural order.
fn cmp_cfg(a: &Config, b: &Config) -> std::cmp::Ordering {
    (!a.is_default(), a).cmp(&(!b.is_default(), b))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::record::{Algo, CellKey, Collective, Proto, Source, State};
    use std::sync::Arc;

    pub fn cell(coll: Collective, nodes: u32, ppn: u32, bytes: u64, cfg: Config, t: f64) -> Cell {
        Cell {
            key: CellKey {
                collective: coll,
                nbytes: bytes,
                nranks: nodes * ppn,
                nnodes: nodes,
                state: State::BASELINE,
                config: cfg,
            },
            time_us: t,
            n: 1,
            spread: 0.0,
            source: Source {
                file: Arc::new("test.csv".into()),
                line: 1,
            },
            base: crate::record::TimeBase::Sweep,
        }
    }

    /// A mark that jobs saw NCCL run `cfg` on its own at (nodes, bytes)
    /// (AllReduce, 8 ranks per node).
    pub fn nccl_ran(nodes: u32, bytes: u64, cfg: Config) -> Cell {
        let mut x = cell(Collective::AllReduce, nodes, 8, bytes, cfg, 0.0);
        x.base = crate::record::TimeBase::NcclRan;
        x
    }

    pub fn cfg(a: Algo, p: Proto) -> Config {
        Config {
            algo: Some(a),
            proto: Some(p),
            channels: None,
            chunk: dyncc_tables::Chunk::NCCL,
        }
    }

    #[test]
    fn grids_put_default_first_and_skip_what_cannot_be_forced() {
        let cells = vec![
            cell(
                Collective::AllReduce,
                2,
                8,
                1024,
                cfg(Algo::Tree, Proto::LL),
                10.0,
            ),
            cell(Collective::AllReduce, 2, 8, 1024, Config::DEFAULT, 12.0),
            cell(Collective::AllReduce, 1, 8, 1024, Config::DEFAULT, 5.0),
            cell(Collective::AllToAll, 2, 8, 1024, Config::DEFAULT, 5.0),
            cell(
                Collective::AllReduce,
                2,
                8,
                1024,
                Config {
                    algo: Some(Algo::Ring),
                    proto: None,
                    channels: None,
                    chunk: dyncc_tables::Chunk::NCCL,
                },
                11.0,
            ),
        ];
        let (grids, notes) = build_grids(&cells);
        assert_eq!(grids.len(), 1);
        let g = &grids[0];
        assert_eq!(g.configs[0], Config::DEFAULT);
        assert_eq!(g.nodes, vec![1, 2]);
        assert_eq!(g.get(1, 0, 0).unwrap().ln_t, 12f64.ln());
        assert_eq!(g.get(1, 0, 1).unwrap().ln_t, 10f64.ln());
        assert!(g.get(0, 0, 1).is_none());
        assert_eq!(notes.untunable, 1);
        assert_eq!(notes.partial_cells, 1);
    }

    /// A mark of what NCCL ran names a point of a count only traces
    /// measured; it is no time, adds no node, size or configuration, and
    /// means nothing at a count the sweep measured.
    #[test]
    fn a_mark_of_what_nccl_ran_is_read_only_at_a_traced_point() {
        let tree = cfg(Algo::Tree, Proto::LL);
        let traced = |n: u32, c: Config, t: f64| {
            let mut x = cell(Collective::AllReduce, n, 8, 1024, c, t);
            x.base = TimeBase::Trace { sd_ln: 0.02 };
            x
        };
        let ring = cfg(Algo::Ring, Proto::Simple);
        let cells = vec![
            cell(Collective::AllReduce, 2, 8, 1024, Config::DEFAULT, 12.0),
            cell(Collective::AllReduce, 2, 8, 1024, tree, 10.0),
            traced(4, Config::DEFAULT, 12.0),
            traced(4, tree, 11.0),
            nccl_ran(4, 1024, tree),
            nccl_ran(2, 1024, tree),
            nccl_ran(8, 1024, tree),
            nccl_ran(4, 2048, tree),
            nccl_ran(4, 1024, ring),
        ];
        let (grids, _) = build_grids(&cells);
        let g = &grids[0];
        assert_eq!((g.nodes.clone(), g.sizes.clone()), (vec![2, 4], vec![1024]));
        assert_eq!(g.configs, vec![Config::DEFAULT, tree]);
        assert_eq!(g.nccl_runs(1, 0), Some(1));
        assert_eq!(g.nccl_runs(0, 0), None, "the sweep measured 2 nodes");
        assert_eq!(g.get(1, 0, 1).unwrap().ln_t, 11f64.ln());
    }

    /// NCCL counts channels per algorithm and protocol, whoever chose them:
    /// where it ran Tree/LL on 8 channels on its own, forcing Tree/LL with
    /// the channels left to it runs the same as forcing 8; forcing 4, or
    /// another protocol, does not. A mark without a channel count covers
    /// only the configuration that leaves them to NCCL.
    #[test]
    fn what_nccl_runs_covers_its_channel_variants() {
        let tree = cfg(Algo::Tree, Proto::LL);
        let ch = |k: u32| Config {
            channels: Some(k),
            ..tree
        };
        let at = |c: Config, t: f64, base: TimeBase| {
            let mut x = cell(Collective::AllReduce, 4, 8, 1024, c, t);
            x.base = base;
            x
        };
        let configs = [
            Config::DEFAULT,
            tree,
            ch(4),
            ch(8),
            cfg(Algo::Tree, Proto::Simple),
        ];
        let runs = |marked: Config| {
            let mut cells: Vec<Cell> = configs
                .iter()
                .map(|&c| cell(Collective::AllReduce, 2, 8, 1024, c, 10.0))
                .collect();
            cells.push(at(Config::DEFAULT, 10.0, TimeBase::Trace { sd_ln: 0.02 }));
            cells.push(nccl_ran(4, 1024, marked));
            let (grids, _) = build_grids(&cells);
            let g = &grids[0];
            configs
                .iter()
                .map(|c| {
                    let ci = g.configs.iter().position(|x| x == c).unwrap();
                    g.runs_as_nccl(1, 0, ci)
                })
                .collect::<Vec<bool>>()
        };
        assert_eq!(runs(ch(8)), [false, true, false, true, false]);
        assert_eq!(runs(tree), [false, true, false, false, false]);
    }
}
