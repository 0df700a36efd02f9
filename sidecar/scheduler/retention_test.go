package scheduler

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/axsched/ax/engine"
	"github.com/axsched/ax/raftfsm"
)

// retEnv is a retention loop over a real FSM in a temp dir, with a fake
// clock; its proposals apply to the FSM directly, as the next entries.
type retEnv struct {
	t      *testing.T
	dir    string
	db     *badger.DB
	fsm    *raftfsm.FSM
	clock  *engine.FakeClock
	r      *Retention
	index  uint64
	leader bool
}

func newRetEnv(t *testing.T, keep, keepDead time.Duration) *retEnv {
	t.Helper()
	e := &retEnv{t: t, dir: t.TempDir(), leader: true}
	var err error
	if e.db, err = raftfsm.OpenDB(e.dir, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.db.Close() })
	if e.fsm, err = raftfsm.Open(e.db); err != nil {
		t.Fatal(err)
	}
	e.clock = engine.NewFakeClock(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	e.r = NewRetention(RetentionConfig{
		Clock: e.clock, FSM: e.fsm, DB: e.db, Log: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel),
		Keep: keep, KeepDead: keepDead, Interval: time.Second, Batch: maxBatchCommandsDefault,
		Leading: func() bool { return e.leader },
		Proposer: ProposerFunc(func(_ context.Context, cmds []raftfsm.Command) ([]raftfsm.Result, error) {
			return e.apply(cmds...), nil
		}),
	})
	if got := len(e.r.Collectors()); got != 1 {
		t.Fatalf("retention collectors: %d, want ax_tasks_purged_total", got)
	}
	return e
}

func (e *retEnv) apply(cmds ...raftfsm.Command) []raftfsm.Result {
	e.t.Helper()
	e.index++
	data, err := raftfsm.EncodeEntry(cmds)
	if err != nil {
		e.t.Fatal(err)
	}
	out := e.fsm.Apply(&raft.Log{Index: e.index, Type: raft.LogCommand, Data: data})
	rs, ok := out.([]raftfsm.Result)
	if !ok || len(rs) != len(cmds) {
		e.t.Fatalf("apply entry %d: %v", e.index, out)
	}
	return rs
}

func (e *retEnv) nowMs() int64 { return e.clock.Now().UnixMilli() }

// size returns the disk space the data dir's files take (allocated
// blocks, as du counts: badger sizes its memtable and value-log files in
// advance, sparse) and their apparent size.
func (e *retEnv) size() string {
	alloc, apparent, sst := diskUsage(e.dir)
	return fmt.Sprintf("%d allocated (%d apparent, %d in .sst)", alloc, apparent, sst)
}

func diskUsage(dir string) (alloc, apparent, sst int64) {
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			apparent += fi.Size()
			alloc += allocatedBytes(fi)
			if filepath.Ext(p) == ".sst" {
				sst += fi.Size()
			}
		}
		return nil
	})
	return
}

// finishMany stores n CANCELLED tasks, in entries of 1000 submits and
// 1000 cancels, with a payload of payloadBytes.
func (e *retEnv) finishMany(prefix string, n, payloadBytes int) {
	e.t.Helper()
	payload := make([]byte, payloadBytes)
	for i := range payload {
		payload[i] = 'a' + byte(i%26)
	}
	for start := 0; start < n; start += 1000 {
		var subs, cans []raftfsm.Command
		for i := start; i < min(n, start+1000); i++ {
			id := fmt.Sprintf("%s%07d", prefix, i)
			subs = append(subs, raftfsm.Command{Type: raftfsm.CmdSubmit, Submit: &raftfsm.Submit{ID: id, DueMs: e.nowMs() + 3600_000, AtMs: e.nowMs(),
				Spec: raftfsm.Spec{Handler: "bulk", Payload: payload, Priority: 2, TimeoutNs: int64(time.Second), MaxAttempts: 3}}})
			cans = append(cans, raftfsm.Command{Type: raftfsm.CmdCancel, Cancel: &raftfsm.Cancel{ID: id, AtMs: e.nowMs()}})
		}
		e.apply(subs...)
		e.apply(cans...)
	}
}

