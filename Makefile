# llmd: `make run` starts the daemon on its embedded default (a simulated
# H100); `make test` runs every test. Both check what they need first:
# make run only Go and a C compiler (no root, no Redis), make test also
# redis-server, tmux and curl (installed with apt-get where it can).

SHELL   := /bin/bash
GO      ?= go
BIN     := bin
LISTEN  ?= 127.0.0.1:8700
# -p 1: one package's tests at a time. cmd/llmd and cluster start many llmd
# processes and gossip nodes; run beside daemon's latency checks on 2 cores
# they starved them for seconds.
GOTEST_FLAGS ?= -race -p 1 -timeout 15m
# go-nvml's header marks some NVML calls deprecated; gcc would warn on every
# build of its cgo package.
export CGO_CFLAGS ?= -O2 -g -Wno-deprecated-declarations

.PHONY: all deps deps-test build run test bench bench-peer bench-spec bench-cluster bench-grammar bench-shadow bench-upstream check-llamacpp-grammars soak lint fmt clean

all: build

deps:
	@scripts/deps.sh build

deps-test:
	@scripts/deps.sh test

# progress turns go build -v's package lines into one line that rewrites
# itself; any other line (a compile error) is printed as is.
progress = awk -v what=$(1) '/^[^ :\#]+$$/ { n++; printf "\r\033[K  %s: compiling (%d) %s", what, n, $$0; fflush(); next } \
	{ bad = 1; printf "\r\033[K%s\n", $$0; fflush() } \
	END { printf "\r\033[K  %s: %s\n", what, (bad ? "not built" : n ? "built, " n " packages compiled" : "up to date") }'

build: deps
	@echo "building $(BIN)/llmd and $(BIN)/llmctl (the first build compiles a few hundred packages and takes minutes; later ones seconds)"
	@set -o pipefail; $(GO) build -v -o $(BIN)/llmd ./cmd/llmd 2>&1 | $(call progress,llmd)
	@set -o pipefail; $(GO) build -v -o $(BIN)/llmctl ./cmd/llmctl 2>&1 | $(call progress,llmctl)

run: build
	$(BIN)/llmd --listen $(LISTEN)

# LLMD_REQUIRE_REDIS turns the Redis tests' skip (no redis-server) into a
# failure: make test installs redis-server, so a skip would hide a problem.
test: deps-test lint
	LLMD_REQUIRE_REDIS=1 $(GO) test $(GOTEST_FLAGS) ./...
	@scripts/tui-smoke.sh

# make soak runs the soak test (EN-11) for SOAK (default 5m) without the race
# detector: the sim server at 80% of its measured capacity, 10% of requests
# cancelled; it prints RSS and goroutine figures and fails if either grows.
SOAK ?= 5m
soak: deps
	LLMD_SOAK=$(SOAK) $(GO) test -run '^TestSoak$$' -count=1 -v -timeout 3h ./daemon/

# make bench runs the benchmark suite (scripts/benchreport) and rewrites the
# generated sections of BENCHMARKS.md: engine micro-benchmarks, CPU executor
# tokens/s, quota decisions, the usage writer, the concurrent SSE streams one
# llmd holds (levels up to STREAMS; 0 skips them) and the cluster routing
# comparison; cpu-serving measures the CPU executor through llmd's HTTP API
# at 1, 8 and 32 streams (about 40 minutes; LLMD_CPU_SERVE_SHAPES, e.g.
# 'tiny/Q8_0', picks the models). Each benchmark runs BENCH_COUNT times (the
# tables show the median); BENCH_SKIP names sections to leave as they are
# (e.g. cluster,cpu), BENCH_ONLY the only ones to run. A failure leaves
# BENCHMARKS.md untouched. It then runs make bench-spec, and with
# LLAMA_CPP_BIN or LLAMA_CPP_SRC set make bench-peer too.
BENCH_COUNT ?= 3
STREAMS ?= 10000
BENCH_SKIP ?=
BENCH_ONLY ?=
bench: deps
	GO=$(GO) $(GO) run ./scripts/benchreport -count $(BENCH_COUNT) -streams $(STREAMS) \
		-skip '$(BENCH_SKIP)' -only '$(BENCH_ONLY)' -file BENCHMARKS.md
	$(MAKE) --no-print-directory bench-spec
	@if [ -n "$(LLAMA_CPP_BIN)$(LLAMA_CPP_SRC)" ]; then $(MAKE) --no-print-directory bench-peer; \
		else echo "make bench: no llama.cpp build given (LLAMA_CPP_BIN or LLAMA_CPP_SRC): the same-run comparison with it (make bench-peer) is skipped"; fi

