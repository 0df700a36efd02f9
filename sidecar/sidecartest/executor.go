package sidecartest

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/axsched/ax/engine"
)

// Call is one callback an Executor received.
type Call struct {
	TaskID  string
	Handler string
	Attempt int
	Run     int
	Payload []byte
	// TraceParent and TraceState are the callback's W3C trace context
	// headers ("" when absent).
	TraceParent, TraceState string
	// Path is the request's path: /ax/v1/execute for a callback,
	// /ax/v1/shards for a sharded task's shard-count question.
	Path string
	// ShardIndex and ShardTotal are the Ax-Shard-Index and
	// Ax-Shard-Total headers (ShardTotal 0 when absent).
	ShardIndex, ShardTotal int
	// Node is the id of the node whose executor took the call.
	Node string
	// At is the fake clock's time when the call arrived; Ended when the
	// executor answered it or saw the request end (the sidecar cut it at
	// its timeout), zero while it is in flight. Ended is taken before the
	// answer is written, so a call the sidecar starts once it has this
	// answer (a slot it frees) always has an At at or after this Ended.
	At, Ended time.Time
}

// Reply is what an Executor answers a callback: Status (0 means 200),
// an optional Retry-After header value, Body, and Hold, which when non-nil
// keeps the call open until it is closed.
type Reply struct {
	Status     int
	RetryAfter string
	Body       []byte
	Hold       <-chan struct{}
}

// Executor is an app endpoint on a Unix socket (a real HTTP server, in
// t.TempDir()) that records every callback and answers as its Respond
// function says (200 by default).
type Executor struct {
	path  string
	node  string
	clock engine.Clock
	srv   *http.Server

	mu      sync.Mutex
	calls   []Call
	respond func(Call) Reply
}

func newExecutor(t testing.TB, path, node string, clock engine.Clock) *Executor {
	t.Helper()
	e := &Executor{path: path, node: node, clock: clock}
	os.Remove(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	e.srv = &http.Server{Handler: http.HandlerFunc(e.serve)}
	go e.srv.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		e.srv.Shutdown(ctx)
		e.srv.Close()
	})
	return e
}

// URL is the executor's URL for sidecar.Executor (unix:///...).
func (e *Executor) URL() string { return "unix://" + e.path }

// InFlight is the number of callbacks the executor has received and not
// yet answered (Call.Ended zero).
func (e *Executor) InFlight() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, c := range e.calls {
		if c.Ended.IsZero() {
			n++
		}
	}
	return n
}

// Respond sets how the executor answers callbacks from now on; nil: 200.
func (e *Executor) Respond(f func(Call) Reply) {
	e.mu.Lock()
	e.respond = f
	e.mu.Unlock()
}

// Calls returns the callbacks received so far, in arrival order.
func (e *Executor) Calls() []Call {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]Call(nil), e.calls...)
}

// CallsFor returns the callbacks received for task id.
func (e *Executor) CallsFor(id string) []Call {
	var out []Call
	for _, c := range e.Calls() {
		if c.TaskID == id {
			out = append(out, c)
		}
	}
	return out
}

func (e *Executor) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	attempt, _ := strconv.Atoi(r.Header.Get("Ax-Attempt"))
	run, _ := strconv.Atoi(r.Header.Get("Ax-Run"))
	shard, _ := strconv.Atoi(r.Header.Get("Ax-Shard-Index"))
	shards, _ := strconv.Atoi(r.Header.Get("Ax-Shard-Total"))
	c := Call{TaskID: r.Header.Get("Ax-Task-Id"), Handler: r.Header.Get("Ax-Handler"), Attempt: attempt, Run: run,
		Payload: body, Node: e.node, At: e.clock.Now(), Path: r.URL.Path, ShardIndex: shard, ShardTotal: shards,
		TraceParent: r.Header.Get("traceparent"), TraceState: r.Header.Get("tracestate")}
	e.mu.Lock()
	i := len(e.calls)
	e.calls = append(e.calls, c)
	f := e.respond
	e.mu.Unlock()
	ended := func() {
		e.mu.Lock()
		e.calls[i].Ended = e.clock.Now()
		e.mu.Unlock()
	}
	rep := Reply{Status: 200}
	if f != nil {
		rep = f(c)
	}
	if rep.Hold != nil {
		select {
		case <-rep.Hold:
		case <-r.Context().Done():
			ended()
			return
		}
	}
	ended()
	if rep.RetryAfter != "" {
		w.Header().Set("Retry-After", rep.RetryAfter)
	}
	if rep.Status == 0 {
		rep.Status = 200
	}
	w.WriteHeader(rep.Status)
	_, _ = w.Write(rep.Body)
}

// NewExecutor starts one more executor, not given to any node: for a
// test to register through the API (RegisterExecutor, POST
// /v1/executors). Its calls are counted in AllCalls and CallsFor; node is
// the name Call.Node carries. It is stopped by t.Cleanup.
func (c *Cluster) NewExecutor(node string) *Executor {
	c.mu.Lock()
	path := filepath.Join(c.dir, fmt.Sprintf("exec-extra%d.sock", len(c.execs)))
	c.mu.Unlock()
	e := newExecutor(c.t, path, node, c.clock)
	c.mu.Lock()
	c.extra = append(c.extra, e)
	c.mu.Unlock()
	return e
}

// executors are the nodes' executors and those of NewExecutor.
func (c *Cluster) executors() []*Executor {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append(append([]*Executor(nil), c.execs...), c.extra...)
}

// AllCalls returns the callbacks every node's executor received.
func (c *Cluster) AllCalls() []Call {
	var out []Call
	for _, e := range c.executors() {
		out = append(out, e.Calls()...)
	}
	return out
}

// CallsFor returns the callbacks for task id on every node's executor.
func (c *Cluster) CallsFor(id string) []Call {
	var out []Call
	for _, e := range c.executors() {
		out = append(out, e.CallsFor(id)...)
	}
	return out
}

// WaitCalls waits until task id has had at least n callbacks (on any
// node) and returns them.
func (c *Cluster) WaitCalls(id string, n int) []Call {
	c.t.Helper()
	var got []Call
	c.Eventually("callbacks for "+id, func() bool {
		got = c.CallsFor(id)
		return len(got) >= n
	})
	return got
}

// Respond sets every executor's answer (Executor.Respond), those of
// NewExecutor included.
func (c *Cluster) Respond(f func(Call) Reply) {
	for _, e := range c.executors() {
		e.Respond(f)
	}
}
