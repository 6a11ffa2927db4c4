#!/usr/bin/env bash
# netns-partition.sh: run N real llmd processes, each in its own network
# namespace, as one cluster, then partition them into groups and heal.
#
# Needs root and iproute2 (ip netns); curl for `nodes` and the readiness
# check. Nothing on the host changes but the namespaces: the nodes hang off
# a bridge inside a switch namespace (PREFIXsw), so the host firewall and
# routes are never touched.
#
# Usage:
#   netns-partition.sh up N            start nodes 1..N (N >= 2) and wait until ready
#   netns-partition.sh run N           up, print "ready", then wait until stdin
#                                      closes (Ctrl-D; a background job's stdin is
#                                      /dev/null: give it a pipe) or SIGINT/SIGTERM,
#                                      and tear down
#   netns-partition.sh partition '1 2' '3 4 5'
#                                      cut the groups off from one another; a node
#                                      named in no group joins the first group
#   netns-partition.sh heal            lift the partition
#   netns-partition.sh nodes I         GET /v1/admin/nodes on node I (from inside
#                                      its namespace: admin needs loopback)
#   netns-partition.sh exec I CMD...   run CMD in node I's namespace
#   netns-partition.sh status          namespaces, pids, partition
#   netns-partition.sh down            stop the nodes (SIGTERM, then SIGKILL after
#                                      10 s), delete the namespaces and the state
#
# Node I runs in namespace PREFIX<I> at SUBNET.(10+I): llmd --listen
# 0.0.0.0:8700 --insecure (the namespace is private) --advertise-api
# SUBNET.(10+I):8700 --gossip-addr SUBNET.(10+I):7946 --node-id n<I>
# --data-dir STATE/n<I>/data --gossip-key KEY, and --join SUBNET.11:7946 for
# I > 1. Logs: STATE/n<I>/log. `up` tears down what it made if it fails;
# `run` tears down on exit, whatever the cause.
#
# Environment:
#   LLMD_BIN             the llmd binary (default: llmd on PATH)
#   LLMD_ARGS            more llmd arguments (default: --models small --log-level info)
#   LLMD_GOSSIP_KEY      base64 gossip key (default: 32 random bytes)
#   LLMD_GOSSIP_PROFILE  passed as llmd's hidden --gossip-profile: lan (llmd's
#                        default, 1 s probes) or local (20 ms probes, 500 ms reconnects)
#   LLMD_NETNS_PREFIX    names of the namespaces (default llmd; letters and digits,
#                        at most 10 characters)
#   LLMD_NETNS_SUBNET    first three octets of the nodes' /24 (default 10.77.0)
#   LLMD_NETNS_METHOD    how `partition` cuts: nft (each node drops what arrives
#                        from the other groups: input only, so a sender sees silence
#                        and timeouts, as across a cut cable, not an instant EPERM),
#                        iptables (the same), or link (move the groups' ports to
#                        separate bridges); default: nft if installed, else
#                        iptables, else link
#   LLMD_NETNS_STATE     state directory (default /tmp/PREFIX-netns)
#
# Example:
#   go build -o /tmp/llmd ./cmd/llmd
#   sudo LLMD_BIN=/tmp/llmd LLMD_GOSSIP_PROFILE=local scripts/netns-partition.sh up 5
#   sudo scripts/netns-partition.sh partition '1 2' '3 4 5'
#   sudo scripts/netns-partition.sh nodes 1 | jq -r '.nodes[] | "\(.id) \(.status)"'
#   sudo scripts/netns-partition.sh heal
#   sudo scripts/netns-partition.sh down
set -euo pipefail

PREFIX=${LLMD_NETNS_PREFIX:-llmd}
SUBNET=${LLMD_NETNS_SUBNET:-10.77.0}
STATE=${LLMD_NETNS_STATE:-/tmp/$PREFIX-netns}
SW=${PREFIX}sw
API_PORT=8700
GOSSIP_PORT=7946

die() {
	echo "netns-partition: $*" >&2
	exit 1
}

usage() {
	sed -n '/^# Usage:/,/^# Node I runs/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
	exit 2
}

[[ $PREFIX =~ ^[A-Za-z][A-Za-z0-9]{0,9}$ ]] || die "LLMD_NETNS_PREFIX=$PREFIX: use letters and digits, at most 10"
[[ $SUBNET =~ ^[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}$ ]] || die "LLMD_NETNS_SUBNET=$SUBNET: use three octets, e.g. 10.77.0"

ns() { echo "$PREFIX$1"; }
ip_of() { echo "$SUBNET.$((10 + $1))"; }
count() { cat "$STATE/count" 2>/dev/null || echo 0; }

need_root() {
	[[ $(id -u) == 0 ]] || die "needs root (network namespaces)"
	command -v ip >/dev/null || die "needs iproute2 (ip)"
}

