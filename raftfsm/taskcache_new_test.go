package raftfsm

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/dgraph-io/badger/v4"
)

// checkCacheMatchesStore: every cached task record is the stored one.
func checkCacheMatchesStore(t *testing.T, e *env) {
	t.Helper()
	e.f.tasks.mu.Lock()
	defer e.f.tasks.mu.Unlock()
	err := e.db.View(func(txn *badger.Txn) error {
		for k, r := range e.f.tasks.m {
			it, err := txn.Get([]byte(k))
			if err != nil {
				t.Errorf("cached %q: stored: %v", k, err)
				continue
			}
			v, _ := it.ValueCopy(nil)
			if !bytes.Equal(v, r.val) {
				t.Errorf("cached %q differs from the stored record", k)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A finished task purged and submitted again due a day later
// (a new record: putTaskRecord, fresh and not kept), in one entry or two, with the
// entry's write split into parts around the purge and the submit (900 KB
// payloads): no stale record answers, and every cached record is the
// stored one. (Written by the review of the uncached new records.)
func TestTaskCacheNewRecordAfterPurge(t *testing.T) {
	big := bytes.Repeat([]byte("x"), 900<<10)
	for _, sameEntry := range []bool{true, false} {
		for _, bigBefore := range []int{0, 1, 3} {
			for _, bigBetween := range []int{0, 3} {
				t.Run(fmt.Sprintf("same%v-before%d-between%d", sameEntry, bigBefore, bigBetween), func(t *testing.T) {
					e := newEnv(t)
					s := Spec{Handler: "h", TimeoutNs: 30e9, MaxAttempts: 3}
					const at = 1_000_000
					ep := e.apply1(1, submitCmd("x", s, at, at)).Task.Epoch
					e.apply1(2, fireCmd("x", ep, 1, "n1", at, at+40_000))
					if _, ok := e.f.tasks.m[string(taskKey("x"))]; !ok {
						t.Fatal("x not cached after its fire")
					}
					e.apply1(3, completeCmd("x", ep, 1, OutcomeSuccess, "", 0, at+10))
					done := e.task("x")
					if _, ok := e.f.tasks.m[string(taskKey("x"))]; ok {
						t.Fatal("x still cached in its final state")
					}
					var cmds1, cmds2 []Command
					for i := range bigBefore {
						cmds1 = append(cmds1, submitCmd(fmt.Sprintf("b%d", i), Spec{Handler: "big", Payload: big, MaxAttempts: 3}, at, at))
					}
					cmds1 = append(cmds1, purgeCmd(targetOf(done)))
					for i := range bigBetween {
						cmds1 = append(cmds1, submitCmd(fmt.Sprintf("c%d", i), Spec{Handler: "big", Payload: big, MaxAttempts: 3}, at, at))
					}
					later := submitCmd("x", s, at+86_400_000, at+20)
					idx := uint64(4)
					var rs []Result
					if sameEntry {
						rs = e.apply(idx, append(cmds1, later)...)
					} else {
						e.apply(idx, cmds1...)
						idx++
						cmds2 = append(cmds2, later)
						rs = e.apply(idx, cmds2...)
					}
					newEp := rs[len(rs)-1].Task.Epoch
					if !rs[len(rs)-1].Created {
						t.Fatalf("resubmit not created: %+v", rs[len(rs)-1])
					}
					checkCacheMatchesStore(t, e)
					idx++
					if r := e.apply1(idx, fireCmd("x", ep, 1, "n1", at+86_400_000, at+86_440_000)); r.Code == CodeOK {
						t.Fatalf("fire of the purged run's epoch accepted: %+v", r)
					}
					idx++
					if r := e.apply1(idx, fireCmd("x", newEp, 1, "n1", at+86_400_000, at+86_440_000)); r.Code != CodeOK {
						t.Fatalf("fire of the new task: %+v", r)
					}
					if got := e.task("x"); got.State != StateRunning || got.Epoch != newEp {
						t.Fatalf("x: %v epoch %d, want RUNNING epoch %d", got.State, got.Epoch, newEp)
					}
					checkCacheMatchesStore(t, e)
					e.checkIndexes()
				})
			}
		}
	}
}

// A new task due a day later (not cached) overwritten in the same entry,
// then cancelled and submitted again (without overwrite: no change) in
// the next: every cached record is the stored one.
func TestTaskCacheNewRecordThenWrites(t *testing.T) {
	e := newEnv(t)
	s := Spec{Handler: "h", TimeoutNs: 30e9, MaxAttempts: 3}
	const at = 1_000_000
	e.apply(1, submitCmd("y", s, at+86_400_000, at), overwriteCmd("y", s, at+86_400_000+5, at+1))
	checkCacheMatchesStore(t, e)
	e.apply(2, cancelCmd("y", at+2), submitCmd("y", s, at+86_400_000, at+3))
	if got := e.task("y").State; got != StateCancelled {
		t.Fatalf("y: %v, want CANCELLED", got)
	}
	checkCacheMatchesStore(t, e)
	e.checkIndexes()
}
