#!/usr/bin/env bash
# deps.sh checks, and installs where it can, what llmd needs.
#
#   scripts/deps.sh build   what make build and make run need: Go and a C
#                           compiler (cgo: SQLite). Nothing else, no root.
#   scripts/deps.sh test    also what the tests use: redis-server (the quota
#                           tests), tmux (scripts/tui-smoke.sh), curl.
#
# It is idempotent: with everything present it only checks. Missing system
# packages are installed with apt-get, as root or through sudo; without
# either it names the packages to install and stops.
set -euo pipefail

mode=${1:-build}
case "$mode" in
build | test) ;;
*)
	echo "usage: scripts/deps.sh [build|test]" >&2
	exit 2
	;;
esac

command -v go >/dev/null 2>&1 || { echo "deps: Go is not installed; install Go 1.26 or newer from https://go.dev/dl/" >&2; exit 1; }

need_apt=()
# cgo (SQLite, and go test -race) needs a C compiler.
command -v gcc >/dev/null 2>&1 || need_apt+=(gcc libc6-dev)
if [ "$mode" = test ]; then
	# The quota tests run against a real Redis server, which they start
	# themselves on a free loopback port (they skip without it, unless
	# LLMD_REQUIRE_REDIS=1, as make test sets).
	command -v redis-server >/dev/null 2>&1 || need_apt+=(redis-server)
	# scripts/tui-smoke.sh drives llmctl top in a tmux pane.
	command -v tmux >/dev/null 2>&1 || need_apt+=(tmux)
	command -v curl >/dev/null 2>&1 || need_apt+=(curl)
fi

if [ ${#need_apt[@]} -gt 0 ]; then
	sudo=""
	if [ "$(id -u)" -ne 0 ]; then
		if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
			sudo="sudo"
		else
			echo "deps: missing ${need_apt[*]}; install them (sudo apt-get install ${need_apt[*]}) and run this again" >&2
			exit 1
		fi
	fi
	echo "deps: installing ${need_apt[*]} with apt-get" >&2
	export DEBIAN_FRONTEND=noninteractive
	$sudo apt-get update -qq
	$sudo apt-get install -y -qq "${need_apt[@]}"
fi

# Modules: instant when they are in the module cache; the first time, go
# names each as it downloads it (-x would be too much).
go mod download
if [ "$mode" = test ]; then
	(cd internal/asmgen && go mod download)
fi
