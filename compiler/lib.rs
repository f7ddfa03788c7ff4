//! dyncc: an offline policy compiler for NCCL collective tuning.
//!
//! The data path reads top to bottom: [`ingest`] turns sweep logs into
//! [`record::Record`]s, [`features`] and [`fit`] model them, [`decide`]
//! chooses per region, [`distil`] makes the decisions readable, and [`emit`]
//! writes the table through `dyncc-tables`. [`simulate`] produces sweeps
//! without a cluster; [`audit`] answers questions about a table.

pub mod record;
pub mod ingest;
pub mod simulate;
pub mod tree;
pub mod features;
pub mod fit;
pub mod decide;
pub mod distil;
pub mod atomic;
pub mod emit;
pub mod units;
pub mod compile;
pub mod eval;
pub mod audit;
