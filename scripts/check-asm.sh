#!/usr/bin/env bash
# check-asm.sh checks the generated assembly:
#  - that it is current: it runs the generator (internal/asmgen, a module of
#    its own that uses avo) into a temporary directory and compares each file
#    with the one in the tree;
#  - that no function below the AVX-512 level (one whose name lacks AVX512:
#    the AVX2 kernels, selected on CPUs without AVX-512) uses an EVEX-encoded
#    (AVX-512) instruction, which would fault there. It assembles each file
#    with go tool asm -S and reads the machine code: in 64-bit mode an
#    instruction whose first byte is 0x62 is EVEX. (avo's "// Requires:"
#    comments are not enough: avo does not see that registers X16-X31 or
#    Y16-Y31 force the EVEX form of a VEX instruction.)
set -euo pipefail
cd "$(dirname "$0")/.."

files="engine/cpu/kernel_amd64.s engine/cpu/kernel_avx512_amd64.s engine/cpu/attn_amd64.s engine/sample/simd_amd64.s"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd internal/asmgen && go run . \
	-kernels "$tmp/kernel_amd64.s" \
	-avx512 "$tmp/kernel_avx512_amd64.s" \
	-attn "$tmp/attn_amd64.s" \
	-sample "$tmp/simd_amd64.s")

status=0
for f in $files; do
	if ! cmp -s "$f" "$tmp/$(basename "$f")"; then
		echo "check-asm: $f is stale (or edited by hand): run go generate ./engine/cpu/ ./engine/sample/" >&2
		status=1
	fi
done

# evex reads a go tool asm -S listing and prints "function<TAB>instruction"
# for each EVEX-encoded instruction of a function whose name lacks AVX512.
evex='
function flush(   o) {
	for (o in ins) if (byte[o] == "62") print fn "\t" ins[o]
	split("", ins); split("", byte); fn = ""
}
/^[^\t]/ {
	flush()
	if ($2 == "STEXT" && $1 !~ /AVX512/) { fn = $1; sub(/.*\./, "", fn); n = 0 }
	next
}
fn == "" { next }
$3 ~ /^\(/ { # 0x0000 00000 (file:line)	OP	operands
	s = $0; sub(/^[^)]*\)\t/, "", s)
	op = s; sub(/\t.*/, "", op)
	if (op != "TEXT" && op != "FUNCDATA" && op != "PCDATA") { gsub(/\t/, " ", s); ins[$2 + 0] = s }
	next
}
/^\t0x[0-9a-f]+ [0-9a-f][0-9a-f]/ { # 0x0000 8b 44 ... (16 bytes, then text)
	m = split(substr($0, index($0, " ") + 1, 48), b, " ")
	for (i = 1; i <= m; i++) byte[n++] = b[i]
}
END { flush() }'
inc="$(go env GOROOT)/pkg/include"
for f in $files; do
	GOOS=linux GOARCH=amd64 go tool asm -S -p check -I "$inc" -o "$tmp/check.o" "$f" >"$tmp/listing"
	awk "$evex" "$tmp/listing" | sort >>"$tmp/evex"
done
if [ -s "$tmp/evex" ]; then
	echo "check-asm: EVEX (AVX-512) instructions in AVX2-level functions: $(awk -F'\t' '{n[$1]++; if (!($1 in e)) e[$1] = $2} END {for (f in n) {printf "%s%s (%d, e.g. %s)", s, f, n[f], e[f]; s = "; "}}' "$tmp/evex")" >&2
	status=1
fi
[ $status -eq 0 ] && echo "check-asm: ok"
exit $status
