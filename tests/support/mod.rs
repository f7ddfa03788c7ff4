//! Helpers shared by the integration tests.
pub mod cli;
pub mod fuzz;
pub mod tools;
