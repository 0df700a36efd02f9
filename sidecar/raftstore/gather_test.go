package raftstore

import (
	"context"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/axsched/ax/engine"
	"github.com/axsched/ax/raftfsm"
)

func submitOf(id string) []raftfsm.Command {
	return []raftfsm.Command{{Type: raftfsm.CmdSubmit, Submit: &raftfsm.Submit{ID: id, Spec: raftfsm.Spec{Handler: "q"}}}}
}

// gatherRig is a leader's proposer with one entry in flight and a gather
// of at most 2 ms, on a fake clock, its Run started.
type gatherRig struct {
	t       *testing.T
	r       *fakeRaft
	clock   *engine.FakeClock
	p       *Proposer
	gathers *prometheus.CounterVec
	ctx     context.Context
}

func newGatherRig(t *testing.T) *gatherRig {
	t.Helper()
	return newGatherRigWith(t, func(c *ProposerConfig) { c.GatherClock = c.Clock })
}

// newGatherRigWith is newGatherRig with the proposer's configuration
// changed by edit first (its GatherClock nil: real time).
func newGatherRigWith(t *testing.T, edit func(*ProposerConfig)) *gatherRig {
	t.Helper()
	g := &gatherRig{t: t, r: &fakeRaft{state: raft.Leader, entries: make(chan []raftfsm.Command, 16)},
		clock:   engine.NewFakeClock(time.UnixMilli(1_700_000_000_000)),
		gathers: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "g"}, []string{"end"})}
	cfg := ProposerConfig{Raft: g.r, Clock: g.clock, GatherWait: 2 * time.Millisecond,
		Metrics: ProposerMetrics{Gathers: g.gathers}}
	edit(&cfg)
	g.p = NewProposer(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	g.ctx = ctx
	go g.p.Run(ctx)
	return g
}

// propose proposes cmds on a goroutine of its own; the channel gets
// Propose's error.
func (g *gatherRig) propose(cmds []raftfsm.Command) <-chan error {
	errc := make(chan error, 1)
	go func() {
		_, err := g.p.Propose(g.ctx, cmds)
		errc <- err
	}()
	return errc
}

// entry returns the next entry's task and node ids.
func (g *gatherRig) entry() []string {
	g.t.Helper()
	select {
	case e := <-g.r.entries:
		var ids []string
		for _, c := range e {
			switch {
			case c.Submit != nil:
				ids = append(ids, c.Submit.ID)
			case c.Node != nil:
				ids = append(ids, "node:"+c.Node.ID)
			}
		}
		return ids
	case <-time.After(10 * time.Second):
		g.t.Fatal("no entry proposed")
		return nil
	}
}

// alone proposes a submit of id and waits for it: its entry must hold it
// alone, proposed without the fake clock moving.
func (g *gatherRig) alone(id string) {
	g.t.Helper()
	if err := <-g.propose(submitOf(id)); err != nil {
		g.t.Fatal(err)
	}
	if ids := g.entry(); len(ids) != 1 || ids[0] != id {
		g.t.Fatalf("entry %v, want %s alone, at once", ids, id)
	}
}

// noEntry fails when an entry has been proposed.
func (g *gatherRig) noEntry(when string) {
	g.t.Helper()
	select {
	case e := <-g.r.entries:
		g.t.Fatalf("%s: entry of %d commands proposed, want the entry held for the callers", when, len(e))
	default:
	}
}

// queued waits until n submits are queued for Run and Run has taken
// every proposal from its channel.
func (g *gatherRig) queued(n int) {
	g.t.Helper()
	for deadline := time.Now().Add(10 * time.Second); g.p.queuedSubmits.Load() != int64(n) || len(g.p.ch) != 0; time.Sleep(50 * time.Microsecond) {
		if time.Now().After(deadline) {
			g.t.Fatalf("%d submits queued (%d in the channel), want %d taken by Run", g.p.queuedSubmits.Load(), len(g.p.ch), n)
		}
	}
}

