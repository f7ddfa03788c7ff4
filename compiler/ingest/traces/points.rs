//! Where a traced shape lands: the point a table decides at ([`PointKey`]:
//! the size on the table's bucket grid, or the sweep's size in that
//! bucket) and what the sweep measured there ([`SweepView`]: its sizes,
//! configurations and times, that traced settings are placed against).

use std::collections::{BTreeMap, BTreeSet};

use dyncc_tables::{bucket_lower_bound, bucket_upper_bound, size_bucket, Coll};

use crate::record::{Cell, CellKey, Collective, Config, State};
use dyncc_tables::Setting;

/// The key of a point: where a table decides (size on the table's bucket
/// grid, or the sweep's size in that bucket).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PointKey {
    pub coll: Coll,
    pub nodes: u32,
    pub ranks: u32,
    pub n_bytes: u64,
}

impl PointKey {
    /// The key of `config`'s cell at this point (jobs run in the baseline
    /// call state).
    pub(super) fn cell_key(&self, config: Config) -> CellKey {
        CellKey {
            collective: Collective::from_coll(self.coll),
            nbytes: self.n_bytes,
            nranks: self.ranks,
            nnodes: self.nodes,
            state: State::BASELINE,
            config,
        }
    }
}

/// What the sweep holds that trace points are placed against.
#[derive(Clone, Debug, Default)]
pub struct SweepView {
    /// Configurations measured, per (collective, ranks per node).
    pub configs: BTreeMap<(Coll, u32), BTreeSet<Config>>,
    /// Sizes measured per collective (a trace's size snaps to the sweep's
    /// size in the same bucket, so both are one point).
    pub sizes: BTreeMap<Coll, BTreeSet<u64>>,
    /// Points the sweep measured (any configuration).
    pub points: BTreeSet<PointKey>,
    /// The newest NCCL version the sweep names (0: none named).
    pub nccl_version: u32,
    /// The sweep's ln(time) and repeats per (point, configuration): what a
    /// trace's gain is set against where both measured a point.
    pub times: BTreeMap<(PointKey, Config), (f64, u32)>,
    /// One run's sd of ln(time) per (collective, ranks per node), from the
    /// sweep's repeats (the median over its cells that ran more than once):
    /// the least spread between traced communicators ([`super::rule`]).
    pub run_sd: BTreeMap<(Coll, u32), f64>,
    /// The same over the whole sweep, where some cell ran more than once.
    pub overall_run_sd: Option<f64>,
}

impl SweepView {
    pub fn of_cells(cells: &[Cell], nccl_version: u32) -> SweepView {
        let mut v = SweepView {
            nccl_version,
            ..Default::default()
        };
        let mut repeats: BTreeMap<(Coll, u32), Vec<f64>> = BTreeMap::new();
        for c in cells {
            let k = &c.key;
            let Some(coll) = k.collective.tunable() else {
                continue;
            };
            if k.nnodes == 0 || k.nranks % k.nnodes != 0 || k.state != State::BASELINE {
                continue;
            }
            v.configs
                .entry((coll, k.nranks / k.nnodes))
                .or_default()
                .insert(k.config);
            v.sizes.entry(coll).or_default().insert(k.nbytes);
            let p = PointKey {
                coll,
                nodes: k.nnodes,
                ranks: k.nranks,
                n_bytes: k.nbytes,
            };
            v.points.insert(p);
            if c.time_us.is_finite() && c.time_us > 0.0 {
                v.times.insert((p, k.config), (c.time_us.ln(), c.n));
            }
            if c.n >= 2 && c.spread.is_finite() {
                repeats
                    .entry((coll, k.nranks / k.nnodes))
                    .or_default()
                    .push(crate::fit::repeat_variance(
                        (1.0 + c.spread.max(0.0)).ln(),
                        c.n,
                    ));
            }
        }
        let median = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let mut all: Vec<f64> = repeats.values().flatten().copied().collect();
        let overall = (!all.is_empty()).then(|| median(&mut all).sqrt());
        for (k, mut vars) in repeats {
            v.run_sd.insert(k, median(&mut vars).sqrt());
        }
        v.overall_run_sd = overall;
        v
    }

    /// One sweep run's sd of ln(time) for `coll` at `ppn` ranks per node:
    /// from the sweep's repeats there, else over the whole sweep, else
    /// [`super::rule::RUN_SD_DEFAULT`]; never below the fit's floor.
    pub fn run_sd(&self, coll: Coll, ppn: u32) -> f64 {
        self.run_sd
            .get(&(coll, ppn))
            .copied()
            .or(self.overall_run_sd)
            .unwrap_or(super::evidence::rule::RUN_SD_DEFAULT)
            .max(super::evidence::rule::RUN_SD_FLOOR)
    }

    /// Whether traces may have `cfg` forced at `key`: a setting the sweep
    /// measured for the collective at these ranks per node, that NCCL can
    /// run at this shape. Traces never name candidates.
    pub fn names(&self, key: PointKey, ppn: u32, cfg: &Config) -> bool {
        let measured = self
            .configs
            .get(&(key.coll, ppn))
            .is_some_and(|c| c.contains(cfg));
        let runs = match (cfg.algo, cfg.proto) {
            (Some(a), Some(p)) => dyncc_tables::Machine::new(key.nodes, ppn).runs(key.coll, a, p),
            _ => cfg.is_default(),
        };
        measured && runs
    }

