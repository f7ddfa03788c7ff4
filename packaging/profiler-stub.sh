#!/bin/sh
# Writes DIR/libnccl-profiler-dyncc.so for a place that cannot hold a
# symlink (a wheel is a zip; maturin would store a link's target as a copy,
# and a copy is a second loaded object whose profiler never sees the tuner's
# answers). The file holds no code: its one DT_NEEDED entry names
# libnccl-tuner-dyncc.so, found through RUNPATH $ORIGIN beside it. NCCL's
# dlopen("libnccl-profiler-dyncc.so") therefore loads the tuner's file (the
# loader shares a file already loaded, by name or by inode), and NCCL's
# dlsym(handle, "ncclProfiler_v5") searches the handle's dependencies and
# finds the tuner's own static: one object, under both names.
#
# Usage: packaging/profiler-stub.sh DIR CC [CC ARGS...]
#   DIR holds libnccl-tuner-dyncc.so; CC links, e.g. `cc`, or
#   `python3 -m ziglang cc -target x86_64-linux-gnu.2.17` (the wheel's).
# Used by the pip build (packaging/dyncc_build.py) and by tests/install.rs.
set -eu
[ $# -ge 2 ] || { echo "usage: $0 DIR CC [CC ARGS...]" >&2; exit 2; }
dir="$1"
shift
[ -f "$dir/libnccl-tuner-dyncc.so" ] || { echo "profiler-stub: $dir/libnccl-tuner-dyncc.so does not exist" >&2; exit 1; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
: >"$tmp/empty.c"
# --no-as-needed before -l: a library no symbol of the stub refers to is
# still recorded as needed. -nostdlib: no libc either, so no GLIBC symbol.
# shellcheck disable=SC2016 # $ORIGIN is for the dynamic loader, not the shell
"$@" -shared -nostdlib -o "$tmp/libnccl-profiler-dyncc.so" "$tmp/empty.c" \
  -Wl,--no-as-needed -L"$dir" -lnccl-tuner-dyncc -Wl,-rpath,'$ORIGIN'
mv -f "$tmp/libnccl-profiler-dyncc.so" "$dir/libnccl-profiler-dyncc.so"
