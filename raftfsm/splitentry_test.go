package raftfsm

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/hashicorp/raft"
)

// storedTaskCounts counts the task records in db per state and per
// handler and state.
func storedTaskCounts(t testing.TB, db *badger.DB) (states [numStates]int64, perHandler map[string][numStates]int64) {
	t.Helper()
	perHandler = map[string][numStates]int64{}
	err := db.View(func(txn *badger.Txn) error {
		opts := badger.DefaultIteratorOptions
		opts.Prefix = prefixTask
		it := txn.NewIterator(opts)
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			var tk Task
			if err := it.Item().Value(func(b []byte) error { return decodeRecord(b, &tk) }); err != nil {
				return err
			}
			c := perHandler[tk.Spec.Handler]
			c[tk.State]++
			perHandler[tk.Spec.Handler] = c
			states[tk.State]++
		}
		return nil
	})
	if err != nil {
		t.Fatalf("count tasks: %v", err)
	}
	return states, perHandler
}

// recountStates counts the stored task records per state.
func recountStates(t *testing.T, db *badger.DB) [numStates]int64 {
	t.Helper()
	states, _ := storedTaskCounts(t, db)
	return states
}

// An entry too big for one badger transaction commits in parts; when the
// node stops (Abort) or crashes after a part committed and before the
// last, a restart applies the entry again, and the commands of the
// committed parts find their work done. The task counts must still match
// the records. The same holds for a group of entries raft hands over
// together (ApplyBatch), which share one writer.
func TestSplitEntryStoppedBetweenPartsKeepsCounts(t *testing.T) {
	// A group of entries is cut after 1 000 writes (writer.go), so the
	// group of 4 holds fewer, larger tasks.
	for _, c := range []struct{ entries, tasks, payload int }{{1, 2000, 4 << 10}, {4, 240, 16 << 10}} {
		t.Run(fmt.Sprintf("%d entries", c.entries), func(t *testing.T) { testSplitStoppedBetweenParts(t, c.entries, c.tasks, c.payload) })
	}
}

func testSplitStoppedBetweenParts(t *testing.T, entries, n, payloadBytes int) {
	e := newEnv(t)
	payload := bytes.Repeat([]byte("x"), payloadBytes)
	if total := int64(n * len(payload)); total <= e.db.MaxBatchSize() {
		t.Fatalf("entries of %d bytes fit one badger transaction (%d): the test would not split", total, e.db.MaxBatchSize())
	}
	var logs []*raft.Log
	per := n / entries
	for k := range entries {
		var cmds []Command
		for i := k * per; i < (k+1)*per; i++ {
			cmds = append(cmds, submitCmd(fmt.Sprintf("s-%05d", i), Spec{Handler: "h", Payload: payload, MaxAttempts: 3}, int64(10000+i), 1000))
		}
		logs = append(logs, &raft.Log{Index: uint64(k + 1), Type: raft.LogCommand, Data: mustEncode(t, cmds...)})
	}
	apply := func() {
		if entries == 1 {
			e.f.Apply(logs[0])
		} else {
			e.f.ApplyBatch(logs)
		}
	}

	// The first part commits; every later commit fails until Abort.
	commits := 0
	e.f.commitTxn = func(txn *badger.Txn) error {
		if commits++; commits == 1 {
			return txn.Commit()
		}
		return errNoSpace
	}
	sleeping := make(chan struct{}, 1)
	release := make(chan struct{})
	e.f.sleep = func(time.Duration) {
		select {
		case sleeping <- struct{}{}:
		default:
		}
		<-release
	}
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		apply()
	}()
	<-sleeping
	e.f.Abort()
	close(release)
	<-ended
	if e.f.AppliedIndex() != 0 {
		t.Fatalf("applied %d", e.f.AppliedIndex())
	}
	e.f.commitTxn, e.f.sleep = nil, nil
	// A stop saves the counts per handler (Node.Shutdown): they miss the
	// committed part as the stored per-state counts do.
	if err := e.f.SaveHandlerCounts(); err != nil {
		t.Fatal(err)
	}
	e.reopen()
	if !e.f.RecountedAfterSplit() {
		t.Fatal("Open after a stop between parts did not report counting again")
	}
	if got := recountStates(t, e.db)[StateWaiting]; got == 0 || got == int64(n) {
		t.Fatalf("%d tasks stored after the first part, want some", got)
	}
	apply()
	if got, want := e.f.Counts(), recountStates(t, e.db); got != want || want[StateWaiting] != int64(n) {
		t.Fatalf("counts %v, records %v (want %d WAITING)", got, want, n)
	}
	if hc := e.f.HandlerCounts()["h"]; hc[StateWaiting] != int64(n) {
		t.Fatalf("handler counts %v", hc)
	}
	if e.f.AppliedIndex() != uint64(entries) {
		t.Fatalf("applied %d, want %d", e.f.AppliedIndex(), entries)
	}
	e.reopen()
	if e.f.RecountedAfterSplit() {
		t.Fatal("Open after the entries completed reports counting again")
	}
	if got, want := e.f.Counts(), recountStates(t, e.db); got != want {
		t.Fatalf("after a restart: counts %v, records %v", got, want)
	}
}
