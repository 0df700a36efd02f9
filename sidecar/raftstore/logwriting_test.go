package raftstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/axsched/ax/raftfsm"
)

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func TestLogWritingIdle(t *testing.T) {
	var w LogWriting
	if !closed(w.Idle()) {
		t.Fatal("zero value: Idle not closed, want no write in progress")
	}
	w.begin()
	during := w.Idle()
	if closed(during) || w.Idle() != during {
		t.Fatal("during a write: Idle closed, or a new channel per call")
	}
	w.end()
	if !closed(during) || !closed(w.Idle()) {
		t.Fatal("after the write: Idle not closed")
	}
	w.begin() // a write nobody waited for
	w.end()
	if !closed(w.Idle()) {
		t.Fatal("after a second write: Idle not closed")
	}
}

// blockingLogStore holds each StoreLogs until release gets a value, and
// returns err then.
type blockingLogStore struct {
	raft.LogStore
	entered chan struct{}
	release chan struct{}
	err     error
}

func (s *blockingLogStore) StoreLogs(ls []*raft.Log) error {
	s.entered <- struct{}{}
	<-s.release
	if s.err != nil {
		return s.err
	}
	return s.LogStore.StoreLogs(ls)
}

// The tail cache tells LogWriting when each write starts and returns,
// also when the store refuses it.
func TestTailCacheTellsLogWriting(t *testing.T) {
	for _, fail := range []error{nil, errors.New("disk full")} {
		s := &blockingLogStore{LogStore: raft.NewInmemStore(), entered: make(chan struct{}), release: make(chan struct{}), err: fail}
		c := newTailCache(s, 8, 1<<20)
		var w LogWriting
		c.writing = &w
		errc := make(chan error, 1)
		go func() { errc <- c.StoreLogs([]*raft.Log{{Index: 1, Term: 1, Data: []byte("a")}}) }()
		<-s.entered
		idle := w.Idle()
		if closed(idle) {
			t.Fatalf("store error %v: Idle closed during the write", fail)
		}
		s.release <- struct{}{}
		if err := <-errc; !errors.Is(err, fail) {
			t.Fatalf("StoreLogs = %v, want %v", err, fail)
		}
		if !closed(idle) || !closed(w.Idle()) {
			t.Fatalf("store error %v: Idle not closed after the write", fail)
		}
	}
}

// With LogWrites, what arrives while the log is written waits for the
// write's end and goes as one entry: a caller does not take the direct
// path, and Run holds what it gathered until the write ends.
func TestProposerHoldsEntriesWhileTheLogIsWritten(t *testing.T) {
	r := &fakeRaft{state: raft.Leader, entries: make(chan []raftfsm.Command, 8)}
	var w LogWriting
	w.begin()
	p := NewProposer(ProposerConfig{Raft: r, MaxInflightEntries: -1, LogWrites: &w})

	// Run is not started: a caller that finds the write queues.
	ctx1, cancel1 := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel1()
	results := make(chan error, 1)
	go func() {
		_, err := p.Propose(ctx1, []raftfsm.Command{nodeCmd("a")})
		results <- err
	}()
	if err := <-results; !errors.Is(err, context.DeadlineExceeded) || len(p.ch) != 1 || len(r.entries) != 0 {
		t.Fatalf("during a write: %v, %d queued, %d applied; want the proposal queued, not applied", err, len(p.ch), len(r.entries))
	}
	p.ch <- &proposal{cmds: []raftfsm.Command{nodeCmd("b"), nodeCmd("c")}, done: make(chan proposalResult, 1)}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go p.Run(ctx)
	select {
	case e := <-r.entries:
		t.Fatalf("entry %v proposed while the log was written", e)
	case <-time.After(50 * time.Millisecond):
	}
	w.end()
	if e := <-r.entries; len(e) != 3 {
		t.Fatalf("after the write: an entry of %d commands, want the 3 gathered", len(e))
	}
	// No write now: a lone caller goes directly.
	if res, err := p.Propose(context.Background(), []raftfsm.Command{nodeCmd("d")}); err != nil || len(res) != 1 {
		t.Fatalf("after the write: %v %+v", err, res)
	}
	if e := <-r.entries; len(e) != 1 || e[0].Node.ID != "d" {
		t.Fatalf("after the write: entry %v, want d's alone", e)
	}
}
