# Convenience targets. `make test` is the project's test command (README, .ci/run).
CARGO ?= cargo
PREFIX ?= /usr/local/lib

.PHONY: all build test plugin install bench

all: build

build:
	$(CARGO) build --release --workspace

# The plugin, under the name NCCL looks for with NCCL_TUNER_PLUGIN=dyncc.
plugin:
	$(CARGO) build --release -p dyncc-runtime
	cp target/release/libdyncc_runtime.so target/release/libnccl-tuner-dyncc.so

install: plugin
	install -D -m 0755 target/release/libnccl-tuner-dyncc.so $(PREFIX)/libnccl-tuner-dyncc.so

test:
	$(CARGO) build --workspace
	$(CARGO) test --workspace

bench:
	$(CARGO) bench --workspace
