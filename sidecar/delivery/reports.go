package delivery

import (
	"context"
	"sync"
	"time"

	"github.com/axsched/ax/raftfsm"
)

// reportBatcher group-commits the outcome reports of this node's attempts
// (Complete commands): a report that finds no proposal of reports in
// flight is proposed at once, alone; the reports that arrive while one is
// in flight wait for it to return and then go together, in one proposal
// of at most max commands and reportBatchBytes of results. An idle node adds no delay to a report; a busy
// one sends one proposal per commit round trip (one Raft entry on the
// leader, one forward from a follower) instead of one per attempt. Each
// report gets the error of its proposal; results are not looked at (a
// stale report is answered, not applied, by the FSM, which checks epoch
// and attempt).
type reportBatcher struct {
	propose func(ctx context.Context, cmds []raftfsm.Command) error
	max     int             // commands per proposal, at least 1
	base    context.Context // the node's lifetime: a proposal ends with it
	timeout time.Duration   // bounds one proposal

	mu      sync.Mutex
	queue   []*queuedReport
	running bool // a flusher goroutine is proposing
}

// reportBatchBytes bounds the results and error texts of the reports
// proposed together (a result is up to raftfsm.ResultMaxBytes): one
// report always goes.
const reportBatchBytes = 1 << 20

// reportBytes is what c adds to a proposal's size against
// reportBatchBytes.
func reportBytes(c *raftfsm.Command) int {
	if c.Complete == nil {
		return 0
	}
	return len(c.Complete.Result) + len(c.Complete.Error)
}

// queuedReport is one report waiting for its proposal; done receives the
// proposal's error once.
type queuedReport struct {
	cmd  raftfsm.Command
	ctx  context.Context
	done chan error
}

// submit proposes cmd with the reports that wait alongside it and returns
// the proposal's error, or ctx's when ctx ends first (the report may still
// be proposed: a report is idempotent).
func (b *reportBatcher) submit(ctx context.Context, cmd raftfsm.Command) error {
	q := &queuedReport{cmd: cmd, ctx: ctx, done: make(chan error, 1)}
	b.mu.Lock()
	b.queue = append(b.queue, q)
	start := !b.running
	b.running = true
	b.mu.Unlock()
	if start {
		go b.flush()
	}
	select {
	case err := <-q.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// flush proposes the queued reports, max at a time, until none is left.
func (b *reportBatcher) flush() {
	for {
		b.mu.Lock()
		// Reports whose caller gave up are dropped (it retries or stops).
		live := b.queue[:0]
		for _, q := range b.queue {
			if q.ctx.Err() == nil {
				live = append(live, q)
			}
		}
		clear(b.queue[len(live):])
		b.queue = live
		if len(b.queue) == 0 {
			b.running = false
			b.mu.Unlock()
			return
		}
		k, size := 0, 0
		for k < len(b.queue) && k < max(b.max, 1) {
			n := reportBytes(&b.queue[k].cmd)
			if k > 0 && size+n > reportBatchBytes {
				break
			}
			k, size = k+1, size+n
		}
		batch := append([]*queuedReport(nil), b.queue[:k]...)
		b.queue = append(b.queue[:0], b.queue[k:]...)
		b.mu.Unlock()

		cmds := make([]raftfsm.Command, len(batch))
		for i, q := range batch {
			cmds[i] = q.cmd
		}
		// The proposal lives as long as a report may wait (reportTimeout),
		// or until the node stops; each report bounds its own wait.
		ctx, cancel := context.WithTimeout(b.base, b.timeout)
		err := b.propose(ctx, cmds)
		cancel()
		for _, q := range batch {
			q.done <- err
		}
	}
}
