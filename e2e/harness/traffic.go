package harness

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

const (
	// TrafficMaxDelay bounds the tasks' delays: each is uniform in [0, 5s).
	TrafficMaxDelay = 5 * time.Second
	// TrafficTaskTimeout is the attempt timeout of every task: the lease of an
	// attempt whose node died is this plus the sidecar's lease grace (5s).
	TrafficTaskTimeout = 5 * time.Second
	// TrafficTryTimeout bounds one submit request; a timed-out try has an
	// unknown outcome and is retried with the same id and body.
	TrafficTryTimeout = 5 * time.Second
	// TrafficRetryPause is the pause between two tries of one submit.
	TrafficRetryPause = 100 * time.Millisecond
	// TrafficSubmitGrace is how long submits in progress keep retrying after
	// the load stops; the ones still unanswered then count as "never
	// answered".
	TrafficSubmitGrace = 20 * time.Second
)

// TrafficTask is one task of the load. A worker owns it while it submits;
// the test reads it once every worker is done.
type TrafficTask struct {
	ID    string
	Delay time.Duration
	body  []byte // request body (the same for every try)
	Want  []byte // payload the callback must carry

	Tries     int
	FirstSent time.Time // first try
	ackSent   time.Time // the try that got the success reply
	Answered  time.Time // the success reply
	Acked     bool      // a 200/201 was received
	Status    int       // status of the success reply, or of a final refusal
	Due       time.Time // next_run_at of the success reply (zero: none)
	Refused   string    // a final answer other than success (bug: 409, 400...)
	LastErr   string    // last transient error (for tasks never answered)
}

// TrafficLoad is the load generator (StartTraffic): rate submits a second
// of tasks due within TrafficMaxDelay, each retried with the same id and
// body through the next running node until a success reply or a final
// refusal. The exported fields are for the test: close Stop to stop
// generating (GenDone is closed once it has), close Abandon to give up the
// submits still retrying; read Tasks, ErrKinds and MaxQueue once every
// worker is done.
type TrafficLoad struct {
	Cluster *Cluster
	clients map[string]*Client
	rate    int
	rng     *rand.Rand // generator goroutine only
	rr      atomic.Uint64

	queue   chan *TrafficTask
	Stop    chan struct{} // closed: generate no more
	Abandon chan struct{} // closed: give up submits still retrying
	GenDone chan struct{} // closed: the generator has stopped
	wg      sync.WaitGroup

	mu       sync.Mutex
	Tasks    []*TrafficTask
	ErrKinds map[string]int // transient answers and errors, by kind
	MaxQueue int            // the longest the queue of tasks to submit grew
}

// pick returns the next running node, rotating.
func (l *TrafficLoad) pick() *Node {
	nodes := l.Cluster.Running()
	if len(nodes) == 0 {
		return l.Cluster.Nodes[int(l.rr.Add(1))%len(l.Cluster.Nodes)]
	}
	return nodes[int(l.rr.Add(1)%uint64(len(nodes)))]
}

// SubmitErrKind names a submit's transport error as the loads count it:
// timeout, refused (no one listens on the socket) or conn.
func SubmitErrKind(err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT):
		return "refused"
	}
	return "conn"
}

func (l *TrafficLoad) countErr(kind string) {
	l.mu.Lock()
	l.ErrKinds[kind]++
	l.mu.Unlock()
}

// generate starts rate tasks per second until stop is closed.
func (l *TrafficLoad) generate() {
	defer close(l.GenDone)
	defer close(l.queue)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	start := time.Now()
	n := 0
	for {
		select {
		case <-l.Stop:
			return
		case now := <-tick.C:
			want := int(now.Sub(start).Seconds() * float64(l.rate))
			for ; n < want; n++ {
				delay := time.Duration(l.rng.Int64N(int64(TrafficMaxDelay/time.Millisecond))) * time.Millisecond
				ts := &TrafficTask{ID: fmt.Sprintf("chaos/%06d", n), Delay: delay}
				ts.Want = fmt.Appendf(nil, `{"n":%d}`, n)
				ts.body = SubmitRequest{ID: ts.ID, Handler: HandlerOK, Delay: delay.String(),
					Timeout: TrafficTaskTimeout.String(), Payload: ts.Want}.Body()
				select {
				case l.queue <- ts:
				case <-l.Stop:
					return
				}
				l.mu.Lock()
				l.Tasks = append(l.Tasks, ts)
				if q := len(l.queue); q > l.MaxQueue {
					l.MaxQueue = q
				}
				l.mu.Unlock()
			}
		}
	}
}

