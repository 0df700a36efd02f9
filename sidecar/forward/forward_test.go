package forward

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"

	"github.com/axsched/ax/engine"
	"github.com/axsched/ax/raftfsm"
	"github.com/axsched/ax/sidecar/raftstore"
)

// answers hands out one scripted answer per call (the last one repeats)
// and counts the calls.
type answers struct {
	mu    sync.Mutex
	errs  []error
	calls int
	addrs []string
}

func (a *answers) next(addr string) ([]raftfsm.Result, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls++
	a.addrs = append(a.addrs, addr)
	err := a.errs[min(a.calls, len(a.errs))-1]
	if err != nil {
		return nil, err
	}
	return []raftfsm.Result{{Code: raftfsm.CodeOK, Index: 5}}, nil
}

func (a *answers) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.calls
}

type fakeLocal struct {
	leader bool
	answers
}

func (l *fakeLocal) IsLeader() bool { return l.leader }
func (l *fakeLocal) Propose(context.Context, []raftfsm.Command) ([]raftfsm.Result, error) {
	return l.next("")
}

type fakeLeader struct {
	answers
	// block, when set, makes the first call wait for its context;
	// release, when set, makes the first call wait for it and answer.
	block   bool
	blocked chan struct{}
	release chan struct{}
}

func (l *fakeLeader) Propose(ctx context.Context, addr string, _ []raftfsm.Command) ([]raftfsm.Result, error) {
	if l.release != nil && l.count() == 0 {
		l.mu.Lock()
		l.calls++
		l.mu.Unlock()
		close(l.blocked)
		<-l.release
		return []raftfsm.Result{{Code: raftfsm.CodeOK, Index: 5}}, nil
	}
	if l.block && l.count() == 0 {
		l.mu.Lock()
		l.calls++
		l.mu.Unlock()
		close(l.blocked)
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return l.next(addr)
}

// fakeLeaders is the leader watch: change moves the leader and wakes the
// waiters of Changed.
type fakeLeaders struct {
	raftstore.Broadcast
	addr atomic.Pointer[string]
}

func (l *fakeLeaders) PeerAddr() string { return *l.addr.Load() }

func (l *fakeLeaders) change(addr string) {
	l.addr.Store(&addr)
	l.Notify()
}

// fakeApplied is the FSM's applied index: apply moves it and wakes the
// waiters of AppliedCh.
type fakeApplied struct {
	raftstore.Broadcast
	at atomic.Uint64
	// watched is closed at the first AppliedCh: someone waits.
	watched chan struct{}
	once    sync.Once
}

func (a *fakeApplied) AppliedIndex() uint64 { return a.at.Load() }
func (a *fakeApplied) AppliedCh() <-chan struct{} {
	a.once.Do(func() { close(a.watched) })
	return a.Changed()
}

func (a *fakeApplied) apply(idx uint64) {
	a.at.Store(idx)
	a.Notify()
}

type env struct {
	clock   *engine.FakeClock
	local   *fakeLocal
	leader  *fakeLeader
	leaders *fakeLeaders
	applied *fakeApplied
	f       *Forwarder
}

// errBacklog stands for the leader's answer that its backlog is full.
var errBacklog = errors.New("backlog full")

func newEnv(isLeader bool, localErrs, leaderErrs []error) *env {
	e := &env{
		clock:   engine.NewFakeClock(time.Unix(1_700_000_000, 0)),
		local:   &fakeLocal{leader: isLeader, answers: answers{errs: localErrs}},
		leader:  &fakeLeader{answers: answers{errs: leaderErrs}, blocked: make(chan struct{})},
		leaders: &fakeLeaders{},
		applied: &fakeApplied{watched: make(chan struct{})},
	}
	e.leaders.change("leader:1")
	e.applied.apply(5)
	e.f = New(Config{Local: e.local, Leader: e.leader, Leaders: e.leaders, Applied: e.applied,
		Final:        func(err error) bool { return errors.Is(err, errBacklog) },
		NoLeaderWait: 2 * time.Second, Clock: e.clock, Log: zerolog.Nop()})
	return e
}

// call runs fn in a goroutine; the returned function waits for its answer.
func call(fn func() ([]raftfsm.Result, error)) func() ([]raftfsm.Result, error) {
	type answer struct {
		res []raftfsm.Result
		err error
	}
	ch := make(chan answer, 1)
	go func() {
		res, err := fn()
		ch <- answer{res, err}
	}()
	return func() ([]raftfsm.Result, error) {
		a := <-ch
		return a.res, a.err
	}
}

// backoff waits until the forwarder sleeps between two tries (its give-up
// timer and its backoff are armed) and ends the sleep.
func (e *env) backoff(d time.Duration) {
	e.clock.BlockUntil(2)
	e.clock.Advance(d)
}

var cmds = []raftfsm.Command{{Type: raftfsm.CmdCancel, Cancel: &raftfsm.Cancel{ID: "a"}}}

func TestForwardOnTheLeaderProposesLocally(t *testing.T) {
	e := newEnv(true, []error{nil}, []error{nil})
	res, err := e.f.Propose(context.Background(), cmds)
	if err != nil || len(res) != 1 || e.local.count() != 1 || e.leader.count() != 0 {
		t.Fatalf("res %v err %v, local %d forwards %d", res, err, e.local.count(), e.leader.count())
	}
}

// "Not the leader" (and an enqueue timeout) were surely not committed:
// both Propose and ProposeAPI try again after a backoff.
func TestForwardRetriesWhatWasNotProposed(t *testing.T) {
	for _, first := range []error{fmt.Errorf("wrapped: %w", ErrNotLeader), raft.ErrEnqueueTimeout} {
		for name, propose := range map[string]func(*Forwarder) func(context.Context, []raftfsm.Command) ([]raftfsm.Result, error){
			"Propose": func(f *Forwarder) func(context.Context, []raftfsm.Command) ([]raftfsm.Result, error) {
				return f.Propose
			},
			"ProposeAPI": func(f *Forwarder) func(context.Context, []raftfsm.Command) ([]raftfsm.Result, error) {
				return f.ProposeAPI
			},
		} {
			e := newEnv(true, []error{first, nil}, nil)
			wait := call(func() ([]raftfsm.Result, error) { return propose(e.f)(context.Background(), cmds) })
			e.backoff(10 * time.Millisecond)
			if _, err := wait(); err != nil || e.local.count() != 2 {
				t.Errorf("%s after %v: %v, %d tries, want success at the second", name, first, err, e.local.count())
			}
		}
	}
}

// A lost leadership may have committed the entry: the node's own writes
// are proposed again, the application's are answered ErrOutcomeUnknown.
func TestForwardLeadershipLost(t *testing.T) {
	e := newEnv(true, []error{raft.ErrLeadershipLost, nil}, nil)
	wait := call(func() ([]raftfsm.Result, error) { return e.f.Propose(context.Background(), cmds) })
	e.backoff(10 * time.Millisecond)
	if _, err := wait(); err != nil || e.local.count() != 2 {
		t.Fatalf("Propose: %v after %d tries", err, e.local.count())
	}

	e = newEnv(true, []error{raft.ErrLeadershipLost, nil}, nil)
	if _, err := e.f.ProposeAPI(context.Background(), cmds); !errors.Is(err, ErrOutcomeUnknown) || e.local.count() != 1 {
		t.Fatalf("ProposeAPI: %v after %d tries, want ErrOutcomeUnknown at once", err, e.local.count())
	}
}

// Any other error of the local proposal is the answer.
func TestForwardReturnsOtherLocalErrors(t *testing.T) {
	boom := errors.New("storage unavailable")
	e := newEnv(true, []error{boom}, nil)
	if _, err := e.f.Propose(context.Background(), cmds); err != boom || e.local.count() != 1 {
		t.Fatalf("%v after %d tries", err, e.local.count())
	}
}

// A follower sends the node's own writes to the leader and returns once it
// has applied their entry itself (its callers read the store directly).
func TestForwardFromAFollowerWaitsUntilApplied(t *testing.T) {
	e := newEnv(false, nil, []error{nil})
	e.applied.apply(4)
	wait := call(func() ([]raftfsm.Result, error) { return e.f.Propose(context.Background(), cmds) })
	<-e.applied.watched // it waits for the apply
	if e.leader.count() != 1 || e.leader.addrs[0] != "leader:1" {
		t.Fatalf("forwards %d to %v", e.leader.count(), e.leader.addrs)
	}
	e.applied.apply(5)
	if res, err := wait(); err != nil || len(res) != 1 || res[0].Index != 5 {
		t.Fatalf("res %v err %v", res, err)
	}
	if e.local.count() != 0 {
		t.Fatal("a follower proposed locally")
	}
}

// An application's write forwarded by a follower is answered as soon as
// the leader answers, although the follower has not applied it (it is
// held at 4): the wait moved to the reads (WaitForwarded), which see the
// write once the follower applies it.
func TestForwardAPIAnswersBeforeApplied(t *testing.T) {
	e := newEnv(false, nil, []error{nil})
	e.applied.apply(4)
	wait := call(func() ([]raftfsm.Result, error) { return e.f.ProposeAPI(context.Background(), cmds) })
	// The old code waited here for the local apply: besides the give-up
	// timer it armed WaitApplied's limit and blocked on it.
	waiting := make(chan struct{})
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go func() {
		if e.clock.BlockUntilContext(ctx, 2) == nil {
			close(waiting)
		}
	}()
	answered := make(chan struct{})
	var res []raftfsm.Result
	var err error
	go func() { res, err = wait(); close(answered) }()
	select {
	case <-answered:
	case <-waiting:
		t.Fatal("the forwarded write waits until the follower has applied it")
	}
	if err != nil || len(res) != 1 || res[0].Index != 5 || e.f.Forwarded() != 5 {
		t.Fatalf("res %v err %v forwarded %d", res, err, e.f.Forwarded())
	}
	if e.applied.AppliedIndex() != 4 {
		t.Fatal("the follower applied meanwhile")
	}

	// A read now waits until the follower has applied index 5.
	read := make(chan bool, 1)
	go func() { read <- e.f.WaitForwarded(context.Background(), ReadWait) }()
	e.clock.BlockUntil(1) // the read's limit: it waits
	select {
	case <-read:
		t.Fatal("the read did not wait for the forwarded write")
	default:
	}
	e.applied.apply(5)
	if !<-read {
		t.Fatal("WaitForwarded: false after the apply")
	}
	// Nothing pending: at once, without a timer.
	if !e.f.WaitForwarded(context.Background(), ReadWait) || e.clock.Armed() != 0 {
		t.Fatalf("nothing pending: waited (%d timers)", e.clock.Armed())
	}
}

// Forwarded is the highest index answered, whatever the order of the
// answers.
func TestForwardedIsAMax(t *testing.T) {
	e := newEnv(false, nil, nil)
	for _, idx := range []uint64{7, 3, 9, 8} {
		e.f.noteForwarded(idx)
	}
	if got := e.f.Forwarded(); got != 9 {
		t.Fatalf("Forwarded %d, want 9", got)
	}
	e.applied.apply(9)
	if !e.f.WaitForwarded(context.Background(), ReadWait) {
		t.Fatal("applied up to Forwarded: false")
	}
	e.applied.apply(5)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if e.f.WaitForwarded(ctx, ReadWait) {
		t.Fatal("behind Forwarded with an ended context: true")
	}
}

// The leader's answer (a full backlog) is returned as it is.
func TestForwardReturnsTheLeadersAnswer(t *testing.T) {
	e := newEnv(false, nil, []error{fmt.Errorf("peer: %w", errBacklog)})
	if _, err := e.f.ProposeAPI(context.Background(), cmds); !errors.Is(err, errBacklog) || e.leader.count() != 1 {
		t.Fatalf("%v after %d forwards", err, e.leader.count())
	}
}

// A forward that may have reached the leader is not sent again for the
// application (ErrOutcomeUnknown); one that surely did not (a refused
// dial, "not the leader") is.
func TestForwardAPIRetriesOnlyWhatWasNotDelivered(t *testing.T) {
	e := newEnv(false, nil, []error{errors.New("read: connection reset by peer")})
	if _, err := e.f.ProposeAPI(context.Background(), cmds); !errors.Is(err, ErrOutcomeUnknown) || e.leader.count() != 1 {
		t.Fatalf("reset connection: %v after %d forwards, want ErrOutcomeUnknown", err, e.leader.count())
	}
	// The leader dying with the forward in flight: the client's message
	// says so, without fasthttp's advice to a server's author.
	e = newEnv(false, nil, []error{fmt.Errorf("peer: %w", fasthttp.ErrConnectionClosed)})
	if _, err := e.f.ProposeAPI(context.Background(), cmds); !errors.Is(err, ErrOutcomeUnknown) ||
		!strings.Contains(err.Error(), "the leader closed the connection before answering") || strings.Contains(err.Error(), "make sure") {
		t.Fatalf("closed connection: %v, want ErrOutcomeUnknown saying the leader closed the connection", err)
	}
	for _, first := range []error{syscall.ECONNREFUSED, ErrNotLeader} {
		e = newEnv(false, nil, []error{first, nil})
		wait := call(func() ([]raftfsm.Result, error) { return e.f.ProposeAPI(context.Background(), cmds) })
		e.backoff(10 * time.Millisecond)
		if _, err := wait(); err != nil || e.leader.count() != 2 {
			t.Fatalf("after %v: %v, %d forwards, want success at the second", first, err, e.leader.count())
		}
	}
	// The node's own writes are sent again after any failure.
	e = newEnv(false, nil, []error{errors.New("EOF"), nil})
	wait := call(func() ([]raftfsm.Result, error) { return e.f.Propose(context.Background(), cmds) })
	e.backoff(10 * time.Millisecond)
	if _, err := wait(); err != nil || e.leader.count() != 2 {
		t.Fatalf("Propose after EOF: %v, %d forwards", err, e.leader.count())
	}
}

// A forward in flight is abandoned when the leader changes, and the
// commands go to the new leader.
func TestForwardFollowsALeaderChange(t *testing.T) {
	e := newEnv(false, nil, []error{nil})
	e.leader.block = true
	wait := call(func() ([]raftfsm.Result, error) { return e.f.Propose(context.Background(), cmds) })
	<-e.leader.blocked
	e.leaders.change("leader:2")
	e.backoff(10 * time.Millisecond)
	if _, err := wait(); err != nil || e.leader.count() != 2 || e.leader.addrs[len(e.leader.addrs)-1] != "leader:2" {
		t.Fatalf("%v after %d forwards to %v", err, e.leader.count(), e.leader.addrs)
	}
}

// Without a known leader it gives up after NoLeaderWait, or when ctx
// ends, with ErrNoLeader; the backoff grows to 200 ms.
func TestForwardNoLeader(t *testing.T) {
	e := newEnv(false, nil, nil)
	e.leaders.change("")
	wait := call(func() ([]raftfsm.Result, error) { return e.f.Propose(context.Background(), cmds) })
	for _, d := range []time.Duration{10, 20, 40, 80, 160, 200, 200} {
		e.backoff(d * time.Millisecond)
	}
	e.clock.BlockUntil(2)
	e.clock.Advance(2 * time.Second)
	if _, err := wait(); !errors.Is(err, ErrNoLeader) {
		t.Fatalf("%v, want ErrNoLeader", err)
	}

	e = newEnv(true, []error{ErrNotLeader}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	wait = call(func() ([]raftfsm.Result, error) { return e.f.Propose(ctx, cmds) })
	e.clock.BlockUntil(2)
	cancel()
	if _, err := wait(); !errors.Is(err, ErrNoLeader) {
		t.Fatalf("ended ctx: %v, want ErrNoLeader", err)
	}
	e = newEnv(false, nil, []error{errors.New("EOF")})
	ctx, cancel = context.WithCancel(context.Background())
	wait = call(func() ([]raftfsm.Result, error) { return e.f.Propose(ctx, cmds) })
	e.clock.BlockUntil(2)
	cancel()
	if _, err := wait(); !errors.Is(err, ErrNoLeader) {
		t.Fatalf("ended ctx after a failed forward: %v, want ErrNoLeader", err)
	}
}

// NoLeaderWait counts from the first try: a first forward that took 1.5
// s of the 2 s leaves 0.5 s to the retries.
func TestForwardNoLeaderCountsFromTheFirstTry(t *testing.T) {
	e := newEnv(false, nil, []error{nil})
	e.leader.block = true
	wait := call(func() ([]raftfsm.Result, error) { return e.f.Propose(context.Background(), cmds) })
	<-e.leader.blocked
	e.clock.Advance(1500 * time.Millisecond)
	e.leaders.change("") // ends the forward; no leader to retry with
	for _, d := range []time.Duration{10, 20, 40, 80, 160} {
		e.backoff(d * time.Millisecond) // 310 ms
	}
	e.backoff(190 * time.Millisecond) // 2 s since the first try; the backoff's 200 ms have not passed
	done := make(chan error, 1)
	go func() { _, err := wait(); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, ErrNoLeader) {
			t.Fatalf("%v, want ErrNoLeader", err)
		}
	case <-time.After(10 * time.Second): // a bound on a hang, not a timing
		t.Fatal("still retrying 2 s after the first try")
	}
}

// The give-up timers are reused (giveUpTimer): a write after one that gave
// up, and one after a write whose timer fired unseen, each still wait the
// whole NoLeaderWait.
func TestForwardGiveUpTimerReusedWhole(t *testing.T) {
	e := newEnv(false, nil, []error{nil})
	e.leaders.change("")
	giveUp := func(what string) {
		t.Helper()
		done := make(chan error, 1)
		go func() { _, err := e.f.Propose(context.Background(), cmds); done <- err }()
		// Bounds on a hang, not timings: a timer not re-armed never
		// fires, one that gave up at once leaves no timer armed.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for range 2 { // the first backoff, then the second
			if err := e.clock.BlockUntilContext(ctx, 2); err != nil {
				t.Fatalf("%s: not waiting on its give-up and backoff timers", what)
			}
			if len(done) > 0 {
				t.Fatalf("%s: gave up at once: %v", what, <-done)
			}
			e.clock.Advance(10 * time.Millisecond)
		}
		e.clock.Advance(2 * time.Second)
		select {
		case err := <-done:
			if !errors.Is(err, ErrNoLeader) {
				t.Fatalf("%s: %v, want ErrNoLeader", what, err)
			}
		case <-ctx.Done():
			t.Fatalf("%s: no give-up 2 s after the first try", what)
		}
	}
	giveUp("first write")
	giveUp("a write after one that gave up")

	// A forward that outlasts NoLeaderWait and succeeds leaves its fired
	// timer unread.
	e.leaders.change("leader:1")
	e.leader.release, e.leader.blocked = make(chan struct{}), make(chan struct{})
	e.leader.calls = 0
	wait := call(func() ([]raftfsm.Result, error) { return e.f.Propose(context.Background(), cmds) })
	<-e.leader.blocked
	e.clock.Advance(3 * time.Second)
	close(e.leader.release)
	if _, err := wait(); err != nil {
		t.Fatalf("a slow forward: %v", err)
	}
	e.leaders.change("")
	giveUp("a write after a fired, unread timer")
}

