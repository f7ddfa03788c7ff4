//! Integration tests of the `dyncc` binary and the built plugin.
mod audit; // explain, query (vs the plugin), diff, plot (rendered), export, verify
mod compile; // compile and eval end to end on the shipped datasets
mod ingest; // every real log format, golden row counts
mod ingest_cli;
mod ingest_errors; // malformed input: file, line, what was expected
mod plan; // sweep scripts: shellcheck, run against fake nccl-tests/srun/mpirun
mod plugin_c; // the built plugin: exported symbols, dependencies, C harness (+valgrind)
mod simulate;
