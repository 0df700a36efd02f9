package raftstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/axsched/ax/engine"
	"github.com/axsched/ax/raftfsm"
)

const (
	// MaxBatchCommandsDefault bounds the commands group-committed in one
	// Raft entry (Config.MaxBatchCommands).
	MaxBatchCommandsDefault = 512
	// MaxInflightEntriesDefault bounds the entries the proposer has in
	// flight (proposed, not yet applied; ProposerConfig.MaxInflightEntries).
	MaxInflightEntriesDefault = 1
	// maxBatchBytes bounds the payload bytes in one Raft entry.
	maxBatchBytes = 4 << 20
	// applyTimeout bounds how long one entry may wait to be enqueued by raft.
	applyTimeout = 10 * time.Second
	// caughtUpWait bounds how long a proposal whose Prepare reads the
	// store waits for ProposerConfig.CaughtUp (the barrier after an
	// election normally returns within one commit and the apply of what
	// the new leader had not applied yet); then it goes, prepared from
	// what the store holds, as before the wait existed. Half the peer
	// API's request timeout (peerapi.Timeout, 10 s) and of the
	// scheduler's barrier timeout: a Complete forwarded to a leader whose
	// barrier is slow is still answered rather than timed out.
	caughtUpWait = 5 * time.Second
	// caughtUpLogEvery spaces the warnings about proposals that went
	// after caughtUpWait (one per interval, with the count so far).
	caughtUpLogEvery = 10 * time.Second
)

type proposal struct {
	cmds     []raftfsm.Command
	done     chan proposalResult
	warnings map[int]string // command index → backlog warning
	// submits is the number of commands when every one is a submit
	// (submitsOf) and they do not fill an entry on their own, else 0:
	// what a gather waits for (ProposerConfig.GatherWait).
	submits int
	// queued is set when the proposal went to Run through ch with
	// submits counted in Proposer.queuedSubmits (cleared when proposed);
	// at is when (GatherClock).
	queued bool
	at     time.Time
}

type proposalResult struct {
	results []raftfsm.Result
	err     error
}

// Raft is what the proposer needs of *raft.Raft.
type Raft interface {
	State() raft.RaftState
	Apply(cmd []byte, timeout time.Duration) raft.ApplyFuture
}

// Backlog tells the proposer's admission how many due, undelivered runs a
// handler has (the leader's count; 0 on a node that does not lead).
type Backlog interface {
	Depth(handler string) int
}

// ProposerMetrics are the collectors the proposer feeds (registered by
// the node).
type ProposerMetrics struct {
	// EntryCommands observes the commands in each Raft entry.
	EntryCommands prometheus.Observer
	// CommitLatency observes, in seconds, each entry's time from Apply to
	// its commit and apply.
	CommitLatency prometheus.Observer
	// Gathers counts the entries that waited for callers
	// (ProposerConfig.GatherWait), by how the wait ended: GatherFull
	// (every caller expected came back, or the entry filled), GatherTimeout
	// (the wait's bound passed), GatherGap (no submit came for a while:
	// the callers did not come back together), GatherOther (a command
	// other than a submit came, and goes at once). nil: not counted.
	Gathers *prometheus.CounterVec
}

// How a gather ended (ProposerMetrics.Gathers' label "end").
const (
	GatherFull    = "full"
	GatherTimeout = "timeout"
	GatherGap     = "gap"
	GatherOther   = "other"
)

const (
	// gatherGapDefault: once a caller is back, a gather also ends when
	// no submit has come for this long (Proposer.gap). Callers answered
	// together come back close behind one another (16 callers on three
	// nodes, docs/perf/README.md, Fifteenth session: the first 0.25–0.4
	// ms after the apply, the last 0.6–1.0 ms, ~40 µs apart on average);
	// independent callers at a steady rate come 1/rate apart (333 µs at
	// 3 000/s), so an entry seldom waits long for them, and their misses
	// make the next gathers skip.
	gatherGapDefault = 250 * time.Microsecond
	// gatherBackoffMax bounds the misses counted (Proposer.misses): after
	// n gathers in a row that ended without every caller back, the next
	// 2^n - 1 planned gathers are skipped, at most 63.
	gatherBackoffMax = 6
)

