//! One file per subcommand, as ripgrep keeps its flags: the arguments (whose
//! doc comment is the command's `--help`), `run`, and the printing. The
//! work itself lives in the pipeline's modules (`ingest`, `pipeline`,
//! `eval`, `simulate`, `audit`).

pub mod common;
pub mod compile;
pub mod diff;
pub mod eval;
pub mod explain;
pub mod export;
pub mod inspect;
pub mod plan;
pub mod plot;
pub mod query;
pub mod simulate;
pub mod verify;
