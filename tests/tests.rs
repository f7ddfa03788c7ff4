//! Integration tests of the `dyncc` binary and the built plugin.
mod ingest;
mod ingest_cli;
mod ingest_errors;