method() {
	local m=${LLMD_NETNS_METHOD:-}
	if [[ -z $m ]]; then
		if command -v nft >/dev/null; then
			m=nft
		elif command -v iptables >/dev/null; then
			m=iptables
		else
			m=link
		fi
	fi
	case $m in
	nft | iptables | link) echo "$m" ;;
	*) die "LLMD_NETNS_METHOD=$m: use nft, iptables or link" ;;
	esac
}

# wait_ready I: until node I answers /readyz (60 s), or its llmd exits.
wait_ready() {
	local i=$1 pid
	pid=$(cat "$STATE/n$i/pid")
	for _ in $(seq 600); do
		if ip netns exec "$(ns "$i")" curl -sf -o /dev/null "http://127.0.0.1:$API_PORT/readyz"; then
			return 0
		fi
		kill -0 "$pid" 2>/dev/null || {
			tail -n 20 "$STATE/n$i/log" >&2
			die "llmd of node $i exited"
		}
		sleep 0.1
	done
	tail -n 20 "$STATE/n$i/log" >&2
	die "node $i not ready after 60 s"
}

start_node() {
	local i=$1 key=$2 bin=$3 args=()
	local ip
	ip=$(ip_of "$i")
	mkdir -p "$STATE/n$i/data"
	args=(--listen "0.0.0.0:$API_PORT" --insecure --advertise-api "$ip:$API_PORT"
		--gossip-addr "$ip:$GOSSIP_PORT" --gossip-key "$key" --node-id "n$i" --data-dir "$STATE/n$i/data")
	if ((i > 1)); then
		args+=(--join "$(ip_of 1):$GOSSIP_PORT")
	fi
	if [[ -n ${LLMD_GOSSIP_PROFILE:-} ]]; then
		args+=(--gossip-profile "$LLMD_GOSSIP_PROFILE")
	fi
	# shellcheck disable=SC2206 # LLMD_ARGS is split on purpose
	args+=(${LLMD_ARGS:---models small --log-level info})
	# ip netns exec execs llmd: the pid is llmd's.
	ip netns exec "$(ns "$i")" "$bin" "${args[@]}" </dev/null >"$STATE/n$i/log" 2>&1 &
	echo $! >"$STATE/n$i/pid"
}

up() {
	local n=${1:-}
	[[ $n =~ ^[0-9]+$ ]] && ((n >= 2 && n <= 200)) || die "up N: N from 2 to 200"
	need_root
	command -v curl >/dev/null || die "needs curl"
	local bin=${LLMD_BIN:-llmd}
	bin=$(command -v "$bin") || die "no llmd binary: set LLMD_BIN"
	[[ ! -e $STATE/count ]] && ! ip netns list | grep -qx "$SW\( .*\)\?" ||
		die "already up (state in $STATE); run down first"
	local key=${LLMD_GOSSIP_KEY:-}
	[[ -n $key ]] || key=$(head -c 32 /dev/urandom | base64)

	mkdir -p "$STATE"
	echo "$n" >"$STATE/count"
	# Anything failing from here on undoes it all.
	trap 'echo "netns-partition: up failed; tearing down" >&2; down' EXIT
	trap 'exit 1' INT TERM HUP

	ip netns add "$SW"
	ip -n "$SW" link set lo up
	ip -n "$SW" link add br0 type bridge
	ip -n "$SW" link set br0 up
	local i
	for i in $(seq "$n"); do
		ip netns add "$(ns "$i")"
		ip -n "$(ns "$i")" link set lo up
		ip -n "$SW" link add "p$i" type veth peer name eth0 netns "$(ns "$i")"
		ip -n "$SW" link set "p$i" master br0 up
		ip -n "$(ns "$i")" addr add "$(ip_of "$i")/24" dev eth0
		ip -n "$(ns "$i")" link set eth0 up
	done
	start_node 1 "$key" "$bin"
	wait_ready 1
	for i in $(seq 2 "$n"); do
		start_node "$i" "$key" "$bin"
	done
	for i in $(seq 2 "$n"); do
		wait_ready "$i"
	done
	trap - EXIT INT TERM HUP
	echo "up: $n nodes; node I is llmd n<I> at $SUBNET.(10+I):$API_PORT in namespace ${PREFIX}<I>; logs in $STATE/n<I>/log"
}

