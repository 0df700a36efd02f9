package raftfsm

import (
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// batchEntries is a run of entries that touch the same tasks one after the
// other (each reads what the one before it wrote), with a configuration
// entry and a space-freeing entry in the middle.
func batchEntries(t testing.TB) []*raft.Log {
	s := spec("h", "p")
	cmd := func(idx uint64, cmds ...Command) *raft.Log {
		return &raft.Log{Index: idx, Term: 1, Type: raft.LogCommand, Data: mustEncode(t, cmds...)}
	}
	return []*raft.Log{
		cmd(1, submitCmd("a", s, 5000, 1000), submitCmd("b", s, 5000, 1000)),
		cmd(2, submitCmd("a", s, 5000, 1000)), // same spec again: 200, no change
		{Index: 3, Term: 1, Type: raft.LogConfiguration, Data: raft.EncodeConfiguration(raftConfiguration())},
		cmd(4, fireCmd("a", 1, 1, "n1", 5000, 40000)),
		cmd(5, completeCmd("a", 1, 1, OutcomeSuccess, "", 0, 6000)),
		cmd(6, cancelCmd("b", 6000)), // frees space: a group of its own
		cmd(7, submitCmd("c", s, 9000, 7000), fireCmd("b", 1, 1, "n1", 7000, 40000)),
	}
}

// ApplyBatch gives what Apply and StoreConfiguration give one entry at a
// time: the same responses, events (per entry, in order), stored state,
// applied index and counts.
func TestApplyBatchSameAsApply(t *testing.T) {
	one, batch := newEnv(t), newEnv(t)
	recOne, recBatch := &recorder{}, &recorder{}
	one.f.SetObserver(recOne)
	batch.f.SetObserver(recBatch)
	logs := batchEntries(t)

	var want []any
	for _, l := range logs {
		if l.Type == raft.LogConfiguration {
			one.f.StoreConfiguration(l.Index, raftConfiguration())
			want = append(want, nil)
			continue
		}
		want = append(want, one.f.Apply(l))
	}
	got := batch.f.ApplyBatch(logs)
	if len(got) != len(logs) {
		t.Fatalf("ApplyBatch returned %d responses for %d entries", len(got), len(logs))
	}
	for i := range want {
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Errorf("entry %d: ApplyBatch %#v, Apply %#v", logs[i].Index, got[i], want[i])
		}
	}
	if !reflect.DeepEqual(recBatch.calls, recOne.calls) {
		t.Errorf("events:\nbatch %+v\napply %+v", recBatch.calls, recOne.calls)
	}
	if d := diffDumps(batch.dump(), one.dump()); d != "" {
		t.Errorf("stored state differs:\n%s", d)
	}
	if batch.f.AppliedIndex() != 7 || one.f.AppliedIndex() != 7 {
		t.Errorf("applied: batch %d, apply %d", batch.f.AppliedIndex(), one.f.AppliedIndex())
	}
	if b, o := fmt.Sprint(batch.f.HandlerCounts()), fmt.Sprint(one.f.HandlerCounts()); b != o {
		t.Errorf("handler counts: batch %s, apply %s", b, o)
	}
	batch.checkIndexes()

	// After a restart the same batch is skipped entry by entry: nil
	// responses, no change.
	batch.reopen()
	before := batch.dump()
	for i, r := range batch.f.ApplyBatch(logs) {
		if r != nil {
			t.Errorf("replayed entry %d returned %v", logs[i].Index, r)
		}
	}
	batch.assertUnchanged(before)
}

// A batch commits once per group of entries of the same class, not once
// per entry: the gate (called before every commit) hears one call for the
// entries before the freeing one, one for it, and one for the rest.
func TestApplyBatchOneCommitPerGroup(t *testing.T) {
	e := newEnv(t)
	var seen []bool
	e.f.SetSpaceGate(func(frees bool) error {
		seen = append(seen, frees)
		return nil
	})
	e.f.ApplyBatch(batchEntries(t))
	if want := []bool{false, true, false}; !reflect.DeepEqual(seen, want) {
		t.Fatalf("gate calls %v, want %v (entries 1-5, the cancel, entry 7)", seen, want)
	}
}

// While storage is low, a group that does not free space waits at the
// gate; the freeing entry before it in the same batch has been committed
// by then (it is not held back behind it).
func TestApplyBatchFreeingEntryNotHeldBack(t *testing.T) {
	e := newEnv(t)
	e.f.sleep = func(time.Duration) {}
	s := spec("h", "p")
	e.apply(1, submitCmd("a", s, 5000, 1000))
	refused := 0
	e.f.SetSpaceGate(func(frees bool) error {
		if !frees {
			// The cancel of the entry before must be stored already.
			if got := e.task("a").State; got != StateCancelled {
				t.Errorf("non-freeing group at the gate before the cancel before it committed: a is %v", got)
			}
			refused++
			if refused < 3 {
				return errors.New("below three quarters of the reserve")
			}
		}
		return nil
	})
	e.f.ApplyBatch([]*raft.Log{
		{Index: 2, Term: 1, Type: raft.LogCommand, Data: mustEncode(t, cancelCmd("a", 2000))},
		{Index: 3, Term: 1, Type: raft.LogCommand, Data: mustEncode(t, submitCmd("b", s, 5000, 2000))},
	})
	if refused != 3 || e.f.AppliedIndex() != 3 || e.task("b") == nil {
		t.Fatalf("refused %d, applied %d", refused, e.f.AppliedIndex())
	}
}

// Past batchFlushOps writes a group is committed at the next entry
// boundary: a long batch of small entries is several transactions.
func TestApplyBatchFlushesLargeGroups(t *testing.T) {
	e := newEnv(t)
	commits := 0
	e.f.SetSpaceGate(func(bool) error { commits++; return nil })
	s := spec("h", "p")
	var logs []*raft.Log
	for i := 1; i <= 600; i++ {
		logs = append(logs, &raft.Log{Index: uint64(i), Term: 1, Type: raft.LogCommand,
			Data: mustEncode(t, submitCmd(fmt.Sprintf("t%03d", i), s, 5000, 1000))})
	}
	e.f.ApplyBatch(logs)
	if commits < 2 || commits > 600/10 {
		t.Fatalf("%d commits for 600 one-submit entries", commits)
	}
	if e.f.AppliedIndex() != 600 {
		t.Fatalf("applied %d", e.f.AppliedIndex())
	}
	e.checkIndexes()
}
