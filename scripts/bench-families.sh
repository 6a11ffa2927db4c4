#!/usr/bin/env bash
# bench-families.sh: the CPU executor beside llama.cpp on the same files, in
# the same minutes (BENCHMARKS.md, "Model families and K-quants beside
# llama.cpp"). It writes the 0.5B shape as Q4_0 and Q4_K_M and a small
# mixture of experts as Q4_K_M with `llmctl model init`, then for each file,
# for ROUNDS rounds, runs llama-bench (prompt 512, generation 128) and
# llama-batched-bench (8 sequences), then llmd's executor benchmark on it.
#
#   LLAMA_CPP_BIN=$HOME/.cache/llama.cpp/build/bin scripts/bench-families.sh
set -euo pipefail
bin=${LLAMA_CPP_BIN:?set LLAMA_CPP_BIN to the bin directory of a llama.cpp build (llama-bench, llama-batched-bench)}
rounds=${ROUNDS:-2}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cd "$(dirname "$0")/.."
go build -o "$dir/llmctl" ./cmd/llmctl
go test -c -o "$dir/cpu.test" ./engine/cpu/
half=(--arch qwen2 --dim 896 --layers 24 --heads 14 --kv-heads 2 --ffn 4864 --vocab 151936 --tied)
"$dir/llmctl" model init half-q40 "${half[@]}" --type q4_0 -o "$dir/half-q40.gguf" >/dev/null
"$dir/llmctl" model init half-q4km "${half[@]}" --type q4_k_m -o "$dir/half-q4km.gguf" >/dev/null
"$dir/llmctl" model init moe-q4km --arch qwen3moe --dim 1024 --layers 16 --heads 16 --kv-heads 4 --head-dim 64 \
	--ffn 2816 --experts 8 --experts-used 2 --expert-ffn 1408 --vocab 151936 --type q4_k_m -o "$dir/moe-q4km.gguf" >/dev/null
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), $(nproc) CPUs; load: $(cut -d' ' -f1-3 /proc/loadavg)"
for round in $(seq 1 "$rounds"); do
	for f in half-q40 half-q4km moe-q4km; do
		file=$dir/$f.gguf
		echo "=== round $round $f llama.cpp $(date +%T)"
		"$bin/llama-bench" -m "$file" -p 512 -n 128 -t 2 -r 2 2>/dev/null | grep -E 'pp512|tg128'
		"$bin/llama-batched-bench" -m "$file" -c 4096 -b 2048 -ub 512 -npp 64 -ntg 64 -npl 8 -t 2 2>/dev/null |
			grep -E '^\|\s+64'
		echo "=== round $round $f llmd $(date +%T)"
		LLMD_BENCH_GGUF=$file "$dir/cpu.test" -test.run '^$' -test.bench BenchmarkFile -test.benchtime 2s |
			grep -E 'prompt=512|seqs=(1|8)-'
	done
done
