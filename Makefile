# Thin wrapper over meson: every target installs what is missing first.
#   make run    build and start Greetings on the default engine (port 8080)
#   make test   the whole suite: default build, ASan+UBSan build, each
#               single-engine build, an out-of-tree install check, a fuzz
#               smoke and (on Debian 12) the suites in a Debian 13 system
#   make bench  the engine comparison (bench/compare): tables on stdout,
#               CSV/JSON/charts in bench/results/<date-time>/; pass options
#               with BENCH_ARGS, e.g. BENCH_ARGS="--engines h2o --no-hello";
#               its hello and TLS hello include the HTTP/2 rows (h2-hello,
#               h2-tls-hello: h2load -c100 -m10 beside nginx's http2
#               listener; BENCH_ARGS="--h2" runs only them, "--no-h2" none);
#               then a 1 GiB streamed download per engine and nginx
#               (bench/stream_measure.sh, STREAM_BUFFER bytes per stream);
#               then a 1 GiB streamed upload per engine
#               (bench/upload_measure.sh); then SSE_CLIENTS concurrent server-sent-event clients per
#               engine (bench/sse_measure.sh, default 10000); then
#               WebSocket per engine that has it, beside embedded Tomcat's
#               when its jars are installed (bench/ws_measure.sh): the RSS of
#               WS_IDLE idle sockets (default 10000) and the echo rate of
#               WS_CLIENTS clients (default 50), the median of 3 runs of
#               WS_SECONDS each (default 4); then static
#               files (4 KiB, 1 MiB) per engine against nginx
#               (bench/static_measure.sh, STATIC_SECONDS per wrk run);
#               then the open-file cache's bound: 10,000 distinct files
#               asked at random for STATIC_MANY_SECONDS per engine, RSS and
#               descriptors sampled (bench/static_many.sh, default 60)
#   make fuzz   build the libFuzzer targets (clang, build-fuzz) and run each
#               for FUZZ_SECONDS (default 60); see docs/RELIABILITY.md
#   make stress the attack and soak scenarios on every engine, loopback
#               only, not part of `make test`; STRESS_SOAK_SECONDS (default
#               600) per engine, STRESS_ARGS for more (see docs/RELIABILITY.md)
BUILD ?= build
ARGS ?=
BENCH_ARGS ?=
FUZZ_SECONDS ?= 60
STRESS_SOAK_SECONDS ?= 600
STRESS_ARGS ?=
STREAM_BUFFER ?= 1048576
SSE_CLIENTS ?= 10000
WS_IDLE ?= 10000
WS_SECONDS ?= 4
WS_CLIENTS ?= 50
STATIC_SECONDS ?= 4
STATIC_MANY_SECONDS ?= 60

.PHONY: all deps deps-build build run test install bench fuzz stress clean

all: build

deps:
	@./scripts/install-deps.sh

# What building and running need: not the browser test's chromium and npm.
deps-build:
	@./scripts/install-deps.sh --no-browser

build: deps-build
	@[ -f $(BUILD)/build.ninja ] || meson setup $(BUILD)
	ninja -C $(BUILD)

run: build
	./$(BUILD)/examples/greetings/greetings $(ARGS)

test: deps
	./scripts/test.sh

bench: build
	./bench/compare --build-dir $(BUILD) $(BENCH_ARGS)
	./bench/stream_measure.sh $(BUILD) 1073741824 $(STREAM_BUFFER)
	./bench/upload_measure.sh $(BUILD)
	./bench/sse_measure.sh $(BUILD) $(SSE_CLIENTS)
	./bench/ws_measure.sh $(BUILD) $(WS_IDLE) $(WS_SECONDS) $(WS_CLIENTS)
	./bench/static_measure.sh $(BUILD) $(STATIC_SECONDS)
	./bench/static_many.sh $(BUILD) $(STATIC_MANY_SECONDS)

fuzz: deps
	FUZZ_SECONDS=$(FUZZ_SECONDS) ./scripts/fuzz.sh

stress: build
	./$(BUILD)/tests/stress/srv-stress --build-dir $(BUILD) --soak-seconds $(STRESS_SOAK_SECONDS) $(STRESS_ARGS)

install: build
	meson install -C $(BUILD)

clean:
	rm -rf build build-*
