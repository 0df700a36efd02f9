package sidecar

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/axsched/ax/engine"
	"github.com/axsched/ax/raftfsm"
)

const (
	// MaxBatchCommandsDefault bounds the commands group-committed in one
	// Raft entry (Config.MaxBatchCommands).
	MaxBatchCommandsDefault = 512
	// maxBatchBytes bounds the payload bytes in one Raft entry.
	maxBatchBytes = 4 << 20
	// applyTimeout bounds how long one entry may wait to be enqueued by raft.
	applyTimeout = 10 * time.Second
)

type proposal struct {
	cmds     []raftfsm.Command
	done     chan proposalResult
	warnings map[int]string // command index → backlog warning
}

type proposalResult struct {
	results []raftfsm.Result
	err     error
}

// proposer group-commits the leader's proposals: every command that arrives
// while the previous entry is being built goes into the next Raft entry, so
// a burst of submits, fires and completions costs few log writes. It also
// fills in what only the leader decides: times and retry due times.
type proposer struct {
	n  *Node
	ch chan *proposal
	// task reads a task from the local store (nil when absent), for the
	// decisions that depend on it: a retry's backoff, a recurring task's
	// next slot. A stale read is harmless: the FSM checks epoch and attempt.
	task      func(id string) *raftfsm.Task
	schedules scheduleCache
}

func newProposer(n *Node) *proposer {
	return &proposer{n: n, ch: make(chan *proposal, 1024), task: func(id string) *raftfsm.Task {
		t, err := n.fsm.Task(id)
		if err != nil {
			return nil
		}
		return t
	}}
}

