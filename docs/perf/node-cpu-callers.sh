#!/bin/bash
# One dev node (NODE_PROCS=1 sets GOMAXPROCS=1 in its environment only), CALLERS callers of
# `ax bench throughput --socket` for 5 s, and the node's CPU use (CPUs) read from /proc over 3 s
# inside the phase. Uses /tmp/apn, /tmp/apn.sock, /tmp/apx.sock. Linux only.
#   [NODE_PROCS=1] node-cpu-callers.sh BIN CALLERS
BIN=$1; C=$2
rm -rf /tmp/apn /tmp/apn.sock /tmp/apx.sock
env ${NODE_PROCS:+GOMAXPROCS=$NODE_PROCS} $BIN dev --data-dir /tmp/apn --socket /tmp/apn.sock >/tmp/apn.log 2>&1 &
P=$!; sleep 2
$BIN bench throughput --no-progress --socket /tmp/apn.sock --executor-listen unix:///tmp/apx.sock --callers $C --duration 5s --processing 0 --batch 10 --sync-probe 0 --json > /tmp/fw/x.json 2>/tmp/fw/x.err &
B=$!
sleep 1.2; a=$(awk '{print $14+$15}' /proc/$P/stat); t0=$(date +%s.%N); sleep 3; b=$(awk '{print $14+$15}' /proc/$P/stat); t1=$(date +%s.%N)
wait $B
python3 -c "
import json; d=json.load(open('/tmp/fw/x.json')); p=d['phases'][0]
print('$BIN callers $C procs ${NODE_PROCS:-2}: %.0f/s p50 %.3f  node cpu use %.2f  us/req %.0f' % (p['tasks_per_s'], p['request_latency']['p50_ms'], ($b-$a)/100/($t1-$t0), ($b-$a)/100/($t1-$t0)/p['tasks_per_s']*1e6))"
kill $P; wait $P 2>/dev/null
