package raftstore

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/axsched/ax/engine"
	"github.com/axsched/ax/raftfsm"
)

// fakeRaft records the entries the proposer applies; each future answers
// with respond (nil: one OK result per command).
type fakeRaft struct {
	state   raft.RaftState
	entries chan []raftfsm.Command
	respond func(cmds []raftfsm.Command) (any, error)
	// hold, when set, makes the future of an entry whose first command
	// is a CmdNode (a CmdSubmit with holdSubmits) wait on it (an entry
	// not yet committed).
	hold        chan struct{}
	holdSubmits bool
}

func (r *fakeRaft) State() raft.RaftState { return r.state }

func (r *fakeRaft) Apply(data []byte, _ time.Duration) raft.ApplyFuture {
	cmds, err := raftfsm.DecodeEntry(data)
	if err != nil {
		return &doneFuture{err: err}
	}
	r.entries <- cmds
	held := raftfsm.CmdNode
	if r.holdSubmits {
		held = raftfsm.CmdSubmit
	}
	var f *doneFuture
	if r.respond != nil {
		resp, err := r.respond(cmds)
		f = &doneFuture{resp: resp, err: err}
	} else {
		res := make([]raftfsm.Result, len(cmds))
		for i := range res {
			res[i] = raftfsm.Result{Code: raftfsm.CodeOK, Index: 7}
		}
		f = &doneFuture{resp: res, index: 7}
	}
	if r.hold != nil && len(cmds) > 0 && cmds[0].Type == held {
		f.block = r.hold
	}
	return f
}

// doneFuture is a raft.ApplyFuture that is complete (or, with block,
// never completes).
type doneFuture struct {
	resp  any
	err   error
	index uint64
	block chan struct{}
}

func (f *doneFuture) Error() error {
	if f.block != nil {
		<-f.block
	}
	return f.err
}
func (f *doneFuture) Index() uint64    { return f.index }
func (f *doneFuture) Response() any    { return f.resp }
func (f *doneFuture) Opaque() any      { return nil }
func (f *doneFuture) Result() any      { return f.resp }
func (f *doneFuture) OpaqueData() any  { return nil }
func (f *doneFuture) Unwrap() any      { return nil }
func (f *doneFuture) Term() uint64     { return 1 }
func (f *doneFuture) Timestamp() int64 { return 0 }

func nodeCmd(id string) raftfsm.Command {
	return raftfsm.Command{Type: raftfsm.CmdNode, Node: &raftfsm.Node{ID: id}}
}

func cancelCmd(id string) raftfsm.Command {
	return raftfsm.Command{Type: raftfsm.CmdCancel, Cancel: &raftfsm.Cancel{ID: id}}
}

// A node that does not lead refuses at once, before admission or the
// storage wait.
func TestProposerNotLeader(t *testing.T) {
	p := NewProposer(ProposerConfig{Raft: &fakeRaft{state: raft.Follower}})
	if _, err := p.Propose(context.Background(), []raftfsm.Command{nodeCmd("a")}); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("follower: %v, want ErrNotLeader", err)
	}
}