// observerFunc is a raftfsm.Observer from a function.
type observerFunc func(uint64, []raftfsm.Event)

func (f observerFunc) Applied(i uint64, evs []raftfsm.Event) { f(i, evs) }

func (e *retEnv) observe() {
	e.fsm.SetObserver(observerFunc(func(_ uint64, evs []raftfsm.Event) {
		for i := range evs {
			e.r.OnEvent(&evs[i])
		}
	}))
}

func (e *retEnv) submit(id string, s raftfsm.Spec, dueMs int64) uint64 {
	e.t.Helper()
	r := e.apply(raftfsm.Command{Type: raftfsm.CmdSubmit, Submit: &raftfsm.Submit{ID: id, Spec: s, DueMs: dueMs, AtMs: e.nowMs()}})[0]
	return r.Task.Epoch
}

func (e *retEnv) fire(id string, epoch uint64, attempt int) {
	e.t.Helper()
	e.apply(raftfsm.Command{Type: raftfsm.CmdFire, Fire: &raftfsm.Fire{ID: id, Epoch: epoch, Attempt: attempt, Node: "n1", AtMs: e.nowMs(), LeaseMs: e.nowMs() + 60_000}})
}

func (e *retEnv) complete(c raftfsm.Complete) {
	e.t.Helper()
	c.AtMs = e.nowMs()
	e.apply(raftfsm.Command{Type: raftfsm.CmdComplete, Complete: &c})
}

func (e *retEnv) state(id string) raftfsm.State {
	t, err := e.fsm.Task(id)
	if err != nil {
		return 0
	}
	return t.State
}

// keptAndPurged stores the tasks a purge must tell apart: a recurring
// task between runs (WAITING), a task being retried (WAITING after a failed
// attempt), a RUNNING one and a DEAD one with a long retention of its own,
// which are kept; and a DEAD one and a SUCCESS one with a 1 ms retention of
// its own, which go. It returns the ids that must stay.
func (e *retEnv) keptAndPurged() (kept, purged []string) {
	one := raftfsm.Spec{Handler: "h", Priority: 2, TimeoutNs: int64(time.Second), MaxAttempts: 1}
	rec := one
	rec.EveryNs = int64(time.Minute)
	ep := e.submit("recurring", rec, e.nowMs())
	e.fire("recurring", ep, 1)
	e.complete(raftfsm.Complete{ID: "recurring", Epoch: ep, Attempt: 1, Outcome: raftfsm.OutcomeSuccess, NextSlotMs: e.nowMs() + 60_000, NextDueMs: e.nowMs() + 60_000})

	retry := one
	retry.MaxAttempts = 5
	ep = e.submit("retrying", retry, e.nowMs())
	e.fire("retrying", ep, 1)
	e.complete(raftfsm.Complete{ID: "retrying", Epoch: ep, Attempt: 1, Outcome: raftfsm.OutcomeRetryable, Error: "500", RetryDueMs: e.nowMs() + 3600_000})

	ep = e.submit("running", one, e.nowMs())
	e.fire("running", ep, 1)

	long := one
	long.RetentionNs = int64(1000 * time.Hour)
	ep = e.submit("dead-long", long, e.nowMs())
	e.fire("dead-long", ep, 1)
	e.complete(raftfsm.Complete{ID: "dead-long", Epoch: ep, Attempt: 1, Outcome: raftfsm.OutcomeRetryable, Error: "500"})

	ep = e.submit("dead", one, e.nowMs())
	e.fire("dead", ep, 1)
	e.complete(raftfsm.Complete{ID: "dead", Epoch: ep, Attempt: 1, Outcome: raftfsm.OutcomeRetryable, Error: "500"})

	short := one
	short.RetentionNs = int64(time.Millisecond)
	ep = e.submit("ok-short", short, e.nowMs())
	e.fire("ok-short", ep, 1)
	e.complete(raftfsm.Complete{ID: "ok-short", Epoch: ep, Attempt: 1, Outcome: raftfsm.OutcomeSuccess})

	want := map[string]raftfsm.State{"recurring": raftfsm.StateWaiting, "retrying": raftfsm.StateWaiting, "running": raftfsm.StateRunning,
		"dead-long": raftfsm.StateDead, "dead": raftfsm.StateDead, "ok-short": raftfsm.StateSuccess}
	for id, st := range want {
		if got := e.state(id); got != st {
			e.t.Fatalf("task %s is %v, want %v", id, got, st)
		}
	}
	return []string{"recurring", "retrying", "running", "dead-long"}, []string{"dead", "ok-short"}
}

