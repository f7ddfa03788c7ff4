//! `dyncc simulate`.

use std::path::PathBuf;

/// Write realistic sweeps from a hardware profile.
#[derive(clap::Args, Debug)]
pub struct SimulateArgs {
    /// Output directory.
    #[arg(short, long)]
    pub output: Option<PathBuf>,
}

pub fn run(_args: SimulateArgs) -> anyhow::Result<i32> {
    anyhow::bail!("simulate is not implemented yet")
}
