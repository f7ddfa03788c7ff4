#!/usr/bin/env bash
# Bounded fuzzing for CI: runs every cargo-fuzz target for FUZZ_SECONDS
# (default 20 s) each, on stable (`-s none`: no sanitizer instrumentation,
# which needs nightly; libFuzzer still catches panics, aborts, timeouts and
# out-of-memory). Prints executions per target and the total, and fails if
# any target finds a crash.
#
# Targets: tables/fuzz (table from_bytes + lookup + specialisation; the
# trace reader, trace_from_bytes: traces are jobs' files compile reads),
# runtime/fuzz (the plugin's environment, NCCL version strings and codes)
# and fuzz/ (the compiler's parsers of untrusted bytes: the four ingest
# readers, format detection, path knobs and `# dyncc:` lines, --manifest,
# --name-pattern). Every target's harness is a file `cargo test` also
# compiles (tables/tests/support/harness.rs, runtime/tests/support/fuzz.rs,
# tests/support/fuzz.rs) and replays the committed inputs through.
# Seeds come from committed files (golden tables, seeds, test logs), copied
# into the (git-ignored) corpus directory first.
#
# A crash leaves its input in <fuzz dir>/artifacts/<target>/crash-*. To turn
# it into a regression case replayed by plain `cargo test`:
#   cargo fuzz tmin -s none <target> <artifact>      (in the fuzz dir)
#   tables: copy the minimised file to tables/testdata/fuzz/crash-<what broke>
#   runtime: copy it to runtime/testdata/fuzz/<target>/crash-<what broke>
#   compiler: copy it to tests/fuzz_inputs/<target>/crash-<what broke>
#   then fix the bug; tables/tests/fuzz_regressions.rs,
#   runtime/tests/fuzz_replay.rs and tests/fuzz_replay.rs replay every file
#   in those directories.
#
# Env: FUZZ_SECONDS (per target), FUZZ_TARGETS (space-separated subset),
# FUZZ_JOBS (parallel fuzz processes per target, default 1).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
secs=${FUZZ_SECONDS:-20}
only=${FUZZ_TARGETS:-}
# One target dir for both fuzz projects, so libFuzzer and dyncc-tables are
# built once (the fuzz builds use their own flags, so they cannot share the
# test build).
tdir=${FUZZ_TARGET_DIR:-$root/target/fuzz}

if ! cargo fuzz --version 2>/dev/null | grep -q '0\.13\.'; then
  echo "fuzz: installing cargo-fuzz 0.13.2"
  cargo install cargo-fuzz --version 0.13.2 --locked --quiet
fi

t0=$(date +%s)
total=0
summary=()
failed=0

# run_target <fuzz dir (holds Cargo.toml)> <target> <seed dirs...>
run_target() {
  local dir=$1 target=$2
  shift 2
  if [ -n "$only" ] && ! grep -qw "$target" <<<"$only"; then return; fi
  local corpus="$dir/corpus/$target"
  mkdir -p "$corpus"
  for s in "$@"; do
    [ -e "$s" ] || continue
    find "$s" -type f ! -name '*.md' ! -name '*.py' -size -1M -exec cp -f {} "$corpus/" \;
  done
  local log
  log=$(mktemp)
  echo "fuzz: $target (${secs}s) in ${dir#"$root"/}"
  local start
  start=$(date +%s)
  # The build is outside the time bound; libFuzzer counts only fuzzing.
  (cd "$dir" && cargo fuzz build -s none --target-dir "$tdir" "$target" 2>&1 | tail -n 3)
  set +e
  (cd "$dir" && cargo fuzz run -s none --target-dir "$tdir" "$target" "corpus/$target" -- \
      -max_total_time="$secs" -rss_limit_mb=2048 -timeout=10 -max_len=65536 \
      -print_final_stats=1) >"$log" 2>&1
  local rc=$?
  set -e
  local runs
  runs=$(sed -n 's/^Done \([0-9]*\) runs in .*/\1/p' "$log" | tail -n1)
  [ -n "$runs" ] || runs=$(sed -n 's/^stat::number_of_executed_units: *\([0-9]*\).*/\1/p' "$log" | tail -n1)
  runs=${runs:-0}
  local took=$(( $(date +%s) - start ))
  if [ $rc -ne 0 ]; then
    failed=1
    echo "fuzz: $target FOUND A CRASH (exit $rc) after $runs executions:"
    grep -E 'panicked|ERROR|SUMMARY|Test unit written|artifact' "$log" | head -n 20 || true
    echo "fuzz: full log kept in $log; see the header of .ci/fuzz.sh for how to minimise and commit it"
    summary+=("$target: CRASH after $runs executions")
  else
    total=$((total + runs))
    summary+=("$target: $runs executions in ${secs}s without a crash (corpus $(find "$corpus" -type f | wc -l) inputs; ${took}s with build)")
    rm -f "$log"
  fi
}

# The table and trace readers, seeded with the golden tables and traces.
for t in $(cd "$root/tables/fuzz" && cargo fuzz list); do
  run_target "$root/tables/fuzz" "$t" "$root/tables/golden" "$root/tables/testdata/fuzz"
done
# Each crate's targets as its Cargo.toml lists them; seeds in the directory
# named for the target.
for t in $(cd "$root/runtime/fuzz" && cargo fuzz list); do
  run_target "$root/runtime/fuzz" "$t" "$root/runtime/testdata/fuzz/$t"
done
for t in $(cd "$root/fuzz" && cargo fuzz list); do
  seeds=("$root/tests/fuzz_inputs/$t")
  case $t in
    ingest_text | ingest_csv | ingest_json) seeds+=("$root/tests/data") ;;
    ingest_nvidia_raw) seeds+=("$root/tests/data/nvidia-raw") ;;
  esac
  run_target "$root/fuzz" "$t" "${seeds[@]}"
done

echo
echo "fuzz summary ($(( $(date +%s) - t0 ))s wall, ${secs}s per target):"
printf '  %s\n' "${summary[@]}"
echo "  total: $total executions without a crash"
exit $failed
