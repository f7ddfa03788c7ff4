//! Integration tests of the `dyncc` binary and the built plugin.

mod audit;
mod plan;
