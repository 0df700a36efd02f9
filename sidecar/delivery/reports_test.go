package delivery

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/axsched/ax/raftfsm"
)

// gateProposer records each proposal's Complete ids and holds every
// proposal until the test lets it go (one release each); err is what
// the proposals return.
type gateProposer struct {
	mu      sync.Mutex
	calls   [][]string
	release chan struct{}
	err     error
}

func newGateProposer() *gateProposer { return &gateProposer{release: make(chan struct{}, 100)} }

func (p *gateProposer) Propose(ctx context.Context, cmds []raftfsm.Command) ([]raftfsm.Result, error) {
	var ids []string
	for _, c := range cmds {
		ids = append(ids, c.Complete.ID)
	}
	p.mu.Lock()
	p.calls = append(p.calls, ids)
	p.mu.Unlock()
	select {
	case <-p.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if p.err != nil {
		return nil, p.err
	}
	return make([]raftfsm.Result, len(cmds)), nil
}

func (p *gateProposer) proposals() [][]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.calls)
}

// queued returns the reports waiting in d's batcher.
func queued(d *Delivery) int {
	d.reports.mu.Lock()
	defer d.reports.mu.Unlock()
	return len(d.reports.queue)
}

// Outcome reports that arrive while one is being proposed wait for it and
// go together in the next proposal, at most MaxBatchCommands at a time; a
// report that finds none in flight goes at once, alone.
func TestReportsThatMeetShareAProposal(t *testing.T) {
	p := newGateProposer()
	d := New(Deps{Config: Config{NodeID: "n1", MaxBatchCommands: 3}, Proposer: p, Log: zerolog.Nop(), Metrics: testMetrics()})
	var wg sync.WaitGroup
	report := func(id string) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d.report(&raftfsm.Complete{ID: id, Attempt: 1}, &raftfsm.Task{ID: id})
		}()
	}
	report("a")
	waitUntil(t, "the first proposal", func() bool { return len(p.proposals()) == 1 })
	for _, id := range []string{"b", "c", "d", "e"} {
		report(id)
	}
	waitUntil(t, "four reports queued", func() bool { return queued(d) == 4 })
	for range 3 {
		p.release <- struct{}{}
	}
	wg.Wait()
	got := p.proposals()
	if len(got) != 3 || !slices.Equal(got[0], []string{"a"}) || len(got[1]) != 3 || len(got[2]) != 1 {
		t.Fatalf("proposals %v; want [a], then the four queued reports as 3 + 1 (MaxBatchCommands 3)", got)
	}
	all := append(slices.Clone(got[1]), got[2]...)
	slices.Sort(all)
	if !slices.Equal(all, []string{"b", "c", "d", "e"}) {
		t.Fatalf("queued reports proposed: %v", all)
	}
	// Idle again: the next report goes alone, at once.
	p.release <- struct{}{}
	d.report(&raftfsm.Complete{ID: "f", Attempt: 1}, &raftfsm.Task{ID: "f"})
	if got := p.proposals(); len(got) != 4 || !slices.Equal(got[3], []string{"f"}) {
		t.Fatalf("proposals %v; want [f] alone last", got)
	}
}

// Reports with large results are split so that one proposal carries at
// most reportBatchBytes of them (one report always goes).
func TestReportBatchBoundedByBytes(t *testing.T) {
	p := newGateProposer()
	b := &reportBatcher{max: 100, base: context.Background(), timeout: time.Minute,
		propose: func(ctx context.Context, cmds []raftfsm.Command) error { _, err := p.Propose(ctx, cmds); return err }}
	big := []byte(strings.Repeat("x", reportBatchBytes/2+1))
	var wg sync.WaitGroup
	submit := func(id string, result []byte) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := b.submit(context.Background(), raftfsm.Command{Type: raftfsm.CmdComplete, Complete: &raftfsm.Complete{ID: id, Result: result}}); err != nil {
				t.Errorf("report %s: %v", id, err)
			}
		}()
	}
	submit("first", nil)
	waitUntil(t, "the first proposal", func() bool { return len(p.proposals()) == 1 })
	submit("big1", big)
	waitUntil(t, "one queued", func() bool { b.mu.Lock(); defer b.mu.Unlock(); return len(b.queue) == 1 })
	submit("big2", big)
	waitUntil(t, "two queued", func() bool { b.mu.Lock(); defer b.mu.Unlock(); return len(b.queue) == 2 })
	for range 3 {
		p.release <- struct{}{}
	}
	wg.Wait()
	if got := p.proposals(); len(got) != 3 || len(got[1]) != 1 || len(got[2]) != 1 {
		t.Fatalf("proposals %v; want the two large results in two proposals", got)
	}
}

// Every report of a failed proposal gets its error, and a report whose
// caller gave up while queued is not proposed.
func TestReportBatchErrorsAndGivenUp(t *testing.T) {
	p := newGateProposer()
	p.err = errors.New("no leader")
	b := &reportBatcher{max: 10, base: context.Background(), timeout: time.Minute,
		propose: func(ctx context.Context, cmds []raftfsm.Command) error { _, err := p.Propose(ctx, cmds); return err }}
	errs := make(chan error, 3)
	submit := func(ctx context.Context, id string) {
		go func() {
			errs <- b.submit(ctx, raftfsm.Command{Type: raftfsm.CmdComplete, Complete: &raftfsm.Complete{ID: id}})
		}()
	}
	submit(context.Background(), "a")
	waitUntil(t, "the first proposal", func() bool { return len(p.proposals()) == 1 })
	gone, giveUp := context.WithCancel(context.Background())
	submit(gone, "b")
	submit(context.Background(), "c")
	waitUntil(t, "two queued", func() bool { b.mu.Lock(); defer b.mu.Unlock(); return len(b.queue) == 2 })
	giveUp()
	if err := <-errs; !errors.Is(err, context.Canceled) {
		t.Fatalf("the report given up returned %v, want context.Canceled", err)
	}
	p.release <- struct{}{}
	p.release <- struct{}{}
	for range 2 {
		if err := <-errs; err == nil || err.Error() != "no leader" {
			t.Fatalf("report error %v, want the proposal's", err)
		}
	}
	if got := p.proposals(); len(got) != 2 || !slices.Equal(got[1], []string{"c"}) {
		t.Fatalf("proposals %v; want [a] then [c] (b was given up)", got)
	}
}