// ProposerConfig is what NewProposer needs.
type ProposerConfig struct {
	Raft Raft
	// Guard holds proposals while storage is unavailable; nil: no guard.
	Guard *Guard
	// Prepare fills in what the leader decides in a command (times, due
	// times) just before it is encoded; it must be idempotent, since the
	// same commands may be prepared again by the next leader.
	Prepare func(c *raftfsm.Command, now time.Time)
	// Weight is what cmds count against MaxBatchCommands.
	Weight func(cmds []raftfsm.Command) int
	// Backlog and Task feed admission (admit); Task reads a task from the
	// local store, nil when absent (a stale read is harmless: the FSM
	// checks epoch and attempt).
	Backlog Backlog
	Task    func(id string) *raftfsm.Task
	// Flow reads a flow from the local store, nil when absent (admission
	// of a flow resubmit).
	Flow func(id string) *raftfsm.Flow
	// MaxBatchCommands bounds the commands of one entry
	// (Config.MaxBatchCommands).
	MaxBatchCommands int
	// MaxInflightEntries bounds the entries proposed and not yet applied
	// (group commit: proposals that arrive while the bound is reached
	// gather into the next entry); 0: MaxInflightEntriesDefault; less
	// than 0: no bound, every entry goes as soon as it is built and raft
	// pipelines them (a node without followers, whose entries cost
	// little each and whose rate is bound by the log's sync, not by CPU).
	MaxInflightEntries int
	// BoundSubmitsOnly makes MaxInflightEntries bound only the entries
	// that hold nothing but submits a gather counts (proposal.submits:
	// GatherWait above 0); any other entry (a fire, a completion, a
	// batch that fills an entry, a submit beside any of them) goes as
	// soon as it is built, beside the entries in flight, as with no
	// bound. Set on a single node: there raft pipelines entries cheaply
	// and fires and completions keep that, while callers who submit in
	// a loop get the one entry in flight that lets them gather
	// (docs/perf/README.md, Sixteenth session).
	BoundSubmitsOnly bool
	// LogWrites, when set, holds new entries while this node writes its
	// Raft log (LogWriting): a caller that finds a write in progress
	// queues for Run, which proposes what gathered as one entry when the
	// write ends, so that raft's leader loop, back from the write, finds
	// only its commit to handle. nil: entries go as soon as they are
	// built. Set on a single node (MaxInflightEntries unbounded); with
	// the group commit's bound an entry waits for the one in flight
	// anyway.
	LogWrites LogWrites
	// GatherWait, when above 0, lets an entry wait for the callers the
	// entry before it answered (the gather): when an applied entry held
	// GatherMinSubmits or more, the next entry built by Run stays open
	// until it holds as many submits as that entry did plus those queued when it
	// was applied, for at most GatherWait, and while submits keep coming
	// (no gap of gatherGapDefault); a command other than a submit (a
	// fire, a completion) ends the wait at once, and submits do not take
	// the direct path while one is due. A gather that ended without its
	// callers makes the next ones skip (gatherBackoffMax), so callers
	// that do not submit in a loop rarely wait. With one entry in flight
	// (MaxInflightEntries 1), callers that submit again as soon as they
	// are answered otherwise split into two groups that alternate
	// entries, each waiting for the other's commit; gathered, they share
	// one (DESIGN.md, The gather; docs/perf/README.md, Fifteenth
	// session). The same idea as
	// PostgreSQL's commit_delay and MySQL's binlog_group_commit_sync_delay,
	// which wait a fixed time; this one waits for the callers it expects,
	// so it ends sooner when they come back. 0: no gather.
	GatherWait time.Duration
	// GatherMinSubmits is the fewest submits an applied entry must hold
	// for the next entry to gather (GatherWait); 0 or less: 2. On a
	// single node, whose entries commit in a few hundred microseconds,
	// independent callers at a steady rate fill entries of two or three,
	// and a gather planned for them makes the next entry wait for as many
	// strangers (a median submit at 6 000/s took 1.0-1.3 ms instead of
	// 0.4-0.5); 4 keeps those from gathering while 8 callers in a loop,
	// split into entries of four, still do.
	GatherMinSubmits int
	// GatherClock times the gather (its bound, the gap, when callers
	// came back): a wait between Raft commits and callers, on real time
	// in a node even when Clock is a test's fake clock, which would
	// otherwise hold the entry until the test moved it
	// (config.Config.RetryClock). nil: engine.RealClock().
	GatherClock engine.Clock
	// CaughtUp, when set, returns a channel that is closed while this
	// node, as leader of its current term, has applied every entry
	// committed before the term (scheduler.Scheduler.CaughtUp: the
	// barrier after the election has returned). Prepare of some commands
	// reads this node's store (raftfsm.ReadsStore: a Complete, a Cancel
	// of a flow's stage task), and a new leader's store may still lack
	// entries of earlier terms: a proposal holding such a command waits
	// for the channel before it is queued or built into an entry, at
	// most caughtUpWait, or until its ctx ends (Propose then returns
	// ctx's error). Other proposals do not wait. nil: none waits.
	CaughtUp func() <-chan struct{}
	// BacklogLimit is Config.BacklogLimit; 0 or less: no admission check.
	BacklogLimit int
	Clock        engine.Clock
	Metrics      ProposerMetrics
	// Log receives the warnings about proposals that went after
	// caughtUpWait without CaughtUp; the zero Logger drops them.
	Log zerolog.Logger
}

