package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	ax "github.com/axsched/ax/clients/go"
	"github.com/axsched/ax/clients/go/axapi"
)

// Names the bench uses on the cluster.
const (
	// HandlerPrefix starts the handler of every task the bench submits.
	HandlerPrefix = "ax-bench."
	// ExecutorName is the name of the executor the bench registers through
	// the API on a running cluster.
	ExecutorName = "ax-bench"
	// submitTimeout bounds one submit request of the bench.
	submitTimeout = 30 * time.Second
	// busyRetries is how often a batch answered 429 or 503 is sent again.
	busyRetries = 50
)

// Options are the settings every workload shares.
type Options struct {
	// Nodes is the size of the cluster the bench starts: 1 or 3. Ignored
	// when Sockets is set.
	Nodes int
	// Binary is the ax binary the nodes run (`Binary sidecar ...`).
	Binary string
	// NodeArgs are extra arguments for every node the bench starts.
	NodeArgs []string
	// NodeLogLevel is the --log-level of the nodes (default warn).
	NodeLogLevel string
	// KeepData keeps the directory of the nodes (data, sockets, logs)
	// instead of removing it, and says where it is.
	KeepData bool

	// Sockets targets a running cluster: the API sockets of one or more of
	// its nodes (submits go round robin over them). The bench's executor
	// listens on ExecutorListen and is registered on each through POST
	// /v1/executors for the handlers "ax-bench.*".
	Sockets []string
	// ExecutorListen is where the executor listens when Sockets is set:
	// unix:///abs/path.sock.
	ExecutorListen string

	// Progress receives the progress bar (nil: none).
	Progress io.Writer
	// Notes receives one-line notes while the bench runs (nil: none).
	Notes io.Writer
	// Seed seeds the random delays (0: random).
	Seed uint64
}

func (o *Options) notef(format string, a ...any) {
	if o.Notes != nil {
		fmt.Fprintf(o.Notes, "ax bench: "+format+"\n", a...)
	}
}

// target returns a description of what the bench runs against.
func (o *Options) target() string {
	if len(o.Sockets) > 0 {
		return fmt.Sprintf("running cluster via %s", strings.Join(o.Sockets, ", "))
	}
	if o.Nodes == 1 {
		return "1 node started by the bench on 127.0.0.1"
	}
	return fmt.Sprintf("%d nodes started by the bench on 127.0.0.1", o.Nodes)
}

func (o *Options) validate() error {
	if len(o.Sockets) > 0 {
		if !strings.HasPrefix(o.ExecutorListen, "unix:///") {
			return fmt.Errorf("--executor-listen %q: with --socket the bench needs a unix:///abs/path.sock to serve its executor on", o.ExecutorListen)
		}
		return nil
	}
	if o.Nodes != 1 && o.Nodes != 3 {
		return fmt.Errorf("--nodes %d: want 1 or 3", o.Nodes)
	}
	if o.Binary == "" {
		return errors.New("no ax binary to start nodes with")
	}
	return nil
}

// env is a cluster and an executor ready for one run.
type env struct {
	opts    *Options
	dir     string
	cl      *cluster // nil when targeting a running cluster
	exec    *executor
	clients []*ax.Client
	viaAPI  bool // the executor was registered through the API
	failed  bool // keep the directory for a look at the logs
}

// envConfig tunes newEnv.
type envConfig struct {
	nodeArgs []string            // added to Options.NodeArgs
	register *axapi.ExecutorSpec // register the executor through the API with these limits instead of --executor
}

// newEnv starts (or connects to) the cluster and the executor.
func newEnv(ctx context.Context, opts *Options, ec envConfig) (_ *env, err error) {
	e := &env{opts: opts}
	defer func() {
		if err != nil {
			e.failed = true
			e.close()
		}
	}()
	if len(opts.Sockets) > 0 {
		if e.exec, err = startExecutor(strings.TrimPrefix(opts.ExecutorListen, "unix://")); err != nil {
			return nil, err
		}
		e.setClients(opts.Sockets)
		for _, c := range e.clients {
			if err := c.Ready(ctx); err != nil {
				return nil, fmt.Errorf("target not ready: %w", err)
			}
		}
		spec := axapi.ExecutorSpec{Name: ExecutorName, Handlers: []string{HandlerPrefix + "*"}, URL: e.exec.url()}
		if ec.register != nil {
			spec.MinConcurrency, spec.MaxConcurrency = ec.register.MinConcurrency, ec.register.MaxConcurrency
		}
		return e, e.registerExecutor(ctx, spec)
	}
	if e.dir, err = os.MkdirTemp("", "axb-"); err != nil {
		return nil, err
	}
	if e.exec, err = startExecutor(filepath.Join(e.dir, "exec.sock")); err != nil {
		return nil, err
	}
	cc := clusterConfig{
		Binary: opts.Binary, Nodes: opts.Nodes, Dir: e.dir, LogLevel: opts.NodeLogLevel,
		Args: append(append([]string(nil), opts.NodeArgs...), ec.nodeArgs...),
	}
	if ec.register == nil {
		cc.ExecutorURL = e.exec.url()
	}
	start := time.Now()
	if e.cl, err = startCluster(ctx, cc); err != nil {
		return nil, err
	}
	opts.notef("%d node(s) ready in %s (data and logs in %s)", opts.Nodes, time.Since(start).Round(time.Millisecond), e.dir)
	e.setClients(e.cl.sockets())
	if ec.register != nil {
		spec := *ec.register
		spec.URL = e.exec.url()
		return e, e.registerExecutor(ctx, spec)
	}
	return e, nil
}