// The acceptance test of retention: 200 000 finished tasks with a
// retention of 1 s are gone within two purge cycles of the leader's loop
// (driven by the fake clock), the kept tasks stay, and badger's data dir
// shrinks. The tasks are made finished cheaply (submitted an hour ahead
// and cancelled, 1000 per entry) straight through the FSM.
func TestRetentionPurgesWithinTwoCycles(t *testing.T) {
	// 200 000 tasks take 20 s here, and 6 min under the race detector:
	// there (and with -short) 5 000, which fit in badger's memtable, so
	// the data dir's figures are checked only with the full size.
	n, full := 200_000, true
	if testing.Short() || raceDetector {
		n, full = 5_000, false
	}
	e := newRetEnv(t, time.Second, time.Second)
	e.observe()
	kept, gone := e.keptAndPurged()
	e.finishMany("t", n, 100)
	beforeAlloc, beforeApparent, beforeSST := diskUsage(e.dir)

	e.clock.Advance(2 * time.Second) // every retention (1 s, 1 ms) ended
	var perCycle []float64
	var took []time.Duration // the cycle's purge entries and the reclaim after
	prev := 0.0
	for range 2 {
		e.clock.Advance(e.r.interval)
		start := time.Now()
		e.r.tick(context.Background())
		took = append(took, time.Since(start).Round(time.Millisecond))
		got := counterValue(t, e.r.purged.WithLabelValues("retention"))
		perCycle = append(perCycle, got-prev)
		prev = got
	}
	c := e.fsm.Counts()
	if c[raftfsm.StateCancelled] != 0 || c[raftfsm.StateSuccess] != 0 || c[raftfsm.StateDead] != 1 ||
		c[raftfsm.StateWaiting] != 2 || c[raftfsm.StateRunning] != 1 || c[raftfsm.StateFailed] != 0 {
		t.Fatalf("after two cycles: counts %v", c)
	}
	if total := perCycle[0] + perCycle[1]; int(total) != n+len(gone) || e.r.deleted.Load() != int64(n+len(gone)) {
		t.Fatalf("purged %v (deleted %d), want %d", perCycle, e.r.deleted.Load(), n+len(gone))
	}
	if n == 200_000 && perCycle[0] != purgeEntriesPerCycle*maxBatchCommandsDefault {
		t.Fatalf("first cycle purged %v, want the cycle's bound %d", perCycle[0], purgeEntriesPerCycle*maxBatchCommandsDefault)
	}
	for _, id := range kept {
		if e.state(id) == 0 {
			t.Errorf("task %s was purged", id)
		}
	}
	for _, id := range append(gone, "t0000000", fmt.Sprintf("t%07d", n-1)) {
		if e.state(id) != 0 {
			t.Errorf("task %s was kept", id)
		}
	}
	if fts, err := e.fsm.Expired(e.nowMs(), time.Second, time.Second, 10, nil); err != nil || len(fts) != 0 {
		t.Fatalf("still expired: %v, %v", fts, err)
	}
	afterAlloc, afterApparent, afterSST := diskUsage(e.dir)
	t.Logf("purged per cycle: %v, each cycle with its reclaim taking %v; data dir before: %d bytes on disk (%d apparent, %d in tables); after 2 cycles and a reclaim: %d on disk (%d apparent, %d in tables)",
		perCycle, took, beforeAlloc, beforeApparent, beforeSST, afterAlloc, afterApparent, afterSST)
	if full && (afterSST >= beforeSST || afterAlloc >= beforeAlloc) {
		t.Fatalf("data dir did not shrink: tables %d -> %d bytes, on disk %d -> %d", beforeSST, afterSST, beforeAlloc, afterAlloc)
	}

	// The tombstones still in the memtable reach the tables when it
	// flushes (under traffic; here: a restart), and the next reclaim
	// compacts them away too.
	if err := e.db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := raftfsm.OpenDB(e.dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	e.db, e.r.db = db, db
	if e.fsm, err = raftfsm.Open(db); err != nil {
		t.Fatal(err)
	}
	e.r.fsm = e.fsm
	e.clock.Advance(reclaimInterval)
	e.r.tick(context.Background())
	flushAlloc, flushApparent, flushSST := diskUsage(e.dir)
	t.Logf("after the memtable flushed and the next reclaim: %d on disk (%d apparent, %d in tables)", flushAlloc, flushApparent, flushSST)
	if full && (flushAlloc*10 >= beforeAlloc || flushSST*10 > beforeSST) {
		t.Fatalf("after the second reclaim %d bytes on disk (%d in tables), before %d (%d): not below a tenth", flushAlloc, flushSST, beforeAlloc, beforeSST)
	}
	for _, id := range kept {
		if e.state(id) == 0 {
			t.Errorf("task %s gone after the restart", id)
		}
	}
}

// A follower (not leading) proposes nothing; it still reclaims after the
// deletes it applied: it compacts after many (a quarter of its store or
// more), once more at the next reclaim, and not for a few.
func TestRetentionFollowerOnlyReclaims(t *testing.T) {
	e := newRetEnv(t, time.Second, time.Second)
	e.observe()
	e.leader = false
	e.r.minDeletes = 100
	e.finishMany("t", 300, 10)
	e.clock.Advance(5 * time.Second)
	e.r.tick(context.Background())
	if c := e.fsm.Counts(); c[raftfsm.StateCancelled] != 300 {
		t.Fatalf("a follower purged: %v", c)
	}
	compacted := 0
	e.r.compact = func() error { compacted++; return nil }
	step := func(what string, advance time.Duration, want int) {
		t.Helper()
		e.clock.Advance(advance)
		e.r.tick(context.Background())
		if compacted != want {
			t.Fatalf("%s: compacted %d times, want %d", what, compacted, want)
		}
	}
	// The leader's purges apply here: 50 (below minDeletes), then 200.
	fts, _ := e.fsm.Expired(e.nowMs(), time.Second, time.Second, 50, nil)
	if _, err := e.r.Purge(context.Background(), fts, PurgeReasonAPI); err != nil {
		t.Fatal(err)
	}
	step("50 deletes, before the interval", 0, 0)
	step("50 deletes, at the interval", reclaimInterval, 0)
	fts, _ = e.fsm.Expired(e.nowMs(), time.Second, time.Second, 200, nil)
	if _, err := e.r.Purge(context.Background(), fts, PurgeReasonAPI); err != nil {
		t.Fatal(err)
	}
	step("200 more deletes (250 of 300)", 0, 1)
	step("the next reclaim", reclaimInterval, 2)
	step("no deletes since", reclaimInterval, 2)
	// 50 left, and 900 more: 110 deletes of a store of 950 are below a
	// quarter; 300 more (410 of 950) are not.
	e.finishMany("u", 900, 10)
	e.clock.Advance(2 * time.Second)
	purge := func(n int) {
		t.Helper()
		fts, _ := e.fsm.Expired(e.nowMs(), time.Second, time.Second, n, nil)
		if k, err := e.r.Purge(context.Background(), fts, PurgeReasonAPI); err != nil || k != n {
			t.Fatalf("purged %d of %d: %v", k, n, err)
		}
	}
	purge(110)
	step("110 deletes of 950", reclaimInterval, 2)
	purge(300)
	step("410 deletes of 950", 0, 3)
}

// A purge cycle stops at its bound of entries, and at a proposal that
// fails (leadership lost); the next cycle goes on.
func TestRetentionCycleBounds(t *testing.T) {
	e := newRetEnv(t, time.Second, time.Second)
	e.r.batch = 10
	e.finishMany("t", 3000, 10)
	e.clock.Advance(2 * time.Second)
	entries := 0
	apply := e.r.propose
	e.r.propose = func(ctx context.Context, cmds []raftfsm.Command) ([]raftfsm.Result, error) {
		entries++
		if len(cmds) != 1 || len(cmds[0].Purge.Tasks) > 10 {
			t.Fatalf("entry of %d commands, %d ids", len(cmds), len(cmds[0].Purge.Tasks))
		}
		return apply(ctx, cmds)
	}
	n, err := e.r.cycle(context.Background(), e.clock.Now())
	if err != nil || n != purgeEntriesPerCycle*10 || entries != purgeEntriesPerCycle {
		t.Fatalf("cycle purged %d in %d entries (%v), want %d in %d", n, entries, err, purgeEntriesPerCycle*10, purgeEntriesPerCycle)
	}
	e.r.propose = func(context.Context, []raftfsm.Command) ([]raftfsm.Result, error) { return nil, errNotLeader }
	if n, err := e.r.cycle(context.Background(), e.clock.Now()); n != 0 || err != errNotLeader {
		t.Fatalf("cycle without leadership: %d, %v", n, err)
	}
	e.r.propose = apply
	if n, err := e.r.cycle(context.Background(), e.clock.Now()); err != nil || n != 3000-purgeEntriesPerCycle*10 {
		t.Fatalf("next cycle purged %d, %v", n, err)
	}
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	return testutil.ToFloat64(c)
}

func allocatedBytes(fi os.FileInfo) int64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Blocks * 512
	}
	return fi.Size()
}