// three proposes an entry of three submits and waits until it is
// applied and answered (its gather, if any, is then planned).
func (g *gatherRig) three(prefix string) {
	g.t.Helper()
	three := append(append(submitOf(prefix+"a"), submitOf(prefix+"b")...), submitOf(prefix+"c")...)
	pr := &proposal{cmds: three, done: make(chan proposalResult, 1), submits: 3}
	g.p.ch <- pr
	if ids := g.entry(); len(ids) != 3 {
		g.t.Fatalf("entry %v, want the three queued submits", ids)
	}
	if r := <-pr.done; r.err != nil {
		g.t.Fatal(r.err)
	}
}

// first is three, after which a gather must be due: the next entry
// gathers three.
func (g *gatherRig) first() {
	g.t.Helper()
	g.three("")
	if !g.p.gatherDue() {
		g.t.Fatal("no gather planned after an entry of three submits")
	}
}

// Three callers answered by one entry come back one by one: the next
// entry waits for all three (without the gather the first would go alone
// on the direct path, and the other two in the entry after it), and goes
// as soon as the third is there, before the bound.
func TestProposerGathersTheCallersOfTheLastEntry(t *testing.T) {
	g := newGatherRig(t)
	g.first()
	d := g.propose(submitOf("d"))
	g.clock.BlockUntil(1) // Run holds the entry: the gather's timer is armed
	g.noEntry("one caller back")
	e := g.propose(submitOf("e"))
	g.queued(2)
	g.noEntry("two callers back")
	f := g.propose(submitOf("f"))
	if ids := g.entry(); len(ids) != 3 {
		t.Fatalf("gathered entry %v, want d, e and f", ids)
	}
	for _, c := range []<-chan error{d, e, f} {
		if err := <-c; err != nil {
			t.Fatal(err)
		}
	}
	if n := testutil.ToFloat64(g.gathers.WithLabelValues(GatherFull)); n != 1 {
		t.Fatalf("gathers full = %v, want 1", n)
	}
	if g.p.queuedSubmits.Load() != 0 {
		t.Fatalf("%d submits still counted as queued", g.p.queuedSubmits.Load())
	}
}

// Callers that do not come back cost at most GatherWait: the entry goes
// with what it holds when the bound passes.
func TestProposerGatherEndsAtItsBound(t *testing.T) {
	g := newGatherRig(t)
	g.p.gap = time.Hour // the bound comes first
	g.first()
	d := g.propose(submitOf("d"))
	g.clock.BlockUntil(1)
	g.noEntry("before the bound")
	g.clock.Advance(2 * time.Millisecond)
	if ids := g.entry(); len(ids) != 1 || ids[0] != "d" {
		t.Fatalf("entry %v, want d alone at the bound", ids)
	}
	if err := <-d; err != nil {
		t.Fatal(err)
	}
	if n := testutil.ToFloat64(g.gathers.WithLabelValues(GatherTimeout)); n != 1 {
		t.Fatalf("gathers timeout = %v, want 1", n)
	}
	// An entry of one submit plans no gather: the next caller goes at
	// once on the direct path.
	if g.p.gatherDue() {
		t.Fatal("a gather planned after an entry of one submit")
	}
	g.alone("e")
	// A gather planned but past its bound before any caller came back
	// holds nothing either (the first entry of three after the miss
	// above plans none: TestProposerGatherEndsWhenCallersStopComing).
	g.three("skipped")
	g.first()
	g.clock.Advance(2 * time.Millisecond)
	g.alone("late")
}

