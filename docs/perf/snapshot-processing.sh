#!/bin/bash
# Three nodes' processing phase with a snapshot of a large store inside it,
# each node profiled (branch snap, 2026-12-05).
#   snapshot-processing.sh template BIN        load ~500 000 tasks (due in 24 h) into
#                                              three nodes, keep their data in $T (default /tmp/ax-snap-tmpl)
#   snapshot-processing.sh run BIN TAG ARGS... copy the template, start the three nodes with ARGS,
#                                              run the processing phase (50 000 no-op tasks, 100 slots)
#   PROF=1 ...run...                           also a 14 s CPU profile of each node (TAG-n1.pprof ...)
# A snapshot of the whole store inside the phase: ARGS = --snapshot-threshold 8000 --snapshot-interval 2s
# (the template's log holds ~9 000 entries, so every node takes one snapshot 2–4 s after start);
# none: --snapshot-threshold 100000000 --trailing-logs-bytes 1073741824.
# Ports 27511-27532 and 6061-6063 must be free. Linux only (/proc).
set -u
T=${T:-/tmp/ax-snap-tmpl}
P=(0 27511 27512 27521 27522 27531 27532)
start3() { # BIN DIR ARGS...: prints the pids
	local BIN=$1 D=$2; shift 2
	for i in 1 2 3; do
		local join=""
		for j in 1 2 3; do [ $j != $i ] && join="$join,127.0.0.1:${P[$((2*j))]}"; done
		nice -n 10 "$BIN" sidecar --node-id n$i --data-dir $D/n$i --socket $D/n$i.sock \
			--raft-addr 127.0.0.1:${P[$((2*i-1))]} --peer-addr 127.0.0.1:${P[$((2*i))]} \
			--bootstrap-expect 3 --join ${join#,} --log-format json --log-level warn \
			--pprof-addr 127.0.0.1:606$i "$@" >>$D/n$i.log 2>&1 &
		echo -n "$! "
	done
}
ready3() { # DIR
	for _ in $(seq 1 300); do
		local ok=0
		for i in 1 2 3; do [ "$(curl -s -o /dev/null -w %{http_code} --unix-socket $1/n$i.sock http://x/readyz)" = 200 ] && ok=$((ok+1)); done
		[ $ok = 3 ] && return
		sleep 0.1
	done
}
cpu() { local c=0; for p in "$@"; do c=$((c + $(awk '{print $14+$15}' /proc/$p/stat))); done; echo $c; }
case $1 in
template)
	BIN=$2; rm -rf $T; mkdir -p $T
	PIDS=$(start3 $BIN $T --trailing-logs-bytes 1073741824); ready3 $T
	nice -n 10 $BIN bench throughput --no-progress --json --callers 16 --duration 10s --processing 0 --keep-tasks --sync-probe 0 \
		--executor-listen unix://$T/exec.sock --socket $T/n1.sock --socket $T/n2.sock --socket $T/n3.sock >$T/bench.json 2>$T/bench.err
	kill $PIDS; sleep 3; rm -f $T/*.sock $T/n*.log
	python3 -c "import json; print(sum(p['tasks'] for p in json.load(open('$T/bench.json'))['phases']), 'tasks in the template $T')" ;;
run)
	BIN=$2; TAG=$3; shift 3
	D=$(mktemp -d /tmp/ax-snap-run.XXXX); rm -rf $D; cp -a $T $D
	PIDS=$(start3 $BIN $D "$@"); ready3 $D
	c0=$(cpu $PIDS)
	[ -n "${PROF:-}" ] && for i in 1 2 3; do curl -s -o $TAG-n$i.pprof "http://127.0.0.1:606$i/debug/pprof/profile?seconds=14" & done
	nice -n 10 $BIN bench throughput --no-progress --json --callers 16 --duration 100ms --processing 50000 --keep-tasks --sync-probe 0 \
		--executor-listen unix://$D/exec.sock --socket $D/n1.sock --socket $D/n2.sock --socket $D/n3.sock >$D/bench.json 2>$D/bench.err
	sleep 6; c1=$(cpu $PIDS); wait $(jobs -p | grep -v -w -E "$(echo $PIDS | tr ' ' '|')") 2>/dev/null
	kill $PIDS; sleep 2
	python3 - $D/bench.json $TAG $c0 $c1 $(getconf CLK_TCK) <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))['processing']
print('%s processing %d/s, %.0f µs of node CPU per task (the phase); nodes %.2f s of CPU from ready to 6 s after the phase' % (
    sys.argv[2], p['tasks_per_s'], p['node_cpu_us_per_task'], (int(sys.argv[4]) - int(sys.argv[3])) / int(sys.argv[5])))
PY
	echo "  snapshots (bytes): $(ls -l $D/n*/snapshots/*/state.bin 2>/dev/null | awk '{print $5}' | tr '\n' ' '); $(uptime)"
	rm -rf $D ;;
*) echo "usage: $0 template BIN | run BIN TAG ARGS..." >&2; exit 2 ;;
esac
