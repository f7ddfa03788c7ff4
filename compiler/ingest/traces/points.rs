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
}

impl SweepView {
    pub fn of_cells(cells: &[Cell], nccl_version: u32) -> SweepView {
        let mut v = SweepView {
            nccl_version,
            ..Default::default()
        };
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
        }
        v
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
    /// with its channel count forced.
    pub(super) fn config_of(&self, coll: Coll, ppn: u32, s: Setting) -> Config {
        let forced = Config {
            algo: Some(s.algo),
            proto: Some(s.proto),
            channels: (s.channels > 0).then_some(s.channels as u32),
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
}
