package harness

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"
)

// Handlers the test executor knows. Any other handler is answered 200.
const (
	HandlerOK        = "e2e.ok"        // 200
	HandlerFail      = "e2e.fail"      // 500 "boom from e2e executor"
	HandlerSlow      = "e2e.slow"      // waits until the request is cancelled
	HandlerPermanent = "e2e.permanent" // 400: do not retry
	HandlerBusy      = "e2e.busy"      // 503 with Retry-After: 1
	HandlerSleep     = "e2e.sleep"     // 200 after 200 ms (callbacks in flight)
	// HandlerHold waits until Recorder.ReleaseHold (then 200) or until the
	// request is cancelled.
	HandlerHold = "e2e.hold"
	// HandlerGate hands each callback to the test (Recorder.Gated), which
	// chooses the status to answer with; 429 and 503 carry Retry-After: 1.
	HandlerGate = "e2e.gate"
	// HandlerHistory answers by run (Ax-Run): run 2's first attempt 500
	// "boom from e2e executor"; run 3 200 with HistoryBigResultBytes of
	// "x"; any other 200 with the JSON {"run":N}.
	HandlerHistory = "e2e.history"
	// HandlerShards answers the shard-count question (POST
	// /ax/v1/shards) with {"count": ShardsAnswer}; a callback of shard
	// index 1 (Ax-Shard-Index) is answered 500 at its attempts 1 and 2,
	// 200 at the third; any other 200.
	HandlerShards = "e2e.shards"
)

// ShardsAnswer is HandlerShards' answer to the shard-count question.
const ShardsAnswer = 5

// HistoryBigResultBytes is the body of HandlerHistory's run 3: above the
// 64 KiB a run's result keeps.
const HistoryBigResultBytes = 100 << 10

// GatedCall is an e2e.gate callback waiting for the test's answer.
type GatedCall struct {
	Call  Call
	Reply chan<- int // send the HTTP status to answer with
}

// executePath is the callback path appended to the executor's base URL.
const executePath = "/ax/v1/execute"

// Call is one callback as the executor received it.
type Call struct {
	Node     string // the node whose executor received it
	Method   string
	Path     string
	TaskID   string // Ax-Task-Id
	Handler  string // Ax-Handler
	Attempt  string // Ax-Attempt
	Run      string // Ax-Run
	Deadline string // Ax-Deadline
	At       time.Time
	Body     []byte
	Header   http.Header
	// Ended is when the executor answered or saw the request cancelled.
	Ended time.Time
	// Cancelled says the request context ended before the answer (aborted
	// by the sidecar).
	Cancelled bool
}

// Recorder keeps every callback of every executor of a cluster.
type Recorder struct {
	mu      sync.Mutex
	calls   []*Call
	byID    map[string][]*Call
	changed chan struct{} // closed and replaced on every change

	hold        chan struct{} // closed by ReleaseHold
	gated       chan GatedCall
	releaseOnce sync.Once
}

// Gated delivers e2e.gate callbacks, in arrival order.
func (r *Recorder) Gated() <-chan GatedCall { return r.gated }

// ReleaseHold lets every e2e.hold callback, waiting or future, answer 200.
func (r *Recorder) ReleaseHold() { r.releaseOnce.Do(func() { close(r.hold) }) }

// NewRecorder returns an empty recorder.
func NewRecorder() *Recorder {
	return &Recorder{byID: map[string][]*Call{}, changed: make(chan struct{}), hold: make(chan struct{}), gated: make(chan GatedCall, 64)}
}

// Add records a callback as it arrives (Executor calls it; so do tests
// with executors of their own).
func (r *Recorder) Add(c *Call) {
	r.mu.Lock()
	r.calls = append(r.calls, c)
	r.byID[c.TaskID] = append(r.byID[c.TaskID], c)
	close(r.changed)
	r.changed = make(chan struct{})
	r.mu.Unlock()
}

// Finish records that the callback c was answered, or was cancelled by
// the sidecar (its request context ended first).
func (r *Recorder) Finish(c *Call, cancelled bool) {
	r.mu.Lock()
	c.Ended, c.Cancelled = time.Now(), cancelled
	close(r.changed)
	r.changed = make(chan struct{})
	r.mu.Unlock()
}

// Calls returns copies of the calls for task id, in arrival order.
func (r *Recorder) Calls(id string) []Call {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Call, len(r.byID[id]))
	for i, c := range r.byID[id] {
		out[i] = *c
	}
	return out
}

