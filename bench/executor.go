package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/axsched/ax/clients/go/axapi"
	"github.com/axsched/ax/engine"
)

// ExecutePath is where the sidecar POSTs callbacks (axapi.ExecutePath).
const ExecutePath = axapi.ExecutePath

// recorder keeps, for each task of one run, when its first callback arrived
// and how many arrived. Task ids are prefix + "-" + index.
type recorder struct {
	prefix string
	first  []atomic.Int64 // unix ns of the first callback, 0: none yet
	calls  []atomic.Int32
	due    []atomic.Int64 // unix ms of the due time when known before submitting, else 0
	early  atomic.Int64   // first callbacks before the due time (live count)
	late1s atomic.Int64   // first callbacks more than expiredAfter late (live count)
	recv   atomic.Int64   // tasks with at least one callback
	dups   atomic.Int64   // callbacks after the first of a task
	maxAtt atomic.Int64   // the highest Ax-Attempt seen
	other  atomic.Int64   // callbacks for ids not of this run
}

func newRecorder(prefix string, n int) *recorder {
	return &recorder{prefix: prefix, first: make([]atomic.Int64, n), calls: make([]atomic.Int32, n), due: make([]atomic.Int64, n)}
}

// index returns the task index encoded in id, or -1.
func (r *recorder) index(id string) int {
	if len(id) <= len(r.prefix)+1 || !strings.HasPrefix(id, r.prefix) || id[len(r.prefix)] != '-' {
		return -1
	}
	i, err := strconv.Atoi(id[len(r.prefix)+1:])
	if err != nil || i < 0 || i >= len(r.first) {
		return -1
	}
	return i
}

func (r *recorder) id(i int) string { return r.prefix + "-" + strconv.Itoa(i) }

func (r *recorder) record(id string, attempt int, at time.Time) {
	i := r.index(id)
	if i < 0 {
		r.other.Add(1)
		return
	}
	for a := int64(attempt); ; {
		m := r.maxAtt.Load()
		if a <= m || r.maxAtt.CompareAndSwap(m, a) {
			break
		}
	}
	if r.calls[i].Add(1) == 1 {
		r.first[i].Store(at.UnixNano())
		if due := r.due[i].Load(); due > 0 {
			switch late := at.Sub(time.UnixMilli(due)); {
			case late < 0:
				r.early.Add(1)
			case late > expiredAfter:
				r.late1s.Add(1)
			}
		}
		r.recv.Add(1)
	} else {
		r.dups.Add(1)
	}
}

// arrivalStats is what the callbacks of one run's submitted tasks show.
type arrivalStats struct {
	received, missing int
	late              []time.Duration // per task called back: first callback − due time
	first, last       int64           // unix ns of the earliest and latest first callback; 0: none
}

// arrivals summarises the first callbacks of the tasks i with ok[i] (those
// that were submitted); dueNs(i) is task i's due time in unix ns.
func (r *recorder) arrivals(ok []bool, dueNs func(i int) int64) arrivalStats {
	var a arrivalStats
	a.late = make([]time.Duration, 0, len(ok))
	for i := range ok {
		if !ok[i] {
			continue
		}
		at := r.first[i].Load()
		if at == 0 {
			a.missing++
			continue
		}
		a.received++
		if a.first == 0 || at < a.first {
			a.first = at
		}
		a.last = max(a.last, at)
		a.late = append(a.late, time.Duration(at-dueNs(i)))
	}
	return a
}

// executor is the bench's app: an HTTP server on a Unix socket that
// records every callback and answers 200 after the run's work time.
type executor struct {
	socket string
	srv    *http.Server
	run    atomic.Pointer[recorder]
	work   atomic.Int64 // ns each callback takes

	inflight atomic.Int64
	peak     atomic.Int64

	// sleeps times each callback's work. A Go timer wakes the process up
	// to 1 ms late when it is otherwise idle (epoll_wait takes whole
	// milliseconds): 0.46 ms late on average in ax bench burst, which
	// made the bench's app take 80.5 ms, not 80. ax's own timer set sleeps
	// on a timerfd on Linux and is late by ~0.1 ms.
	sleeps     *engine.TimerSet[chan struct{}]
	stopSleeps context.CancelFunc
}

// startExecutor listens on the Unix socket path (a stale socket file is
// replaced; one in use is an error).
func startExecutor(path string) (*executor, error) {
	if c, err := net.Dial("unix", path); err == nil {
		c.Close()
		return nil, fmt.Errorf("executor socket %s is in use", path)
	}
	os.Remove(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("executor: %w", err)
	}
	e := &executor{socket: path, sleeps: engine.NewTimerSet[chan struct{}](engine.RealClock(), engine.TimersOptions{})}
	ctx, cancel := context.WithCancel(context.Background())
	e.stopSleeps = cancel
	go e.sleeps.Run(ctx, func(batch []engine.Fired[chan struct{}]) {
		for _, f := range batch {
			close(f.Payload)
		}
	})
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+ExecutePath, e.serve)
	e.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := e.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			fmt.Fprintf(os.Stderr, "ax bench: executor stopped: %v\n", err)
		}
	}()
	return e, nil
}

// url returns the executor's URL for --executor and POST /v1/executors.
func (e *executor) url() string { return "unix://" + e.socket }

// setRun starts recording for a run whose callbacks each take work.
func (e *executor) setRun(r *recorder, work time.Duration) {
	e.work.Store(int64(work))
	e.peak.Store(0)
	e.run.Store(r)
}

func (e *executor) serve(w http.ResponseWriter, req *http.Request) {
	now := time.Now()
	in := e.inflight.Add(1)
	defer e.inflight.Add(-1)
	for {
		p := e.peak.Load()
		if in <= p || e.peak.CompareAndSwap(p, in) {
			break
		}
	}
	attempt, _ := strconv.Atoi(req.Header.Get("Ax-Attempt"))
	if r := e.run.Load(); r != nil {
		r.record(req.Header.Get("Ax-Task-Id"), attempt, now)
	}
	_, _ = io.Copy(io.Discard, req.Body)
	if d := time.Duration(e.work.Load()); d > 0 {
		woke := make(chan struct{})
		h := e.sleeps.Arm(time.Now().Add(d), woke) // from when the request is read
		select {
		case <-woke:
		case <-req.Context().Done():
			e.sleeps.Cancel(h)
			return
		}
	}
	w.WriteHeader(http.StatusOK)
}

func (e *executor) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = e.srv.Shutdown(ctx)
	e.stopSleeps()
	os.Remove(e.socket)
}
