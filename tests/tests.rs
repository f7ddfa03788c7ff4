//! Integration tests of the `dyncc` binary and the built plugin.
mod attack; // hostile inputs through the CLI: exit status and message per row
mod audit; // explain, query (vs the plugin), diff, plot (rendered), export, verify
mod audit_plan; // the exploration plan (format 1.1) through verify, explain and query
mod bless; // one switch (DYNCC_BLESS, `make bless`) regenerates golden files
mod chunk_sweep; // chunk sizes: a sweep at DYNCC_SWEEP_CHUNK compiles into chunk decisions the built plugin answers
mod cli_conventions; // completions, man pages, JSON errors and schema versions of every command
mod compile; // compile and eval end to end on the shipped datasets
mod docs; // README, CHANGELOG and the book: links resolve, pages listed, promises kept
mod explore_c; // DYNCC_EXPLORE through the built plugin: ranks agree, share, bounds
mod fuzz_replay; // ingest fuzz seeds and crash inputs, replayed
mod gpu_check; // tests/gpu/ (run on a GPU by hand): shellcheck, Python parses, usage
mod hardening; // malformed-input matrix of `dyncc compile`: strict errors, --lenient skips
mod imports; // no import circle inside a crate: the sources read, circles named
mod ingest; // every real log format, golden row counts
mod ingest_cli; // `dyncc inspect` as users run it
mod ingest_errors; // malformed input: file, line, what was expected
mod ingest_labels; // knobs per run, labels, copies and setups, checked values, bounded walk
mod ingest_nccl_tests_219; // nccl-tests 2.19 output (-g, NCCL_TESTS_SPLIT, -C/-z/-G, -J, -d all) read right or refused
mod install_c; // every way of installing: plugin-path, both names as one object, the version
mod loop_c; // the learning loop: sparse sweep, production round exploring (world.c), recompile from traces
mod manifest; // Cargo.toml declares only what the code uses
mod parity_c; // complete exploration given as traces vs the same measurements as sweep rows
mod plan; // sweep scripts: shellcheck, run against fake nccl-tests/srun/mpirun
mod plugin_c; // the built plugin: exported symbols, dependencies, C harness (+valgrind)
mod profiler_c; // the plugin as NCCL's profiler: a stand-in NCCL, trace files, failures
mod simulate; // `dyncc simulate`: physics, realism, determinism, readable output
mod stress_c; // the plugin under stress, sanitizers, failure semantics (C harnesses)
mod support; // shared helpers: the dyncc binary, required external tools
mod test_deps; // `make test` installs what the tests need, or names the command that does
mod touch_lists; // the touch lists in the docs of Setting and Comm name files that exist
mod traces; // compile SWEEP TRACES: trace files of jobs as measurements
mod walk; // the walk of trace and sweep directories stays in the tree named
mod world_c; // a stand-in NCCL in a world from `dyncc simulate`'s truth: rounds with tables, exploration
