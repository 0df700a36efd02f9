package raftstore

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/axsched/ax/raftfsm"
)

// handRaft is a fake Raft whose futures the test completes by hand: each
// Apply sends its entry on entries, and the entry's future completes when
// the test calls commit or fail on it.
type handRaft struct {
	mu      sync.Mutex
	state   raft.RaftState
	entries chan *handEntry
}

type handEntry struct {
	cmds []raftfsm.Command
	f    *handFuture
}

func (e *handEntry) commit() {
	res := make([]raftfsm.Result, len(e.cmds))
	for i := range res {
		res[i] = raftfsm.Result{Code: raftfsm.CodeOK, Index: 9}
	}
	e.f.resp = res
	close(e.f.done)
}

func (e *handEntry) fail(err error) { e.f.err = err; close(e.f.done) }

func (r *handRaft) State() raft.RaftState {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.state
}

func (r *handRaft) setState(s raft.RaftState) { r.mu.Lock(); r.state = s; r.mu.Unlock() }

func (r *handRaft) Apply(data []byte, _ time.Duration) raft.ApplyFuture {
	if r.State() != raft.Leader {
		return &doneFuture{err: raft.ErrNotLeader}
	}
	cmds, err := raftfsm.DecodeEntry(data)
	if err != nil {
		return &doneFuture{err: err}
	}
	f := &handFuture{done: make(chan struct{})}
	r.entries <- &handEntry{cmds: cmds, f: f}
	return f
}

type handFuture struct {
	done chan struct{}
	resp any
	err  error
}

func (f *handFuture) Error() error     { <-f.done; return f.err }
func (f *handFuture) Index() uint64    { return 9 }
func (f *handFuture) Response() any    { return f.resp }
func (f *handFuture) Opaque() any      { return nil }
func (f *handFuture) Result() any      { return f.resp }
func (f *handFuture) OpaqueData() any  { return nil }
func (f *handFuture) Unwrap() any      { return nil }
func (f *handFuture) Term() uint64     { return 1 }
func (f *handFuture) Timestamp() int64 { return 0 }

// until yields until cond holds (a wait for the proposer's goroutines,
// not a timed assertion); a proposer that never gets there fails the test
// after a minute rather than hanging it.
func until(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("the proposer never got there")
		}
		runtime.Gosched()
	}
}

type proposeOutcome struct {
	res []raftfsm.Result
	err error
}

func proposeAsync(ctx context.Context, p *Proposer, cmds ...raftfsm.Command) chan proposeOutcome {
	out := make(chan proposeOutcome, 1)
	go func() {
		res, err := p.Propose(ctx, cmds)
		out <- proposeOutcome{res, err}
	}()
	return out
}

func entryIDs(e *handEntry) []string {
	ids := make([]string, len(e.cmds))
	for i, c := range e.cmds {
		ids[i] = c.Node.ID
	}
	return ids
}

// startGroupCommit returns a leader's proposer over a handRaft with at
// most one entry in flight, with entry a proposed through the direct path
// and not yet committed, and Run holding proposal b, waiting for a.
func startGroupCommit(t *testing.T, ctx context.Context, maxCmds int) (*handRaft, *Proposer, *handEntry, chan proposeOutcome, *proposal) {
	t.Helper()
	r := &handRaft{state: raft.Leader, entries: make(chan *handEntry, 8)}
	p := NewProposer(ProposerConfig{Raft: r, MaxInflightEntries: 1, MaxBatchCommands: maxCmds})
	go p.Run(ctx)
	a := proposeAsync(ctx, p, nodeCmd("a"))
	ea := <-r.entries
	if ids := entryIDs(ea); len(ids) != 1 || ids[0] != "a" {
		t.Fatalf("first entry %v, want [a] alone (direct path)", ids)
	}
	b := queue(t, p, nodeCmd("b"))
	return r, p, ea, a, b
}