# make bench-cluster measures the routing policies on three llmd processes
# (about 6 minutes) and prints the tables of BENCHMARKS.md's cluster section:
# conversations entering at random nodes, then round robin, prefix and cost
# routing with every request entering one node.
bench-cluster: deps
	LLMD_CLUSTER_BENCH=1 $(GO) test -run '^TestCluster(Cost)?RoutingFigures$$' -count=1 -v -timeout 40m ./cmd/llmd/

# The measurement harnesses below print the figures of their BENCHMARKS.md
# sections; they assert nothing about speed, so make test skips them.
# bench-grammar: decode with a JSON schema against plain decode (~10 min).
bench-grammar: deps
	LLMD_GRAMMAR_BENCH=1 $(GO) test -run '^TestGrammarDecodeFigures$$' -count=1 -v -timeout 50m ./cmd/llmd/
# bench-spec: speculative decoding against plain decoding on the CPU executor,
# the 0.5B F16 target at 1 and 8 streams, 128 output tokens, 3 rounds with the
# modes interleaved (~15 min; BenchmarkSpeculative in engine/cpu).
bench-spec: deps
	LLMD_SPEC_TOKENS=128 $(GO) test -run '^$$' -bench 'Speculative/shape=0.5B' -benchtime 3x -timeout 60m ./engine/cpu/
# bench-shadow: the primary's TTFT with shadow traffic on and off (~3 min).
bench-shadow: deps
	LLMD_SHADOW_BENCH=1 $(GO) test -run '^TestShadowTTFTFigures$$' -count=1 -v -timeout 20m ./daemon/
# bench-upstream: the TTFT and ITL the upstream relay adds (~4 min).
bench-upstream: deps
	LLMD_UPSTREAM_BENCH=1 $(GO) test -run '^TestUpstreamRelayFigures$$' -count=1 -v -timeout 20m ./daemon/

# bench-peer measures llmd beside llama.cpp in the same run, on the same
# files (scripts/benchpeer; about 10 minutes per shape and round on 2
# cores): LLAMA_CPP_BIN is a llama.cpp build's bin directory, or
# LLAMA_CPP_SRC its source, built once with cmake under ~/.cache/llmd.
# PEER_SHAPES picks shapes (e.g. 0.5B/Q4_0,1.5B/Q8_0), PEER_ROUNDS the
# rounds; the table goes to stdout and to bench-peer.md.
PEER_SHAPES ?=
PEER_ROUNDS ?= 2
bench-peer: deps
	@test -n "$(LLAMA_CPP_BIN)$(LLAMA_CPP_SRC)" || { echo "set LLAMA_CPP_BIN=dir (llama-bench, llama-batched-bench, llama-server) or LLAMA_CPP_SRC=dir" >&2; exit 2; }
	GO=$(GO) $(GO) run ./scripts/benchpeer -llama-bin '$(LLAMA_CPP_BIN)' -llama-src '$(LLAMA_CPP_SRC)' \
		-shapes '$(PEER_SHAPES)' -rounds $(PEER_ROUNDS) -o bench-peer.md

# check-llamacpp-grammars compiles every grammar llama.cpp ships, from a
# checkout: make check-llamacpp-grammars LLAMA_CPP=$$HOME/src/llama.cpp
check-llamacpp-grammars:
	@test -n "$(LLAMA_CPP)" || { echo "set LLAMA_CPP to a llama.cpp checkout" >&2; exit 2; }
	LLMD_LLAMA_CPP=$(LLAMA_CPP) $(GO) test -run '^TestLlamaCppGrammars$$' -count=1 -v ./engine/grammar/

lint:
	$(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
		if [ -n "$$out" ]; then echo "gofmt needed:" $$out >&2; exit 1; fi
	@scripts/check-imports.sh
	@scripts/check-asm.sh

fmt:
	gofmt -w $$(git ls-files '*.go')

clean:
	rm -rf $(BIN)
