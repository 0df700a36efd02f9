package sidecar

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/hashicorp/raft"

	"github.com/axsched/ax/engine"
	"github.com/axsched/ax/raftfsm"
)

const (
	// maxBatchCommands bounds the commands group-committed in one Raft entry.
	maxBatchCommands = 512
	// maxBatchBytes bounds the payload bytes in one Raft entry.
	maxBatchBytes = 4 << 20
	// applyTimeout bounds how long one entry may wait to be enqueued by raft.
	applyTimeout = 10 * time.Second
)

type proposal struct {
	cmds []raftfsm.Command
	done chan proposalResult
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
}

func newProposer(n *Node) *proposer { return &proposer{n: n, ch: make(chan *proposal, 1024)} }

// propose applies cmds on this node, which must lead. It returns one result
// per command once the entry is committed and applied, ErrNotLeader when
// this node does not lead, or raft's error (raft.ErrLeadershipLost means the
// entry may or may not survive).
func (p *proposer) propose(ctx context.Context, cmds []raftfsm.Command) ([]raftfsm.Result, error) {
	if p.n.raft.State() != raft.Leader {
		return nil, ErrNotLeader
	}
	pr := &proposal{cmds: cmds, done: make(chan proposalResult, 1)}
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
		for ncmds < maxBatchCommands && nbytes < maxBatchBytes {
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
	start := time.Now()
	f := p.n.raft.Apply(data, applyTimeout)
	// Wait for the commit off this goroutine so that the next batch can be
	// built and enqueued meanwhile (raft pipelines the entries).
	go func() {
		if err := f.Error(); err != nil {
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
			pr.done <- proposalResult{results: results[:len(pr.cmds):len(pr.cmds)]}
			results = results[len(pr.cmds):]
		}
	}()
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
		if s.Spec.RunAtMs != 0 {
			s.DueMs = s.Spec.RunAtMs
		} else {
			s.DueMs = ceilMs(now.Add(time.Duration(s.Spec.DelayNs)))
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
		switch x.Outcome {
		case raftfsm.OutcomeRetryable, raftfsm.OutcomeTimeout:
			x.RetryDueMs = ceilMs(now.Add(engine.BackoffDefault.Delay(x.Attempt, rand.Float64())))
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

// ceilMs returns t in Unix milliseconds, rounded up.
func ceilMs(t time.Time) int64 {
	ms := t.UnixMilli()
	if t.Sub(time.UnixMilli(ms)) > 0 {
		ms++
	}
	return ms
}
