#!/usr/bin/env bash
# deps.sh installs what llmd's build and tests need and is missing. It is
# idempotent: with everything present it only checks.
set -euo pipefail

need_apt=()
command -v go >/dev/null 2>&1 || { echo "deps: Go is not installed; install Go 1.26 or newer from https://go.dev/dl/" >&2; exit 1; }
# cgo (go test -race, and SQLite later) needs a C compiler.
command -v gcc >/dev/null 2>&1 || need_apt+=(gcc libc6-dev)
# The quota tests run against a real Redis server, which they start
# themselves on a free loopback port.
command -v redis-server >/dev/null 2>&1 || need_apt+=(redis-server)
# scripts/tui-smoke.sh drives llmctl top in a tmux pane.
command -v tmux >/dev/null 2>&1 || need_apt+=(tmux)
command -v curl >/dev/null 2>&1 || need_apt+=(curl)

if [ ${#need_apt[@]} -gt 0 ]; then
	echo "deps: installing ${need_apt[*]} with apt-get" >&2
	sudo=""
	[ "$(id -u)" -eq 0 ] || sudo="sudo"
	export DEBIAN_FRONTEND=noninteractive
	$sudo apt-get update -qq
	$sudo apt-get install -y -qq "${need_apt[@]}"
fi
go mod download
(cd internal/asmgen && go mod download)
