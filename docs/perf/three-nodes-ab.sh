#!/bin/bash
# Three ax nodes started by hand (each with its own --pprof-addr, 127.0.0.1:6061-6063),
# 16 callers of `ax bench throughput` round robin over their sockets, and the
# nodes' CPU per task (utime+stime of the three, start-up included).
#   three-nodes-ab.sh ROUNDS BIN...   alternate the binaries, ROUNDS times
#   PROF=1 DUR=12s three-nodes-ab.sh 1 BIN   also take an 8 s CPU profile of each node (./n1.pprof ...)
# Ports 27511-27532 and 6061-6063 must be free. Linux only (/proc).
set -u
run() { # BIN
	local BIN=$1 D P pids=() cpids="" cpu=0
	D=$(mktemp -d /tmp/ax-three-nodes.XXXX)
	P=(0 27511 27512 27521 27522 27531 27532)
	for i in 1 2 3; do
		local join=""
		for j in 1 2 3; do [ $j != $i ] && join="$join,127.0.0.1:${P[$((2*j))]}"; done
		nice -n 10 "$BIN" sidecar --node-id n$i --data-dir $D/n$i --socket $D/n$i.sock \
			--raft-addr 127.0.0.1:${P[$((2*i-1))]} --peer-addr 127.0.0.1:${P[$((2*i))]} \
			--bootstrap-expect 3 --join ${join#,} --log-format json --log-level warn \
			--pprof-addr 127.0.0.1:606$i >$D/n$i.log 2>&1 &
		pids+=($!)
	done
	sleep 4
	if [ -n "${PROF:-}" ]; then
		for i in 1 2 3; do (sleep 3; curl -s -o n$i.pprof "http://127.0.0.1:606$i/debug/pprof/profile?seconds=8") & cpids="$cpids $!"; done
	fi
	nice -n 10 "$BIN" bench throughput --no-progress --json --callers 16 --duration ${DUR:-4s} --processing 0 \
		--keep-tasks --batch 1 --sync-probe 0 --executor-listen unix://$D/exec.sock \
		--socket $D/n1.sock --socket $D/n2.sock --socket $D/n3.sock >$D/bench.json 2>$D/bench.err
	[ -n "$cpids" ] && wait $cpids
	for p in "${pids[@]}"; do cpu=$((cpu + $(awk '{print $14+$15}' /proc/$p/stat))); done
	for p in "${pids[@]}"; do kill $p; done
	wait "${pids[@]}" 2>/dev/null
	python3 - "$BIN" "$D/bench.json" "$cpu" "$(getconf CLK_TCK)" <<'PY'
import json, sys
b, path, cpu, tck = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
d = json.load(open(path)); s = d['phases'][0]
n = sum(p['tasks'] for p in d['phases'])
print('%-24s %6.0f/s p50 %.2f ms p99 %.2f ms, commands/entry %.2f, leader fsyncs/entry %.2f | nodes %.0f µs CPU per task (%d tasks)' % (
    b, s['tasks_per_s'], s['request_latency']['p50_ms'], s['request_latency']['p99_ms'],
    s['raft']['commands_per_entry'], s['raft']['leader_fsyncs_per_entry'], cpu * 1e6 / tck / n, n))
PY
	echo "    $(uptime)"
	rm -rf "$D"
}
R=$1; shift
for r in $(seq 1 "$R"); do for b in "$@"; do run "$b"; done; done
