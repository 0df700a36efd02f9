package raftfsm

import (
	"fmt"
	"strings"
	"testing"
)

// TestRestoreManyHandlers: a state whose tasks have very many handlers
// (here 260 000 of the longest names ipc accepts, 256 bytes) restores.
// Its counts per handler encode to more than badger takes as one value
// (the value log file size, 64 MiB in OpenDB): a snapshot that carried
// them as one record could not be restored at all (restore's write of the
// record fails after DropAll, and the FSM is left broken), where the same
// state without the record restores and is counted.
func TestRestoreManyHandlers(t *testing.T) {
	if testing.Short() {
		t.Skip("260 000 tasks")
	}
	const n = 260_000
	src := newEnv(t)
	pad := strings.Repeat("h", 256-8)
	idx := uint64(1)
	for i := 0; i < n; {
		var cmds []Command
		for ; i < n && len(cmds) < 400; i++ {
			cmds = append(cmds, submitCmd(fmt.Sprint(i), Spec{Handler: fmt.Sprintf("%s%08d", pad, i), MaxAttempts: 1}, 1<<40, 10))
		}
		src.apply(idx, cmds...)
		idx++
	}
	stream := persist(t, src.snapshot())
	dst := newEnv(t)
	if err := dst.restore(stream); err != nil {
		t.Fatalf("restore of a state with %d handlers: %v", n, err)
	}
	if got := len(dst.f.HandlerCounts()); got != n {
		t.Fatalf("%d handlers after the restore, want %d", got, n)
	}
	if c := dst.f.Counts(); c[StateWaiting] != n {
		t.Fatalf("counts %v", c)
	}
}
