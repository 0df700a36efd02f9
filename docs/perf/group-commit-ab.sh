#!/bin/bash
# Group commit A/B: NODES (1 or 3) ax nodes started by hand, then for each
# of CALLERS (default "1 8 16") one `ax bench throughput` of that many
# callers of single submits (round robin over the nodes' sockets), and the
# nodes' CPU per submit over that run (utime+stime of the nodes, from
# /proc, read before and after it).
#   NODES=3 group-commit-ab.sh ROUNDS BIN...   alternate the binaries, ROUNDS times
# DUR (default 3s) is each run's duration. Ports 27611-27632 must be free.
# Linux only (/proc).
set -u
NODES=${NODES:-1}
cpu_of() { local c=0; for p in "$@"; do c=$((c + $(awk '{print $14+$15}' /proc/$p/stat))); done; echo $c; }
run() { # BIN
	local BIN=$1 D P pids=() socks=() wait=1
	D=$(mktemp -d /tmp/ax-grp-ab.XXXX)
	P=(0 27611 27612 27621 27622 27631 27632)
	for i in $(seq 1 $NODES); do
		local join="" boot="--bootstrap-expect $NODES"
		for j in $(seq 1 $NODES); do [ $j != $i ] && join="$join,127.0.0.1:${P[$((2*j))]}"; done
		[ -n "$join" ] && boot="$boot --join ${join#,}"
		nice -n 10 "$BIN" sidecar --node-id n$i --data-dir $D/n$i --socket $D/n$i.sock \
			--raft-addr 127.0.0.1:${P[$((2*i-1))]} --peer-addr 127.0.0.1:${P[$((2*i))]} \
			$boot --log-format json --log-level warn >$D/n$i.log 2>&1 &
		pids+=($!)
		socks+=(--socket $D/n$i.sock)
	done
	sleep 4
	for c in ${CALLERS:-1 8 16}; do
		local c0 c1
		c0=$(cpu_of "${pids[@]}")
		nice -n 10 "$BIN" bench throughput --no-progress --json --callers $c --duration ${DUR:-3s} --processing 0 \
			--keep-tasks --batch 1 --sync-probe 0 --executor-listen unix://$D/exec$c.sock \
			"${socks[@]}" >$D/bench$c.json 2>$D/bench$c.err
		c1=$(cpu_of "${pids[@]}")
		python3 - "$BIN" "$NODES" "$c" "$D/bench$c.json" "$((c1 - c0))" "$(getconf CLK_TCK)" <<'PY'
import json, sys
b, nodes, c, path, cpu, tck = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6])
d = json.load(open(path)); s, t = d['phases'][0], d['phases'][1]
n = s['tasks'] + t['tasks']
print('%-18s %s node(s) %2s callers %6.0f/s p50 %.2f ms p99 %.2f ms, commands/entry %.2f | 2nd %6.0f/s %.2f cmds/entry | nodes %.0f µs CPU per submit' % (
    b, nodes, c, s['tasks_per_s'], s['request_latency']['p50_ms'], s['request_latency']['p99_ms'],
    s['raft']['commands_per_entry'], t['tasks_per_s'], t['raft']['commands_per_entry'], cpu * 1e6 / tck / n))
PY
	done
	echo "    $(uptime)"
	for p in "${pids[@]}"; do kill $p; done
	wait "${pids[@]}" 2>/dev/null
	rm -rf "$D"
}
R=$1; shift
for r in $(seq 1 "$R"); do for b in "$@"; do run "$b"; done; done
