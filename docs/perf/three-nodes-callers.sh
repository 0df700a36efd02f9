#!/bin/bash
# Three ax nodes started by hand, 16 callers of `ax bench throughput` (CALLERS, DUR to change)
# either over all three sockets (MODE all) or on the leader's only (MODE leader), and the
# nodes' CPU per task. Ports 27511-27532 must be free. Linux only (/proc).
#   three-nodes-callers.sh BIN all|leader
set -u
BIN=$1; MODE=$2
D=$(mktemp -d /tmp/ax-fw.XXXX); P=(0 27511 27512 27521 27522 27531 27532); pids=()
for i in 1 2 3; do join=""; for j in 1 2 3; do [ $j != $i ] && join="$join,127.0.0.1:${P[$((2*j))]}"; done
 "$BIN" sidecar --node-id n$i --data-dir $D/n$i --socket $D/n$i.sock --raft-addr 127.0.0.1:${P[$((2*i-1))]} --peer-addr 127.0.0.1:${P[$((2*i))]} --bootstrap-expect 3 --join ${join#,} --log-format json --log-level warn >$D/n$i.log 2>&1 & pids+=($!); done
sleep 4
L=$("$BIN" cluster status --socket $D/n1.sock --json 2>/dev/null | python3 -c "import json,sys; print(json.load(sys.stdin)[\"leader\"])")
if [ "$MODE" = leader ]; then S="--socket $D/$L.sock"; else S="--socket $D/n1.sock --socket $D/n2.sock --socket $D/n3.sock"; fi
"$BIN" bench throughput --no-progress --json --callers ${CALLERS:-16} --duration ${DUR:-5s} --processing 0 --keep-tasks --batch 1 --sync-probe 0 --executor-listen unix://$D/exec.sock $S >$D/b.json 2>$D/b.err
cpu=0; for p in "${pids[@]}"; do cpu=$((cpu + $(awk '{print $14+$15}' /proc/$p/stat))); done
kill "${pids[@]}"; wait 2>/dev/null
python3 - $D/b.json $cpu "$MODE" "$L" <<'PY'
import json,sys
d=json.load(open(sys.argv[1])); s=d['phases'][0]; t=d['phases'][1]; n=s['tasks']+t['tasks']
print('%-7s leader=%s %6.0f/s p50 %.2f p99 %.2f cmds/entry %.2f | %6.0f/s | %.0f us/task' % (sys.argv[3], sys.argv[4], s['tasks_per_s'], s['request_latency']['p50_ms'], s['request_latency']['p99_ms'], s['raft']['commands_per_entry'], t['tasks_per_s'], int(sys.argv[2])*1e6/100/n))
PY
rm -rf $D