// run waits for its interval on the node's clock, then ticks: with a fake
// clock nothing is purged until the clock moves.
func TestRetentionRunTicksOnTheClock(t *testing.T) {
	e := newRetEnv(t, time.Second, time.Second)
	e.observe()
	e.finishMany("t", 100, 10)
	e.clock.Advance(2 * time.Second)
	proposed := make(chan int, 16)
	apply := e.r.propose
	e.r.propose = func(ctx context.Context, cmds []raftfsm.Command) ([]raftfsm.Result, error) {
		res, err := apply(ctx, cmds)
		proposed <- res[0].PurgedCount()
		return res, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); e.r.Run(ctx) }()
	defer func() { cancel(); <-done }()
	e.clock.BlockUntil(1) // run's timer is armed
	select {
	case n := <-proposed:
		t.Fatalf("purged %d before the interval passed", n)
	default:
	}
	e.clock.Advance(e.r.interval)
	select {
	case n := <-proposed:
		if n != 100 {
			t.Fatalf("purged %d, want 100", n)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no purge 10 s after the interval passed on the clock")
	}
}

// flowOfOne stores flow id of one stage, ended by outcome o (0: left
// running).
func (e *retEnv) flowOfOne(id string, o raftfsm.Outcome) {
	e.t.Helper()
	st := raftfsm.FlowStage{Name: "A", Spec: raftfsm.Spec{Handler: "h", Priority: 2, TimeoutNs: int64(time.Second), MaxAttempts: 1}}
	e.apply(raftfsm.Command{Type: raftfsm.CmdFlow, Flow: &raftfsm.FlowSubmit{ID: id, Spec: raftfsm.FlowSpec{Stages: []raftfsm.FlowStage{st}},
		DueMs: e.nowMs(), AtMs: e.nowMs()}})
	tid := raftfsm.FlowStageID(id, 1, "A")
	t, err := e.fsm.Task(tid)
	if err != nil {
		e.t.Fatal(err)
	}
	e.fire(tid, t.Epoch, 1)
	if o != 0 {
		e.complete(raftfsm.Complete{ID: tid, Epoch: t.Epoch, Attempt: 1, Outcome: o, Error: "x"})
	}
}

