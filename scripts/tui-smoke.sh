#!/usr/bin/env bash
# tui-smoke.sh checks "llmctl top" on a real terminal: it builds bin/llmd and
# bin/llmctl, starts llmd on a free loopback port with a temporary data
# directory, keeps a few long streaming requests running, opens llmctl top
# in a detached tmux session at 80x24, and checks the screen for key
# strings (the KV gauge, the tier names, a request id). It then cancels the
# selected request with K and y and checks that llmd says so. It cleans up
# after itself and exits 0 with a message when tmux is missing.
set -euo pipefail

if ! command -v tmux >/dev/null 2>&1; then
	echo "tui-smoke: tmux is not installed; skipped (apt-get install tmux to run it)"
	exit 0
fi
for tool in curl go; do
	command -v "$tool" >/dev/null 2>&1 || { echo "tui-smoke: $tool is needed" >&2; exit 1; }
done

cd "$(dirname "$0")/.."
go build -o bin/llmd ./cmd/llmd
go build -o bin/llmctl ./cmd/llmctl

tmp=$(mktemp -d)
session="llmd-tui-smoke-$$"
llmd_pid=""
load_pids=()
cleanup() {
	tmux kill-session -t "$session" 2>/dev/null || true
	for p in "${load_pids[@]}"; do kill "$p" 2>/dev/null || true; done
	if [ -n "$llmd_pid" ]; then
		kill "$llmd_pid" 2>/dev/null || true
		wait "$llmd_pid" 2>/dev/null || true
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT

fail() {
	echo "tui-smoke: $*" >&2
	if [ -f "$tmp/screen" ]; then
		echo "--- screen:" >&2
		cat "$tmp/screen" >&2
	fi
	echo "--- llmd log (last lines):" >&2
	tail -n 20 "$tmp/llmd.log" >&2 || true
	exit 1
}

# A free loopback port: one nothing answers on.
port=""
for _ in $(seq 1 50); do
	p=$((20000 + RANDOM % 40000))
	if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
		port=$p
		break
	fi
done
[ -n "$port" ] || fail "found no free port"
addr="127.0.0.1:$port"

bin/llmd --listen "$addr" --data-dir "$tmp/data" --models small,mid --drain-timeout 1s >"$tmp/llmd.log" 2>&1 &
llmd_pid=$!
for _ in $(seq 1 100); do
	curl -sf "http://$addr/readyz" >/dev/null 2>&1 && break
	kill -0 "$llmd_pid" 2>/dev/null || fail "llmd exited"
	sleep 0.1
done
curl -sf "http://$addr/readyz" >/dev/null || fail "llmd is not ready at $addr"

# Load: a few loops of long native streams (resumable, so top can follow
# them), bounded in count and time. No key exists, so loopback requests are
# served as the local tenant, which may administer.
load() {
	local model=$1 n=$2
	for i in $(seq 1 "$n"); do
		curl -sN --max-time 60 "http://$addr/v1/chat" -H 'Content-Type: application/json' \
			-d "{\"model\":\"$model\",\"messages\":[{\"role\":\"user\",\"content\":\"tell me a long story, part $i\"}],\"max_tokens\":30000}" \
			>/dev/null 2>&1 || true
	done
}
for model in sim/mid sim/mid sim/mid sim/small; do
	load "$model" 10 &
	load_pids+=($!)
done

# --once first: plain text, the same data.
once=$(bin/llmctl --addr "$addr" top --once) || fail "llmctl top --once failed"
case "$once" in *$'\e'*) fail "top --once wrote escape sequences" ;; esac
grep -q "^MODELS" <<<"$once" || fail "top --once has no MODELS table"

tmux new-session -d -s "$session" -x 80 -y 24 "bin/llmctl --addr $addr top --interval 500ms"
screen() { tmux capture-pane -p -t "$session" >"$tmp/screen"; }

# Wait for the first screen with a live request on it.
for _ in $(seq 1 40); do
	sleep 0.25
	screen
	grep -q "req_" "$tmp/screen" && break
done
for want in "llmctl top" "KV" "batch" "free" "paid" "enterprise" "sim/mid" "req_" "tok/s" "TTFT" "GPU (simulated)" "1 requests"; do
	grep -qF -- "$want" "$tmp/screen" || fail "the screen lacks \"$want\""
done
# The title is on the first line: nothing wrapped or scrolled the screen.
head -n 1 "$tmp/screen" | grep -q "^llmctl top" || fail "the title is not on the first line"

# Cancel the selected request: K asks, y confirms, llmd logs it.
tmux send-keys -t "$session" K
sleep 0.3
screen
grep -q "? \[y/n\]" "$tmp/screen" || fail "K did not ask to confirm"
tmux send-keys -t "$session" y
for _ in $(seq 1 20); do
	sleep 0.25
	grep -q "request cancelled by the client" "$tmp/llmd.log" && break
done
grep -q "request cancelled by the client" "$tmp/llmd.log" || fail "llmd saw no cancel"
screen
grep -q "cancelled req_" "$tmp/screen" || fail "top did not report the cancel"

# Views 2-4 draw.
for v in 2:TENANT 3:PREEMPT 4:"not clustered"; do
	tmux send-keys -t "$session" "${v%%:*}"
	sleep 0.3
	screen
	grep -qF -- "${v#*:}" "$tmp/screen" || fail "view ${v%%:*} lacks \"${v#*:}\""
done

tmux send-keys -t "$session" q
sleep 0.5
if tmux has-session -t "$session" 2>/dev/null; then
	fail "q did not quit"
fi
echo "tui-smoke: ok (llmctl top at 80x24 against llmd on $addr)"
