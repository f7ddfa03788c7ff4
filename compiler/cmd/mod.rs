//! One file per subcommand: its arguments (whose doc comment is its
//! `--help`), its `run`, and its printing. The work itself lives in the
//! pipeline's modules.

pub mod common;
pub mod compile;
pub mod eval;
