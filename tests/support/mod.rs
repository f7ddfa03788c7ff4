//! Helpers shared by the integration tests.
pub mod cli;
pub mod fuzz;
pub mod tools;
// The same small tables the audit unit tests build (one definition); the
// integration tests use its parts, not its `sample()`.
#[allow(dead_code)]
#[path = "../../compiler/audit/testutil.rs"]
pub mod sample_table;