// Only submits wait for submits: a fire, a completion or any other
// command that arrives during a gather ends it, and goes at once with
// what was gathered; one that arrives while Run is idle takes the direct
// path, gather due or not.
func TestProposerGatherDoesNotHoldOtherCommands(t *testing.T) {
	g := newGatherRig(t)
	g.first()
	if err := <-g.propose([]raftfsm.Command{nodeCmd("idle")}); err != nil {
		t.Fatal(err)
	}
	if ids := g.entry(); len(ids) != 1 || ids[0] != "node:idle" {
		t.Fatalf("entry %v, want the node command alone, at once", ids)
	}
	// Its entry leaves the gather planned: the callers expected back
	// still are.
	if !g.p.gatherDue() {
		t.Fatal("the node command's entry dropped the planned gather")
	}
	// The same when it goes through Run (Run was still busy with the
	// entry before: it took the plan away, and the callers' entry did
	// not wait for them).
	pr := &proposal{cmds: []raftfsm.Command{nodeCmd("run")}, done: make(chan proposalResult, 1)}
	g.p.ch <- pr
	if ids := g.entry(); len(ids) != 1 || ids[0] != "node:run" {
		t.Fatalf("entry %v, want the node command alone, at once", ids)
	}
	if r := <-pr.done; r.err != nil {
		t.Fatal(r.err)
	}
	if !g.p.gatherDue() {
		t.Fatal("the node command's entry, built by Run, dropped the planned gather")
	}

	g.first()
	d := g.propose(submitOf("d"))
	g.clock.BlockUntil(1)
	g.noEntry("one caller back")
	n := g.propose([]raftfsm.Command{nodeCmd("n")})
	if ids := g.entry(); len(ids) != 2 || ids[0] != "d" || ids[1] != "node:n" {
		t.Fatalf("entry %v, want d and the node command, at once", ids)
	}
	for _, c := range []<-chan error{d, n} {
		if err := <-c; err != nil {
			t.Fatal(err)
		}
	}
	if n := testutil.ToFloat64(g.gathers.WithLabelValues(GatherOther)); n != 1 {
		t.Fatalf("gathers other = %v, want 1", n)
	}
}

// A batch that fills an entry on its own goes at once while a gather is
// due (as it does otherwise: waiting would not make it carry more), and
// plans no gather after it: the single submits that come next are not
// held for a thousand callers (before, such a batch waited in Run's queue
// and its entry planned a gather for its size).
func TestProposerFullBatchNeitherWaitsNorPlansAGather(t *testing.T) {
	g := newGatherRig(t)
	g.p.cfg.MaxBatchCommands = 4
	batch := func(p string) []raftfsm.Command {
		var cmds []raftfsm.Command
		for _, id := range []string{"w", "x", "y", "z"} {
			cmds = append(cmds, submitOf(p+id)...)
		}
		return cmds
	}
	g.first()
	if err := <-g.propose(batch("1")); err != nil {
		t.Fatal(err)
	}
	if ids := g.entry(); len(ids) != 4 {
		t.Fatalf("entry %v, want the batch of four alone, at once", ids)
	}
	// The three callers of the first entry come back: the batch did not
	// change what the next entry waits for.
	var errs []<-chan error
	for _, id := range []string{"d", "e", "f"} {
		errs = append(errs, g.propose(submitOf(id)))
	}
	if ids := g.entry(); len(ids) != 3 {
		t.Fatalf("entry %v, want d, e and f gathered", ids)
	}
	for _, c := range errs {
		if err := <-c; err != nil {
			t.Fatal(err)
		}
	}
	g.clock.Advance(2 * time.Millisecond) // any gather planned is past
	if err := <-g.propose(batch("2")); err != nil {
		t.Fatal(err)
	}
	if ids := g.entry(); len(ids) != 4 {
		t.Fatalf("entry %v, want the batch of four alone, at once", ids)
	}
	if g.p.gatherDue() {
		t.Fatal("a gather planned after a full batch")
	}
	g.alone("s")
}

