# Convenience targets. `make test` is the project's test command (README, .ci/run).
CARGO ?= cargo
PREFIX ?= /usr/local
LIBDIR ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
TARGET_DIR ?= $(or $(CARGO_TARGET_DIR),target)

.PHONY: all build test plugin install header bench instructions

all: build

build:
	$(CARGO) build --release --workspace

# The plugin, under the name NCCL looks for with NCCL_TUNER_PLUGIN=dyncc
# (Cargo cannot name a library libnccl-tuner-dyncc.so itself).
plugin:
	$(CARGO) build --release -p dyncc-runtime
	cp -f $(TARGET_DIR)/release/libdyncc_runtime.so $(TARGET_DIR)/release/libnccl-tuner-dyncc.so

# make install PREFIX=/opt/dyncc  ->  /opt/dyncc/lib/libnccl-tuner-dyncc.so
#                                     /opt/dyncc/include/dyncc.h
install: plugin
	install -D -m 0755 $(TARGET_DIR)/release/libnccl-tuner-dyncc.so $(DESTDIR)$(LIBDIR)/libnccl-tuner-dyncc.so
	install -D -m 0644 include/dyncc.h $(DESTDIR)$(INCLUDEDIR)/dyncc.h

# Regenerate the committed include/dyncc.h after changing runtime/src/capi.rs.
header:
	DYNCC_BLESS=1 $(CARGO) test -p dyncc-runtime --lib header_is_current

# The workspace build comes first: the integration tests dlopen the debug
# plugin (target/debug/libdyncc_runtime.so).
test:
	$(CARGO) build --workspace
	$(CARGO) test --workspace

bench:
	$(CARGO) bench --workspace

# Instructions per getCollInfo call (callgrind; deterministic).
instructions:
	runtime/benches/instructions.sh
