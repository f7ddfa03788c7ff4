# Convenience targets. `make test` is the project's test command (README, .ci/run).
CARGO ?= cargo
PREFIX ?= /usr/local
LIBDIR ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
TARGET_DIR ?= $(or $(CARGO_TARGET_DIR),target)

.PHONY: all build test test-deps plugin plugin-portable install bless bench instructions loop-draws gpu-bundle book
STRIP ?= strip
# The library `make install` copies (override with the portable build's).
PLUGIN_SO ?= $(TARGET_DIR)/release/libnccl-tuner-dyncc.so
# The oldest glibc `make plugin-portable` targets (manylinux2014).
PORTABLE_GLIBC ?= 2.17
PORTABLE_TRIPLE ?= x86_64-unknown-linux-gnu
PORTABLE_SO := $(TARGET_DIR)/portable/libnccl-tuner-dyncc.so

all: build

build:
	$(CARGO) build --release --workspace

# The plugin, under the names NCCL looks for with NCCL_TUNER_PLUGIN=dyncc
# and NCCL_PROFILER_PLUGIN=dyncc (Cargo cannot name a library
# libnccl-tuner-dyncc.so itself), stripped: the release profile keeps line
# tables (debug = 1) for benchmarks and profiling, ~4.8 MB the shipped
# library does not need. The profiler's name is a link to the tuner's file,
# as `make install` makes it: one file, one loaded object, so the profiler
# sees the tuner's answers. `dyncc plugin-path` of target/release/dyncc
# (`cargo build --release`) prints this directory.
plugin:
	$(CARGO) build --release -p dyncc-runtime
	$(STRIP) --strip-all -o $(TARGET_DIR)/release/libnccl-tuner-dyncc.so $(TARGET_DIR)/release/libdyncc_runtime.so
	ln -sf libnccl-tuner-dyncc.so $(TARGET_DIR)/release/libnccl-profiler-dyncc.so

# The plugin for clusters with an old glibc: linked by zig against glibc
# $(PORTABLE_GLIBC) symbols (cargo-zigbuild), stripped, then checked.
# Needs `pip install cargo-zigbuild ziglang` (both on PyPI, no root).
plugin-portable:
	@command -v cargo-zigbuild >/dev/null || { echo "make plugin-portable: cargo-zigbuild is not on PATH; install it and zig with: python3 -m pip install cargo-zigbuild ziglang" >&2; exit 1; }
	$(CARGO) zigbuild --release -p dyncc-runtime --target $(PORTABLE_TRIPLE).$(PORTABLE_GLIBC)
	mkdir -p $(dir $(PORTABLE_SO))
	$(STRIP) --strip-all -o $(PORTABLE_SO) $(TARGET_DIR)/$(PORTABLE_TRIPLE)/release/libdyncc_runtime.so
	ln -sf libnccl-tuner-dyncc.so $(dir $(PORTABLE_SO))libnccl-profiler-dyncc.so
	.ci/check-plugin-so.sh $(PORTABLE_SO) $(PORTABLE_GLIBC)

# make install PREFIX=/opt/dyncc  ->  /opt/dyncc/lib/libnccl-tuner-dyncc.so
#                                     /opt/dyncc/lib/libnccl-profiler-dyncc.so
#                                       (a link to the tuner's file: NCCL's
#                                       profiler loader looks for that name,
#                                       and one file means one loaded object,
#                                       so the profiler sees the tuner's answers)
#                                     /opt/dyncc/include/dyncc.h
#                                     /opt/dyncc/bin/dyncc, when built
#                                       (`cargo build --release`); its
#                                       `dyncc plugin-path` finds ../lib
# Only copies: build first as yourself (`make plugin` or `make
# plugin-portable`), then install (as root if PREFIX needs it), so root
# never runs cargo in your tree. PLUGIN_SO=... installs another build,
# DYNCC_BIN=... another command.
DYNCC_BIN ?= $(TARGET_DIR)/release/dyncc
BINDIR ?= $(PREFIX)/bin
install:
	@test -f $(PLUGIN_SO) || { echo "make install: $(PLUGIN_SO) is not built. Run \`make plugin\` first, as your own user, then \`make install\` again (for the glibc 2.17 build: \`make plugin-portable\`, then \`make install PLUGIN_SO=$(PORTABLE_SO)\`); install only copies files." >&2; exit 1; }
	install -D -m 0755 $(PLUGIN_SO) $(DESTDIR)$(LIBDIR)/libnccl-tuner-dyncc.so
	ln -sf libnccl-tuner-dyncc.so $(DESTDIR)$(LIBDIR)/libnccl-profiler-dyncc.so
	install -D -m 0644 include/dyncc.h $(DESTDIR)$(INCLUDEDIR)/dyncc.h
	@if [ -f $(DYNCC_BIN) ]; then \
	  echo "install -D -m 0755 $(DYNCC_BIN) $(DESTDIR)$(BINDIR)/dyncc"; \
	  install -D -m 0755 $(DYNCC_BIN) $(DESTDIR)$(BINDIR)/dyncc; \
	else \
	  echo "make install: $(DYNCC_BIN) is not built, so the dyncc command is not installed (\`cargo build --release\`, then \`make install\` again)"; \
	fi

# Rewrite every committed file a test compares output against, after an
# intentional change: include/dyncc.h (runtime/src/capi.rs changed), the
# current format version's golden tables (tables/golden/) and the book's
# command reference (docs/src/reference/cli.md, from the clap definition). Each such test
# writes its file instead of comparing when DYNCC_BLESS=1, the one switch for
# all of them; review the diff before committing.
bless:
	DYNCC_BLESS=1 $(CARGO) test -p dyncc-runtime --lib header_is_current
	DYNCC_BLESS=1 $(CARGO) test -p dyncc --lib cli::tests::reference_is_current
	DYNCC_BLESS=1 $(CARGO) test -p dyncc-tables --features build --test golden golden_tables_match_the_generator
	DYNCC_BLESS=1 $(CARGO) test -p dyncc-tables --features alloc --test golden_trace the_current_trace_format

# The tools the tests run (clang, valgrind, shellcheck, ...): installed with
# apt-get when root, else one line naming the command, before any build.
test-deps:
	@.ci/test-deps.sh

# The workspace build comes first: the integration tests dlopen the debug
# plugin (target/debug/libdyncc_runtime.so).
test: test-deps
	$(CARGO) build --workspace
	$(CARGO) test --workspace

bench:
	$(CARGO) bench --workspace

# Instructions per getCollInfo call (callgrind; deterministic).
instructions:
	runtime/benches/instructions.sh

# The wheel a user's `pip install .` builds, into .gpu/, for the check on a
# real GPU and NCCL: tests/gpu/check.sh .gpu OUT, run where PyTorch and a GPU
# are (README "On a GPU").
gpu-bundle:
	rm -rf .gpu
	python3 -m pip wheel -q --no-deps -w .gpu .

# The learning loop averaged over draws (README's loop table; minutes).
# DYNCC_LOOP_DRAWS=N sets the draws per split (default 10).
loop-draws: test-deps
	$(CARGO) test --release --test integration -- --ignored the_loop_over_draws --nocapture

# The book (docs/, mdBook) into docs/book/, its links checked; installs
# mdbook with cargo when it is missing (a few minutes, once).
book:
	.ci/book.sh
