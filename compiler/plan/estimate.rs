//! How long a planned sweep takes, roughly: an alpha-beta model of a
//! typical InfiniBand GPU cluster, for the script's header, the Slurm time
//! limit, the command's summary and the `--max-hours` bound.

use dyncc_tables::{Coll, Proto};

use super::{Plan, Run};

impl Plan {
    /// Rough seconds for one run: launch + NCCL init + per size (warm-up,
    /// out-of-place and in-place timed iterations, one validation each) of
    /// an alpha-beta model of a typical IB cluster (150 GB/s bus bandwidth
    /// in a node, 40 GB/s across nodes), with LL slower on bandwidth and
    /// pinned low channel counts slower still.
    pub fn run_seconds(&self, r: &Run) -> f64 {
        let launch = self.launcher.launch_seconds();
        let init = 3.0 + 0.3 * r.nodes as f64;
        let n = (r.nodes * self.gpus_per_node) as f64;
        let (mut alpha, mut bw) = if r.nodes == 1 {
            (8e-6, 150e9)
        } else {
            (20e-6 + 3e-6 * (r.nodes as f64).log2(), 40e9)
        };
        match r.proto {
            Some(Proto::LL) => {
                alpha *= 0.6;
                bw *= 0.3;
            }
            Some(Proto::LL128) => bw *= 0.9,
            Some(Proto::Simple) => alpha *= 1.5,
            None => {}
        }
        if r.channels > 0 {
            bw *= (r.channels as f64 / 8.0).min(1.0);
        }
        let factor = match r.coll {
            Coll::AllReduce => 2.0 * (n - 1.0) / n,
            Coll::AllGather | Coll::ReduceScatter => (n - 1.0) / n,
            Coll::Broadcast | Coll::Reduce => 1.0,
        };
        let per_size: f64 = self
            .sizes()
            .iter()
            .map(|&s| {
                let t = alpha + s as f64 * factor / bw;
                // Iterations plus buffer setup and validation (~4 op times).
                t * (self.warmup + 2 * self.iters + 2) as f64 + 4.0 * t
            })
            .sum();
        launch + init + per_size * 1.3
    }

    /// The estimated seconds of `runs`, or why the plan is refused: over
    /// `--max-hours` (13 node counts x 1000 repeats made a 63 MB script
    /// asking Slurm for 152175 hours).
    pub fn estimate(&self, runs: &[Run]) -> anyhow::Result<f64> {
        let est: f64 = runs.iter().map(|r| self.run_seconds(r)).sum();
        let limit = self.max_hours as f64 * 3600.0;
        if est > limit {
            anyhow::bail!(
                "the sweep would take about {} ({} nccl-tests runs: {} node count(s) x {} \
                 collective(s) x their settings x {} repeat(s)), over the --max-hours {} limit; \
                 measure fewer --nodes, --repeats, --colls or --channels or a smaller \
                 --max-bytes, or split it into several sweeps (pass --max-hours {} if it is \
                 meant)",
                fmt_duration(est),
                runs.len(),
                self.nodes.len(),
                self.colls.len(),
                self.repeats,
                self.max_hours,
                (est / 3600.0).ceil() as u64
            );
        }
        Ok(est)
    }
}

/// `2 h 10 min`, `14 min`, `45 s`.
pub fn fmt_duration(secs: f64) -> String {
    let s = secs.round() as u64;
    if s >= 3600 {
        format!("{} h {:02} min", s / 3600, (s % 3600).div_ceil(60).min(59))
    } else if s >= 60 {
        format!("{} min", s.div_ceil(60))
    } else {
        format!("{s} s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_like_a_person_wrote_them() {
        assert_eq!(fmt_duration(7800.0), "2 h 10 min");
        assert_eq!(fmt_duration(840.0), "14 min");
        assert_eq!(fmt_duration(45.0), "45 s");
    }
}