// queue hands Run a proposal of cmds, as Propose does when it cannot take
// the direct path, and waits until Run has taken it.
func queue(t *testing.T, p *Proposer, cmds ...raftfsm.Command) *proposal {
	t.Helper()
	pr := &proposal{cmds: cmds, done: make(chan proposalResult, 1)}
	p.ch <- pr
	until(t, func() bool { return len(p.ch) == 0 })
	return pr
}

// While an entry is in flight at the bound, Run does not propose the next
// one: the proposals that arrive meanwhile gather, and go out in one
// entry once the first is applied; each caller gets its own results.
func TestProposerGroupsWhileEntriesInFlight(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r, p, ea, a, b := startGroupCommit(t, ctx, 0)
	c := queue(t, p, nodeCmd("c"))
	d := queue(t, p, nodeCmd("d"), nodeCmd("e"))
	if n := len(r.entries); n != 0 {
		t.Fatalf("%d entries proposed while one was in flight at the bound", n)
	}
	ea.commit()
	if o := <-a; o.err != nil || len(o.res) != 1 || o.res[0].Index != 9 {
		t.Fatalf("a: %+v", o)
	}
	eb := <-r.entries
	if ids := entryIDs(eb); len(ids) != 4 || ids[0] != "b" {
		t.Fatalf("next entry %v, want b, c, d, e in one", ids)
	}
	eb.commit()
	if o := <-b.done; o.err != nil || len(o.results) != 1 {
		t.Fatalf("b: %+v", o)
	}
	if o := <-c.done; o.err != nil || len(o.results) != 1 {
		t.Fatalf("c: %+v", o)
	}
	if o := <-d.done; o.err != nil || len(o.results) != 2 {
		t.Fatalf("d: %+v", o)
	}
	// Nothing in flight: a lone caller goes straight through again.
	f := proposeAsync(ctx, p, nodeCmd("f"))
	ef := <-r.entries
	if ids := entryIDs(ef); len(ids) != 1 || ids[0] != "f" {
		t.Fatalf("lone caller's entry %v", ids)
	}
	ef.commit()
	if o := <-f; o.err != nil {
		t.Fatalf("f: %v", o.err)
	}
}

// A bound of two lets a second entry go out while the first is in flight,
// and a third waits for one of them.
func TestProposerInflightBound(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := &handRaft{state: raft.Leader, entries: make(chan *handEntry, 8)}
	p := NewProposer(ProposerConfig{Raft: r, MaxInflightEntries: 2})
	go p.Run(ctx)
	a := proposeAsync(ctx, p, nodeCmd("a"))
	ea := <-r.entries
	b := proposeAsync(ctx, p, nodeCmd("b"))
	eb := <-r.entries
	c := &proposal{cmds: []raftfsm.Command{nodeCmd("c")}, done: make(chan proposalResult, 1)}
	p.ch <- c
	until(t, func() bool { return len(p.ch) == 0 })
	if n := len(r.entries); n != 0 {
		t.Fatalf("%d entries proposed beyond the bound of 2", n)
	}
	eb.commit() // the later entry's outcome frees a slot just as well
	ec := <-r.entries
	if ids := entryIDs(ec); len(ids) != 1 || ids[0] != "c" {
		t.Fatalf("third entry %v", ids)
	}
	ea.commit()
	ec.commit()
	for _, o := range []chan proposeOutcome{a, b} {
		if r := <-o; r.err != nil {
			t.Fatalf("%v", r.err)
		}
	}
	if o := <-c.done; o.err != nil {
		t.Fatalf("c: %v", o.err)
	}
}

// Leadership lost while an entry is in flight: its callers hear raft's
// error, and every caller gathered behind it hears ErrNotLeader (the next
// entry is refused), none is left waiting.
func TestProposerGroupCommitLeadershipLost(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r, p, ea, a, b := startGroupCommit(t, ctx, 0)
	c := queue(t, p, nodeCmd("c"))
	r.setState(raft.Follower)
	ea.fail(raft.ErrLeadershipLost)
	if o := <-a; !errors.Is(o.err, raft.ErrLeadershipLost) {
		t.Fatalf("a: %v, want raft.ErrLeadershipLost", o.err)
	}
	if o := <-b.done; !errors.Is(o.err, ErrNotLeader) {
		t.Fatalf("b: %v, want ErrNotLeader", o.err)
	}
	if o := <-c.done; !errors.Is(o.err, ErrNotLeader) {
		t.Fatalf("c: %v, want ErrNotLeader", o.err)
	}
}

