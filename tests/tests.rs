//! Integration tests of the `dyncc` binary and the built plugin.
mod plugin_c; // the built plugin: exported symbols, dependencies, C harness (+valgrind)