// Proposals queued while an entry is built share the next entry, each
// gets its own results, and Prepare sees every command with the clock's
// time.
func TestProposerGroupsQueuedProposals(t *testing.T) {
	r := &fakeRaft{state: raft.Leader, entries: make(chan []raftfsm.Command, 8)}
	clock := engine.NewFakeClock(time.UnixMilli(1_700_000_000_000))
	var prepared []time.Time
	p := NewProposer(ProposerConfig{Raft: r, Clock: clock, Prepare: func(c *raftfsm.Command, now time.Time) { prepared = append(prepared, now) }})
	prs := []*proposal{
		{cmds: []raftfsm.Command{nodeCmd("a")}, done: make(chan proposalResult, 1), warnings: map[int]string{0: "4/5"}},
		{cmds: []raftfsm.Command{nodeCmd("b"), nodeCmd("c")}, done: make(chan proposalResult, 1)},
	}
	for _, pr := range prs {
		p.ch <- pr
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go p.Run(ctx)
	if e := <-r.entries; len(e) != 3 {
		t.Fatalf("entry of %d commands, want the 3 queued", len(e))
	}
	a, bc := <-prs[0].done, <-prs[1].done
	if a.err != nil || len(a.results) != 1 || a.results[0].Warning != "4/5" {
		t.Fatalf("first proposal: %+v", a)
	}
	if bc.err != nil || len(bc.results) != 2 || bc.results[0].Warning != "" {
		t.Fatalf("second proposal: %+v", bc)
	}
	if len(prepared) != 3 || !prepared[0].Equal(clock.Now()) {
		t.Fatalf("prepared %v", prepared)
	}
	res, err := p.Propose(ctx, []raftfsm.Command{nodeCmd("d")})
	if err != nil || len(res) != 1 || res[0].Index != 7 {
		t.Fatalf("Propose: %v %+v", err, res)
	}
}

// While storage is low, freeing commands (cancels, purges) and others go
// into separate entries: the FSM applies only freeing ones there.
func TestProposerKeepsFreeingEntriesApartWhileLow(t *testing.T) {
	g, free, _ := lowGuard(t)
	free.Store(testReserve * 5 / 8) // freeing only: below ¾R
	g.Probe()
	if g.Err() == nil {
		t.Fatal("storage should be unavailable")
	}
	// The node's entry stays uncommitted: its answer must be the storage
	// state, not the race between a done future and the state check.
	r := &fakeRaft{state: raft.Leader, entries: make(chan []raftfsm.Command, 8), hold: make(chan struct{})}
	defer close(r.hold)
	p := NewProposer(ProposerConfig{Raft: r, Guard: g})
	prs := []*proposal{
		{cmds: []raftfsm.Command{cancelCmd("a")}, done: make(chan proposalResult, 1)},
		{cmds: []raftfsm.Command{nodeCmd("n")}, done: make(chan proposalResult, 1)},
	}
	for _, pr := range prs {
		p.ch <- pr
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go p.Run(ctx)
	first, second := <-r.entries, <-r.entries
	if len(first) != 1 || first[0].Type != raftfsm.CmdCancel || len(second) != 1 || second[0].Type != raftfsm.CmdNode {
		t.Fatalf("entries %v then %v, want the cancel alone, then the node", first, second)
	}
	if r := <-prs[0].done; r.err != nil {
		t.Fatalf("cancel: %v", r.err)
	}
	// The node's entry is answered with the storage state, not held: the
	// FSM does not apply it here.
	var se *StorageUnavailableError
	if r := <-prs[1].done; !errors.As(r.err, &se) {
		t.Fatalf("node entry while storage is low: %v, want *StorageUnavailableError", r.err)
	}
	// A new proposal of other commands waits for storage until ctx ends.
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer wcancel()
	if _, err := p.Propose(wctx, []raftfsm.Command{nodeCmd("m")}); !errors.As(err, &se) {
		t.Fatalf("Propose while low: %v, want *StorageUnavailableError", err)
	}
}

// raft's answers reach the proposals: raft.ErrNotLeader as ErrNotLeader,
// a response that is not one result per command as an error.
func TestProposerApplyErrors(t *testing.T) {
	for _, c := range []struct {
		name    string
		respond func([]raftfsm.Command) (any, error)
		check   func(error) bool
	}{
		{"not leader", func([]raftfsm.Command) (any, error) { return nil, raft.ErrNotLeader }, func(err error) bool { return errors.Is(err, ErrNotLeader) }},
		{"lost", func([]raftfsm.Command) (any, error) { return nil, raft.ErrLeadershipLost }, func(err error) bool { return errors.Is(err, raft.ErrLeadershipLost) }},
		{"short response", func([]raftfsm.Command) (any, error) { return []raftfsm.Result{}, nil }, func(err error) bool {
			return err != nil && strings.Contains(err.Error(), "unexpected apply response")
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := &fakeRaft{state: raft.Leader, entries: make(chan []raftfsm.Command, 8), respond: c.respond}
			p := NewProposer(ProposerConfig{Raft: r})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go p.Run(ctx)
			if _, err := p.Propose(ctx, []raftfsm.Command{nodeCmd("a")}); !c.check(err) {
				t.Fatalf("got %v", err)
			}
		})
	}
}

// waitFuture answers at once when storage becomes unavailable while the
// entry is pending, and with the future's error otherwise.
func TestProposerWaitFutureStorageDown(t *testing.T) {
	g, free, _ := lowGuard(t)
	g.Probe()
	p := NewProposer(ProposerConfig{Raft: &fakeRaft{state: raft.Leader}, Guard: g})
	if err := p.waitFuture(context.Background(), &doneFuture{err: raft.ErrLeadershipLost}, false); !errors.Is(err, raft.ErrLeadershipLost) {
		t.Fatalf("completed future: %v", err)
	}
	pending := &doneFuture{block: make(chan struct{})}
	defer close(pending.block)
	errc := make(chan error, 1)
	go func() { errc <- p.waitFuture(context.Background(), pending, false) }()
	free.Store(1 << 20) // below the floor
	g.Probe()
	var se *StorageUnavailableError
	if err := <-errc; !errors.As(err, &se) {
		t.Fatalf("pending future with storage down: %v", err)
	}
	if err := p.waitFuture(context.Background(), pending, true); !errors.As(err, &se) {
		t.Fatalf("freeing entry below the floor: %v", err)
	}
}

// An entry proposed just before the API starts refusing writes (free
// space inside the reserve, above the FSM's gate) is still applied on
// this node, so its callers wait for its outcome instead of hearing a 503
// for a write that took effect (a CI run saw 4 of 15 500 cancels answered
// 503 that way while a snapshot was being written). Below ¾R the FSM
// applies only freeing entries: a pending other entry answers at once.
func TestProposerWaitFutureWaitsWhileTheNodeStillApplies(t *testing.T) {
	g, free, _ := lowGuard(t)
	free.Store(testReserve - 1) // inside the reserve, above ¾R
	g.Probe()
	if g.Err() == nil {
		t.Fatal("guard accepts writes inside the reserve")
	}
	p := NewProposer(ProposerConfig{Raft: &fakeRaft{state: raft.Leader}, Guard: g})
	for _, freeing := range []bool{false, true} {
		pending := &doneFuture{block: make(chan struct{})}
		errc := make(chan error, 1)
		go func() { errc <- p.waitFuture(context.Background(), pending, freeing) }()
		select {
		case err := <-errc:
			t.Fatalf("freeing=%v: answered %v before the entry was applied", freeing, err)
		case <-time.After(200 * time.Millisecond):
		}
		close(pending.block)
		if err := <-errc; err != nil {
			t.Fatalf("freeing=%v: %v", freeing, err)
		}
	}
	pending := &doneFuture{block: make(chan struct{})}
	defer close(pending.block)
	errc := make(chan error, 1)
	go func() { errc <- p.waitFuture(context.Background(), pending, false) }()
	free.Store(testReserve*3/4 - 1) // the FSM applies only freeing entries
	var se *StorageUnavailableError
	if err := <-errc; !errors.As(err, &se) {
		t.Fatalf("pending other entry below ¾R: %v", err)
	}
}

func TestCmdBytes(t *testing.T) {
	cmds := []raftfsm.Command{nodeCmd("a"), {Type: raftfsm.CmdSubmit, Submit: &raftfsm.Submit{ID: "s", Spec: raftfsm.Spec{Payload: make([]byte, 10)}}}}
	if n := cmdBytes(cmds); n != 10 {
		t.Fatalf("cmdBytes %d, want 10", n)
	}
}

// A proposal that finds the proposer idle is applied on its caller's
// goroutine (Run is not even started here); one that finds an entry being
// built, or proposals queued, queues for Run.
func TestProposerAppliesDirectlyWhenIdle(t *testing.T) {
	r := &fakeRaft{state: raft.Leader, entries: make(chan []raftfsm.Command, 8)}
	p := NewProposer(ProposerConfig{Raft: r})
	res, err := p.Propose(context.Background(), []raftfsm.Command{nodeCmd("a")})
	if err != nil || len(res) != 1 || res[0].Index != 7 {
		t.Fatalf("idle proposer: %v %+v", err, res)
	}
	if e := <-r.entries; len(e) != 1 || e[0].Node.ID != "a" {
		t.Fatalf("entry %v", e)
	}

	p.running.Store(true) // Run is building an entry
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := p.Propose(ctx, []raftfsm.Command{nodeCmd("b")}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("while Run builds: %v, want the proposal queued until ctx ends", err)
	}
	if len(p.ch) != 1 || len(r.entries) != 0 {
		t.Fatalf("while Run builds: %d queued, %d applied; want 1 queued", len(p.ch), len(r.entries))
	}
	p.running.Store(false)
	ctx2, cancel2 := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel2()
	if _, err := p.Propose(ctx2, []raftfsm.Command{nodeCmd("c")}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("behind a queued proposal: %v, want it queued too", err)
	}
	if len(p.ch) != 2 || len(r.entries) != 0 {
		t.Fatalf("behind a queued proposal: %d queued, %d applied; want 2 queued", len(p.ch), len(r.entries))
	}
}

// A caller on the direct path waits for its entry on its own goroutine
// and hears ctx's end while the entry is pending; the proposer is idle
// again as soon as the entry is handed to raft, so another caller takes
// the direct path meanwhile (Run is not started here) when the entries in
// flight are not bounded (a single node; with the group commit's bound the
// second caller would gather into Run's next entry:
// TestProposerGroupsWhileEntriesInFlight).
func TestProposerDirectCallerWaitsOnItsOwn(t *testing.T) {
	r := &fakeRaft{state: raft.Leader, entries: make(chan []raftfsm.Command, 8), hold: make(chan struct{})}
	defer close(r.hold)
	p := NewProposer(ProposerConfig{Raft: r, MaxInflightEntries: -1})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := p.Propose(ctx, []raftfsm.Command{nodeCmd("held")})
		errc <- err
	}()
	if e := <-r.entries; e[0].Node.ID != "held" {
		t.Fatalf("entry %v", e)
	}
	// The entry reaches raft a moment before the first caller marks the
	// proposer idle again (applyDirect clears direct after raft.Apply
	// returns); a second caller in that moment queues for Run, which this
	// test does not start. Wait for the mark, as a caller arriving a
	// little later would find it.
	for deadline := time.Now().Add(10 * time.Second); p.direct.Load(); time.Sleep(100 * time.Microsecond) {
		if time.Now().After(deadline) {
			t.Fatal("the first caller never marked the proposer idle after handing its entry to raft")
		}
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	res, err := p.Propose(ctx2, []raftfsm.Command{cancelCmd("x")})
	if err != nil || len(res) != 1 || res[0].Index != 7 {
		t.Fatalf("second caller while the first waits: %v %+v", err, res)
	}
	if len(p.ch) != 0 {
		t.Fatalf("%d proposals queued, want the second applied directly", len(p.ch))
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("first caller after its ctx ended: %v, want context.Canceled", err)
	}
}

// A Complete's Prepare reads the task (and a stage task's flow) from this
// node's store, which on a new leader may still lack entries of earlier
// terms: with it a successful run of a recurring task that the store has
// not seen yet (its Submit, or its Fire, not applied) decided no next run,
// and the schedule ended for good. So the proposer holds a proposal with
// such a command until CaughtUp's channel is closed (the barrier after
// the election has returned), at most caughtUpWait, or until its ctx
// ends; a proposal without one (a submit) goes at once, also while a
// Complete waits.
func TestProposerHoldsStoreReadsUntilCaughtUp(t *testing.T) {
	r := &fakeRaft{state: raft.Leader, entries: make(chan []raftfsm.Command, 8)}
	clock := engine.NewFakeClock(time.UnixMilli(1_700_000_000_000))
	var mu sync.Mutex
	var prepared []raftfsm.CommandType
	caught := make(chan struct{})
	p := NewProposer(ProposerConfig{Raft: r, Clock: clock,
		Prepare: func(c *raftfsm.Command, _ time.Time) {
			mu.Lock()
			prepared = append(prepared, c.Type)
			mu.Unlock()
		},
		CaughtUp: func() <-chan struct{} {
			mu.Lock()
			defer mu.Unlock()
			return caught
		}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go p.Run(ctx)
	preparedSoFar := func() []raftfsm.CommandType {
		mu.Lock()
		defer mu.Unlock()
		return append([]raftfsm.CommandType(nil), prepared...)
	}
	complete := func(id string) []raftfsm.Command {
		return []raftfsm.Command{{Type: raftfsm.CmdComplete, Complete: &raftfsm.Complete{ID: id, Attempt: 1, Outcome: raftfsm.OutcomeSuccess}}}
	}
	propose := func(ctx context.Context, cmds []raftfsm.Command) <-chan error {
		errc := make(chan error, 1)
		go func() {
			_, err := p.Propose(ctx, cmds)
			errc <- err
		}()
		return errc
	}
	wait := func(errc <-chan error, what string) error {
		t.Helper()
		select {
		case err := <-errc:
			return err
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: Propose did not return within 10 s", what)
			return nil
		}
	}

	waiting := func(what string) { // the Complete waits on the bound's timer
		t.Helper()
		bctx, bcancel := context.WithTimeout(ctx, 10*time.Second)
		defer bcancel()
		if clock.BlockUntilContext(bctx, 1) != nil {
			t.Fatalf("%s: the Complete is not waiting for CaughtUp", what)
		}
	}

	// Held until the channel closes; a submit meanwhile goes at once.
	held := propose(ctx, complete("a"))
	waiting("before CaughtUp")
	submit := []raftfsm.Command{{Type: raftfsm.CmdSubmit, Submit: &raftfsm.Submit{ID: "s", Spec: raftfsm.Spec{Handler: "h"}}}}
	if err := wait(propose(ctx, submit), "submit while a Complete waits"); err != nil {
		t.Fatalf("submit while a Complete waits: %v", err)
	}
	if e := <-r.entries; len(e) != 1 || e[0].Type != raftfsm.CmdSubmit {
		t.Fatalf("entry %v, want the submit alone", e)
	}
	if got := preparedSoFar(); len(got) != 1 || got[0] != raftfsm.CmdSubmit || len(r.entries) != 0 || clock.Armed() != 1 {
		t.Fatalf("before CaughtUp: prepared %v, %d more entries, %d timers; want the submit only, the Complete still waiting", got, len(r.entries), clock.Armed())
	}
	close(caught)
	if err := wait(held, "Complete after CaughtUp"); err != nil {
		t.Fatalf("Complete after CaughtUp: %v", err)
	}
	if e := <-r.entries; len(e) != 1 || e[0].Type != raftfsm.CmdComplete {
		t.Fatalf("entry %v, want the Complete", e)
	}
	if got := preparedSoFar(); len(got) != 2 || got[1] != raftfsm.CmdComplete {
		t.Fatalf("prepared %v, want the Complete after the submit", got)
	}
	// Caught up: no wait, no timer.
	if err := wait(propose(ctx, complete("b")), "Complete once caught up"); err != nil || clock.Armed() != 0 {
		t.Fatalf("Complete once caught up: %v, %d timers armed", err, clock.Armed())
	}
	<-r.entries

	// A new term: open again. After caughtUpWait it goes all the same.
	mu.Lock()
	caught = make(chan struct{})
	mu.Unlock()
	late := propose(ctx, complete("c"))
	waiting("in a new term")
	clock.Advance(caughtUpWait - time.Millisecond)
	if clock.Armed() != 1 || len(r.entries) != 0 {
		t.Fatalf("before caughtUpWait: %d timers, %d entries; want the Complete still waiting", clock.Armed(), len(r.entries))
	}
	clock.Advance(time.Millisecond)
	if err := wait(late, "Complete after caughtUpWait"); err != nil {
		t.Fatalf("Complete after caughtUpWait: %v", err)
	}
	if e := <-r.entries; len(e) != 1 || e[0].Complete.ID != "c" || p.late.Load() != 1 {
		t.Fatalf("entry %v, %d late; want c's Complete, counted late", e, p.late.Load())
	}

	// The caller's ctx ends first: its error, nothing proposed.
	cctx, ccancel := context.WithCancel(ctx)
	gone := propose(cctx, complete("d"))
	waiting("before its ctx ends")
	ccancel()
	if err := wait(gone, "Complete whose ctx ends"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Complete whose ctx ends while it waits: %v, want context.Canceled", err)
	}
	if got := preparedSoFar(); len(got) != 4 || len(r.entries) != 0 {
		t.Fatalf("after ctx ended: prepared %v, %d entries; want nothing more", got, len(r.entries))
	}
}
