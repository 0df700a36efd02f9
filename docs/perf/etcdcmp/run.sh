#!/usr/bin/env bash
# run.sh AX_BIN [ROUNDS]: etcd against ax on this machine, alternated.
#
# Builds etcd's server and the load program from this module (the Go
# module proxy serves etcd's source; no binary is downloaded), then, ROUNDS
# times (default 3), runs each case on etcd and on ax one after the other:
#   3 nodes, 16 callers; 1 node, 16 callers; 1 node, 1 caller.
# etcd: a cluster of fresh members on 127.0.0.1 (ports 2389.. and 2390..),
# their data in $TMPDIR, etcd's defaults otherwise; load puts 100-byte
# values for 5 s. ax: ax bench throughput --processing 0 --batch 1 for the
# same callers and duration (its nodes' data in $TMPDIR too). Each line
# gives the rate, p50/p99, the servers' CPU per write (utime+stime from
# /proc over the load, etcd; the nodes' own counters, ax) and the client's.
set -euo pipefail
AX=${1:?usage: run.sh AX_BIN [ROUNDS]}
ROUNDS=${2:-3}
DUR=${DUR:-5s}
cd "$(dirname "$0")"
BIN=$(mktemp -d "${TMPDIR:-/tmp}/etcdcmp-bin.XXXX")
trap 'rm -rf "$BIN"' EXIT
GOWORK=off go build -o "$BIN/etcd" ./etcd
GOWORK=off go build -o "$BIN/load" ./load

ticks() { local t=0; for p in "$@"; do t=$((t + $(awk '{print $14+$15}' /proc/$p/stat))); done; echo $t; }

etcd_case() { # nodes callers
	local n=$1 c=$2 w ic="" eps="" pids=() i
	w=$(mktemp -d "${TMPDIR:-/tmp}/etcdcmp.XXXX")
	for i in $(seq "$n"); do
		ic="$ic,e$i=http://127.0.0.1:$((2380 + i * 10))"
		eps="$eps,127.0.0.1:$((2379 + i * 10))"
	done
	ic=${ic#,} eps=${eps#,}
	for i in $(seq "$n"); do
		"$BIN/etcd" --name "e$i" --data-dir "$w/e$i" \
			--listen-client-urls "http://127.0.0.1:$((2379 + i * 10))" --advertise-client-urls "http://127.0.0.1:$((2379 + i * 10))" \
			--listen-peer-urls "http://127.0.0.1:$((2380 + i * 10))" --initial-advertise-peer-urls "http://127.0.0.1:$((2380 + i * 10))" \
			--initial-cluster "$ic" --initial-cluster-state new --log-level error >"$w/e$i.log" 2>&1 &
		pids+=($!)
	done
	sleep 5 # elected, with a margin
	local t0 out t1
	t0=$(ticks "${pids[@]}")
	out=$("$BIN/load" --endpoints "$eps" --callers "$c" --duration "$DUR")
	t1=$(ticks "${pids[@]}")
	kill "${pids[@]}"
	wait "${pids[@]}" 2>/dev/null || true
	rm -rf "$w"
	python3 -c "
import json,sys
r=json.loads(sys.argv[1]); hz=int(sys.argv[4])
cpu=(int(sys.argv[3])-int(sys.argv[2]))/hz*1e6/r['puts']
print('etcd %d node(s) %2d callers: %6.0f/s  p50 %.2f ms  p99 %.2f ms  servers %4.0f us/write  client %3.0f us  errors %d' % (int(sys.argv[5]), r['callers'], r['puts_per_s'], r['p50_ms'], r['p99_ms'], cpu, r['client_cpu_us_per_put'], r['errors']))
" "$out" "$t0" "$t1" "$(getconf CLK_TCK)" "$n"
}

ax_case() { # nodes callers
	"$AX" bench throughput --no-progress --nodes "$1" --callers "$2" --duration "$DUR" --processing 0 --batch 1 --sync-probe 0 --json 2>/dev/null |
		python3 -c "
import json,sys
p=json.load(sys.stdin)['phases'][0]
print('ax   %d node(s) %2d callers: %6.0f/s  p50 %.2f ms  p99 %.2f ms  servers %4.0f us/write  client %3.0f us  errors %d' % (int(sys.argv[1]), p['clients'], p['tasks_per_s'], p['request_latency']['p50_ms'], p['request_latency']['p99_ms'], p.get('node_cpu_us_per_task') or 0, p.get('client_cpu_us_per_request') or 0, p.get('errors') or 0))
" "$1"
}

for r in $(seq "$ROUNDS"); do
	echo "# round $r ($(date -u +%H:%M:%S) UTC)"
	for c in "3 16" "1 16" "1 1"; do
		etcd_case $c
		ax_case $c
	done
done
