#!/usr/bin/env bash
# check-asm.sh checks that the generated assembly is current: it runs the
# generator (internal/asmgen, a module of its own that uses avo) into a
# temporary directory and compares each file with the one in the tree.
set -euo pipefail
cd "$(dirname "$0")/.."

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd internal/asmgen && go run . \
	-kernels "$tmp/kernel_amd64.s" \
	-avx512 "$tmp/kernel_avx512_amd64.s" \
	-attn "$tmp/attn_amd64.s" \
	-sample "$tmp/simd_amd64.s")

status=0
for f in engine/cpu/kernel_amd64.s engine/cpu/kernel_avx512_amd64.s engine/cpu/attn_amd64.s engine/sample/simd_amd64.s; do
	if ! cmp -s "$f" "$tmp/$(basename "$f")"; then
		echo "check-asm: $f is stale (or edited by hand): run go generate ./engine/cpu/ ./engine/sample/" >&2
		status=1
	fi
done
[ $status -eq 0 ] && echo "check-asm: ok"
exit $status