    /// The sweep's gain of `cfg` over NCCL's default at `key` (ln), its sd
    /// and the runs it weighs (2 / (1/n_default + 1/n_cfg)), where the sweep
    /// measured both there.
    pub fn gain_at(&self, key: PointKey, ppn: u32, cfg: &Config) -> Option<(f64, f64, f64)> {
        let (d, nd) = *self.times.get(&(key, Config::DEFAULT))?;
        let (m, nm) = *self.times.get(&(key, *cfg))?;
        let inv = 1.0 / f64::from(nd.max(1)) + 1.0 / f64::from(nm.max(1));
        Some((d - m, self.run_sd(key.coll, ppn) * inv.sqrt(), 2.0 / inv))
    }

    /// The sweep runs the jobs must outweigh to change `cfg` at `key`: its
    /// runs against the default where it measured both, else the default's
    /// (a setting the sweep left out there still stands against what it
    /// measured), else one.
    pub fn runs_at(&self, key: PointKey, ppn: u32, cfg: &Config) -> f64 {
        if let Some((_, _, r)) = self.gain_at(key, ppn, cfg) {
            return r;
        }
        self.times
            .get(&(key, Config::DEFAULT))
            .map_or(1.0, |(_, n)| f64::from((*n).max(1)))
    }

    /// Whether the sweep measured `key`'s collective at its node count and
    /// ranks (at any size).
    pub fn measured_count(&self, key: PointKey) -> bool {
        let at = |n_bytes| PointKey { n_bytes, ..key };
        self.points.range(at(0)..=at(u64::MAX)).next().is_some()
    }

    /// The size a trace's `n_bytes` stands at: the sweep's size in the
    /// same table bucket when it measured one, else the bucket's lower
    /// bound (a table decides per bucket).
    pub fn snap(&self, coll: Coll, n_bytes: u64) -> u64 {
        let b = size_bucket(n_bytes);
        self.sizes
            .get(&coll)
            .and_then(|s| {
                s.range(bucket_lower_bound(b)..=bucket_upper_bound(b))
                    .next()
            })
            .copied()
            .unwrap_or_else(|| bucket_lower_bound(b))
    }

    /// The configuration a setting that ran stands for: the sweep's with
    /// that channel count, else the sweep's that left channels to NCCL
    /// (NCCL picks the same count at the same shape), else the setting
    /// with its channel count forced; with the chunk the plugin answered
    /// (NCCL's where the record says none).
    pub(super) fn config_of(&self, coll: Coll, ppn: u32, s: Setting) -> Config {
        let forced = Config {
            algo: Some(s.algo),
            proto: Some(s.proto),
            channels: (s.channels > 0).then_some(s.channels as u32),
            chunk: s.chunk,
        };
        let auto = Config {
            channels: None,
            ..forced
        };
        match self.configs.get(&(coll, ppn)) {
            Some(c) if c.contains(&forced) => forced,
            Some(c) if c.contains(&auto) => auto,
            _ => forced,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dyncc_tables::{Algo, Proto};

    #[test]
    fn a_size_joins_the_sweeps_size_in_its_bucket_and_a_setting_the_sweeps_config() {
        let mut v = SweepView::default();
        v.sizes.entry(Coll::AllReduce).or_default().insert(4096);
        let auto = Config {
            algo: Some(Algo::Tree),
            proto: Some(Proto::LL),
            channels: None,
            chunk: dyncc_tables::Chunk::NCCL,
        };
        v.configs
            .entry((Coll::AllReduce, 8))
            .or_default()
            .insert(auto);
        // 4096..5119 is one bucket; 6000 is the next.
        assert_eq!(v.snap(Coll::AllReduce, 5000), 4096);
        assert_eq!(
            v.snap(Coll::AllReduce, 6000),
            bucket_lower_bound(size_bucket(6000))
        );
        let ran = Setting::new(Algo::Tree, Proto::LL).with_channels(12);
        assert_eq!(v.config_of(Coll::AllReduce, 8, ran), auto);
        assert_eq!(
            v.config_of(Coll::AllReduce, 4, ran).channels,
            Some(12),
            "no sweep config at 4 ranks per node: the channels that ran"
        );
    }

    /// A record's chunk (what the plugin answered) is part of the
    /// configuration it stands for: a chunked force is the sweep's chunked
    /// configuration, never the same setting at NCCL's chunk (the old
    /// reader dropped the chunk).
    #[test]
    fn a_chunked_record_stands_for_the_sweeps_chunked_config() {
        let k64 = dyncc_tables::Chunk::from_bytes(64 << 10).unwrap();
        let plain = Config {
            algo: Some(Algo::Ring),
            proto: Some(Proto::Simple),
            channels: None,
            chunk: dyncc_tables::Chunk::NCCL,
        };
        let chunked = Config {
            chunk: k64,
            ..plain
        };
        let mut v = SweepView::default();
        v.configs
            .entry((Coll::AllReduce, 8))
            .or_default()
            .extend([plain, chunked]);
        let ran = Setting::new(Algo::Ring, Proto::Simple).with_channels(8);
        assert_eq!(v.config_of(Coll::AllReduce, 8, ran), plain);
        let ran = ran.with_chunk(k64).unwrap();
        assert_eq!(v.config_of(Coll::AllReduce, 8, ran), chunked);
    }
}
