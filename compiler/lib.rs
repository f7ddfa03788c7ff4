//! dyncc: an offline policy compiler for NCCL collective tuning.
//!
//! The data path reads top to bottom: [`ingest`] turns sweep logs into
//! [`record::Record`]s, [`features`] and [`fit`] model them, [`decide`]
//! chooses per region, [`distil`] makes the decisions readable, and [`emit`]
//! writes the table through `dyncc-tables`; [`pipeline`] runs them in that
//! order and [`eval`] scores the result. [`cmd`] holds one file per
//! subcommand (arguments, run, printing), [`cli`] the command line over
//! them, [`output`] what every `--json` output carries. [`simulate`] produces sweeps
//! without a cluster, [`plan`] the script that sweeps one; [`audit`]
//! answers questions about a table; [`installed`] finds the plugin that
//! came with the command.

pub mod atomic;
pub mod audit;
pub mod boost;
pub mod choice;
pub mod cli;
pub mod cmd;
pub mod decide;
pub mod distil;
pub mod emit;
pub mod eval;
pub mod explore;
pub mod features;
pub mod fit;
pub mod ingest;
pub mod input;
pub mod installed;
pub mod nodes;
pub mod output;
pub mod pipeline;
pub mod plan;
pub mod progress;
pub mod record;
pub mod report;
pub mod reruns;
pub mod simulate;
pub mod stats;
pub mod tree;
pub mod units;