// Callers that do not come back together (independent callers at a
// steady rate) hold an entry only until no submit has come for the gap,
// and each such miss makes the next planned gathers skip (1, then 3, 7,
// ... up to 63), so they rarely wait; a gather whose callers all came
// back takes a miss back.
func TestProposerGatherEndsWhenCallersStopComing(t *testing.T) {
	g := newGatherRig(t)
	g.first()
	d := g.propose(submitOf("d"))
	g.clock.BlockUntil(1)
	g.noEntry("within the gap")
	g.clock.Advance(gatherGapDefault)
	if ids := g.entry(); len(ids) != 1 || ids[0] != "d" {
		t.Fatalf("entry %v, want d alone after the gap", ids)
	}
	if err := <-d; err != nil {
		t.Fatal(err)
	}
	if n := testutil.ToFloat64(g.gathers.WithLabelValues(GatherGap)); n != 1 {
		t.Fatalf("gathers gap = %v, want 1", n)
	}
	g.three("1") // one miss: this gather is skipped
	if g.p.gatherDue() {
		t.Fatal("a gather planned right after a miss")
	}
	g.first() // the next one is planned

	// A submit within each gap keeps the entry open until the callers are
	// all back; that gather takes the miss back.
	e := g.propose(submitOf("e"))
	g.clock.BlockUntil(1)
	g.clock.Advance(gatherGapDefault / 2)
	f := g.propose(submitOf("f"))
	g.queued(2)
	g.noEntry("two callers back")
	h := g.propose(submitOf("h"))
	if ids := g.entry(); len(ids) != 3 {
		t.Fatalf("entry %v, want e, f and h gathered", ids)
	}
	for _, c := range []<-chan error{e, f, h} {
		if err := <-c; err != nil {
			t.Fatal(err)
		}
	}
	if m, s := g.p.misses.Load(), g.p.skips.Load(); m != 0 || s != 0 {
		t.Fatalf("misses %d, skips %d after a full gather; want 0, 0", m, s)
	}
}

// Until the first caller is back, only the bound ends a gather: an entry
// begun with a proposal queued before the plan (a caller of the other
// group) waits past the gap for the callers just answered, and from the
// first one back the gap counts.
func TestProposerGatherGapCountsFromTheFirstCallerBack(t *testing.T) {
	g := newGatherRig(t)
	g.first()
	old := &proposal{cmds: submitOf("old"), done: make(chan proposalResult, 1), submits: 1, at: g.clock.Now().Add(-time.Millisecond)}
	g.p.ch <- old
	g.clock.BlockUntil(1)
	g.clock.Advance(gatherGapDefault)
	g.noEntry("no caller back yet, past the gap")
	d := g.propose(submitOf("d"))
	g.queued(1)
	g.noEntry("one caller back")
	// Run takes d and then sets its timer to the gap after d: advanced
	// before or after that, the gap has passed by 2 gaps, long before
	// the bound.
	g.clock.Advance(gatherGapDefault)
	select {
	case e := <-g.r.entries:
		g.r.entries <- e
	case <-time.After(100 * time.Millisecond):
		g.clock.Advance(gatherGapDefault)
	}
	if ids := g.entry(); len(ids) != 2 || ids[0] != "old" || ids[1] != "d" {
		t.Fatalf("entry %v, want old and d at the gap after d", ids)
	}
	if err := <-d; err != nil {
		t.Fatal(err)
	}
	if r := <-old.done; r.err != nil {
		t.Fatal(r.err)
	}
}

// The gather is timed on real time (GatherClock) when the node's Clock
// is a test's fake clock that stands still: on the fake clock a gather
// waited until the test moved it, and a cluster test's submit after a
// batch hung until its forward timed out (TestBackpressureQueueFull).
func TestProposerGatherRunsOnRealTimeBesideAFakeClock(t *testing.T) {
	// A bound of 1 s: the plan stays due while first checks it, however
	// slow the machine; the gap after d (250 µs of real time) ends d's.
	g := newGatherRigWith(t, func(c *ProposerConfig) { c.GatherWait = time.Second })
	g.first()
	d := g.propose(submitOf("d"))
	// entry waits up to 10 s of real time; the fake clock stands still.
	if ids := g.entry(); len(ids) != 1 || ids[0] != "d" {
		t.Fatalf("entry %v, want d alone", ids)
	}
	if err := <-d; err != nil {
		t.Fatal(err)
	}
}