// Finished flows go by the task flags (SUCCESS after Keep, FAILED after
// KeepDead); a running flow stays.
func TestRetentionPurgesFlows(t *testing.T) {
	e := newRetEnv(t, time.Second, time.Hour)
	e.flowOfOne("ok", raftfsm.OutcomeSuccess)
	e.flowOfOne("failed", raftfsm.OutcomePermanent)
	e.flowOfOne("running", 0)
	exists := func(id string) bool { _, err := e.fsm.Flow(id); return err == nil }
	e.clock.Advance(2 * time.Second)
	e.r.tick(context.Background())
	if exists("ok") || !exists("failed") || !exists("running") {
		t.Fatalf("after 2 s: ok %v, failed %v, running %v; want only ok gone", exists("ok"), exists("failed"), exists("running"))
	}
	e.clock.Advance(time.Hour)
	e.r.tick(context.Background())
	if exists("failed") || !exists("running") {
		t.Fatalf("after an hour: failed %v, running %v", exists("failed"), exists("running"))
	}
}

// A batch of which nothing is purged does not end the cycle: stage tasks
// of flows still running are expired but kept (the FSM refuses to purge
// them), and the finished tasks after them in the index go in the same
// cycle. (The cycle used to stop at such a batch, so three stages of
// running flows at the head of the index kept anything behind them from
// ever being purged.)
func TestRetentionCycleGoesPastKeptStages(t *testing.T) {
	e := newRetEnv(t, time.Second, time.Hour)
	e.r.batch = 2
	st := func(name string, after ...string) raftfsm.FlowStage {
		return raftfsm.FlowStage{Name: name, DependsOn: after, Spec: raftfsm.Spec{Handler: "h", Priority: 2, TimeoutNs: int64(time.Second), MaxAttempts: 1}}
	}
	var stages []string
	for i := range 3 {
		id := fmt.Sprintf("flow%d", i)
		e.apply(raftfsm.Command{Type: raftfsm.CmdFlow, Flow: &raftfsm.FlowSubmit{ID: id,
			Spec: raftfsm.FlowSpec{Stages: []raftfsm.FlowStage{st("A"), st("B", "A")}}, DueMs: e.nowMs(), AtMs: e.nowMs()}})
		tid := raftfsm.FlowStageID(id, 1, "A")
		tk, err := e.fsm.Task(tid)
		if err != nil {
			t.Fatal(err)
		}
		e.fire(tid, tk.Epoch, 1)
		e.complete(raftfsm.Complete{ID: tid, Epoch: tk.Epoch, Attempt: 1, Outcome: raftfsm.OutcomeSuccess})
		stages = append(stages, tid)
	}
	e.clock.Advance(time.Millisecond) // the plain tasks finish after the stages
	e.finishMany("z", 5, 10)
	e.clock.Advance(2 * time.Second)
	e.r.tick(context.Background())
	for i := range 5 {
		if _, err := e.fsm.Task(fmt.Sprintf("z%07d", i)); err == nil {
			t.Errorf("z%07d is still stored after the cycle", i)
		}
	}
	for _, id := range stages {
		if tk, err := e.fsm.Task(id); err != nil || tk.State != raftfsm.StateSuccess {
			t.Errorf("stage %s of a running flow: %+v, %v; want kept, SUCCESS", id, tk, err)
		}
	}
}