func TestWaitApplied(t *testing.T) {
	e := newEnv(false, nil, nil)
	if !e.f.WaitApplied(context.Background(), 5, time.Second) {
		t.Fatal("index already applied: false")
	}
	done := make(chan bool, 1)
	go func() { done <- e.f.WaitApplied(context.Background(), 6, time.Second) }()
	e.clock.BlockUntil(1)
	e.clock.Advance(time.Second)
	if <-done {
		t.Fatal("limit passed: true")
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { done <- e.f.WaitApplied(ctx, 6, time.Second) }()
	e.clock.BlockUntil(1)
	cancel()
	if <-done {
		t.Fatal("ctx ended: true")
	}
}

func TestForwardMaybeDelivered(t *testing.T) {
	for err, want := range map[error]bool{
		ErrNotLeader:                                        false,
		fmt.Errorf("x: %w", ErrNotLeader):                   false,
		syscall.ECONNREFUSED:                                false,
		fasthttp.ErrDialTimeout:                             false,
		fasthttp.ErrNoFreeConns:                             false,
		&fasthttp.ErrDialWithUpstream{Upstream: "leader:1"}: false,
		errors.New("EOF"):                                   true,
		context.Canceled:                                    true,
		fasthttp.ErrTimeout:                                 true,
	} {
		if got := forwardMaybeDelivered(err); got != want {
			t.Errorf("forwardMaybeDelivered(%v) = %v, want %v", err, got, want)
		}
	}
}
