#!/usr/bin/env bash
# run.sh AX_BIN [ROUNDS]: etcd against ax on this machine, alternated.
#
# Builds etcd's server and the load program from this module (the Go
# module proxy serves etcd's source; no binary is downloaded), then, ROUNDS
# times (default 3), runs each case on etcd and on ax one after the other:
#   3 nodes, 16 callers; 1 node, 16 callers; 1 node, 1 caller.
# etcd: a cluster of fresh members on 127.0.0.1 (client ports 2389, 2399,
# 2409; peer ports one above), their data in $TMPDIR, etcd's defaults but
# --log-level error; load puts 100-byte values for $DUR (5s), each caller
# its own client. ax: ax bench throughput --processing 0 --batch 1 for the
# same callers and duration (its nodes' data in $TMPDIR too; its first
# phase is read: an ax older than --batch 1's "no batched phase" runs a
# second, identical one). Each line gives the rate, p50/p99, the
# servers' CPU per write (etcd: utime+stime from /proc over load's
# measured window; ax: the nodes' own counters over the phase) and the
# client's. Every etcd member and data dir is removed on exit, however
# the script ends.
set -euo pipefail
AX=$(realpath "${1:?usage: run.sh AX_BIN [ROUNDS]}")
[ -x "$AX" ] || { echo "run.sh: $AX is not an executable" >&2; exit 2; }
ROUNDS=${2:-3}
DUR=${DUR:-5s}
cd "$(dirname "$0")"
BIN=$(mktemp -d "${TMPDIR:-/tmp}/etcdcmp-bin.XXXX")
PIDS=()
WORK=()
cleanup() {
	set +e
	if [ ${#PIDS[@]} -gt 0 ]; then
		kill "${PIDS[@]}" 2>/dev/null
		wait "${PIDS[@]}" 2>/dev/null
	fi
	if [ ${#WORK[@]} -gt 0 ]; then
		rm -rf "${WORK[@]}" "${WORK[0]}.json"
	fi
	rm -rf "$BIN"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
GOWORK=off go build -o "$BIN/etcd" ./etcd
GOWORK=off go build -o "$BIN/load" ./load

etcd_case() { # nodes callers
	local n=$1 c=$2 w ic="" eps="" pids="" i p
	for i in $(seq "$n"); do
		for p in $((2379 + i * 10)) $((2380 + i * 10)); do
			if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
				echo "run.sh: 127.0.0.1:$p is taken (an etcd left running?)" >&2
				exit 1
			fi
		done
		ic="$ic,e$i=http://127.0.0.1:$((2380 + i * 10))"
		eps="$eps,127.0.0.1:$((2379 + i * 10))"
	done
	ic=${ic#,} eps=${eps#,}
	w=$(mktemp -d "${TMPDIR:-/tmp}/etcdcmp.XXXX")
	WORK=("$w")
	PIDS=()
	for i in $(seq "$n"); do
		"$BIN/etcd" --name "e$i" --data-dir "$w/e$i" \
			--listen-client-urls "http://127.0.0.1:$((2379 + i * 10))" --advertise-client-urls "http://127.0.0.1:$((2379 + i * 10))" \
			--listen-peer-urls "http://127.0.0.1:$((2380 + i * 10))" --initial-advertise-peer-urls "http://127.0.0.1:$((2380 + i * 10))" \
			--initial-cluster "$ic" --initial-cluster-state new --log-level error >"$w/e$i.log" 2>&1 &
		PIDS+=($!)
	done
	sleep 5 # elected, with a margin
	for p in "${PIDS[@]}"; do
		kill -0 "$p" 2>/dev/null || { echo "run.sh: an etcd member exited:" >&2; cat "$w"/e*.log >&2; exit 1; }
		pids="$pids,$p"
	done
	local out
	out=$("$BIN/load" --endpoints "$eps" --callers "$c" --duration "$DUR" --pids "${pids#,}" --clk-tck "$(getconf CLK_TCK)")
	kill "${PIDS[@]}"
	wait "${PIDS[@]}" 2>/dev/null || true
	PIDS=()
	rm -rf "$w"
	WORK=()
	python3 -c "
import json,sys
r=json.loads(sys.argv[1])
print('etcd %d node(s) %2d callers: %6.0f/s  p50 %.2f ms  p99 %.2f ms  servers %4.0f us/write  client %3.0f us  errors %d' % (int(sys.argv[2]), r['callers'], r['puts_per_s'], r['p50_ms'], r['p99_ms'], r['servers_cpu_us_per_put'], r['client_cpu_us_per_put'], r['errors']))
" "$out" "$n"
}

ax_case() { # nodes callers
	local log
	log=$(mktemp "${TMPDIR:-/tmp}/etcdcmp-ax.XXXX")
	WORK=("$log")
	if ! "$AX" bench throughput --no-progress --nodes "$1" --callers "$2" --duration "$DUR" --processing 0 --batch 1 --sync-probe 0 --json 2>"$log" >"$log.json"; then
		echo "run.sh: ax bench failed:" >&2
		cat "$log" >&2
		rm -f "$log.json"
		exit 1
	fi
	python3 -c "
import json,sys
p=json.load(open(sys.argv[2]))['phases'][0]
print('ax   %d node(s) %2d callers: %6.0f/s  p50 %.2f ms  p99 %.2f ms  servers %4.0f us/write  client %3.0f us  errors %d' % (int(sys.argv[1]), p['clients'], p['tasks_per_s'], p['request_latency']['p50_ms'], p['request_latency']['p99_ms'], p.get('node_cpu_us_per_task') or 0, p.get('client_cpu_us_per_request') or 0, p.get('errors') or 0))
" "$1" "$log.json"
	rm -f "$log" "$log.json"
	WORK=()
}

for r in $(seq "$ROUNDS"); do
	echo "# round $r ($(date -u +%H:%M:%S) UTC)"
	for c in "3 16" "1 16" "1 1"; do
		etcd_case $c
		ax_case $c
	done
done
