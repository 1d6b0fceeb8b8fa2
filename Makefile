# Thin wrapper over meson: every target installs what is missing first.
#   make run    build and start Greetings on the default engine (port 8080)
#   make test   the whole suite: default build, ASan+UBSan build, each
#               single-engine build, and an out-of-tree install check
#   make bench  the engine comparison (bench/compare): tables on stdout,
#               CSV/JSON/charts in bench/results/<date-time>/; pass options
#               with BENCH_ARGS, e.g. BENCH_ARGS="--engines h2o --no-hello"
BUILD ?= build
ARGS ?=
BENCH_ARGS ?=

.PHONY: all deps build run test install bench clean

all: build

deps:
	@./scripts/install-deps.sh

build: deps
	@[ -f $(BUILD)/build.ninja ] || meson setup $(BUILD)
	ninja -C $(BUILD)

run: build
	./$(BUILD)/examples/greetings/greetings $(ARGS)

test: deps
	./scripts/test.sh

bench: build
	./bench/compare --build-dir $(BUILD) $(BENCH_ARGS)

install: build
	meson install -C $(BUILD)

clean:
	rm -rf build build-*
