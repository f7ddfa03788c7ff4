#!/usr/bin/env bash
# Checks a built plugin library: no debug sections (it is the stripped,
# shipped file) and, given MAX_GLIBC, no GLIBC_x.y symbol version newer than
# that (what decides whether it loads on an older cluster).
# Usage: .ci/check-plugin-so.sh LIB.so [MAX_GLIBC]     e.g. ... 2.17
set -euo pipefail
lib="$1"
max="${2:-}"
[ -f "$lib" ] || { echo "check-plugin-so: $lib does not exist" >&2; exit 1; }
if readelf -S -W "$lib" | grep -q '\.debug_'; then
  echo "check-plugin-so: $lib still has debug sections (not stripped):" >&2
  readelf -S -W "$lib" | grep '\.debug_' >&2
  exit 1
fi
# `|| true`: a library that refers to no GLIBC symbol at all (pip's
# profiler-name stub, packaging/profiler-stub.sh) passes, rather than
# ending the script silently under pipefail.
highest="$(objdump -T "$lib" | { grep -o 'GLIBC_[0-9][0-9.]*' || true; } | sed 's/^GLIBC_//' | sort -u -V | tail -n 1)"
echo "check-plugin-so: $lib: $(stat -c %s "$lib") bytes, no debug sections, highest glibc symbol version GLIBC_${highest:-none}"
if [ -n "$max" ] && [ -n "$highest" ]; then
  newest="$(printf '%s\n%s\n' "$highest" "$max" | sort -V | tail -n 1)"
  if [ "$newest" != "$max" ]; then
    echo "check-plugin-so: $lib needs GLIBC_$highest, newer than the $max it must load on; symbols:" >&2
    objdump -T "$lib" | grep -E "GLIBC_$highest([^0-9.]|\$)" >&2 || true
    exit 1
  fi
fi