func (e *env) setClients(sockets []string) {
	for _, s := range sockets {
		e.clients = append(e.clients, ax.New(ax.Config{SocketPath: s, Timeout: submitTimeout}))
	}
}

func (e *env) registerExecutor(ctx context.Context, spec axapi.ExecutorSpec) error {
	reg := ax.ExecutorRegistration{Name: spec.Name, Handlers: spec.Handlers, URL: spec.URL,
		MinConcurrency: spec.MinConcurrency, MaxConcurrency: spec.MaxConcurrency}
	for _, c := range e.clients {
		if err := c.RegisterExecutor(ctx, reg); err != nil {
			return fmt.Errorf("register the bench's executor on %s: %w", c.Socket(), err)
		}
	}
	e.viaAPI = true
	return nil
}

// alive returns an error when a node the bench started has exited.
func (e *env) alive() error {
	if e.cl == nil {
		return nil
	}
	err := e.cl.checkAlive()
	if err != nil {
		e.failed = true
	}
	return err
}

// close stops the nodes and the executor and removes the directory (unless
// KeepData).
func (e *env) close() {
	if e.viaAPI && e.cl == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		for _, c := range e.clients {
			_ = c.UnregisterExecutor(ctx, ExecutorName)
		}
		cancel()
	}
	for _, c := range e.clients {
		c.CloseIdleConnections()
	}
	if e.cl != nil {
		if e.opts.KeepData || e.failed {
			e.saveMetrics()
		}
		e.cl.stop()
	}
	if e.exec != nil {
		e.exec.close()
	}
	if e.dir != "" {
		if e.opts.KeepData || e.failed {
			e.opts.notef("kept the nodes' data and logs in %s", e.dir)
		} else {
			os.RemoveAll(e.dir)
		}
	}
}

// saveMetrics writes each node's GET /metrics next to its log, for a look
// after the run.
func (e *env) saveMetrics() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, n := range e.cl.nodes {
		c := ax.New(ax.Config{SocketPath: n.Socket, Timeout: 5 * time.Second})
		if r, err := c.Call(ctx, "GET", "/metrics", nil); err == nil {
			_ = os.WriteFile(filepath.Join(e.dir, n.ID+".metrics"), r.Body, 0o644)
		}
		c.CloseIdleConnections()
	}
}

// runID returns a short random id that makes task ids unique per run.
func runID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "axb" + hex.EncodeToString(b[:])
}

// submitItem is one task of a batch: a submit request with an id and a
// handler; the workloads set a delay or a run_at.
func submitItem(id, handler string) axapi.SubmitRequest {
	return axapi.SubmitRequest{ID: id, Handler: handler}
}

// raw encodes a task of a batch.
func raw(it axapi.SubmitRequest) json.RawMessage {
	b, _ := it.Encode()
	return b
}

// rfc3339Milli formats a due time to the millisecond.
const rfc3339Milli = "2006-01-02T15:04:05.000Z07:00"

// ceilMs rounds t up to the next millisecond (a task is kept to the
// millisecond; rounding up keeps the due time we compare against exact).
func ceilMs(t time.Time) int64 {
	ns := t.UnixNano()
	ms := ns / 1e6
	if ns%1e6 != 0 {
		ms++
	}
	return ms
}

// submitBatch sends one batch, again while the cluster answers busy (429,
// 503) or the connection broke; resending is safe since the ids and specs
// are the same.
func submitBatch(ctx context.Context, c *ax.Client, items []json.RawMessage) ([]axapi.BatchResult, error) {
	wait := 50 * time.Millisecond
	for try := 0; ; try++ {
		res, err := postBatch(ctx, c, items)
		if err == nil {
			return res, nil
		}
		var ae *ax.APIError
		busy := errors.As(err, &ae) && (ae.Code == ax.CodeQueueFull || ae.Code == ax.CodeNoLeader || ae.Code == ax.CodeNotReady)
		if !busy && !errors.Is(err, ax.ErrUnavailable) || try >= busyRetries || ctx.Err() != nil {
			return nil, err
		}
		d := wait
		if ae != nil && ae.RetryAfter > 0 {
			d = min(ae.RetryAfter, 2*time.Second)
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(d):
		}
		wait = min(2*wait, time.Second)
	}
}

// errorSamples keeps the first few distinct error messages and counts all.
// It is safe for concurrent use.
type errorSamples struct {
	mu      sync.Mutex
	n       int
	samples []string
}

func (s *errorSamples) add(msg string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	if len(s.samples) >= 5 {
		return
	}
	for _, m := range s.samples {
		if m == msg {
			return
		}
	}
	s.samples = append(s.samples, msg)
}

// Millis is a duration that JSON writes in milliseconds.
type Millis time.Duration

// MarshalJSON writes the duration in milliseconds.
func (m Millis) MarshalJSON() ([]byte, error) { return json.Marshal(ms(time.Duration(m))) }

// postBatch sends one POST /v1/tasks/batch of encoded submit requests and
// returns its results, in the order of items.
func postBatch(ctx context.Context, c *ax.Client, items []json.RawMessage) ([]axapi.BatchResult, error) {
	body, err := json.Marshal(axapi.BatchRequest{Tasks: items})
	if err != nil {
		return nil, err
	}
	r, err := c.Call(ctx, "POST", "/v1/tasks/batch", body)
	if err != nil {
		return nil, err
	}
	var out axapi.BatchResponse
	if err := json.Unmarshal(r.Body, &out); err != nil || out.Results == nil {
		return nil, fmt.Errorf("batch answer of %s is not the API's JSON: %.80s", c.Socket(), r.Body)
	}
	if len(out.Results) != len(items) {
		return nil, fmt.Errorf("batch of %d answered with %d results", len(items), len(out.Results))
	}
	return out.Results, nil
}
