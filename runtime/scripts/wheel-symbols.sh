#!/usr/bin/env bash
# Which plugin symbols each NCCL release on PyPI looks up, and which of the
# plugin's exports it would load: for each nvidia-nccl-cu12 version given
# (default: the newest of each minor release 2.21-2.32), downloads the wheel
# (`pip download --no-deps`, ~190-300 MB), reads the tuner and profiler
# symbol names out of its libnccl.so (NCCL's loaders dlsym them by literal
# name, so they are strings in the binary), deletes the wheel, and prints a
# Markdown row: the names it looks up, newest first, and the first of them
# the plugin exports (what NCCL would load). Not in CI (the wheels are large).
# Usage: runtime/scripts/wheel-symbols.sh [VERSION...]
#   PLUGIN=path/to/libdyncc_runtime.so (default target/debug/libdyncc_runtime.so)
set -euo pipefail
plugin="${PLUGIN:-target/debug/libdyncc_runtime.so}"
[ -f "$plugin" ] || { echo "wheel-symbols: $plugin does not exist (cargo build -p dyncc-runtime, or set PLUGIN=)" >&2; exit 1; }
if [ "$#" -eq 0 ]; then
  set -- 2.21.5 2.22.3 2.23.4 2.24.3 2.25.1 2.26.5 2.27.7 2.28.9 2.29.7 2.30.7 2.31.2 2.32.3
fi
exports="$(nm -D --defined-only "$plugin" | awk '{print $3}')"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# The names NCCL looks up, newest first, for one plugin kind (a prefix).
looked_up() { { grep -oE "^$1_v[0-9]+\$" "$work/strings" || true; } | sort -u -V -r | tr '\n' ' ' | sed 's/ $//'; }
# The first (newest) of those names the plugin exports, or "none".
loads() {
  for s in $1; do
    if grep -qx "$s" <<<"$exports"; then echo "$s"; return; fi
  done
  echo none
}
echo "| NCCL (nvidia-nccl-cu12) | tuner symbols looked up | loads | profiler symbols looked up | loads |"
echo "|---|---|---|---|---|"
for v in "$@"; do
  rm -rf "${work:?}"/*
  if ! pip download --quiet --no-deps -d "$work" "nvidia-nccl-cu12==$v" >"$work/pip.log" 2>&1; then
    echo "| $v | (download failed: $(tail -n 1 "$work/pip.log")) | | | |"
    continue
  fi
  whl="$(ls "$work"/*.whl)"
  member="$(unzip -Z1 "$whl" | grep -E 'lib/libnccl\.so(\.[0-9]+)*$' | head -n 1)"
  unzip -p "$whl" "$member" >"$work/libnccl.so"
  rm -f "$whl"
  # Each string on its own line; a loader's name is a whole string (the
  # symbol table's own entries for NCCL's statics are mangled, _ZL..., so
  # they do not match).
  strings -a -n 8 "$work/libnccl.so" >"$work/strings"
  rm -f "$work/libnccl.so"
  tuner="$(looked_up ncclTunerPlugin)"
  prof="$(looked_up ncclProfiler)"
  echo "| $v | ${tuner:-none} | $(loads "$tuner") | ${prof:-none} | $(loads "$prof") |"
done
