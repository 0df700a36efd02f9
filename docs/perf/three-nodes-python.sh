#!/bin/bash
# Three ax nodes started by hand, one Python client (submit-python.py: http.client, a client
# that is not ours) per node's socket with THREADS threads each for 6 s, and the nodes' CPU
# per acknowledged submit (utime+stime of the three from /proc over the clients' run).
# Extra arguments go to every node, e.g. --socket-io=handoff.
#   three-nodes-python.sh BIN THREADS [NODE_FLAG...]
# Ports 27611-27632 must be free. Linux only (/proc).
set -u
BIN=$1; T=$2; shift 2
D=$(mktemp -d /tmp/ax-three-python.XXXX); P=(0 27611 27612 27621 27622 27631 27632); pids=(); py=()
for i in 1 2 3; do
  join=""; for j in 1 2 3; do [ $j != $i ] && join="$join,127.0.0.1:${P[$((2*j))]}"; done
  "$BIN" sidecar --node-id n$i --data-dir $D/n$i --socket $D/n$i.sock --raft-addr 127.0.0.1:${P[$((2*i-1))]} \
    --peer-addr 127.0.0.1:${P[$((2*i))]} --bootstrap-expect 3 --join ${join#,} --log-format json --log-level warn "$@" >$D/n$i.log 2>&1 &
  pids+=($!)
done
sleep 5
cpu() { local c=0; for p in "${pids[@]}"; do c=$((c + $(awk '{print $14+$15}' /proc/$p/stat))); done; echo $c; }
c0=$(cpu)
for i in 1 2 3; do python3 "$(dirname "$0")/submit-python.py" $D/n$i.sock 6 "$T" n$i >$D/py$i.out & py+=($!); done
wait "${py[@]}"
c1=$(cpu)
n=0; bad=0; for i in 1 2 3; do n=$((n + $(awk '{print $1}' $D/py$i.out))); bad=$((bad + $(awk '{print $3}' $D/py$i.out))); done
echo "${*:-(defaults)} clients 3x$T: $n acknowledged, $bad refused, $((n / 6))/s; nodes' CPU $(python3 -c "print(round(($c1-$c0)*1e6/$(getconf CLK_TCK)/max(1,$n),1))") us a submit"
for p in "${pids[@]}"; do kill $p; done; wait "${pids[@]}" 2>/dev/null; rm -rf $D
