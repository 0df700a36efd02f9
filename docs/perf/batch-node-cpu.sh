#!/bin/bash
# The node's CPU time per task during the batch phase of ax bench
# throughput (docs/perf/README.md, "The batch path per task").
# Usage: batch-node-cpu.sh NODE_BINARY [CLIENT_BINARY]
# Starts one node (ports 27490-27491, data in /tmp/ax-batch-cpu), runs the
# bench against its socket (16 callers, 6 s per phase), samples the node's
# utime+stime and ax_raft_entry_commands_sum 2.5 s into the batch phase
# and 3 s later, and prints CPU per task.
set -u
B=$1; C=${2:-$1}; D=/tmp/ax-batch-cpu; rm -rf $D; mkdir -p $D
nice -n 10 $B sidecar --node-id n1 --data-dir $D/data --socket $D/ax.sock --raft-addr 127.0.0.1:27490 \
  --peer-addr 127.0.0.1:27491 --bootstrap-expect 1 > $D/node.log 2>&1 & P=$!
for i in $(seq 50); do $C health --ready --socket $D/ax.sock >/dev/null 2>&1 && break; sleep 0.2; done
cpu() { awk '{print $14+$15}' /proc/$P/stat; }
cmds() { curl -s --unix-socket $D/ax.sock http://x/metrics | awk '/^ax_raft_entry_commands_sum/{print $2}'; }
nice -n 10 $C bench throughput --socket $D/ax.sock --executor-listen unix://$D/exec.sock --callers 16 \
  --batch 1000 --duration 6s --sync-probe 0 --no-progress > $D/bench.txt 2>&1 & BP=$!
sleep 8.5
c0=$(cpu); n0=$(cmds); t0=$(date +%s.%N)
sleep 3
c1=$(cpu); n1=$(cmds); t1=$(date +%s.%N)
wait $BP
kill $P; wait $P 2>/dev/null
echo "$(basename $B): $(echo "$c0 $c1 $n0 $n1 $t0 $t1 $(getconf CLK_TCK)" | awk '{dc=($2-$1)/$7; dn=$4-$3;
  printf "%.0f tasks in %.1fs (%.0f/s), node CPU %.2fs = %.1f us/task, %.2f cores", dn, $6-$5, dn/($6-$5), dc, dc*1e6/dn, dc/($6-$5)}')" \
  "| $(uptime | sed 's/.*load/load/')"