// A batch of which nothing is purged, its tasks having changed since the
// read (here submitted again over themselves), does not end the cycle: the
// tasks after it go in the same cycle.
func TestRetentionCycleGoesPastUnpurgedBatch(t *testing.T) {
	e := newRetEnv(t, time.Second, time.Hour)
	e.r.batch = 2
	e.finishMany("a", 2, 10)
	e.clock.Advance(time.Millisecond)
	e.finishMany("z", 5, 10)
	e.clock.Advance(2 * time.Second)
	apply, first := e.r.propose, true
	e.r.propose = func(ctx context.Context, cmds []raftfsm.Command) ([]raftfsm.Result, error) {
		if first {
			first = false
			for _, id := range []string{"a0000000", "a0000001"} {
				e.apply(raftfsm.Command{Type: raftfsm.CmdSubmit, Submit: &raftfsm.Submit{ID: id, Overwrite: true, DueMs: e.nowMs() + 3600_000, AtMs: e.nowMs(),
					Spec: raftfsm.Spec{Handler: "bulk", Priority: 2, TimeoutNs: int64(time.Second), MaxAttempts: 3}}})
			}
		}
		return apply(ctx, cmds)
	}
	e.r.tick(context.Background())
	for i := range 5 {
		if _, err := e.fsm.Task(fmt.Sprintf("z%07d", i)); err == nil {
			t.Errorf("z%07d is still stored after the cycle", i)
		}
	}
	for _, id := range []string{"a0000000", "a0000001"} {
		if tk, err := e.fsm.Task(id); err != nil || tk.State != raftfsm.StateWaiting {
			t.Errorf("%s, submitted again before its purge: %+v, %v; want WAITING", id, tk, err)
		}
	}
}
