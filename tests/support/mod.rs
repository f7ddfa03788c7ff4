//! Helpers shared by the integration tests.
pub mod cli;
pub mod fuzz;
pub mod tools;
// The same small tables the audit unit tests build (one definition); the
// integration tests use its parts, not its `sample()`.
#[allow(dead_code)]
#[path = "../../compiler/audit/testutil.rs"]
pub mod sample_table;
// The benches' synthetic sweeps (one generator), for tests that need a
// large input.
#[allow(dead_code)]
#[path = "../../benches/support/gen_sweep.rs"]
pub mod gen_sweep;