// work submits queued tasks until the queue is closed and drained.
func (l *TrafficLoad) work() {
	defer l.wg.Done()
	for ts := range l.queue {
		l.submit(ts)
	}
}

// submit sends one task until a success reply, a final refusal, or
// abandon: a 503 (no_leader, not_ready), a 429, a connection error or a
// timed-out request is retried with the same id and body, through the next
// live node.
func (l *TrafficLoad) submit(ts *TrafficTask) {
	for {
		select {
		case <-l.Abandon:
			return
		default:
		}
		n := l.pick()
		ts.Tries++
		sent := time.Now()
		if ts.FirstSent.IsZero() {
			ts.FirstSent = sent
		}
		ctx, cancel := context.WithTimeout(context.Background(), TrafficTryTimeout)
		resp, err := l.clients[n.ID].Submit(ctx, ts.body)
		cancel()
		pause := TrafficRetryPause
		switch {
		case err != nil:
			kind := SubmitErrKind(err)
			l.countErr(kind)
			ts.LastErr = fmt.Sprintf("%s via %s: %v", kind, n.ID, err)
		case resp.Status == http.StatusOK || resp.Status == http.StatusCreated:
			task, derr := resp.Task()
			ts.Acked, ts.Status, ts.ackSent, ts.Answered = true, resp.Status, sent, time.Now()
			if derr == nil && task.ID == ts.ID && task.NextRunAt != nil {
				ts.Due = *task.NextRunAt
			} else if derr != nil || task.ID != ts.ID {
				ts.Refused = fmt.Sprintf("success reply that is not the task: %s (%v)", resp, derr)
			}
			return
		case resp.Status == http.StatusServiceUnavailable || resp.Status == http.StatusTooManyRequests:
			code := "?"
			if e, derr := resp.APIError(); derr == nil {
				code = e.Error.Code
			}
			l.countErr(fmt.Sprintf("%d %s", resp.Status, code))
			ts.LastErr = fmt.Sprintf("via %s: %s", n.ID, resp)
			if resp.Status == http.StatusTooManyRequests {
				pause = min(max(resp.RetryAfter(), TrafficRetryPause), time.Second)
			}
		default:
			ts.Status, ts.Refused = resp.Status, fmt.Sprintf("via %s after %d tries: %s", n.ID, ts.Tries, resp)
			l.countErr(fmt.Sprintf("%d final", resp.Status))
			return
		}
		select {
		case <-l.Abandon:
			return
		case <-time.After(pause):
		}
	}
}

// StartTraffic starts a TrafficLoad (the kill test's submitter: retries
// with the same id through the next node) at rate submits/s.
func StartTraffic(t testing.TB, c *Cluster, clients map[string]*Client, rate, workers int, seed uint64) (*TrafficLoad, chan struct{}) {
	load := &TrafficLoad{
		Cluster: c, clients: clients, rate: rate,
		rng:      rand.New(rand.NewPCG(seed, 1)),
		queue:    make(chan *TrafficTask, rate*int(TrafficSubmitGrace/time.Second)*4),
		Stop:     make(chan struct{}),
		Abandon:  make(chan struct{}),
		GenDone:  make(chan struct{}),
		ErrKinds: map[string]int{},
	}
	for range workers {
		load.wg.Add(1)
		go load.work()
	}
	go load.generate()
	workersDone := make(chan struct{})
	go func() { load.wg.Wait(); close(workersDone) }()
	t.Cleanup(func() { // never leave the load running on a t.Fatal
		select {
		case <-load.Stop:
		default:
			close(load.Stop)
		}
		select {
		case <-load.Abandon:
		default:
			close(load.Abandon)
		}
		<-workersDone
	})
	return load, workersDone
}

// StopTraffic stops generating and waits up to TrafficSubmitGrace for the
// submits in progress.
func StopTraffic(load *TrafficLoad, workersDone chan struct{}) {
	close(load.Stop)
	<-load.GenDone
	select {
	case <-workersDone:
	case <-time.After(TrafficSubmitGrace):
		close(load.Abandon)
		<-workersDone
	}
}
