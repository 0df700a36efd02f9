#!/bin/bash
# Variants of ax alternated: ROUNDS rounds of one `ax bench throughput` phase of CALLERS
# single submits on NODES nodes (1 or 3) per variant, each run under `perf stat -a`,
# printing per submit (whole run, system-wide): context switches, nanosleeps (the Go
# runtime's sysmon sleeps with them), fsyncs and futex calls. A variant is an ax binary,
# optionally followed by node flags after commas (given to every node with --node-arg).
# Needs perf with the syscalls tracepoints (root). DUR (default 4s) changes the phase's length.
#   variants-ab.sh ROUNDS NODES CALLERS VARIANT...
#   variants-ab.sh 5 1 16 ./ax,--raft-log-sync=auto ./ax,--raft-log-sync=handoff
#   variants-ab.sh 5 3 16 ./ax-new ./ax-old
set -eu
ROUNDS=$1; NODES=$2; CALLERS=$3; shift 3
T=$(mktemp -d /tmp/ax-variants.XXXX); trap 'rm -rf "$T"' EXIT
for r in $(seq "$ROUNDS"); do for V in "$@"; do
  IFS=, read -r BIN FLAGS <<<"$V"
  args=()
  if [ -n "$FLAGS" ]; then IFS=, read -ra fl <<<"$FLAGS"; for f in "${fl[@]}"; do args+=("--node-arg=$f"); done; fi
  perf stat -a -x, -o "$T/perf" \
    -e context-switches,syscalls:sys_enter_nanosleep,syscalls:sys_enter_fsync,syscalls:sys_enter_futex -- \
    "$BIN" bench throughput --no-progress --nodes "$NODES" --callers "$CALLERS" --duration "${DUR:-4s}" \
    --processing 0 --batch 1 --sync-probe 0 "${args[@]}" --json >"$T/json" 2>"$T/err" ||
    { cat "$T/err" >&2; exit 1; }
  python3 - "$T/json" "$T/perf" "$V" "$NODES" "$CALLERS" <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); p = d['phases'][-1]
v = {}
for l in open(sys.argv[2]):
    f = l.strip().split(',')
    if len(f) > 2 and f[0].replace('.', '').isdigit():
        v[f[2].split(':')[-1]] = float(f[0])
t = sum(q['tasks'] for q in d['phases'])
print('%-36s nodes %s callers %-3s %7.0f/s  node CPU %5.1f us  p50 %.2f ms | per submit: cs %.2f  nanosleep %.2f  fsync %.3f  futex %.2f' % (
    sys.argv[3][-36:], sys.argv[4], sys.argv[5], p['tasks_per_s'], p['node_cpu_us_per_task'], p['request_latency']['p50_ms'],
    v.get('context-switches', 0) / t, v.get('sys_enter_nanosleep', 0) / t, v.get('sys_enter_fsync', 0) / t, v.get('sys_enter_futex', 0) / t))
PY
done; done
