//! How much of a cross-validation figure is the sweep's own noise.
//!
//! Runs the cross-validation of `dyncc eval --cv all` (the one pipeline,
//! `dyncc compile`'s defaults) on copies of a sweep in which every measured
//! time is multiplied by exp(N(0, SD)), one copy per seed, and prints each
//! scenario's spread of captured share, reachable share and regressions.
//! Extra noise makes a copy noisier than the sweep was, so the band is an
//! upper bound on how far a re-measurement could move the figure; a bar
//! inside it is a bar on the noise, not on the method (README, "Decision
//! quality"):
//!
//!     cargo run --release --example noise_band -- datasets/real/nvidia-dgx1v-allreduce.csv 0.02 12

use std::path::PathBuf;

use anyhow::Context;
use dyncc::eval::{cross_validate, CvMode};
use dyncc::ingest::{read_paths_folded, Dataset, IngestOptions};
use dyncc::pipeline::CompileOptions;
use rand::SeedableRng;
use rand_distr::{Distribution, Normal};

/// The spread of one figure over the copies.
fn band(mut v: Vec<f64>) -> String {
    v.sort_by(f64::total_cmp);
    let median = if v.len() % 2 == 1 {
        v[v.len() / 2]
    } else {
        (v[v.len() / 2 - 1] + v[v.len() / 2]) / 2.0
    };
    format!(
        "{:5.1} .. {:5.1} % (median {:5.1} %)",
        100.0 * v[0],
        100.0 * v[v.len() - 1],
        100.0 * median
    )
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [path, sd, copies] = &args[..] else {
        anyhow::bail!("usage: noise_band SWEEP SD COPIES (e.g. datasets/real/nvidia-dgx1v-allreduce.csv 0.02 12)");
    };
    let sd: f64 = sd
        .parse()
        .context("SD: a standard deviation of ln(time), e.g. 0.02")?;
    let copies: u64 = copies
        .parse()
        .context("COPIES: a number of seeds, e.g. 12")?;
    let noise = Normal::new(0.0, sd).context("SD must be finite and >= 0")?;
    let sweep = read_paths_folded(&[PathBuf::from(path)], &IngestOptions::default())?;
    let opts = CompileOptions::default();
    println!("{path}: every time x exp(N(0, {sd})), {copies} copies");
    for mode in CvMode::ALL {
        let (mut captured, mut reachable, mut regressions) = (Vec::new(), Vec::new(), Vec::new());
        for seed in 0..copies {
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
            let mut folded = sweep.folded.clone();
            for g in &mut folded.groups {
                g.samples.map_times(|t| t * noise.sample(&mut rng).exp());
            }
            let copy = Dataset {
                folded,
                ..Default::default()
            };
            let cv = cross_validate(&copy, &opts, mode)?;
            captured.push(cv.score.captured);
            reachable.push(cv.score.reachable.unwrap_or(0.0));
            regressions.push(cv.score.regression_share);
        }
        println!(
            "  --cv {:<7} captured {}  reachable {}  regressions {}",
            mode.name(),
            band(captured),
            band(reachable),
            band(regressions)
        );
    }
    Ok(())
}
