#!/usr/bin/env bash
# Instructions per getCollInfo (and getChunkSize) call through ncclTunerPlugin_v6, measured with
# callgrind as (instructions for N calls - instructions for 0 calls) / N, for
# repeated and random inputs, and per first init of the ~64 KiB benchmark
# table (user space only; 200 inits). Deterministic, so it does not care how
# busy the machine is. Usage: runtime/benches/instructions.sh [N]   (default 100000)
set -euo pipefail
cd "$(dirname "$0")/../.."
n="${1:-100000}"
command -v valgrind >/dev/null || { echo "instructions.sh: valgrind is not installed (apt-get install valgrind)" >&2; exit 1; }
cargo build --release -q -p dyncc-runtime --example callgrind_getcollinfo --example callgrind_first_init
exe="${CARGO_TARGET_DIR:-target}/release/examples/callgrind_getcollinfo"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
total() { # N MODE -> total instructions (Ir)
  valgrind --tool=callgrind --callgrind-out-file="$tmp/out" "$exe" "$1" "$2" >/dev/null 2>&1
  awk '/^summary:/ {print $2}' "$tmp/out"
}
for mode in repeated random; do
  base="$(total 0 "$mode")"
  full="$(total "$n" "$mode")"
  awk -v b="$base" -v f="$full" -v n="$n" -v m="$mode" \
    'BEGIN { printf "getCollInfo v6 (%s inputs): %.1f instructions per call (%d calls: %d - %d)\n", m, (f - b) / n, n, f, b }'
done
# The same with DYNCC_TRACE set: each answer is also recorded for the profiler.
mkdir -p "$tmp/trace"
for mode in repeated random; do
  base="$(DYNCC_TRACE="$tmp/trace" total 0 "$mode")"
  full="$(DYNCC_TRACE="$tmp/trace" total "$n" "$mode")"
  awk -v b="$base" -v f="$full" -v n="$n" -v m="$mode" \
    'BEGIN { printf "getCollInfo v6 with DYNCC_TRACE (%s inputs): %.1f instructions per call (%d calls: %d - %d)\n", m, (f - b) / n, n, f, b }'
done
# The same with DYNCC_EXPLORE set, on the table made unconfirmed (every
# forced call may explore): the schedule's cost on every call.
for mode in repeated random; do
  base="$(DYNCC_EXPLORE=0.05 total 0 "$mode")"
  full="$(DYNCC_EXPLORE=0.05 total "$n" "$mode")"
  awk -v b="$base" -v f="$full" -v n="$n" -v m="$mode" \
    'BEGIN { printf "getCollInfo v6 with DYNCC_EXPLORE=0.05 (%s inputs): %.1f instructions per call (%d calls: %d - %d)\n", m, (f - b) / n, n, f, b }'
done
# getChunkSize (v6), NCCL's next question once getCollInfo chose.
for mode in repeated random; do
  base="$(DYNCC_BENCH_CHUNK=1 total 0 "$mode")"
  full="$(DYNCC_BENCH_CHUNK=1 total "$n" "$mode")"
  awk -v b="$base" -v f="$full" -v n="$n" -v m="$mode" \
    'BEGIN { printf "getChunkSize v6 (%s inputs): %.1f instructions per call (%d calls: %d - %d)\n", m, (f - b) / n, n, f, b }'
done
init_exe="${CARGO_TARGET_DIR:-target}/release/examples/callgrind_first_init"
init_total() { # N -> total instructions (Ir)
  valgrind --tool=callgrind --callgrind-out-file="$tmp/out" "$init_exe" "$1" >/dev/null 2>&1
  awk '/^summary:/ {print $2}' "$tmp/out"
}
base="$(init_total 0)"
full="$(init_total 200)"
awk -v b="$base" -v f="$full" -v n=200 \
  'BEGIN { printf "first init of a 64 KiB table + finalize (v6): %.0f instructions in user space (%d inits: %d - %d)\n", (f - b) / n, n, f, b }'
