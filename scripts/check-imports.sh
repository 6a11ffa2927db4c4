#!/usr/bin/env bash
# check-imports.sh enforces the package boundaries of ARCHITECTURE.md (and
# DESIGN.md's import rules). Imports point one way:
#
#   cmd -> daemon -> server -> pipeline -> engine, model, quota, store, cluster
#                    server -> relay, peer;  peer -> pipeline;  daemon -> all
#
# - engine/... depends on nothing of llmd but engine/ and model/ (no
#   internal/ helper, no daemon, request path, store or cluster), nor on
#   net/http or database/sql;
# - model/... imports nothing of llmd outside model/; api, quota, catalog,
#   safety and upstream/probe import nothing of llmd; tui imports only api;
# - relay imports only api; pipeline never imports the HTTP server, the
#   relay or the peer proxy; peer never imports the server or the relay;
# - the HTTP server (server/) reaches the engine only through the
#   pipeline: it imports no engine/ or model/ package;
# - cluster, store, metrics and gpu import nothing of the request path
#   (daemon, server, pipeline, relay, peer), cmd or tui;
# - only cmd/ imports daemon.
set -euo pipefail
mod=$(go list -m)
status=0

fail() {
	echo "check-imports: $1:" $2 >&2
	status=1
}

# deps PKGS: every package PKGS depend on; imports PKGS: their direct imports.
deps() { go list -deps "$@"; }
imports() { go list -f '{{join .Imports "\n"}}' "$@" | sort -u; }

bad=$(deps ./engine/... | grep -E "^$mod/" | grep -vE "^$mod/(engine|model)(/|$)" || true)
[ -z "$bad" ] || fail "engine must not depend on" "$bad"
bad=$(deps ./engine/... | grep -E "^(net/http|database/sql)$" || true)
[ -z "$bad" ] || fail "engine must not depend on" "$bad"

bad=$(deps ./model/... | grep -E "^$mod/" | grep -vE "^$mod/model(/|$)" || true)
[ -z "$bad" ] || fail "model must not import llmd packages outside model/" "$bad"

for p in api quota catalog safety upstream/probe; do
	bad=$(deps ./$p/... | grep -E "^$mod/" | grep -vE "^$mod/$p(/|$)" || true)
	[ -z "$bad" ] || fail "$p must not import other llmd packages" "$bad"
done

bad=$(deps ./tui/... | grep -E "^$mod/" | grep -vE "^$mod/(tui|api)(/|$)" || true)
[ -z "$bad" ] || fail "tui may import only api of llmd" "$bad"

bad=$(deps ./relay/... | grep -E "^$mod/" | grep -vE "^$mod/(relay|api)(/|$)" || true)
[ -z "$bad" ] || fail "relay may import only api of llmd" "$bad"

bad=$(deps ./pipeline/... | grep -E "^$mod/(daemon|server|relay|peer|cmd|tui)(/|$)" || true)
[ -z "$bad" ] || fail "pipeline must not depend on" "$bad"

bad=$(deps ./peer/... | grep -E "^$mod/(daemon|server|relay|cmd|tui)(/|$)" || true)
[ -z "$bad" ] || fail "peer must not depend on" "$bad"

bad=$(imports ./server/... | grep -E "^$mod/(engine|model|daemon|cmd|tui)(/|$)" || true)
[ -z "$bad" ] || fail "server must reach the engine only through the pipeline; it imports" "$bad"

bad=$(deps ./cluster/... ./store/... ./metrics/... ./gpu/... | grep -E "^$mod/(daemon|server|pipeline|relay|peer|cmd|tui)(/|$)" || true)
[ -z "$bad" ] || fail "cluster, store, metrics and gpu must not depend on" "$bad"

bad=$(for p in $(go list ./... | grep -vE "^$mod/(cmd|daemon)(/|$)"); do imports "$p"; done | grep -E "^$mod/daemon(/|$)" | sort -u || true)
[ -z "$bad" ] || fail "only cmd/ may import daemon; imported:" "$bad"

[ $status -eq 0 ] && echo "check-imports: ok"
exit $status