# partition GROUP...: each GROUP is a space-separated list of node numbers.
partition() {
	(($# >= 2)) || die "partition needs at least two groups, e.g. partition '1 2' '3 4 5'"
	need_root
	local n
	n=$(count)
	((n > 0)) || die "not up"
	heal >/dev/null
	local group=()
	local g=0 i arg
	for arg in "$@"; do
		g=$((g + 1))
		for i in $arg; do
			[[ $i =~ ^[0-9]+$ ]] && ((i >= 1 && i <= n)) || die "no node $i (nodes 1..$n)"
			[[ -z ${group[$i]:-} ]] || die "node $i is in two groups"
			group[$i]=$g
		done
	done
	for i in $(seq "$n"); do
		group[$i]=${group[$i]:-1}
	done
	local m
	m=$(method)
	for i in $(seq "$n"); do
		local others=() j
		for j in $(seq "$n"); do
			if [[ ${group[$j]} != "${group[$i]}" ]]; then
				others+=("$(ip_of "$j")")
			fi
		done
		case $m in
		nft)
			local set
			set=$(
				IFS=,
				echo "${others[*]}"
			)
			ip netns exec "$(ns "$i")" nft -f - <<-EOF
				table inet llmdpartition {
					chain input { type filter hook input priority 0; ip saddr { $set } drop; }
				}
			EOF
			;;
		iptables)
			for j in "${others[@]}"; do
				ip netns exec "$(ns "$i")" iptables -A INPUT -s "$j" -j DROP
			done
			;;
		link)
			if ((group[$i] > 1)); then
				local br="br${group[$i]}"
				ip -n "$SW" link show "$br" >/dev/null 2>&1 || {
					ip -n "$SW" link add "$br" type bridge
					ip -n "$SW" link set "$br" up
				}
				ip -n "$SW" link set "p$i" master "$br"
			fi
			;;
		esac
	done
	printf '%s\n' "$@" >"$STATE/partition"
	echo "partition ($m): $(printf '{%s} ' "$@")"
}

heal() {
	need_root
	local n i
	n=$(count)
	((n > 0)) || die "not up"
	for i in $(seq "$n"); do
		if command -v nft >/dev/null; then
			ip netns exec "$(ns "$i")" nft delete table inet llmdpartition 2>/dev/null || true
		fi
		if command -v iptables >/dev/null; then
			ip netns exec "$(ns "$i")" iptables -F INPUT 2>/dev/null || true
		fi
		ip -n "$SW" link set "p$i" master br0 2>/dev/null || true
	done
	local br
	for br in $(ip -n "$SW" -o link show type bridge 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1); do
		if [[ $br != br0 ]]; then
			ip -n "$SW" link del "$br" || true
		fi
	done
	rm -f "$STATE/partition"
	echo "healed"
}

down() {
	# Finish the teardown whatever arrives meanwhile.
	trap - EXIT
	trap '' INT TERM HUP
	need_root
	local n i pid pids=()
	n=$(count)
	for i in $(seq "$n"); do
		pid=$(cat "$STATE/n$i/pid" 2>/dev/null) || continue
		if kill -TERM "$pid" 2>/dev/null; then
			pids+=("$pid")
		fi
	done
	for _ in $(seq 100); do
		local alive=()
		for pid in "${pids[@]}"; do
			if kill -0 "$pid" 2>/dev/null; then
				alive+=("$pid")
			fi
		done
		pids=("${alive[@]}")
		((${#pids[@]} == 0)) && break
		sleep 0.1
	done
	for pid in "${pids[@]}"; do
		echo "netns-partition: llmd $pid did not stop on SIGTERM; killing it" >&2
		kill -KILL "$pid" 2>/dev/null || true
	done
	# Every namespace this prefix names (also those of a failed up).
	local name
	for name in $(ip netns list 2>/dev/null | awk '{print $1}'); do
		if [[ $name == "$SW" || $name =~ ^$PREFIX[0-9]+$ ]]; then
			ip netns del "$name" || true
		fi
	done
	rm -rf "$STATE"
	echo "down"
}

status() {
	local n i
	n=$(count)
	((n > 0)) || {
		echo "not up"
		return
	}
	for i in $(seq "$n"); do
		local pid st=stopped
		pid=$(cat "$STATE/n$i/pid" 2>/dev/null || echo -)
		kill -0 "$pid" 2>/dev/null && st=running
		echo "node $i: namespace $(ns "$i") $(ip_of "$i") pid $pid $st"
	done
	if [[ -f $STATE/partition ]]; then
		echo "partition: $(sed 's/.*/{&}/' "$STATE/partition" | tr '\n' ' ')"
	else
		echo "not partitioned"
	fi
}

cmd=${1:-}
shift || true
case $cmd in
up) up "$@" ;;
run)
	up "$@"
	trap down EXIT
	trap 'exit 0' INT TERM HUP
	echo ready
	# Until stdin closes (the caller went away) or a signal arrives.
	while read -r _; do :; done
	;;
partition) partition "$@" ;;
heal) heal ;;
nodes)
	[[ ${1:-} =~ ^[0-9]+$ ]] || die "nodes I"
	ip netns exec "$(ns "$1")" curl -sf "http://127.0.0.1:$API_PORT/v1/admin/nodes"
	echo
	;;
exec)
	[[ ${1:-} =~ ^[0-9]+$ ]] || die "exec I CMD..."
	i=$1
	shift
	exec ip netns exec "$(ns "$i")" "$@"
	;;
status) status ;;
down) down ;;
*) usage ;;
esac
