package raftfsm

import (
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

func TestFreesSpace(t *testing.T) {
	s := spec("h", "p")
	cases := []struct {
		name string
		cmds []Command
		want bool
	}{
		{"cancel", []Command{cancelCmd("a", 1)}, true},
		{"purge", []Command{purgeCmd(PurgeTask{ID: "a", Epoch: 1, FinishedMs: 2})}, true},
		{"cancels and a purge", []Command{cancelCmd("a", 1), purgeCmd(), cancelCmd("b", 1)}, true},
		{"submit", []Command{submitCmd("a", s, 1, 1)}, false},
		{"cancel and submit", []Command{cancelCmd("a", 1), submitCmd("b", s, 1, 1)}, false},
		{"fire", []Command{fireCmd("a", 1, 1, "n1", 1, 2)}, false},
		{"complete", []Command{completeCmd("a", 1, 1, OutcomeSuccess, "", 0, 1)}, false},
		{"retry", []Command{{Type: CmdRetry, Retry: &Retry{ID: "a"}}}, false},
		{"lease", []Command{{Type: CmdLease, Lease: &Lease{ID: "a"}}}, false},
		{"node", []Command{nodeCmd(Node{ID: "n1"})}, false},
		{"empty", nil, false},
	}
	for _, c := range cases {
		if got := EntryFreesSpace(c.cmds); got != c.want {
			t.Errorf("%s: EntryFreesSpace = %v, want %v", c.name, got, c.want)
		}
	}
}

// The space gate hears, per entry, whether every command of it frees
// space; an entry it refuses is retried (not skipped) and applies once
// the gate lets it through; a configuration entry counts as freeing.
func TestSpaceGatePerEntry(t *testing.T) {
	e := newEnv(t)
	e.f.sleep = func(time.Duration) {}
	s := spec("h", "p")
	e.apply(1, submitCmd("a", s, 10, 1), submitCmd("b", s, 10, 1))

	var seen []bool
	low := true // refuse every entry that does not free space
	refused := 0
	e.f.SetSpaceGate(func(frees bool) error {
		seen = append(seen, frees)
		if low && !frees {
			refused++
			if refused == 3 {
				low = false // space came back
			}
			return errors.New("below three quarters of the reserve")
		}
		return nil
	})
	e.apply(2, cancelCmd("a", 2))
	if got := e.task("a").State; got != StateCancelled {
		t.Fatalf("cancel inside the reserve: a is %v", got)
	}
	e.f.StoreConfiguration(3, raft.Configuration{})
	e.apply(4, cancelCmd("b", 3), submitCmd("c", s, 10, 3)) // mixed: refused 3 times, then applied
	if e.f.AppliedIndex() != 4 || e.task("c") == nil || e.task("b").State != StateCancelled {
		t.Fatalf("mixed entry not applied after the gate let it through: applied %d", e.f.AppliedIndex())
	}
	want := []bool{true, true, false, false, false, false}
	if len(seen) != len(want) {
		t.Fatalf("gate calls %v, want %v", seen, want)
	}
	for i := range want {
		if seen[i] != want[i] {
			t.Fatalf("gate calls %v, want %v", seen, want)
		}
	}
	if refused != 3 || e.f.StorageRetries() != 3 {
		t.Fatalf("refused %d, retries %d", refused, e.f.StorageRetries())
	}
}
