#!/usr/bin/env bash
# Runs the C harnesses (tests/c/harness.c, tests/c/stress.c) against the
# plugin built with clang -fsanitize=address,undefined, and the stress
# harness natively and under valgrind. Installs clang (Debian package) when
# it is missing. Fails on any sanitizer or valgrind report: the tests in
# tests/stress_c.rs assert a clean exit and no "ERROR: AddressSanitizer",
# "ERROR: LeakSanitizer" or "runtime error:" line, and
# DYNCC_REQUIRE_SANITIZERS=1 turns a missing clang into a failure instead
# of a skip.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v clang >/dev/null || need_apt+=(clang)
command -v valgrind >/dev/null || need_apt+=(valgrind)
command -v gcc >/dev/null || need_apt+=(gcc)
if [ ${#need_apt[@]} -gt 0 ]; then
  # Debian 12 ships clang 14 (`apt-cache policy clang`); its ASan/UBSan
  # runtimes come with the package.
  echo "sanitizers: installing ${need_apt[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
clang --version | head -n1

t0=$(date +%s)
cargo build -p dyncc-runtime
DYNCC_REQUIRE_SANITIZERS=1 cargo test --test integration -- \
  --nocapture stress_c:: plugin_c::c_harness
echo "sanitizers: done in $(( $(date +%s) - t0 ))s"
