#!/usr/bin/env bash
# Runs the C harnesses (tests/c/harness.c, tests/c/stress.c) against the
# plugin built with clang -fsanitize=address,undefined, and the stress
# harness natively and under valgrind: the same tests `make test` runs, alone.
# Installs the tools as `make test` does (.ci/test-deps.sh). Fails on any
# sanitizer or valgrind report: the tests in tests/stress_c.rs assert a clean
# exit and no "ERROR: AddressSanitizer", "ERROR: LeakSanitizer" or
# "runtime error:" line, and fail when clang is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

.ci/test-deps.sh
clang --version | head -n1

t0=$(date +%s)
cargo build -p dyncc-runtime
cargo test --test integration -- \
  --nocapture stress_c:: plugin_c::c_harness
echo "sanitizers: done in $(( $(date +%s) - t0 ))s"
