#!/usr/bin/env bash
# The tools the tests run besides cargo, each with the Debian/Ubuntu package
# that provides it. `make test` (README's test command, which .ci/run calls)
# runs this first: as root with apt-get it installs what is missing in one
# `apt-get install`; otherwise it stops before anything is built, with one
# line naming the command that installs them. `--check` only reports.
set -euo pipefail

# tool:package, one per tool a test runs (tests/support/tools.rs names the
# same packages when a tool is missing).
tools=(
  gcc:gcc                  # the C harnesses that dlopen the plugin
  clang:clang              # their ASan/UBSan builds (Debian's clang ships the runtimes)
  valgrind:valgrind        # the plugin under memcheck
  nm:binutils              # the plugin's exported symbols
  readelf:binutils         # its dynamic section and glibc symbol versions
  ldd:libc-bin             # what it links against
  shellcheck:shellcheck    # the scripts `dyncc plan` writes
  rsvg-convert:librsvg2-bin  # `dyncc plot`'s SVG, rendered
)

if ! command -v cargo >/dev/null 2>&1; then
  echo "make test: cargo is not on PATH; install stable Rust (rustup.rs), then run \`make test\` again" >&2
  exit 1
fi

missing=()
for entry in "${tools[@]}"; do
  tool=${entry%%:*} pkg=${entry#*:}
  command -v "$tool" >/dev/null 2>&1 && continue
  case " ${missing[*]-} " in *" $pkg "*) ;; *) missing+=("$pkg") ;; esac
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "${1-}" != --check ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "make test: installing ${missing[*]} (apt-get)" >&2
  export DEBIAN_FRONTEND=noninteractive
  if apt-get update -qq && apt-get install -y -qq "${missing[@]}" >/dev/null; then
    exit 0
  fi
  echo "make test: \`apt-get install ${missing[*]}\` failed (see above); install them, then run \`make test\` again" >&2
  exit 1
fi
echo "make test: the tests need packages that are not installed; run \`sudo apt-get install -y ${missing[*]}\` (Debian/Ubuntu names), then \`make test\` again" >&2
exit 1