// LogWrites is what the proposer needs of LogWriting.
type LogWrites interface {
	// Idle returns a channel that is closed when no write of the Raft log
	// is in progress (at once when none is).
	Idle() <-chan struct{}
}

// Proposer group-commits the leader's proposals: at most
// ProposerConfig.MaxInflightEntries entries are in flight (proposed, not
// yet applied), and every command that arrives while they are, or while
// the next entry is being built, goes into the next Raft entry, so a burst
// of submits, fires and completions costs few entries and log writes. A
// caller that finds the proposer idle and an entry free proposes on its
// own goroutine (the direct path). Before encoding an entry it lets
// ProposerConfig.Prepare fill in what only the leader decides; a
// proposal whose Prepare reads the store first waits for
// ProposerConfig.CaughtUp. Create it with NewProposer and start Run.
type Proposer struct {
	cfg ProposerConfig
	ch  chan *proposal
	// slots holds one token per entry in flight: taken before raft.Apply,
	// given back once the entry's outcome is known (waitFuture returns).
	slots chan struct{}
	// running is set while Run builds and applies an entry, direct while
	// a caller does (Propose's direct path).
	running, direct atomic.Bool
	// late counts the proposals that went after caughtUpWait without
	// CaughtUp; lateLogged is when that was last logged (Clock, Unix ns).
	late       atomic.Uint64
	lateLogged atomic.Int64
	// queuedSubmits counts the submits of proposals queued for Run and
	// not yet proposed (proposal.queued); plan is the gather the next
	// entry Run builds waits for, nil when none is due (GatherWait).
	queuedSubmits atomic.Int64
	plan          atomic.Pointer[gatherPlan]
	// misses counts the gathers in a row that ended without every caller
	// back (at most gatherBackoffMax); skips is how many planned gathers
	// are still to be skipped because of them. gap is gatherGapDefault
	// (tests change it).
	misses, skips atomic.Int32
	gap           time.Duration
}

// gatherPlan is the wait of the next entry (ProposerConfig.GatherWait):
// until it holds want submits, or until the time until (GatherClock);
// planned at the time at.
type gatherPlan struct {
	want      int
	at, until time.Time
}

// submitsOf returns len(cmds) when every command of cmds is a submit,
// else 0 (proposal.submits).
func submitsOf(cmds []raftfsm.Command) int {
	for i := range cmds {
		if cmds[i].Type != raftfsm.CmdSubmit {
			return 0
		}
	}
	return len(cmds)
}

// NewProposer returns a proposer; nil Weight counts one per command, nil
// Clock is the real clock.
func NewProposer(cfg ProposerConfig) *Proposer {
	if cfg.Weight == nil {
		cfg.Weight = func(cmds []raftfsm.Command) int { return len(cmds) }
	}
	if cfg.Clock == nil {
		cfg.Clock = engine.RealClock()
	}
	if cfg.GatherClock == nil {
		cfg.GatherClock = engine.RealClock()
	}
	if cfg.MaxBatchCommands <= 0 {
		cfg.MaxBatchCommands = MaxBatchCommandsDefault
	}
	if cfg.GatherMinSubmits <= 0 {
		cfg.GatherMinSubmits = 2
	}
	switch {
	case cfg.MaxInflightEntries == 0:
		cfg.MaxInflightEntries = MaxInflightEntriesDefault
	case cfg.MaxInflightEntries < 0:
		cfg.MaxInflightEntries = math.MaxInt32 // no bound
	}
	return &Proposer{cfg: cfg, ch: make(chan *proposal, 1024), slots: make(chan struct{}, cfg.MaxInflightEntries), gap: gatherGapDefault}
}

// Config returns p's configuration, with NewProposer's defaults filled in
// (MaxInflightEntries math.MaxInt32 when unbounded).
func (p *Proposer) Config() ProposerConfig { return p.cfg }

