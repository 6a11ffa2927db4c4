#!/usr/bin/env bash
# ab-bench.sh compares a base revision (A) with the working tree (B) in one
# interleaved run (A B A B ...), so that the machine's drift falls on both:
#
#   scripts/ab-bench.sh BASE [ROUNDS]     (default 3 rounds)
#
# It measures what a change to the request path can slow down:
#   sched    engine: one scheduler step with 256 running and 10,000 waiting
#            (BenchmarkSchedulerStep), ns per step;
#   streams  the daemon holding 1,000 and 5,000 SSE streams of sim/small
#            (TestStreamsHeld, 1 s steps): inter-token p99 and server CPU;
#   serving  the CPU executor through HTTP: llmd serving a model written by
#            `llmctl model init` (tiny Q8_0, small Q4_0), driven by one
#            llmctl (B's) at 1 and 8 streams, 128 output tokens; tok/s.
# Each figure is printed per round for A and B, then the median B/A ratio and
# its range over the rounds. WHAT=sched,streams,serving picks the parts.
# It builds BASE in a temporary git worktree and removes it at the end.
set -euo pipefail
base=${1:?usage: scripts/ab-bench.sh BASE [ROUNDS]}
rounds=${2:-3}
what=${WHAT:-sched,streams,serving}
top=$(git rev-parse --show-toplevel)
work=$(mktemp -d)
trap 'git -C "$top" worktree remove --force "$work/a" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
export CGO_CFLAGS="${CGO_CFLAGS:--O2 -g -Wno-deprecated-declarations}"

git -C "$top" worktree add --detach "$work/a" "$base" >/dev/null
build() { # build DIR OUT: binaries of the tree at DIR into OUT
	mkdir -p "$2"
	(cd "$1" && go build -o "$2/llmd" ./cmd/llmd && go build -o "$2/llmctl" ./cmd/llmctl &&
		go test -c -o "$2/engine.test" ./engine/ && go test -c -o "$2/daemon.test" ./daemon/) 2>&1 |
		grep -vE 'deprecated|cgo-gcc|nvml|^ *\||^[0-9]+ \||declared here|^#' || true
}
echo "building A ($base) and B (working tree)..." >&2
build "$work/a" "$work/A"
build "$top" "$work/B"

results="$work/results.txt" # lines: part figure side round value
: >"$results"
record() { echo "$1 $2 $3 $4 $5" >>"$results"; }

sched() { # sched SIDE ROUND
	local ns
	ns=$(cd "$top/engine" && "$work/$1/engine.test" -test.run '^$' -test.bench '^BenchmarkSchedulerStep$' \
		-test.benchtime 2s | awk '/^BenchmarkSchedulerStep/ {print $3; exit}')
	record sched "step_ns" "$1" "$2" "$ns"
}

streams() { # streams SIDE ROUND
	local out="$work/streams-$1-$2.md"
	(cd "$top/daemon" && LLMD_STREAMS=1000,5000 LLMD_STREAMS_OUT="$out" "$work/$1/daemon.test" \
		-test.run '^TestStreamsHeld$' -test.count 1 -test.timeout 20m >/dev/null 2>&1)
	# | streams | open | failed | ITL p50 | ITL p99 | ... | server CPU | ...
	awk -F'|' -v side="$1" -v round="$2" '$2 ~ /^ *[0-9,]+ *$/ {
		n=$2; gsub(/[ ,]/, "", n); if (n < 1000) next
		p99=$6; gsub(/[ a-z]/, "", p99); cpu=$13; gsub(/[ %]/, "", cpu)
		print "streams itl_p99_ms@" n, side, round, p99
		print "streams server_cpu_pct@" n, side, round, cpu
	}' "$out" >>"$results"
}

serving() { # serving SIDE ROUND
	local port=$((18000 + RANDOM % 2000))
	for m in tiny-q8_0 small-q4_0; do
		"$work/$1/llmd" --listen "127.0.0.1:$port" --data-dir "$work/data-$1" --model "$work/$m.gguf" \
			--cpu-threads 2 >"$work/llmd-$1.log" 2>&1 &
		local pid=$!
		for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/readyz" >/dev/null && break; sleep 0.2; done
		for c in 1 8; do
			local tps
			tps=$("$work/B/llmctl" --addr "127.0.0.1:$port" bench --model "$m" --concurrency "$c" \
				--requests $((c * 4)) --input 128 --output 128 --json 2>/dev/null |
				python3 -c 'import json,sys; print(json.load(sys.stdin)["output_throughput"])')
			record serving "${m}_tok_s@$c" "$1" "$2" "$tps"
		done
		kill "$pid"
		wait "$pid" || true
	done
}

if [[ $what == *serving* ]]; then
	"$work/B/llmctl" model init tiny-q8_0 --out "$work/tiny-q8_0.gguf" --dim 288 --layers 6 --heads 6 --ffn 768 \
		--vocab 32000 --type q8_0 >/dev/null
	"$work/B/llmctl" model init small-q4_0 --out "$work/small-q4_0.gguf" --dim 768 --layers 12 --heads 12 \
		--kv-heads 4 --ffn 2048 --vocab 128256 --type q4_0 >/dev/null
fi
for r in $(seq "$rounds"); do
	for side in A B; do
		[[ $what == *sched* ]] && sched "$side" "$r"
		[[ $what == *streams* ]] && streams "$side" "$r"
		[[ $what == *serving* ]] && serving "$side" "$r"
		echo "round $r $side done" >&2
	done
done

python3 - "$results" <<'PY'
import sys, statistics
rows = {}
for line in open(sys.argv[1]):
    part, fig, side, rnd, val = line.split()
    rows.setdefault((part, fig), {}).setdefault(int(rnd), {})[side] = float(val)
print("| part | figure | A (per round) | B (per round) | B/A median (range) |")
print("|---|---|---|---|---|")
for (part, fig), by in rows.items():
    a = [by[r]["A"] for r in sorted(by) if "A" in by[r] and "B" in by[r]]
    b = [by[r]["B"] for r in sorted(by) if "A" in by[r] and "B" in by[r]]
    ratios = [y / x for x, y in zip(a, b) if x]
    fmt = lambda v: " ".join(f"{x:.4g}" for x in v)
    rr = f"{statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f})" if ratios else "-"
    print(f"| {part} | {fig} | {fmt(a)} | {fmt(b)} | {rr} |")
PY