// A caller whose ctx ends while it waits behind the bound gets ctx's
// error; Run, waiting for a slot, returns when its own ctx ends.
func TestProposerGroupCommitCancel(t *testing.T) {
	rctx, rcancel := context.WithCancel(context.Background())
	r := &handRaft{state: raft.Leader, entries: make(chan *handEntry, 8)}
	p := NewProposer(ProposerConfig{Raft: r, MaxInflightEntries: 1})
	stopped := make(chan struct{})
	go func() { p.Run(rctx); close(stopped) }()
	a := proposeAsync(context.Background(), p, nodeCmd("a"))
	ea := <-r.entries
	cctx, ccancel := context.WithCancel(context.Background())
	c := proposeAsync(cctx, p, nodeCmd("c"))
	until(t, func() bool { return p.running.Load() }) // Run took c, waits for a slot
	ccancel()
	if o := <-c; !errors.Is(o.err, context.Canceled) {
		t.Fatalf("c: %v, want context.Canceled", o.err)
	}
	rcancel()
	<-stopped
	if n := len(r.entries); n != 0 {
		t.Fatalf("%d entries proposed after Run stopped", n)
	}
	ea.commit()
	if o := <-a; o.err != nil {
		t.Fatalf("a: %v", o.err)
	}
}

// A full entry (MaxBatchCommands) does not wait for the bound: a proposal
// that fills one by itself goes at once, and so does Run's entry once
// what gathered fills it.
func TestProposerFullEntryDoesNotWait(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r, p, ea, a, b := startGroupCommit(t, ctx, 3)
	big := proposeAsync(ctx, p, nodeCmd("x"), nodeCmd("y"), nodeCmd("z"))
	ebig := <-r.entries
	if ids := entryIDs(ebig); len(ids) != 3 || ids[0] != "x" {
		t.Fatalf("full proposal's entry %v, want x, y, z while a is in flight", ids)
	}
	c := proposeAsync(ctx, p, nodeCmd("c"))
	d := proposeAsync(ctx, p, nodeCmd("d"))
	ebcd := <-r.entries
	if ids := entryIDs(ebcd); len(ids) != 3 || ids[0] != "b" {
		t.Fatalf("entry %v, want b, c, d as soon as it is full", ids)
	}
	for _, e := range []*handEntry{ebig, ebcd, ea} {
		e.commit()
	}
	for _, o := range []chan proposeOutcome{a, big, c, d} {
		if r := <-o; r.err != nil {
			t.Fatalf("%v", r.err)
		}
	}
	if o := <-b.done; o.err != nil {
		t.Fatalf("b: %v", o.err)
	}
	// The full entries took no slot: the bound is free again.
	e := proposeAsync(ctx, p, nodeCmd("e"))
	ee := <-r.entries
	ee.commit()
	if o := <-e; o.err != nil || len(p.slots) != 0 {
		t.Fatalf("e: %v, %d slots taken", o.err, len(p.slots))
	}
}

// A negative bound is none (a single node): Run proposes an entry while
// others are in flight, as soon as it is built.
func TestProposerNoInflightBound(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := &handRaft{state: raft.Leader, entries: make(chan *handEntry, 8)}
	p := NewProposer(ProposerConfig{Raft: r, MaxInflightEntries: -1})
	go p.Run(ctx)
	var es []*handEntry
	var prs []*proposal
	for _, id := range []string{"a", "b", "c"} {
		prs = append(prs, queue(t, p, nodeCmd(id)))
		es = append(es, <-r.entries) // with none of the others applied
	}
	for i, e := range es {
		e.commit()
		if o := <-prs[i].done; o.err != nil {
			t.Fatalf("%d: %v", i, o.err)
		}
	}
}