// All returns copies of every call, in arrival order.
func (r *Recorder) All() []Call {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Call, len(r.calls))
	for i, c := range r.calls {
		out[i] = *c
	}
	return out
}

// WaitCalls waits until every id has at least n calls, or ctx ends; it
// returns the ids still short.
func (r *Recorder) WaitCalls(ctx context.Context, ids []string, n int) []string {
	for {
		r.mu.Lock()
		var short []string
		for _, id := range ids {
			if len(r.byID[id]) < n {
				short = append(short, id)
			}
		}
		ch := r.changed
		r.mu.Unlock()
		if len(short) == 0 {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return short
		}
	}
}

// Executor is an in-test application endpoint: an HTTP server on a Unix
// socket that records every callback in a Recorder and answers by handler.
type Executor struct {
	Node   string
	Socket string
	rec    *Recorder
	srv    *http.Server
}

// StartExecutor serves an executor for node on socket until the test ends.
func StartExecutor(t testing.TB, node, socket string, rec *Recorder) *Executor {
	t.Helper()
	_ = os.Remove(socket)
	ln, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatalf("executor of %s: %v", node, err)
	}
	e := &Executor{Node: node, Socket: socket, rec: rec}
	e.srv = &http.Server{Handler: e, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := e.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("executor of %s: %v", node, err)
		}
	}()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if e.srv.Shutdown(ctx) != nil {
			e.srv.Close()
		}
	})
	return e
}

// ServeHTTP records the callback and answers according to Ax-Handler.
func (e *Executor) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	at := time.Now()
	body, err := io.ReadAll(r.Body)
	c := &Call{
		Node: e.Node, Method: r.Method, Path: r.URL.Path, At: at, Body: body, Header: r.Header.Clone(),
		TaskID: r.Header.Get("Ax-Task-Id"), Handler: r.Header.Get("Ax-Handler"),
		Attempt: r.Header.Get("Ax-Attempt"), Run: r.Header.Get("Ax-Run"), Deadline: r.Header.Get("Ax-Deadline"),
	}
	e.rec.Add(c)
	if err != nil {
		e.rec.Finish(c, true)
		return
	}
	switch c.Handler {
	case HandlerFail:
		w.WriteHeader(http.StatusInternalServerError)
		io.WriteString(w, "boom from e2e executor")
	case HandlerSlow:
		<-r.Context().Done()
		e.rec.Finish(c, true)
		return
	case HandlerHold:
		select {
		case <-e.rec.hold:
			w.WriteHeader(http.StatusOK)
		case <-r.Context().Done():
			e.rec.Finish(c, true)
			return
		}
	case HandlerGate:
		reply := make(chan int, 1)
		e.rec.mu.Lock()
		snapshot := *c
		e.rec.mu.Unlock()
		e.rec.gated <- GatedCall{Call: snapshot, Reply: reply}
		select {
		case status := <-reply:
			if status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable {
				w.Header().Set("Retry-After", "1")
			}
			w.WriteHeader(status)
		case <-r.Context().Done():
			e.rec.Finish(c, true)
			return
		}
	case HandlerPermanent:
		w.WriteHeader(http.StatusBadRequest)
		io.WriteString(w, "e2e executor refuses this task")
	case HandlerSleep:
		select {
		case <-time.After(200 * time.Millisecond):
			w.WriteHeader(http.StatusOK)
		case <-r.Context().Done():
			e.rec.Finish(c, true)
			return
		}
	case HandlerBusy:
		w.Header().Set("Retry-After", strconv.Itoa(1))
		w.WriteHeader(http.StatusServiceUnavailable)
	case HandlerShards:
		switch {
		case c.Path == "/ax/v1/shards":
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
			io.WriteString(w, `{"count":`+strconv.Itoa(ShardsAnswer)+`}`)
		case r.Header.Get("Ax-Shard-Index") == "1" && (c.Attempt == "1" || c.Attempt == "2"):
			w.WriteHeader(http.StatusInternalServerError)
			io.WriteString(w, "boom from e2e executor")
		default:
			w.WriteHeader(http.StatusOK)
		}
	case HandlerHistory:
		switch {
		case c.Run == "2" && c.Attempt == "1":
			w.WriteHeader(http.StatusInternalServerError)
			io.WriteString(w, "boom from e2e executor")
		case c.Run == "3":
			w.WriteHeader(http.StatusOK)
			w.Write(bytes.Repeat([]byte("x"), HistoryBigResultBytes))
		default:
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
			io.WriteString(w, `{"run":`+c.Run+`}`)
		}
	default:
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, "ok")
	}
	e.rec.Finish(c, false)
}
