//! dyncc: an offline policy compiler for NCCL collective tuning.
//!
//! The data path reads top to bottom: [`ingest`] turns sweep logs into
//! [`record::Record`]s, [`features`] and [`fit`] model them, [`decide`]
//! chooses per region, [`distil`] makes the decisions readable, and [`emit`]
//! writes the table through `dyncc-tables`. [`simulate`] produces sweeps
//! without a cluster; [`audit`] answers questions about a table.

pub mod ingest;
pub mod record;
pub mod simulate;
