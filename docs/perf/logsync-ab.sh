#!/bin/bash
# --raft-log-sync auto against handoff, alternated (variants-ab.sh):
#   logsync-ab.sh AX_BIN ROUNDS NODES CALLERS
set -eu
exec "$(dirname "$0")/variants-ab.sh" "$2" "$3" "$4" "$1,--raft-log-sync=auto" "$1,--raft-log-sync=handoff"