// On a single node (BoundSubmitsOnly) only entries of submits wait for the
// one in flight: a fire, a completion or any other command goes at once
// beside it, as raft pipelines them with no bound, and a submit that
// waited goes along; a submit alone waits, so that callers who submit in
// a loop gather. With the bound on every entry (a cluster) the other
// command waits too.
func TestProposerBoundSubmitsOnly(t *testing.T) {
	for _, only := range []bool{false, true} {
		g := newGatherRigWith(t, func(c *ProposerConfig) {
			c.GatherClock = c.Clock
			c.MaxInflightEntries = 1
			c.BoundSubmitsOnly = only
		})
		g.r.hold, g.r.holdSubmits = make(chan struct{}), true
		a := g.propose(submitOf("a"))
		if ids := g.entry(); len(ids) != 1 || ids[0] != "a" {
			t.Fatalf("entry %v, want a alone", ids)
		}
		b := g.propose(submitOf("b"))
		g.queued(1)
		g.noEntry("a submit while one is in flight")
		// Run, holding b, takes n from its queue.
		n := &proposal{cmds: []raftfsm.Command{nodeCmd("n")}, done: make(chan proposalResult, 1)}
		g.p.ch <- n
		if !only {
			g.queued(1) // b still counted, the queue empty: Run has taken n
			g.noEntry("bound on every entry: a node command while a submit is in flight")
			close(g.r.hold)
			if ids := g.entry(); len(ids) != 2 || ids[0] != "b" || ids[1] != "node:n" {
				t.Fatalf("entry %v, want b and the node command once a is applied", ids)
			}
		} else {
			if ids := g.entry(); len(ids) != 2 || ids[0] != "b" || ids[1] != "node:n" {
				t.Fatalf("entry %v, want b and the node command at once, beside a", ids)
			}
			// Alone, a node command takes the direct path at once too.
			if err := <-g.propose([]raftfsm.Command{nodeCmd("m")}); err != nil {
				t.Fatal(err)
			}
			if ids := g.entry(); len(ids) != 1 || ids[0] != "node:m" {
				t.Fatalf("entry %v, want the node command alone, at once", ids)
			}
			close(g.r.hold)
		}
		for _, c := range []<-chan error{a, b} {
			if err := <-c; err != nil {
				t.Fatal(err)
			}
		}
		if r := <-n.done; r.err != nil {
			t.Fatal(r.err)
		}
	}
}

// With GatherMinSubmits 4 (a single node) an applied entry of three
// submits plans no gather: the next caller goes at once; one of four
// does.
func TestProposerGatherMinSubmits(t *testing.T) {
	g := newGatherRigWith(t, func(c *ProposerConfig) {
		c.GatherClock = c.Clock
		c.GatherMinSubmits = 4
	})
	g.three("")
	if g.p.gatherDue() {
		t.Fatal("a gather planned after an entry of three submits")
	}
	g.alone("d")
	four := append(append(submitOf("w"), submitOf("x")...), append(submitOf("y"), submitOf("z")...)...)
	pr := &proposal{cmds: four, done: make(chan proposalResult, 1), submits: 4}
	g.p.ch <- pr
	if ids := g.entry(); len(ids) != 4 {
		t.Fatalf("entry %v, want the four queued submits", ids)
	}
	if r := <-pr.done; r.err != nil {
		t.Fatal(r.err)
	}
	if !g.p.gatherDue() {
		t.Fatal("no gather planned after an entry of four submits")
	}
}

// With BoundSubmitsOnly, an entry that went beside the one in flight (no
// slot: a fire that took a submit or two along) leaves the planned gather
// as it is when its outcome comes (concurrently with the entry the plan
// is for); the entry of submits that held the slot plans as before.
func TestProposerEntryBesideLeavesThePlan(t *testing.T) {
	g := newGatherRigWith(t, func(c *ProposerConfig) {
		c.GatherClock = c.Clock
		c.MaxInflightEntries = 1
		c.BoundSubmitsOnly = true
	})
	g.first()
	plan := g.p.plan.Load()
	g.p.planGather(proposed{submits: 1}, nil, false)
	if g.p.plan.Load() != plan {
		t.Fatal("an entry beside the one in flight changed the planned gather")
	}
	g.p.planGather(proposed{submits: 1}, nil, true)
	if g.p.plan.Load() != nil {
		t.Fatal("the entry of one submit that held the slot left a gather planned")
	}
}
