//! Features: arrange aggregated cells into per-(collective, ranks-per-node,
//! call state) grids of node count x message size x configuration, and the
//! feature vectors the models see.

use std::collections::{BTreeMap, BTreeSet};

use crate::record::{Cell, Coll, Config, State};

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
    /// One source per (node, size) for evidence.
    pub sources: BTreeMap<(usize, usize), String>,
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
        .map(|((coll, ppn, state), cs)| {
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
            for c in cs {
                let ni = nodes.binary_search(&c.key.nnodes).unwrap_or(0);
                let si = sizes.binary_search(&c.key.nbytes).unwrap_or(0);
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
            Grid {
                coll,
                ppn,
                state,
                nodes,
                sizes,
                configs,
                cells,
                sources,
            }
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
        }
    }

    pub fn cfg(a: Algo, p: Proto) -> Config {
        Config {
            algo: Some(a),
            proto: Some(p),
            channels: None,
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
}
