#!/bin/bash
# Heap allocations per Raft command on the nodes, each binary in turn: one
# `ax bench throughput` phase of CALLERS single submits (default 16) on NODES nodes
# (default 1), and over WINDOW seconds (default 2) from 3 s into it, the nodes'
# go_memstats_mallocs_total (summed) and the leader's ax_raft_entry_commands_sum
# read twice from their sockets' /metrics; prints their ratio. Needs curl.
#   node-mallocs.sh BIN...
#   NODES=3 node-mallocs.sh ./ax-new ./ax-old
set -eu
NODES=${NODES:-1}; CALLERS=${CALLERS:-16}; WINDOW=${WINDOW:-2}
read_nodes() { # prints: mallocs summed over the nodes, the largest commands sum
  local tot=0 cmds=0 s m a c
  for s in $(pgrep -af -- "$(basename "$1") sidecar --node-id" | grep -o -- "--socket [^ ]*" | cut -d' ' -f2); do
    m=$(curl -s --unix-socket "$s" http://ax/metrics | grep -v '^#')
    a=$(awk '/^go_memstats_mallocs_total /{printf "%d", $2}' <<<"$m")
    c=$(awk '/^ax_raft_entry_commands_sum /{printf "%d", $2}' <<<"$m")
    tot=$((tot + ${a:-0})); [ "${c:-0}" -gt "$cmds" ] && cmds=$c
  done
  echo "$tot $cmds"
}
for BIN in "$@"; do
  "$BIN" bench throughput --no-progress --nodes "$NODES" --callers "$CALLERS" --duration $((WINDOW + 5))s \
    --batch 1 --processing 0 --sync-probe 0 >/dev/null 2>&1 &
  sleep 3
  read -r a1 c1 < <(read_nodes "$BIN")
  sleep "$WINDOW"
  read -r a2 c2 < <(read_nodes "$BIN")
  wait
  if [ "$c2" -le "$c1" ]; then echo "$BIN: no commands seen"; continue; fi
  echo "$BIN: $(( (a2 - a1) / (c2 - c1) )) allocations per command on $NODES node(s) ($((c2 - c1)) commands in ${WINDOW}s)"
done