// propose applies cmds on this node, which must lead. It returns one result
// per command once the entry is committed and applied, ErrNotLeader when
// this node does not lead, a *StorageUnavailableError when this node's
// storage stayed unavailable until ctx ended, or raft's error
// (raft.ErrLeadershipLost means the entry may or may not survive).
func (p *proposer) propose(ctx context.Context, cmds []raftfsm.Command) ([]raftfsm.Result, error) {
	if p.n.raft.State() != raft.Leader {
		return nil, ErrNotLeader
	}
	// A leader whose storage cannot take writes holds its proposals (its
	// own timer fires, forwarded writes) until it recovers, ctx ends or
	// leadership moves (storageDown transfers it): a fire is never dropped
	// while the entry could not be applied here.
	if p.n.storage != nil {
		if err := p.waitWritable(ctx); err != nil {
			return nil, err
		}
	}
	warnings, err := p.admit(cmds)
	if err != nil {
		return nil, err
	}
	pr := &proposal{cmds: cmds, done: make(chan proposalResult, 1), warnings: warnings}
	select {
	case p.ch <- pr:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	select {
	case r := <-pr.done:
		return r.results, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// waitWritable waits until this node's storage takes writes. It returns
// the *StorageUnavailableError when ctx ends first, and ErrNotLeader as soon
// as this node loses leadership meanwhile (storageDown transfers it), so
// that a forwarded proposal goes to the new leader at once.
func (p *proposer) waitWritable(ctx context.Context) error {
	return p.n.storage.waitWritable(ctx, func() error {
		if p.n.raft.State() != raft.Leader {
			return ErrNotLeader
		}
		return nil
	})
}

func (p *proposer) run(ctx context.Context) {
	for {
		var first *proposal
		select {
		case <-ctx.Done():
			return
		case first = <-p.ch:
		}
		batch := []*proposal{first}
		ncmds, nbytes := len(first.cmds), cmdBytes(first.cmds)
	drain:
		for ncmds < p.n.cfg.MaxBatchCommands && nbytes < maxBatchBytes {
			select {
			case pr := <-p.ch:
				batch = append(batch, pr)
				ncmds += len(pr.cmds)
				nbytes += cmdBytes(pr.cmds)
			default:
				break drain
			}
		}
		p.apply(batch, ncmds)
	}
}

// admitWindow: a submit due within it counts against its handler's
// backlog bound at once.
const admitWindow = time.Second

// admit applies backpressure (DESIGN.md section 9): a submit due within
// admitWindow whose handler's backlog of due, undelivered runs is at
// Config.BacklogLimit fails with *BacklogError, and nothing of cmds is
// proposed. From 80 % of the bound the admitted submits get a warning.
func (p *proposer) admit(cmds []raftfsm.Command) (map[int]string, error) {
	limit := p.n.cfg.BacklogLimit
	if limit <= 0 {
		return nil, nil
	}
	now := p.n.clock.Now()
	var warnings map[int]string
	var added map[string]int
	for i := range cmds {
		s := cmds[i].Submit
		if cmds[i].Type != raftfsm.CmdSubmit || s == nil {
			continue
		}
		due := now.Add(time.Duration(s.Spec.DelayNs))
		if s.Spec.RunAtMs != 0 {
			due = time.UnixMilli(s.Spec.RunAtMs)
		} else if s.Spec.DelayNs == 0 && s.Spec.Recurring() {
			continue // its first slot is later
		}
		if due.Sub(now) > admitWindow {
			continue
		}
		h := s.Spec.Handler
		if added == nil {
			added = map[string]int{}
		}
		depth := p.n.leader.depth(h) + added[h]
		if depth >= limit {
			// A submit of an existing id without overwrite adds no run: the
			// FSM answers it 200 (same spec: a client retrying after a lost
			// reply) or 409. Only then is the store read.
			if !s.Overwrite && p.task(s.ID) != nil {
				continue
			}
			return nil, &BacklogError{Handler: h, Depth: depth, Limit: limit}
		}
		added[h]++
		if (depth+1)*5 >= limit*4 {
			if warnings == nil {
				warnings = map[int]string{}
			}
			warnings[i] = strconv.Itoa(depth+1) + "/" + strconv.Itoa(limit)
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
	}
	return n
}

func (p *proposer) apply(batch []*proposal, ncmds int) {
	all := make([]raftfsm.Command, 0, ncmds)
	now := p.n.clock.Now()
	for _, pr := range batch {
		for i := range pr.cmds {
			p.prepare(&pr.cmds[i], now)
		}
		all = append(all, pr.cmds...)
	}
	fail := func(err error) {
		for _, pr := range batch {
			pr.done <- proposalResult{err: err}
		}
	}
	data, err := raftfsm.EncodeEntry(all)
	if err != nil {
		fail(err)
		return
	}
	p.n.metrics.entryCommands.Observe(float64(len(all)))
	start := time.Now()
	f := p.n.raft.Apply(data, applyTimeout)
	// Wait for the commit off this goroutine so that the next batch can be
	// built and enqueued meanwhile (raft pipelines the entries).
	go func() {
		if err := p.waitFuture(f); err != nil {
			if errors.Is(err, raft.ErrNotLeader) {
				err = ErrNotLeader
			}
			fail(err)
			return
		}
		p.n.metrics.commitLatency.Observe(time.Since(start).Seconds())
		results, ok := f.Response().([]raftfsm.Result)
		if !ok || len(results) != len(all) {
			fail(fmt.Errorf("entry %d: unexpected apply response %T", f.Index(), f.Response()))
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
	}()
}

// waitFuture returns f's error, or a *StorageUnavailableError as soon as
// this node's storage becomes unavailable while it waits: the entry may be
// committed, but this node cannot apply it until its disk takes writes
// again, so the caller hears now (and retries, with the same ids, on the
// next leader) rather than at its deadline.
func (p *proposer) waitFuture(f raft.ApplyFuture) error {
	if p.n.storage == nil {
		return f.Error()
	}
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	for {
		ch := p.n.storage.changedCh()
		if e := p.n.storage.err(); e != nil {
			select {
			case err := <-done:
				return err
			default:
				return e
			}
		}
		select {
		case err := <-done:
			return err
		case <-ch:
		}
	}
}

// prepare fills in the fields the leader decides: times, due times of new
// tasks and retries. It is idempotent: it reads only fields it never
// writes, since the same commands may be prepared again by the next leader. Times are Unix milliseconds; due times are rounded up
// so that a task never fires before the instant the client asked for.
func (p *proposer) prepare(c *raftfsm.Command, now time.Time) {
	nowMs := now.UnixMilli()
	switch c.Type {
	case raftfsm.CmdSubmit:
		s := c.Submit
		s.AtMs = nowMs
		switch {
		case s.Spec.RunAtMs != 0:
			s.DueMs = s.Spec.RunAtMs
		case s.Spec.DelayNs > 0 || !s.Spec.Recurring():
			s.DueMs = ceilMs(now.Add(time.Duration(s.Spec.DelayNs)))
		default: // a recurring task without a start: its first slot
			sched, err := p.schedules.get(&s.Spec)
			if err != nil { // validated by the API: cannot happen
				p.n.log.Error().Err(err).Str("task_id", s.ID).Msg("invalid schedule")
				s.DueMs = nowMs
				break
			}
			s.DueMs = ceilMs(sched.Next(now))
		}
		s.SlotMs = 0
		if s.Spec.Recurring() {
			s.SlotMs = s.DueMs
		}
	case raftfsm.CmdCancel:
		c.Cancel.AtMs = nowMs
	case raftfsm.CmdFire:
		if c.Fire.AtMs == 0 {
			c.Fire.AtMs = nowMs
		}
	case raftfsm.CmdComplete:
		x := c.Complete
		x.AtMs = nowMs
		x.NextSlotMs, x.NextDueMs = 0, 0
		t := p.task(x.ID)
		switch x.Outcome {
		case raftfsm.OutcomeSuccess:
			p.nextRun(x, t, now)
		case raftfsm.OutcomeRetryable, raftfsm.OutcomeTimeout, raftfsm.OutcomeLost:
			b := engine.BackoffDefault
			if t != nil && t.Spec.Backoff != nil {
				sb := t.Spec.Backoff
				b = engine.Backoff{Initial: time.Duration(sb.InitialNs), Max: time.Duration(sb.MaxNs), Multiplier: sb.Multiplier, Jitter: sb.Jitter}
			}
			x.RetryDueMs = ceilMs(now.Add(b.Delay(x.Attempt, rand.Float64())))
			if t != nil && x.Attempt >= t.Spec.MaxAttempts {
				p.nextRun(x, t, now) // the run is DEAD: a recurring task goes on
			}
		case raftfsm.OutcomeBusy:
			// Computed from RetryAfterMs, never from RetryDueMs: prepare must
			// be idempotent, because propose resends the same commands
			// after a leadership change.
			wait := max(time.Duration(x.RetryAfterMs)*time.Millisecond, time.Second)
			x.RetryDueMs = ceilMs(now.Add(wait))
		}
	case raftfsm.CmdNode:
		c.Node.UpdateMs = nowMs
	case raftfsm.CmdExecutor:
		c.Executor.AtMs = nowMs
	case raftfsm.CmdRetry:
		c.Retry.AtMs = nowMs
	case raftfsm.CmdLease:
		c.Lease.AtMs = nowMs
		c.Lease.GraceMs = p.n.cfg.LeaseGrace.Milliseconds()
	}
}

// nextRun decides the next run of a recurring task whose run ends now:
// the schedule's next slot after the run's slot, with the misfire rule
// (missed slots fire once, then the schedule goes on; the run that ends
// counts as that one run for the slots up to its start:
// engine.Schedule.NextRunAfter),
// unless repeats or until end it.
func (p *proposer) nextRun(x *raftfsm.Complete, t *raftfsm.Task, now time.Time) {
	if t == nil || !t.Spec.Recurring() || t.Attempts != x.Attempt {
		return
	}
	sched, err := p.schedules.get(&t.Spec)
	if err != nil {
		p.n.log.Error().Err(err).Str("task_id", t.ID).Msg("recurring task has an invalid schedule; ending it")
		return
	}
	prev := time.UnixMilli(t.SlotMs)
	if t.SlotMs == 0 {
		prev = time.UnixMilli(t.DueMs)
	}
	// The run that ends was the one run of every slot up to its start
	// (FiredMs): only slots since then may fire at once (NextRunAfter).
	slot, skipped := sched.NextRunAfter(prev, time.UnixMilli(t.FiredMs), now)
	limits := engine.Limits{Repeats: t.Spec.Repeats}
	if t.Spec.UntilMs != 0 {
		limits.Until = time.UnixMilli(t.Spec.UntilMs)
	}
	if limits.Done(max(t.Run, 1), slot) {
		return
	}
	if skipped > 0 {
		p.n.log.Info().Str("task_id", t.ID).Int("skipped", skipped).Time("slot", slot).Msg("recurring task missed slots: firing once for all of them")
	}
	x.NextSlotMs = ceilMs(slot)
	x.NextDueMs = x.NextSlotMs
}

// scheduleCache keeps parsed schedules by their spec, so that a busy
// recurring task is not parsed at every run.
type scheduleCache struct {
	mu sync.Mutex
	m  map[string]*engine.Schedule
}

// scheduleCacheMax bounds the cache; it is cleared when full.
const scheduleCacheMax = 4096

func (c *scheduleCache) get(s *raftfsm.Spec) (*engine.Schedule, error) {
	key := s.Cron + "\x00" + s.Timezone + "\x00" + strconv.FormatInt(s.EveryNs, 10)
	c.mu.Lock()
	defer c.mu.Unlock()
	if sc := c.m[key]; sc != nil {
		return sc, nil
	}
	var sc *engine.Schedule
	var err error
	if s.Cron != "" {
		sc, err = engine.ParseCron(s.Cron, s.Timezone)
	} else {
		sc, err = engine.Every(time.Duration(s.EveryNs))
	}
	if err != nil {
		return nil, err
	}
	if c.m == nil || len(c.m) >= scheduleCacheMax {
		c.m = map[string]*engine.Schedule{}
	}
	c.m[key] = sc
	return sc, nil
}

// ceilMs returns t in Unix milliseconds, rounded up.
func ceilMs(t time.Time) int64 {
	ms := t.UnixMilli()
	if t.Sub(time.UnixMilli(ms)) > 0 {
		ms++
	}
	return ms
}
