//! `dyncc inspect`.

use std::path::PathBuf;

/// Read sweep logs and summarise what they hold.
#[derive(clap::Args, Debug)]
pub struct InspectArgs {
    /// Files or directories to read.
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
    /// Print a JSON object instead of the human summary.
    #[arg(long)]
    pub json: bool,
}

pub fn run(_args: InspectArgs) -> anyhow::Result<i32> {
    anyhow::bail!("inspect is not implemented yet")
}