// Propose applies cmds on this node, which must lead. It returns one result
// per command once the entry is committed and applied, ErrNotLeader when
// this node does not lead, a *BacklogError when admission refuses a
// submit (nothing of cmds is proposed), a *StorageUnavailableError when
// this node's storage stayed unavailable until ctx ended, ctx's error
// when it ends while cmds wait for CaughtUp (nothing is proposed) or for
// their entry, or raft's error (raft.ErrLeadershipLost means the entry
// may or may not survive).
func (p *Proposer) Propose(ctx context.Context, cmds []raftfsm.Command) ([]raftfsm.Result, error) {
	if p.cfg.Raft.State() != raft.Leader {
		return nil, ErrNotLeader
	}
	// A leader whose storage cannot take writes holds its proposals (its
	// own timer fires, forwarded writes) until it recovers, ctx ends or
	// leadership moves (the node's Guard.SetOnDown callback transfers
	// it): a fire is never dropped while the entry could not be applied
	// here.
	// Inside the reserve, an entry that frees space (cancels, purges) is
	// still proposed down to the floor (diskpressure.go).
	if p.cfg.Guard != nil {
		if err := p.cfg.Guard.waitFor(ctx, cmds, p.notLeader); err != nil {
			return nil, err
		}
	}
	warnings, err := p.admit(cmds)
	if err != nil {
		return nil, err
	}
	// Held here, on the caller's goroutine, not where the entry is
	// built: there it would hold Run, or the direct path and an entry's
	// slot, and so every proposal behind it (submits, fires) too.
	if err := p.awaitCaughtUp(ctx, cmds); err != nil {
		return nil, err
	}
	pr := &proposal{cmds: cmds, done: make(chan proposalResult, 1), warnings: warnings}
	if p.cfg.GatherWait > 0 {
		// A full entry (a batch of tasks) goes at once and plans no
		// gather: its caller is not one of many that share entries.
		if n := submitsOf(cmds); n > 0 && !p.full(p.cfg.Weight(cmds), cmdBytes(cmds)) {
			pr.submits = n
		}
	}
	// While a gather is due, a submit joins Run's entry, which waits for
	// the callers the last entry answered; other proposals go as before.
	if (pr.submits == 0 || !p.gatherDue()) && p.applyDirect(ctx, pr) {
		r := <-pr.done
		return r.results, r.err
	}
	if pr.submits > 0 {
		pr.queued, pr.at = true, p.cfg.GatherClock.Now()
		p.queuedSubmits.Add(int64(pr.submits))
	}
	select {
	case p.ch <- pr:
	case <-ctx.Done():
		if pr.queued {
			p.queuedSubmits.Add(-int64(pr.submits))
		}
		return nil, ctx.Err()
	}
	select {
	case r := <-pr.done:
		return r.results, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// awaitCaughtUp returns once this node has caught up with its term
// (ProposerConfig.CaughtUp's channel is closed), at once when CaughtUp is
// not set or no command of cmds reads the store in Prepare
// (raftfsm.ReadsStore); after caughtUpWait it returns nil all the same
// (cmds are then prepared from what the store holds, as before the wait
// existed; counted and logged), and it returns ctx's error when ctx ends
// first. The channel is taken once: an open one is the one the next
// barrier to pass closes (Scheduler.CaughtUp).
func (p *Proposer) awaitCaughtUp(ctx context.Context, cmds []raftfsm.Command) error {
	if p.cfg.CaughtUp == nil || !readsStore(cmds) {
		return nil
	}
	ch := p.cfg.CaughtUp()
	select {
	case <-ch:
		return nil
	default:
	}
	t := p.cfg.Clock.NewTimer(caughtUpWait)
	defer t.Stop()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C():
	}
	n := p.late.Add(1)
	now := p.cfg.Clock.Now().UnixNano()
	if last := p.lateLogged.Load(); (last == 0 || now-last >= int64(caughtUpLogEvery)) && p.lateLogged.CompareAndSwap(last, now) {
		p.cfg.Log.Warn().Dur("waited", caughtUpWait).Uint64("total", n).
			Msg("proposing a complete or cancel before this leader has applied the entries of earlier terms (its barrier has not returned): it is prepared from what the store holds")
	}
	return nil
}

// readsStore reports whether a command of cmds reads the store in Prepare.
func readsStore(cmds []raftfsm.Command) bool {
	for i := range cmds {
		if raftfsm.ReadsStore(&cmds[i]) {
			return true
		}
	}
	return false
}

// applyDirect builds and applies pr's entry on the caller's goroutine when
// the proposer is idle (nothing queued, no entry being built by Run or
// another caller, fewer than MaxInflightEntries in flight, no log write in
// progress when LogWrites is set), waits there
// for its outcome (or for ctx to end: the
// entry may still be applied), and reports whether it did; pr.done then
// holds the outcome. A caller that comes alone saves the hand-offs to Run
// and to the goroutine that waits for an entry of Run's (about a tenth of
// a single submit's time on one node); callers that meet queue, and Run
// groups them as before. The proposer is idle again as soon as the entry
// is handed to raft, so the next caller may take the direct path while
// this one waits. Two entries built at once (Run just took a proposal
// when a caller found the queue empty) are harmless: raft.Apply is safe
// for concurrent use, and concurrent proposals have no order between
// them.
func (p *Proposer) applyDirect(ctx context.Context, pr *proposal) bool {
	batch := []*proposal{pr}
	w := p.cfg.Weight(pr.cmds)
	if p.full(w, cmdBytes(pr.cmds)) {
		// A full entry gains nothing by waiting: it goes now, beside
		// whatever is in flight (a batch of tasks, fires of a big slot).
		if e, ok := p.propose(batch, w); ok {
			p.deliver(batch, e, p.waitFuture(ctx, e.f, e.freeing))
		}
		return true
	}
	if p.running.Load() || len(p.ch) > 0 || p.logWrite() != nil || !p.direct.CompareAndSwap(false, true) {
		return false
	}
	if p.running.Load() || len(p.ch) > 0 {
		p.direct.Store(false)
		return false
	}
	slot := p.needsSlot(batch)
	if slot {
		select {
		case p.slots <- struct{}{}:
		default:
			p.direct.Store(false)
			return false // the bound is reached: pr gathers into Run's next entry
		}
	}
	e, ok := p.propose(batch, w)
	p.direct.Store(false)
	if !ok {
		if slot {
			<-p.slots
		}
		return true
	}
	// The slot is given back when the outcome is known, or when ctx ends
	// first (the entry may still be applied: the bound is then loose by
	// one entry for a while, as it is for an entry a storage error answered).
	err := p.waitFuture(ctx, e.f, e.freeing)
	p.planGather(e, err, slot)
	if slot {
		<-p.slots
	}
	p.deliver(batch, e, err)
	return true
}

// needsSlot reports whether the entry of batch counts against
// MaxInflightEntries: always, unless BoundSubmitsOnly, and then only when
// it holds nothing but submits a gather counts (allSubmits).
func (p *Proposer) needsSlot(batch []*proposal) bool {
	return !p.cfg.BoundSubmitsOnly || allSubmits(batch)
}

// allSubmits reports whether every proposal of batch is submits a gather
// counts (proposal.submits).
func allSubmits(batch []*proposal) bool {
	for _, pr := range batch {
		if pr.submits == 0 {
			return false
		}
	}
	return true
}

// gatherDue reports whether a gather is planned and its bound has not
// passed (GatherWait).
func (p *Proposer) gatherDue() bool {
	g := p.plan.Load()
	return g != nil && p.cfg.GatherClock.Now().Before(g.until)
}

// planGather plans the gather of the entry after e, whose outcome err
// is known (GatherWait): due when e was applied and held
// GatherMinSubmits submits or more, unless misses say to skip it; none
// when e failed or held fewer; unchanged when e held none (a fire's or a
// completion's entry: the callers expected back still are), and
// unchanged too when e took no slot with BoundSubmitsOnly (it went beside
// the entries in flight: a fire that took submits along; such entries
// complete concurrently with the one the plan is for and would plan over
// it). Called before e's slot is given back, so that Run, which takes the
// slot next, sees it.
func (p *Proposer) planGather(e proposed, err error, slot bool) {
	if p.cfg.GatherWait <= 0 || (!slot && p.cfg.BoundSubmitsOnly) {
		return
	}
	switch {
	case err != nil || (e.submits > 0 && e.submits < p.cfg.GatherMinSubmits):
		p.plan.Store(nil)
		return
	case e.submits == 0:
		return
	case p.skips.Load() > 0:
		// Only an entry holding a slot gets here (a full batch counts
		// no submits), and with one slot, as every node has, plans are
		// made one at a time: no race between Load and Add.
		p.skips.Add(-1)
		p.plan.Store(nil)
		return
	}
	now := p.cfg.GatherClock.Now()
	p.plan.Store(&gatherPlan{want: int(p.queuedSubmits.Load()) + e.submits, at: now, until: now.Add(p.cfg.GatherWait)})
}

// gather keeps the entry Run builds (batch) open for the callers the
// last entry answered when a gather is planned (GatherWait), adding what
// arrives with add until the entry holds the submits planned, a
// proposal other than submits arrives, the entry is full or cannot grow
// (carry), no submit has come for p.gap, or the plan's bound passes. A
// gather that ended by the gap or the bound is a miss: the next
// 2^misses - 1 planned gathers are skipped; one that ended full takes a
// miss back. It returns false when ctx ended.
func (p *Proposer) gather(ctx context.Context, batch []*proposal, add func(*proposal), full func() bool) bool {
	if p.plan.Load() == nil || !allSubmits(batch) {
		return true // anything else goes at once, and the plan waits for the next entry
	}
	g := p.plan.Swap(nil)
	if g == nil {
		return true
	}
	submits := 0
	var back time.Time // the latest caller back so far
	for _, pr := range batch {
		submits += pr.submits
		if !pr.at.Before(g.at) && pr.at.After(back) {
			back = pr.at
		}
	}
	now := p.cfg.GatherClock.Now()
	d := g.until.Sub(now)
	if submits >= g.want || d <= 0 || full() {
		return true
	}
	// Until the first caller is back the bound holds; from then on, the
	// gap after the latest.
	if !back.IsZero() {
		d = min(d, p.gap-now.Sub(back))
	}
	t := p.cfg.GatherClock.NewTimer(d)
	defer t.Stop()
	end := GatherFull
	defer func() {
		switch end {
		case GatherFull:
			if n := p.misses.Load(); n > 0 {
				p.misses.Store(n - 1)
			}
			p.skips.Store(0)
		case GatherTimeout, GatherGap:
			n := min(p.misses.Load()+1, gatherBackoffMax)
			p.misses.Store(n)
			p.skips.Store(1<<n - 1)
		}
		if m := p.cfg.Metrics.Gathers; m != nil {
			m.WithLabelValues(end).Inc()
		}
	}()
	for submits < g.want && !full() {
		select {
		case pr := <-p.ch:
			add(pr)
			if pr.submits == 0 {
				end = GatherOther
				return true
			}
			submits += pr.submits
			t.Reset(min(g.until.Sub(p.cfg.GatherClock.Now()), p.gap))
		case now := <-t.C():
			end = GatherGap
			if !now.Before(g.until) {
				end = GatherTimeout
			}
			return true
		case <-ctx.Done():
			end = GatherOther
			return false
		}
	}
	return true
}

// Run builds and proposes entries until ctx ends. It takes the first
// queued proposal and adds what is queued; while MaxInflightEntries
// entries are in flight it keeps adding what arrives, and proposes the
// entry when one of them is applied, or at once when it is full
// (MaxBatchCommands or maxBatchBytes: waiting would not make it carry
// more) or, with BoundSubmitsOnly, holds anything but submits.
func (p *Proposer) Run(ctx context.Context) {
	var carry *proposal // taken from ch, left for the next entry
	for {
		first := carry
		carry = nil
		if first == nil {
			select {
			case <-ctx.Done():
				return
			case first = <-p.ch:
			}
		}
		p.running.Store(true)
		batch := []*proposal{first}
		ncmds, nbytes := p.cfg.Weight(first.cmds), cmdBytes(first.cmds)
		low := p.lowSpace()
		// add puts pr in the entry, or leaves it for the next one: while
		// storage is low, an entry is applied only when every command in
		// it frees space, so the classes are kept apart.
		add := func(pr *proposal) {
			if low && !sameClass(first, pr) {
				carry = pr
				return
			}
			batch = append(batch, pr)
			ncmds += p.cfg.Weight(pr.cmds)
			nbytes += cmdBytes(pr.cmds)
		}
		slot := false
		for {
		drain:
			for carry == nil && !p.full(ncmds, nbytes) {
				select {
				case pr := <-p.ch:
					add(pr)
				default:
					break drain
				}
			}
			if slot || p.full(ncmds, nbytes) {
				break
			}
			in := p.ch
			if carry != nil {
				in = nil // the entry cannot grow: wait for a slot only
			}
			if w := p.logWrite(); w != nil {
				// The log is being written: what arrives meanwhile joins
				// this entry, proposed when the write ends.
				select {
				case <-w:
				case pr := <-in:
					add(pr)
				case <-ctx.Done():
					p.running.Store(false)
					return
				}
				continue
			}
			if !p.needsSlot(batch) {
				break // it goes beside the entries in flight (BoundSubmitsOnly)
			}
			select {
			case p.slots <- struct{}{}:
				slot = true // drain once more: what came meanwhile goes too
			case pr := <-in:
				add(pr)
			case <-ctx.Done():
				p.running.Store(false)
				return
			}
		}
		if slot && carry == nil {
			full := func() bool { return carry != nil || p.full(ncmds, nbytes) }
			if !p.gather(ctx, batch, add, full) {
				p.running.Store(false)
				return
			}
		}
		p.apply(batch, ncmds, slot)
		p.running.Store(false)
	}
}

// logWrite returns a channel that is closed when the Raft log write in
// progress ends, or nil when none is (or LogWrites is not set).
func (p *Proposer) logWrite() <-chan struct{} {
	if p.cfg.LogWrites == nil {
		return nil
	}
	idle := p.cfg.LogWrites.Idle()
	select {
	case <-idle:
		return nil
	default:
		return idle
	}
}

// full reports whether an entry of ncmds commands (by Weight) and nbytes
// payload bytes takes no more.
func (p *Proposer) full(ncmds, nbytes int) bool {
	return ncmds >= p.cfg.MaxBatchCommands || nbytes >= maxBatchBytes
}

// admitWindow: a submit due within it counts against its handler's
// backlog bound at once.
const admitWindow = time.Second

// admit applies backpressure (DESIGN.md section 9): a submit due within
// admitWindow whose handler's backlog of due, undelivered runs is at
// BacklogLimit fails with *BacklogError, and so none of cmds is
// proposed. A flow submit due within admitWindow counts as one submit per
// root stage (a stage without dependencies: its task is created at once),
// against each root's handler. From 80 % of the bound the admitted submits
// get a warning.
func (p *Proposer) admit(cmds []raftfsm.Command) (map[int]string, error) {
	limit := p.cfg.BacklogLimit
	if limit <= 0 {
		return nil, nil
	}
	now := p.cfg.Clock.Now()
	var warnings map[int]string
	var added map[string]int
	for i := range cmds {
		// handlers gets one run now per entry; exists says whether the
		// command names a stored id without replacing it: it adds no
		// run, the FSM answers it 200 (same spec: a client retrying
		// after a lost reply) or 409. Only then is the store read.
		var handlers []string
		var exists func() bool
		switch c := &cmds[i]; {
		case c.Type == raftfsm.CmdSubmit && c.Submit != nil:
			s := c.Submit
			due, ok := raftfsm.SubmitDue(&s.Spec, now)
			if !ok || due.Sub(now) > admitWindow {
				continue // its first slot is later, or it is due later
			}
			handlers = []string{s.Spec.Handler}
			exists = func() bool { return !s.Overwrite && p.cfg.Task != nil && p.cfg.Task(s.ID) != nil }
		case c.Type == raftfsm.CmdFlow && c.Flow != nil && !c.Flow.Cancel:
			f := c.Flow
			due, ok := raftfsm.FlowDue(&f.Spec, now)
			if !ok || due.Sub(now) > admitWindow {
				continue
			}
			handlers = f.Spec.RootHandlers()
			exists = func() bool { return p.cfg.Flow != nil && p.cfg.Flow(f.ID) != nil }
		default:
			continue
		}
		mine := map[string]int{}
		worst := 0
		for _, h := range handlers {
			depth := added[h] + mine[h]
			if p.cfg.Backlog != nil {
				depth += p.cfg.Backlog.Depth(h)
			}
			if depth >= limit {
				if exists() {
					mine = nil
					break
				}
				return nil, &BacklogError{Handler: h, Depth: depth, Limit: limit}
			}
			mine[h]++
			worst = max(worst, depth+1)
		}
		if mine == nil {
			continue
		}
		if added == nil {
			added = map[string]int{}
		}
		for h, n := range mine {
			added[h] += n
		}
		if worst*5 >= limit*4 {
			if warnings == nil {
				warnings = map[int]string{}
			}
			warnings[i] = strconv.Itoa(worst) + "/" + strconv.Itoa(limit)
		}
	}
	return warnings, nil
}

func cmdBytes(cmds []raftfsm.Command) int {
	n := 0
	for _, c := range cmds {
		if c.Submit != nil {
			n += len(c.Submit.Spec.Payload)
		}
		if c.Flow != nil {
			for _, st := range c.Flow.Spec.Stages {
				n += len(st.Spec.Payload)
			}
		}
	}
	return n
}

// apply proposes the entry of batch and hands its outcome to the
// proposals once it is committed and applied, waiting for it off this
// goroutine so that the next entry can be built meanwhile. With slot, the
// caller has taken a slot, which apply gives back once the entry's
// outcome is known.
func (p *Proposer) apply(batch []*proposal, ncmds int, slot bool) {
	release := func() {
		if slot {
			<-p.slots
		}
	}
	e, ok := p.propose(batch, ncmds)
	if !ok {
		release()
		return
	}
	go func() {
		err := p.waitFuture(context.Background(), e.f, e.freeing)
		p.planGather(e, err, slot)
		release()
		p.deliver(batch, e, err)
	}()
}

// proposed is an entry handed to raft.
type proposed struct {
	f       raft.ApplyFuture
	ncmds   int
	submits int       // the entry's submits that a gather counts (proposal.submits)
	start   time.Time // when it was handed to raft
	freeing bool      // every command frees space (waitFuture)
}

// propose prepares, encodes and hands to raft the entry of batch, ncmds
// commands. It reports false when it could not (the proposals then have
// their error).
func (p *Proposer) propose(batch []*proposal, ncmds int) (proposed, bool) {
	all := make([]raftfsm.Command, 0, ncmds)
	now := p.cfg.Clock.Now()
	submits := 0
	for _, pr := range batch {
		submits += pr.submits
		if pr.queued {
			pr.queued = false
			p.queuedSubmits.Add(-int64(pr.submits))
		}
		for i := range pr.cmds {
			if p.cfg.Prepare != nil {
				p.cfg.Prepare(&pr.cmds[i], now)
			}
		}
		all = append(all, pr.cmds...)
	}
	data, err := raftfsm.EncodeEntry(all)
	if err != nil {
		fail(batch, err)
		return proposed{}, false
	}
	if m := p.cfg.Metrics.EntryCommands; m != nil {
		m.Observe(float64(len(all)))
	}
	start := p.cfg.Clock.Now()
	f := p.cfg.Raft.Apply(data, applyTimeout)
	return proposed{f: f, ncmds: len(all), submits: submits, start: start, freeing: raftfsm.EntryFreesSpace(all)}, true
}

// deliver hands each proposal of batch its results of entry e, or err
// (the outcome of waitFuture).
func (p *Proposer) deliver(batch []*proposal, e proposed, err error) {
	if err != nil {
		if errors.Is(err, raft.ErrNotLeader) {
			err = ErrNotLeader
		}
		fail(batch, err)
		return
	}
	if m := p.cfg.Metrics.CommitLatency; m != nil {
		m.Observe(p.cfg.Clock.Now().Sub(e.start).Seconds())
	}
	results, ok := e.f.Response().([]raftfsm.Result)
	if !ok || len(results) != e.ncmds {
		fail(batch, fmt.Errorf("entry %d: unexpected apply response %T", e.f.Index(), e.f.Response()))
		return
	}
	for _, pr := range batch {
		mine := results[:len(pr.cmds):len(pr.cmds)]
		for i, w := range pr.warnings {
			mine[i].Warning = w
		}
		pr.done <- proposalResult{results: mine}
		results = results[len(pr.cmds):]
	}
}

// fail hands err to every proposal of batch.
func fail(batch []*proposal, err error) {
	for _, pr := range batch {
		pr.done <- proposalResult{err: err}
	}
}

// waitFuture returns f's error, ctx's error when ctx ends first (the
// entry may still be applied), or a *StorageUnavailableError as soon as
// this node can no longer apply the entry while it waits (Guard.applyErr):
// the entry may be committed, but this node cannot apply it until its disk
// takes writes again, so the caller hears now (and retries, with the same
// ids, on the next leader) rather than at its deadline. While storage only
// refuses new writes (free space inside the reserve or the snapshot
// headroom, above the FSM's own gate) the entry is still applied, so it
// waits for the outcome, checking free space every 50 ms.
func (p *Proposer) waitFuture(ctx context.Context, f raft.ApplyFuture, freeing bool) error {
	g := p.cfg.Guard
	if g == nil && ctx.Done() == nil {
		return f.Error()
	}
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	if g == nil {
		select {
		case err := <-done:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	var tick <-chan time.Time
	for {
		ch := g.Changed()
		if e := g.applyErr(freeing); e != nil {
			select {
			case err := <-done:
				return err
			default:
				return e
			}
		}
		if tick == nil && g.Err() != nil {
			t := time.NewTicker(50 * time.Millisecond)
			defer t.Stop()
			tick = t.C
		}
		select {
		case err := <-done:
			return err
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		case <-tick:
		}
	}
}
