//! Arguments more than one command takes, defined once so that `compile`
//! and `eval` (and its cross-validation) decide with the same defaults and
//! fit on the same threads.

use anyhow::bail;

use crate::decide::{DecideOptions, DEFAULT_MARGIN, DEFAULT_NODE_REACH, DEFAULT_NOISE_Z};

/// How decisions are made (see `dyncc compile --help`).
#[derive(clap::Args, Debug, Clone)]
pub struct DecideArgs {
    /// Force a setting only when its expected gain over NCCL's default
    /// exceeds this fraction on top of the uncertainty (0.03 = 3 %).
    #[arg(long, default_value_t = DEFAULT_MARGIN)]
    pub margin: f64,
    /// Standard deviations of uncertainty a gain must clear: measurement
    /// noise at measured node counts, the calibrated error of the
    /// prediction at the others.
    #[arg(long, default_value_t = DEFAULT_NOISE_Z)]
    pub noise_z: f64,
    /// Decide node counts up to this factor beyond the measured multi-node
    /// counts (above the largest, and down towards 2); NCCL decides beyond.
    #[arg(long, value_name = "FACTOR", default_value_t = DEFAULT_NODE_REACH)]
    pub node_reach: f64,
    /// Decide only measured node counts and those between them.
    #[arg(long, conflicts_with_all = ["extrapolate", "node_reach"])]
    pub no_extrapolate: bool,
    /// Decide every node count, size and number of ranks per node, however
    /// far from what was measured.
    #[arg(long)]
    pub extrapolate: bool,
}

impl DecideArgs {
    /// The options these arguments ask for, checked.
    pub fn options(&self) -> anyhow::Result<DecideOptions> {
        if !(self.margin.is_finite() && (0.0..1.0).contains(&self.margin)) {
            bail!(
                "--margin {}: expected a fraction between 0 and 1, e.g. 0.03 for 3 %",
                self.margin
            );
        }
        if !(self.noise_z.is_finite() && self.noise_z >= 0.0) {
            bail!(
                "--noise-z {}: expected a non-negative number, e.g. 0.5",
                self.noise_z
            );
        }
        if !(self.node_reach.is_finite() && self.node_reach >= 1.0) {
            bail!(
                "--node-reach {}: expected a factor of at least 1 (1 = only between measured node \
                 counts), e.g. 4",
                self.node_reach
            );
        }
        Ok(DecideOptions {
            margin: self.margin,
            z: self.noise_z,
            extrapolate: self.extrapolate,
            node_reach: if self.no_extrapolate {
                1.0
            } else {
                self.node_reach
            },
        })
    }
}

/// How the work runs (see `dyncc compile --help`).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct RunArgs {
    /// Fit on N threads (default: every available core). The table is the
    /// same for any N.
    #[arg(long, short = 'j', value_name = "N")]
    pub jobs: Option<usize>,
}

impl RunArgs {
    /// The thread count for [`crate::pipeline::CompileOptions::jobs`]
    /// (0: every available core), checked.
    pub fn jobs(&self) -> anyhow::Result<usize> {
        match self.jobs {
            Some(0) => bail!("--jobs 0: expected at least 1 thread, e.g. --jobs 4"),
            Some(n) => Ok(n),
            None => Ok(0),
        }
    }
}
