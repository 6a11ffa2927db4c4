#!/usr/bin/env bash
# check-imports.sh enforces DESIGN.md's import rules: engine/... imports
# nothing of daemon, cluster, store, tui or cmd, nor net/http or
# database/sql; model/... imports nothing of llmd outside model/; api
# imports nothing of llmd; tui imports only api; cluster and store import
# nothing of daemon, cmd or tui.
set -euo pipefail
mod=$(go list -m)
status=0

bad=$(go list -deps ./engine/... | grep -E "^($mod/(daemon|cluster|store|tui|cmd)(/|$)|net/http$|database/sql$)" || true)
if [ -n "$bad" ]; then
	echo "check-imports: engine must not depend on:" $bad >&2
	status=1
fi

bad=$(go list -deps ./model/... | grep -E "^$mod/" | grep -vE "^$mod/model(/|$)" || true)
if [ -n "$bad" ]; then
	echo "check-imports: model must not import llmd packages outside model/:" $bad >&2
	status=1
fi

bad=$(go list -deps ./api/... | grep -E "^$mod/" | grep -vE "^$mod/api(/|$)" || true)
if [ -n "$bad" ]; then
	echo "check-imports: api must not import other llmd packages:" $bad >&2
	status=1
fi
bad=$(go list -deps ./tui/... | grep -E "^$mod/" | grep -vE "^$mod/(tui|api)(/|$)" || true)
if [ -n "$bad" ]; then
	echo "check-imports: tui may import only api of llmd:" $bad >&2
	status=1
fi

bad=$(go list -deps ./cluster/... ./store/... | grep -E "^$mod/(daemon|cmd|tui)(/|$)" || true)
if [ -n "$bad" ]; then
	echo "check-imports: cluster and store must not import daemon, cmd or tui:" $bad >&2
	status=1
fi
[ $status -eq 0 ] && echo "check-imports: ok"
exit $status
